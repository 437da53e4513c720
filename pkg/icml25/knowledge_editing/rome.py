"""ROME (Meng et al., 2022), Eq. (1): the rank-one update of the down-projection W at the edited token,

    (1)  W′ = W + (v* − W k*) (C⁻¹ k*)ᵀ / ((C⁻¹ k*)ᵀ k*)

with k* the edit's key (averaged over the training templates), v* = W k* + δ from the value step
(:mod:`.values`) and C = E[k kᵀ] the key second moment over generic text of the fact world's language."""

from __future__ import annotations

import torch

from ..core.seeding import numpy_rng
from ..knowledge_editing_world import (ALL_TEMPLATES, TRAIN_TEMPLATES, Edit, FactWorld, question, two_hop_question,
                                       with_context)
from .sites import down_proj, down_weight, keys_at
from .values import ValueObjective, optimise_value


def key_covariance(keys: torch.Tensor, ridge: float = 1e-4) -> torch.Tensor:
    """C = E[k kᵀ], the uncentred second moment of keys (rows), plus a small ridge so C is invertible."""
    return keys.T @ keys / len(keys) + ridge * torch.eye(keys.shape[1])


def rome_update(W: torch.Tensor, C: torch.Tensor, k_star: torch.Tensor, v_star: torch.Tensor) -> torch.Tensor:
    """Eq. (1): the rank-one ΔW with (W + ΔW) k* = v* that leaves W k unchanged for k ⟂ C⁻¹k*.
    W has shape (d_out, d_in) (:func:`down_weight`)."""
    u = torch.linalg.solve(C, k_star)
    return torch.outer(v_star - W @ k_star, u) / (u @ k_star)


def edit_prompts(edit: Edit, token: str = "subject") -> tuple[list[str], list[int]]:
    """The edit's question under every training template, and the position of the edited token in each: the
    subject (ROME's choice) or the last token of the question."""
    prompts = [question(edit.subject, edit.relation, t) for t in TRAIN_TEMPLATES]
    return prompts, [p.split().index(edit.subject) if token == "subject" else len(p.split()) - 1 for p in prompts]


def essence_prompts(edit: Edit, token: str = "subject") -> tuple[list[str], list[int]]:
    """ROME's KL prompt "{subject} is a" in our language: the subject alone with a question mark, "s ?", and the
    position of the edited token in it (the subject, or the last token)."""
    return [f"{edit.subject} ?"], [0 if token == "subject" else 1]


def rome_edit(model, tok, world: FactWorld, edit: Edit, C: torch.Tensor, layer: int, steps: int,
              lr: float, token: str = "subject", objective: ValueObjective = ValueObjective()) -> dict:
    """Apply one ROME edit in place (and to `world`); returns k*, v*, ΔW and the value optimisation's loss
    curve (−log p(o′) per step)."""
    if world.answer(edit.subject, edit.relation) == edit.new:
        raise ValueError(f"edit target {edit.new!r} equals the current object")
    prompts, pos = edit_prompts(edit, token)
    delta, losses = optimise_value(model, tok, prompts, pos, edit.new, layer, steps, lr, essence_prompts(edit, token),
                                   objective)
    k_star = keys_at(model, tok, prompts, pos, layer).mean(0)
    W = down_weight(model, layer)
    v_star = W @ k_star + delta
    with torch.no_grad():
        delta = rome_update(W, C, k_star, v_star)
        W += delta
    world.apply(edit)
    return {"k_star": k_star, "v_star": v_star, "delta": delta, "losses": losses}


def generic_text(world: FactWorld, n: int, seed: int) -> list[str]:
    """`n` sentences of the fact world's language, standing in for ROME's Wikipedia sample: a question under any
    template (held-out ones included), a two-hop question, or a question after a context line, each with a
    random subject, relation and (for context lines) object. Nothing is drawn from the edits."""
    rng = numpy_rng(seed, "generic-text")
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    texts = []
    for _ in range(n):
        s, r, kind = pick(world.entities), pick(world.relations), int(rng.integers(3))
        q = question(s, r, pick(ALL_TEMPLATES))
        texts.append(q if kind == 0 else two_hop_question(s, r, pick(world.relations)) if kind == 1 else
                     with_context((pick(world.entities), pick(world.relations), pick(world.entities)), q))
    return texts


@torch.no_grad()
def generic_keys(model, tok, world: FactWorld, layer: int, n: int, seed: int) -> torch.Tensor:
    """The down-projection's inputs k at every token of :func:`generic_text` (ROME's `layer_stats`: every
    position of every sampled text), as rows."""
    store = []
    h = down_proj(model, layer).register_forward_pre_hook(lambda m, a: store.append(a[0]))
    try:
        enc = tok(generic_text(world, n, seed), return_tensors="pt", padding=True)
        model(**enc)
    finally:
        h.remove()
    return store[0][enc["attention_mask"].bool()]
