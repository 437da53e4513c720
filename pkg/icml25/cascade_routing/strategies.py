"""The four strategies: routing (Eq. 1), the threshold cascade, the optimal cascade (Sec. 3) and cascade routing
(Sec. 4). Each returns which models ran on each query and whose answer is returned."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from .benchmark import Estimates, Pool
from .supermodel import config_index


@dataclass(frozen=True)
class Outcome:
    ran: np.ndarray
    answer: np.ndarray

    def cost(self, pool: Pool) -> float:
        return float((pool.cost * self.ran).sum(1).mean())

    def quality(self, pool: Pool) -> float:
        return float(pool.quality[np.arange(len(self.answer)), self.answer].mean())


def routing(est: Estimates, lam: float) -> Outcome:
    """Eq. 1: run the single model maximising q̂_pre − λ ĉ (ties: the first, i.e. cheaper, one)."""
    answer = np.argmax(est.pre - lam * est.cost, axis=1)
    ran = np.zeros(est.pre.shape, bool)
    ran[np.arange(len(answer)), answer] = True
    return Outcome(ran, answer)


def per_step(value, n_models: int) -> np.ndarray:
    """A per-step parameter (λ_j or τ_j, j = number of models already run) as an array of length `n_models`: a
    scalar is the same at every step."""
    v = np.atleast_1d(np.asarray(value, float))
    if v.size == 1:
        return np.full(n_models, v[0])
    if v.size < n_models:
        raise ValueError(f"a per-step parameter needs {n_models} values, got {v.size}")
    return v[:n_models]


def threshold_cascade(est: Estimates, tau) -> Outcome:
    """Baseline cascade: run models cheapest first; stop after model j if q̂_post,j ≥ τ_j (one threshold per
    step, or one `tau` for all); return the last one."""
    n, k = est.post.shape
    good = est.post >= per_step(tau, k)[None, :]
    good[:, -1] = True
    last = np.argmax(good, axis=1)
    return Outcome(np.arange(k)[None, :] <= last[:, None], last)


def _candidates(run: int, n_models: int, max_depth: int, prefix_only: bool) -> list[int]:
    """Candidate sets T ⊇ S (bitmasks), S itself first, so ties prefer stopping."""
    if prefix_only:
        cands = [(1 << i) - 1 for i in range(1, n_models + 1) if ((1 << i) - 1) & run == run]
    else:
        free = [j for j in range(n_models) if not run >> j & 1]
        cands = [run | sum(1 << j for j in extra) for r in range(len(free) + 1)
                 for extra in itertools.combinations(free, r)]
    cands = [c for c in cands if c and bin(c).count("1") <= max_depth]
    return sorted(cands, key=lambda c: c != run)


@functools.cache
def _candidate_table(run: int, n_models: int, max_depth: int, prefix_only: bool) -> tuple:
    """`_candidates(run, ...)` as arrays, built once per set S (read-only): the bitmasks (C,), their (C, K) 0/1
    membership and their rows of the supermodel table (`config_index`); for pruning, the models not in S (J,),
    the (C, J) membership of those, the rows of S ∪ {m} for each and the row of S."""
    cands = _candidates(run, n_models, max_depth, prefix_only)
    masks = np.array([[c >> j & 1 for j in range(n_models)] for c in cands], float)
    free = np.array([j for j in range(n_models) if not run >> j & 1], dtype=np.intp)
    out = (np.array(cands, dtype=np.int64), masks, np.array([config_index(run, c, n_models) for c in cands]),
           free, masks[:, free] == 1,
           np.array([config_index(run, run | 1 << int(j), n_models) for j in free], dtype=np.intp))
    for a in out:
        a.setflags(write=False)
    return *out, config_index(run, run, n_models)


def cascade_routing(est: Estimates, table: np.ndarray, lam, max_depth: int | None = None,
                    prefix_only: bool = False, prune: bool = True) -> Outcome:
    """Sec. 4: with S the models run so far, pick T ⊇ S (|T| ≤ max_depth) maximising q̂(T|S) − λ_j ĉ(T), where
    λ_j is the multiplier of step j = |S| (`lam`: one per step, as the official code fits them, or one for all);
    stop if T = S, else run the cheapest model of T \\ S. Returns the run model with the best post-hoc
    estimate. `prefix_only=True` restricts T to prefixes of the cost order: the optimal cascade (Sec. 3).
    Pruning drops model m from every candidate when adding it to S gains less than λ ĉ_m (exact, because
    the table is submodular and T \\ {m} is then always a better candidate; not so among prefixes, where
    T \\ {m} is usually no prefix, so the optimal cascade never prunes)."""
    n, k = est.pre.shape
    max_depth = k if max_depth is None else max_depth
    if max_depth < 1:
        raise ValueError(f"max_depth must be >= 1, got {max_depth}")
    lams = per_step(lam, k)
    run = np.zeros(n, dtype=np.int64)
    active = np.ones(n, bool)
    for _ in range(k):
        if not active.any():
            break
        for s in np.flatnonzero(np.bincount(run[active])).tolist():  # the distinct sets S run so far, ascending
            idx = np.flatnonzero(active & (run == s))
            lam = lams[s.bit_count()]
            cands, masks, rows, free, has_free, add_rows, row = _candidate_table(s, k, max_depth, prefix_only)
            value = table[rows[:, None], idx] - lam * masks @ est.cost[idx].T  # (C, n_idx)
            if prune and s and not prefix_only:
                gain = table[add_rows[:, None], idx] - table[row, idx]  # (J, n_idx): q̂(S ∪ {m} | S) − q̂(S | S)
                pruned = gain < lam * est.cost[idx][:, free].T
                value[has_free @ pruned] = -np.inf  # a candidate holding any pruned model
            best = cands[np.argmax(value, axis=0)]
            go = best != s
            active[idx[~go]] = False
            new = best[go] & ~s
            run[idx[go]] = s | (new & -new)  # the cheapest model of T \ S: its lowest bit
    ran = (run[:, None] >> np.arange(k)[None, :]) & 1 == 1
    answer = np.argmax(np.where(ran, est.post, -np.inf), axis=1)
    return Outcome(ran, answer)


def optimal_cascade(est: Estimates, table: np.ndarray, lam: float) -> Outcome:
    """Sec. 3: continue the cascade while some longer prefix has a better trade-off than the current one."""
    return cascade_routing(est, table, lam, prefix_only=True)
