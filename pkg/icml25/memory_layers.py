r"""Memory Layers at Scale (Berges et al., ICML 2025): a product-key memory that adds capacity, not FLOPs.

A memory layer is a trainable key-value lookup with $N$ values. Scoring a query against all $N$ keys would cost
$O(N d)$; the *product key* trick (Lample et al., 2019) makes the keys a Cartesian product of two sets of
$\sqrt N$ half-keys, so the top-$k$ of all $N$ scores is found among $k^2$ candidates:

$$ s(q, (i, j)) = \langle q_1, K^1_i \rangle + \langle q_2, K^2_j \rangle, \qquad
   \operatorname{top}_k \{ s(q, n) \}_{n \le N} \subseteq \operatorname{top}_k(q_1 K^1) \times \operatorname{top}_k(q_2 K^2)
   \qquad (1) $$

and the layer returns a softmax-weighted sum of the $k$ selected values (an *embedding bag*),
$y = \sum_{n \in I} \operatorname{softmax}(s)_n V_n$ (2). The paper's Memory+ block gates it like a SwiGLU,
$\text{out} = W_2\,(y \odot \operatorname{SiLU}(W_1 x))$ (3), uses several heads (one bag of $H k$ values), shares
one value pool among the few layers whose feed-forward block it replaces, and trains the values with a higher
learning rate. Equation numbers are this chapter's.

Everything here is laptop-sized: a two-layer Llama with d = 32 (at `ci`), and a synthetic *fact world* (subjects,
relations, objects; a fact is the sequence ``s r o``, scored on ``o``) where capacity is the bottleneck, against
a control task (the core's modular arithmetic) where it is not.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from . import aoe, ops
from .core import arithmetic, flops, tinylm, zoo
from .core.facts import Facts, sample_facts
from .core.claims import Claim, Effect, Precondition, at_least, at_most
from .core.config import COUNT, NONNEGATIVE, POSITIVE, SEED, make_config
from .core.seeding import one_thread, seeded, torch_generator
from .core.train import lr_at

config = make_config({
    "smoke": {"seeds": [0], "n_facts": 128, "n_relations": 8, "n_objects": 64, "steps": 15, "batch_size": 64,
              "lr_centres": {"dense": 3e-2, "memory": 1e-2, "dense 2x": 1e-2, "MoE": 1e-2}, "lr_factors": [1 / 3, 1, 3],
              "lr_extensions": 2, "tune_seed": 100, "value_lr_mult": 10.0, "weight_decay": 0.1,
              "d_model": 32, "n_keys": 16, "heads": 2, "knn": 4, "k_dim": 16, "dense_flop_multiples": [2.0],
              "moe_top_k": 2, "moe_alpha": 0.01, "usage_every": 5, "control_problems": 100, "control_batch_size": 16, "control_steps": 15,
              "lookup_sizes": [8, 16, 32],
              "lookup_tokens": 256},
    "ci": {"seeds": [0, 1, 2], "n_facts": 512, "n_relations": 8, "n_objects": 64, "steps": 100, "batch_size": 256,
           "lr_centres": {"dense": 1e-2, "memory": 1e-2, "dense 2x": 1e-2, "MoE": 1e-2}, "lr_factors": [1 / 3, 1, 3],
           "lr_extensions": 2, "tune_seed": 100, "value_lr_mult": 10.0, "weight_decay": 0.1,
           "d_model": 32, "n_keys": 64, "heads": 2, "knn": 8, "k_dim": 16, "dense_flop_multiples": [2.0],
           "moe_top_k": 2, "moe_alpha": 0.01, "usage_every": 20, "control_problems": 500, "control_batch_size": 64, "control_steps": 100,
           "lookup_sizes": [16, 32, 64, 128, 256], "lookup_tokens": 256},
    "full": {"seeds": [0, 1, 2, 3, 4], "n_facts": 16384, "n_relations": 16, "n_objects": 256, "steps": 5000,
             "batch_size": 512,
             "lr_centres": {"dense": 4e-3, "memory": 2e-3, "dense 2x": 2e-3, "dense 4x": 2e-3, "MoE": 2e-3},
             "lr_factors": [1 / 2, 1, 2], "lr_extensions": 2, "tune_seed": 100, "value_lr_mult": 10.0,
             "weight_decay": 0.1, "d_model": 128, "n_keys": 256, "heads": 4, "knn": 16, "k_dim": 64,
             "dense_flop_multiples": [2.0, 4.0], "moe_top_k": 2, "moe_alpha": 0.01, "usage_every": 250,
             "control_problems": 10000,
             "control_batch_size": 128, "control_steps": 5000, "lookup_sizes": [16, 32, 64, 128, 256, 512, 1024], "lookup_tokens": 4096},
},
    seeds=SEED, n_facts=COUNT, n_relations=COUNT, n_objects=COUNT, steps=COUNT, batch_size=COUNT,
    lr_centres=POSITIVE, lr_factors=POSITIVE, lr_extensions=NONNEGATIVE, tune_seed=SEED, value_lr_mult=POSITIVE,
    weight_decay=NONNEGATIVE,
    d_model=COUNT, n_keys=COUNT, heads=COUNT, knn=COUNT, k_dim=COUNT, dense_flop_multiples=POSITIVE,
    moe_top_k=COUNT, moe_alpha=NONNEGATIVE,
    usage_every=COUNT, control_problems=COUNT, control_batch_size=COUNT, control_steps=COUNT, lookup_sizes=COUNT, lookup_tokens=COUNT)


def paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-seed differences a - b of two lists in seed order (the runs of one seed share a fact world)."""
    if len(a) != len(b):
        raise ValueError(f"paired lists differ in length: {len(a)} vs {len(b)}")
    return [float(x) - float(y) for x, y in zip(a, b)]


_GRID = at_most("lr_grid_brackets", "lrs_at_grid_edge", 0,
                rule="no architecture's learning rate, chosen on the held-out world, sits at the edge of its grid "
                     "(count of those that do)")
_DENSE_LEARNS = at_least("dense_learns", "dense_acc", 0.2,
                         rule="the dense model recalls >= 20% of the facts on every seed (chance: 1/64)")

ISO_FLOP = Claim(
    chapter="memory_layers", id="iso_flop",
    paper_statement="At matched compute, memory-augmented models clearly outperform dense models, most of all on "
                    "factual tasks",
    paper_value="e.g. NQ 27.06 vs 25.24 (8B base + ~64B memory vs dense 8B, 1T tokens; unverified)",
    criterion="The per-seed paired difference of fact accuracy memory - dense FFN-4d (memory FLOPs per token at "
              "most the dense model's) is above 0 (95% t interval); refuted if it lies wholly below +0.05",
    effects=[Effect("memory_minus_dense", lambda m: paired(m["memory_acc"], m["dense_acc"]), min_effect=0.05)],
    preconditions=[at_most("iso_flop", "flop_ratio", 1.0, rule="memory FLOPs per token / dense <= 1"),
                   _DENSE_LEARNS, _GRID],
    examples=({"memory_acc": [0.9, 0.8, 0.85], "dense_acc": [0.4, 0.35, 0.45], "flop_ratio": 0.9,
               "lrs_at_grid_edge": 0},
              {"memory_acc": [0.4, 0.3, 0.42], "dense_acc": [0.4, 0.35, 0.45], "flop_ratio": 0.9,
               "lrs_at_grid_edge": 0}),
)

BEATS_2X = Claim(
    chapter="memory_layers", id="beats_2x",
    paper_statement="Memory-augmented models outperform dense models with more than twice the compute budget",
    paper_value="8B+memory close to Llama2-7B trained on 2x the tokens with 10x the FLOPs (unverified summary)",
    criterion="The per-seed paired difference of fact accuracy memory - dense with 2x its FLOPs per token is "
              "above 0 (95% t interval)",
    effects=[Effect("memory_minus_dense2x", lambda m: paired(m["memory_acc"], m["dense2x_acc"]))],
    preconditions=[at_least("twice_the_flops", "dense_flop_ratio", 2.0 - 0.05,
                            rule="dense 2x FLOPs per token / memory >= 1.95"),
                   Precondition("loss_falls_with_width",
                                "the 2x dense model's fact loss is below the dense model's (mean paired "
                                "difference, nats, at equal steps)",
                                lambda m: float(np.mean(paired(m["dense2x_loss"], m["dense_loss"]))),
                                lambda v: v < 0),
                   _GRID],
    examples=({"memory_acc": [0.9, 0.8, 0.85], "dense2x_acc": [0.5, 0.45, 0.5], "dense_flop_ratio": 2.0,
               "dense2x_loss": [2.0, 2.1, 2.0], "dense_loss": [2.5, 2.4, 2.6], "lrs_at_grid_edge": 0},
              {"memory_acc": [0.4, 0.3, 0.42], "dense2x_acc": [0.5, 0.45, 0.5], "dense_flop_ratio": 2.0,
               "dense2x_loss": [2.0, 2.1, 2.0], "dense_loss": [2.5, 2.4, 2.6], "lrs_at_grid_edge": 0}),
)


BEATS_MOE = Claim(
    chapter="memory_layers", id="beats_moe",
    paper_statement="Memory-augmented models outperform mixture-of-experts models matched for compute and "
                    "parameters",
    paper_value="Memory+ ahead of MoE baselines of matched compute and parameters on factual QA (unverified)",
    criterion="The per-seed paired difference of fact accuracy memory - routed MoE (the same model with its "
              "second FFN replaced by a top-k MoE whose layer has the memory layer's parameters, values "
              "included, within the dense FFN's FLOPs) is above 0 (95% t interval); refuted if it lies wholly "
              "below +0.05",
    effects=[Effect("memory_minus_moe", lambda m: paired(m["memory_acc"], m["moe_acc"]), min_effect=0.05)],
    preconditions=[Precondition("moe_matched_params", "MoE parameters / memory parameters (whole models) within "
                                "[0.95, 1.05]", lambda m: m["moe_param_ratio"], lambda v: 0.95 <= v <= 1.05),
                   at_most("moe_within_flops", "moe_flop_ratio", 1.0,
                           rule="MoE FLOPs per token / dense <= 1 (the memory model's budget)"),
                   at_least("moe_learns", "moe_acc", 0.2,
                            rule="the MoE model recalls >= 20% of the facts on every seed (chance: 1/64)"),
                   _GRID],
    examples=({"memory_acc": [0.9, 0.8, 0.85], "moe_acc": [0.5, 0.45, 0.5], "moe_param_ratio": 1.0,
               "moe_flop_ratio": 0.95, "lrs_at_grid_edge": 0},
              {"memory_acc": [0.4, 0.3, 0.42], "moe_acc": [0.5, 0.45, 0.5], "moe_param_ratio": 1.0,
               "moe_flop_ratio": 0.95, "lrs_at_grid_edge": 0}),
)


def _factual_gap(m) -> list[float]:
    return paired(paired(m["fact_memory"], m["fact_dense"]), paired(m["control_memory"], m["control_dense"]))


FACTUAL = Claim(
    chapter="memory_layers", id="factual",
    paper_statement="The gains of memory layers are largest on factual tasks",
    paper_value="largest gains on factual QA (NQ, TriviaQA) vs smaller on reasoning/coding",
    criterion="Per seed, the memory model's accuracy advantage over dense on the fact world minus its advantage "
              "on the control task (modular arithmetic) is above 0 (95% t interval)",
    effects=[Effect("fact_gain_minus_control_gain", _factual_gap)],
    preconditions=[at_least("control_learns", "control_dense", 0.2,
                            rule="the dense model gets >= 20% of the control's digits right on every seed "
                                 "(guessing: 10%)"),
                   at_least("dense_learns", "fact_dense", 0.2,
                            rule="the dense model recalls >= 20% of the facts on every seed (chance: 1/64)"),
                   _GRID],
    examples=({"fact_memory": [0.9, 0.8, 0.85], "fact_dense": [0.4, 0.35, 0.45], "control_memory": [0.5, 0.5, 0.6],
               "control_dense": [0.5, 0.52, 0.58], "lrs_at_grid_edge": 0},
              {"fact_memory": [0.4, 0.35, 0.45], "fact_dense": [0.4, 0.35, 0.45],
               "control_memory": [0.6, 0.62, 0.7], "control_dense": [0.5, 0.52, 0.58], "lrs_at_grid_edge": 0}),
)

QUERY_BN = Claim(
    chapter="memory_layers", id="query_batchnorm",
    paper_statement="A BatchNorm on the query (the official code's mem_query_batchnorm, from Lample et al. 2019) "
                    "spreads the lookups over more of the memory",
    paper_value="Lample et al. (2019): keys used 25.8% without, 80.3% with query BatchNorm (unverified)",
    criterion="The per-seed paired difference of value usage (fraction of values any fact selects) memory with "
              "- without the query BatchNorm, same learning rate and data, is above 0 (95% t interval); refuted "
              "if it lies wholly below +0.05",
    effects=[Effect("usage_with_minus_without_bn", lambda m: paired(m["usage_bn"], m["usage_no_bn"]),
                    min_effect=0.05)],
    preconditions=[at_least("memory_learns", lambda m: m["acc_bn"] + m["acc_no_bn"], 0.1,
                            rule="both memory models recall >= 10% of the facts on every seed (chance: 1/64)")],
    examples=({"usage_bn": [0.5, 0.6, 0.55], "usage_no_bn": [0.2, 0.18, 0.21], "acc_bn": [0.9, 0.8, 0.9],
               "acc_no_bn": [0.3, 0.3, 0.4]},
              {"usage_bn": [0.2, 0.19, 0.2], "usage_no_bn": [0.2, 0.18, 0.21], "acc_bn": [0.9, 0.8, 0.9],
               "acc_no_bn": [0.3, 0.3, 0.4]}),
)


# --- Eq. (1): the product-key top-k ------------------------------------------------------------------------

def check_memory_shape(n_values: int, knn: int, k_dim: int, heads: int = 1, query_dim: int | None = None) -> int:
    """Validate a product-key memory's sizes; return n_keys = sqrt(n_values). Raises ValueError on bad input."""
    n_keys = math.isqrt(n_values)
    if n_values < 1 or n_keys * n_keys != n_values:
        raise ValueError(f"the number of values N={n_values} must be a perfect square (N = n_keys**2)")
    if not 1 <= knn <= n_keys:
        raise ValueError(f"knn={knn} must lie in [1, sqrt(N)={n_keys}]: each half offers only sqrt(N) sub-keys")
    if k_dim < 2 or k_dim % 2:
        raise ValueError(f"k_dim={k_dim} must be even and >= 2 so that a query splits into two halves")
    if query_dim is not None and query_dim != heads * k_dim:
        raise ValueError(f"query dimension {query_dim} does not split into heads={heads} x k_dim={k_dim}")
    return n_keys


def half_scores(query: torch.Tensor, subkeys1: torch.Tensor,
                subkeys2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two halves of Eq. (1): <q_1, K^1_i> and <q_2, K^2_j>, each [..., H, n]."""
    half = subkeys1.shape[-1]
    return (torch.einsum("...hd,hnd->...hn", query[..., :half], subkeys1),
            torch.einsum("...hd,hnd->...hn", query[..., half:], subkeys2))


def product_key_topk(query: torch.Tensor, subkeys1: torch.Tensor, subkeys2: torch.Tensor,
                     knn: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-`knn` of the N = n^2 product-key scores (Eq. 1) without scoring all N keys.

    `query` [..., H, k_dim]; `subkeys1`, `subkeys2` [H, n, k_dim/2]. Returns (scores, indices), both
    [..., H, knn], sorted by decreasing score; index i*n + j stands for the pair (sub-key i, sub-key j).
    Each half keeps its own top-knn, and the top-knn of the knn^2 candidate sums is the global top-knn: any
    pair outside the candidates is beaten by knn candidate pairs in both halves.
    """
    H, n, half = subkeys1.shape
    check_memory_shape(n * n, knn, 2 * half, H, query.shape[-2] * query.shape[-1])
    if subkeys2.shape != subkeys1.shape:
        raise ValueError(f"sub-key tables differ in shape: {list(subkeys1.shape)} vs {list(subkeys2.shape)}")
    s1, s2 = half_scores(query, subkeys1, subkeys2)
    top1, idx1 = s1.topk(knn, dim=-1)
    top2, idx2 = s2.topk(knn, dim=-1)
    candidates = (top1.unsqueeze(-1) + top2.unsqueeze(-2)).flatten(-2)  # [..., H, knn*knn]
    scores, flat = candidates.topk(knn, dim=-1)
    i = idx1.gather(-1, flat // knn)
    j = idx2.gather(-1, flat % knn)
    return scores, i * n + j


def brute_force_topk(query: torch.Tensor, subkeys1: torch.Tensor, subkeys2: torch.Tensor,
                     knn: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain reference for Eq. (1): score all N = n^2 keys, then take the top-`knn`."""
    s1, s2 = half_scores(query, subkeys1, subkeys2)
    return (s1.unsqueeze(-1) + s2.unsqueeze(-2)).flatten(-2).topk(knn, dim=-1)


def decode_index(index: torch.Tensor, n_keys: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A value index back to its (first-half, second-half) sub-key pair."""
    return index // n_keys, index % n_keys


# --- Eqs. (2)-(3): the Memory+ layer ------------------------------------------------------------------------

def new_values(n_values: int, dim: int, seed: int) -> nn.Parameter:
    """A value pool V [N, dim] ~ N(0, dim^-1/2), to be shared by every memory layer of a model."""
    g = torch_generator(seed, "memory_values")
    return nn.Parameter(torch.randn(n_values, dim, generator=g) * dim ** -0.5)


class MemoryPlus(nn.Module):
    r"""Memory+ (Eq. 3): out = W_2 (y ⊙ SiLU(W_1 x)), with y the product-key lookup of Eqs. (1)-(2).

    The query projection is d -> heads·k_dim (with bias); each head has two sub-key tables [n_keys, k_dim/2];
    `values` is a shared [n_keys^2, d] parameter (pass the same one to every memory layer); W_1 and W_2 are d -> d
    with biases. `query_batchnorm` puts a BatchNorm1d over the heads·k_dim query features right after the
    projection, as the official code's ``mem_query_batchnorm`` option does (its query MLP appends the BatchNorm
    to the Linear). That option is off by default there and the released configs do not set it; Lample et al.
    (2019) introduced it to spread queries over the keys (without it a query cone reaches few sub-keys). The
    lookup runs through `icml25.ops.embedding_bag` (the compiled kernel when it built).
    """

    def __init__(self, d_model: int, values: nn.Parameter, heads: int, knn: int, k_dim: int,
                 query_batchnorm: bool = False, seed: int = 0):
        super().__init__()
        n_keys = check_memory_shape(values.shape[0], knn, k_dim, heads)
        if values.shape[1] != d_model:
            raise ValueError(f"values have dimension {values.shape[1]}; the model's is d_model={d_model}")
        self.heads, self.knn, self.k_dim, self.n_keys = heads, knn, k_dim, n_keys
        self.values = values
        with seeded(seed, "memory_plus"):
            self.query = nn.Linear(d_model, heads * k_dim, bias=True)
            nn.init.xavier_uniform_(self.query.weight)
            nn.init.zeros_(self.query.bias)
            self.query_bn = nn.BatchNorm1d(heads * k_dim) if query_batchnorm else None
            bound = k_dim ** -0.5
            self.subkeys = nn.Parameter(torch.empty(2, heads, n_keys, k_dim // 2).uniform_(-bound, bound))
            self.w1 = nn.Linear(d_model, d_model)  # with biases, as the official swilu and value projections
            self.w2 = nn.Linear(d_model, d_model)
            for w in (self.w1, self.w2):
                nn.init.normal_(w.weight, std=d_model ** -0.5)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """The queries [T, H, k_dim] of tokens `x` [T, d] (batch-normalised when the layer has `query_bn`)."""
        q = self.query(x)
        if self.query_bn is not None:
            q = self.query_bn(q)
        return q.view(-1, self.heads, self.k_dim)

    def lookup(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Selected value indices [T, H·knn] and their weights [T, H·knn] (each head's softmax sums to 1)."""
        scores, index = product_key_topk(self.queries(x), self.subkeys[0], self.subkeys[1], self.knn)
        weights = torch.softmax(scores.float(), dim=-1).to(x.dtype)  # Eq. (2), per head
        return index.flatten(1), weights.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        index, weights = self.lookup(flat)
        y = ops.embedding_bag(self.values, index, weights)  # Eq. (2), one bag of H·knn values per token
        return self.w2(y * F.silu(self.w1(flat))).view(shape)  # Eq. (3)


# --- tiny Llamas with and without memory --------------------------------------------------------------------

@dataclass(frozen=True)
class MoESpec:
    """A routed mixture of SwiGLU experts (`icml25.aoe.MoEFFN`): `n_experts` of width `d_ffn`, `top_k` per token."""

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
        elif isinstance(m, aoe.MoEFFN):
            total += moe_flops_per_token(cfg.hidden_size, MoESpec(m.n_experts, m.top_k, m.w_gate.shape[-1]))
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
        model.model.layers[i].mlp = aoe.MoEFFN(cfg.d_model, arch.moe.n_experts, arch.moe.top_k, arch.moe.d_ffn,
                                               cfg.moe_alpha, seed=seed + 1000 * i)
    return model, values


# --- data: the fact world and the control task --------------------------------------------------------------

@dataclass(frozen=True)
class FactWorld(Facts):
    """The core's fact world (separate objects) as token ids: 0 is padding/BOS, then subjects, relations,
    objects. A fact is the sequence [BOS, s, r] whose next token must be o."""

    @property
    def vocab_size(self) -> int:
        return 1 + self.n_subjects + self.n_relations + self.n_objects

    def object_token(self, o) -> np.ndarray:
        return 1 + self.n_subjects + self.n_relations + np.asarray(o)

    def inputs(self) -> torch.Tensor:
        """[F, 3] token ids: BOS, subject, relation."""
        s = 1 + self.subject
        r = 1 + self.n_subjects + self.relation
        return torch.as_tensor(np.stack([np.zeros_like(s), s, r], axis=1), dtype=torch.long)

    def targets(self) -> torch.Tensor:
        return torch.as_tensor(self.object_token(self.object), dtype=torch.long)


def fact_world(n_facts: int, seed: int, n_relations: int = 16, n_objects: int = 256) -> FactWorld:
    """`n_facts` distinct (subject, relation) pairs (n_facts/n_relations subjects, every subject with every
    relation), each with a uniformly random object from the core's fact world."""
    if n_facts < n_relations or n_facts % n_relations:
        raise ValueError(f"n_facts={n_facts} must be a positive multiple of n_relations={n_relations}")
    return FactWorld(**vars(sample_facts(n_facts // n_relations, n_relations, seed, n_objects)))


@dataclass(frozen=True)
class Task:
    """Next-token prediction with a mask: `inputs` [M, T] token ids, `targets` [M, T] with -100 where unscored."""

    name: str
    inputs: torch.Tensor
    targets: torch.Tensor
    vocab_size: int


def fact_task(world: FactWorld) -> Task:
    inputs = world.inputs()
    targets = torch.full_like(inputs, -100)
    targets[:, -1] = world.targets()
    return Task(f"facts ({len(inputs)})", inputs, targets, world.vocab_size)


def control_task(n_problems: int, seed: int) -> Task:
    """The core's modular arithmetic (1-2 operations), scored on every digit after '=' (each is one operation
    on the two digits before it: a rule, not a fact to memorise). Characters map to ids 1.., 0 is padding."""
    problems = arithmetic.sample_problems(n_problems, seed, 1, 2, stream="memory_control")
    texts = [p.prompt + p.solution for p in problems]
    vocab = {ch: i + 1 for i, ch in enumerate(arithmetic.ALPHABET)}
    T = max(map(len, texts))
    ids = torch.zeros(len(texts), T, dtype=torch.long)
    targets = torch.full((len(texts), T), -100, dtype=torch.long)
    for row, text in enumerate(texts):
        ids[row, :len(text)] = torch.tensor([vocab[c] for c in text])
        for pos, ch in enumerate(text[:-1]):
            if ch == "=":
                targets[row, pos] = vocab[text[pos + 1]]
    return Task("control: modular arithmetic", ids, targets, len(vocab) + 1)


# --- training and evaluation --------------------------------------------------------------------------------

def task_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the scored tokens, plus the load-balancing loss of any MoE layer."""
    logits = model(input_ids=inputs, use_cache=False).logits
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    return loss + sum(layer.mlp.aux_loss for layer in model.model.layers if isinstance(layer.mlp, aoe.MoEFFN))


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, batch_size: int = 1024) -> tuple[float, float]:
    """(accuracy, loss) over the scored positions: the fraction where the greedy next token is the target
    (teacher forcing) and the mean cross-entropy (nats). Leaves the model in eval mode."""
    model.eval()
    hits = total = 0
    loss = 0.0
    for start in range(0, len(task.inputs), batch_size):
        x, t = task.inputs[start:start + batch_size], task.targets[start:start + batch_size]
        logits = model(input_ids=x, use_cache=False).logits
        mask = t != -100
        hits += int((logits.argmax(-1)[mask] == t[mask]).sum())
        loss += float(F.cross_entropy(logits[mask], t[mask], reduction="sum"))
        total += int(mask.sum())
    return hits / total, loss / total


def batches(task: Task, batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    g = torch_generator(seed, "memory_batches", task.name)
    while True:
        idx = torch.randint(len(task.inputs), (batch_size,), generator=g)
        yield task.inputs[idx], task.targets[idx]


def param_groups(model: nn.Module, lr: float, values: nn.Parameter | None, value_lr_mult: float,
                 weight_decay: float) -> list[dict]:
    """AdamW groups as in the official code: the shared values train at their own learning rate
    (``value_fixed_lr``: 1e-3 against a base 1e-4 in the released configs, so `value_lr_mult` = 10; the official
    scheduler scales it by the same warmup-cosine factor as the base rate), and one weight decay (0.1 there)
    applies to every group, values included."""
    others = [p for p in model.parameters() if values is None or p is not values]
    groups = [{"params": others, "base_lr": lr, "weight_decay": weight_decay}]
    if values is not None:
        groups.append({"params": [values], "base_lr": lr * value_lr_mult, "weight_decay": weight_decay})
    return groups


def train(model: nn.Module, task: Task, steps: int, batch_size: int, lr: float, seed: int,
          values: nn.Parameter | None = None, value_lr_mult: float = 1.0, weight_decay: float = 0.1,
          probe_every: int = 0) -> tuple[list[float], list[tuple[int, float]]]:
    """AdamW (0.9, 0.95), gradient clipping at 1, the core's warmup-cosine schedule on every group (see
    `param_groups`). Returns the loss curve and, every `probe_every` steps (and at the end) for a memory model,
    (step, value usage on the task). The optimizer step and the clipping are the fused / multi-tensor kernels
    (a tiny model's step is bound by per-operation overhead)."""
    opt = torch.optim.AdamW(param_groups(model, lr, values, value_lr_mult, weight_decay), lr=lr, betas=(0.9, 0.95),
                            fused=True)
    params = [p for group in opt.param_groups for p in group["params"]]
    data, losses, usage = batches(task, batch_size, seed), [], []
    for step in range(steps):
        if values is not None and probe_every and step % probe_every == 0:
            usage.append((step, value_usage(model, task)))
        model.train()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, group["base_lr"], max(1, steps // 20))
        loss = task_loss(model, *next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    if values is not None and probe_every:
        usage.append((steps, value_usage(model, task)))
    return losses, usage


@torch.no_grad()
def value_usage(model: nn.Module, task: Task) -> float:
    """Fraction of the shared values selected by at least one token of `task` in any memory layer (eval mode:
    a query BatchNorm uses its running statistics). Leaves the model in eval mode."""
    model.eval()
    layers = [layer.mlp for layer in model.model.layers if isinstance(layer.mlp, MemoryPlus)]
    if not layers:
        raise ValueError("the model has no memory layer")
    captured = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: captured.append(
        mod.lookup(inp[0].reshape(-1, inp[0].shape[-1]))[0])) for m in layers]
    model(input_ids=task.inputs, use_cache=False)
    for h in hooks:
        h.remove()
    used = torch.zeros(layers[0].values.shape[0], dtype=torch.bool)
    for index in captured:
        used[index.flatten()] = True
    return float(used.float().mean())


def architectures(cfg, vocab_size: int, seq_len: int) -> list[Arch]:
    """The FLOP ladder: dense FFN-4d; the same with its second FFN replaced by Memory+ with the query BatchNorm
    (≈ iso-FLOP); the memory model without the BatchNorm (the component's ablation); dense models scaled up
    (`dense_for_flops`: model width first, then FFN width) to `dense_flop_multiples` × the memory model's FLOPs
    per token; and the second FFN replaced by a routed MoE with the memory layer's parameters within the dense
    FFN's FLOPs (`matched_moe`)."""
    d = cfg.d_model
    memory = Arch("memory", 4 * d, (1,))
    mem_model, _ = build(memory, vocab_size, cfg, 0, seq_len)
    mem_flops = flops_per_token(mem_model, seq_len)
    wider = [Arch(f"dense {m:g}x", ff, d_model=width)
             for m in cfg.dense_flop_multiples
             for width, ff in [dense_for_flops(m * mem_flops, vocab_size, d, seq_len)]]
    moe = Arch("MoE", 4 * d, moe_layers=(1,), moe=matched_moe(cfg, 2 * 3 * d * 4 * d))
    return [Arch("dense", 4 * d), memory, Arch("memory, no query BN", 4 * d, (1,), False), *wider, moe]


#: the ablation trains at the memory model's learning rate: only the BatchNorm differs
LR_OF = {"memory, no query BN": "memory"}


def run(arch: Arch, task: Task, cfg, seed: int, lr: float, batch_size: int | None = None,
        probe_every: int = 0, steps: int | None = None) -> dict:
    """Train `arch` on `task` from `seed` at base learning rate `lr` for `steps` (default `cfg.steps`) of batch
    `batch_size` (default `cfg.batch_size`); its final accuracy and loss, FLOPs per token, parameters, value usage (and usage over
    training every `probe_every` steps), loss curve and training time."""
    seq_len = task.inputs.shape[1]
    model, values = build(arch, task.vocab_size, cfg, seed, seq_len)
    start = time.perf_counter()
    with one_thread():
        losses, usage_curve = train(model, task, steps or cfg.steps, batch_size or cfg.batch_size, lr, seed, values,
                                    cfg.value_lr_mult, cfg.weight_decay, probe_every)
        acc, loss = evaluate(model, task)
    return {"arch": arch.name, "task": task.name, "seed": seed, "lr": lr, "accuracy": acc, "loss": loss,
            "flops_per_token": flops_per_token(model, seq_len), "params": tinylm.n_params(model),
            "usage": value_usage(model, task) if values is not None else None, "usage_curve": usage_curve,
            "losses": losses, "seconds": time.perf_counter() - start}


def lr_grid(cfg, name: str) -> list[float]:
    """The learning rates tried for architecture `name`: `cfg.lr_factors` × its centre in `cfg.lr_centres`."""
    return [cfg.lr_centres[name] * f for f in cfg.lr_factors]


def bracket_search(loss_at: Callable[[float], float], grid: Sequence[float],
                   extensions: int) -> list[tuple[float, float]]:
    """(learning rate, loss) of every point tried: the whole `grid` first; then, while the lowest loss sits at the
    grid's smallest or largest rate, one more rate beyond that edge (the grid's own spacing there), at most
    `extensions` times. The optimum ends inside the tried rates unless the extensions run out."""
    rates = sorted(grid)
    if len(rates) < 3:
        raise ValueError(f"a learning-rate grid needs at least 3 rates to bracket an optimum; got {list(grid)}")
    tried = {lr: loss_at(lr) for lr in rates}
    for _ in range(extensions):
        rates = sorted(tried)
        best = min(rates, key=tried.get)
        if best == rates[0]:
            new = rates[0] ** 2 / rates[1]
        elif best == rates[-1]:
            new = rates[-1] ** 2 / rates[-2]
        else:
            break
        tried[new] = loss_at(new)
    return sorted(tried.items())


def tune_learning_rates(cfg) -> list[dict]:
    """Every architecture of the ladder but the ablation, trained on a held-out fact world (drawn from
    `cfg.tune_seed`, which no claim uses) at every learning rate of its grid (`lr_grid`), the grid extended by
    `bracket_search` (up to `cfg.lr_extensions` more rates) until its lowest final loss is inside; one run dict
    per rate tried (see `run`)."""
    task = fact_task(fact_world(cfg.n_facts, cfg.tune_seed, cfg.n_relations, cfg.n_objects))
    archs = [a for a in architectures(cfg, task.vocab_size, task.inputs.shape[1]) if a.name not in LR_OF]
    runs = []
    for arch in archs:
        def loss_at(lr, arch=arch):
            runs.append(run(arch, task, cfg, cfg.tune_seed, lr))
            return runs[-1]["loss"]
        bracket_search(loss_at, lr_grid(cfg, arch.name), cfg.lr_extensions)
    return runs


#: config knobs the learning-rate search does not read (the claims' seeds, the control task, the lookup timing)
NOT_IN_SEARCH = ("seeds", "usage_every", "control_problems", "control_batch_size", "control_steps", "lookup_sizes",
                 "lookup_tokens")


def learning_rate_search(cfg) -> tuple[list[dict], bool]:
    """`tune_learning_rates(cfg)`, cached like a zoo model (`icml25.core.zoo.results`): addressed by the knobs it
    reads, this module's code and the code it trains with (the MoE layer, the kernels' front and sources), so the
    book's builder runs it once before the notebooks fan out, and a notebook with the same settings reads it back.
    Returns the runs and whether they were computed now."""
    settings = {k: v for k, v in dict(cfg).items() if k not in NOT_IN_SEARCH}
    settings["kernel_sources"] = ops.build.source_digest()
    return zoo.results("memory-lr-search", settings, lambda: tune_learning_rates(cfg),
                       sources=(inspect.getmodule(tune_learning_rates), aoe, ops.embedding_bag, ops.expert_ffn))


def chosen_learning_rates(tuning: Sequence[dict]) -> dict[str, float]:
    """Per architecture, the learning rate with the lowest final loss on the held-out world."""
    best: dict[str, dict] = {}
    for r in tuning:
        if r["arch"] not in best or r["loss"] < best[r["arch"]]["loss"]:
            best[r["arch"]] = r
    return {name: r["lr"] for name, r in best.items()}


def lrs_at_grid_edge(tuning: Sequence[dict]) -> list[str]:
    """The architectures whose chosen learning rate is the smallest or largest of their grid (the grid does not
    bracket their optimum)."""
    chosen = chosen_learning_rates(tuning)
    grids = {name: sorted(r["lr"] for r in tuning if r["arch"] == name) for name in chosen}
    return [name for name, lr in chosen.items() if lr in (grids[name][0], grids[name][-1])]


def scaling_experiment(cfg, lrs: dict[str, float]) -> list[dict]:
    """Every training run of the comparison, one dict each (see `run`), for each seed: every architecture on the
    fact world drawn from the seed (memory models probed for value usage during training), and dense and memory
    on the control task (`control_steps` of batch `control_batch_size`); each at its learning rate from `lrs`."""
    runs = []
    for seed in cfg.seeds:
        task = fact_task(fact_world(cfg.n_facts, seed, cfg.n_relations, cfg.n_objects))
        for arch in architectures(cfg, task.vocab_size, task.inputs.shape[1]):
            runs.append(run(arch, task, cfg, seed, lrs[LR_OF.get(arch.name, arch.name)],
                            probe_every=cfg.usage_every if arch.memory_layers else 0))
        control = control_task(cfg.control_problems, seed)
        for arch in architectures(cfg, control.vocab_size, control.inputs.shape[1])[:2]:
            runs.append(run(arch, control, cfg, seed, lrs[arch.name], cfg.control_batch_size,
                            steps=cfg.control_steps))
    return runs


def select(runs: Sequence[dict], key: str = "accuracy", **where) -> list:
    """`key` of the runs matching every `where` condition, in seed order."""
    return [r[key] for r in runs if all(r[k] == v for k, v in where.items())]


def lookup_cost(n_keys_list: Sequence[int], d_model: int, heads: int, knn: int, k_dim: int,
                n_tokens: int, seed: int) -> dict[str, list[float]]:
    """Seconds per token of the product-key search (Eq. 1) against brute force scoring of all N keys."""
    g = torch_generator(seed, "lookup_cost")
    out = {"n_values": [], "product_key": [], "brute_force": []}
    for n in n_keys_list:
        q = torch.randn(n_tokens, heads, k_dim, generator=g)
        k1, k2 = (torch.randn(heads, n, k_dim // 2, generator=g) for _ in range(2))
        out["n_values"].append(n * n)
        for name, fn in (("product_key", product_key_topk), ("brute_force", brute_force_topk)):
            start = time.perf_counter()
            fn(q, k1, k2, min(knn, n))
            out[name].append((time.perf_counter() - start) / n_tokens)
    return out
