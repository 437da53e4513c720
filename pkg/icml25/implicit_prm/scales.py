"""The chapter's models and settings: the generator, π_ref, the zoo PRM's presets and the experiment's knobs at
each scale."""

from __future__ import annotations

from ..core.config import COUNT, POSITIVE, SEED, Range, make_config, one_of


CHAPTER = "implicit_prm"
GENERATOR = "arith-draft"  # samples the training responses and the test candidates
BASE = "arith-target"  # π_ref of the trained PRMs and π_θ's initialisation
FULL_BASE = "meta-llama/Llama-3.2-1B-Instruct"  # the `model` knob at full (icml25.core.fullplan's choice)
PRM_NAME = "implicit-prm"  # this chapter's zoo entry: the CE-trained implicit PRM (reusable by other chapters)
VOTE_COEF = 0.001  # the official evaluation's scale of the log-ratios (its `coef`), used for σ-weighted votes

# Settings of the zoo PRM (the main CE model); the chapter config holds them plus the experiment's knobs.
# `train_steps` is the most every PRM trains (a PRM on one response per instruction has the same budget: with a
# quarter of the steps it was never checked after step 50 and missed the learned bound on every seed); it stops at
# the first check (every `eval_every` steps) where its within-prompt step AUC on the first
# `check_responses` training responses reaches `LEARNED_STEP_AUC` (see `train_implicit_prm`). At ci the check reads
# all 800 training responses (the precondition's measure) and the budget is 300 steps: on the calibration seeds
# (0-2) a check on the first 256 responses stopped a PRM that missed the bound on all of them, and 100 steps were
# not enough to reach it.
_PRM = {
    "smoke": dict(ref_seed=0, model=BASE, beta=0.1, n_prompts=60, responses_per_prompt=2, temperature=1.0,
                  train_steps=10, eval_every=5, check_responses=32, batch_size=16, lr=3e-3),
    "ci": dict(ref_seed=0, model=BASE, beta=0.1, n_prompts=200, responses_per_prompt=4, temperature=1.0,
               train_steps=300, eval_every=50, check_responses=800, batch_size=32, lr=1e-3),
    "full": dict(ref_seed=0, model=FULL_BASE, beta=0.1, n_prompts=4000, responses_per_prompt=8, temperature=1.0,
                 train_steps=1000, eval_every=100, check_responses=2000, batch_size=64, lr=1e-3),
}
_ARMS = dict(objectives=["ce", "dpo", "kto", "nca"], betas=[0.02, 0.1, 0.5], arm_seeds=[100])
# The evaluation regime (declared with this round's claims, from the referee's probes on seeds 0-2, the calibration
# seeds): test problems of <= 3 operations, where the draft's right answers have right steps, candidates sampled at
# T = 1.5 so that they mix right and wrong steps, claims read at best-of-4.
_EVAL = dict(calibration_seeds=[0, 1, 2], test_max_ops=3, candidate_temperature=1.5, claim_n=4, verifier_noise=0.2)
PRESETS = {
    "smoke": dict(_PRM["smoke"], **_ARMS, **_EVAL, seeds=[100], n_test=20, n_candidates=4, best_of=[1, 4],
                  tabular_vocab=3, tabular_length=3),
    # ci trains only the two CE PRMs the claims read (a PRM from the target costs ~0.1 s a step on one core): the
    # other objectives, the β sweep and the draft-based arm run at smoke (code path) and at full.
    "ci": dict(_PRM["ci"], **dict(_ARMS, arm_seeds=[]), **_EVAL, seeds=list(range(500, 508)), n_test=100, n_candidates=16,
               best_of=[1, 4, 16], tabular_vocab=3, tabular_length=4),
    "full": dict(_PRM["full"], **dict(_ARMS, arm_seeds=list(range(100, 108))), **_EVAL, seeds=list(range(100, 108)),
                 n_test=500, n_candidates=64, best_of=[1, 4, 16, 64], tabular_vocab=4, tabular_length=5),
}
config = make_config(
    PRESETS, ref_seed=SEED, beta=POSITIVE, n_prompts=COUNT, responses_per_prompt=COUNT,
    temperature=POSITIVE, train_steps=COUNT, eval_every=COUNT, check_responses=COUNT, batch_size=COUNT,
    lr=POSITIVE, objectives=one_of("ce", "dpo", "kto", "nca"), betas=POSITIVE,
    arm_seeds=SEED, seeds=SEED, calibration_seeds=SEED, test_max_ops=COUNT, candidate_temperature=POSITIVE,
    claim_n=COUNT, verifier_noise=Range(ge=0, le=1), n_test=COUNT, n_candidates=COUNT, best_of=COUNT, tabular_vocab=Range(ge=2),
    tabular_length=COUNT)
PRM_KEYS = tuple(_PRM["ci"])
