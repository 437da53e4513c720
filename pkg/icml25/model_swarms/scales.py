"""The chapter's settings per scale and its calibration seeds."""

from __future__ import annotations

from ..core.config import COUNT, SEED, Range, make_config

CHAPTER = "model_swarms"


# Calibration seeds: the hyperparameter tuning's dev sets (`tune_seeds`) and the searches seen before this design
# (0-4 decided the previous verdicts, 5-9 were the referee's probes). The verdict seeds are fresh (from 200).
CALIBRATION_SEEDS = list(range(10)) + [100, 101, 102]


SEEDS_OF_NO_CLAIM = ("ablation_seeds",)
"""Seed lists of the config that decide no claim (the ablations' seeds: a figure, no claim). Every other `*_seeds`
list is named by a claim's `seed_knobs`, so the ledger records it."""

config = make_config({
    "smoke": {"model": "arith-draft", "seeds": [200, 201], "calibration_seeds": CALIBRATION_SEEDS,
              "n_particles": 6, "max_iteration": 3, "patience": 3, "n_dev": 200, "low_n_dev": 50,
              "n_test": 200, "n_train": 200, "expert_steps": 20, "rank": 4, "ablation_seeds": [200],
              "n_own_test": 100, "tune_configs": 2, "tune_seeds": [100]},
    "ci": {"model": "arith-draft", "seeds": list(range(200, 208)), "calibration_seeds": CALIBRATION_SEEDS,
           "n_particles": 20, "max_iteration": 20, "patience": 5, "n_dev": 200, "low_n_dev": 50,
           "n_test": 1000, "n_train": 1000, "expert_steps": 200, "rank": 16, "ablation_seeds": [200, 201, 202],
           "n_own_test": 500, "tune_configs": 6, "tune_seeds": [100, 101]},
    "full": {"model": "google/gemma-2-2b-it", "seeds": list(range(200, 216)), "calibration_seeds": CALIBRATION_SEEDS,
             "n_particles": 20, "max_iteration": 50, "patience": 10, "n_dev": 200, "low_n_dev": 50,
             "n_test": 5000, "n_train": 10000, "expert_steps": 500, "rank": 8, "ablation_seeds": list(range(200, 205)),
             "n_own_test": 2000, "tune_configs": 20, "tune_seeds": [100, 101, 102]},
},
    seeds=SEED, calibration_seeds=SEED, low_n_dev=COUNT, n_particles=Range(ge=2), max_iteration=COUNT, patience=COUNT, n_dev=COUNT, n_test=COUNT,
    n_train=COUNT, expert_steps=COUNT, rank=COUNT, ablation_seeds=SEED, n_own_test=COUNT, tune_configs=COUNT,
    tune_seeds=SEED)
