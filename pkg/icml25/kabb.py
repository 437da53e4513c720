"""KABB: Knowledge-Aware Bayesian Bandits for Dynamic Expert Coordination (Zhang et al., ICML 2025)

A multi-agent system answers each task with a small team of expert LLMs instead of all of them. KABB picks the
team by Thompson sampling whose Beta posteriors are reshaped by a *knowledge distance* between the task and
each expert:

    Dist(e, t) = ln(1 + d_t) · [w₁(1 − ρ_e,t) + w₂ · |dep_e| / K + w₃(1 − h_e)]                   (Eq. 1)

with ρ the share of the task's concepts the expert's knowledge-graph entry covers, |dep_e| its dependencies,
h_e = α_e/(α_e + β_e) its historical success and d_t the task's difficulty;

    κ_e = exp(−Dist(e, t)),     θ_e ~ Beta(κ_e α_e, β_e),     team = top-k of θ                     (Eq. 2)

and a dual adaptation: posteriors decay each round, (α, β) ← γ^Δt (α, β) (Eq. 3), and the experts called
are updated with the task's reward r ∈ [0, 1]: α += r, β += 1 − r (Eq. 4). Here time is counted in rounds
(the official code uses wall-clock seconds) and the decay has a floor so that a long-idle expert's Beta
parameters never underflow to zero.

The environment is simulated (experts with capabilities over concepts, tasks with required concepts and a
difficulty, Bernoulli team rewards, a drift in which the best expert degrades), vectorised over seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from .core.claims import Claim
from .core.config import make_config
from .core.seeding import numpy_rng
from .core.sentence import embed

CONCEPTS = ("algebra", "geometry", "coding", "writing", "biology", "history")
WEIGHTS = (0.4, 0.3, 0.3)  # w₁ (concept overlap), w₂ (dependencies), w₃ (history): the official defaults
POLICIES = ("kabb", "kabb (misleading graph)", "kabb (no decay)", "kabb (no distance)", "kabb (semantic distance)",
            "thompson", "ucb1", "epsilon-greedy", "random", "call-all", "oracle")
# how a task asks for a concept, and how an expert's profile describes it (different words on purpose)
TASK_PHRASES = dict(zip(CONCEPTS, ("solve an equation for x", "find the area of a triangle",
                                   "fix a bug in a Python function", "edit an essay for clarity",
                                   "explain how cells copy their DNA", "name the causes of the First World War")))
PROFILE_PHRASES = dict(zip(CONCEPTS, ("algebra and polynomials", "geometry and shapes", "software programming",
                                      "writing and literature", "biology and genetics", "history and politics")))

config = make_config({
    "smoke": {"seeds": list(range(6)), "n_rounds": 300, "n_experts": 10, "k": 2, "gamma": 0.99, "floor": 0.05,
              "prior_alpha": 3.0, "prior_beta": 2.0, "drift_factor": 0.2, "recovery_window": 50, "epsilon": 0.1},
    "ci": {"seeds": list(range(50)), "n_rounds": 1500, "n_experts": 10, "k": 2, "gamma": 0.99, "floor": 0.05,
           "prior_alpha": 3.0, "prior_beta": 2.0, "drift_factor": 0.2, "recovery_window": 150, "epsilon": 0.1},
    "full": {"seeds": list(range(200)), "n_rounds": 5000, "n_experts": 10, "k": 2, "gamma": 0.99, "floor": 0.05,
             "prior_alpha": 3.0, "prior_beta": 2.0, "drift_factor": 0.2, "recovery_window": 300, "epsilon": 0.1},
})

# ---------------------------------------------------------------------------------------------------- claims

REGRET = Claim(
    chapter="kabb", id="regret",
    paper_statement="Knowledge-aware Thompson sampling coordinates experts better than bandits that ignore "
                    "knowledge",
    paper_value="AlpacaEval 2.0 LC 77.9% (KABB) vs 68.1% (MoA); ablations without distance terms lower",
    criterion="With a correct knowledge graph, KABB's cumulative regret is lower than plain Beta Thompson "
              "sampling's: the 95% confidence interval of the per-seed difference (KABB − TS) lies below 0 "
              "(≥ 50 seeds)",
    test=lambda m: m["regret_diff_ci_high"] < 0,
)

COST = Claim(
    chapter="kabb", id="cost",
    paper_statement="KABB keeps high quality while calling 2–3 experts instead of a mixture-of-agents' 6",
    paper_value="2–3 experts vs 6; about 1/7 of MoA's cost",
    criterion="KABB's mean reward is at least 95% of calling every expert, with at most 1/3 of its expert calls "
              "(means over ≥ 50 seeds)",
    test=lambda m: m["kabb_reward"] >= 0.95 * m["call_all_reward"] and m["kabb_calls"] <= m["call_all_calls"] / 3,
)

DRIFT = Claim(
    chapter="kabb", id="drift",
    paper_statement="The dual adaptation (time decay) lets KABB follow experts whose quality changes",
    paper_value="qualitative (dual-adaptation mechanism)",
    criterion="In the window right after the best expert degrades, KABB with decay earns more reward than KABB "
              "without decay: the 95% confidence interval of the per-seed difference lies above 0 (≥ 50 seeds)",
    test=lambda m: m["recovery_diff_ci_low"] > 0,
)


# ------------------------------------------------------------------------------------------------ the method

def knowledge_distance(overlap, n_dependencies, history, difficulty, n_experts: int, weights=WEIGHTS):
    """Eq. 1: Dist = ln(1 + d)·[w₁(1 − ρ) + w₂·|dep|/K + w₃(1 − h)]; ≥ 0, and 0 when ρ = 1, no dependencies
    and h = 1 (or d = 0). Broadcasts over arrays."""
    overlap, history = np.asarray(overlap, float), np.asarray(history, float)
    if np.any((overlap < 0) | (overlap > 1)) or np.any((history < 0) | (history > 1)):
        raise ValueError("overlap and history must lie in [0, 1]")
    if np.any(np.asarray(difficulty) < 0):
        raise ValueError("difficulty must be non-negative")
    w1, w2, w3 = weights
    spread = w1 * (1 - overlap) + w2 * np.asarray(n_dependencies) / n_experts + w3 * (1 - history)
    return np.log1p(difficulty) * spread


def concept_overlap(graph: np.ndarray, required: np.ndarray) -> np.ndarray:
    """ρ: the share of the task's required concepts that the expert's knowledge-graph entry lists.
    `graph` (..., K, C) and `required` (..., C) booleans; a task with no concepts gives 0.5 (as the official code)."""
    n_req = required.sum(-1)[..., None]
    hits = (graph & required[..., None, :]).sum(-1)
    return np.where(n_req > 0, hits / np.maximum(n_req, 1), 0.5)


def task_concepts(names, concepts=CONCEPTS) -> np.ndarray:
    """The boolean concept vector of a task described by concept names; an unknown name is an error."""
    unknown = [n for n in names if n not in concepts]
    if unknown:
        raise ValueError(f"unknown concept(s) {unknown}; valid concepts: {', '.join(concepts)}")
    return np.array([c in names for c in concepts])


def task_text(required) -> str:
    """A task description generated from its boolean concept vector (C,)."""
    names = [c for c, r in zip(CONCEPTS, required) if r]
    return f"A question on {' and '.join(names)}: " + ", and ".join(TASK_PHRASES[c] for c in names) + "."


def expert_profile(concepts) -> str:
    """An expert's profile generated from the concepts its knowledge-graph entry lists (C,) booleans."""
    return "An expert in " + ", and in ".join(PROFILE_PHRASES[c] for c, g in zip(CONCEPTS, concepts) if g) + "."


def semantic_overlap(task_texts, profiles) -> np.ndarray:
    """Semantic ρ: cosine similarity of task texts (n,) and expert profiles (m,) embeddings, clipped to [0, 1]."""
    return np.clip(embed(task_texts) @ embed(profiles).T, 0.0, 1.0)


def semantic_overlap_table(env: "Environment") -> np.ndarray:
    """Semantic ρ (S, T, K) for every seed, round and expert (profiles from the correct graph); only the distinct
    concept sets are embedded."""
    codes = 2 ** np.arange(len(CONCEPTS))
    task_codes, expert_codes = env.required @ codes, env.graph @ codes
    t_u, t_inv = np.unique(task_codes, return_inverse=True)
    e_u, e_inv = np.unique(expert_codes, return_inverse=True)
    as_bool = lambda u: (u[:, None] & codes) > 0
    sim = semantic_overlap([task_text(r) for r in as_bool(t_u)], [expert_profile(g) for g in as_bool(e_u)])
    return sim[t_inv.reshape(task_codes.shape)[..., None], e_inv.reshape(expert_codes.shape)[:, None, :]]


def decay(alpha, beta, rounds, gamma: float, floor: float):
    """Eq. 3 in rounds: (α, β) ← γ^Δt (α, β), but never below `floor` (so Beta(κα, β) stays defined)."""
    f = gamma ** np.asarray(rounds, float)
    return np.maximum(alpha * f, floor), np.maximum(beta * f, floor)


def update(alpha, beta, chosen, reward):
    """Eq. 4: every chosen expert gets α += r, β += 1 − r with r clamped to [0, 1] (α + β grows by exactly 1)."""
    r = np.clip(np.asarray(reward, float), 0, 1)[..., None]
    return alpha + chosen * r, beta + chosen * (1 - r)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of the k largest scores along the last axis (k distinct experts)."""
    n = scores.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} must be between 1 and the number of experts ({n})")
    idx = np.argpartition(-scores, k - 1, axis=-1)[..., :k]
    mask = np.zeros(scores.shape, bool)
    np.put_along_axis(mask, idx, True, axis=-1)
    return mask


def kabb_select(alpha, beta, graph, n_dependencies, required, difficulty, k: int, rng, use_distance=True,
                overlap=None):
    """Eq. 2: κ = exp(−Dist), θ ~ Beta(κα, β), team = top-k of θ. `overlap`: a given ρ (..., K), e.g. the
    semantic one, instead of the graph's. Returns (team mask, κ)."""
    if use_distance:
        rho = concept_overlap(graph, required) if overlap is None else overlap
        dist = knowledge_distance(rho, n_dependencies, alpha / (alpha + beta), difficulty[..., None],
                                  alpha.shape[-1])
        kappa = np.exp(-dist)
    else:
        kappa = np.ones_like(alpha)
    return top_k(rng.beta(kappa * alpha, beta), k), kappa


# ------------------------------------------------------------------------------------------- the environment

@dataclass(frozen=True)
class Environment:
    """Experts and a stream of tasks for a batch of seeds (leading axis S).

    capability (S, K, C) in [0, 1]; graph (S, K, C): the knowledge graph's concepts per expert (correct: the
    concepts with capability ≥ 0.5); dependencies (S, K); required (S, T, C); difficulty (S, T) in [1, 5];
    uniforms (S, T) for the Bernoulli rewards (shared by every policy: common random numbers); best (S,): the
    expert that degrades at T/2.
    """

    capability: np.ndarray
    graph: np.ndarray
    misleading_graph: np.ndarray
    dependencies: np.ndarray
    required: np.ndarray
    difficulty: np.ndarray
    uniforms: np.ndarray
    best: np.ndarray
    drift_factor: float

    @property
    def n_rounds(self) -> int:
        return self.required.shape[1]

    def capability_at(self, t: int) -> np.ndarray:
        """Capabilities at round t: the best expert's are multiplied by `drift_factor` from T/2 on."""
        if t < self.n_rounds // 2:
            return self.capability
        cap = self.capability.copy()
        cap[np.arange(len(cap)), self.best] *= self.drift_factor
        return cap


def make_environment(seeds, n_rounds: int, n_experts: int = 10, drift_factor: float = 0.2) -> Environment:
    """Specialist experts (1–2 strong concepts each, weak elsewhere) and tasks needing 1–2 concepts."""
    caps, graphs, bad, deps, reqs, diffs, us, best = [], [], [], [], [], [], [], []
    c = len(CONCEPTS)
    for s in seeds:
        rng = numpy_rng(s, "kabb-env")
        cap = rng.uniform(0.0, 0.35, (n_experts, c))
        for e in range(n_experts):
            strong = rng.choice(c, size=rng.integers(1, 3), replace=False)
            cap[e, strong] = rng.uniform(0.6, 1.0, strong.size)
        graph = cap >= 0.5
        caps.append(cap)
        graphs.append(graph)
        bad.append(graph[rng.permutation(n_experts)])  # a graph that credits each expert with another's skills
        deps.append(rng.integers(0, 3, n_experts))
        req = np.zeros((n_rounds, c), bool)
        n_req = rng.integers(1, 3, n_rounds)
        for t in range(n_rounds):
            req[t, rng.choice(c, n_req[t], replace=False)] = True
        reqs.append(req)
        diffs.append(rng.integers(1, 6, n_rounds).astype(float))
        us.append(rng.random(n_rounds))
        best.append(int(np.argmax(cap.max(1) + cap.mean(1))))
    return Environment(np.array(caps), np.array(graphs), np.array(bad), np.array(deps), np.array(reqs),
                       np.array(diffs), np.array(us), np.array(best), drift_factor)


def success_probability(capability: np.ndarray, team: np.ndarray, required: np.ndarray, difficulty: np.ndarray):
    """p(S, t) = σ(4·coverage + 2·complementarity − 0.5·d): coverage is the mean over required concepts of the
    team's best capability, complementarity the mean of 1 − Π(1 − capability) over the team (members who cover
    each other's gaps). `team` (..., K) bool."""
    cap = np.where(team[..., None], capability, 0.0)  # (..., K, C)
    n = np.maximum(required.sum(-1), 1)
    coverage = (cap.max(-2) * required).sum(-1) / n
    complement = ((1 - np.prod(1 - cap, axis=-2)) * required).sum(-1) / n
    return 1 / (1 + np.exp(-(4 * coverage + 2 * complement - 0.5 * difficulty)))


def team_table(capability: np.ndarray, required: np.ndarray, difficulty: np.ndarray, k: int):
    """Every team of k experts and its success probability on every task: (teams (P, K) bool, p (S, P, T))."""
    n = capability.shape[-2]
    teams = np.array([np.isin(np.arange(n), c) for c in combinations(range(n), k)])
    probs = np.stack([success_probability(capability[:, None], np.broadcast_to(m, (capability.shape[0], 1, n)),
                                          required, difficulty) for m in teams], 1)
    return teams, probs


def oracle_table(env: Environment, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's best team and its success probability for every seed and round: ((S, T, K), (S, T))."""
    half = env.n_rounds // 2
    best_p, best_team = [], []
    for lo, hi in ((0, half), (half, env.n_rounds)):
        teams, probs = team_table(env.capability_at(lo), env.required[:, lo:hi], env.difficulty[:, lo:hi], k)
        best_p.append(probs.max(1))
        best_team.append(teams[probs.argmax(1)])
    return np.concatenate(best_team, 1), np.concatenate(best_p, 1)


def simulate(env: Environment, policy: str, cfg, stream: int = 0, oracle=None) -> dict[str, np.ndarray]:
    """Run `policy` for every seed of `env`. Returns per-round (S, T) arrays: expected reward of the chosen
    team, the oracle team's, the realised reward, and the number of experts called. `oracle`: a precomputed
    `oracle_table(env, cfg.k)` (computed here when None)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; valid policies: {', '.join(POLICIES)}")
    s, t_max = env.difficulty.shape
    n = env.capability.shape[1]
    k = n if policy == "call-all" else cfg.k
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} must be between 1 and the number of experts ({n})")
    rng = numpy_rng(stream, "kabb-policy", policy, s, t_max)
    alpha, beta = np.full((s, n), cfg.prior_alpha), np.full((s, n), cfg.prior_beta)
    pulls, wins = np.zeros((s, n)), np.zeros((s, n))
    graph = env.misleading_graph if policy == "kabb (misleading graph)" else env.graph
    semantic = semantic_overlap_table(env) if policy == "kabb (semantic distance)" else None
    oracle_team, oracle_p = oracle if oracle is not None else oracle_table(env, cfg.k)
    out = {key: np.zeros((s, t_max)) for key in ("expected", "reward", "calls")}
    out["oracle"] = oracle_p
    for t in range(t_max):
        cap = env.capability_at(t)
        req, diff = env.required[:, t], env.difficulty[:, t]
        if policy.startswith("kabb"):
            if policy != "kabb (no decay)":
                alpha, beta = decay(alpha, beta, 1, cfg.gamma, cfg.floor)
            team, _ = kabb_select(alpha, beta, graph, env.dependencies, req, diff, k, rng,
                                  use_distance=policy != "kabb (no distance)",
                                  overlap=None if semantic is None else semantic[:, t])
        elif policy == "thompson":
            team = top_k(rng.beta(alpha, beta), k)
        elif policy == "ucb1":
            mean = np.where(pulls > 0, wins / np.maximum(pulls, 1), np.inf)
            team = top_k(mean + np.sqrt(2 * np.log(t + 1) / np.maximum(pulls, 1)), k)
        elif policy == "epsilon-greedy":
            greedy = top_k(wins / np.maximum(pulls, 1) + 1e-9 * rng.random((s, n)), k)
            team = np.where((rng.random(s) < cfg.epsilon)[:, None], top_k(rng.random((s, n)), k), greedy)
        elif policy in ("random", "call-all"):
            team = top_k(rng.random((s, n)), k)
        else:  # oracle: the best team for this task
            team = oracle_team[:, t]
        p = success_probability(cap, team, req, diff)
        r = (env.uniforms[:, t] < p).astype(float)
        alpha, beta = update(alpha, beta, team, r)
        pulls, wins = pulls + team, wins + team * r[:, None]
        out["expected"][:, t], out["reward"][:, t], out["calls"][:, t] = p, r, team.sum(-1)
    return out


def run_all(cfg, policies=POLICIES) -> tuple[Environment, dict[str, dict[str, np.ndarray]]]:
    """The environment of `cfg.seeds` and every policy's run on it (common random numbers across policies)."""
    env = make_environment(cfg.seeds, cfg.n_rounds, cfg.n_experts, cfg.drift_factor)
    oracle = oracle_table(env, cfg.k)
    return env, {p: simulate(env, p, cfg, oracle=oracle) for p in policies}


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
