"""The opening chapter: the two arithmetic reasoners of the zoo, their training, calibration and cost."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import reasoners, zoo
from .core.claims import Claim, Effect
from .core.config import COUNT, SEED, make_config

MODELS = ("arith-draft", "arith-target")

config = make_config({
    "smoke": {"seeds": [0], "n_test": 40},
    "ci": {"seeds": [0, 1, 2], "n_test": 500},
    "full": {"seeds": [0, 1, 2, 3, 4], "n_test": 2000},
},
    seeds=SEED, n_test=COUNT)

_CALIBRATED = {"cost_ratio": [0.12] * 3, "draft_step_accuracy": [0.85] * 3, "target_accuracy": [0.9] * 3}

LARGER_IS_BETTER = Claim(
    chapter="workbench", id="target-beats-draft",
    paper_statement="The larger 'target' reasoner (at least 8x the draft's FLOPs per token) is clearly more "
                    "accurate than the small 'draft', even on the chain lengths the draft was trained on",
    paper_value="design goal: a draft right on most single steps, a target right on 85-95% of the test mix",
    criterion="Per training seed, on the test problems within the draft's training mix: the target's "
              "final-answer accuracy minus the draft's is above 0 (95% t interval); refuted if wholly below +5 "
              "points. Preconditions: the reasoners' calibration (reasoners.CALIBRATION)",
    effects=[Effect("target_minus_draft", "target_minus_draft_seen", min_effect=0.05)],
    preconditions=list(reasoners.CALIBRATION),
    examples=(_CALIBRATED | {"target_minus_draft_seen": [0.15, 0.2, 0.18]},
              _CALIBRATED | {"target_minus_draft_seen": [0.0, -0.01, 0.01]}),
)


def train_reasoners(cfg) -> dict[str, list[zoo.ZooModel]]:
    """Both zoo reasoners for every seed of `cfg` (trained once, then loaded from the cache). Seed 0 of both
    comes first: it is the pair the other chapters wait for."""
    runs = {name: [] for name in MODELS}
    for s in cfg.seeds:
        for name in MODELS:
            runs[name].append(zoo.get(name, cfg.scale, s))
    return runs


def evaluate(cfg) -> list[dict]:
    """The calibration of every seed's pair (`reasoners.calibration`) on `cfg.n_test` held-out problems, with the
    target-minus-draft accuracy on the problems within the draft's training mix."""
    problems = reasoners.test_problems(cfg.n_test)
    seen = reasoners.DRAFT[cfg.scale]["max_ops"]
    out = []
    for s in cfg.seeds:
        c = reasoners.calibration(cfg.scale, s, problems)
        counts = {k: sum(p.n_steps == k for p in problems) for k in c["draft_by_ops"] if k <= seen}
        gap = sum((c["target_by_ops"][k] - c["draft_by_ops"][k]) * n for k, n in counts.items()) / sum(counts.values())
        out.append(c | {"target_minus_draft_seen": gap})
    return out


def claim_measurements(calibrations: Sequence[dict]) -> dict:
    """The workbench claim's measurements: one value per seed."""
    keys = ("cost_ratio", "draft_step_accuracy", "target_accuracy", "draft_accuracy", "target_minus_draft_seen")
    return {k: [float(c[k]) for c in calibrations] for k in keys}


def by_ops_table(calibrations: Sequence[dict], name: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Accuracy of `name` ("draft" or "target") by number of operations: the counts, mean and sd over seeds."""
    steps = sorted(calibrations[0][f"{name}_by_ops"])
    table = np.array([[c[f"{name}_by_ops"][k] for k in steps] for c in calibrations])
    return steps, table.mean(0), table.std(0)


def smooth(values: Sequence[float], window: int = 20) -> np.ndarray:
    """Moving average of a loss curve (shorter at the start, so the curve keeps its length)."""
    v = np.asarray(values, dtype=float)
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)
