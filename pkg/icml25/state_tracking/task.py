"""The task, the word problem of S_n: actions a_1 … a_T, states s_t = a_1 · … · a_t (by a sequential fold, or by the
Hillis–Steele scan the AA mechanism resembles), and their parity."""

from __future__ import annotations

import numpy as np
import torch

from .group import _check_n, cayley_table, elements, parity_table

def _check_length(length: int) -> int:
    if not isinstance(length, (int, np.integer)) or length <= 0:
        raise ValueError(f"sequence length must be a positive integer, got {length!r}")
    return int(length)


def sample_actions(n: int, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """A [batch, length] tensor of action indices drawn uniformly from all n! permutations."""
    _check_length(length)
    return torch.randint(len(elements(_check_n(n))), (batch, length), generator=generator)


def state_sequence(actions: torch.Tensor, n: int) -> torch.Tensor:
    """The states s_t = a_1 · … · a_t (indices), by a sequential fold over t: one Cayley-table lookup per step."""
    table = cayley_table(_check_n(n))
    state = torch.zeros(actions.shape[0], dtype=torch.long)  # the identity
    out = torch.empty_like(actions)
    for t in range(actions.shape[1]):
        state = table[state, actions[:, t]]
        out[:, t] = state
    return out


def parallel_prefix_product(actions: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    """The same states by the Hillis–Steele scan the AA mechanism resembles: in round r every position t ≥ 2^r
    composes the product of its block with the block ending 2^r earlier, x_t ← x_{t-2^r} · x_t, so after
    ⌈log₂ T⌉ rounds x_t = s_t. Returns (states, number of rounds)."""
    table = cayley_table(_check_n(n))
    x, step, rounds = actions.clone(), 1, 0
    while step < x.shape[1]:
        x = torch.cat([x[:, :step], table[x[:, :-step], x[:, step:]]], dim=1)
        step, rounds = step * 2, rounds + 1
    return x, rounds


def scan_blocks(length: int) -> list[list[tuple[int, int]]]:
    """For drawing the scan: after each Hillis–Steele round, the block [lo, t] (1-based) whose product x_t holds."""
    _check_length(length)
    blocks, step = [[(t, t) for t in range(1, length + 1)]], 1
    while step < length:
        blocks.append([(max(1, t - 2 * step + 1), t) for t in range(1, length + 1)])
        step *= 2
    return blocks


def parity_of_states(states: torch.Tensor, n: int, colouring: torch.Tensor | None = None) -> torch.Tensor:
    """ε of each state index (or its class under `colouring`, a 2-colouring by element index)."""
    return (parity_table(n) if colouring is None else colouring)[states]
