"""KABB's method: the knowledge distance (Eq. 1), knowledge-aware Thompson sampling (Eq. 2), the dual adaptation
(decay, Eq. 3, and the reward update, Eq. 4), the team synergy of the paper's subset-level score, and the semantic
concept overlap."""

from __future__ import annotations

import numpy as np

from ..core.sentence import embed

CONCEPTS = ("algebra", "geometry", "coding", "writing", "biology", "history")
WEIGHTS = (0.4, 0.3, 0.3)  # w₁ (concept overlap), w₂ (dependencies), w₃ (history): the official defaults
# how a task asks for a concept, and how an expert's profile describes it (different words on purpose)
TASK_PHRASES = dict(zip(CONCEPTS, ("solve an equation for x", "find the area of a triangle",
                                   "fix a bug in a Python function", "edit an essay for clarity",
                                   "explain how cells copy their DNA", "name the causes of the First World War")))
PROFILE_PHRASES = dict(zip(CONCEPTS, ("algebra and polynomials", "geometry and shapes", "software programming",
                                      "writing and literature", "biology and genetics", "history and politics")))


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


def team_synergy(graph: np.ndarray, teams: np.ndarray, required: np.ndarray) -> np.ndarray:
    """Synergy(S, t) of every team: the share of the task's required concepts that the union of its members'
    knowledge-graph entries covers (1 when the members complement each other over the task). `graph` (S, K, C),
    `teams` (P, K) bool, `required` (S, C); returns (S, P)."""
    union = (teams[None, :, :, None] & graph[:, None]).any(2)  # (S, P, C)
    n_req = np.maximum(required.sum(-1), 1)[:, None]
    return (union & required[:, None]).sum(-1) / n_req
