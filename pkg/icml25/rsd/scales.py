"""RSD's settings at each scale and the constants its decoding shares."""

from __future__ import annotations

from ..core import arithmetic, tinylm
from ..core.config import COUNT, FRACTION, POSITIVE, SEED, make_config, one_of


DELIMITER = arithmetic.STEP_DELIMITER
MAX_STEPS = 48  # a safety cap; every step writes at least one token, so MAX_NEW_TOKENS ends a row first
MAX_NEW_TOKENS = 48  # the same budget as reasoners.solve
PATIENCE = 5  # the official code's batch-level patience: rounds without a newly finished problem before it stops

DRAFT_MODEL, TARGET_MODEL = "arith-draft", "arith-target"  # the zoo's pair (smoke and ci)
#: the noisy oracle flips each verdict with this probability; with symmetric flips its ROC AUC is 1 − ε = 0.9,
#: the quality the learned PRM reached on the calibration seeds (0.93), and above the PRM-quality bar below
NOISY_EPSILON = 0.1

# Verdict seeds are fresh for contract v2: the pairs of seeds 0-2 decided the earlier rounds and the pair's design
# and this chapter's settings were chosen on them (the referee's 3 and 4 were seen too); any seed list works.
config = make_config({
    "smoke": {"draft_model": DRAFT_MODEL, "target_model": TARGET_MODEL, "seeds": [100], "calibration_seeds": [0],
              "n_test": 24, "deltas": [0.5, 0.7], "delta": 0.7, "epsilon": NOISY_EPSILON, "gamma": 4,
              "bon_n": 3, "target_bon_n": 1, "bon_temperature": 1.0, "patience": PATIENCE, "prm_preset": "nano",
              "prm_problems": 100, "prm_steps": 20, "prm_eval_problems": 30, "toy_samples": 20000},
    "ci": {"draft_model": DRAFT_MODEL, "target_model": TARGET_MODEL, "seeds": [100, 101, 102],
           "calibration_seeds": [0, 1, 2, 3, 4], "n_test": 200, "deltas": [0.3, 0.5, 0.7, 0.9, 0.97], "delta": 0.7,
           "epsilon": NOISY_EPSILON,
           "gamma": 4, "bon_n": 6, "target_bon_n": 2, "bon_temperature": 1.0, "patience": PATIENCE,
           "prm_preset": "nano", "prm_problems": 1500, "prm_steps": 300, "prm_eval_problems": 200,
           "toy_samples": 100000},
    "full": {"draft_model": "Qwen/Qwen2.5-Math-1.5B-Instruct", "target_model": "Qwen/Qwen2.5-Math-7B-Instruct",
             "seeds": list(range(100, 108)), "calibration_seeds": [0, 1, 2, 3, 4], "n_test": 500,
             "deltas": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95], "delta": 0.7, "epsilon": NOISY_EPSILON, "gamma": 4, "bon_n": 16, "target_bon_n": 4, "bon_temperature": 1.0,
             "patience": PATIENCE, "prm_preset": "micro", "prm_problems": 5000, "prm_steps": 1000,
             "prm_eval_problems": 500, "toy_samples": 1000000},
},
    seeds=SEED, calibration_seeds=SEED, n_test=COUNT, deltas=FRACTION, delta=FRACTION, epsilon=FRACTION, gamma=COUNT, bon_n=COUNT,
    target_bon_n=COUNT, bon_temperature=POSITIVE, patience=COUNT, prm_preset=one_of(*tinylm.PRESETS),
    prm_problems=COUNT, prm_steps=COUNT, prm_eval_problems=COUNT, toy_samples=COUNT)
