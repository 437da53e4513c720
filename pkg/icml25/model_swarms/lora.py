"""The experts' parameterisation: rank-r LoRA factors A, B on the output projection of the last decoder block's MLP
of any causal LM, as one flat parameter vector per expert."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers.pytorch_utils import Conv1D

from ..core import models
from ..core.seeding import torch_generator
from .scales import CHAPTER

OUTPUT_PROJECTIONS = ("down_proj", "c_proj", "fc2", "dense_4h_to_h")  # the MLP's last linear map, by family


@dataclass(frozen=True)
class MLPSite:
    """Where the adapters act, in the last decoder block of any causal LM: the block adds
    `post(mlp(norm(h)))` to its residual stream h (`post` is Gemma-2's post-feed-forward norm, else None);
    `projection` names the MLP's output projection, the adapted map."""

    norm: torch.nn.Module
    mlp: torch.nn.Module
    projection: str
    post: torch.nn.Module | None


def mlp_site(model) -> MLPSite:
    """The last decoder block's MLP site (Llama, Qwen, Mistral, Gemma: `post_attention_layernorm` or
    `pre_feedforward_layernorm` and `down_proj`; GPT-2: `ln_2` and `c_proj`)."""
    block = models.decoder_blocks(model)[-1]
    norm = next((getattr(block, n) for n in ("pre_feedforward_layernorm", "post_attention_layernorm", "ln_2")
                 if hasattr(block, n)), None)
    projection = next((n for n in OUTPUT_PROJECTIONS if hasattr(block.mlp, n)), None)
    if norm is None or projection is None:
        raise ValueError(f"{type(model).__name__}: cannot find the last block's MLP norm and output projection")
    return MLPSite(norm, block.mlp, projection, getattr(block, "post_feedforward_layernorm", None))


def weight_out_in(module: torch.nn.Module) -> torch.Tensor:
    """A linear map's weight as [out, in]: `nn.Linear` stores it so, GPT-2's Conv1D stores [in, out] (a view)."""
    return module.weight.T if isinstance(module, Conv1D) else module.weight


def lora_shapes(model, rank: int) -> list[tuple[str, tuple[int, int], tuple[int, int]]]:
    """(name, shape of A, shape of B) of each adapted linear map W [out, in]: A is [r, in], B is [out, r]."""
    site = mlp_site(model)
    n_out, n_in = weight_out_in(getattr(site.mlp, site.projection)).shape
    return [(site.projection, (rank, n_in), (n_out, rank))]


def unflatten(model, flat: torch.Tensor, rank: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Flat parameter rows [N, D] → {name: (A [N, r, in], B [N, out, r])}, in the order of `lora_shapes`, on the
    model's device and in its dtype."""
    flat = flat.to(device=model.device, dtype=model.dtype)
    out, i = {}, 0
    for name, sa, sb in lora_shapes(model, rank):
        na, nb = sa[0] * sa[1], sb[0] * sb[1]
        out[name] = (flat[:, i:i + na].reshape(-1, *sa), flat[:, i + na:i + na + nb].reshape(-1, *sb))
        i += na + nb
    if i != flat.shape[1]:
        raise ValueError(f"a LoRA vector of rank {rank} has {i} entries; got {flat.shape[1]}")
    return out


def final_norm(model) -> torch.nn.Module:
    """The norm between the last decoder block and the head (`norm` in Llama-like models, `ln_f` in GPT-2)."""
    base = model.base_model
    norm = next((getattr(base, n) for n in ("norm", "ln_f", "final_layernorm") if hasattr(base, n)), None)
    if norm is None:
        raise ValueError(f"{type(model).__name__}: cannot find the final norm")
    return norm


def merged_model(model, flat: np.ndarray, rank: int):
    """A copy of `model` with one LoRA vector merged into its weights (W ← W + B A): the plain reference."""
    import copy
    merged = copy.deepcopy(model)
    site = mlp_site(merged)
    for name, (a, b) in unflatten(model, torch.as_tensor(flat, dtype=torch.float32)[None], rank).items():
        w = weight_out_in(getattr(site.mlp, name))
        with torch.no_grad():
            w += b[0] @ a[0]
    return merged


def initial_adapter(model, rank: int) -> np.ndarray:
    """The starting point x_0 every expert (and the oracle) is fine-tuned from: one seeded draw A₀ ~ N(0, 1/in)
    shared by all, B = 0, as flat parameters in `lora_shapes` order."""
    g = torch_generator(0, CHAPTER, "initial-A")
    parts = []
    for _, sa, sb in lora_shapes(model, rank):
        parts += [torch.randn(sa, generator=g) / sa[1] ** 0.5, torch.zeros(sb)]
    return torch.cat([p.flatten() for p in parts]).double().numpy()


def segments(model, rank: int) -> list[slice]:
    """The slices of a flat LoRA vector that are one factor matrix each (A, then B, per adapted map)."""
    out, i = [], 0
    for _, sa, sb in lora_shapes(model, rank):
        for shape in (sa, sb):
            out.append(slice(i, i + shape[0] * shape[1]))
            i += shape[0] * shape[1]
    return out
