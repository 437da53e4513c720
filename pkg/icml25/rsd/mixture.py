"""The one-step mixture of Eqs. (1)-(3) on a categorical toy, and the brute-force check of the threshold's
optimality among acceptance sets of equal draft mass."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ..core.seeding import numpy_rng


def _check_categorical(p_draft, p_target, reward) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p_m, p_big, r = (np.asarray(x, dtype=float) for x in (p_draft, p_target, reward))
    if not (p_m.shape == p_big.shape == r.shape and p_m.ndim == 1 and len(p_m)):
        raise ValueError(f"p_draft, p_target and reward must be 1-d of one length, got {p_m.shape}, "
                         f"{p_big.shape}, {r.shape}")
    for name, p in (("p_draft", p_m), ("p_target", p_big)):
        if (p < 0).any() or not np.isclose(p.sum(), 1.0):
            raise ValueError(f"{name} must be a probability vector (non-negative, sums to 1); got {p}")
    return p_m, p_big, r


def mixture(p_draft, p_target, reward, threshold: float) -> np.ndarray:
    """P_RSD of a one-step categorical, Eqs. (1)-(2): 1{r ≥ δ}·P_draft + P_draft(r < δ)·P_target."""
    p_m, p_big, r = _check_categorical(p_draft, p_target, reward)
    omega = (r >= threshold).astype(float)  # Eq. (2)
    nu = float(((1 - omega) * p_m).sum())  # ν: the draft mass that is rejected, i.e. the rate of target calls
    return omega * p_m + nu * p_big  # Eq. (1)


def sample_rsd_categorical(p_draft, p_target, reward, threshold: float, n: int, seed: int) -> np.ndarray:
    """`n` outcomes drawn the way RSD draws them: y ~ P_draft; keep it if r(y) ≥ δ, else draw y ~ P_target."""
    p_m, p_big, r = _check_categorical(p_draft, p_target, reward)
    rng = numpy_rng(seed, "rsd-toy")
    proposal = rng.choice(len(p_m), size=n, p=p_m)
    fallback = rng.choice(len(p_big), size=n, p=p_big)
    return np.where(r[proposal] >= threshold, proposal, fallback)


def expected_reward(p_draft, p_target, reward, accept: Sequence[bool]) -> float:
    """Eq. (3): the expected reward of RSD that keeps the draft outcomes in the acceptance set `accept`."""
    p_m, p_big, r = _check_categorical(p_draft, p_target, reward)
    s = np.asarray(accept, dtype=bool)
    return float((p_m * r)[s].sum() + p_m[~s].sum() * (p_big * r).sum())


def acceptance_sets(n: int):
    """Every subset of n outcomes, as boolean masks (2^n of them: fine for the toy's n = 8)."""
    for bits in itertools.product((False, True), repeat=n):
        yield np.array(bits)


def brute_force_best(p_draft, p_target, reward, draft_mass: float, tol: float = 1e-9) -> tuple[float, np.ndarray]:
    """The largest Eq. (3) over all acceptance sets S with P_draft(S) = `draft_mass`, and a set achieving it."""
    p_m = np.asarray(p_draft, dtype=float)
    best, best_set = -np.inf, None
    for s in acceptance_sets(len(p_m)):
        if abs(p_m[s].sum() - draft_mass) <= tol:
            v = expected_reward(p_draft, p_target, reward, s)
            if v > best + tol:
                best, best_set = v, s
    if best_set is None:
        raise ValueError(f"no acceptance set has draft mass {draft_mass}")
    return best, best_set
