"""The group S_n: its elements, their composition and parity ε, the Cayley table, and the null control's
shuffled parity."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import lru_cache

import torch

from ..core.seeding import numpy_rng

SUPPORTED_N = (3, 5)


def _check_n(n: int) -> int:
    if n not in SUPPORTED_N:
        raise ValueError(f"unsupported group S_{n!r}; supported: " + ", ".join(f"S_{k}" for k in SUPPORTED_N))
    return n


@lru_cache(maxsize=None)
def elements(n: int) -> tuple[tuple[int, ...], ...]:
    """The n! permutations of (0, …, n-1) in lexicographic order; index 0 is the identity."""
    return tuple(itertools.permutations(range(_check_n(n))))


def compose(state: Sequence[int], action: Sequence[int]) -> tuple[int, ...]:
    """Apply `action` to the arrangement `state`: new[j] = state[action[j]] (the object at slot action[j] moves
    to slot j), so the state after a_1 … a_t is the product s_{t-1} · a_t."""
    return tuple(state[i] for i in action)


def parity(perm: Sequence[int]) -> int:
    """ε(perm): the number of inversions mod 2 (0 even, 1 odd)."""
    return sum(1 for i in range(len(perm)) for j in range(i + 1, len(perm)) if perm[i] > perm[j]) % 2


def n_cycles(perm: Sequence[int]) -> int:
    seen, count = set(), 0
    for start in range(len(perm)):
        if start not in seen:
            count += 1
            j = start
            while j not in seen:
                seen.add(j)
                j = perm[j]
    return count


@lru_cache(maxsize=None)
def cayley_table(n: int) -> torch.Tensor:
    """table[i, k] = index of elements[i] · elements[k] (an n! × n! int64 tensor)."""
    els = elements(n)
    index = {p: i for i, p in enumerate(els)}
    return torch.tensor([[index[compose(a, b)] for b in els] for a in els], dtype=torch.long)


@lru_cache(maxsize=None)
def parity_table(n: int) -> torch.Tensor:
    """ε of every element, by index."""
    return torch.tensor([parity(p) for p in elements(n)], dtype=torch.long)


@lru_cache(maxsize=None)
def shuffled_parity(n: int) -> torch.Tensor:
    """The null control's stand-in for ε: a fixed balanced 2-colouring of the n! elements drawn at random among
    those that are not the parity (nor its complement). It is not a homomorphism, so it plays no part in any
    algorithm for the word problem; the AA/PAA pipeline read against it must find no parity-first run."""
    sign, rng = parity_table(_check_n(n)), numpy_rng(0, "state_tracking", "shuffled_parity")
    while True:
        colouring = torch.as_tensor(rng.permutation(len(sign)) % 2, dtype=torch.long)
        if not (torch.equal(colouring, sign) or torch.equal(colouring, 1 - sign)):
            return colouring


def perm_word(perm: Sequence[int]) -> str:
    """The token of a permutation, written 1-based like the paper's data ('213' swaps the first two objects)."""
    return "".join(str(i + 1) for i in perm)
