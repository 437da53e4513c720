"""Budgets, quality-cost curves and their normalised area (AUC), with every strategy's settings fitted on a training
split."""

from __future__ import annotations

import numpy as np

from .benchmark import Estimates, Pool
from .strategies import Outcome, cascade_routing, optimal_cascade, routing, threshold_cascade
from .benchmark import _check_finite


def routing_for_budget(est: Estimates, budget: float, iters: int = 60) -> tuple[float, float, float, float]:
    """The paper's budget form of routing: binary-search λ for the two neighbouring strategies whose expected
    cost brackets `budget`, and mix them with probability γ so the expected cost equals the budget exactly.
    Returns (λ_cheap, λ_expensive, γ, expected cost); γ is the probability of the expensive one. A budget above
    what λ = 0 spends is not used up: routing then simply takes argmax q̂ (γ = 0)."""
    cheapest = est.cost.min(1).mean()
    if budget < cheapest - 1e-12:
        raise ValueError(f"budget {budget:.4g} is below the cheapest model's expected cost {cheapest:.4g}")

    def cost_at(lam):
        o = routing(est, lam)
        return float((est.cost * o.ran).sum(1).mean())

    lo, hi = 0.0, 1.0  # lo: expensive side (cost >= budget), hi: cheap side (cost <= budget)
    if cost_at(0.0) <= budget:
        c = cost_at(0.0)
        return 0.0, 0.0, 0.0, c
    while cost_at(hi) > budget:
        hi *= 2
    for _ in range(iters):
        mid = (lo + hi) / 2
        (hi, lo) = (mid, lo) if cost_at(mid) <= budget else (hi, mid)
    c_cheap, c_exp = cost_at(hi), cost_at(lo)
    gamma = 0.0 if c_exp == c_cheap else (budget - c_cheap) / (c_exp - c_cheap)
    gamma = float(np.clip(gamma, 0.0, 1.0))
    return hi, lo, gamma, gamma * c_exp + (1 - gamma) * c_cheap


def upper_envelope(cost, quality) -> tuple[np.ndarray, np.ndarray]:
    """The best quality reachable at each cost by mixing strategies (γ-mixing makes every chord reachable): the
    upper concave hull of the (cost, quality) points, cut at its highest quality."""
    cost, quality = np.asarray(cost, float), np.asarray(quality, float)
    if cost.shape != quality.shape or cost.ndim != 1 or len(cost) == 0:
        raise ValueError(f"cost and quality must be equal-length 1-d arrays, got {cost.shape}, {quality.shape}")
    _check_finite("quality", quality)
    _check_finite("cost", cost)
    order = np.lexsort((-quality, cost))
    hull: list[tuple[float, float]] = []
    for c, q in zip(cost[order], quality[order]):
        if hull and c == hull[-1][0]:
            continue
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (q - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (c - hull[-2][0])) >= 0:
            hull.pop()
        hull.append((c, q))
    h = np.array(hull)
    top = int(np.argmax(h[:, 1]))
    return h[: top + 1, 0], h[: top + 1, 1]


def quality_cost_auc(cost, quality, c_min: float, c_max: float) -> float:
    """Area under the envelope between `c_min` (the cheapest model's cost) and `c_max` (the most expensive
    model's), divided by c_max − c_min: the paper's AUC. Flat after the envelope's last point."""
    if not c_max > c_min:
        raise ValueError(f"need c_max > c_min, got {c_min}, {c_max}")
    ec, eq = upper_envelope(cost, quality)
    if ec[0] > c_min + 1e-9 * max(1.0, abs(c_min)):
        raise ValueError(f"the curve starts at cost {ec[0]:.4g}, above c_min {c_min:.4g}")
    grid = np.unique(np.concatenate([[c_min, c_max], ec[(ec > c_min) & (ec < c_max)]]))
    q = np.interp(grid, ec, eq)
    return float(np.trapezoid(q, grid) / (c_max - c_min))


def remove_dominated(cost, quality) -> np.ndarray:
    """Indices of the models worth keeping: those on the upper concave hull of (mean cost, mean quality), up to
    the best one. A model below the chord of two others is beaten by mixing them."""
    cost, quality = np.asarray(cost, float), np.asarray(quality, float)
    ec, eq = upper_envelope(cost, quality)
    return np.array([i for i in range(len(cost)) if np.any((ec == cost[i]) & (eq == quality[i]))], dtype=int)


def lambda_grid(n: int) -> np.ndarray:
    """λ = 0 (quality only), a geometric sweep, and a huge λ (cheapest only)."""
    return np.concatenate([[0.0], np.geomspace(1e-2, 1e2, max(n - 2, 1)), [1e9]])


def step_family(base, n_models: int, ratios) -> list[np.ndarray]:
    """Per-step parameter vectors x_j = x_0 · r^j for every starting value x_0 in `base` and ratio r: a one-
    parameter stand-in for the official code's search over per-step λ (r = 1 is the constant λ)."""
    steps = np.arange(n_models)
    return [x0 * float(r) ** steps for x0 in base for r in ratios]


def strategy_settings(est: Estimates, n_lambdas: int, step_ratios) -> dict[str, list]:
    """Every strategy's settings: λ for routing (one step), per-step λ vectors for the optimal cascade and
    cascade routing, per-step thresholds τ_j = 1 − λ_j for the threshold cascade (the official baseline
    continues while q̂_j < 1 − λ_j), starting from quantiles of the post-hoc estimates."""
    k = est.pre.shape[1]
    lams = lambda_grid(n_lambdas)
    taus = np.concatenate([[-np.inf], np.quantile(est.post, np.linspace(0, 1, n_lambdas - 1))])
    steps = step_family(lams, k, step_ratios)
    return {"routing": list(lams), "threshold cascade": [1 - v for v in step_family(1 - taus, k, step_ratios)],
            "optimal cascade": steps, "cascade routing": steps}


def run_strategy(name: str, est: Estimates, table: np.ndarray, setting, max_depth: int) -> Outcome:
    if name == "routing":
        return routing(est, setting)
    if name == "threshold cascade":
        return threshold_cascade(est, setting)
    if name == "optimal cascade":
        return optimal_cascade(est, table, setting)
    return cascade_routing(est, table, setting, max_depth)


def _outcomes(name: str, est: Estimates, table: np.ndarray, settings, max_depth: int) -> list[Outcome]:
    """`run_strategy` for every setting in order, a setting equal to an earlier one (a sweep's end the fit kept
    anyway, λ = 0 at every step ratio) run once."""
    key = lambda x: (np.shape(x), np.asarray(x, float).tobytes())
    done = {}
    for x in settings:
        if key(x) not in done:
            done[key(x)] = run_strategy(name, est, table, x, max_depth)
    return [done[key(x)] for x in settings]


def curves(pool: Pool, est: Estimates, table: np.ndarray, n_lambdas: int, max_depth: int, step_ratios=(1.0,),
           fit: tuple[Pool, Estimates, np.ndarray] | None = None) -> dict:
    """(costs, qualities) of every strategy over its settings (`strategy_settings`). With `fit` = (pool,
    estimates, table) of a training split, the settings are chosen there as the official code fits λ: only
    those on the training split's quality–cost envelope are run on the test split."""
    out = {}
    for name, settings in strategy_settings(est if fit is None else fit[1], n_lambdas, step_ratios).items():
        if fit is not None:
            f_pool, f_est, f_table = fit
            outs = _outcomes(name, f_est, f_table, settings, max_depth)
            keep = remove_dominated([o.cost(f_pool) for o in outs], [o.quality(f_pool) for o in outs])
            settings = [settings[i] for i in keep] + [settings[0], settings[-1]]  # both ends of the sweep
        outs = _outcomes(name, est, table, settings, max_depth)
        out[name] = (np.array([o.cost(pool) for o in outs]), np.array([o.quality(pool) for o in outs]))
    return out
