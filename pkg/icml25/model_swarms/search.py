"""The search (Eqs. 1-2): the particles, their velocity and position updates, restarts and the global best and
worst, with the official hyperparameters and their sweep."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core.seeding import numpy_rng
from .scales import CHAPTER

# Swarm hyperparameters outside the sweep: the official search.py defaults and run scripts (restart patience 0.67).
DEFAULTS = dict(inertia=0.4, cognitive=0.3, social=0.3, repel=0.3, step_length=1.0, step_factor=0.95,
                min_step_length=0.1, restart_patience=0.67)


# The official run scripts' sweep (search_*.sh): each run samples one value of each from these lists.
SWEEP = {"inertia": (0.1, 0.2, 0.3), "cognitive": (0.1, 0.2, 0.3, 0.4, 0.5), "social": (0.2, 0.3, 0.4, 0.5, 0.6),
         "repel": (0.01, 0.05, 0.1), "step_length": (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)}


@dataclass
class SwarmResult:
    """The search's record. Positions are flat parameter vectors; `coefficients` are the same particles written
    over the initial experts (rows sum to 1), one [N, K] array per evaluation round."""

    global_best: np.ndarray  # g (parameters)
    global_best_coefficients: np.ndarray
    g: float  # f(g)
    g_particle: int  # the particle whose position became the final g
    initial_utilities: np.ndarray  # [N], the particles' utilities before the first move
    utilities: list[np.ndarray] = field(default_factory=list)  # [N] per round, round 0 = initial
    g_history: list[float] = field(default_factory=list)
    g_worst_history: list[float] = field(default_factory=list)
    coefficients: list[np.ndarray] = field(default_factory=list)  # [N, K] per round
    velocity_coefficients: list[np.ndarray] = field(default_factory=list)  # [N, K] per round, rows sum to 0
    positions: list[np.ndarray] = field(default_factory=list)  # [N, D] per round
    personal_bests: list[np.ndarray] = field(default_factory=list)  # f(p_i), [N] per round
    restarts: int = 0
    n_evaluations: int = 0

    @property
    def n_iterations(self) -> int:
        return len(self.utilities) - 1

    @property
    def initial_rank(self) -> int:
        """Rank (0 = best) of the final global best's particle among the initial utilities."""
        return int((self.initial_utilities > self.initial_utilities[self.g_particle]).sum())


def step_length_schedule(step_length: float, factor: float, minimum: float, n: int) -> np.ndarray:
    """λ_t for t = 0..n-1: λ_{t+1} = max(λ_t·φ_λ, λ_min), i.e. λ_t = max(λ_0·φ_λ^t, λ_min)."""
    out = [step_length]
    for _ in range(n - 1):
        out.append(max(out[-1] * factor, minimum))
    return np.array(out)


def velocity_weights(r: np.ndarray, inertia: float, cognitive: float, social: float, repel: float) -> np.ndarray:
    """The normalised weights (a, b, c, d)/S of Eq. 1 from the random scalars r = (r_w, r_p, r_s, r_b)."""
    w = np.asarray(r, dtype=float) * np.array([inertia, cognitive, social, repel])
    return w / w.sum()


def populate(experts: np.ndarray, n_particles: int, rng: np.random.Generator) -> np.ndarray:
    """Grow the K experts to `n_particles` by crossover: child = w·x_a + (1 − w)·x_b, w = 2·U(0, 1), parents two
    distinct members of the growing pool (so half the children interpolate and half extrapolate). Returns the
    particles' coefficients over the experts, [N, K], rows summing to 1."""
    k = len(experts)
    coef = list(np.eye(k))
    while len(coef) < n_particles:
        a, b = rng.choice(len(coef), 2, replace=False)
        w = 2 * rng.random()
        coef.append(w * coef[a] + (1 - w) * coef[b])
    return np.array(coef[:max(n_particles, k)])


def _check_utilities(u: np.ndarray, n: int) -> np.ndarray:
    u = np.asarray(u, dtype=float)
    if u.shape != (n,):
        raise ValueError(f"the utility returned shape {u.shape}; expected one value per particle, ({n},)")
    bad = np.flatnonzero(~np.isfinite(u))
    if len(bad):
        raise ValueError(f"the utility of particle {int(bad[0])} is {u[bad[0]]} (not a finite number)")
    return u


def particle_update(x: np.ndarray, v: np.ndarray, p: np.ndarray, g: np.ndarray, gw: np.ndarray,
                    weights: np.ndarray, step_length: float, restart: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One particle's move: optionally restart (x ← p, v ← 0), then Eq. 1 with the normalised weights
    (a, b, c, d) and Eq. 2 with step length λ. Returns the new (x, v)."""
    if restart:
        x, v = p, np.zeros_like(v)
    a, b, c, d = weights
    v = a * v + b * (p - x) + c * (g - x) + d * (x - gw)  # Eq. 1
    return x + step_length * v, v  # Eq. 2


def swarm_search(experts: np.ndarray, utility: Callable[[np.ndarray], np.ndarray], seed: int, n_particles: int,
                 max_iteration: int, patience: int, inertia: float = DEFAULTS["inertia"],
                 cognitive: float = DEFAULTS["cognitive"], social: float = DEFAULTS["social"],
                 repel: float = DEFAULTS["repel"], step_length: float = DEFAULTS["step_length"],
                 step_factor: float = DEFAULTS["step_factor"], min_step_length: float = DEFAULTS["min_step_length"],
                 restart_patience: float | None = DEFAULTS["restart_patience"], weight_randomness: bool = True,
                 populate_experts: bool = True) -> SwarmResult:
    """Model Swarms over `experts` ([K, D] flat parameter vectors), maximising `utility` ([N, D] → [N]).

    As the official search: initial velocity toward a random other particle; per particle per iteration one
    draw of (r_w, r_p, r_s, r_b) (all 1 without `weight_randomness`); `repel=0` drops the global-worst term;
    a particle whose best is `restart_patience·patience` or more evaluations old restarts at its personal best
    with zero velocity (`restart_patience=None`: never); the search stops when g has not changed over the last
    `patience` rounds, or after `max_iteration` iterations.
    """
    experts = np.asarray(experts, dtype=float)
    if experts.ndim != 2 or len(experts) < 2:
        raise ValueError(f"Model Swarms needs at least 2 experts as a [K, D] array; got shape {experts.shape}")
    rng = numpy_rng(seed, CHAPTER, "swarm")
    k = len(experts)
    coef = populate(experts, n_particles, rng) if populate_experts else np.eye(k)
    n = len(coef)
    # Augmented points [parameters | coefficients]: one linear update moves both, so rows keep X = C·E.
    x = np.concatenate([coef @ experts, coef], axis=1)
    partner = np.array([rng.choice([j for j in range(n) if j != i]) for i in range(n)])
    v = x[partner] - x
    u = _check_utilities(utility(x[:, :-k]), n)
    p, p_u = x.copy(), u.copy()
    history = [[ui] for ui in u]
    gi, wi = int(np.argmax(u)), int(np.argmin(u))
    g, g_u, g_particle = x[gi].copy(), float(u[gi]), gi
    gw, gw_u = x[wi].copy(), float(u[wi])
    res = SwarmResult(g[:-k], g[-k:], g_u, g_particle, u.copy(), n_evaluations=n)

    def record():
        res.utilities.append(u.copy())
        res.g_history.append(g_u)
        res.g_worst_history.append(gw_u)
        res.coefficients.append(x[:, -k:].copy())
        res.velocity_coefficients.append(v[:, -k:].copy())
        res.positions.append(x[:, :-k].copy())
        res.personal_bests.append(p_u.copy())

    record()
    lam = step_length
    for _ in range(max_iteration):
        if len(res.g_history) > patience and len(set(res.g_history[-patience:])) == 1:
            break
        for i in range(n):
            stale = restart_patience is not None and \
                len(history[i]) - history[i].index(p_u[i]) >= restart_patience * patience
            res.restarts += stale
            r = rng.random(4) if weight_randomness else np.ones(4)
            x[i], v[i] = particle_update(x[i], v[i], p[i], g, gw,
                                         velocity_weights(r, inertia, cognitive, social, repel), lam, stale)
        u = _check_utilities(utility(x[:, :-k]), n)
        res.n_evaluations += n
        for i in range(n):
            history[i].append(u[i])
            if u[i] > p_u[i]:
                p[i], p_u[i] = x[i], u[i]
        if u.max() > g_u:
            gi = int(np.argmax(u))
            g, g_u, g_particle = x[gi].copy(), float(u[gi]), gi
        if u.min() < gw_u:
            wi = int(np.flatnonzero(u == u.min())[-1])
            gw, gw_u = x[wi].copy(), float(u[wi])
        record()
        lam = max(lam * step_factor, min_step_length)
    res.global_best, res.global_best_coefficients, res.g, res.g_particle = g[:-k], g[-k:], g_u, g_particle
    return res


def sample_hyperparameters(n: int, seed: int) -> list[dict]:
    """`n` draws from the official sweep (`SWEEP`), one value of each hyperparameter per draw, as the run scripts
    draw them."""
    rng = numpy_rng(seed, CHAPTER, "sweep")
    return [{k: float(rng.choice(v)) for k, v in SWEEP.items()} for _ in range(n)]
