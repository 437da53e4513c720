"""The supermodel's quality, Eq. 4: the expected maximum of a Gaussian vector (Clark's closed form for two,
quasi-Monte Carlo beyond), tabulated for every (models run, candidate set) pair of a query."""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import ndtri
from scipy.stats import norm, qmc

from ..core.seeding import derive_seed
from .benchmark import Estimates, _check_finite


def expected_max_two(mu1, mu2, var1, var2, cov12=0.0):
    """Clark's closed form for E[max(X1, X2)] of a bivariate Gaussian:
    ``μ1 Φ(a) + μ2 Φ(−a) + θ φ(a)`` with ``θ² = σ1² + σ2² − 2 cov`` and ``a = (μ1 − μ2)/θ``."""
    mu1, mu2 = np.asarray(mu1, float), np.asarray(mu2, float)
    theta = np.sqrt(np.maximum(var1 + var2 - 2 * cov12, 0.0))
    if np.all(theta == 0):
        return np.maximum(mu1, mu2)
    a = (mu1 - mu2) / np.where(theta > 0, theta, 1.0)
    out = mu1 * norm.cdf(a) + mu2 * norm.cdf(-a) + theta * norm.pdf(a)
    return np.where(theta > 0, out, np.maximum(mu1, mu2))


@functools.lru_cache(maxsize=64)
def gaussian_samples(n_dims: int, n_samples: int, seed: int = 0) -> np.ndarray:
    """Standard-normal quasi-Monte Carlo points (scrambled Sobol, mapped through Φ⁻¹), made antithetic:
    the second half is the negated first half, so every coordinate's sample mean is exactly 0. Drawn once per
    arguments (a cell's two splits share them) and read-only."""
    if n_samples < 2 or n_samples % 2:
        raise ValueError(f"n_samples must be an even number >= 2, got {n_samples}")
    u = qmc.Sobol(n_dims, scramble=True, seed=derive_seed(seed, "sobol", n_dims)).random(n_samples // 2)
    z = ndtri(np.clip(u, 1e-12, 1 - 1e-12))
    out = np.concatenate([z, -z])
    out.setflags(write=False)
    return out


def _sqrt_psd(cov: np.ndarray) -> np.ndarray:
    """A matrix L with L Lᵀ = cov, for any positive semi-definite cov (eigendecomposition, negatives clipped)."""
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    return v * np.sqrt(np.clip(w, 0, None))


def expected_max(mu, cov, n_samples: int | None = None, seed: int = 0) -> np.ndarray:
    """E[max_k X_k] for X ~ N(mu, cov); `mu` may be batched (..., K) with one shared (K, K) `cov`.

    K = 1: the mean. K = 2 and no `n_samples`: Clark's closed form. Otherwise quasi-Monte Carlo with
    antithetic scrambled-Sobol points (default 128), which never falls below ``max(mu)`` (Jensen, since
    the sample mean of the noise is exactly 0)."""
    mu = np.asarray(mu, float)
    cov = np.atleast_2d(np.asarray(cov, float))
    k = mu.shape[-1]
    if cov.shape != (k, k):
        raise ValueError(f"cov has shape {cov.shape}, expected ({k}, {k}) to match mu's last axis")
    _check_finite("mu", mu)
    _check_finite("cov", cov)
    if k == 1:
        return mu[..., 0]
    if k == 2 and n_samples is None:
        return expected_max_two(mu[..., 0], mu[..., 1], cov[0, 0], cov[1, 1], cov[0, 1])
    x = gaussian_samples(k, n_samples or 128, seed) @ _sqrt_psd(cov).T  # (S, K)
    return (mu[..., None, :] + x).max(-1).mean(-1)


@functools.cache
def config_index(run: int, cand: int, n_models: int) -> int:
    """Ternary code of a (run ⊆ candidate) pair of bitmasks: digit 0 not in T, 1 in T and run, 2 in T not run."""
    return sum((1 if run >> k & 1 else 2 if cand >> k & 1 else 0) * 3 ** k for k in range(n_models))


def _members(mask: int, n_models: int) -> list[int]:
    """The models of a bitmask, in cost order."""
    return [j for j in range(n_models) if mask >> j & 1]


def supermodel_table(est: Estimates, n_samples: int = 32, seed: int = 0, max_depth: int | None = None
                     ) -> np.ndarray:
    """(3^K, N) table of q̂(T | S) = E[max_{m∈T} Q_m] where Q_m is the post-hoc estimate for run models (known)
    and N(q̂_pre, Σ) jointly for the others (Eq. 4). One shared set of QMC points makes every row a sample
    average over the same draws, so the table is exactly monotone and submodular in T (which pruning uses).
    Rows of sets larger than `max_depth` are never read by a strategy of that depth and stay −∞ (for the
    eleven-member pool this skips most of the 3^11 rows)."""
    n, k = est.pre.shape
    x = gaussian_samples(k, n_samples, seed) @ _sqrt_psd(est.cov).T  # (S, K) correlated noise of unrun models
    table = np.full((3 ** k, n), -np.inf, dtype=np.float32 if k > 8 else float)
    depth = k if max_depth is None else max_depth
    for unrun_set in range(2 ** k):  # each unrun set's draws once, for every run set beside it
        unrun = _members(unrun_set, k)
        if len(unrun) > depth:
            continue
        draws = (est.pre[:, None, unrun] + x[None, :, unrun]).max(-1) if unrun else None  # (N, S)
        rest = ((1 << k) - 1) & ~unrun_set
        run_set = rest
        while True:  # every subset of the models not in the unrun set
            run = _members(run_set, k)
            if (run or unrun) and len(run) + len(unrun) <= depth:
                code = config_index(run_set, run_set | unrun_set, k)
                best_run = est.post[:, run].max(1) if run else np.full(n, -np.inf)
                table[code] = best_run if draws is None else np.maximum(draws, best_run[:, None]).mean(1)
            if not run_set:
                break
            run_set = (run_set - 1) & rest
    return table
