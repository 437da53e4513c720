"""Chapter: Accelerating Unbiased LLM Evaluation via Synthetic Feedback (Zhou, Song, Zanette; ICML 2025).

The win rate of model A over model B is the mean human preference μ = E[z], z ∈ {0, ½, 1} (a tie counts ½).
Human labels are expensive; a synthetic judge's score ŝ ∈ [0, 1] (a reward model or an LLM judge) is cheap and
available on all N prompts, but biased. The control-variates estimator (the paper's Eq. for μ̂_cv)

    μ̂ = z̄_n − α (ŝ̄_n − ŝ̄_N),        α = Cov(z, ŝ) / Var(ŝ),

stays unbiased whatever the judge's bias (E[ŝ̄_n] = ŝ̄_N), and with the optimal α its variance is
(1 − ρ²) Var(z) / n, ρ = Corr(z, ŝ): it does with n labels what human-only averaging does with n / (1 − ρ²),
a saving of ρ² of the human labels, predictable before any label is collected. The paper's main variant
estimates α on the same n labelled samples (O(1/n) bias).

Everything here is vectorised over repeats: arrays of shape (R, n) are R independent draws of n labelled prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit
from scipy.stats import norm

from .core.claims import Claim
from .core.config import make_config
from .core.seeding import numpy_rng

CHAPTER = "hybrid_winrate"
JUDGES = ("off-the-shelf", "fine-tuned")
OUTCOME_LABEL = {"A": 1.0, "B": 0.0, "tie": 0.5}

config = make_config({
    "smoke": {"seeds": [0, 1, 2], "n_population": 5000, "n_finetune": 1000, "n_grid": [10, 50, 200],
              "repeats": 500, "n_claim": 200, "n_coverage_min": 50, "tie_rate": 0.1, "gap_mean": 0.2,
              "judge_noise": 1.0, "length_bias": 1.0},
    "ci": {"seeds": [0, 1, 2], "n_population": 20000, "n_finetune": 2000, "n_grid": [10, 20, 50, 100, 200, 500],
           "repeats": 4000, "n_claim": 200, "n_coverage_min": 50, "tie_rate": 0.1, "gap_mean": 0.2,
           "judge_noise": 1.0, "length_bias": 1.0},
    "full": {"seeds": list(range(10)), "n_population": 100000, "n_finetune": 5000,
             "n_grid": [10, 20, 50, 100, 200, 500, 1000], "repeats": 20000, "n_claim": 200, "n_coverage_min": 50,
             "tie_rate": 0.1, "gap_mean": 0.2, "judge_noise": 1.0, "length_bias": 1.0},
})

UNBIASED = Claim(
    chapter=CHAPTER, id="unbiased",
    paper_statement="The control-variates estimate is unbiased however biased the synthetic judge; synthetic-only "
                    "evaluation is not",
    paper_value="qualitative (Chatbot Arena, MT-Bench)",
    criterion="At every n of the grid, for both judges, the control-variates estimate (α fitted on the same n "
              "labels) is within 3 Monte Carlo standard errors of the true win rate (seed-combined z-score), and the "
              "synthetic-only estimate is more than 5 standard errors off",
    test=lambda m: max(m["cv_abs_z"]) <= 3.0 and min(m["synthetic_abs_z"]) > 5.0,
)
SAVING = Claim(
    chapter=CHAPTER, id="saving",
    paper_statement="The fraction of human labels saved equals ρ², predictable in advance",
    paper_value="up to 12.2% (off-the-shelf judge), 24.8% (fine-tuned), Chatbot Arena",
    criterion="For both judges, at n = n_claim, the seed-mean measured saving 1 − Var(μ̂_cv)/Var(z̄_n) is within "
              "3 percentage points of the seed-mean ρ²",
    test=lambda m: all(abs(s - r) <= 3.0 for s, r in zip(m["saving_pct"], m["rho2_pct"], strict=True)),
)
FINETUNED = Claim(
    chapter=CHAPTER, id="finetuned",
    paper_statement="A judge fine-tuned on human labels saves more human annotations than an off-the-shelf one",
    paper_value="Skywork-8B on Chatbot Arena: 8.3% → 24.8%",
    criterion="At n = n_claim the seed-mean measured saving of the fine-tuned judge exceeds the off-the-shelf "
              "judge's",
    test=lambda m: m["saving_finetuned_pct"] > m["saving_offshelf_pct"],
)
COVERAGE = Claim(
    chapter=CHAPTER, id="coverage",
    paper_statement="Control-variates confidence intervals are valid",
    paper_value="95% intervals (paper's normal approximation)",
    criterion="For both judges and every n ≥ n_coverage_min in the grid, the nominal 95% interval covers the true "
              "win rate in 93–97% of repeats (pooled over seeds)",
    test=lambda m: all(93.0 <= c <= 97.0 for c in m["coverage_pct"]),
)
CLAIMS = (UNBIASED, SAVING, FINETUNED, COVERAGE)


# --------------------------------------------------------------------------------------------------------------
# Estimators


def labels_from_outcomes(outcomes) -> np.ndarray:
    """Human outcomes "A" / "B" / "tie" as z ∈ {1, 0, ½} (a tie counts as half a win)."""
    try:
        return np.array([OUTCOME_LABEL[o] for o in outcomes], float)
    except KeyError as bad:
        raise ValueError(f"unknown outcome {bad}; valid: {', '.join(OUTCOME_LABEL)}") from None


def _check(z, s) -> tuple[np.ndarray, np.ndarray]:
    z, s = np.atleast_2d(np.asarray(z, float)), np.atleast_2d(np.asarray(s, float))
    if z.shape != s.shape:
        raise ValueError(f"human labels z {z.shape} and synthetic scores s {s.shape} must have the same shape")
    if z.shape[-1] < 2:
        raise ValueError(f"need at least two human labels per estimate, got n = {z.shape[-1]}")
    if not (np.all(np.isfinite(z)) and np.all(np.isfinite(s))):
        raise ValueError("labels or scores contain NaN or infinite values")
    if np.any((z < 0) | (z > 1)):
        raise ValueError(f"human labels must lie in [0, 1]; got values in [{z.min()}, {z.max()}]")
    return z, s


def human_only(z) -> np.ndarray:
    """z̄_n: the classical estimate from n human labels (per row)."""
    z, _ = _check(z, z)
    return z.mean(-1)


def synthetic_only(s) -> np.ndarray:
    """ŝ̄: the judge's mean score — cheap and biased."""
    s = np.atleast_2d(np.asarray(s, float))
    if s.shape[-1] < 1:
        raise ValueError("need at least one synthetic score, got n = 0")
    return s.mean(-1)


def optimal_alpha(z, s) -> np.ndarray:
    """α̂ = Ĉov(z, ŝ) / V̂ar(ŝ) on the n labelled samples (the paper's main variant); 0 if ŝ is constant."""
    z, s = _check(z, s)
    zc, sc = z - z.mean(-1, keepdims=True), s - s.mean(-1, keepdims=True)
    var = (sc ** 2).mean(-1)
    return np.where(var > 0, (zc * sc).mean(-1) / np.where(var > 0, var, 1.0), 0.0)


def control_variates(z, s, s_mean_all, alpha=None) -> np.ndarray:
    """μ̂ = z̄_n − α (ŝ̄_n − ŝ̄_N). `s_mean_all` is ŝ̄_N (the judge's mean over all N prompts); `alpha` None fits
    it on the same n samples, otherwise a known α (scalar or per row)."""
    z, s = _check(z, s)
    a = optimal_alpha(z, s) if alpha is None else np.broadcast_to(np.asarray(alpha, float), z.shape[:-1])
    return z.mean(-1) - a * (s.mean(-1) - s_mean_all)


def confidence_interval(z, s, s_mean_all, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Normal-approximation interval μ̂ ± z_{1−(1−level)/2} · sd(z − α̂ ŝ) / √n (ŝ̄_N treated as exact, N ≫ n)."""
    z, s = _check(z, s)
    a = optimal_alpha(z, s)
    mu = z.mean(-1) - a * (s.mean(-1) - s_mean_all)
    resid = z - a[..., None] * s
    half = norm.ppf(0.5 + level / 2) * resid.std(-1, ddof=1) / np.sqrt(z.shape[-1])
    return mu - half, mu + half


def predicted_saving(rho: float) -> float:
    """The fraction of human labels saved by control variates with the optimal α: ρ²."""
    return float(rho) ** 2


# --------------------------------------------------------------------------------------------------------------
# A population of prompts, human labels and two synthetic judges


@dataclass(frozen=True)
class Population:
    """N prompts comparing A with B: `p_win` P(A preferred), `tie_rate`, judge features (`perceived` quality gap,
    `length` difference that humans ignore), and the judges' scores on every prompt."""

    p_win: np.ndarray
    tie_rate: float
    scores: dict[str, np.ndarray]

    @property
    def true_win_rate(self) -> float:
        """E[z] = tie·½ + (1 − tie)·mean p_win."""
        return float(self.tie_rate * 0.5 + (1 - self.tie_rate) * self.p_win.mean())

    def label_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-prompt E[z | prompt] and E[z² | prompt]."""
        m1 = self.tie_rate * 0.5 + (1 - self.tie_rate) * self.p_win
        m2 = self.tie_rate * 0.25 + (1 - self.tie_rate) * self.p_win
        return m1, m2

    def rho(self, judge: str) -> float:
        """Exact Corr(z, ŝ) over a random prompt and its random human label."""
        m1, m2 = self.label_moments()
        s = self.scores[judge]
        var_z = m2.mean() - m1.mean() ** 2
        cov = (m1 * s).mean() - m1.mean() * s.mean()
        return float(cov / np.sqrt(var_z * s.var()))


def draw_labels(p_win: np.ndarray, tie_rate: float, rng: np.random.Generator) -> np.ndarray:
    """Human labels: a tie (½) with probability `tie_rate`, else 1 with probability p_win, else 0."""
    u, v = rng.random(p_win.shape), rng.random(p_win.shape)
    return np.where(u < tie_rate, 0.5, (v < p_win).astype(float))


def fit_judge(features: np.ndarray, z: np.ndarray, iters: int = 25) -> np.ndarray:
    """The 'fine-tuned' judge: logistic regression of the human label (ties as ½, a fractional target) on the
    judge's features, by Newton's method. Returns the weights (bias last)."""
    x = np.column_stack([features, np.ones(len(features))])
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        p = expit(x @ w)
        hess = x.T @ (x * (p * (1 - p))[:, None]) + 1e-6 * np.eye(len(w))
        w += np.linalg.solve(hess, x.T @ (z - p))
    return w


def make_population(cfg, seed: int) -> Population:
    """Prompts with a latent quality gap g ~ N(gap_mean, 1); humans prefer A with probability σ(2g) (ties at
    `tie_rate`) and ignore a length difference ℓ ~ N(0, 1). Both judges see g through noise (`judge_noise`); the
    off-the-shelf judge scores σ(g̃ + length_bias·ℓ + ½) — rewarding length and favouring A; the fine-tuned one is
    a logistic regression on (g̃, ℓ) trained on `n_finetune` separate human labels."""
    rng = numpy_rng(seed, CHAPTER, "population")

    def prompts(n):
        g = rng.normal(cfg.gap_mean, 1.0, n)
        length = rng.normal(0.0, 1.0, n)
        return expit(2 * g), np.column_stack([g + cfg.judge_noise * rng.normal(size=n), length])

    p_win, feats = prompts(cfg.n_population)
    p_train, feats_train = prompts(cfg.n_finetune)
    w = fit_judge(feats_train, draw_labels(p_train, cfg.tie_rate, rng))
    scores = {"off-the-shelf": expit(feats[:, 0] + cfg.length_bias * feats[:, 1] + 0.5),
              "fine-tuned": expit(feats @ w[:2] + w[2])}
    return Population(p_win, cfg.tie_rate, scores)


def sample(pop: Population, n: int, repeats: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """R × n prompt indices drawn uniformly (with replacement) and fresh human labels for them."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    idx = rng.integers(len(pop.p_win), size=(repeats, n))
    return idx, draw_labels(pop.p_win[idx], pop.tie_rate, rng)


def simulate(pop: Population, n: int, repeats: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """R repeats of n labelled prompts: per judge, the human-only, synthetic-only, control-variates (α fitted and
    α known) estimates and whether the 95% interval covers the truth."""
    rng = numpy_rng(seed, CHAPTER, "sample", n)
    idx, z = sample(pop, n, repeats, rng)
    truth = pop.true_win_rate
    out = {}
    for judge in JUDGES:
        s_all = pop.scores[judge]
        s = s_all[idx]
        m1, _ = pop.label_moments()
        alpha_known = (np.mean(m1 * s_all) - m1.mean() * s_all.mean()) / s_all.var()
        lo, hi = confidence_interval(z, s, s_all.mean())
        out[judge] = {"human": human_only(z), "synthetic": synthetic_only(s),
                      "cv": control_variates(z, s, s_all.mean()),
                      "cv_known_alpha": control_variates(z, s, s_all.mean(), alpha_known),
                      "covered": (lo <= truth) & (truth <= hi)}
    return out


def run_experiment(cfg) -> list[dict]:
    """Every (seed, n) of the config: the population's truth and ρ per judge, and the simulated estimates."""
    rows = []
    for seed in cfg.seeds:
        pop = make_population(cfg, seed)
        for n in cfg.n_grid:
            rows.append({"seed": seed, "n": n, "truth": pop.true_win_rate,
                         "rho": {j: pop.rho(j) for j in JUDGES}, "synthetic_mean": {j: pop.scores[j].mean()
                                                                                    for j in JUDGES},
                         "est": simulate(pop, n, cfg.repeats, seed)})
    return rows


def bias_z(rows: list[dict], judge: str, estimator: str, n: int) -> float:
    """Seed-combined z-score of the bias at n: Σ_s (mean_s − truth_s)/SE_s / √S."""
    zs = []
    for r in (r for r in rows if r["n"] == n):
        x = r["est"][judge][estimator]
        zs.append((x.mean() - r["truth"]) / (x.std(ddof=1) / np.sqrt(len(x))))
    return float(np.sum(zs) / np.sqrt(len(zs)))


def measured_saving(rows: list[dict], judge: str, n: int) -> list[float]:
    """Per seed: 1 − Var(μ̂_cv) / Var(z̄_n) over the repeats at n (the same prompts and labels for both)."""
    return [float(1 - r["est"][judge]["cv"].var(ddof=1) / r["est"][judge]["human"].var(ddof=1))
            for r in rows if r["n"] == n]


def coverage(rows: list[dict], judge: str, n: int) -> float:
    """Fraction of repeats (pooled over seeds) whose 95% interval covers the truth."""
    return float(np.mean(np.concatenate([r["est"][judge]["covered"] for r in rows if r["n"] == n])))
