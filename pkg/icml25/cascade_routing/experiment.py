"""The benchmark of notebook 02: every (pool size, noise, seed) cell, and the per-seed measurements its claims read."""

from __future__ import annotations

import numpy as np

from .benchmark import Estimates, Pool, make_estimates, make_pool
from .claims import CLAIM_POOL_SIZES, cell_key
from .curves import curves, quality_cost_auc
from .scales import NOISE_LEVELS, STRATEGIES
from .supermodel import supermodel_table


def evaluate(test: tuple[Pool, Estimates], fit: tuple[Pool, Estimates], seed: int, cfg,
             common_start: bool = False) -> dict:
    """Every strategy's curve and AUC×100 on one test split, its settings (λ per step, thresholds) fitted on the
    `fit` split, plus each model's mean cost and quality. The AUC runs from the cheapest model's cost, or with
    `common_start` from the first cost every strategy reaches (when costs are estimated, a sweep's cheapest end
    may be a model that is cheaper on average but not on this split)."""
    (pool, est), (f_pool, f_est) = test, fit
    table = supermodel_table(est, cfg.qmc_samples, seed, cfg.max_depth)
    f_table = supermodel_table(f_est, cfg.qmc_samples, seed, cfg.max_depth)
    cv = curves(pool, est, table, cfg.n_lambdas, cfg.max_depth, cfg.step_ratios, fit=(f_pool, f_est, f_table))
    mean_cost = pool.cost.mean(0)
    c_min = max(mean_cost.min(), *(c.min() for c, _ in cv.values())) if common_start else mean_cost.min()
    auc = {name: 100 * quality_cost_auc(c, q, c_min, mean_cost.max()) for name, (c, q) in cv.items()}
    quality = pool.quality.mean(0)
    ends = [int(np.argmin(mean_cost)), int(np.argmax(mean_cost))]
    blind = 100 * quality_cost_auc(mean_cost[ends], quality[ends], c_min, mean_cost.max())
    return {"seed": seed, "auc": auc, "curves": cv, "model_cost": mean_cost, "model_quality": quality,
            "interpolation_auc": blind}


def benchmark_cell(n_models: int, noise: str, seed: int, cfg) -> dict:
    """One (pool size, noise, seed) cell of the paper's Table 1: every strategy's curve and AUC×100."""
    full = make_pool(n_models, cfg.n_queries, seed, cfg.n_domains)
    test, fit = make_estimates(full, noise, seed, cfg.train_fraction, with_train=True)
    return {"n_models": n_models, "noise": noise, **evaluate(test, fit, seed, cfg)}


def run_benchmark(cfg) -> list[dict]:
    """Every cell of cfg.pool_sizes × cfg.noise_levels × cfg.seeds."""
    return [benchmark_cell(k, noise, s, cfg) for k in cfg.pool_sizes for noise in cfg.noise_levels
            for s in cfg.seeds]


def auc_table(cells: list[dict]) -> dict[tuple[int, str], dict[str, tuple[float, float]]]:
    """(pool size, noise) -> strategy -> (mean, sd) of AUC×100 over seeds."""
    out: dict = {}
    for key in sorted({(c["n_models"], c["noise"]) for c in cells}, key=lambda t: (t[0], list(NOISE_LEVELS).index(t[1]))):
        group = [c for c in cells if (c["n_models"], c["noise"]) == key]
        out[key] = mean_auc(group)
    return out


def mean_auc(cells: list[dict]) -> dict[str, tuple[float, float]]:
    """Strategy -> (mean, sd) of AUC×100 over the cells (seeds) of one setting."""
    return {s: (float(np.mean([c["auc"][s] for c in cells])), float(np.std([c["auc"][s] for c in cells])))
            for s in STRATEGIES}


def cell_gain(cell: dict) -> float:
    """One cell's gain: cascade routing's AUC minus the larger of routing's and the optimal cascade's."""
    a = cell["auc"]
    return a["cascade routing"] - max(a["routing"], a["optimal cascade"])


def claim_measurements(cells: list[dict]) -> dict[str, list[float]]:
    """The per-seed values the claims are decided on (one entry per seed, in seed order): the gain of every
    3/5-model cell, the optimal − threshold cascade difference, the low − high noise gain difference, and the
    preconditions' worst low/medium-noise cell per seed."""
    seeds = sorted({c["seed"] for c in cells})
    by = {(c["n_models"], c["noise"], c["seed"]): c for c in cells}
    keys = sorted({(c["n_models"], c["noise"]) for c in cells if c["n_models"] in CLAIM_POOL_SIZES})
    out: dict[str, list[float]] = {}
    for k, noise in keys:
        cs = [by[(k, noise, s)] for s in seeds]
        out[f"gain_{cell_key(k, noise)}"] = [cell_gain(c) for c in cs]
        out[f"opt_minus_thr_{cell_key(k, noise)}"] = [c["auc"]["optimal cascade"] - c["auc"]["threshold cascade"]
                                                      for c in cs]
    if all((k, n) in keys for k in CLAIM_POOL_SIZES for n in ("low", "high")):
        out["low_minus_high"] = [float(np.mean([cell_gain(by[(k, "low", s)]) - cell_gain(by[(k, "high", s)])
                                                for k in CLAIM_POOL_SIZES])) for s in seeds]
    low_med = [c for c in cells if c["noise"] in ("low", "medium")]
    per_seed = lambda f, group: [min(f(c) for c in group if c["seed"] == s) for s in seeds]
    out["routing_over_interpolation"] = per_seed(lambda c: c["auc"]["routing"] - c["interpolation_auc"], low_med)
    out["threshold_over_interpolation"] = per_seed(
        lambda c: c["auc"]["threshold cascade"] - c["interpolation_auc"], low_med)
    return out
