"""The opening chapter: the two arithmetic reasoners of the zoo, their training, accuracy and cost."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .core import arithmetic, reasoners, zoo
from .core.claims import Claim
from .core.config import make_config

MODELS = ("arith-draft", "arith-target")

config = make_config({
    "smoke": {"seeds": [0], "n_test": 40},
    "ci": {"seeds": [0, 1, 2], "n_test": 500},
    "full": {"seeds": [0, 1, 2, 3, 4], "n_test": 2000},
})

LARGER_IS_BETTER = Claim(
    chapter="workbench", id="target-beats-draft",
    paper_statement="The larger 'target' reasoner is clearly more accurate than the small 'draft' (the premise of "
                    "the reasoning chapters)",
    paper_value="draft about 50%, target about 90% (design goal)",
    criterion="On every training seed the target's final-answer accuracy exceeds the draft's by at least 20 points",
    test=lambda m: all(t - d >= 0.20 for d, t in zip(m["draft_accuracy"], m["target_accuracy"], strict=True)),
)


def train_reasoners(cfg) -> dict[str, list[zoo.ZooModel]]:
    """Both zoo reasoners for every seed of `cfg` (trained once, then loaded from the cache). Seed 0 of both
    comes first: it is the pair the other chapters wait for."""
    runs = {name: [] for name in MODELS}
    for s in cfg.seeds:
        for name in MODELS:
            runs[name].append(zoo.get(name, cfg.scale, s))
    return runs


def accuracy_by_steps(problems: Sequence[arithmetic.Problem], correct: Sequence[bool]) -> dict[int, float]:
    out = {}
    for k in sorted({p.n_steps for p in problems}):
        hits = [c for p, c in zip(problems, correct) if p.n_steps == k]
        out[k] = sum(hits) / len(hits)
    return out


def evaluate(runs: dict[str, list[zoo.ZooModel]], cfg) -> dict[str, dict]:
    """Greedy final-answer accuracy on `cfg.n_test` held-out problems: overall per seed, and by chain length
    (mean and standard deviation over seeds)."""
    problems = reasoners.test_problems(cfg.n_test)
    out = {}
    for name, models in runs.items():
        per_seed, by_steps = [], []
        for z in models:
            solutions = reasoners.solve(z.model, z.tokenizer, problems)
            correct = [arithmetic.is_correct(p, s) for p, s in zip(problems, solutions)]
            per_seed.append(sum(correct) / len(correct))
            by_steps.append(accuracy_by_steps(problems, correct))
        steps = sorted(by_steps[0])
        table = np.array([[b[k] for k in steps] for b in by_steps])
        out[name] = {"accuracy": per_seed, "by_steps": (steps, table.mean(0), table.std(0))}
    return out


def smooth(values: Sequence[float], window: int = 20) -> np.ndarray:
    """Moving average of a loss curve (shorter at the start, so the curve keeps its length)."""
    v = np.asarray(values, dtype=float)
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)
