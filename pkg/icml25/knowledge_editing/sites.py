"""Where an edit writes: decoder block `l`'s MLP down-projection W, whose input k at one token is the edit's key,
and one forward pass that reads the keys (and the residual stream) at chosen word positions."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..core import models


def block(model, layer: int):
    """Decoder block `layer` of any causal LM (:func:`icml25.core.models.decoder_blocks`)."""
    blocks = models.decoder_blocks(model)
    if not 0 <= layer < len(blocks):
        raise ValueError(f"layer {layer} out of range; the model has layers 0..{len(blocks) - 1}")
    return blocks[layer]


def down_proj(model, layer: int) -> nn.Module:
    """The MLP's output projection of `layer`, whose weight ROME and MEMIT edit: `mlp.down_proj` (an `nn.Linear`,
    Llama, Qwen2, Mistral) or `mlp.c_proj` (GPT-2's `Conv1D`, weight stored transposed)."""
    mlp = block(model, layer).mlp
    return mlp.down_proj if hasattr(mlp, "down_proj") else mlp.c_proj


def down_weight(model, layer: int) -> torch.Tensor:
    """The down-projection's weight as W of shape (d_out, d_in), so that the MLP output is W k (a view: adding to
    it edits the model, whatever the layer's storage)."""
    down = down_proj(model, layer)
    return down.weight if isinstance(down, nn.Linear) else down.weight.T


def _encode(tok, prompts: Sequence[str], positions: Sequence[int]):
    """A left-padded batch and the (row, column) of one word position per prompt (one token per word)."""
    enc = tok(list(prompts), return_tensors="pt", padding=True)
    pad = enc["input_ids"].shape[1] - torch.tensor([len(p.split()) for p in prompts])
    return enc, torch.arange(len(prompts)), pad + torch.as_tensor(list(positions), dtype=torch.long)


def _output(o):
    return o[0] if isinstance(o, tuple) else o


@torch.no_grad()
def site_states(model, tok, prompts: Sequence[str], positions: Sequence[int], layers: Sequence[int],
                out_layer: int | None = None) -> tuple[dict[int, torch.Tensor], torch.Tensor | None]:
    """One forward pass: the down-projection inputs k (keys) of each of `layers` at one word position per prompt
    (prompts are left-padded), and, if `out_layer` is given, the residual stream after that block at the same
    positions (before any final norm)."""
    keys, res, hooks = {}, [], []
    for l in layers:
        hooks.append(down_proj(model, l).register_forward_pre_hook(lambda m, a, l=l: keys.__setitem__(l, a[0])))
    if out_layer is not None:
        hooks.append(block(model, out_layer).register_forward_hook(lambda m, a, o: res.append(_output(o))))
    enc, rows, cols = _encode(tok, prompts, positions)
    try:
        model(**enc)
    finally:
        for h in hooks:
            h.remove()
    return {l: k[rows, cols] for l, k in keys.items()}, (res[0][rows, cols] if res else None)


def keys_at(model, tok, prompts: Sequence[str], positions: Sequence[int], layer: int) -> torch.Tensor:
    """Inputs k of the down-projection of `layer` at one word position per prompt (prompts are left-padded)."""
    return site_states(model, tok, prompts, positions, [layer])[0][layer]
