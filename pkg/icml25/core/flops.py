"""FLOP and parameter accounting for decoder-only transformers, from a Hugging Face config alone.

A forward pass over one token costs 2·N FLOPs (a multiply and an add) for the N weights of the linear maps it
passes through (attention projections, MLP or its active experts, output head; embedding lookups are free), plus
attention: 2·A FLOPs for each score q·k and 2·A for each weighted value, for every key in its context, in every
layer, where A = heads × head_dim is the width of the queries (not always the hidden size: Qwen3 and Gemma set
`head_dim` on its own). Grouped-query attention shrinks the key and value projections to kv_heads × head_dim; a
mixture of experts passes each token through `num_experts_per_tok` of its experts (plus any shared expert and the
router); a tied output head is one matrix, counted once in the parameters and once as a matmul.

The families this reads: Llama-style (Llama, Mistral, Qwen2, Qwen3, Gemma: gated MLP, separate q/k/v), GPT-2
(fused qkv, plain MLP, biases, learned positions), and the MoE configs of Mixtral and Qwen2/Qwen3-MoE.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig

#: model types whose MLP is up -> activation -> down (two matrices) rather than gated (three)
PLAIN_MLP = ("gpt2", "gpt_neo", "gpt_neox", "gptj", "opt", "bloom", "phi", "starcoder2")


def _get(config: PretrainedConfig, *names: str, default=None):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


@dataclass(frozen=True)
class Shape:
    """What the accounting reads from a config."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ff: int
    vocab: int
    tied: bool
    gated: bool
    experts: int = 0  # 0: a dense MLP in every layer
    active_experts: int = 0
    expert_ff: int = 0
    shared_ff: int = 0
    moe_layers: tuple[int, ...] = ()

    @property
    def attention_width(self) -> int:
        """A: the width of the queries, heads × head_dim."""
        return self.heads * self.head_dim


def shape(config: PretrainedConfig) -> Shape:
    """The dimensions of `config` that set its parameters and FLOPs."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    d = _get(config, "hidden_size", "n_embd")
    layers = _get(config, "num_hidden_layers", "n_layer")
    heads = _get(config, "num_attention_heads", "n_head")
    kv = _get(config, "num_key_value_heads", default=heads)
    head_dim = _get(config, "head_dim", default=d // heads)
    gated = config.model_type not in PLAIN_MLP
    ff = _get(config, "intermediate_size", "n_inner", default=4 * d)
    experts = _get(config, "num_local_experts", "num_experts", default=0)
    moe = {}
    if experts:
        step = _get(config, "decoder_sparse_step", default=1)
        dense = set(_get(config, "mlp_only_layers", default=()))
        moe = dict(experts=experts, active_experts=config.num_experts_per_tok,
                   expert_ff=_get(config, "moe_intermediate_size", default=ff),
                   shared_ff=_get(config, "shared_expert_intermediate_size", default=0),
                   moe_layers=tuple(i for i in range(layers) if (i + 1) % step == 0 and i not in dense))
    return Shape(d, layers, heads, kv, head_dim, ff, config.vocab_size, bool(config.tie_word_embeddings), gated,
                 **moe)


def _attention_weights(s: Shape) -> int:
    return 2 * s.hidden * s.attention_width + 2 * s.hidden * s.kv_heads * s.head_dim  # q, o; k, v


def _mlp_weights(s: Shape, ff: int) -> int:
    return (3 if s.gated else 2) * s.hidden * ff


def _moe_weights(s: Shape, n_experts: int) -> int:
    """An MoE block's matmul weights through `n_experts` experts: router, experts, shared expert and its gate."""
    shared = _mlp_weights(s, s.shared_ff) + s.hidden if s.shared_ff else 0
    return s.hidden * s.experts + n_experts * _mlp_weights(s, s.expert_ff) + shared


def linear_params(config: PretrainedConfig) -> int:
    """N: the weights of every matmul one token passes through (attention projections, the MLP or the experts it
    is routed to, the output head)."""
    s = shape(config)
    per_layer = [_attention_weights(s) + (_moe_weights(s, s.active_experts) if i in s.moe_layers
                                          else _mlp_weights(s, s.ff)) for i in range(s.layers)]
    return sum(per_layer) + s.hidden * s.vocab


def n_params(config: PretrainedConfig) -> int:
    """Every parameter of the model `config` describes (all experts; embeddings; norms and biases; a tied
    output head once), as `sum(p.numel() for p in model.parameters())` counts them."""
    s = shape(config)
    d, mt = s.hidden, config.model_type
    q, kv = s.attention_width, s.kv_heads * s.head_dim
    if mt == "gpt2":  # LayerNorms with bias, biased fused qkv / projections, learned positions
        layer = _attention_weights(s) + _mlp_weights(s, s.ff) + (q + 2 * kv + d) + (s.ff + d) + 2 * 2 * d
        return s.layers * layer + 2 * d + s.vocab * d * (1 if s.tied else 2) + config.n_positions * d
    attention_bias = mt == "qwen2" or bool(_get(config, "attention_bias", default=False))
    norms = 2 * d + (2 * s.head_dim if mt in ("qwen3", "qwen3_moe") else 0)  # Qwen3 normalises q and k per head
    total = 0
    for i in range(s.layers):
        mlp = _moe_weights(s, s.experts) if i in s.moe_layers else _mlp_weights(s, s.ff)
        total += _attention_weights(s) + (q + 2 * kv if attention_bias else 0) + mlp + norms
    return total + d + s.vocab * d * (1 if s.tied else 2)


def forward_flops(config: PretrainedConfig, n_tokens: int, past: int = 0) -> int:
    """FLOPs of a causal forward pass over `n_tokens` new tokens after `past` cached ones: token t (counting
    from 0 over the whole sequence) costs 2·N + 4·layers·A·(t+1).

    Scoring a sequence of length T is `forward_flops(cfg, T)`; generating n tokens after a prompt of length p
    with the KV cache is `forward_flops(cfg, p + n)`.
    """
    s = shape(config)
    keys_seen = (past + n_tokens) * (past + n_tokens + 1) // 2 - past * (past + 1) // 2
    return 2 * linear_params(config) * n_tokens + 4 * s.layers * s.attention_width * keys_seen
