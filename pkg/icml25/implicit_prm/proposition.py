"""The Proposition, exactly, on an enumerable model: q^t = Σ_{i ≤ t} β · log π_θ/π_ref equals
β · log E_{π_ref(y | y_≤t)} exp(r_θ(y) / β) for every sequence and prefix."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..core.seeding import numpy_rng


class TabularLM:
    """An autoregressive model over `vocab` symbols and sequences of exactly `length`, with an arbitrary
    (random) next-symbol distribution for every prefix: small enough to enumerate every sequence."""

    def __init__(self, vocab: int, length: int, seed: int, concentration: float = 1.0):
        rng = numpy_rng(seed, "tabular")
        self.vocab, self.length = vocab, length
        self.table = {prefix: rng.dirichlet([concentration] * vocab)
                      for t in range(length) for prefix in itertools.product(range(vocab), repeat=t)}

    def logprob(self, y: Sequence[int], start: int = 0) -> float:
        """log π(y_start..y_end | y_<start)."""
        return float(sum(np.log(self.table[tuple(y[:i])][y[i]]) for i in range(start, len(y))))

    def sequences(self):
        return itertools.product(range(self.vocab), repeat=self.length)


def implicit_q(policy: TabularLM, reference: TabularLM, y: Sequence[int], t: int, beta: float) -> float:
    """Left side of the Proposition: q^t = Σ_{i<t} β·log π_θ(y_i|y_<i)/π_ref(y_i|y_<i) (first t symbols)."""
    return beta * sum(policy.logprob(y[:i + 1], i) - reference.logprob(y[:i + 1], i) for i in range(t))


def expected_exp_reward(policy: TabularLM, reference: TabularLM, y: Sequence[int], t: int, beta: float) -> float:
    """Right side of the Proposition: β·log E_{π_ref(y'|y_≤t)} exp(r_θ(y_≤t, y')/β), by enumerating every
    continuation y' of the first t symbols, with r_θ = β·log π_θ/π_ref of the full sequence (Eq. 1)."""
    prefix = tuple(y[:t])
    terms = []
    for tail in itertools.product(range(reference.vocab), repeat=reference.length - t):
        full = prefix + tail
        reward = beta * (policy.logprob(full) - reference.logprob(full))
        terms.append(reference.logprob(full, t) + reward / beta)
    return beta * float(np.logaddexp.reduce(terms))


def proposition_table(policy: TabularLM, reference: TabularLM, beta: float) -> np.ndarray:
    """Both sides of the Proposition for every sequence y and every prefix length t ≥ 1: rows (lhs, rhs)."""
    return np.array([(implicit_q(policy, reference, y, t, beta), expected_exp_reward(policy, reference, y, t, beta))
                     for y in reference.sequences() for t in range(1, reference.length + 1)])
