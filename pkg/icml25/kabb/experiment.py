"""The experiment: the chapter's config, every selector run over a batch of seeds with common random numbers, the
decay γ chosen on the calibration seeds, the drift-free null world, and the summaries the figures and claims read."""

from __future__ import annotations

import sys
from itertools import combinations

import numpy as np

from ..core import zoo
from ..core.config import COUNT, FRACTION, NONNEGATIVE, POSITIVE, SEED, Range, make_config, one_of
from ..core.seeding import numpy_rng
from .environment import DILUTION, DRIFT_PAIRS, Environment, make_environment, oracle_table, success_probability
from .method import concept_overlap, decay, kabb_select, knowledge_distance, semantic_overlap_table, team_synergy, \
    top_k, update

POLICIES = ("kabb", "kabb (misleading graph)", "kabb (no decay)", "kabb (no distance)", "kabb (semantic distance)",
            "kabb (team synergy)", "contextual thompson", "knowledge only", "thompson", "ucb1", "epsilon-greedy", "random",
            "best fixed team", "call-all", "oracle")
# the decay sweep; γ = 1 is no decay. Fine near 1, where the reward after the drift peaks, so that the sweep brackets
# the γ `calibrate_decay` chooses
GAMMAS = (0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995, 0.9998, 0.9999, 1.0)

# Verdict seeds are fresh for this round: 0-49 are the calibration seeds (they chose `dilution`, `drift_pairs` and
# the decay γ), 100-149 and 500-599 decided earlier rounds, the referees ran 50-99, 300-349 and 600-799. 400 seeds:
# the drift claim's power line (80% power to tell its smallest effect, 0.01, from none at the calibration seeds'
# spread 0.063 and the seen verdict seeds' 0.067) asks for about 315-341.
CALIBRATION_SEEDS = {"smoke": list(range(6)), "ci": list(range(50)), "full": list(range(50))}
VERDICT_SEEDS = {"smoke": list(range(1000, 1006)), "ci": list(range(1000, 1400)), "full": list(range(1000, 1400))}
FIGURE_SEEDS = 50  # the figures run every selector on the first this many verdict seeds

config = make_config({
    "smoke": {"seeds": VERDICT_SEEDS["smoke"], "calibration_seeds": CALIBRATION_SEEDS["smoke"], "n_rounds": 300, "n_experts": 10, "k": 2, "gamma": None, "floor": 0.05,
              "prior_alpha": 3.0, "prior_beta": 2.0, "recovery_window": 50, "epsilon": 0.1, "drift_pairs": DRIFT_PAIRS,
              "synergy_eta": 1.0, "gammas": list(GAMMAS), "dilution": DILUTION,
           "graph_at_drift": "updated", "figure_seeds": FIGURE_SEEDS},
    "ci": {"seeds": VERDICT_SEEDS["ci"], "calibration_seeds": CALIBRATION_SEEDS["ci"], "n_rounds": 1500, "n_experts": 10, "k": 2, "gamma": None, "floor": 0.05,
           "prior_alpha": 3.0, "prior_beta": 2.0, "recovery_window": 150, "epsilon": 0.1, "drift_pairs": DRIFT_PAIRS,
           "synergy_eta": 1.0, "gammas": list(GAMMAS), "dilution": DILUTION,
           "graph_at_drift": "updated", "figure_seeds": FIGURE_SEEDS},
    "full": {"seeds": VERDICT_SEEDS["full"], "calibration_seeds": CALIBRATION_SEEDS["full"], "n_rounds": 5000, "n_experts": 10, "k": 2, "gamma": None, "floor": 0.05,
             "prior_alpha": 3.0, "prior_beta": 2.0, "recovery_window": 300, "epsilon": 0.1, "drift_pairs": DRIFT_PAIRS,
             "synergy_eta": 1.0, "gammas": list(GAMMAS), "dilution": DILUTION,
           "graph_at_drift": "updated", "figure_seeds": FIGURE_SEEDS},
},
    seeds=SEED, calibration_seeds=SEED, figure_seeds=COUNT, dilution=NONNEGATIVE, graph_at_drift=one_of("updated", "stale"),
    n_rounds=COUNT, n_experts=COUNT, k=COUNT, floor=POSITIVE,
    prior_alpha=POSITIVE, prior_beta=POSITIVE, recovery_window=COUNT, epsilon=FRACTION, drift_pairs=NONNEGATIVE,
    synergy_eta=NONNEGATIVE, gammas=Range(gt=0, le=1), gamma=Range(gt=0, le=1))


def _select(policy, cfg, state, env, graph, semantic, t, k, rng, oracle, teams):
    """The team (S, K) that `policy` picks at round t (posteriors in `state`)."""
    s, n = state["alpha"].shape
    req, diff = env.required[:, t], env.difficulty[:, t]
    alpha, beta = state["alpha"], state["beta"]
    if policy == "kabb (team synergy)":
        theta = _kappa_draws(alpha, beta, graph, env, t, rng)  # Eq. 2's draws, scored per team
        score = (theta @ teams.T) / k * team_synergy(graph, teams, req) ** cfg.synergy_eta
        return teams[score.argmax(1)]
    if policy.startswith("kabb"):
        return kabb_select(alpha, beta, graph, env.dependencies, req, diff, k, rng,
                           use_distance=policy != "kabb (no distance)",
                           overlap=None if semantic is None else semantic[:, t])[0]
    if policy == "contextual thompson":
        theta = rng.beta(state["alpha_c"], state["beta_c"])  # (S, K, C)
        return top_k((theta * req[:, None]).sum(-1) / np.maximum(req.sum(-1), 1)[:, None], k)
    if policy == "knowledge only":  # the graph alone: the k largest overlaps ρ, ties at random
        return top_k(concept_overlap(graph, req) + 1e-6 * rng.random((s, n)), k)
    if policy == "thompson":
        return top_k(rng.beta(alpha, beta), k)
    if policy == "ucb1":
        pulls, wins = state["pulls"], state["wins"]
        mean = np.where(pulls > 0, wins / np.maximum(pulls, 1), np.inf)
        return top_k(mean + np.sqrt(2 * np.log(t + 1) / np.maximum(pulls, 1)), k)
    if policy == "epsilon-greedy":
        greedy = top_k(state["wins"] / np.maximum(state["pulls"], 1) + 1e-9 * rng.random((s, n)), k)
        return np.where((rng.random(s) < cfg.epsilon)[:, None], top_k(rng.random((s, n)), k), greedy)
    if policy in ("random", "call-all"):
        return top_k(rng.random((s, n)), k)
    if policy == "best fixed team":
        return oracle[2]
    return oracle[0][:, t]  # oracle: the best team for this task


def simulate(env: Environment, policy: str, cfg, stream: int = 0, oracle=None, gamma: float | None = None,
             with_oracle: bool = True) -> dict[str, np.ndarray]:
    """Run `policy` for every seed of `env`. Returns per-round (S, T) arrays: expected reward of the chosen
    team, the per-task oracle team's, the realised reward, and the number of experts called. `oracle`: a
    precomputed `oracle_table(env, cfg.k)` (computed here when None and the policy or the regret needs it;
    `with_oracle=False` skips it where only rewards are read); `gamma`: KABB's decay per round (default
    `decay_gamma(cfg)`).

    "kabb (team synergy)" scores every team by the mean of its members' κ-shaped draws times Synergy(S, t)^η
    (the paper's team-level term, in our reading); "contextual thompson" keeps one Beta posterior per
    (expert, concept) and scores an expert by its draws' mean over the task's concepts."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; valid policies: {', '.join(POLICIES)}")
    s, t_max = env.difficulty.shape
    n, c = env.capability.shape[1:]
    k = n if policy == "call-all" else cfg.k
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} must be between 1 and the number of experts ({n})")
    decays = policy.startswith("kabb") and policy != "kabb (no decay)"
    gamma = (decay_gamma(cfg) if gamma is None else gamma) if decays else 1.0
    rng = numpy_rng(stream, "kabb-policy", policy, s, t_max)
    state = {"alpha": np.full((s, n), cfg.prior_alpha), "beta": np.full((s, n), cfg.prior_beta),
             "pulls": np.zeros((s, n)), "wins": np.zeros((s, n)),
             "alpha_c": np.full((s, n, c), cfg.prior_alpha), "beta_c": np.full((s, n, c), cfg.prior_beta)}
    updated = cfg.graph_at_drift == "updated"
    semantic = semantic_overlap_table(env) if policy == "kabb (semantic distance)" else None
    if oracle is None and (with_oracle or policy in ("oracle", "best fixed team")):
        oracle = oracle_table(env, cfg.k, cfg.dilution)
    teams = np.array([np.isin(np.arange(n), t) for t in combinations(range(n), k)]) \
        if policy == "kabb (team synergy)" else None
    out = {key: np.zeros((s, t_max)) for key in ("expected", "reward", "calls")}
    if oracle is not None:
        out["oracle"] = oracle[1]
    for t in range(t_max):
        if decays:
            state["alpha"], state["beta"] = decay(state["alpha"], state["beta"], 1, gamma, cfg.floor)
        graph = env.misleading_graph if policy == "kabb (misleading graph)" else env.knowledge_graph(t, updated)
        team = _select(policy, cfg, state, env, graph, semantic, t, k, rng, oracle, teams)
        req = env.required[:, t]
        p = success_probability(env.capability_at(t), team, req, env.difficulty[:, t], cfg.dilution)
        r = (env.uniforms[:, t] < p).astype(float)
        state["alpha"], state["beta"] = update(state["alpha"], state["beta"], team, r)
        state["pulls"], state["wins"] = state["pulls"] + team, state["wins"] + team * r[:, None]
        if policy == "contextual thompson":
            cell = team[..., None] & req[:, None]
            state["alpha_c"], state["beta_c"] = update(state["alpha_c"], state["beta_c"], cell, r[:, None])
        out["expected"][:, t], out["reward"][:, t], out["calls"][:, t] = p, r, team.sum(-1)
    return out


def _kappa_draws(alpha, beta, graph, env, t, rng) -> np.ndarray:
    """Per-expert θ ~ Beta(κα, β) (Eq. 2) for the team-level score."""
    rho = concept_overlap(graph, env.required[:, t])
    dist = knowledge_distance(rho, env.dependencies, alpha / (alpha + beta), env.difficulty[:, t, None],
                              alpha.shape[-1])
    return rng.beta(np.exp(-dist) * alpha, beta)


def run_all(cfg, policies=POLICIES) -> tuple[Environment, dict[str, dict[str, np.ndarray]]]:
    """The environment of `cfg.seeds` and every policy's run on it (common random numbers across policies)."""
    env = make_environment(cfg.seeds, cfg.n_rounds, cfg.n_experts, cfg.drift_pairs)
    oracle, gamma = oracle_table(env, cfg.k, cfg.dilution), decay_gamma(cfg)
    return env, {p: simulate(env, p, cfg, oracle=oracle, gamma=gamma) for p in policies}


def gamma_sweep(env: Environment, cfg, gammas=None) -> dict[float, dict[str, np.ndarray]]:
    """KABB (correct graph) run at every decay γ of the sweep (γ = 1: no decay), same tasks and coins (rewards
    only: no oracle)."""
    return {g: simulate(env, "kabb", cfg, gamma=g, with_oracle=False) for g in (gammas or cfg.gammas)}


def calibrate_decay(cfg) -> dict:
    """The decay γ per round that KABB runs with, chosen on `cfg.calibration_seeds`: KABB (correct graph) at every γ
    of the sweep (γ = 1, no decay, included) in the drifting world, and the γ with the highest mean reward in the
    `recovery_window` rounds right after the drift, what decay is for. (Over the whole stream reward only grows
    with γ up to no decay: forgetting costs more before the drift than it gains after it, so that objective has no
    optimum below 1.) `bracket_margin` is the chosen γ's window reward minus the larger of its two neighbours' in
    the sweep, −1 when it lies at the sweep's edge (the sweep does not bracket it, or no decay wins). No claim
    statistic is read. Cached (`zoo.results`); the book's builder computes it in its warm-up. Returns {"gammas",
    "window_reward", "reward" (whole stream), "gamma", "bracket_margin"}."""
    settings = {key: cfg[key] for key in cfg if key not in ("seeds", "gamma", "figure_seeds")}

    def compute():
        calib = config_like(cfg, seeds=cfg.calibration_seeds)
        env = make_environment(calib.seeds, calib.n_rounds, calib.n_experts, calib.drift_pairs)
        gammas = sorted(cfg.gammas)
        runs = gamma_sweep(env, calib, gammas).values()
        window = [float(recovery_reward(r, cfg.recovery_window).mean()) for r in runs]
        best = int(np.argmax(window))
        interior = 0 < best < len(gammas) - 1
        margin = window[best] - max(window[best - 1], window[best + 1]) if interior else -1.0
        return {"gammas": gammas, "window_reward": window, "reward": [float(r["expected"].mean()) for r in runs],
                "gamma": gammas[best], "bracket_margin": margin}

    return zoo.results("kabb-decay-calibration", settings, compute, sources=zoo.chapter_modules(sys.modules[__name__]))[0]


def decay_gamma(cfg) -> float:
    """KABB's decay γ per round: `cfg.gamma` where set, else the one `calibrate_decay` chose."""
    gamma = calibrate_decay(cfg)["gamma"] if cfg.gamma is None else float(cfg.gamma)
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    return gamma


CLAIM_POLICIES = ("kabb", "kabb (misleading graph)", "kabb (no decay)", "knowledge only", "thompson", "random",
                  "call-all", "oracle")


def claim_runs(cfg) -> tuple[dict, dict]:
    """What the claims read on `cfg.seeds`: `claims.claim_measurements` of the selectors they compare
    (`CLAIM_POLICIES`, common random numbers), with the decay calibration's `bracket_margin`, and the drift claim's
    null (`drift_null`). Cached (`zoo.results`, values as lists); the book's builder computes it in its warm-up.
    Returns (measured, null)."""
    from .claims import claim_measurements

    settings = {key: cfg[key] for key in cfg if key != "figure_seeds"} | {"gamma": decay_gamma(cfg)}

    def compute():
        env, runs = run_all(cfg, CLAIM_POLICIES)
        measured = claim_measurements(runs, cfg) | {"bracket_margin": calibrate_decay(cfg)["bracket_margin"]}
        return {"measured": measured, "null": drift_null(cfg)}

    value = zoo.results("kabb-runs", settings, compute, sources=zoo.chapter_modules(sys.modules[__name__]))[0]
    return value["measured"], value["null"]


def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry): `calibrate_decay` and
    `claim_runs`."""
    claim_runs(cfg)


def config_like(cfg, **overrides):
    """`cfg` with `overrides` (a config of the same scale)."""
    return config(cfg.scale, **{key: cfg[key] for key in cfg if key != "scale"} | overrides)


# ------------------------------------------------------------------------------------------------ summaries

def mean_ci(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and normal-approximation 95% confidence interval over seeds."""
    x = np.asarray(x, float)
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else np.inf
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def cumulative_regret(run: dict[str, np.ndarray]) -> np.ndarray:
    """Σ_t (oracle's expected reward − the chosen team's), per seed and round (S, T)."""
    return np.cumsum(run["oracle"] - run["expected"], axis=1)


def rolling(x: np.ndarray, window: int) -> np.ndarray:
    """Moving average along the last axis (shorter at the start)."""
    c = np.cumsum(np.concatenate([np.zeros(x.shape[:-1] + (1,)), x], -1), -1)
    idx = np.arange(1, x.shape[-1] + 1)
    lo = np.maximum(0, idx - window)
    return (c[..., idx] - c[..., lo]) / (idx - lo)


def recovery_reward(run: dict[str, np.ndarray], window: int) -> np.ndarray:
    """Mean expected reward in the `window` rounds right after the drift (T/2), per seed."""
    t0 = run["expected"].shape[1] // 2
    return run["expected"][:, t0:t0 + window].mean(1)


def phase_reward(run: dict[str, np.ndarray], lo: float, hi: float) -> np.ndarray:
    """Mean expected reward over the rounds [lo·T, hi·T), per seed."""
    t = run["expected"].shape[1]
    return run["expected"][:, int(lo * t):int(hi * t)].mean(1)


def drop_at_drift(run: dict[str, np.ndarray], window: int) -> np.ndarray:
    """Mean expected reward in the `window` rounds before the drift (T/2) minus the `window` rounds after it."""
    t0 = run["expected"].shape[1] // 2
    return run["expected"][:, max(t0 - window, 0):t0].mean(1) - recovery_reward(run, window)


def adaptation_gain(runs: dict[str, dict[str, np.ndarray]], window: int) -> np.ndarray:
    """The drift claim's statistic per seed: KABB without decay's drop at the drift minus KABB with decay's (a
    difference in differences: what decay costs before and after the drift alike cancels)."""
    return drop_at_drift(runs["kabb (no decay)"], window) - drop_at_drift(runs["kabb"], window)


def drift_null(cfg) -> dict[str, np.ndarray]:
    """The drift claim's null control: the adaptation gain in the world of the same seeds without a drift (the same
    experts, tasks and coins; nobody's skills change), by the same pipeline."""
    env = make_environment(cfg.seeds, cfg.n_rounds, cfg.n_experts, drift_pairs=0)
    gamma = decay_gamma(cfg)
    runs = {p: simulate(env, p, cfg, gamma=gamma, with_oracle=False) for p in ("kabb", "kabb (no decay)")}
    return {"adaptation_gain": adaptation_gain(runs, cfg.recovery_window)}


WORLD_POLICIES = ("oracle", "call-all", "random", "kabb (no decay)")


def world_preconditions(cfg) -> dict[str, float]:
    """The world-level preconditions of the cost and drift claims on `cfg.seeds` (no claim statistic is
    computed): whether a team of k can beat calling every expert, whether calling every expert beats a random team,
    and how much KABB without decay loses after the drift."""
    env = make_environment(cfg.seeds, cfg.n_rounds, cfg.n_experts, cfg.drift_pairs)
    oracle = oracle_table(env, cfg.k, cfg.dilution)
    runs = {p: simulate(env, p, cfg, oracle=oracle) for p in WORLD_POLICIES}
    return {"oracle_over_call_all": float((runs["oracle"]["expected"].mean(1)
                                           / runs["call-all"]["expected"].mean(1)).mean()),
            "call_all_over_random": float((runs["call-all"]["expected"].mean(1)
                                           - runs["random"]["expected"].mean(1)).mean()),
            "drift_drop_no_decay": float(drop_at_drift(runs["kabb (no decay)"], cfg.recovery_window).mean())}


def calibrate_world(scale: str = "ci", dilutions=(0.0, 1.0, 2.0, 3.0), drift_pairs=(2, 3, 5)) -> list[dict]:
    """The regime table behind `DILUTION` and the drift: `world_preconditions` on the calibration seeds for each
    (dilution, drift_pairs), the graph updated at the drift."""
    rows = []
    for lam in dilutions:
        for pairs in drift_pairs:
            cfg = config(scale, seeds=CALIBRATION_SEEDS[scale], dilution=lam, drift_pairs=pairs)
            rows.append({"dilution": lam, "drift_pairs": pairs} | world_preconditions(cfg))
    return rows
