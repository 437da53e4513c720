"""FLOP and parameter accounting from a config, against torch's FLOP counter and the models' real parameters,
on tiny random models of every family in `tinylm.FAMILIES` (GPT-2, Llama, Qwen2, Qwen3 with head_dim != hidden /
heads, Mixtral's experts)."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from icml25.core import arithmetic, flops, tinylm

TOK = tinylm.bpe_tokenizer([p.prompt + p.solution for p in arithmetic.sample_problems(300, 0)])


def _model(family, **config):
    m = tinylm.random_model(family, TOK, 0, **config)
    m.set_attn_implementation("eager")  # attention as plain matmuls, which the FLOP counter sees
    if hasattr(m, "set_experts_implementation"):
        m.set_experts_implementation("eager")  # one matmul per routed expert, not a fused kernel
    return m


@pytest.mark.parametrize("family", tinylm.FAMILIES)
def test_parameter_count_equals_the_models(family):
    m = _model(family)
    assert flops.n_params(m.config) == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("family", tinylm.FAMILIES)
@pytest.mark.parametrize("n_tokens", [1, 9])
def test_forward_flops_equal_torchs_flop_counter(family, n_tokens):
    """The counter sees every matmul; it counts attention over all T x T query-key pairs (the causal mask zeroes
    half of them after the fact), where `forward_flops` counts the T(T+1)/2 a causal model needs."""
    m = _model(family)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        m(torch.randint(0, len(TOK), (1, n_tokens), generator=torch.Generator().manual_seed(0)))
    s = flops.shape(m.config)
    causal_pairs, all_pairs = n_tokens * (n_tokens + 1) // 2, n_tokens * n_tokens
    assert counter.get_total_flops() == flops.forward_flops(m.config, n_tokens) + \
        4 * s.layers * s.attention_width * (all_pairs - causal_pairs)


def test_head_dim_grouped_queries_and_tying_are_read_from_the_config():
    q3 = _model("qwen3").config  # hidden 32, 4 heads of head_dim 16 (not 8), 2 key-value heads, untied
    s = flops.shape(q3)
    assert (s.attention_width, s.kv_heads * s.head_dim, s.tied) == (64, 32, False)
    per_layer = 2 * 32 * 64 + 2 * 32 * 32 + 3 * 32 * 64  # q and o, k and v, gated MLP
    assert flops.linear_params(q3) == 2 * per_layer + 32 * len(TOK)
    tied, untied = _model("llama").config, _model("llama", tie_word_embeddings=False).config
    assert flops.n_params(untied) - flops.n_params(tied) == len(TOK) * 32
    assert flops.linear_params(untied) == flops.linear_params(tied)  # the head is one matmul either way


def test_experts_count_once_in_parameters_and_k_times_in_flops():
    m = _model("mixtral")  # 4 experts, 2 per token
    expert = 3 * 32 * 64
    dense = _model("llama", tie_word_embeddings=False)
    assert flops.n_params(m.config) - flops.n_params(dense.config) == 2 * (3 * expert + 32 * 4)
    assert flops.linear_params(m.config) - flops.linear_params(dense.config) == 2 * (expert + 32 * 4)


def test_flop_count_matches_a_hand_count_and_caching_is_additive():
    c = tinylm.make_model("nano", tinylm.char_tokenizer(arithmetic.ALPHABET), 0).config  # d=32, 1 layer, ff=96
    n_linear = 4 * 32 * 32 + 3 * 32 * 96 + 32 * 21
    assert flops.linear_params(c) == n_linear
    assert flops.forward_flops(c, 3) == 3 * 2 * n_linear + 4 * 1 * 32 * 6  # keys seen 1 + 2 + 3
    assert flops.forward_flops(c, 2) + flops.forward_flops(c, 1, past=2) == flops.forward_flops(c, 3)
