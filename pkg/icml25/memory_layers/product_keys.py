"""Eqs. (1)-(3): the product-key top-k, the value pool and the Memory+ layer (and what the search costs)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ops
from ..core.seeding import seeded, torch_generator

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
