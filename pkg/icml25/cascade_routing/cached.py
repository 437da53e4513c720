"""The chapter's expensive computations, cached like a zoo model (`icml25.core.zoo.results`: addressed by the knobs
they read, the seed and the chapter's code), so the book's builder runs them in its warm-up (`warm_up`, its
`CHAPTER_RESULTS` entry) and the notebooks read them back: each (pool size, noise, seed) cell of the benchmark
(notebook 02) and each seed of the real pool (notebook 03: fitting the members, the estimators, every strategy's
sweep and the positive control). Only the scikit-learn pool is cached; with `cfg.pool_models` (LM checkpoints) its
cell is computed in place. What comes back equals the direct computation: the JSON values are turned back into
arrays, tuples and a `RealRuns`."""

from __future__ import annotations

import sys

import numpy as np
import sklearn

from ..core import zoo
from . import benchmark, curves, experiment, real_pool, scales, strategies, supermodel
from .experiment import benchmark_cell
from .real_pool import RealRuns, real_pool_cell

BENCHMARK_RESULT = "cascade-benchmark"
REAL_POOL_RESULT = "cascade-real-pool"
# knobs benchmark_cell does not read (the cell it runs is addressed on its own)
NOT_IN_BENCHMARK = ("seeds", "calibration_seeds", "pool_sizes", "noise_levels", "real_pool", "real_members",
                    "real_n_fit", "pool_models", "lm_queries")
# knobs real_pool_cell does not read with the scikit-learn pool (the seed it runs is addressed on its own)
NOT_IN_REAL_POOL = ("seeds", "calibration_seeds", "n_queries", "pool_sizes", "noise_levels", "n_domains",
                    "pool_models", "lm_queries")


def _sources():
    """The modules whose code computes a cached result (the claims' declarations do not)."""
    return (benchmark, curves, experiment, real_pool, scales, strategies, supermodel, sys.modules[__name__])


def _cell(value: dict) -> dict:
    """A cell of `evaluate` (and its positive control) back from JSON: each curve a (costs, qualities) pair of
    arrays, the models' mean costs and qualities arrays."""
    out = {**value,
           "curves": {name: (np.asarray(c, float), np.asarray(q, float)) for name, (c, q) in value["curves"].items()},
           "model_cost": np.asarray(value["model_cost"], float),
           "model_quality": np.asarray(value["model_quality"], float)}
    if "positive_control" in value:
        out["positive_control"] = _cell(value["positive_control"])
    return out


def _runs(value: dict) -> RealRuns:
    """A `RealRuns` back from JSON."""
    return RealRuns(*(np.asarray(value[f], float) for f in ("correct", "flops", "confidence", "context")),
                    tuple(value["labels"]))


def cached_benchmark_cell(n_models: int, noise: str, seed: int, cfg) -> tuple[dict, bool]:
    """`benchmark_cell(n_models, noise, seed, cfg)`, cached (addressed by the knobs it reads, the cell and the
    chapter's code). Returns the cell and whether it was computed now."""
    settings = {k: v for k, v in dict(cfg).items() if k not in NOT_IN_BENCHMARK}
    settings.update(n_models=n_models, noise=noise, seed=seed)
    value, now = zoo.results(BENCHMARK_RESULT, settings,
                             lambda: benchmark_cell(n_models, noise, seed, cfg), sources=_sources())
    return _cell(value), now


def benchmark_results(cfg) -> tuple[list[dict], int]:
    """`run_benchmark(cfg)` cell by cell through the cache: every cell of cfg.pool_sizes × cfg.noise_levels ×
    cfg.seeds, in that order, and how many were computed now."""
    out = [cached_benchmark_cell(k, noise, s, cfg) for k in cfg.pool_sizes for noise in cfg.noise_levels
           for s in cfg.seeds]
    return [cell for cell, _ in out], sum(now for _, now in out)


def real_pool_results(seed: int, cfg) -> tuple[RealRuns, dict, bool]:
    """`real_pool_cell(seed, cfg)`, cached for the scikit-learn pool (addressed by the knobs it reads, the seed,
    scikit-learn's version and the chapter's code); with `cfg.pool_models` computed in place. Returns the runs,
    the cell and whether they were computed now."""
    if cfg.pool_models:
        return *real_pool_cell(seed, cfg), True
    settings = {k: v for k, v in dict(cfg).items() if k not in NOT_IN_REAL_POOL}
    settings.update(seed=seed, sklearn=sklearn.__version__)

    def compute():
        runs, cell = real_pool_cell(seed, cfg)
        return {"runs": vars(runs), "cell": cell}

    value, now = zoo.results(REAL_POOL_RESULT, settings, compute, sources=_sources())
    return _runs(value["runs"]), _cell(value["cell"]), now


#: the candidate real pools notebook 03 compares on the calibration seeds (the chapter chose "memories")
CALIBRATION_POOLS = ("classifiers", "memories")


def calibration_pools(cfg) -> dict[str, tuple[list[RealRuns], list[dict]]]:
    """Each candidate real pool (`CALIBRATION_POOLS`) on `cfg.calibration_seeds`, the scale's other knobs but
    `n_lambdas` and `qmc_samples` from `cfg`, through the cache: {pool: (runs, cells)} per calibration seed."""
    out = {}
    for pool in CALIBRATION_POOLS:
        pool_cfg = scales.config(cfg.scale, real_pool=pool, n_lambdas=cfg.n_lambdas, qmc_samples=cfg.qmc_samples,
                                 seeds=cfg.calibration_seeds)
        runs, cells, _ = zip(*[real_pool_results(s, pool_cfg) for s in pool_cfg.seeds])
        out[pool] = (list(runs), list(cells))
    return out


def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry): every cell of the benchmark,
    every seed of the real pool and, where the pools are scikit-learn's, the candidate pools on the calibration
    seeds."""
    benchmark_results(cfg)
    for seed in cfg.seeds:
        real_pool_results(seed, cfg)
    if not cfg.pool_models:
        calibration_pools(cfg)
