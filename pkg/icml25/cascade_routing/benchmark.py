"""A synthetic RouterBench: queries, models of geometric cost, and the paper's noisy estimators."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from ..core.seeding import numpy_rng
from .scales import CHAPTER, NOISE_LEVELS


def _check_finite(name: str, x: np.ndarray) -> None:
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite values")


@dataclass(frozen=True)
class Pool:
    """True per-query outcomes of K models ordered by cost: `quality` (N, K) in {0, 1}, `cost` (N, K)."""

    quality: np.ndarray
    cost: np.ndarray
    domain: np.ndarray


def make_pool(n_models: int, n_queries: int, seed: int, n_domains: int = 4) -> Pool:
    """K models with geometric costs 3^k (the largest costs 1 per unit length) and abilities that grow with
    size plus a per-domain specialisation; a query has a domain, a difficulty θ and a length. A model answers
    correctly with probability σ(3(a_{k,domain} − θ)); it costs its base cost times the query's length."""
    if n_models < 1 or n_queries < 2:
        raise ValueError(f"need n_models >= 1 and n_queries >= 2, got {n_models}, {n_queries}")
    rng = numpy_rng(seed, CHAPTER, "pool", n_models, n_queries)
    base_cost = 3.0 ** (np.arange(n_models) - (n_models - 1))
    ability = np.linspace(-0.75, 1.0, n_models)[:, None] + rng.normal(0, 0.6, (n_models, n_domains))
    domain = rng.integers(n_domains, size=n_queries)
    theta = rng.normal(0, 1, n_queries)
    p = expit(3 * (ability[:, domain].T - theta[:, None]))
    quality = (rng.random(p.shape) < p).astype(float)
    length = rng.lognormal(0, 0.3, n_queries)
    return Pool(quality, base_cost[None, :] * length[:, None], domain)


@dataclass(frozen=True)
class Estimates:
    """What a strategy sees for N queries and K models: ex-ante quality `pre`, post-hoc quality `post` (only
    read once the model has run), estimated cost `cost`, and `cov`, the (K, K) covariance of pre − post."""

    pre: np.ndarray
    post: np.ndarray
    cost: np.ndarray
    cov: np.ndarray


def _calibrate(signal: np.ndarray, quality: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Per-model linear regression of the true quality on the noisy signal, fitted on the training rows."""
    out = np.empty_like(signal)
    for k in range(signal.shape[1]):
        s, q = signal[train, k], quality[train, k]
        var = s.var()
        b = ((s - s.mean()) * (q - q.mean())).mean() / var if var > 0 else 0.0
        out[:, k] = q.mean() + b * (signal[:, k] - s.mean())
    return out


def make_estimates(pool: Pool, noise: str | tuple, seed: int, train_fraction: float = 0.2, with_train: bool = False):
    """The paper's RouterBench estimators: true quality plus Gaussian noise (σ_pre before a model runs, σ_post
    after), calibrated per model by linear regression on a training split. Returns the test split's pool and
    estimates (and, `with_train`, the training split's too, on which λ is fitted). At "high" noise the
    per-query cost is unknown and estimated by the model's mean cost."""
    if isinstance(noise, str):
        if noise not in NOISE_LEVELS:
            raise ValueError(f"unknown noise level {noise!r}; valid: {', '.join(NOISE_LEVELS)}")
        noise = NOISE_LEVELS[noise]
    sd_pre, sd_post, cost_unknown = noise
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    _check_finite("pool.quality", pool.quality)
    rng = numpy_rng(seed, CHAPTER, "estimates", sd_pre, sd_post)
    q = pool.quality
    train = rng.random(len(q)) < train_fraction
    pre = _calibrate(q + sd_pre * rng.normal(size=q.shape), q, train)
    post = _calibrate(q + sd_post * rng.normal(size=q.shape), q, train)
    cost = np.broadcast_to(pool.cost[train].mean(0), pool.cost.shape) if cost_unknown else pool.cost
    cov = np.atleast_2d(np.cov((pre - post)[train].T))
    split = lambda rows: (Pool(q[rows], pool.cost[rows], pool.domain[rows]),
                          Estimates(pre[rows], post[rows], np.array(cost[rows]), cov))
    return (split(~train), split(train)) if with_train else split(~train)
