"""FLOP accounting for decoder-only transformers, used to compare methods by compute.

A forward pass over one token costs 2·N multiply-adds-as-FLOPs for the N weights of the linear maps (blocks
and output head; embedding lookups are free) plus attention: 2·d FLOPs for each score q·k and 2·d for each
weighted value, for every key in its context, in every layer.
"""

from __future__ import annotations

from transformers import PretrainedConfig


def linear_params(config: PretrainedConfig) -> int:
    """N: the weights of every matmul a token passes through (attention projections, MLP, output head)."""
    d, ff, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    head_dim = d // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    attn = d * d + 2 * d * kv + d * d  # q, k, v, o
    mlp = 3 * d * ff  # gate, up, down
    return layers * (attn + mlp) + d * vocab


def forward_flops(config: PretrainedConfig, n_tokens: int, past: int = 0) -> int:
    """FLOPs of a causal forward pass over `n_tokens` new tokens after `past` cached ones: token t (counting
    from 0 over the whole sequence) costs 2·N + 4·layers·d·(t+1).

    Scoring a sequence of length T is `forward_flops(cfg, T)`; generating n tokens after a prompt of length p
    with the KV cache is `forward_flops(cfg, p + n)`.
    """
    keys_seen = (past + n_tokens) * (past + n_tokens + 1) // 2 - past * (past + 1) // 2
    return 2 * linear_params(config) * n_tokens + 4 * config.num_hidden_layers * config.hidden_size * keys_seen
