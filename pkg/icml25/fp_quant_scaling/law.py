"""The paper's unified law (Table 2 constants) and what follows from it: the critical data size, the optimal
exponent/mantissa split and the cost-optimal precision."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LawParams:
    """The constants of the law (the paper's Table 2 names)."""

    n: float
    alpha: float
    d: float
    beta: float
    eps: float
    gamma: float
    delta: float
    nu: float


PAPER = LawParams(n=69.2343, alpha=0.2368, d=68973.0621, beta=0.5162, eps=1.9061, gamma=11334.5197,
                  delta=3.1926, nu=2.9543)  # Table 2
CHANNEL_LOG2B = 13.1567  # the paper: channel-wise scaling acts like a block with log2 B of about 13.16


def _check_format(E, M, B) -> None:
    for name, value, low, rule in (("exponent bits E", E, 1, ">= 1"), ("mantissa bits M", M, 0, ">= 0")):
        if value is None or np.min(value) < low:
            raise ValueError(f"{name} must be {rule}, got {value if np.ndim(value) == 0 else np.min(value)}")
    if B is None or np.min(B) <= 0:
        raise ValueError(f"block size B must be > 0, got {B if np.ndim(B) == 0 else np.min(B)}")


def precision_term(E, M, B, p: LawParams = PAPER):
    r"""$\log_2 B / (\gamma (E+0.5)^\delta (M+0.5)^\nu)$: the format's part of the quantisation term of the law."""
    _check_format(E, M, B)
    E, M, B = (np.asarray(v, dtype=float) for v in (E, M, B))
    return np.log2(B) / (p.gamma * (E + 0.5) ** p.delta * (M + 0.5) ** p.nu)


def law_loss(N, D, E=None, M=None, B=None, p: LawParams = PAPER):
    """The unified law; `E=None` is full precision (no quantisation term). Broadcasts over array arguments."""
    N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
    base = p.n / N**p.alpha + p.d / D**p.beta + p.eps
    if E is None:
        return base
    return base + D**p.beta / N**p.alpha * precision_term(E, M, B, p)


def critical_data_size(N, E, M, B, p: LawParams = PAPER):
    r"""$D_{crit} = [d\gamma N^\alpha (E+0.5)^\delta (M+0.5)^\nu / \log_2 B]^{1/(2\beta)}$ : where
    $\partial L / \partial D = 0$; beyond it more tokens raise the loss."""
    return (p.d * np.asarray(N, dtype=float) ** p.alpha / precision_term(E, M, B, p)) ** (1 / (2 * p.beta))


def optimal_mantissa(total_bits, p: LawParams = PAPER):
    r"""$M_{opt} = \nu P / (\delta + \nu) - 0.5$ with $P = E + M + 1$: the real-valued mantissa width that
    minimises the quantisation term at a fixed number of bits (sign included)."""
    return p.nu * np.asarray(total_bits, dtype=float) / (p.delta + p.nu) - 0.5


def best_layout(total_bits: int, p: LawParams = PAPER) -> tuple[int, int]:
    """The integer (E, M) with E + M + 1 = `total_bits`, E >= 1, that minimises the quantisation term."""
    if total_bits < 2:
        raise ValueError(f"need at least 2 bits (sign and one exponent bit), got {total_bits}")
    layouts = [(e, total_bits - 1 - e) for e in range(1, total_bits)]
    return min(layouts, key=lambda em: float(precision_term(em[0], em[1], 2, p)))


def cost_optimal_precision(compute, B: int = 128, k: float = 6 / 16, p: LawParams = PAPER,
                           bits=np.linspace(3, 16, 261)):
    r"""The precision P (bits, real-valued) minimising the law at a fixed cost $C = k\,P\,N\,D$ (our reading of
    the paper's cost model, $k = 6/16$), with the real-valued optimal (E, M) split and the best N at each P."""
    E = (p.delta * bits / (p.delta + p.nu) - 0.5)[:, None]
    M = optimal_mantissa(bits, p)[:, None]
    logN = np.linspace(3, 16, 1301)[None, :]
    N = 10.0**logN
    D = compute / (k * bits[:, None] * N)
    loss = law_loss(N, D, E, np.maximum(M, 0), B, p)
    best = np.unravel_index(np.argmin(loss), loss.shape)
    return float(bits[best[0]])
