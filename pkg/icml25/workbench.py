"""The opening chapter: the two arithmetic reasoners of the zoo, their training, calibration and cost.

The chapter has no claim: that the target beats the draft is a property of the pair's design, shown as its
calibration table (`reasoners.CALIBRATION`, which the reasoning chapters check as preconditions), not a paper's
statement to decide."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import reasoners, zoo
from .core.config import COUNT, SEED, make_config

MODELS = ("arith-draft", "arith-target")

# The pair shown is the one the chapters built on the shared reasoners start from (seed 0: implicit_prm, ple, mpo,
# hybrid_winrate, lora_init, model_swarms), so the table is the calibration of the models they use and costs no
# training of its own; `calibration_seeds` are the seeds the pair's design (stop rule, sizes) was chosen on. (The
# rsd chapter decides on a pair of its own, `icml25.rsd.pair`, with its own declared calibration.)
config = make_config({
    "smoke": {"seeds": [0], "calibration_seeds": [0], "n_test": 40},
    "ci": {"seeds": [0], "calibration_seeds": [0, 1, 2], "n_test": 500},
    "full": {"seeds": [0], "calibration_seeds": [0, 1, 2], "n_test": 2000},
},
    seeds=SEED, calibration_seeds=SEED, n_test=COUNT)

def train_reasoners(cfg) -> dict[str, list[zoo.ZooModel]]:
    """Both zoo reasoners for every seed of `cfg` (trained once, then loaded from the cache)."""
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
