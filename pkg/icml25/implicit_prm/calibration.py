"""Measured on the calibration seeds only: the one-response PRM's training budget (how its training step AUC,
`evaluation.learning_metrics`, moves with the number of optimizer steps), and the main CE PRM's training step AUC,
`one_response`'s positive control since the verdicts on seeds 1900-1907."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from .evaluation import learning_metrics
from .training import main_prm, reference, train_implicit_prm, training_rollouts

_FIELDS = ("seed", "steps", "lr", "outcome_auc", "step_auc", "step_auc_se", "prompts", "seconds")

# `one_response_learning` at ci (lr 1e-3, β 0.05, batch 32, 200 prompts, one response each), on calibration seeds
# 0-4 only, after the verdicts on 1900-1907 (where this precondition held on 5 of 8 seeds at 300 steps). The
# paper trains one epoch whatever the data, which at ci would give the one-response PRM a quarter of the main PRM's
# steps; the 100-step row is that budget's neighbour. Seconds are one run's training on a shared 2-core machine.
ONE_RESPONSE_BUDGET = [
    dict(zip(_FIELDS, row))
    for row in (
        (0, 100, 1e-3, 0.997, 0.756, None, None, 3.5),
        (0, 300, 1e-3, 1.0, 0.825, 0.042, 52, 10.1),
        (0, 450, 1e-3, 1.0, 0.822, 0.044, 52, 14.7),
        (0, 600, 1e-3, 1.0, 0.823, 0.039, 52, 17.1),
        (0, 900, 1e-3, 1.0, 0.843, 0.039, 52, 23.8),
        (1, 300, 1e-3, 1.0, 0.791, 0.044, 62, 8.4),
        (1, 450, 1e-3, 1.0, 0.822, 0.038, 62, 11.9),
        (1, 600, 1e-3, 1.0, 0.818, 0.040, 62, 19.4),
        (1, 900, 1e-3, 1.0, 0.863, 0.031, 62, 26.5),
        (2, 300, 1e-3, 1.0, 0.730, 0.045, 63, 8.1),
        (2, 450, 1e-3, 1.0, 0.772, 0.042, 63, 12.6),
        (2, 600, 1e-3, 1.0, 0.750, 0.042, 63, 18.3),
        (2, 900, 1e-3, 1.0, 0.785, 0.039, 63, 29.2),
        (3, 300, 1e-3, 1.0, 0.854, 0.032, 66, 8.3),
        (3, 450, 1e-3, 1.0, 0.820, 0.038, 66, 12.3),
        (3, 600, 1e-3, 1.0, 0.848, 0.035, 66, 19.1),
        (3, 900, 1e-3, 1.0, 0.821, 0.038, 66, 28.9),
        (4, 300, 1e-3, 1.0, 0.740, 0.044, 71, 8.2),
        (4, 450, 1e-3, 1.0, 0.802, 0.035, 71, 12.2),
        (4, 600, 1e-3, 1.0, 0.775, 0.038, 71, 19.4),
        (4, 900, 1e-3, 1.0, 0.772, 0.039, 71, 30.1),
    )
]


# `main_prm_learning` at ci (the zoo PRM's settings: 300 steps, lr 1e-3, β 0.05, batch 32, 200 prompts × 4
# responses), on calibration seeds 0-4 only, after the verdicts on 1900-1907 and before any run on the verdict
# seeds that decide the re-posed `one_response`: the positive control's reading and its standard error over the
# prompts with a right and a wrong step. Seconds are the PRM's training on a shared 2-core machine.
MAIN_PRM_CALIBRATION = [
    dict(zip(_FIELDS, row))
    for row in (
        (0, 300, 1e-3, 0.993, 0.866, 0.028, 104, 15.3),
        (1, 300, 1e-3, 0.993, 0.918, 0.022, 102, 15.7),
        (2, 300, 1e-3, 0.995, 0.853, 0.028, 110, 15.7),
        (3, 300, 1e-3, 0.991, 0.834, 0.031, 109, 14.9),
        (4, 300, 1e-3, 0.997, 0.846, 0.030, 112, 16.1),
    )
]


def one_response_learning(cfg, seed: int, budgets: Sequence[int]) -> list[dict]:
    """For each number of optimizer steps in `budgets`, a CE PRM trained from `cfg.model` on the first response to
    each of seed `seed`'s training prompts (as the experiment's `ce_n1` arm, at `cfg`'s β, batch and learning rate;
    each budget is a run of its own, since the learning-rate schedule spans the run), read as its claim reads it:
    the training-set outcome AUC and the mean within-prompt step AUC over the other responses to its prompts, with
    that mean's standard error over the prompts and their number. Rows have :data:`ONE_RESPONSE_BUDGET`'s fields."""
    ref = reference(cfg, cfg.model)
    data = training_rollouts(ref, cfg, seed)
    rows = []
    for steps in budgets:
        start = time.perf_counter()
        prm, _ = train_implicit_prm(ref.reference, ref.tokenizer, data.first(1), "ce", cfg.beta, steps,
                                    cfg.batch_size, cfg.lr, seed, ref_cache=ref)
        seconds = time.perf_counter() - start
        m = learning_metrics(prm, data, 1)
        rows.append(dict(zip(_FIELDS, (seed, steps, cfg.lr, round(m["outcome_auc"], 3), round(m["step_auc"], 3),
                                       round(m["step_auc_se"], 3), m["step_auc_prompts"], round(seconds, 1)))))
    return rows


def budget_summary(rows: Sequence[dict], bound: float, share: float) -> list[dict]:
    """Per budget measured on more than one seed: how many seeds' step AUC reach `bound`, whether that is the
    `share` of seeds the precondition asks, the lowest and mean step AUC and the mean standard error."""
    out = []
    for steps in sorted({r["steps"] for r in rows}):
        at = [r for r in rows if r["steps"] == steps]
        if len(at) < 2:
            continue
        auc = np.array([r["step_auc"] for r in at])
        passed = int((auc >= bound).sum())
        out.append({"steps": steps, "seeds": len(at), "reach_bound": passed, "gate_holds": passed >= share * len(at),
                    "lowest": float(auc.min()), "mean": float(auc.mean()),
                    "mean_se": float(np.mean([r["step_auc_se"] for r in at]))})
    return out


def main_prm_learning(cfg, seed: int) -> dict:
    """The main CE PRM of seed `seed` (every response to the training prompts, `cfg.train_steps` steps: the zoo PRM
    when `cfg` has the zoo's settings), read as `one_response`'s positive control reads it (`learning_metrics` on
    every response it trained on). Seconds are the PRM's training, or its load when the zoo has it."""
    ref = reference(cfg, cfg.model)
    data = training_rollouts(ref, cfg, seed)
    start = time.perf_counter()
    prm, _ = main_prm(cfg, seed, data, ref)
    seconds = time.perf_counter() - start
    m = learning_metrics(prm, data)
    return dict(zip(_FIELDS, (seed, cfg.train_steps, cfg.lr, round(m["outcome_auc"], 3), round(m["step_auc"], 3),
                              round(m["step_auc_se"], 3), m["step_auc_prompts"], round(seconds, 1))))
