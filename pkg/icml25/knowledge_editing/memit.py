"""A MEMIT-style batched multi-layer update (Meng et al., 2023), Eq. (3): every edit of a window at once, its
residual spread over the critical layers ending at the traced one."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..knowledge_editing_world import Edit, FactWorld
from .rome import edit_prompts, essence_prompts
from .sites import down_weight, site_states
from .values import ValueObjective, ValueRequest, optimise_values


def memit_layers(layer: int) -> list[int]:
    """MEMIT spreads its update over the critical layers ending at the traced one: here the traced layer and the
    one below it."""
    return sorted({max(0, layer - 1), layer})


def memit_edit(model, tok, world: FactWorld, edits: Sequence[Edit], Cs: dict[int, torch.Tensor],
               layers: Sequence[int], steps: int, lr: float, lam: float, token: str = "last",
               objective: ValueObjective = ValueObjective()) -> None:
    """A MEMIT-style batched update (Meng et al., 2023) of every edit in `edits` at once, spread over `layers`.

    For each edit, a target hidden state z_i = h_L + δ_i of the residual stream after the top layer L is found by
    optimising δ_i (the value step of ROME, with the same objective, every edit's at once by
    :func:`optimise_values`); then, layer by layer from the bottom, the remaining residual
    R = (z − h_L) / (L − l + 1) is written into W_l by the least-squares update

        (3)  ΔW_l = Rᵀ K_l (λ C_l + K_lᵀ K_l)⁻¹

    with K_l the edits' keys at layer l and C_l = E[k kᵀ] over the keys of generic text at layer l
    (:func:`generic_keys`), weighted by λ (the official `mom2_update_weight`): MEMIT's least-squares objective
    ‖W K − V‖² over the edits plus λ times the preserved keys' error. Keys and h_L are each edit's mean over its
    prompts.
    """
    top = max(layers)
    for e in edits:
        if world.answer(e.subject, e.relation) == e.new:
            raise ValueError(f"edit target {e.new!r} equals the current object")
    requests = [ValueRequest(*edit_prompts(e, token), e.new, essence_prompts(e, token)) for e in edits]
    prompts = [p for r in requests for p in r.prompts]
    positions = [c for r in requests for c in r.positions]
    owner = torch.tensor([i for i, r in enumerate(requests) for _ in r.prompts])

    def per_edit(x):  # the mean over each edit's prompts
        return torch.zeros(len(edits), x.shape[1]).index_add_(0, owner, x) / torch.bincount(owner)[:, None]

    delta = optimise_values(model, tok, requests, top, steps, lr, objective)[0]
    z = per_edit(site_states(model, tok, prompts, positions, [], top)[1]) + delta
    for i, layer in enumerate(sorted(layers)):
        keys, h = site_states(model, tok, prompts, positions, [layer], top)
        K, R = per_edit(keys[layer]), (z - per_edit(h)) / (len(layers) - i)
        with torch.no_grad():
            down_weight(model, layer).add_(torch.linalg.solve(lam * Cs[layer] + K.T @ K, K.T @ R).T)
    for e in edits:
        world.apply(e)
