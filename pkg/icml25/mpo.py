"""Mixing Preference Optimization (MPO; Wang, Gui, Hu, Lin and Zhang, ICML 2025): combine K single-objective
policies log-linearly instead of running multi-objective RLHF from scratch.

No official code is public; the algorithm below is reconstructed from the paper's abstract and a detailed third-party
summary (the book page lists what was not verified). Equations are numbered as in this chapter:

    (1)  P(r)(x, y) = r(x, y) − β log E_{y'∼π_ref(·|x)} exp(r(x, y')/β)        the normalisation operator
    (2)  π_k = π_ref exp(r_k/β) / Z_k,   so  r̃_k := P(r_k) = β log(π_k / π_ref)  single-objective policies
    (3)  max_π min_k E_x E_{y∼π}[r̃_k] − β E_x KL(π(·|x) ‖ π_ref(·|x))          the max-min objective V(π)
    (4)  π_λ ∝ Π_k π_k^{λ_k} = π_ref exp(Σ_k λ_k r̃_k / β) / Z_λ                   the inner maximiser for fixed λ
    (5)  F(λ) = E_x log E_{y∼π_ref} Π_k (π_k/π_ref)(y)^{λ_k},  λ ∈ Δ_K            the convex dual; V* = β min_Δ F
    (6)  ∂F/∂λ_k = E_x E_{y∼π_λ}[log (π_k/π_ref)(y)] = E_x E_{π_λ}[r̃_k] / β
    (7)  v̂_k = Σ_j w_j log (π_k/π_ref)(y_j),  w_j ∝ Π_k (π_k/π_ref)(y_j)^{λ_k},  y_1..y_m ∼ π_ref(·|x_t)
    (8)  λ_k ← λ_k exp(−η v̂_k) / Z,  η = c / √T,  return λ̄ = the average of the iterates   (BSMD)

Minimising F raises the weight of the objectives π_λ currently serves worst, so at λ* the objectives with λ*_k > 0
have equal E_{π_λ*}[r̃_k] (the "equalisation" the tests check) and V(π_λ*) = β F(λ*).

Setting A is exact and tabular (prompts × responses). Setting B uses tiny language models: single-objective policies
fine-tuned from the zoo's arithmetic draft model, mixed per token (an approximation of the sequence-level mixture (4)).
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
from dataclasses import dataclass
import inspect
import itertools

import numpy as np
import torch
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from .core import arithmetic, models, zoo
from .core.claims import Claim, Effect, at_least, at_most
from .core.config import COUNT, POSITIVE, SEED, make_config
from .core.generation import encode_completions, left_pad, token_logprobs
from .core.seeding import numpy_rng, torch_generator
from .core.train import train

#: the step scale (and the rest of Setting A's design) was chosen after verdicts on seeds 0-2 in earlier rounds
CALIBRATION_SEEDS = [0, 1, 2]

SEEDS_OF_NO_CLAIM = ("sweep_seeds",)
"""Seed lists of the config that decide no claim (the verdict seeds that also run the m sweep and every β: figures,
no claim). Every other `*_seeds` list is named by a claim's `seed_knobs`, so the ledger records it."""

config = make_config({
    "smoke": {"seeds": [100], "calibration_seeds": CALIBRATION_SEEDS, "sweep_seeds": [100], "claim_beta": 0.5,
              "lm_seeds": [100], "betas": [0.5, 0.1], "n_prompts": 20, "n_responses": 32, "bsmd_steps": 300,
              "bsmd_m": 16, "ms": [4, 16, 64], "step_scale": 64.0, "prompts_per_step": 4, "pg_lrs": [1.0],
              "pg_compute_factor": 4.0, "eval_every": 50,
              "lm_prompts": 16, "lm_samples": 4, "lm_finetune_steps": 5, "lm_batch_size": 16, "lm_lr": 1e-3,
              "lm_beta": 0.25, "lm_temperature": 1.5, "lm_max_ops": 3, "lm_eval_prompts": 32, "lm_calib_prompts": 16,
              "lm_bsmd_steps": 100, "lm_bsmd_m": 4, "model": "arith-draft"},
    "ci": {"seeds": list(range(100, 108)), "calibration_seeds": CALIBRATION_SEEDS, "sweep_seeds": [100],
           "claim_beta": 0.5, "lm_seeds": list(range(700, 708)), "betas": [0.5, 0.1], "n_prompts": 50, "n_responses": 64, "bsmd_steps": 2000,
           "bsmd_m": 64, "ms": [4, 16, 64, 256, 1024], "step_scale": 64.0, "prompts_per_step": 4,
           "pg_lrs": [1.0, 3.0], "pg_compute_factor": 4.0, "eval_every": 100,
           "lm_prompts": 128, "lm_samples": 8, "lm_finetune_steps": 300, "lm_batch_size": 32, "lm_lr": 1e-3,
           "lm_beta": 0.25, "lm_temperature": 1.5, "lm_max_ops": 3, "lm_eval_prompts": 1024, "lm_calib_prompts": 256,
           "lm_bsmd_steps": 300, "lm_bsmd_m": 16, "model": "arith-draft"},
    "full": {"seeds": list(range(100, 110)), "calibration_seeds": CALIBRATION_SEEDS, "sweep_seeds": [100, 101, 102],
             "claim_beta": 0.5, "lm_seeds": list(range(200, 216)), "betas": [0.5, 0.1], "n_prompts": 200,
             "n_responses": 256,
             "bsmd_steps": 10000, "bsmd_m": 256, "ms": [4, 16, 64, 256, 1024, 4096], "step_scale": 64.0,
             "prompts_per_step": 8, "pg_lrs": [0.1, 0.3, 1.0, 3.0], "pg_compute_factor": 4.0, "eval_every": 500,
             "lm_prompts": 512, "lm_samples": 16, "lm_finetune_steps": 1000, "lm_batch_size": 64, "lm_lr": 1e-3,
             "lm_beta": 0.25, "lm_temperature": 1.5, "lm_max_ops": 3, "lm_eval_prompts": 4096,
             "lm_calib_prompts": 1024, "lm_bsmd_steps": 2000, "lm_bsmd_m": 64, "model": "Qwen/Qwen2.5-1.5B-Instruct"},
},
    seeds=SEED, calibration_seeds=SEED, sweep_seeds=SEED, claim_beta=POSITIVE, lm_seeds=SEED, betas=POSITIVE,
    n_prompts=COUNT, n_responses=COUNT, bsmd_steps=COUNT, bsmd_m=COUNT, ms=COUNT,
    step_scale=POSITIVE, prompts_per_step=COUNT, pg_lrs=POSITIVE, pg_compute_factor=POSITIVE, eval_every=COUNT,
    lm_prompts=COUNT, lm_samples=COUNT, lm_finetune_steps=COUNT, lm_batch_size=COUNT, lm_lr=POSITIVE,
    lm_beta=POSITIVE, lm_temperature=POSITIVE, lm_max_ops=COUNT, lm_eval_prompts=COUNT, lm_calib_prompts=COUNT,
    lm_bsmd_steps=COUNT, lm_bsmd_m=COUNT)

# --------------------------------------------------------------------------------------------------- claims
# Declared before the experiments of this version ran (BALANCED_LM's regime — π_ref tempered, problems of at most
# lm_max_ops operations, the fine-tuning budget — was chosen on the calibration seeds from the singles' own gains
# alone, and decided on lm_seeds 200+, which no design choice saw). BALANCED_LM's evaluation was then made paired
# (common Gumbel noise) and its precondition moved from a per-seed count to the mean over seeds, after a referee
# found the count mostly evaluation noise; a probe of the fine-tuning regime on the calibration seeds (learning rates
# 3e-4 and 3e-3, 256 or 512 prompts, 600 steps) found none whose weakest objective gained clearly more than the
# kept regime's, so the regime is unchanged; decided on lm_seeds 500+ (inconclusive: MPO − best single +0.0033
# [−0.0062, 0.0128], MPO − uniform −0.0024 [−0.0058, 0.0009]); a re-run on 600-607 came out refuted, so with no
# smallest effect the label was decided by chance. BALANCED_LM then took a smallest effect from the paper (MIN_EFFECT)
# and a headroom precondition (a positive control: a grid mix chosen on calibration prompts must beat both comparators
# by MIN_EFFECT), declared before any run on the fresh lm_seeds 700+ (500+ and 600+ were seen). Paired units: one
# per seed in Setting A (at β = claim_beta, the paper's headline β; the two β of a seed share its problem, so they
# are not independent units), one per seed in Setting B. The tolerance of MAXMIN (1% of |V*|) and the compute factor of COMPUTE (1/4) are the chapter's
# reading of the paper's statements, kept from the first version of the chapter.

MAXMIN = Claim(
    chapter="mpo", id="maxmin",
    paper_statement="MPO's log-linear mix, with weights from batch stochastic mirror descent, attains the max-min "
                    "(worst-objective) optimum and beats cheap aggregations such as reward soups",
    paper_value="E[F(λ̄) − F*] ≤ O(1/√T) + O(1/m); minimum win rate 53.1 vs 50.0 (reward soups), β = 0.5",
    criterion="Setting A, one unit per seed at β = claim_beta: the relative dual gap β(F(λ̄) − F(λ*))/|V*| of BSMD at m = "
              "bsmd_m (the quantity the paper bounds) is below 1% (95% t interval), and the max-min value V "
              "(Eq. 3) of MPO exceeds the best cheap baseline's (π_ref, each π_k, the uniform log-linear mix, the "
              "uniform linear mixture), in units of |V*|; refuted if the gap's interval lies wholly above 1%",
    effects=[Effect("relative_dual_gap", "relative_dual_gap", direction="less", null=0.01, min_effect=0.01),
             Effect("mpo_minus_best_cheap", "mpo_minus_best_cheap")],
    preconditions=[
        at_most("exact_md_converges", "exact_md_dual_gap", 1e-3,
                "mirror descent with the exact gradient (Eq. 6), the same step size and T, reaches a relative "
                "dual gap <= 0.1%, so what is left at m = bsmd_m is the sampling error"),
        at_most("solver_equalises", "equalisation_spread", 1e-3,
                "at the exact λ* the active objectives' E[r̃_k] agree to 1e-3 |V*| (the reference optimum is one)")],
    examples=({"relative_dual_gap": [0.001, 0.002, 0.0005, 0.003], "mpo_minus_best_cheap": [0.1, 0.2, 0.15, 0.1],
               "exact_md_dual_gap": [1e-5] * 4, "equalisation_spread": [1e-6] * 4},
              {"relative_dual_gap": [0.02, 0.03, 0.025, 0.04], "mpo_minus_best_cheap": [0.1, 0.2, 0.15, 0.1],
               "exact_md_dual_gap": [1e-5] * 4, "equalisation_spread": [1e-6] * 4}),
)

COMPUTE = Claim(
    chapter="mpo", id="compute",
    paper_statement="MPO reaches that balance at a fraction of the compute of MaxMin-RLHF",
    paper_value="about 2.5 vs 10 A100-hours (≈ 1/4)",
    criterion="Setting A, one unit per seed at β = claim_beta: MPO's max-min value after its whole BSMD run (C forward passes) "
              "exceeds that of policy-gradient MaxMin-RLHF (best of its learning-rate grid) after 4C forward "
              "passes, in units of |V*| (95% t interval above 0): MaxMin-RLHF needs more than 4x MPO's compute",
    effects=[Effect("mpo_minus_pg_at_4x", "mpo_minus_pg_at_4x")],
    preconditions=[
        at_least("pg_learns", "pg_progress", 0.1,
                 "policy-gradient MaxMin-RLHF closes >= 10% of the gap from π_ref to V* within its budget (its "
                 "learning rate is not broken)")],
    examples=({"mpo_minus_pg_at_4x": [0.3, 0.5, 0.4, 0.35], "pg_progress": [0.5, 0.6, 0.4, 0.5]},
              {"mpo_minus_pg_at_4x": [-0.05, -0.02, 0.01, -0.03], "pg_progress": [0.9, 0.95, 0.9, 0.92]}),
)

SINGLE_GAIN = 0.02  # the raw-reward gain on its own objective a single-objective policy must show to count as learned
# One policy's gain on one seed is measured on lm_eval_prompts coupled samples, a standard error of about 0.013 at
# ci (calibration seeds), too close to the bar to decide per seed; the regime is judged by the mean over the seeds.
LM_OBJECTIVES = ("correct", "large answer", "even answer")  # Setting B's K = 3 rewards (see `lm_rewards`)
OWN_GAIN_KEYS = tuple(f"own_gain_{o.split()[0]}" for o in LM_OBJECTIVES)

#: the paper's minimum win rates (%) over its three objectives (Helpful Assistant, Qwen2.5-7B) of MPO and the methods
#: it is compared with, per β, as the chapter's research note gives them; not verified against the paper's text
PAPER_MIN_WIN_RATES = {0.5: {"MPO": 53.1, "Reward Soups": 50.0, "MaxMin-RLHF": 46.1},
                       0.1: {"MPO": 46.3, "Reward Soups": 44.8, "MaxMin-RLHF": 44.6}}


def smallest_paper_margin(rates=PAPER_MIN_WIN_RATES) -> float:
    """The smallest margin, over the β, by which MPO's minimum win rate beats the best compared method's (a rate)."""
    return min(r["MPO"] - max(v for name, v in r.items() if name != "MPO") for r in rates.values()) / 100


def gain_from_win_rate(margin: float) -> float:
    """A margin of win rates against π_ref as a margin of raw-reward gains: for a 0/1 reward, independent draws and
    ties counted half, the win rate is W = (1 + E_π[r] − E_π_ref[r]) / 2, so the gain is 2W − 1 and a margin ΔW of
    (minimum) win rates is 2ΔW of (worst-objective) gains."""
    return 2 * margin


MIN_EFFECT = round(gain_from_win_rate(smallest_paper_margin()), 6)  # BALANCED_LM's smallest effect of interest
HEADROOM_GRID = 3  # the headroom control's mixes: λ with weights in multiples of 1/3 (vertices and uniform included)
GRID_MIX = "max-min grid mix"  # its method name (chosen on calibration prompts, scored on the test prompts)


def _weakest_mean_gain(m) -> float:
    return float(min(np.mean(m[k]) for k in OWN_GAIN_KEYS))


def _weakest_gain_se(m) -> float:
    return float(max(np.sqrt(np.sum(np.square(m[k + "_se"]))) / len(m[k + "_se"]) for k in OWN_GAIN_KEYS))


def _mean_headroom(m) -> float:
    return float(np.mean(m["headroom"]))


BALANCED_LM = Claim(
    chapter="mpo", id="balanced_lm",
    paper_statement="MPO achieves balanced performance across diverse preferences with language models",
    paper_value="MPO has the best minimum win rate among the compared methods: 53.1 vs 50.0 (Reward Soups) at "
                "β = 0.5, 46.3 vs 44.8 at β = 0.1 (the research note's figures, not verified)",
    criterion="Setting B, one unit per seed: the worst objective's raw-reward gain over π_ref, min_k (E_π[r_k] − "
              "E_π_ref[r_k]) (twice the minimum win rate against π_ref, minus one), is larger for the per-token "
              "MPO mix than for the best single-objective policy and than for the uniform per-token mix; each "
              f"difference is reproduced when its 95% t interval lies above 0 and its estimate reaches {MIN_EFFECT:g} "
              "(the smaller of the paper's two margins of minimum win rate over the best compared method, 1.5 "
              "points at β = 0.1, as a gain: twice the margin), refuted when the interval lies wholly below "
              f"{MIN_EFFECT:g}; every method is sampled on the same held-out prompts with the same Gumbel noise, so "
              "each gain is a paired difference on coupled samples",
    effects=[Effect("mpo_minus_best_single", "mpo_minus_best_single", min_effect=MIN_EFFECT),
             Effect("mpo_minus_uniform", "mpo_minus_uniform", min_effect=MIN_EFFECT)],
    preconditions=[
        at_least("singles_learn", _weakest_mean_gain, SINGLE_GAIN,
                 f"every single-objective policy raises its own raw reward over π_ref by >= {SINGLE_GAIN:g} on "
                 f"average over the seeds (the weakest objective's mean gain)"),
        at_most("gain_resolved", _weakest_gain_se, SINGLE_GAIN / 2,
                f"the evaluation resolves that bar: the standard error of each of those mean gains (paired over "
                f"the test prompts, pooled over the seeds) is at most {SINGLE_GAIN / 2:g}, half the bar"),
        at_least("headroom", _mean_headroom, MIN_EFFECT,
                 f"a balance worth the smallest effect exists here: the per-token mix of the grid λ ∈ Δ_K (weights "
                 f"in multiples of 1/{HEADROOM_GRID}) with the best worst-objective gain on held-out calibration "
                 f"prompts of the seed beats, on its test prompts, the better of the uniform mix and the best "
                 f"single policy by >= {MIN_EFFECT:g} on average over the seeds (the same single policies, no "
                 f"training)")],
    examples=({"mpo_minus_best_single": [0.05, 0.04, 0.06], "mpo_minus_uniform": [0.04, 0.05, 0.045],
               "headroom": [0.06, 0.05, 0.07]}
              | {k: [0.1, 0.12, 0.09] for k in OWN_GAIN_KEYS} | {k + "_se": [0.013] * 3 for k in OWN_GAIN_KEYS},
              {"mpo_minus_best_single": [0.05, 0.04, 0.06], "mpo_minus_uniform": [-0.01, 0.0, -0.02],
               "headroom": [0.06, 0.05, 0.07]}
              | {k: [0.1, 0.12, 0.09] for k in OWN_GAIN_KEYS} | {k + "_se": [0.013] * 3 for k in OWN_GAIN_KEYS}),
    seed_knobs=("lm_seeds",),
)

HEADROOM_CALIBRATION = {
    "seeds": "0-2",
    "headroom": (0.0, -0.0068, -0.0010),
    "grid_minus_uniform": (0.0, 0.0010, -0.0010),
    "test_oracle_headroom": (0.0, 0.0, 0.0176),
    "test_max_min_gain": (0.0068, 0.0117, 0.0156),
    "hot_temperature": 2.0,
    "hot_seeds": "0-1",
    "hot_headroom": (-0.0234, 0.0058),
    "hot_test_oracle_headroom": (0.0020, 0.0058),
}
"""What the headroom control measured on the calibration seeds before any verdict under it, recorded as measured
(the chapter's `run_language_models` at ci; the hotter π_ref by the same functions with `lm_temperature` changed):
the headroom per seed; the grid mix over the uniform mix alone; the same with the grid's best mix chosen on the test
prompts themselves (an optimistic bound, not the control); and the best worst-objective gain of any grid mix on the
test prompts. No regime was changed after it."""

REFEREE_800 = {
    "seeds": "800-807",
    "verdict_seeds": "700-707",
    "verdict": "inconclusive",
    "book_verdict": "inconclusive",
    "failed": ("singles_learn", "headroom"),
    "singles_learn": 0.0154,
    "headroom": -0.0062,
    "grid_minus_uniform": -0.0046,
    "mpo_minus_best_single": (0.0127, -0.0018, 0.0272),
    "mpo_minus_uniform": (-0.0033, -0.0073, 0.0007),
    "effects_alone": "refuted",
}
"""A self-check after the verdict on lm_seeds 700-707 was recorded: the chapter's own functions (`language_model_runs`,
`lm_measurements`, `BALANCED_LM.decide`) at ci with only the seeds changed, to 800-807 (n = 8, 95% paired t
intervals), recorded as measured; nothing changed after it. The label held (inconclusive on both seed sets), and on
both the effects alone would be refuted on size (intervals wholly below the smallest effect)."""

REFEREE_900 = {
    "seeds": "900-907",
    "verdict_seeds": "700-707",
    "verdict": "inconclusive",
    "book_verdict": "inconclusive",
    "failed": ("headroom",),
    "singles_learn": 0.0211,
    "headroom": -0.0096,
    "grid_minus_uniform": -0.0059,
    "mpo_minus_best_single": (-0.0004, -0.0178, 0.0171),
    "mpo_minus_uniform": (-0.0060, -0.0107, -0.0012),
    "effects_alone": "refuted",
}
"""A referee with no stake, after the self-check: the chapter's build at ci from an unchanged copy with only the
lm_seeds changed, to 900-907 (n = 8, 95% paired t intervals), recorded as measured; nothing changed after it. Same
label, the same failed headroom (no seed positive), and the effects alone again refuted on size."""

# ------------------------------------------------------------------------------------------ checks of input


def check_simplex(lam, k: int | None = None) -> np.ndarray:
    """λ as an array, after checking it is a point of the simplex Δ_K (non-negative, sums to one)."""
    lam = np.asarray(lam, dtype=float)
    if lam.ndim != 1 or len(lam) == 0:
        raise ValueError(f"λ must be a non-empty 1-d weight vector, got shape {lam.shape}")
    if k is not None and len(lam) != k:
        raise ValueError(f"λ has {len(lam)} weights but there are K = {k} policies")
    if (lam < 0).any() or not np.isclose(lam.sum(), 1.0, atol=1e-8):
        raise ValueError(f"λ must lie on the simplex (λ_k ≥ 0, Σ λ_k = 1); got {lam} (sum {lam.sum():.6g})")
    return lam


def check_policies(policies, pi_ref=None) -> np.ndarray:
    """The K policies as a [K, X, Y] array, after checking K ≥ 1, equal supports and normalised rows."""
    pols = [np.asarray(p, dtype=float) for p in policies]
    if len(pols) == 0:
        raise ValueError("need at least one policy (K = 0)")
    shapes = {p.shape for p in pols} | ({np.shape(pi_ref)} if pi_ref is not None else set())
    if len(shapes) != 1:
        raise ValueError(f"policies must share one support (prompts × responses); got shapes {sorted(shapes)}")
    stack = np.stack(pols)
    for p in [stack] + ([np.asarray(pi_ref, dtype=float)] if pi_ref is not None else []):
        if (p <= 0).any() or not np.allclose(p.sum(-1), 1.0, atol=1e-8):
            raise ValueError("every policy must give each response positive probability, rows summing to 1")
    return stack


# ------------------------------------------------------------------------------------ Setting A: the method


def normalize(r, pi_ref, beta: float) -> np.ndarray:
    """Eq. (1): P(r) = r − β log E_{π_ref} exp(r/β), per prompt (last axis = responses)."""
    r, pi_ref = np.asarray(r, dtype=float), np.asarray(pi_ref, dtype=float)
    return r - beta * logsumexp(r / beta, axis=-1, b=pi_ref, keepdims=True)


def optimal_policy(pi_ref, r, beta: float) -> np.ndarray:
    """Eq. (2): the KL-regularised optimum for one reward, π_ref exp(r/β)/Z."""
    return np.asarray(pi_ref) * np.exp(normalize(r, pi_ref, beta) / beta)


def log_ratios(policies, pi_ref) -> np.ndarray:
    """log(π_k/π_ref) for every policy: a [K, X, Y] array (r̃_k/β by Eq. 2)."""
    return np.log(check_policies(policies, pi_ref)) - np.log(np.asarray(pi_ref, dtype=float))


def mixture_policy(policies, lam) -> np.ndarray:
    """Eq. (4): the log-linear mix π_λ ∝ Π_k π_k^{λ_k}, normalised per prompt."""
    stack = check_policies(policies)
    lam = check_simplex(lam, len(stack))
    return softmax(np.tensordot(lam, np.log(stack), axes=1), axis=-1)


def linear_mixture(policies, weights) -> np.ndarray:
    """Σ_k w_k π_k: the probability-space average, our stand-in for reward soups (which average weights)."""
    stack = check_policies(policies)
    return np.tensordot(check_simplex(weights, len(stack)), stack, axes=1)


def dual_objective(lam, logr, pi_ref) -> float:
    """Eq. (5): F(λ) = E_x log E_{π_ref} exp(Σ_k λ_k log(π_k/π_ref)), prompts weighted uniformly."""
    lam = check_simplex(lam, len(logr))
    return float(logsumexp(np.tensordot(lam, logr, axes=1), axis=-1, b=pi_ref).mean())


def dual_gradient(lam, logr, pi_ref) -> np.ndarray:
    """Eq. (6): ∂F/∂λ_k = E_x E_{π_λ}[log(π_k/π_ref)]."""
    lam = check_simplex(lam, len(logr))
    pi_lam = softmax(np.tensordot(lam, logr, axes=1) + np.log(pi_ref), axis=-1)
    return (pi_lam[None] * logr).sum(-1).mean(-1)


def objective_values(pi, logr, pi_ref, beta: float) -> tuple[np.ndarray, float]:
    """E_x E_{π}[r̃_k] for every k (a [K] array) and β E_x KL(π ‖ π_ref), the two parts of Eq. (3)."""
    pi = np.asarray(pi, dtype=float)
    per_k = beta * (pi[None] * logr).sum(-1).mean(-1)
    kl = beta * (pi * (np.log(pi) - np.log(pi_ref))).sum(-1).mean()
    return per_k, float(kl)


def maxmin_value(pi, logr, pi_ref, beta: float) -> float:
    """Eq. (3): V(π) = min_k E[r̃_k] − β KL(π ‖ π_ref), the worst objective minus the KL cost."""
    per_k, kl = objective_values(pi, logr, pi_ref, beta)
    return float(per_k.min() - kl)


def exact_weights(logr, pi_ref) -> np.ndarray:
    """λ* = argmin_Δ F (Eq. 5), by SLSQP on the simplex with the exact gradient (Eq. 6): the reference answer."""
    k = len(logr)
    res = minimize(lambda lam: dual_objective(_to_simplex(lam), logr, pi_ref), np.full(k, 1 / k),
                   jac=lambda lam: dual_gradient(_to_simplex(lam), logr, pi_ref), method="SLSQP",
                   bounds=[(0, 1)] * k, constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1}],
                   options={"ftol": 1e-14, "maxiter": 500})
    return _to_simplex(res.x)


def _to_simplex(lam) -> np.ndarray:
    """Clip the solver's tiny excursions (≈1e-12) back onto Δ_K."""
    lam = np.clip(np.asarray(lam, dtype=float), 0, None)
    return lam / lam.sum()


@dataclass
class BSMDResult:
    lam_bar: np.ndarray  # the averaged weights λ̄ returned by BSMD
    averages: np.ndarray  # [T, K]: λ̄ after each step (the running average)
    iterates: np.ndarray  # [T, K]: λ_t after each step
    samples_per_step: int  # responses drawn per step (prompts_per_step × m)


def bsmd_step(lam, logr_samples, eta: float) -> np.ndarray:
    """One multiplicative update, Eqs. (7)-(8), from the log-ratios [K, B, m] of m reference samples for B prompts."""
    log_w = np.tensordot(lam, logr_samples, axes=1)  # [B, m]: log Π_k (π_k/π_ref)^{λ_k}
    w = softmax(log_w, axis=-1)  # self-normalised importance weights, Eq. (7)
    v_hat = (w[None] * logr_samples).sum(-1).mean(-1)  # [K]
    log_lam = np.log(np.maximum(lam, 1e-300)) - eta * v_hat  # Eq. (8)
    return softmax(log_lam)


def step_size(logr, steps: int, step_scale: float) -> float:
    """η = step_scale · √(2 log K) / (G √T), G = max |log(π_k/π_ref)|: the textbook step of mirror descent with the
    entropy on the simplex (η = c/√T, Eq. 8), which `step_scale` multiplies."""
    k = len(logr)
    return step_scale * np.sqrt(2 * np.log(max(k, 2))) / (np.abs(logr).max() * np.sqrt(steps))


def sample_responses(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws: for each row b, the responses y with cdf[b, y-1] < u[b, j] <= cdf[b, y] ([B, Y] cdf,
    [B, m] uniforms), by one searchsorted over the rows laid end to end (row b shifted by b)."""
    n_b, n_y = cdf.shape
    shift = np.arange(n_b)[:, None]
    flat = (np.minimum(cdf, 1.0) + shift).ravel()
    idx = np.searchsorted(flat, (u + shift).ravel()).reshape(u.shape) - shift * n_y
    return np.clip(idx, 0, n_y - 1)


def bsmd(logr, pi_ref, steps: int, m: int, seed: int, step_scale: float = 1.0,
         prompts_per_step: int = 1) -> BSMDResult:
    """Batch stochastic mirror descent on F (Eqs. 7-8): each step samples `prompts_per_step` prompts and m responses
    per prompt from π_ref and takes the multiplicative step with η of `step_size`."""
    logr, pi_ref = np.asarray(logr, dtype=float), np.asarray(pi_ref, dtype=float)
    k, n_x, n_y = logr.shape
    if steps < 1 or m < 1 or prompts_per_step < 1:
        raise ValueError(f"steps, m and prompts_per_step must be ≥ 1; got {steps}, {m}, {prompts_per_step}")
    lam = np.full(k, 1 / k)
    eta = step_size(logr, steps, step_scale)
    rng = numpy_rng(seed, "bsmd", m)
    cdf = np.cumsum(pi_ref, -1)
    iterates, averages, total = np.empty((steps, k)), np.empty((steps, k)), np.zeros(k)
    for t in range(steps):
        x = rng.integers(n_x, size=prompts_per_step)
        y = sample_responses(cdf[x], rng.random((prompts_per_step, m)))  # y ~ π_ref(·|x)
        lam = bsmd_step(lam, logr[:, x[:, None], y], eta)
        total += lam
        iterates[t], averages[t] = lam, total / (t + 1)
    return BSMDResult(averages[-1], averages, iterates, prompts_per_step * m)


def exact_mirror_descent(logr, pi_ref, steps: int, step_scale: float = 1.0) -> np.ndarray:
    """Eq. (8) with the exact gradient (Eq. 6) in place of the estimate (7), the same η and T; returns λ̄. What BSMD
    would reach with m → ∞ and every prompt each step: the optimiser's own error, without the sampling error."""
    lam, total = np.full(len(logr), 1 / len(logr)), np.zeros(len(logr))
    eta = step_size(logr, steps, step_scale)
    for _ in range(steps):
        lam = softmax(np.log(np.maximum(lam, 1e-300)) - eta * dual_gradient(lam, logr, pi_ref))
        total += lam
    return total / steps


def relative_dual_gap(lam, lam_star, logr, pi_ref) -> float:
    """(F(λ) − F(λ*)) / |F(λ*)| = β(F(λ) − F*) / |V*|: the suboptimality the paper's bound is about (Eq. 5)."""
    f_star = dual_objective(lam_star, logr, pi_ref)
    return (dual_objective(lam, logr, pi_ref) - f_star) / abs(f_star)


# --------------------------------------------------------------------------------------- Setting A: the data


@dataclass
class TabularProblem:
    pi_ref: np.ndarray  # [X, Y]
    rewards: np.ndarray  # [K, X, Y]
    names: tuple[str, ...]


OBJECTIVE_NAMES = ("helpful", "harmless", "minority")


def tabular_problem(n_prompts: int, n_responses: int, seed: int) -> TabularProblem:
    """π_ref and K = 3 conflicting rewards on prompts × responses.

    Each response has two latent traits (a, b) ~ N(0, 1). "helpful" rewards a; "harmless" rewards b − 0.8a, so it
    conflicts with helpfulness; "minority" rewards only the rare responses (one in eight) that are also
    improbable under π_ref, standing for a small annotator group whose preferred answers the reference rarely writes.
    """
    rng = numpy_rng(seed, "tabular", n_prompts, n_responses)
    pi_ref = softmax(rng.normal(0, 1.0, (n_prompts, n_responses)), -1)
    a, b = rng.normal(size=(2, n_prompts, n_responses))
    rare = (rng.random((n_prompts, n_responses)) < 0.125) & (pi_ref < np.median(pi_ref, -1, keepdims=True))
    rewards = np.stack([a, b - 0.8 * a, 2.0 * rare - 0.5])
    return TabularProblem(pi_ref, rewards, OBJECTIVE_NAMES)


def single_policies(problem: TabularProblem, beta: float) -> np.ndarray:
    """Eq. (2) for every reward: the [K, X, Y] single-objective policies."""
    return np.stack([optimal_policy(problem.pi_ref, r, beta) for r in problem.rewards])


# ------------------------------------------------------------------- Setting A: MaxMin-RLHF by policy gradient

# Compute is counted in response-level forward passes of a policy-sized network (reward models assumed the same
# size; a backward pass costs two forward passes). Per sampled response:


def mpo_passes_per_sample(k: int) -> int:
    """A sample from π_ref (its log-probability comes with it) and the K policies' log-probabilities."""
    return 1 + k


def pg_passes_per_sample(k: int) -> int:
    """A sample from π_θ, its π_ref log-probability, K reward models, and a backward pass (two forwards)."""
    return 1 + 1 + k + 2


@dataclass
class PGResult:
    values: list[tuple[int, float]]  # (step, V(π_θ))
    samples_per_step: int
    lr: float
    policy: np.ndarray  # the final π_θ


def maxmin_rlhf_pg(logr, pi_ref, beta: float, steps: int, m: int, lr: float, seed: int, prompts_per_step: int = 1,
                   eval_every: int = 100) -> PGResult:
    """MaxMin-RLHF (Chakraborty et al., 2024) on tabular logits: each step samples responses from π_θ, picks the
    objective with the lowest batch mean of r̃_k, and takes a REINFORCE step (mean baseline per prompt) on
    r̃_{k*}(y) − β log(π_θ/π_ref)(y), the KL-regularised reward of that worst objective."""
    logr, pi_ref = np.asarray(logr, dtype=float), np.asarray(pi_ref, dtype=float)
    k, n_x, n_y = logr.shape
    theta = np.log(pi_ref).copy()
    rng = numpy_rng(seed, "maxmin-pg", m, lr)
    values = [(0, maxmin_value(pi_ref, logr, pi_ref, beta))]
    for t in range(1, steps + 1):
        x = rng.integers(n_x, size=prompts_per_step)
        pi = softmax(theta[x], -1)  # [B, Y]
        y = np.minimum((np.cumsum(pi, -1)[:, None, :] < rng.random((prompts_per_step, m, 1))).sum(-1), n_y - 1)
        r_tilde = beta * logr[:, x[:, None], y]  # [K, B, m]
        worst = int(r_tilde.mean((1, 2)).argmin())
        reward = r_tilde[worst] - beta * (np.log(np.take_along_axis(pi, y, -1)) - np.log(pi_ref[x[:, None], y]))
        adv = reward - reward.mean(-1, keepdims=True)
        grad = -pi * adv.sum(-1, keepdims=True)  # Σ_j adv_j (e_{y_j} − π), divided by m below
        np.add.at(grad, (np.arange(prompts_per_step)[:, None], y), adv)
        np.add.at(theta, x, lr * grad / m)
        if t % eval_every == 0 or t == steps:
            values.append((t, maxmin_value(softmax(theta, -1), logr, pi_ref, beta)))
    return PGResult(values, prompts_per_step * m, lr, softmax(theta, -1))


def pg_steps_for(cfg, k: int) -> int:
    """The policy-gradient steps that spend `pg_compute_factor` times MPO's forward passes (same samples per step)."""
    mpo_passes = cfg.bsmd_steps * mpo_passes_per_sample(k)
    return int(np.ceil(cfg.pg_compute_factor * mpo_passes / pg_passes_per_sample(k)))


def mpo_value_trajectory(result: BSMDResult, policies, logr, pi_ref, beta: float,
                         eval_every: int) -> list[tuple[int, float]]:
    """V(π_λ̄_t) along BSMD's running average (step 0: the uniform start)."""
    steps = [0] + list(range(eval_every, len(result.averages) + 1, eval_every))
    lams = [np.full(len(logr), 1 / len(logr))] + [result.averages[s - 1] for s in steps[1:]]
    return [(s, maxmin_value(mixture_policy(policies, lam), logr, pi_ref, beta)) for s, lam in zip(steps, lams)]


def baselines(problem: TabularProblem, policies) -> dict[str, np.ndarray]:
    """The cheap policies MPO is compared with: π_ref, each π_k, the uniform log-linear and linear mixtures."""
    k = len(policies)
    uniform = np.full(k, 1 / k)
    out = {"π_ref": problem.pi_ref}
    out |= {f"π_{name}": p for name, p in zip(problem.names, policies)}
    out["uniform log-linear"] = mixture_policy(policies, uniform)
    out["linear mixture (soups)"] = linear_mixture(policies, uniform)
    return out


@dataclass
class TabularRun:
    """Everything the tabular notebook plots for one (β, seed)."""

    beta: float
    problem: TabularProblem
    policies: np.ndarray
    lam_star: np.ndarray
    v_star: float
    mpo: BSMDResult  # at m = cfg.bsmd_m
    mpo_values: list[tuple[int, float]]
    exact_md_lam: np.ndarray  # λ̄ of mirror descent with the exact gradient
    pg: PGResult  # the best learning rate of the grid
    by_m: dict[int, BSMDResult]
    values: dict[str, float]  # V of every method
    per_objective: dict[str, np.ndarray]  # E[r̃_k] of every method

    @property
    def logr(self) -> np.ndarray:
        return log_ratios(self.policies, self.problem.pi_ref)

    def dual_gap(self, lam) -> float:
        """Relative dual gap of weights λ (Eq. 5): what the paper's bound is about."""
        return relative_dual_gap(lam, self.lam_star, self.logr, self.problem.pi_ref)

    def value_gap(self, lam) -> float:
        """Relative max-min value gap (V* − V(π_λ)) / |V*| (Eq. 3), beside the dual gap."""
        pi = mixture_policy(self.policies, lam)
        return (self.v_star - maxmin_value(pi, self.logr, self.problem.pi_ref, self.beta)) / abs(self.v_star)

    @property
    def equalisation_spread(self) -> float:
        """Spread of E_{π_λ*}[r̃_k] over the active objectives at λ*, in units of |V*| (0 at the exact optimum)."""
        per_k, _ = objective_values(mixture_policy(self.policies, self.lam_star), self.logr, self.problem.pi_ref,
                                    self.beta)
        return float(np.ptp(per_k[self.lam_star > 1e-6]) / abs(self.v_star))

    @property
    def pg_progress(self) -> float:
        """The share of the gap from π_ref to V* that MaxMin-RLHF closed: (V_PG − V_ref) / (V* − V_ref)."""
        v_ref = self.values["π_ref"]
        return (self.values["MaxMin-RLHF (PG)"] - v_ref) / (self.v_star - v_ref)

    @property
    def mpo_minus_best_cheap(self) -> float:
        cheap = [v for n, v in self.values.items() if n not in ("MPO", "MaxMin-RLHF (PG)")]
        return (self.values["MPO"] - max(cheap)) / abs(self.v_star)

    @property
    def mpo_minus_pg(self) -> float:
        """(V_MPO − V_PG) / |V*|, MaxMin-RLHF having spent `pg_compute_factor` times MPO's forward passes."""
        return (self.values["MPO"] - self.values["MaxMin-RLHF (PG)"]) / abs(self.v_star)


def swept(cfg) -> list[int]:
    """The verdict seeds that also run the m sweep and every β (the figures): those among `cfg.sweep_seeds`, else
    the first."""
    return [s for s in cfg.seeds if s in cfg.sweep_seeds] or list(cfg.seeds[:1])


def tabular_units(cfg) -> list[tuple[float, int]]:
    """The (β, seed) runs of Setting A: every verdict seed at `claim_beta`, and the other β on the swept seeds."""
    return [(b, s) for b in dict.fromkeys([cfg.claim_beta, *cfg.betas])
            for s in (cfg.seeds if b == cfg.claim_beta else swept(cfg))]


def run_tabular(cfg, beta: float, seed: int, sweep: bool = True) -> TabularRun:
    """Setting A for one β and seed: exact λ*, BSMD at m = `cfg.bsmd_m` and (`sweep`) at each m of `cfg.ms` (one
    declared step scale), mirror descent with the exact gradient, MaxMin-RLHF by policy gradient with `pg_compute_factor` times
    MPO's forward passes (learning rate of its grid with the highest final V: the baseline gets the best of its
    grid), and the cheap baselines."""
    problem = tabular_problem(cfg.n_prompts, cfg.n_responses, seed)
    pols = single_policies(problem, beta)
    logr = log_ratios(pols, problem.pi_ref)
    lam_star = exact_weights(logr, problem.pi_ref)
    v_star = beta * dual_objective(lam_star, logr, problem.pi_ref)
    by_m = {m: bsmd(logr, problem.pi_ref, cfg.bsmd_steps, m, seed, cfg.step_scale, cfg.prompts_per_step)
            for m in sorted(set(cfg.ms if sweep else []) | {cfg.bsmd_m})}
    result = by_m[cfg.bsmd_m]
    exact_md = exact_mirror_descent(logr, problem.pi_ref, cfg.bsmd_steps, cfg.step_scale)
    pg_steps = pg_steps_for(cfg, len(pols))
    pgs = [maxmin_rlhf_pg(logr, problem.pi_ref, beta, pg_steps, cfg.bsmd_m, lr, seed, cfg.prompts_per_step,
                          cfg.eval_every) for lr in cfg.pg_lrs]
    pg = max(pgs, key=lambda r: r.values[-1][1])
    methods = baselines(problem, pols)
    methods["MaxMin-RLHF (PG)"] = pg.policy
    methods["MPO"] = mixture_policy(pols, result.lam_bar)
    values, per_objective = {}, {}
    for name, pi in methods.items():
        values[name] = maxmin_value(pi, logr, problem.pi_ref, beta)
        per_objective[name] = objective_values(pi, logr, problem.pi_ref, beta)[0]
    return TabularRun(beta, problem, pols, lam_star, v_star, result,
                      mpo_value_trajectory(result, pols, logr, problem.pi_ref, beta, cfg.eval_every), exact_md, pg,
                      {m: by_m[m] for m in cfg.ms if m in by_m}, values, per_objective)


def tabular_measurements(runs: Sequence[TabularRun], cfg) -> dict[str, list[float]]:
    """The claims' per-run inputs, and the dual and value gaps at every m of the sweep (runs that swept m)."""
    out = {"relative_dual_gap": [r.dual_gap(r.mpo.lam_bar) for r in runs],
           "relative_value_gap": [r.value_gap(r.mpo.lam_bar) for r in runs],
           "mpo_minus_best_cheap": [r.mpo_minus_best_cheap for r in runs],
           "exact_md_dual_gap": [r.dual_gap(r.exact_md_lam) for r in runs],
           "equalisation_spread": [r.equalisation_spread for r in runs],
           "mpo_minus_pg_at_4x": [r.mpo_minus_pg for r in runs],
           "pg_progress": [r.pg_progress for r in runs]}
    for m in cfg.ms:
        out[f"dual_gap_m{m}"] = [r.dual_gap(r.by_m[m].lam_bar) for r in runs if m in r.by_m]
        out[f"value_gap_m{m}"] = [r.value_gap(r.by_m[m].lam_bar) for r in runs if m in r.by_m]
    return out


# ------------------------------------------------------------------------------- Setting B: tiny language models

IMPLIED_REWARD_PROMPTS = 256  # the implied rewards r̃_k (a figure; they decide nothing) use the first test prompts
MAX_NEW_TOKENS = 48  # the budget of reasoners.solve


def lm_rewards(problem: arithmetic.Problem, completion: str) -> np.ndarray:
    """The K = 3 conflicting rewards of a completion: the answer is right, the answer digit is ≥ 5, it is even."""
    ans = arithmetic.final_answer(completion)
    return np.array([ans == problem.answer, ans is not None and ans >= 5, ans is not None and ans % 2 == 0],
                    dtype=float)


@torch.inference_mode()
def sample_mixture(models, lam, tokenizer, prompts: Sequence[str], generator: torch.Generator) -> list[str]:
    """Sample one completion per prompt from the per-token log-linear mix of `models` with weights λ (temperature 1,
    KV-cached). λ = e_k samples π_k itself; the mix is not the sequence-level π_λ of Eq. (4), only its
    per-token approximation (the normalisers of the prefixes are ignored).

    Each token is drawn by the Gumbel-max trick, y_t = argmax_v (log p(v) + G_v) with G_v ~ Gumbel(0, 1) from
    `generator` (one draw per prompt, position and token, done prompts included): two calls whose generators start
    in the same state use the same noise, so policies sampled on the same prompts make the same choice wherever
    their distributions agree (common random numbers; the paired evaluation of `run_language_models`). Models of
    weight 0 add nothing to the mix and are not run."""
    models, lam = zip(*[(m, l) for m, l in zip(models, check_simplex(lam, len(models))) if l > 0])
    ids, mask = left_pad([tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts],
                         tokenizer.pad_token_id)
    caches, step_ids = [None] * len(models), ids
    out, done = [[] for _ in prompts], torch.zeros(len(prompts), dtype=torch.bool)
    for _ in range(MAX_NEW_TOKENS):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1]:]
        outs = [m(input_ids=step_ids, attention_mask=mask, position_ids=pos, cache=c, use_cache=True)
                for m, c in zip(models, caches)]
        caches = [o.cache for o in outs]
        logp = sum(float(l) * torch.log_softmax(o.logits[:, -1].float(), -1) for l, o in zip(lam, outs))
        u = torch.rand(logp.shape, generator=generator).clamp_min(torch.finfo(torch.float32).tiny)
        nxt = (logp - torch.log(-torch.log(u))).argmax(-1)
        for i in torch.nonzero(~done).flatten().tolist():
            out[i].append(int(nxt[i]))
            done[i] = int(nxt[i]) == tokenizer.eos_token_id
        step_ids = torch.where(done, tokenizer.pad_token_id, nxt)[:, None]
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=torch.long)], 1)
        if bool(done.all()):
            break
    return [tokenizer.decode(o, skip_special_tokens=True) for o in out]


@torch.inference_mode()
def mixture_sequence_logprobs(models, lam, tokenizer, prompts, completions) -> torch.Tensor:
    """Σ_t log π_λ(y_t | x, y_<t) of each completion (with its end token) under the per-token mix: a [B] tensor."""
    batch = encode_completions(tokenizer, prompts, completions, add_eos=True)
    logp = sum(float(l) * torch.log_softmax(m(input_ids=batch["input_ids"],
                                                attention_mask=batch["attention_mask"]).logits[:, :-1].float(), -1)
               for l, m in zip(check_simplex(lam, len(models)), models))
    logp = torch.log_softmax(logp, -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return (logp * batch["completion_mask"][:, 1:]).sum(-1)


def weighted_nll(model, batch) -> torch.Tensor:
    """Reward-weighted maximum likelihood: −Σ_i w_i log π(y_i | x_i) / Σ_i w_i, whose optimum over all policies is
    π_ref exp(r/β)/Z (Eq. 2) when the samples come from π_ref and w_i = exp(r_i/β) / Ê_{π_ref}[exp(r/β) | x_i]."""
    seq = token_logprobs(model, batch).sum(-1)
    return -(batch["weight"] * seq).sum() / batch["weight"].sum()


def finetune_single_objective(reference, tokenizer, prompts, completions, rewards, beta: float, steps: int,
                              seed: int, lr: float = 3e-3, batch_size: int = 64):
    """π_k for one reward: a copy of π_ref trained by `weighted_nll` on reference samples (`prompts`, several
    completions each, in groups), weights normalised within each prompt's group."""
    rewards = np.asarray(rewards, dtype=float)
    groups = {}
    for i, p in enumerate(prompts):
        groups.setdefault(p, []).append(i)
    weights = np.empty(len(prompts))
    for idx in groups.values():
        weights[idx] = softmax(rewards[idx] / beta) * len(idx)
    policy = copy.deepcopy(reference)
    policy.train()
    gen = torch_generator(seed, "mpo-finetune")

    rows = encode_completions(tokenizer, prompts, completions, True)  # encoded once, right-padded

    def batches():
        while True:
            idx = torch.randint(len(prompts), (batch_size,), generator=gen)
            width = int(rows["attention_mask"][idx].sum(-1).max())  # trimmed to the batch's longest row
            batch = {k: v[idx, :width] for k, v in rows.items()}
            batch["weight"] = torch.as_tensor(weights[idx.numpy()], dtype=torch.float32)
            yield batch

    train(policy, batches(), steps, lr=lr, loss_fn=weighted_nll, desc="single-objective policy")
    policy.eval()
    return policy


@dataclass
class LMRun:
    lam: np.ndarray  # MPO's λ̄
    per_objective: dict[str, np.ndarray]  # estimated E[r̃_k] = β E[log π_k/π_ref] of every method
    raw_rewards: dict[str, np.ndarray]  # mean of each raw reward (accuracy, rate of large, rate of even answers)
    reference_spread: np.ndarray  # per objective: the sd of its reward among π_ref's samples of one prompt, averaged
    gain_se: dict[str, np.ndarray]  # per objective: the standard error of raw_gain (paired over the test prompts)
    grid_lam: np.ndarray  # the headroom control's λ (`calibrated_max_min_mix`)

    def raw_gain(self, name: str) -> np.ndarray:
        """E_π[r_k] − E_π_ref[r_k] per objective: twice the win rate against π_ref minus one, for 0/1 rewards."""
        return self.raw_rewards[name] - self.raw_rewards["π_ref"]

    def min_gain(self, name: str) -> float:
        """The worst objective's raw-reward gain over π_ref (the minimum win rate, rescaled)."""
        return float(self.raw_gain(name).min())

    @property
    def best_single_min_gain(self) -> float:
        return max(self.min_gain(f"π_{o}") for o in LM_OBJECTIVES)

    @property
    def headroom(self) -> float:
        """The grid's max-min mix's worst-objective gain minus the better comparator's (uniform mix, best single)."""
        return self.min_gain(GRID_MIX) - max(self.min_gain("uniform per-token mix"), self.best_single_min_gain)

    @property
    def own_objective_gain(self) -> float:
        """The smallest gain of a single-objective policy on its own objective."""
        return float(min(self.raw_gain(f"π_{o}")[k] for k, o in enumerate(LM_OBJECTIVES)))

    def as_json(self) -> dict:
        return zoo.as_json({"lam": self.lam, "per_objective": self.per_objective, "raw_rewards": self.raw_rewards,
                            "reference_spread": self.reference_spread, "gain_se": self.gain_se,
                            "grid_lam": self.grid_lam})

    @classmethod
    def from_json(cls, d: dict) -> "LMRun":
        return cls(np.asarray(d["lam"]), {n: np.asarray(v) for n, v in d["per_objective"].items()},
                   {n: np.asarray(v) for n, v in d["raw_rewards"].items()}, np.asarray(d["reference_spread"]),
                   {n: np.asarray(v) for n, v in d["gain_se"].items()}, np.asarray(d["grid_lam"]))


def _policy_logratios(ref, policies, tokenizer, prompts, completions) -> np.ndarray:
    """log(π_k/π_ref)(y) of every (prompt, completion): a [K, N] array (sequence level, exact for the policies)."""
    base = mixture_sequence_logprobs([ref], [1.0], tokenizer, prompts, completions)
    return np.stack([(mixture_sequence_logprobs([p], [1.0], tokenizer, prompts, completions) - base).numpy()
                     for p in policies])


def reference_policy(model, temperature: float):
    """π_ref(y_t | x, y_<t) ∝ π_model(y_t | x, y_<t)^{1/T}: a copy of `model` whose output layer (untied from the
    input embeddings) is divided by the temperature T, so that its samples vary where the model's own are nearly
    fixed and every objective has something to learn from them."""
    ref = copy.deepcopy(model)
    head = ref.get_output_embeddings()
    tempered = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None).to(head.weight)
    with torch.no_grad():
        tempered.weight.copy_(head.weight / temperature)
        if head.bias is not None:
            tempered.bias.copy_(head.bias / temperature)
    ref.set_output_embeddings(tempered)
    ref.config.tie_word_embeddings = False
    return ref.eval()


def single_objective_policies(cfg, seed: int, ref, tok, gen: torch.Generator):
    """The training problems, π_ref's `lm_samples` samples of each with their rewards ([N, K]), and the K
    single-objective policies fine-tuned on them by reward-weighted likelihood (Eq. 2)."""
    train_problems = arithmetic.sample_problems(cfg.lm_prompts, seed, max_ops=cfg.lm_max_ops, stream="mpo-train")
    rows = [p for p in train_problems for _ in range(cfg.lm_samples)]
    prompts = [p.prompt for p in rows]
    completions = sample_mixture([ref], [1.0], tok, prompts, gen)
    rewards = np.stack([lm_rewards(p, c) for p, c in zip(rows, completions)])
    policies = [finetune_single_objective(ref, tok, prompts, completions, rewards[:, k], cfg.lm_beta,
                                          cfg.lm_finetune_steps, seed + 1000 * k, lr=cfg.lm_lr,
                                          batch_size=cfg.lm_batch_size) for k in range(len(LM_OBJECTIVES))]
    return train_problems, rewards, policies


def raw_scores(problems, mix, weights, tok, generator: torch.Generator) -> np.ndarray:
    """One sample per problem from the per-token mix (`sample_mixture`) and its K raw rewards: a [problems, K] array."""
    ys = sample_mixture(mix, weights, tok, [p.prompt for p in problems], generator)
    return np.stack([lm_rewards(p, y) for p, y in zip(problems, ys)])


def score_methods(cfg, seed: int, ref, tok, policies, methods: dict) -> tuple[dict, dict, dict]:
    """Every method (name -> (models, λ)) sampled once on each of `lm_eval_prompts` held-out prompts, the same
    prompts and the same Gumbel noise for every method: the estimated E[r̃_k] (on the first test prompts), the mean
    raw rewards, and the standard error of each method's raw gain over π_ref, paired over the prompts."""
    test = arithmetic.sample_problems(cfg.lm_eval_prompts, seed, max_ops=cfg.lm_max_ops, stream="mpo-test")
    test_prompts, few = [p.prompt for p in test], slice(IMPLIED_REWARD_PROMPTS)
    per_objective, scores = {}, {}
    for name, (mix, weights) in methods.items():
        ys = sample_mixture(mix, weights, tok, test_prompts, torch_generator(seed, "mpo-eval"))  # common noise
        per_objective[name] = cfg.lm_beta * _policy_logratios(ref, policies, tok, test_prompts[few], ys[few]).mean(-1)
        scores[name] = np.stack([lm_rewards(p, y) for p, y in zip(test, ys)])  # [prompts, K]
    raw = {name: r.mean(0) for name, r in scores.items()}
    gain_se = {name: (r - scores["π_ref"]).std(0, ddof=1) / np.sqrt(len(test)) for name, r in scores.items()}
    return per_objective, raw, gain_se


def simplex_grid(k: int, n: int) -> np.ndarray:
    """Every λ ∈ Δ_K whose weights are multiples of 1/n: a [C(n + K − 1, K − 1), K] array in lexicographic order,
    the vertices among them (and, for n = K, the uniform λ)."""
    return np.array([c for c in itertools.product(range(n + 1), repeat=k) if sum(c) == n], dtype=float) / n


def max_min_mix(lams: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """The row of `lams` whose worst-objective gain (the min over a row of `gains`, [mixes, K]) is the largest (the
    first of ties)."""
    return lams[int(np.argmax(gains.min(-1)))]


def calibrated_max_min_mix(cfg, seed: int, ref, tok, policies) -> np.ndarray:
    """The headroom control's λ: among the per-token mixes of `simplex_grid` (weights in multiples of
    1/`HEADROOM_GRID`), the one with the largest worst-objective raw gain over π_ref on `lm_calib_prompts`
    calibration problems of the seed, a stream apart from the training and test problems (every mix with the same
    Gumbel noise). It reuses the single-objective policies: no training."""
    cal = arithmetic.sample_problems(cfg.lm_calib_prompts, seed, max_ops=cfg.lm_max_ops, stream="mpo-calib")
    lams = simplex_grid(len(policies), HEADROOM_GRID)
    reference = raw_scores(cal, [ref], [1.0], tok, torch_generator(seed, "mpo-calib-eval"))
    gains = np.stack([(raw_scores(cal, policies, lam, tok, torch_generator(seed, "mpo-calib-eval")) - reference)
                      .mean(0) for lam in lams])
    return max_min_mix(lams, gains)


def singles_only(cfg, seed: int) -> dict[str, np.ndarray]:
    """What the calibration of Setting B's regime reads (on `calibration_seeds` only): each single-objective
    policy's raw gain over π_ref on its own objective, and its standard error, without BSMD or the mixes."""
    z = models.get(cfg.model, cfg.scale, 0, alphabet=arithmetic.ALPHABET)
    ref, tok = reference_policy(z.model, cfg.lm_temperature), z.tokenizer
    _, _, policies = single_objective_policies(cfg, seed, ref, tok, torch_generator(seed, "mpo-lm"))
    methods = {"π_ref": ([ref], [1.0])} | {f"π_{o}": ([p], [1.0]) for o, p in zip(LM_OBJECTIVES, policies)}
    _, raw, se = score_methods(cfg, seed, ref, tok, policies, methods)
    return {"own_gain": np.array([raw[f"π_{o}"][k] - raw["π_ref"][k] for k, o in enumerate(LM_OBJECTIVES)]),
            "own_gain_se": np.array([se[f"π_{o}"][k] for k, o in enumerate(LM_OBJECTIVES)])}


def run_language_models(cfg, seed: int) -> LMRun:
    """Setting B for one seed: π_ref = the `model` knob's LM (the zoo's arithmetic draft at smoke and ci; any causal
    LM's folder or Hub id through :func:`icml25.core.models.get`) at temperature `lm_temperature`, on problems of at
    most `lm_max_ops` operations; K = 3 single-objective policies fine-tuned by reward-weighted likelihood on
    reference samples; λ̄ by BSMD (Eqs. 7-8, the declared step scale) on a fresh pool of `lm_bsmd_m` reference
    samples per training prompt; then every method scored on held-out prompts by :func:`score_methods` (the same
    prompts and the same Gumbel noise for every method, so each gain over π_ref is a paired difference on coupled
    samples); beside them the headroom control's mix (`calibrated_max_min_mix`)."""
    z = models.get(cfg.model, cfg.scale, 0, alphabet=arithmetic.ALPHABET)
    ref, tok = reference_policy(z.model, cfg.lm_temperature), z.tokenizer
    gen = torch_generator(seed, "mpo-lm")
    train_problems, rewards, policies = single_objective_policies(cfg, seed, ref, tok, gen)
    # BSMD on a pool of m reference samples per prompt
    pool_prompts = [p.prompt for p in train_problems for _ in range(cfg.lm_bsmd_m)]
    pool = sample_mixture([ref], [1.0], tok, pool_prompts, gen)
    logr = _policy_logratios(ref, policies, tok, pool_prompts, pool).reshape(len(policies), cfg.lm_prompts,
                                                                           cfg.lm_bsmd_m)
    uniform_ref = np.full((cfg.lm_prompts, cfg.lm_bsmd_m), 1 / cfg.lm_bsmd_m)  # the pool as an empirical π_ref
    lam = bsmd(logr, uniform_ref, cfg.lm_bsmd_steps, cfg.lm_bsmd_m, seed, cfg.step_scale, 1).lam_bar
    k = len(policies)
    methods = {"π_ref": ([ref], [1.0])}
    methods |= {f"π_{name}": ([p], [1.0]) for name, p in zip(LM_OBJECTIVES, policies)}
    methods["uniform per-token mix"] = (policies, np.full(k, 1 / k))
    methods["MPO"] = (policies, lam)
    grid_lam = calibrated_max_min_mix(cfg, seed, ref, tok, policies)
    methods[GRID_MIX] = (policies, grid_lam)
    per_objective, raw, gain_se = score_methods(cfg, seed, ref, tok, policies, methods)
    spread = rewards.reshape(cfg.lm_prompts, cfg.lm_samples, -1).std(1).mean(0)
    return LMRun(lam, per_objective, raw, spread, gain_se, grid_lam)


#: the knobs Setting B reads (the rest of the config is Setting A's)
LM_KNOBS = ("lm_seeds", "lm_prompts", "lm_samples", "lm_finetune_steps", "lm_batch_size", "lm_lr", "lm_beta",
            "lm_temperature", "lm_max_ops", "lm_eval_prompts", "lm_calib_prompts", "lm_bsmd_steps", "lm_bsmd_m",
            "step_scale", "model", "scale")


def language_model_runs(cfg) -> tuple[list[LMRun], bool]:
    """:func:`run_language_models` on every seed of `lm_seeds`, and whether it was computed now. With the zoo's
    draft as π_ref it is cached like a zoo model (`icml25.core.zoo.results`, addressed by the knobs of
    `LM_KNOBS`, the draft's zoo address and this module's code), so the book's builder computes it in its warm-up
    and the notebook reads it back; any other `model` (a folder or a Hub id, whose weights the address could not
    see) is computed in place, every time."""
    def compute():
        return [run.as_json() for run in (run_language_models(cfg, s) for s in cfg.lm_seeds)]

    if cfg.model not in zoo.names():
        runs, now = zoo.as_json(compute()), True
    else:
        settings = {k: cfg[k] for k in LM_KNOBS} | {"reference": zoo.key(cfg.model, cfg.scale, 0)}
        runs, now = zoo.results("mpo-lm-runs", settings, compute, sources=(inspect.getmodule(LMRun),))
    return [LMRun.from_json(r) for r in runs], now


def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry): Setting B's runs, when
    π_ref is the zoo's draft (another checkpoint is left to notebook 02)."""
    if cfg.model in zoo.names():
        language_model_runs(cfg)


def lm_measurements(runs: Sequence[LMRun]) -> dict[str, list[float]]:
    """BALANCED_LM's per-seed inputs."""
    return {"mpo_minus_best_single": [r.min_gain("MPO") - r.best_single_min_gain for r in runs],
            "mpo_minus_uniform": [r.min_gain("MPO") - r.min_gain("uniform per-token mix") for r in runs],
            "own_objective_gain": [r.own_objective_gain for r in runs],
            **{key: [r.raw_gain(f"π_{o}")[k] for r in runs] for k, (key, o) in enumerate(zip(OWN_GAIN_KEYS, LM_OBJECTIVES))},
            **{key + "_se": [r.gain_se[f"π_{o}"][k] for r in runs]
               for k, (key, o) in enumerate(zip(OWN_GAIN_KEYS, LM_OBJECTIVES))},
            "mpo_min_gain": [r.min_gain("MPO") for r in runs],
            "headroom": [r.headroom for r in runs],
            "grid_minus_uniform": [r.min_gain(GRID_MIX) - r.min_gain("uniform per-token mix") for r in runs],
            "grid_minus_best_single": [r.min_gain(GRID_MIX) - r.best_single_min_gain for r in runs]}
