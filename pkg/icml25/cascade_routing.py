"""Chapter: A Unified Approach to Routing and Cascading for LLMs (Dekoninck, Baader, Vechev; ICML 2025).

A *strategy* decides, per query, which models of a pool to run and whose answer to return, trading expected
quality against cost with a multiplier λ:

* **routing** runs one model, ``argmax_m q̂_m − λ ĉ_m`` with ex-ante estimates (the paper's Eq. 1);
* the **threshold cascade** runs models from cheapest up and stops once the post-hoc estimate of the last one
  clears a threshold;
* the **optimal cascade** (Sec. 3) runs the next model only if some longer prefix of the cascade has a better
  trade-off ``q̂(M) − λ ĉ(M)``, where the quality of a set of models ("supermodel") is the expected maximum of
  their qualities, ``q̂(M) = E[max_{m∈M} Q_m]``, with Q Gaussian around the estimates (Eq. 4);
* **cascade routing** (Sec. 4) maximises the same trade-off over *all* supersets of the models already run, and
  runs the cheapest model of the best one; it stops when the best set is the one already run.

Models not yet run carry the uncertainty of their ex-ante estimate, fitted as the covariance of
``q̂_pre − q̂_post`` on a training split; models already run are known (variance 0). Quality–cost curves are
compared by their normalised area (AUC) between the cheapest and the most expensive model's cost.

Everything is vectorised over queries: the expected maxima of every (models-run ⊆ candidate-set) pair are
tabulated once per query (3^K entries, Sec. 5's "supermodel" values), so one λ costs only table look-ups.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, ndtri
from scipy.stats import norm, qmc
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from .core.claims import Claim, Effect, at_least
from .core.config import COUNT, POSITIVE, SEED, Range, make_config, one_of
from .core.seeding import derive_seed, numpy_rng

CHAPTER = "cascade_routing"

# noise level -> (σ of the ex-ante signal, σ of the post-hoc signal, is the per-query cost unknown?)
# The σ's are the paper's RouterBench settings (its repo's scripts/routerbench.py); "exact" is for tests.
NOISE_LEVELS = {"exact": (0.0, 0.0, False), "low": (0.6, 0.3, False), "medium": (1.6, 0.8, False),
                "high": (2.4, 1.2, True)}
STRATEGIES = ("routing", "threshold cascade", "optimal cascade", "cascade routing")

# The real pool at full: causal LMs of one family and four sizes (icml25.core.fullplan's choice); at smoke and ci
# `pool_models` is empty and the real pool is scikit-learn's classifiers on handwritten digits (see run_real_pool).
FULL_POOL = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct",
             "Qwen/Qwen2.5-7B-Instruct")

# Verdict seeds are fresh for contract v2: seeds 0-4 decided the earlier rounds and chose the real pool's members'
# training size (`real_n_fit`, after its headroom precondition failed on one of them); the referee re-ran 5-9.
config = make_config({
    "smoke": {"seeds": [100, 101, 102], "calibration_seeds": [0, 1, 2], "n_queries": 500, "pool_sizes": [3, 5], "noise_levels": ["low", "medium", "high"],
              "n_lambdas": 12, "qmc_samples": 16, "max_depth": 5, "step_ratios": [0.5, 1.0, 2.0],
              "train_fraction": 0.2, "n_domains": 4, "real_members": 5, "real_n_fit": 200,
              "pool_models": [], "lm_queries": 200},
    "ci": {"seeds": list(range(100, 108)), "calibration_seeds": [0, 1, 2, 3, 4], "n_queries": 2500, "pool_sizes": [3, 5],
           "noise_levels": ["low", "medium", "high"], "n_lambdas": 25, "qmc_samples": 32, "max_depth": 5,
           "step_ratios": [0.5, 1.0, 2.0], "train_fraction": 0.2, "n_domains": 4, "real_members": 5,
           "real_n_fit": 200, "pool_models": [], "lm_queries": 200},
    "full": {"seeds": list(range(100, 132)), "calibration_seeds": [0, 1, 2, 3, 4], "n_queries": 10000, "pool_sizes": [3, 5, 7],
             "noise_levels": ["low", "medium", "high"], "n_lambdas": 60, "qmc_samples": 128, "max_depth": 5,
             "step_ratios": [0.25, 0.5, 1.0, 2.0, 4.0], "train_fraction": 0.2, "n_domains": 4, "real_members": 11,
             "real_n_fit": 200, "pool_models": list(FULL_POOL), "lm_queries": 8000},
},
    seeds=SEED, calibration_seeds=SEED, n_queries=COUNT, pool_sizes=Range(ge=2), noise_levels=one_of(*NOISE_LEVELS), n_lambdas=COUNT,
    qmc_samples=COUNT, max_depth=COUNT, step_ratios=POSITIVE, train_fraction=Range(gt=0, lt=1), n_domains=COUNT,
    real_members=Range(ge=2), real_n_fit=COUNT, lm_queries=Range(ge=10))

# The cells every claim is decided on: the paper's 3- and 5-model pools (its 11-model pool is not simulated).
CLAIM_POOL_SIZES = (3, 5)
#: the smallest gain of cascade routing over the better baseline in the paper's Table 1 among the 3/5-model,
#: low/medium-noise cells (3 models, medium noise: 76.6 vs 76.2), in AUC×100 points
PAPER_SMALLEST_GAIN = 0.4
#: non-inferiority margin for "at least as good", AUC×100 points, declared before any run
NON_INFERIORITY_MARGIN = 0.5


def cell_key(n_models: int, noise: str) -> str:
    return f"{n_models}_{noise}"


_ROUTING_LEARNS = at_least(
    "routing_beats_interpolation", "routing_over_interpolation", 0.0,
    "routing's AUC is at least that of mixing the cheapest and the largest model blindly (the estimators "
    "carry information; worst cell and seed, AUC×100)")


def _cells_example(value: float, spread: float, keys) -> dict:
    return {f"gain_{k}": [value - spread, value, value + spread] for k in keys}


_LOW_MEDIUM = [cell_key(k, n) for k in CLAIM_POOL_SIZES for n in ("low", "medium")]
_ALL_NOISE = [cell_key(k, n) for k in CLAIM_POOL_SIZES for n in ("low", "medium", "high")]
_OK = {"routing_over_interpolation": [5.0, 6.0, 4.0],
       "threshold_over_interpolation": [5.0, 6.0, 4.0]}

BEATS_BOTH = Claim(
    chapter=CHAPTER, id="beats_both",
    paper_statement="Cascade routing beats both routing and the optimal cascade (RouterBench, 3/5/11 models, "
                    "low and medium noise)",
    paper_value="AUC×100, 5 models, low noise: 84.3 vs routing 81.2, optimal cascade 83.1",
    criterion="In every 3- and 5-model cell at low and medium noise, the per-seed gain (cascade routing's AUC − "
              "the larger of routing's and the optimal cascade's, same pool and estimators) has a 95% paired t "
              f"interval above 0; refuted where it lies wholly below {PAPER_SMALLEST_GAIN} (the paper's smallest "
              "gain in these cells)",
    effects=[Effect(f"gain_{k}", f"gain_{k}", min_effect=PAPER_SMALLEST_GAIN) for k in _LOW_MEDIUM],
    preconditions=[_ROUTING_LEARNS],
    examples=({**_OK, **_cells_example(1.2, 0.2, _LOW_MEDIUM)},
              {**_OK, **_cells_example(0.0, 0.05, _LOW_MEDIUM)}),
)
OPTIMAL_CASCADE = Claim(
    chapter=CHAPTER, id="optimal_cascade",
    paper_statement="The optimal cascade (expected-max supermodel rule) is at least as good as the threshold cascade",
    paper_value="AUC×100, 5 models: 83.1/75.2/70.2 vs 82.3/73.0/69.5 (low/medium/high noise)",
    criterion="Non-inferiority in every 3- and 5-model cell at every noise level: the 95% paired t interval of "
              "the per-seed difference (optimal cascade − threshold cascade, AUC×100) lies above "
              f"−{NON_INFERIORITY_MARGIN}; refuted where it lies wholly below 0",
    effects=[Effect(f"opt_minus_thr_{k}", f"opt_minus_thr_{k}", null=-NON_INFERIORITY_MARGIN, min_effect=0.0)
             for k in _ALL_NOISE],
    preconditions=[at_least("threshold_cascade_beats_interpolation", "threshold_over_interpolation", 0.0,
                            "the threshold cascade's AUC is at least that of blindly mixing the cheapest and the "
                            "largest model (worst cell and seed, AUC×100)")],
    examples=({**_OK, **{f"opt_minus_thr_{k}": [0.5, 0.8, 1.1] for k in _ALL_NOISE}},
              {**_OK, **{f"opt_minus_thr_{k}": [-1.5, -1.2, -1.8] for k in _ALL_NOISE}}),
)
ESTIMATORS_MATTER = Claim(
    chapter=CHAPTER, id="estimators_matter",
    paper_statement="Quality estimators are decisive: cascade routing's advantage shrinks as estimator noise grows",
    paper_value="gain over the best baseline, AUC×100, 3/5/11 models: 1.3/1.2/2.7 at low noise, 0.5/1.4/1.7 at high",
    criterion="Per seed, the gain of cascade routing over the better of routing and the optimal cascade at low "
              "noise minus that at high noise, averaged over the 3- and 5-model pools, has a 95% paired t interval "
              "above 0; refuted where it lies wholly below 0.25 (half the paper's mean difference over its pools)",
    effects=[Effect("low_minus_high", "low_minus_high", min_effect=0.25)],
    preconditions=[_ROUTING_LEARNS],
    examples=({**_OK, "low_minus_high": [0.8, 1.0, 1.2]}, {**_OK, "low_minus_high": [-0.1, 0.05, 0.0]}),
)
REAL_POOL_BEATS_BOTH = Claim(
    chapter=CHAPTER, id="real_pool_beats_both",
    paper_statement="Cascade routing beats both routing and the optimal cascade (the headline, here on actual models)",
    paper_value="AUC×100, RouterBench 5 models, low noise: 84.3 vs routing 81.2, optimal cascade 83.1",
    criterion="On the real pool (scikit-learn digit classifiers refitted from every seed, learned quality "
              "estimators), the per-seed gain of cascade routing over the better of routing and the optimal cascade "
              f"has a 95% paired t interval above 0; refuted where it lies wholly below {PAPER_SMALLEST_GAIN}. "
              "Decidable only where the positive control shows that this pool can show the paper's gain at all",
    effects=[Effect("real_gain", "real_gain", min_effect=PAPER_SMALLEST_GAIN)],
    preconditions=[
        at_least("best_member_learns", "best_member_accuracy", 0.5,
                 "the pool's best member is right on at least half the held-out problems (worst seed)"),
        at_least("pool_has_headroom", "pool_headroom", 0.02,
                 "some member is right where the best one is wrong: accuracy of 'any member right' − best "
                 "member's >= 0.02 (worst seed)"),
        _ROUTING_LEARNS,
        at_least("positive_control_reaches", lambda m: float(np.mean(m["positive_control_gain"])),
                 PAPER_SMALLEST_GAIN,
                 "positive control: with the paper's own low-noise estimators on the same members' true "
                 f"correctness and costs, cascade routing's gain reaches the paper's smallest, {PAPER_SMALLEST_GAIN} "
                 "(seed mean): the pool can show the effect"),
    ],
    examples=({"real_gain": [1.0, 1.5, 0.8], "best_member_accuracy": [0.9, 0.9, 0.9],
               "pool_headroom": [0.05, 0.05, 0.05], "routing_over_interpolation": [3.0, 3.0, 3.0],
               "positive_control_gain": [1.0, 1.2, 0.9]},
              {"real_gain": [0.05, -0.1, 0.0], "best_member_accuracy": [0.9, 0.9, 0.9],
               "pool_headroom": [0.05, 0.05, 0.05], "routing_over_interpolation": [3.0, 3.0, 3.0],
               "positive_control_gain": [1.0, 1.2, 0.9]}),
)
CLAIMS = (BEATS_BOTH, OPTIMAL_CASCADE, ESTIMATORS_MATTER, REAL_POOL_BEATS_BOTH)


# --------------------------------------------------------------------------------------------------------------
# Expected maximum of a Gaussian vector (the supermodel's quality, Eq. 4)


def _check_finite(name: str, x: np.ndarray) -> None:
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")


def expected_max_two(mu1, mu2, var1, var2, cov12=0.0):
    """Clark's closed form for E[max(X1, X2)] of a bivariate Gaussian:
    ``μ1 Φ(a) + μ2 Φ(−a) + θ φ(a)`` with ``θ² = σ1² + σ2² − 2 cov`` and ``a = (μ1 − μ2)/θ``."""
    mu1, mu2 = np.asarray(mu1, float), np.asarray(mu2, float)
    theta = np.sqrt(np.maximum(var1 + var2 - 2 * cov12, 0.0))
    if np.all(theta == 0):
        return np.maximum(mu1, mu2)
    a = (mu1 - mu2) / np.where(theta > 0, theta, 1.0)
    out = mu1 * norm.cdf(a) + mu2 * norm.cdf(-a) + theta * norm.pdf(a)
    return np.where(theta > 0, out, np.maximum(mu1, mu2))


def gaussian_samples(n_dims: int, n_samples: int, seed: int = 0) -> np.ndarray:
    """Standard-normal quasi-Monte Carlo points (scrambled Sobol, mapped through Φ⁻¹), made antithetic:
    the second half is the negated first half, so every coordinate's sample mean is exactly 0."""
    if n_samples < 2 or n_samples % 2:
        raise ValueError(f"n_samples must be an even number >= 2, got {n_samples}")
    u = qmc.Sobol(n_dims, scramble=True, seed=derive_seed(seed, "sobol", n_dims)).random(n_samples // 2)
    z = ndtri(np.clip(u, 1e-12, 1 - 1e-12))
    return np.concatenate([z, -z])


def _sqrt_psd(cov: np.ndarray) -> np.ndarray:
    """A matrix L with L Lᵀ = cov, for any positive semi-definite cov (eigendecomposition, negatives clipped)."""
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    return v * np.sqrt(np.clip(w, 0, None))


def expected_max(mu, cov, n_samples: int | None = None, seed: int = 0) -> np.ndarray:
    """E[max_k X_k] for X ~ N(mu, cov); `mu` may be batched (..., K) with one shared (K, K) `cov`.

    K = 1: the mean. K = 2 and no `n_samples`: Clark's closed form. Otherwise quasi-Monte Carlo with
    antithetic scrambled-Sobol points (default 128), which never falls below ``max(mu)`` (Jensen, since
    the sample mean of the noise is exactly 0)."""
    mu = np.asarray(mu, float)
    cov = np.atleast_2d(np.asarray(cov, float))
    k = mu.shape[-1]
    if cov.shape != (k, k):
        raise ValueError(f"cov has shape {cov.shape}, expected ({k}, {k}) to match mu's last axis")
    _check_finite("mu", mu)
    _check_finite("cov", cov)
    if k == 1:
        return mu[..., 0]
    if k == 2 and n_samples is None:
        return expected_max_two(mu[..., 0], mu[..., 1], cov[0, 0], cov[1, 1], cov[0, 1])
    x = gaussian_samples(k, n_samples or 128, seed) @ _sqrt_psd(cov).T  # (S, K)
    return (mu[..., None, :] + x).max(-1).mean(-1)


# --------------------------------------------------------------------------------------------------------------
# A synthetic RouterBench: queries, models, and noisy estimators


@dataclass(frozen=True)
class Pool:
    """True per-query outcomes of K models ordered by cost: `quality` (N, K) in {0, 1}, `cost` (N, K)."""

    quality: np.ndarray
    cost: np.ndarray
    domain: np.ndarray


def make_pool(n_models: int, n_queries: int, seed: int, n_domains: int = 4) -> Pool:
    """K models with geometric costs 3^k (the largest costs 1 per unit length) and abilities that grow with
    size plus a per-domain specialisation; a query has a domain, a difficulty θ and a length. A model answers
    correctly with probability σ(3(a_{k,domain} − θ)); it costs its base cost times the query's length."""
    if n_models < 1 or n_queries < 2:
        raise ValueError(f"need n_models >= 1 and n_queries >= 2, got {n_models}, {n_queries}")
    rng = numpy_rng(seed, CHAPTER, "pool", n_models, n_queries)
    base_cost = 3.0 ** (np.arange(n_models) - (n_models - 1))
    ability = np.linspace(-0.75, 1.0, n_models)[:, None] + rng.normal(0, 0.6, (n_models, n_domains))
    domain = rng.integers(n_domains, size=n_queries)
    theta = rng.normal(0, 1, n_queries)
    p = expit(3 * (ability[:, domain].T - theta[:, None]))
    quality = (rng.random(p.shape) < p).astype(float)
    length = rng.lognormal(0, 0.3, n_queries)
    return Pool(quality, base_cost[None, :] * length[:, None], domain)


@dataclass(frozen=True)
class Estimates:
    """What a strategy sees for N queries and K models: ex-ante quality `pre`, post-hoc quality `post` (only
    read once the model has run), estimated cost `cost`, and `cov`, the (K, K) covariance of pre − post."""

    pre: np.ndarray
    post: np.ndarray
    cost: np.ndarray
    cov: np.ndarray


def _calibrate(signal: np.ndarray, quality: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Per-model linear regression of the true quality on the noisy signal, fitted on the training rows."""
    out = np.empty_like(signal)
    for k in range(signal.shape[1]):
        s, q = signal[train, k], quality[train, k]
        var = s.var()
        b = ((s - s.mean()) * (q - q.mean())).mean() / var if var > 0 else 0.0
        out[:, k] = q.mean() + b * (signal[:, k] - s.mean())
    return out


def make_estimates(pool: Pool, noise: str | tuple, seed: int, train_fraction: float = 0.2, with_train: bool = False):
    """The paper's RouterBench estimators: true quality plus Gaussian noise (σ_pre before a model runs, σ_post
    after), calibrated per model by linear regression on a training split. Returns the test split's pool and
    estimates (and, `with_train`, the training split's too, on which λ is fitted). At "high" noise the
    per-query cost is unknown and estimated by the model's mean cost."""
    if isinstance(noise, str):
        if noise not in NOISE_LEVELS:
            raise ValueError(f"unknown noise level {noise!r}; valid: {', '.join(NOISE_LEVELS)}")
        noise = NOISE_LEVELS[noise]
    sd_pre, sd_post, cost_unknown = noise
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    _check_finite("pool.quality", pool.quality)
    rng = numpy_rng(seed, CHAPTER, "estimates", sd_pre, sd_post)
    q = pool.quality
    train = rng.random(len(q)) < train_fraction
    pre = _calibrate(q + sd_pre * rng.normal(size=q.shape), q, train)
    post = _calibrate(q + sd_post * rng.normal(size=q.shape), q, train)
    cost = np.broadcast_to(pool.cost[train].mean(0), pool.cost.shape) if cost_unknown else pool.cost
    cov = np.atleast_2d(np.cov((pre - post)[train].T))
    split = lambda rows: (Pool(q[rows], pool.cost[rows], pool.domain[rows]),
                          Estimates(pre[rows], post[rows], np.array(cost[rows]), cov))
    return (split(~train), split(train)) if with_train else split(~train)


# --------------------------------------------------------------------------------------------------------------
# Supermodel table: E[max] of every (run set S ⊆ candidate set T)


def config_index(run: int, cand: int, n_models: int) -> int:
    """Ternary code of a (run ⊆ candidate) pair of bitmasks: digit 0 not in T, 1 in T and run, 2 in T not run."""
    return sum((1 if run >> k & 1 else 2 if cand >> k & 1 else 0) * 3 ** k for k in range(n_models))


def supermodel_table(est: Estimates, n_samples: int = 32, seed: int = 0, max_depth: int | None = None
                     ) -> np.ndarray:
    """(3^K, N) table of q̂(T | S) = E[max_{m∈T} Q_m] where Q_m is the post-hoc estimate for run models (known)
    and N(q̂_pre, Σ) jointly for the others (Eq. 4). One shared set of QMC points makes every row a sample
    average over the same draws, so the table is exactly monotone and submodular in T (which pruning uses).
    Rows of sets larger than `max_depth` are never read by a strategy of that depth and stay −∞ (for the
    eleven-member pool this skips most of the 3^11 rows)."""
    n, k = est.pre.shape
    x = gaussian_samples(k, n_samples, seed) @ _sqrt_psd(est.cov).T  # (S, K) correlated noise of unrun models
    table = np.full((3 ** k, n), -np.inf, dtype=np.float32 if k > 8 else float)
    for code in range(3 ** k):
        digits = [(code // 3 ** j) % 3 for j in range(k)]
        run = [j for j in range(k) if digits[j] == 1]
        unrun = [j for j in range(k) if digits[j] == 2]
        if not run and not unrun or (max_depth is not None and len(run) + len(unrun) > max_depth):
            continue
        best_run = est.post[:, run].max(1) if run else np.full(n, -np.inf)
        if not unrun:
            table[code] = best_run
            continue
        draws = (est.pre[:, None, unrun] + x[None, :, unrun]).max(-1)  # (N, S)
        table[code] = np.maximum(draws, best_run[:, None]).mean(1)
    return table


# --------------------------------------------------------------------------------------------------------------
# Strategies. Each returns (ran, answer): the (N, K) mask of models run and the index of the returned model.


@dataclass(frozen=True)
class Outcome:
    ran: np.ndarray
    answer: np.ndarray

    def cost(self, pool: Pool) -> float:
        return float((pool.cost * self.ran).sum(1).mean())

    def quality(self, pool: Pool) -> float:
        return float(pool.quality[np.arange(len(self.answer)), self.answer].mean())


def routing(est: Estimates, lam: float) -> Outcome:
    """Eq. 1: run the single model maximising q̂_pre − λ ĉ (ties: the first, i.e. cheaper, one)."""
    answer = np.argmax(est.pre - lam * est.cost, axis=1)
    ran = np.zeros(est.pre.shape, bool)
    ran[np.arange(len(answer)), answer] = True
    return Outcome(ran, answer)


def per_step(value, n_models: int) -> np.ndarray:
    """A per-step parameter (λ_j or τ_j, j = number of models already run) as an array of length `n_models`: a
    scalar is the same at every step."""
    v = np.atleast_1d(np.asarray(value, float))
    if v.size == 1:
        return np.full(n_models, v[0])
    if v.size < n_models:
        raise ValueError(f"a per-step parameter needs {n_models} values, got {v.size}")
    return v[:n_models]


def threshold_cascade(est: Estimates, tau) -> Outcome:
    """Baseline cascade: run models cheapest first; stop after model j if q̂_post,j ≥ τ_j (one threshold per
    step, or one `tau` for all); return the last one."""
    n, k = est.post.shape
    good = est.post >= per_step(tau, k)[None, :]
    good[:, -1] = True
    last = np.argmax(good, axis=1)
    return Outcome(np.arange(k)[None, :] <= last[:, None], last)


def _candidates(run: int, n_models: int, max_depth: int, prefix_only: bool) -> list[int]:
    """Candidate sets T ⊇ S (bitmasks), S itself first, so ties prefer stopping."""
    if prefix_only:
        cands = [(1 << i) - 1 for i in range(1, n_models + 1) if ((1 << i) - 1) & run == run]
    else:
        free = [j for j in range(n_models) if not run >> j & 1]
        cands = [run | sum(1 << j for j in extra) for r in range(len(free) + 1)
                 for extra in itertools.combinations(free, r)]
    cands = [c for c in cands if c and bin(c).count("1") <= max_depth]
    return sorted(cands, key=lambda c: c != run)


def cascade_routing(est: Estimates, table: np.ndarray, lam, max_depth: int | None = None,
                    prefix_only: bool = False, prune: bool = True) -> Outcome:
    """Sec. 4: with S the models run so far, pick T ⊇ S (|T| ≤ max_depth) maximising q̂(T|S) − λ_j ĉ(T), where
    λ_j is the multiplier of step j = |S| (`lam`: one per step, as the official code fits them, or one for all);
    stop if T = S, else run the cheapest model of T \\ S. Returns the run model with the best post-hoc
    estimate. `prefix_only=True` restricts T to prefixes of the cost order: the optimal cascade (Sec. 3).
    Pruning drops model m from every candidate when adding it to S gains less than λ ĉ_m (exact, because
    the table is submodular and T \\ {m} is then always a better candidate; not so among prefixes, where
    T \\ {m} is usually no prefix, so the optimal cascade never prunes)."""
    n, k = est.pre.shape
    max_depth = k if max_depth is None else max_depth
    if max_depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {max_depth}")
    lams = per_step(lam, k)
    run = np.zeros(n, dtype=np.int64)
    active = np.ones(n, bool)
    for _ in range(k):
        if not active.any():
            break
        for s in np.unique(run[active]):
            idx = np.flatnonzero(active & (run == s))
            lam = lams[bin(int(s)).count("1")]
            cands = _candidates(int(s), k, max_depth, prefix_only)
            masks = np.array([[c >> j & 1 for j in range(k)] for c in cands], float)  # (C, K)
            value = (table[[config_index(int(s), c, k) for c in cands]][:, idx]
                     - lam * masks @ est.cost[idx].T)  # (C, n_idx)
            if prune and s and not prefix_only:
                base = table[config_index(int(s), int(s), k), idx]
                for j in range(k):
                    if not s >> j & 1:
                        gain = table[config_index(int(s), int(s) | 1 << j, k), idx] - base
                        pruned = gain < lam * est.cost[idx, j]
                        value[(masks[:, j] == 1)[:, None] & pruned[None, :]] = -np.inf
            best = np.array(cands)[np.argmax(value, axis=0)]
            stop = best == s
            active[idx[stop]] = False
            new = best[~stop] & ~s
            nxt = np.array([(int(m) & -int(m)).bit_length() - 1 for m in new], dtype=np.int64)
            run[idx[~stop]] = s | (1 << nxt)
    ran = (run[:, None] >> np.arange(k)[None, :]) & 1 == 1
    answer = np.argmax(np.where(ran, est.post, -np.inf), axis=1)
    return Outcome(ran, answer)


def optimal_cascade(est: Estimates, table: np.ndarray, lam: float) -> Outcome:
    """Sec. 3: continue the cascade while some longer prefix has a better trade-off than the current one."""
    return cascade_routing(est, table, lam, prefix_only=True)


# --------------------------------------------------------------------------------------------------------------
# Budgets and curves


def routing_for_budget(est: Estimates, budget: float, iters: int = 60) -> tuple[float, float, float, float]:
    """The paper's budget form of routing: binary-search λ for the two neighbouring strategies whose expected
    cost brackets `budget`, and mix them with probability γ so the expected cost equals the budget exactly.
    Returns (λ_cheap, λ_expensive, γ, expected cost); γ is the probability of the expensive one. A budget above
    what λ = 0 spends is not used up: routing then simply takes argmax q̂ (γ = 0)."""
    cheapest = est.cost.min(1).mean()
    if budget < cheapest - 1e-12:
        raise ValueError(f"budget {budget:.4g} is below the cheapest model's expected cost {cheapest:.4g}")

    def cost_at(lam):
        o = routing(est, lam)
        return float((est.cost * o.ran).sum(1).mean())

    lo, hi = 0.0, 1.0  # lo: expensive side (cost >= budget), hi: cheap side (cost <= budget)
    if cost_at(0.0) <= budget:
        c = cost_at(0.0)
        return 0.0, 0.0, 0.0, c
    while cost_at(hi) > budget:
        hi *= 2
    for _ in range(iters):
        mid = (lo + hi) / 2
        (hi, lo) = (mid, lo) if cost_at(mid) <= budget else (hi, mid)
    c_cheap, c_exp = cost_at(hi), cost_at(lo)
    gamma = 0.0 if c_exp == c_cheap else (budget - c_cheap) / (c_exp - c_cheap)
    gamma = float(np.clip(gamma, 0.0, 1.0))
    return hi, lo, gamma, gamma * c_exp + (1 - gamma) * c_cheap


def upper_envelope(cost, quality) -> tuple[np.ndarray, np.ndarray]:
    """The best quality reachable at each cost by mixing strategies (γ-mixing makes every chord reachable): the
    upper concave hull of the (cost, quality) points, cut at its highest quality."""
    cost, quality = np.asarray(cost, float), np.asarray(quality, float)
    if cost.shape != quality.shape or cost.ndim != 1 or len(cost) == 0:
        raise ValueError(f"cost and quality must be equal-length 1-d arrays, got {cost.shape}, {quality.shape}")
    _check_finite("quality", quality)
    _check_finite("cost", cost)
    order = np.lexsort((-quality, cost))
    hull: list[tuple[float, float]] = []
    for c, q in zip(cost[order], quality[order]):
        if hull and c == hull[-1][0]:
            continue
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (q - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (c - hull[-2][0])) >= 0:
            hull.pop()
        hull.append((c, q))
    h = np.array(hull)
    top = int(np.argmax(h[:, 1]))
    return h[: top + 1, 0], h[: top + 1, 1]


def quality_cost_auc(cost, quality, c_min: float, c_max: float) -> float:
    """Area under the envelope between `c_min` (the cheapest model's cost) and `c_max` (the most expensive
    model's), divided by c_max − c_min: the paper's AUC. Flat after the envelope's last point."""
    if not c_max > c_min:
        raise ValueError(f"need c_max > c_min, got {c_min}, {c_max}")
    ec, eq = upper_envelope(cost, quality)
    if ec[0] > c_min + 1e-9 * max(1.0, abs(c_min)):
        raise ValueError(f"the curve starts at cost {ec[0]:.4g}, above c_min {c_min:.4g}")
    grid = np.unique(np.concatenate([[c_min, c_max], ec[(ec > c_min) & (ec < c_max)]]))
    q = np.interp(grid, ec, eq)
    return float(np.trapezoid(q, grid) / (c_max - c_min))


def remove_dominated(cost, quality) -> np.ndarray:
    """Indices of the models worth keeping: those on the upper concave hull of (mean cost, mean quality), up to
    the best one. A model below the chord of two others is beaten by mixing them."""
    cost, quality = np.asarray(cost, float), np.asarray(quality, float)
    ec, eq = upper_envelope(cost, quality)
    return np.array([i for i in range(len(cost)) if np.any((ec == cost[i]) & (eq == quality[i]))], dtype=int)


def lambda_grid(n: int) -> np.ndarray:
    """λ = 0 (quality only), a geometric sweep, and a huge λ (cheapest only)."""
    return np.concatenate([[0.0], np.geomspace(1e-2, 1e2, max(n - 2, 1)), [1e9]])


def step_family(base, n_models: int, ratios) -> list[np.ndarray]:
    """Per-step parameter vectors x_j = x_0 · r^j for every starting value x_0 in `base` and ratio r: a one-
    parameter stand-in for the official code's search over per-step λ (r = 1 is the constant λ)."""
    steps = np.arange(n_models)
    return [x0 * float(r) ** steps for x0 in base for r in ratios]


def strategy_settings(est: Estimates, n_lambdas: int, step_ratios) -> dict[str, list]:
    """Every strategy's settings: λ for routing (one step), per-step λ vectors for the optimal cascade and
    cascade routing, per-step thresholds τ_j = 1 − λ_j for the threshold cascade (the official baseline
    continues while q̂_j < 1 − λ_j), starting from quantiles of the post-hoc estimates."""
    k = est.pre.shape[1]
    lams = lambda_grid(n_lambdas)
    taus = np.concatenate([[-np.inf], np.quantile(est.post, np.linspace(0, 1, n_lambdas - 1))])
    steps = step_family(lams, k, step_ratios)
    return {"routing": list(lams), "threshold cascade": [1 - v for v in step_family(1 - taus, k, step_ratios)],
            "optimal cascade": steps, "cascade routing": steps}


def run_strategy(name: str, est: Estimates, table: np.ndarray, setting, max_depth: int) -> Outcome:
    if name == "routing":
        return routing(est, setting)
    if name == "threshold cascade":
        return threshold_cascade(est, setting)
    if name == "optimal cascade":
        return optimal_cascade(est, table, setting)
    return cascade_routing(est, table, setting, max_depth)


def curves(pool: Pool, est: Estimates, table: np.ndarray, n_lambdas: int, max_depth: int, step_ratios=(1.0,),
           fit: tuple[Pool, Estimates, np.ndarray] | None = None) -> dict:
    """(costs, qualities) of every strategy over its settings (`strategy_settings`). With `fit` = (pool,
    estimates, table) of a training split, the settings are chosen there as the official code fits λ: only
    those on the training split's quality–cost envelope are run on the test split."""
    out = {}
    for name, settings in strategy_settings(est if fit is None else fit[1], n_lambdas, step_ratios).items():
        if fit is not None:
            f_pool, f_est, f_table = fit
            outs = [run_strategy(name, f_est, f_table, x, max_depth) for x in settings]
            keep = remove_dominated([o.cost(f_pool) for o in outs], [o.quality(f_pool) for o in outs])
            settings = [settings[i] for i in keep] + [settings[0], settings[-1]]  # both ends of the sweep
        outs = [run_strategy(name, est, table, x, max_depth) for x in settings]
        out[name] = (np.array([o.cost(pool) for o in outs]), np.array([o.quality(pool) for o in outs]))
    return out


def evaluate(test: tuple[Pool, Estimates], fit: tuple[Pool, Estimates], seed: int, cfg,
             common_start: bool = False) -> dict:
    """Every strategy's curve and AUC×100 on one test split, its settings (λ per step, thresholds) fitted on the
    `fit` split, plus each model's mean cost and quality. The AUC runs from the cheapest model's cost, or with
    `common_start` from the first cost every strategy reaches (when costs are estimated, a sweep's cheapest end
    may be a model that is cheaper on average but not on this split)."""
    (pool, est), (f_pool, f_est) = test, fit
    table = supermodel_table(est, cfg.qmc_samples, seed, cfg.max_depth)
    f_table = supermodel_table(f_est, cfg.qmc_samples, seed, cfg.max_depth)
    cv = curves(pool, est, table, cfg.n_lambdas, cfg.max_depth, cfg.step_ratios, fit=(f_pool, f_est, f_table))
    mean_cost = pool.cost.mean(0)
    c_min = max(mean_cost.min(), *(c.min() for c, _ in cv.values())) if common_start else mean_cost.min()
    auc = {name: 100 * quality_cost_auc(c, q, c_min, mean_cost.max()) for name, (c, q) in cv.items()}
    quality = pool.quality.mean(0)
    ends = [int(np.argmin(mean_cost)), int(np.argmax(mean_cost))]
    blind = 100 * quality_cost_auc(mean_cost[ends], quality[ends], c_min, mean_cost.max())
    return {"seed": seed, "auc": auc, "curves": cv, "model_cost": mean_cost, "model_quality": quality,
            "interpolation_auc": blind}


def benchmark_cell(n_models: int, noise: str, seed: int, cfg) -> dict:
    """One (pool size, noise, seed) cell of the paper's Table 1: every strategy's curve and AUC×100."""
    full = make_pool(n_models, cfg.n_queries, seed, cfg.n_domains)
    test, fit = make_estimates(full, noise, seed, cfg.train_fraction, with_train=True)
    return {"n_models": n_models, "noise": noise, **evaluate(test, fit, seed, cfg)}


def run_benchmark(cfg) -> list[dict]:
    """Every cell of cfg.pool_sizes × cfg.noise_levels × cfg.seeds."""
    return [benchmark_cell(k, noise, s, cfg) for k in cfg.pool_sizes for noise in cfg.noise_levels
            for s in cfg.seeds]


def auc_table(cells: list[dict]) -> dict[tuple[int, str], dict[str, tuple[float, float]]]:
    """(pool size, noise) -> strategy -> (mean, sd) of AUC×100 over seeds."""
    out: dict = {}
    for key in sorted({(c["n_models"], c["noise"]) for c in cells}, key=lambda t: (t[0], list(NOISE_LEVELS).index(t[1]))):
        group = [c for c in cells if (c["n_models"], c["noise"]) == key]
        out[key] = mean_auc(group)
    return out


def mean_auc(cells: list[dict]) -> dict[str, tuple[float, float]]:
    """Strategy -> (mean, sd) of AUC×100 over the cells (seeds) of one setting."""
    return {s: (float(np.mean([c["auc"][s] for c in cells])), float(np.std([c["auc"][s] for c in cells])))
            for s in STRATEGIES}


def cell_gain(cell: dict) -> float:
    """One cell's gain: cascade routing's AUC minus the larger of routing's and the optimal cascade's."""
    a = cell["auc"]
    return a["cascade routing"] - max(a["routing"], a["optimal cascade"])


def claim_measurements(cells: list[dict]) -> dict[str, list[float]]:
    """The per-seed values the claims are decided on (one entry per seed, in seed order): the gain of every
    3/5-model cell, the optimal − threshold cascade difference, the low − high noise gain difference, and the
    preconditions' worst low/medium-noise cell per seed."""
    seeds = sorted({c["seed"] for c in cells})
    by = {(c["n_models"], c["noise"], c["seed"]): c for c in cells}
    keys = sorted({(c["n_models"], c["noise"]) for c in cells if c["n_models"] in CLAIM_POOL_SIZES})
    out: dict[str, list[float]] = {}
    for k, noise in keys:
        cs = [by[(k, noise, s)] for s in seeds]
        out[f"gain_{cell_key(k, noise)}"] = [cell_gain(c) for c in cs]
        out[f"opt_minus_thr_{cell_key(k, noise)}"] = [c["auc"]["optimal cascade"] - c["auc"]["threshold cascade"]
                                                      for c in cs]
    if all((k, n) in keys for k in CLAIM_POOL_SIZES for n in ("low", "high")):
        out["low_minus_high"] = [float(np.mean([cell_gain(by[(k, "low", s)]) - cell_gain(by[(k, "high", s)])
                                                for k in CLAIM_POOL_SIZES])) for s in seeds]
    low_med = [c for c in cells if c["noise"] in ("low", "medium")]
    per_seed = lambda f, group: [min(f(c) for c in group if c["seed"] == s) for s in seeds]
    out["routing_over_interpolation"] = per_seed(lambda c: c["auc"]["routing"] - c["interpolation_auc"], low_med)
    out["threshold_over_interpolation"] = per_seed(
        lambda c: c["auc"]["threshold cascade"] - c["interpolation_auc"], low_med)
    return out


# --------------------------------------------------------------------------------------------------------------
# The real pool: classifiers of different size trained from each seed, answering held-out handwritten digits

# Member labels name the model and the image it reads (8×8 pixels or a 4×4 average-pooled copy); five at ci,
# eleven at full, as the paper's largest RouterBench pool; run_real_pool puts them in cost order. Every member is
# refitted for every seed on that seed's training images (and the MLPs from that seed's initialisation), so a seed
# resamples the models, not only the split.
_POOLED = "4×4"
REAL_MEMBERS = {
    5: ("naive Bayes 4×4", "logistic 4×4", "logistic 8×8", "MLP-32 8×8", "RBF SVM 8×8"),
    11: ("naive Bayes 4×4", "logistic 4×4", "MLP-8 4×4", "naive Bayes 8×8", "logistic 8×8", "MLP-32 8×8",
         "MLP-128 8×8", "kNN-5 8×8", "RBF SVM 8×8", "MLP-64×64 8×8", "kNN-1 8×8"),
}


def _member(label: str, seed: int):
    """A fresh scikit-learn classifier for a member label (the MLPs are seeded)."""
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC

    name = label.split(" ")[0]
    if name == "naive":
        return GaussianNB()
    if name == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))
    if name.startswith("MLP-"):
        hidden = tuple(int(h) for h in name[4:].split("×"))
        return make_pipeline(StandardScaler(), MLPClassifier(hidden, max_iter=300, random_state=seed))
    if name.startswith("kNN-"):
        return KNeighborsClassifier(int(name[4:]))
    if name == "RBF":
        return make_pipeline(StandardScaler(), SVC(C=10.0, random_state=seed))
    raise ValueError(f"unknown member {label!r}")


def member_flops(label: str, model, n_features: int, n_classes: int = 10) -> float:
    """Multiply-adds ×2 (and the 64 adds of 4×4 pooling) of one prediction: a linear map is 2·d·C, an MLP its
    layers' 2·d_in·d_out, naive Bayes 4·d·C, a kNN 3·d per stored image, an RBF SVM 3·d per support vector plus
    its one-vs-one sums."""
    pooling = 64.0 if _POOLED in label else 0.0
    est = model[-1] if hasattr(model, "steps") else model
    name = label.split(" ")[0]
    if name == "naive":
        core = 4.0 * n_features * n_classes
    elif name == "logistic":
        core = 2.0 * n_features * n_classes
    elif name.startswith("MLP-"):
        core = float(sum(2 * w.size for w in est.coefs_))
    elif name.startswith("kNN-"):
        core = 3.0 * n_features * est.n_samples_fit_
    else:
        core = 3.0 * n_features * len(est.support_) + 2.0 * len(est.support_) * (n_classes - 1)
    return pooling + core


def pool_pixels(x: np.ndarray) -> np.ndarray:
    """8×8 digit images (N, 64) averaged over 2×2 blocks: (N, 16)."""
    return x.reshape(-1, 4, 2, 4, 2).mean((2, 4)).reshape(-1, 16)


def confidence(model, x: np.ndarray) -> np.ndarray:
    """A member's post-hoc signal on its own answer: the gap between its two highest class scores
    (probabilities where it has them, else decision values)."""
    scores = model.predict_proba(x) if hasattr(model, "predict_proba") and not _is_svm(model) else \
        model.decision_function(x)
    top = np.sort(scores, axis=1)
    return top[:, -1] - top[:, -2]


def _is_svm(model) -> bool:
    return type(model[-1] if hasattr(model, "steps") else model).__name__ == "SVC"


@dataclass(frozen=True)
class RealRuns:
    """What running every member on every held-out image gave: `correct` (N, K) in {0, 1}, `flops` (N, K) of a
    prediction, `confidence` (N, K) the member's post-hoc signal, `context` (N, F) what is known before any member
    runs (the image's principal components), and the member labels."""

    correct: np.ndarray
    flops: np.ndarray
    confidence: np.ndarray
    context: np.ndarray
    labels: tuple[str, ...]


def run_real_pool(seed: int, n_members: int = 5, n_fit: int = 400) -> RealRuns:
    """Draw `n_fit` training images under `seed`, fit every member of REAL_MEMBERS[n_members] (seeded) on them,
    and run each on the remaining images of scikit-learn's 1,797 handwritten digits; members come back in the
    order of their cost."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    if n_members not in REAL_MEMBERS:
        raise ValueError(f"n_members must be one of {sorted(REAL_MEMBERS)}, got {n_members}")
    x, y = load_digits(return_X_y=True)
    order = numpy_rng(seed, CHAPTER, "digits").permutation(len(y))
    fit, held = order[:n_fit], order[n_fit:]
    cols = []
    for label in REAL_MEMBERS[n_members]:
        view = pool_pixels if _POOLED in label else (lambda a: a)
        with warnings.catch_warnings():  # the MLPs train a fixed 300 epochs, converged or not
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = _member(label, derive_seed(seed, CHAPTER, label) % 2**31).fit(view(x[fit]), y[fit])
        pred = model.predict(view(x[held]))
        cost = member_flops(label, model, view(x[:1]).shape[1])
        cols.append(((pred == y[held]).astype(float), np.full(len(held), cost), confidence(model, view(x[held]))))
    by_cost = np.argsort([c[1][0] for c in cols], kind="stable")  # the strategies expect the cost order
    correct, flop, conf = (np.stack([c[i] for i in by_cost], axis=1) for c in zip(*cols))
    context = PCA(8, random_state=0).fit(x[fit]).transform(x[held])
    return RealRuns(correct, flop, conf, context, tuple(REAL_MEMBERS[n_members][i] for i in by_cost))


def fit_quality_estimator(runs: RealRuns, train: np.ndarray, post_hoc: bool) -> np.ndarray:
    """Per member, a logistic regression of its correctness on the context (ex ante) and, post hoc, also on its
    own confidence, fitted on the training rows; returns the (N, K) predicted probability of a correct answer.
    A member that is always (or never) right on the training rows gets its training accuracy."""
    n, k = runs.correct.shape
    out = np.empty((n, k))
    for m in range(k):
        x = runs.context if not post_hoc else np.column_stack([runs.context, runs.confidence[:, m]])
        y = runs.correct[:, m]
        if len(np.unique(y[train])) < 2:
            out[:, m] = y[train].mean()
            continue
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500)).fit(x[train], y[train])
        out[:, m] = clf.predict_proba(x)[:, 1]
    return out


def real_estimates(runs: RealRuns, seed: int, train_fraction: float = 0.2, with_train: bool = False):
    """Split the held-out images (the seed draws the split), fit the ex-ante and post-hoc estimators on the
    training part, and return the test part's pool and estimates (and, `with_train`, the training part's, on
    which λ is fitted). Costs are in units of the most expensive member's FLOPs (as the synthetic pool's largest model costs 1), so `lambda_grid` spans the trade-off."""
    _check_finite("runs.correct", runs.correct)
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    train = numpy_rng(seed, CHAPTER, "real split").random(len(runs.correct)) < train_fraction
    pre = fit_quality_estimator(runs, train, post_hoc=False)
    post = fit_quality_estimator(runs, train, post_hoc=True)
    cov = np.atleast_2d(np.cov((pre - post)[train].T))
    cost = runs.flops / runs.flops[train].mean(0).max()
    split = lambda rows: (Pool(runs.correct[rows], cost[rows], np.zeros(int(rows.sum()), int)),
                          Estimates(pre[rows], post[rows], cost[rows], cov))
    return (split(~train), split(train)) if with_train else split(~train)


def lm_context(problem) -> list[float]:
    """What is known of an arithmetic query before any LM answers it: its number of operations, of each operation,
    and its prompt's length."""
    return [len(problem.ops), *(problem.ops.count(op) for op in "+-*"), len(problem.prompt)]


def run_lm_pool(names, n_queries: int, seed: int, scale: str = "ci") -> RealRuns:
    """Every causal LM of `names` (zoo names, `save_pretrained` folders or Hub ids, through
    :func:`icml25.core.models.get`; they must write the arithmetic alphabet) answers `n_queries` arithmetic problems
    drawn under `seed`, greedily: `correct` is whether its final answer is right, `flops` the forward FLOPs of its
    prompt and answer with a KV cache (:func:`icml25.core.flops.forward_flops` of its own config), `confidence`
    the mean log-probability of its answer's tokens (its post-hoc signal), `context` :func:`lm_context`. Members
    come back in the order of their mean cost, as :func:`run_real_pool`'s."""
    import torch

    from .core import arithmetic, flops, generation, models, reasoners

    if len(names) < 2:
        raise ValueError(f"a pool needs at least two models, got {list(names)}")
    problems = arithmetic.sample_problems(n_queries, seed, stream="cascade-lm")
    prompts = [p.prompt for p in problems]
    cols = []
    for name in names:
        z = models.get(name, scale, seed, alphabet=arithmetic.ALPHABET)
        answers = reasoners.solve(z.model, z.tokenizer, problems)
        batch = generation.encode_completions(z.tokenizer, prompts, answers)
        with torch.no_grad():
            logp = generation.token_logprobs(z.model, batch)
        n_answer = batch["completion_mask"][:, 1:].sum(-1).clamp(min=1)
        n_tokens = batch["attention_mask"].sum(-1)
        cols.append((np.array([arithmetic.is_correct(p, a) for p, a in zip(problems, answers)], float),
                     np.array([flops.forward_flops(z.model.config, int(t)) for t in n_tokens], float),
                     (logp.sum(-1) / n_answer).cpu().numpy().astype(float)))
    by_cost = np.argsort([c[1].mean() for c in cols], kind="stable")
    correct, flop, conf = (np.stack([c[i] for i in by_cost], axis=1) for c in zip(*cols))
    return RealRuns(correct, flop, conf, np.array([lm_context(p) for p in problems], float),
                    tuple(str(names[i]) for i in by_cost))


def real_pool_cell(seed: int, cfg) -> tuple[RealRuns, dict]:
    """One seed of the real pool: fit the members (or, with `cfg.pool_models`, load those LMs), run them, fit the
    estimators, sweep every strategy; and the positive control (`positive_control`) on the same members."""
    runs = run_lm_pool(cfg.pool_models, cfg.lm_queries, seed, cfg.scale) if cfg.pool_models else \
        run_real_pool(seed, cfg.real_members, cfg.real_n_fit)
    cell = evaluate(*real_estimates(runs, seed, cfg.train_fraction, with_train=True), seed, cfg)
    return runs, cell | {"positive_control": positive_control(runs, seed, cfg)}


def positive_control(runs: RealRuns, seed: int, cfg, noise: str = "low") -> dict:
    """The real pool with the paper's synthetic estimators (`make_estimates` at `noise`) in place of the learned
    ones: the members' true correctness and costs, so what it shows is whether this pool leaves cascade routing
    room to gain at all."""
    cost = runs.flops / runs.flops.mean(0).max()
    pool = Pool(runs.correct, cost, np.zeros(len(runs.correct), int))
    return evaluate(*make_estimates(pool, noise, seed, cfg.train_fraction, with_train=True), seed, cfg)


def real_claim_measurements(runs: list[RealRuns], cells: list[dict]) -> dict[str, list[float]]:
    """Per seed: the gain of cascade routing over the better baseline, the best member's accuracy, the headroom
    (any member right − best member right), routing's AUC over blind interpolation, and the positive control's
    gain."""
    return {"real_gain": [cell_gain(c) for c in cells],
            "best_member_accuracy": [float(r.correct.mean(0).max()) for r in runs],
            "pool_headroom": [float(r.correct.max(1).mean() - r.correct.mean(0).max()) for r in runs],
            "routing_over_interpolation": [c["auc"]["routing"] - c["interpolation_auc"] for c in cells],
            "positive_control_gain": [cell_gain(c["positive_control"]) for c in cells]}
