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

Three judges. Two are simulated on a population built for this chapter (an "off-the-shelf" judge biased towards a
feature humans ignore, and a "fine-tuned" one fitted to separate human labels). The third was designed by nobody
for this purpose: the zoo's arithmetic *target* model, used as an LLM judge by its own likelihood, scores pairs of
zoo solutions — its own sampled solution (A) against the draft model's (B) on the same problem — and the "human"
label is exact correctness (1 if only A is right, 0 if only B is, ½ if both or neither are).

The coefficient α̂ = Ĉov/V̂ar uses one convention for both moments (ddof cancels); the official code's main
variant divides a ddof = 1 covariance (np.cov) by a ddof = 0 variance (np.var), so its α̂ is ours times n/(n − 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit
from scipy.stats import norm

import torch

from .core import arithmetic, reasoners, zoo
from .core.generation import encode_completions, token_logprobs
from .core.claims import Claim, Effect, Equivalence, at_least, at_most
from .core.config import COUNT, NONNEGATIVE, SEED, Range, make_config
from .core.seeding import numpy_rng, torch_generator

CHAPTER = "hybrid_winrate"
JUDGES = ("off-the-shelf", "fine-tuned")  # the simulated judges
ZOO_JUDGE = "zoo LM"  # the judge nobody designed: the zoo target's likelihood
OUTCOME_LABEL = {"A": 1.0, "B": 0.0, "tie": 0.5}

config = make_config({
    "smoke": {"seeds": [0, 1, 2], "n_population": 5000, "n_finetune": 1000, "n_grid": [10, 50, 200],
              "repeats": 500, "n_claim": 200, "n_coverage_min": 50, "tie_rate": 0.1, "gap_mean": 0.2,
              "judge_noise": 1.0, "length_bias": 1.0, "zoo_problems": 150},
    "ci": {"seeds": [0, 1, 2], "n_population": 20000, "n_finetune": 2000, "n_grid": [10, 20, 50, 100, 200, 500],
           "repeats": 4000, "n_claim": 200, "n_coverage_min": 50, "tie_rate": 0.1, "gap_mean": 0.2,
           "judge_noise": 1.0, "length_bias": 1.0, "zoo_problems": 1500},
    "full": {"seeds": list(range(10)), "n_population": 100000, "n_finetune": 5000,
             "n_grid": [10, 20, 50, 100, 200, 500, 1000], "repeats": 20000, "n_claim": 200, "n_coverage_min": 50,
             "tie_rate": 0.1, "gap_mean": 0.2, "judge_noise": 1.0, "length_bias": 1.0,
             "zoo_problems": 5000},
},
    seeds=SEED, n_population=COUNT, n_finetune=COUNT, n_grid=Range(ge=2), repeats=COUNT, n_claim=Range(ge=2),
    n_coverage_min=Range(ge=2), tie_rate=Range(ge=0, lt=1), gap_mean=Range(), judge_noise=NONNEGATIVE,
    length_bias=Range(), zoo_problems=COUNT)

# Declared before the runs of this version. Units: a (seed, judge) pair at n = n_claim unless said otherwise; every
# estimator of a unit is computed on the same draws of prompts and labels.
MC_PRECISE = at_most("mc_precise", "cv_mc_se_pts", 0.1,
                     "the Monte Carlo standard error of each unit's mean estimate is <= 0.1 win-rate points")

UNBIASED = Claim(
    chapter=CHAPTER, id="unbiased",
    paper_statement="The control-variates estimate is unbiased however biased the synthetic judge; synthetic-only "
                    "evaluation is not",
    paper_value="qualitative (Chatbot Arena, MT-Bench)",
    criterion="At n = n_claim, over (seed, judge) units of all three judges, the control-variates bias (α fitted on "
              "the same n labels) is within ±0.5 win-rate points (TOST); and the synthetic-only |bias| exceeds 1 "
              "point for the off-the-shelf judge and for the zoo LM (95% t interval per judge, over seeds). The "
              "fine-tuned judge is left out of the second part: a logistic regression with an intercept fitted to "
              "human labels of the same population matches their mean by construction",
    effects=[Equivalence("cv_bias_pts", "cv_bias_pts", margin=0.5),
             Effect("synthetic_abs_bias_offshelf_pts", "synthetic_abs_bias_offshelf_pts", null=1.0),
             Effect("synthetic_abs_bias_zoo_pts", "synthetic_abs_bias_zoo_pts", null=1.0)],
    preconditions=[MC_PRECISE],
    examples=({"cv_bias_pts": [0.02, -0.05, 0.03, 0.01, -0.02, 0.04], "synthetic_abs_bias_offshelf_pts": [8, 9, 8.5],
               "synthetic_abs_bias_zoo_pts": [4, 5, 4.5], "cv_mc_se_pts": [0.05] * 6},
              {"cv_bias_pts": [0.02, -0.05, 0.03, 0.01, -0.02, 0.04], "synthetic_abs_bias_offshelf_pts": [8, 9, 8.5],
               "synthetic_abs_bias_zoo_pts": [0.1, 0.3, 0.2], "cv_mc_se_pts": [0.05] * 6}),
)
SAVING_ZOO = Claim(
    chapter=CHAPTER, id="saving_zoo",
    paper_statement="The fraction of human labels saved equals ρ², predictable in advance",
    paper_value="up to 12.2% (off-the-shelf judge), 24.8% (fine-tuned), Chatbot Arena",
    criterion="For the zoo LM judging target-vs-draft solution pairs against exact correctness, one unit per seed "
              "(a fresh set of problems and solutions): the measured saving 1 − Var(μ̂_cv)/Var(z̄_n) at n = n_claim "
              "minus the population's ρ² is within ±3 points (TOST)",
    effects=[Equivalence("saving_minus_rho2_zoo_pts", "saving_minus_rho2_zoo_pts", margin=3.0)],
    preconditions=[at_least("judge_informative", "rho2_zoo_pct", 5.0,
                            "the zoo LM's ρ² is >= 5% on every seed (a judge with ρ ≈ 0 would make 'saving = ρ²' "
                            "hold trivially at 0)")],
    examples=({"saving_minus_rho2_zoo_pts": [0.5, -0.4, 0.2, 0.1], "rho2_zoo_pct": [20, 22, 19, 21]},
              {"saving_minus_rho2_zoo_pts": [-8, -9, -7.5], "rho2_zoo_pct": [20, 22, 19]}),
)
SAVING = Claim(
    chapter=CHAPTER, id="saving",
    paper_statement="The fraction of human labels saved equals ρ², predictable in advance (simulated judges)",
    paper_value="up to 12.2% (off-the-shelf judge), 24.8% (fine-tuned), Chatbot Arena",
    criterion="For the two simulated judges, one unit per (seed, judge): measured saving at n = n_claim minus ρ² "
              "is within ±3 points (TOST)",
    effects=[Equivalence("saving_minus_rho2_pts", "saving_minus_rho2_pts", margin=3.0)],
    preconditions=[at_least("judges_informative", "rho2_pct", 5.0, "each simulated judge's ρ² is >= 5%")],
    examples=({"saving_minus_rho2_pts": [0.5, -0.4, 0.2, 0.1, 0.3, -0.2], "rho2_pct": [11, 16, 12, 15, 11, 16]},
              {"saving_minus_rho2_pts": [-8, -9, -7.5, -8.2], "rho2_pct": [11, 16, 12, 15]}),
)
FINETUNED = Claim(
    chapter=CHAPTER, id="finetuned",
    paper_statement="A judge fine-tuned on human labels saves more human annotations than an off-the-shelf one",
    paper_value="Skywork-8B on Chatbot Arena: 8.3% → 24.8%",
    criterion="Per seed, at n = n_claim, the fine-tuned judge's measured saving minus the off-the-shelf judge's is "
              "above 0 points (95% t interval)",
    effects=[Effect("finetuned_minus_offshelf_pts", "finetuned_minus_offshelf_pts")],
    preconditions=[at_least("judges_informative", "rho2_pct", 5.0, "each simulated judge's ρ² is >= 5%")],
    examples=({"finetuned_minus_offshelf_pts": [5, 4, 6], "rho2_pct": [11, 16, 12, 15, 11, 16]},
              {"finetuned_minus_offshelf_pts": [-1, 0.5, -0.5], "rho2_pct": [11, 16, 12, 15, 11, 16]}),
)
COVERAGE = Claim(
    chapter=CHAPTER, id="coverage",
    paper_statement="Control-variates confidence intervals are valid",
    paper_value="95% intervals (paper's normal approximation)",
    criterion="One unit per (judge, n ≥ n_coverage_min), all three judges, repeats pooled over seeds: the nominal "
              "95% interval's coverage minus 95 is within ±2 points (TOST)",
    effects=[Equivalence("coverage_minus_95_pts", "coverage_minus_95_pts", margin=2.0)],
    preconditions=[at_least("enough_repeats", "repeats_pooled", 3000,
                            "at least 3000 repeats per unit (coverage known to about ±0.4 points)")],
    examples=({"coverage_minus_95_pts": [-0.3, 0.2, -0.5, 0.1, -0.2], "repeats_pooled": 12000},
              {"coverage_minus_95_pts": [-4, -5, -3.5, -4.5], "repeats_pooled": 12000}),
)
CLAIMS = (UNBIASED, SAVING_ZOO, SAVING, FINETUNED, COVERAGE)


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


def estimates(z, s, s_all, alpha_known: float, truth: float) -> dict[str, np.ndarray]:
    """Every estimator on the same R × n draws (labels `z`, judge scores `s`; `s_all` the judge on all N prompts):
    human-only, synthetic-only, control variates with α fitted and with the population's α, and whether the 95%
    interval covers the truth."""
    lo, hi = confidence_interval(z, s, s_all.mean())
    return {"human": human_only(z), "synthetic": synthetic_only(s), "cv": control_variates(z, s, s_all.mean()),
            "cv_known_alpha": control_variates(z, s, s_all.mean(), alpha_known),
            "covered": (lo <= truth) & (truth <= hi)}


def simulate(pop: Population, n: int, repeats: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """R repeats of n labelled prompts with fresh human labels: per simulated judge, `estimates`."""
    rng = numpy_rng(seed, CHAPTER, "sample", n)
    idx, z = sample(pop, n, repeats, rng)
    m1, _ = pop.label_moments()
    out = {}
    for judge in JUDGES:
        s_all = pop.scores[judge]
        alpha_known = (np.mean(m1 * s_all) - m1.mean() * s_all.mean()) / s_all.var()
        out[judge] = estimates(z, s_all[idx], s_all, alpha_known, pop.true_win_rate)
    return out


def run_experiment(cfg) -> list[dict]:
    """Every (seed, n) of the config on the simulated population: its truth and ρ per judge, and the estimates."""
    rows = []
    for seed in cfg.seeds:
        pop = make_population(cfg, seed)
        for n in cfg.n_grid:
            rows.append({"seed": seed, "n": n, "truth": pop.true_win_rate,
                         "rho": {j: pop.rho(j) for j in JUDGES}, "synthetic_mean": {j: pop.scores[j].mean()
                                                                                    for j in JUDGES},
                         "est": simulate(pop, n, cfg.repeats, seed)})
    return rows


# --------------------------------------------------------------------------------------------------------------
# The judge nobody designed: a zoo LM's likelihood of zoo solutions


@dataclass(frozen=True)
class FinitePopulation:
    """N prompts with a fixed label each (`z`) and a judge's score (`s`); evaluation draws n of them with
    replacement, as the official bootstrap does with its labelled pairs."""

    z: np.ndarray
    s: np.ndarray

    @property
    def truth(self) -> float:
        return float(self.z.mean())

    @property
    def rho(self) -> float:
        """Corr(z, ŝ) over the population; 0 when the labels or the scores are constant (nothing to predict)."""
        if self.z.var() == 0 or self.s.var() == 0:
            return 0.0
        return float(np.corrcoef(self.z, self.s)[0, 1])

    @property
    def alpha(self) -> float:
        """The population's optimal α = Cov(z, ŝ)/Var(ŝ) (0 for constant scores)."""
        return float(np.cov(self.z, self.s, bias=True)[0, 1] / self.s.var()) if self.s.var() > 0 else 0.0


def pair_label(a_correct, b_correct) -> np.ndarray:
    """The 'human' preference from exact correctness: 1 if only A is right, 0 if only B is, ½ for a tie."""
    return 0.5 + 0.5 * (np.asarray(a_correct, float) - np.asarray(b_correct, float))


def pair_score(score_a, score_b) -> np.ndarray:
    """A judge's preference for A from solution scores in [0, 1]: ½ (1 + score_A − score_B), in [0, 1]."""
    return 0.5 + 0.5 * (np.asarray(score_a, float) - np.asarray(score_b, float))


@torch.inference_mode()
def likelihood_scores(model, tokenizer, problems, solutions, batch_size: int = 250) -> np.ndarray:
    """An LM's score of each solution: its per-token geometric-mean probability, exp(mean_t log p(y_t | x, y_<t)),
    end token included (a length-normalised likelihood, in (0, 1])."""
    out = []
    for i in range(0, len(problems), batch_size):
        batch = encode_completions(tokenizer, [p.prompt for p in problems[i:i + batch_size]],
                                   list(solutions[i:i + batch_size]), add_eos=True)
        mask = batch["completion_mask"][:, 1:].float()
        out.append(torch.exp((token_logprobs(model, batch) * mask).sum(-1) / mask.sum(-1)).numpy())
    return np.concatenate(out)


def zoo_population(cfg, seed: int) -> FinitePopulation:
    """`zoo_problems` fresh arithmetic problems of `seed`; A = the zoo target's sampled solution (temperature 1),
    B = the zoo draft's; z from exact correctness; ŝ from the target's likelihood of both (zoo seed 0 for the models:
    the seed varies the problems and samples, not the judge)."""
    draft, target = zoo.get("arith-draft", cfg.scale, 0), zoo.get("arith-target", cfg.scale, 0)
    problems = arithmetic.sample_problems(cfg.zoo_problems, seed, stream="hybrid-winrate")
    gen = torch_generator(seed, CHAPTER, "zoo-solutions")
    sol_a = reasoners.solve(target.model, target.tokenizer, problems, temperature=1.0, generator=gen)
    sol_b = reasoners.solve(draft.model, draft.tokenizer, problems, temperature=1.0, generator=gen)
    z = pair_label([arithmetic.is_correct(p, x) for p, x in zip(problems, sol_a)],
                   [arithmetic.is_correct(p, x) for p, x in zip(problems, sol_b)])
    judge = lambda sols: likelihood_scores(target.model, target.tokenizer, problems, sols)  # noqa: E731
    return FinitePopulation(z, pair_score(judge(sol_a), judge(sol_b)))


def run_zoo_experiment(cfg, populations: dict[int, FinitePopulation]) -> list[dict]:
    """Every (seed, n) on the zoo judge's finite populations, rows shaped like `run_experiment`'s."""
    rows = []
    for seed, pop in populations.items():
        for n in cfg.n_grid:
            rng = numpy_rng(seed, CHAPTER, "zoo-sample", n)
            idx = rng.integers(len(pop.z), size=(cfg.repeats, n))
            rows.append({"seed": seed, "n": n, "truth": pop.truth, "rho": {ZOO_JUDGE: pop.rho},
                         "synthetic_mean": {ZOO_JUDGE: float(pop.s.mean())},
                         "est": {ZOO_JUDGE: estimates(pop.z[idx], pop.s[idx], pop.s, pop.alpha, pop.truth)}})
    return rows


# --------------------------------------------------------------------------------------------------------------
# Measurements


def _at(rows: list[dict], judge: str, n: int) -> list[dict]:
    return [r for r in rows if r["n"] == n and judge in r["est"]]


def bias_pts(rows: list[dict], judge: str, estimator: str, n: int) -> list[float]:
    """Per seed: 100 × (mean over repeats of the estimate − truth), in win-rate points."""
    return [100 * float(r["est"][judge][estimator].mean() - r["truth"]) for r in _at(rows, judge, n)]


def mc_se_pts(rows: list[dict], judge: str, estimator: str, n: int) -> list[float]:
    """Per seed: the Monte Carlo standard error of that mean, in points."""
    return [100 * float(r["est"][judge][estimator].std(ddof=1) / np.sqrt(len(r["est"][judge][estimator])))
            for r in _at(rows, judge, n)]


def measured_saving(rows: list[dict], judge: str, n: int) -> list[float]:
    """Per seed: 1 − Var(μ̂_cv) / Var(z̄_n) over the repeats at n (the same prompts and labels for both); 0 when the
    labels are constant (then α̂ = 0 and the two estimates coincide)."""
    out = []
    for r in _at(rows, judge, n):
        human, cv = r["est"][judge]["human"].var(ddof=1), r["est"][judge]["cv"].var(ddof=1)
        out.append(float(1 - cv / human) if human > 0 else 0.0)
    return out


def rho2(rows: list[dict], judge: str, n: int) -> list[float]:
    """Per seed: the population's ρ²."""
    return [r["rho"][judge] ** 2 for r in _at(rows, judge, n)]


def coverage(rows: list[dict], judge: str, n: int) -> float:
    """Fraction of repeats (pooled over seeds) whose 95% interval covers the truth."""
    return float(np.mean(np.concatenate([r["est"][judge]["covered"] for r in _at(rows, judge, n)])))


def claim_measurements(rows: list[dict], cfg) -> dict[str, list[float]]:
    """Every claim's per-unit inputs (rows of both experiments together)."""
    n, judges = cfg.n_claim, JUDGES + (ZOO_JUDGE,)
    save = {j: 100 * np.array(measured_saving(rows, j, n)) for j in judges}
    r2 = {j: 100 * np.array(rho2(rows, j, n)) for j in judges}
    cov_ns = [m for m in cfg.n_grid if m >= cfg.n_coverage_min]
    return {
        "cv_bias_pts": [b for j in judges for b in bias_pts(rows, j, "cv", n)],
        "cv_mc_se_pts": [e for j in judges for e in mc_se_pts(rows, j, "cv", n)],
        "synthetic_abs_bias_offshelf_pts": np.abs(bias_pts(rows, "off-the-shelf", "synthetic", n)).tolist(),
        "synthetic_abs_bias_zoo_pts": np.abs(bias_pts(rows, ZOO_JUDGE, "synthetic", n)).tolist(),
        "synthetic_bias_finetuned_pts": bias_pts(rows, "fine-tuned", "synthetic", n),
        "saving_minus_rho2_zoo_pts": (save[ZOO_JUDGE] - r2[ZOO_JUDGE]).tolist(),
        "rho2_zoo_pct": r2[ZOO_JUDGE].tolist(), "saving_zoo_pct": save[ZOO_JUDGE].tolist(),
        "saving_minus_rho2_pts": [d for j in JUDGES for d in (save[j] - r2[j]).tolist()],
        "rho2_pct": [x for j in JUDGES for x in r2[j].tolist()],
        "finetuned_minus_offshelf_pts": (save["fine-tuned"] - save["off-the-shelf"]).tolist(),
        "coverage_minus_95_pts": [100 * coverage(rows, j, m) - 95 for j in judges for m in cov_ns],
        "repeats_pooled": cfg.repeats * len(cfg.seeds),
    }
