"""The models of the comparison: tiny Llamas, dense, with Memory+ or with a routed MoE in place of an FFN, and their
FLOP and parameter accounting."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM

from ..core import flops, moe
from ..core.seeding import seeded
from .product_keys import MemoryPlus, new_values

# --- tiny Llamas with and without memory --------------------------------------------------------------------

@dataclass(frozen=True)
class MoESpec:
    """A routed mixture of SwiGLU experts (`icml25.core.moe.MoEFFN`): `n_experts` of width `d_ffn`, `top_k` per token."""

    n_experts: int
    top_k: int
    d_ffn: int


@dataclass(frozen=True)
class Arch:
    """A model of the comparison: dense FFN width `d_ff` everywhere, or memory in `memory_layers` (with the
    query BatchNorm unless `query_batchnorm` is False), or the routed MoE `moe` in `moe_layers`; model width
    `d_model` (None: the config's)."""

    name: str
    d_ff: int
    memory_layers: tuple[int, ...] = ()
    query_batchnorm: bool = True
    moe_layers: tuple[int, ...] = ()
    moe: MoESpec | None = None
    d_model: int | None = None


def tiny_llama(vocab_size: int, d_model: int, d_ff: int, seed: int, n_layers: int = 2, n_heads: int = 4,
               max_len: int = 64) -> LlamaForCausalLM:
    """A tiny Llama with an explicit FFN width (the core presets fix it), initialised from `seed`."""
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=d_model, intermediate_size=d_ff,
                      num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_heads,
                      max_position_embeddings=max_len, tie_word_embeddings=True, pad_token_id=0)
    with seeded(seed, "init", "memory_layers"):
        return LlamaForCausalLM(cfg)


def add_memory(model: LlamaForCausalLM, layers: Sequence[int], n_keys: int, heads: int, knn: int, k_dim: int,
               query_batchnorm: bool = True, seed: int = 0) -> nn.Parameter:
    """Replace the feed-forward block of `layers` by Memory+ layers sharing one value pool; return the pool."""
    n_layers = model.config.num_hidden_layers
    bad = [i for i in layers if not 0 <= i < n_layers]
    if bad or not layers:
        raise ValueError(f"memory layers {list(layers)} must be a non-empty subset of 0..{n_layers - 1}")
    d = model.config.hidden_size
    values = new_values(n_keys * n_keys, d, seed)
    for i in layers:
        model.model.layers[i].mlp = MemoryPlus(d, values, heads, knn, k_dim, query_batchnorm,
                                             seed=seed + 1000 * i)
    return values


def memory_flops_per_token(d_model: int, n_keys: int, heads: int, knn: int, k_dim: int) -> int:
    """FLOPs (2 per multiply-add) of one Memory+ layer per token: query projection, 2·n_keys sub-key scores of
    k_dim/2 per head, the weighted sum of heads·knn values, and W_1, W_2. Top-k comparisons are not counted."""
    macs = d_model * heads * k_dim + heads * n_keys * k_dim + heads * knn * d_model + 2 * d_model * d_model
    return 2 * macs


def memory_params(d_model: int, n_keys: int, heads: int, k_dim: int, query_batchnorm: bool = True) -> int:
    """Parameters of one Memory+ layer without its (shared) values: query (and its BatchNorm's scale and shift),
    sub-keys, W_1 and W_2 with their biases."""
    query = d_model * heads * k_dim + heads * k_dim + (2 * heads * k_dim if query_batchnorm else 0)
    return query + heads * n_keys * k_dim + 2 * (d_model * d_model + d_model)


def moe_flops_per_token(d_model: int, moe: MoESpec) -> int:
    """FLOPs (2 per multiply-add) of one routed MoE layer per token: the router's d·n logits and `top_k`
    SwiGLU experts of 3·d·d_ffn weights each (softmax and top-k not counted)."""
    return 2 * (d_model * moe.n_experts + moe.top_k * 3 * d_model * moe.d_ffn)


def moe_params(d_model: int, moe: MoESpec) -> int:
    """Parameters of one routed MoE layer: its linear router and every expert's three matrices."""
    return d_model * moe.n_experts + moe.n_experts * 3 * d_model * moe.d_ffn


def flops_per_token(model: LlamaForCausalLM, seq_len: int) -> float:
    """Forward FLOPs per token averaged over a sequence of `seq_len` (core accounting), with each Memory+ or
    MoE layer's FLOPs in place of the dense FFN it replaced."""
    cfg = model.config
    total = flops.forward_flops(cfg, seq_len) / seq_len
    for layer in model.model.layers:
        m = layer.mlp
        if isinstance(m, MemoryPlus):
            total += memory_flops_per_token(cfg.hidden_size, m.n_keys, m.heads, m.knn, m.k_dim)
        elif isinstance(m, moe.MoEFFN):
            total += m.flops_per_token()
        else:
            continue
        total -= 2 * 3 * cfg.hidden_size * cfg.intermediate_size
    return total


def matched_moe(cfg, flop_budget: int) -> MoESpec:
    """The paper's MoE baseline at this scale: a top-`cfg.moe_top_k` routed MoE whose layer has the memory
    layer's parameters (its values included; the expert count rounded to the nearest) and at most `flop_budget`
    FLOPs per token, the widest experts (a multiple of 8) that fit."""
    d, k = cfg.d_model, cfg.moe_top_k
    target = cfg.n_keys ** 2 * d + memory_params(d, cfg.n_keys, cfg.heads, cfg.k_dim)
    for width in range(4 * d, 7, -8):
        spec = MoESpec(max(k, round(target / (3 * d * width))), k, width)
        if moe_flops_per_token(d, spec) <= flop_budget:
            return spec
    raise ValueError(f"no top-{k} MoE with the memory layer's {target} parameters fits {flop_budget} FLOPs/token")


def dense_for_flops(target_flops: float, vocab_size: int, d_model: int, seq_len: int,
                    n_layers: int = 2, n_heads: int = 4) -> tuple[int, int]:
    """(d_model, d_ff) of the dense tiny Llama scaled up to `target_flops` forward FLOPs per token, as a dense
    family grows: the narrowest model width from `d_model` up (a multiple of 2·`n_heads`, so each head has an
    even rotary dimension) whose model with a 4d FFN reaches the target, then the FFN width (a multiple of 8)
    at that model width whose FLOPs are nearest the target."""
    step = 2 * n_heads
    d = -(-d_model // step) * step
    while flops_per_token(tiny_llama(vocab_size, d, 4 * d, 0, n_layers, n_heads), seq_len) < target_flops:
        d += step
    base = flops_per_token(tiny_llama(vocab_size, d, 8, 0, n_layers, n_heads), seq_len)
    return d, max(8, 8 + int(round((target_flops - base) / (2 * 3 * d * n_layers) / 8)) * 8)


def build(arch: Arch, vocab_size: int, cfg, seed: int, seq_len: int) -> tuple[LlamaForCausalLM, nn.Parameter | None]:
    model = tiny_llama(vocab_size, arch.d_model or cfg.d_model, arch.d_ff, seed, max_len=max(seq_len, 8))
    values = None
    if arch.memory_layers:
        values = add_memory(model, arch.memory_layers, cfg.n_keys, cfg.heads, cfg.knn, cfg.k_dim,
                            arch.query_batchnorm, seed)
    for i in arch.moe_layers:
        model.model.layers[i].mlp = moe.MoEFFN(cfg.d_model, arch.moe.n_experts, arch.moe.top_k, arch.moe.d_ffn,
                                               cfg.moe_alpha, seed=seed + 1000 * i)
    return model, values
