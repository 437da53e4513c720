"""The composition baselines the swarm is compared with, each at the swarm's budget of utility calls: the best
expert, the uniform and greedy soups, task arithmetic, TIES and DARE (PEFT's merge utilities), LoraHub, and two
equal-budget search controls (random search, hill climbing)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.seeding import numpy_rng
from .scales import CHAPTER


@dataclass
class Composition:
    """A baseline's chosen combination of the experts and the utility calls it spent."""

    coefficients: np.ndarray  # [K], sums to 1
    dev: float
    n_evaluations: int


def best_expert(dev_utilities: np.ndarray) -> Composition:
    """The single expert with the best dev utility."""
    k = int(np.argmax(dev_utilities))
    return Composition(np.eye(len(dev_utilities))[k], float(dev_utilities[k]), len(dev_utilities))


def uniform_soup(k: int, coef_utility: Callable[[np.ndarray], np.ndarray]) -> Composition:
    """The plain average of the K experts (A and B averaged separately)."""
    c = np.full(k, 1 / k)
    return Composition(c, float(coef_utility(c[None])[0]), 1)


def greedy_soup(dev_utilities: np.ndarray, coef_utility: Callable[[np.ndarray], np.ndarray]) -> Composition:
    """Wortsman et al.'s greedy soup: experts by decreasing dev utility, each kept in the average if it helps."""
    order = np.argsort(-dev_utilities, kind="stable")
    chosen, best = [order[0]], float(dev_utilities[order[0]])
    for k in order[1:]:
        c = np.bincount(chosen + [k], minlength=len(dev_utilities)) / (len(chosen) + 1)
        u = float(coef_utility(c[None])[0])
        if u > best:
            chosen, best = chosen + [k], u
    return Composition(np.bincount(chosen, minlength=len(dev_utilities)) / len(chosen), best,
                       len(dev_utilities) + len(order) - 1)


def random_search(k: int, coef_utility: Callable[[np.ndarray], np.ndarray], budget: int, batch: int,
                  seed: int) -> Composition:
    """The best of `budget` random affine combinations 2·d − d' (d, d' ~ Dirichlet(1)): mostly inside the
    experts' hull, sometimes slightly outside, as the swarm's crossovers are."""
    rng = numpy_rng(seed, CHAPTER, "random_search")
    best_c, best_u, used = None, -np.inf, 0
    while used < budget:
        m = min(batch, budget - used)
        c = 2 * rng.dirichlet(np.ones(k), m) - rng.dirichlet(np.ones(k), m)
        u = coef_utility(c)
        used += m
        if u.max() > best_u:
            best_c, best_u = c[int(np.argmax(u))], float(u.max())
    return Composition(best_c, best_u, used)


def hill_climbing(start: Composition, coef_utility: Callable[[np.ndarray], np.ndarray], budget: int, batch: int,
                  seed: int, sigma: float = 0.2) -> Composition:
    """Random-perturbation hill climbing in coefficient space from `start`: each round tries `batch`
    sum-zero Gaussian perturbations (scale `sigma`) and moves to the best one if it improves."""
    rng = numpy_rng(seed, CHAPTER, "hill_climbing")
    c, best_u, used = start.coefficients.copy(), start.dev, 0
    while used < budget:
        m = min(batch, budget - used)
        z = rng.normal(0, sigma, (m, len(c)))
        cand = c + z - z.mean(1, keepdims=True)
        u = coef_utility(cand)
        used += m
        if u.max() > best_u:
            c, best_u = cand[int(np.argmax(u))], float(u.max())
    return Composition(c, best_u, used + start.n_evaluations)


def task_vectors(experts: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """τ_k = x_k − x_0: each expert's change from the common starting adapter x_0 (shared A₀, B = 0)."""
    return np.asarray(experts) - np.asarray(origin)


def merge_task_vectors(tau: np.ndarray, method: str, scale: float, density: float, segments: Sequence[slice],
                       seed: int = 0) -> np.ndarray:
    """PEFT's merge utilities (`peft.utils.merge_utils`) on the task vectors [K, D], tensor by tensor (each slice
    of `segments` is one A or B matrix, as PEFT merges LoRA factors): `task_arithmetic` (λ·Σ τ_k), `ties` (trim to
    the top `density` by magnitude, elect the sign, disjoint mean; then ×λ) or `dare` (DARE-linear: drop at
    rate 1 − `density`, rescale, λ·Σ). DARE's random mask is drawn under `seed`."""
    from peft.utils import merge_utils

    t = torch.as_tensor(tau, dtype=torch.float64)
    ones = torch.ones(len(t), dtype=torch.float64)
    out = torch.zeros(t.shape[1], dtype=torch.float64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for seg in segments:
            parts = list(t[:, seg])
            if method == "task_arithmetic":
                out[seg] = merge_utils.task_arithmetic(parts, scale * ones)
            elif method == "ties":
                out[seg] = scale * merge_utils.ties(parts, ones, density)
            elif method == "dare":
                out[seg] = merge_utils.dare_linear(parts, scale * ones, density)
            else:
                raise ValueError(f"unknown merge {method!r}; valid: task_arithmetic, ties, dare")
    return out.numpy()


def merge_search(method: str, tau: np.ndarray, origin: np.ndarray, utility: Callable[[np.ndarray], np.ndarray],
                 budget: int, segments: Sequence[slice], seed: int) -> tuple[np.ndarray, float, int]:
    """A merge's hyperparameters chosen on dev with `budget` utility calls: λ ~ U(0, 2) (task arithmetic), and
    also density ~ U(0.1, 1) (TIES, DARE), drawn at random; returns (parameters, dev utility, calls)."""
    rng = numpy_rng(seed, CHAPTER, "merge", method)
    cands = [origin + merge_task_vectors(tau, method, 2 * rng.random(), 0.1 + 0.9 * rng.random(), segments,
                                         seed + i) for i in range(budget)]
    u = utility(np.stack(cands))
    best = int(np.argmax(u))
    return cands[best], float(u[best]), budget


def lorahub(experts: np.ndarray, loss: Callable[[np.ndarray], np.ndarray], budget: int, l1: float = 0.05,
            bound: float = 1.5) -> tuple[np.ndarray, int]:
    """LoraHub-style gradient-free search (Huang et al., 2024) over the weights w of A = Σ w_k A_k, B = Σ w_k B_k:
    minimise the dev cross-entropy `loss(w·E)` + `l1`·‖w‖₁, w in [−`bound`, `bound`], from w = 0, as LoraHub
    does, by Nelder-Mead (scipy; LoraHub uses nevergrad's optimiser) with an initial simplex of steps 0.5, within
    `budget` loss calls. Returns (the best weights seen, calls)."""
    from scipy.optimize import minimize

    k = len(experts)
    seen: list[tuple[float, np.ndarray]] = []

    def objective(w):
        w = np.clip(w, -bound, bound)
        if len(seen) >= budget:
            return 1e9  # budget spent: no further calls
        value = float(loss((w @ experts)[None])[0]) + l1 * np.abs(w).sum()
        seen.append((value, w))
        return value

    simplex = np.vstack([np.zeros(k), 0.5 * np.eye(k)])
    minimize(objective, np.zeros(k), method="Nelder-Mead",
             options={"maxfev": budget, "initial_simplex": simplex})
    return min(seen, key=lambda t: t[0])[1], len(seen)
