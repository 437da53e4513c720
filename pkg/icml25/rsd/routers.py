"""The content-blind baselines of the `threshold_matters` claims: routers that choose which steps the target writes
from where a step lies (the problem's number of operations k, read from its prompt, and the step's index j in the
solution), never from what the step says. A referee showed that such a router beats random acceptance at the same
rate, so beating random acceptance does not show that a PRM's reward matters; beating the strongest such router
does. Both are scored like a PRM, so that Eq. (2)'s rule runs them unchanged; both are programs (no FLOPs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..core import arithmetic
from ..core.seeding import derive_seed, numpy_rng
from .decoding import budget_rule
from .prms import _step_index


def _positions(problems: Sequence[arithmetic.Problem], prefixes: Sequence[str]) -> list[tuple[int, int]]:
    return [(p.n_steps, _step_index(x)) for p, x in zip(problems, prefixes, strict=True)]


class PositionRouter:
    """The declared baseline: r(k, j) = the share of the draft's steps at position (k, j) that the exact checker
    found right on the held-out calibration split (the one that sets δ; the split's overall share for a position
    it lacks). It knows where the draft errs on average, not whether this step is wrong: the strongest of the
    content-blind routers tried on calibration seeds 0-4 (`scales.ROUTER_CALIBRATION`)."""

    name = "position router"
    model = None

    def __init__(self, right: dict[tuple[int, int], float], overall: float):
        self.right, self.overall = right, overall

    @classmethod
    def fit(cls, problems: Sequence[arithmetic.Problem], prefixes: Sequence[str],
            labels: Sequence[float]) -> "PositionRouter":
        """The router of a labelled split: `labels[i]` = 1 when step i is right."""
        cells: dict[tuple[int, int], list[float]] = {}
        for pos, y in zip(_positions(problems, prefixes), labels, strict=True):
            cells.setdefault(pos, []).append(float(y))
        return cls({pos: float(np.mean(ys)) for pos, ys in cells.items()}, float(np.mean(labels)))

    def score(self, problems: Sequence[arithmetic.Problem], prefixes: Sequence[str], steps: Sequence[str]):
        return np.array([self.right.get(pos, self.overall) for pos in _positions(problems, prefixes)])


class LengthRouter:
    """The strongest label-free router tried on calibration seeds 0-4, reported beside the declared one: it sends
    whole problems to the target, the longest first, r = −(k + u) with u uniform in [0, 1) per problem (drawn from
    `seed` and the prompt), so problems of one length are taken in a random order."""

    name = "length router"
    model = None

    def __init__(self, seed: int):
        self.seed = seed

    def score(self, problems: Sequence[arithmetic.Problem], prefixes: Sequence[str], steps: Sequence[str]):
        return np.array([-(p.n_steps + numpy_rng(self.seed, "length-router", p.prompt).random())
                         for p in problems])


def step_positions(problems: Sequence[arithmetic.Problem]) -> tuple[list, list[str], list[str]]:
    """Every step position of `problems` as (problems, prefixes, steps) for a router to score: the true chain's
    prefixes stand for the position (a router reads only the problem and the step's index), the steps are empty."""
    rows = [(p, "".join(p.steps()[:k])) for p in problems for k in range(len(p.steps()))]
    return [p for p, _ in rows], [x for _, x in rows], [""] * len(rows)


def router_rule(router, problems: Sequence[arithmetic.Problem], share: float,
                seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """A router's rule at a target-call `share` (`budget_rule`): its cut δ and tie split are set on the step
    positions of the batch's own problems (known from the prompts, no step read), so that it sends a `share` of
    them to the target, the share at which RSD called the target on the same problems."""
    return budget_rule(router.score(*step_positions(problems)), share, derive_seed(seed, "router-ties"))
