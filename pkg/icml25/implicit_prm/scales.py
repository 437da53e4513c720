"""The chapter's models and settings: the generator, π_ref, the zoo PRM's presets and the experiment's knobs at
each scale."""

from __future__ import annotations

from ..core.config import COUNT, POSITIVE, SEED, Range, make_config, one_of


CHAPTER = "implicit_prm"
GENERATOR = "arith-draft"  # samples the test candidates
BASE = "arith-target"  # π_ref of the trained PRMs, π_θ's initialisation and the sampler of their training responses
FULL_BASE = "meta-llama/Llama-3.2-1B-Instruct"  # the `model` knob at full (icml25.core.fullplan's choice)
PRM_NAME = "implicit-prm"  # this chapter's zoo entry: the CE-trained implicit PRM (reusable by other chapters)
VOTE_COEF = 0.001  # the official evaluation's scale of the log-ratios (its `coef`), used for σ-weighted votes

# Settings of the zoo PRM (the main CE model); the chapter config holds them plus the experiment's knobs. Every PRM
# trains `train_steps` steps, the one on one response per instruction included (a fixed budget, as the paper's
# fixed epochs; the step labels decide nothing about training). At ci the budget is 300 steps: on the calibration
# seeds (0-4), with π_ref's own rollouts, the within-prompt training step AUC passed `LEARNED_STEP_AUC` by step
# 100-150 while the held-out step AUC was still rising until step 300, so the earlier rule that stopped at the
# first check past the bound stopped too early. At the paper's β = 0.05 the budget is unchanged: on 1800-1807 the
# main PRM's training step AUC was undefined on every seed (the reading meant to leave out the one-response PRM's
# trained texts left out all of the main PRM's, so nothing was read: `evaluation.learning_metrics`, now fixed), not
# low. Re-checked after those verdicts, on calibration seed 0 (the other calibration seeds' runs did not finish on a
# shared machine): at lr 1e-3 the main PRM passed `LEARNED_STEP_AUC` by step 60 (0.87 at step 300) and the
# one-response PRM read 0.86; lr 2e-3 (β·lr as at β = 0.1) gave 0.86 and 0.85, no gain, so lr stays 1e-3.
# After the verdicts on 1900-1907 (the one-response PRM's step precondition held on 5 of 8 seeds), its budget was
# measured against that precondition alone on calibration seeds 0-4 (`calibration.ONE_RESPONSE_BUDGET`, 300 to 900
# steps): no budget reached the bound on every seed, the share the precondition asks held only at 450 steps (4 of 5,
# not at 600 or 900), and each seed's reading has a standard error over its prompts larger than the budgets' mean
# differences. The budget is not what keeps this precondition near its bound, so it stays the main PRM's. (Seed 0
# read 0.825 there at 300 steps, not the 0.86 above; where the difference comes from was not traced.) That
# precondition then gave way to a positive control, the main PRM's step regime (`claims`), whose reading on the
# calibration seeds is `calibration.MAIN_PRM_CALIBRATION`; the budget did not change.
_PRM = {
    "smoke": dict(ref_seed=0, model=BASE, beta=0.05, n_prompts=60, responses_per_prompt=2, temperature=1.0,
                  train_steps=10, batch_size=16, lr=3e-3),
    "ci": dict(ref_seed=0, model=BASE, beta=0.05, n_prompts=200, responses_per_prompt=4, temperature=1.0,
               train_steps=300, batch_size=32, lr=1e-3),
    "full": dict(ref_seed=0, model=FULL_BASE, beta=0.05, n_prompts=4000, responses_per_prompt=8, temperature=1.0,
                 train_steps=1000, batch_size=64, lr=1e-3),
}
# fresh: 100-102, 200-207, 300-307, 500-507, 1500-1507, a referee's 1700-1707, 1800-1807 and 1900-1907 were seen
# in earlier rounds (1900-1907 decided the round before `one_response`'s step precondition became the main PRM's,
# a positive control: `claims`)
VERDICT_SEEDS = list(range(2700, 2708))
_ARMS = dict(objectives=["ce", "dpo", "kto", "nca"], betas=[0.02, 0.1, 0.5], arm_seeds=VERDICT_SEEDS[:1])
# The evaluation regime (declared with the claims, from the referee's probes on seeds 0-2, the calibration seeds,
# to which seeds 3-4 were added to choose the training budget): test problems of <= 3 operations, where the draft's
# right answers have right steps, candidates sampled at T = 1.5 so that they mix right and wrong steps, claims read
# at best-of-4.
_EVAL = dict(calibration_seeds=[0, 1, 2, 3, 4], test_max_ops=3, candidate_temperature=1.5, claim_n=4, verifier_noise=0.2)
PRESETS = {
    "smoke": dict(_PRM["smoke"], **_ARMS, **_EVAL, seeds=VERDICT_SEEDS[:1], n_test=20, n_candidates=4, best_of=[1, 4],
                  tabular_vocab=3, tabular_length=3),
    # ci trains only the two CE PRMs the claims read (a PRM from the target costs ~0.1 s a step on one core): the
    # other objectives, the β sweep and the draft-based arm run at smoke (code path) and at full.
    "ci": dict(_PRM["ci"], **dict(_ARMS, arm_seeds=[]), **_EVAL, seeds=VERDICT_SEEDS, n_test=100, n_candidates=16,
               best_of=[1, 4, 16], tabular_vocab=3, tabular_length=4),
    "full": dict(_PRM["full"], **dict(_ARMS, arm_seeds=VERDICT_SEEDS), **_EVAL, seeds=VERDICT_SEEDS,
                 n_test=500, n_candidates=64, best_of=[1, 4, 16, 64], tabular_vocab=4, tabular_length=5),
}

SEEDS_OF_NO_CLAIM = ("arm_seeds",)
"""Seed lists of the config that decide no claim (the seeds that also train the other objectives, β values and
starting model, shown beside the claims but deciding none). Every other `*_seeds` list is named by a claim's
`seed_knobs`, so the ledger records it."""

config = make_config(
    PRESETS, ref_seed=SEED, beta=POSITIVE, n_prompts=COUNT, responses_per_prompt=COUNT,
    temperature=POSITIVE, train_steps=COUNT, batch_size=COUNT,
    lr=POSITIVE, objectives=one_of("ce", "dpo", "kto", "nca"), betas=POSITIVE,
    arm_seeds=SEED, seeds=SEED, calibration_seeds=SEED, test_max_ops=COUNT, candidate_temperature=POSITIVE,
    claim_n=COUNT, verifier_noise=Range(ge=0, le=1), n_test=COUNT, n_candidates=COUNT, best_of=COUNT, tabular_vocab=Range(ge=2),
    tabular_length=COUNT)
PRM_KEYS = tuple(_PRM["ci"])
