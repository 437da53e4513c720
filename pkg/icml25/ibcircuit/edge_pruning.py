"""ACDC (Conmy et al., 2023): edge pruning by KL on the head-level computational graph of the tiny transformer."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .circuits import kl_from_full
from .head_models import TinyTransformer
from .tasks import Prompts


@dataclass(frozen=True)
class Graph:
    """The computational graph ACDC prunes: nodes in topological order ("emb", then per layer its heads "a{l}.{h}"
    and its MLP "m{l}", then "logits"); an edge (s, r) for every node s whose output the residual stream carries
    into the input of r (every earlier writer)."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, model: TinyTransformer) -> Graph:
        nodes, writers, edges = ["emb"], [0], []

        def add(name):
            nodes.append(name)
            edges.extend((s, len(nodes) - 1) for s in writers)
            return len(nodes) - 1

        for layer in range(model.n_layers):
            heads = [add(f"a{layer}.{h}") for h in range(model.n_heads)]
            writers += heads
            writers.append(add(f"m{layer}"))
        add("logits")
        return cls(tuple(nodes), tuple(edges))

    @functools.cached_property
    def out_edges(self) -> tuple[tuple[list[int], list[int]], ...]:
        """Per node: the edges leaving it and their receivers."""
        return tuple(([e for e, (s, _) in enumerate(self.edges) if s == n],
                      [r for s, r in self.edges if s == n]) for n in range(len(self.nodes)))

    def head_index(self, node: int, n_heads: int) -> int | None:
        """`layer * n_heads + head` of an attention-head node, None for the others."""
        name = self.nodes[node]
        if not name.startswith("a"):
            return None
        layer, head = map(int, name[1:].split("."))
        return layer * n_heads + head


def _head_out(model: TinyTransformer, layer: int, head: int, x: torch.Tensor, last_only: bool) -> torch.Tensor:
    """One head's write into the residual stream, W_O[:, head] z_head + b_O / H, from its own input `x` [..., T, d]
    (`last_only`: the query at the last position only)."""
    d, dh = x.shape[-1], model.d_head
    ln = model.ln1[layer](x)
    w, b = model.qkv[layer].weight, model.qkv[layer].bias
    rows = [slice(j * d + head * dh, j * d + (head + 1) * dh) for j in range(3)]
    q = (ln[..., -1:, :] if last_only else ln) @ w[rows[0]].T + b[rows[0]]
    k, v = (ln @ w[r].T + b[r] for r in rows[1:])
    att = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if not last_only:
        T = x.shape[-2]
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    out = model.out[layer]
    return att.softmax(-1) @ v @ out.weight[:, head * dh:(head + 1) * dh].T + out.bias / model.n_heads


def edge_outputs(model: TinyTransformer, graph: Graph, ids: torch.Tensor, masks: torch.Tensor,
                 patched: list[torch.Tensor] | None = None,
                 clean: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Every node's output with the edges of each of the K `masks` [K, E] kept (1) or patched (0): a receiver reads
    Σ_s m_sr·out_s + (1 − m_sr)·patched_s. The last layer and the logits are computed at the answer position only
    (the last layer's heads still read every position for their keys and values).
    A node whose incoming edges are all kept in every mask, and whose senders are all clean, reuses `clean`
    (the outputs with every edge kept). Returns [out_node] with shape [K or 1, P, T or 1, d] (logits: [K, P, V])."""
    L = model.n_layers
    into: dict[int, list[tuple[int, int]]] = {}
    for e, (s, r) in enumerate(graph.edges):
        into.setdefault(r, []).append((e, s))
    outs: list[torch.Tensor] = [(model.embed(ids) + model.pos[: ids.shape[1]])[None]]
    fresh = [False]
    for r in range(1, len(graph.nodes)):
        name = graph.nodes[r]
        last = name in ("logits", f"m{L - 1}")  # read at the answer position only
        untouched = not any(fresh[s] for _, s in into[r]) and bool(masks[:, [e for e, _ in into[r]]].all())
        if clean is not None and untouched:
            outs.append(clean[r])
            fresh.append(False)
            continue
        at = (lambda t: t[..., -1:, :] if t.shape[-2] > 1 else t) if last else (lambda t: t)
        if patched is None:
            x = sum(at(outs[s]) for _, s in into[r])
        else:  # Σ_s patched_s + Σ_s m_sr (out_s − patched_s), the clean senders in one contraction
            x = sum(at(patched[s]) for _, s in into[r])
            still = [(e, s) for e, s in into[r] if not fresh[s]]
            if still:
                d = torch.cat([at(outs[s]) - at(patched[s]) for _, s in still])
                x = x + torch.einsum("ks,s...->k...", masks[:, [e for e, _ in still]], d)
            for e, s in into[r]:
                if fresh[s]:
                    x = x + masks[:, e].view(-1, 1, 1, 1) * (at(outs[s]) - at(patched[s]))
        if name == "logits":
            out = model.unembed(model.ln_f(x[..., -1, :]))
        elif name.startswith("a"):
            layer, head = map(int, name[1:].split("."))
            out = _head_out(model, layer, head, x, last_only=layer == L - 1)
        else:
            layer = int(name[1:])
            out = model.mlp[layer](model.ln2[layer](x))
        outs.append(out)
        fresh.append(True)
    return outs


def acdc(model: TinyTransformer, prompts: Prompts, thresholds: Sequence[float],
         ablation: str = "corrupt") -> torch.Tensor:
    """ACDC (Conmy et al. 2023, Algorithm 1) for every threshold τ at once: visit the receivers from the logits
    back to the embeddings, and each receiver's incoming edges from its latest sender back; remove an edge when
    KL(full ‖ circuit without it) − KL(full ‖ circuit) < τ. A removed edge carries the sender's output on the
    corrupted prompt (`ablation="corrupt"`, ACDC's default) or its mean over the clean prompts ("mean").
    Returns the kept-edge masks [len(thresholds), E]."""
    if ablation not in ("corrupt", "mean"):
        raise ValueError(f"unknown ablation {ablation!r}; valid: corrupt, mean")
    graph = Graph.of(model)
    E = len(graph.edges)
    with torch.no_grad():
        clean = edge_outputs(model, graph, prompts.ids, torch.ones(1, E))
        patched = (edge_outputs(model, graph, prompts.corrupt, torch.ones(1, E)) if ablation == "corrupt"
                   else [o.mean(1, keepdim=True) for o in clean])
        full = clean[-1][0]
        tau = torch.as_tensor(thresholds, dtype=torch.float32)
        masks = torch.ones(len(tau), E)
        current = torch.zeros(len(tau))  # KL of the full graph from itself
        for e in sorted(range(E), key=lambda e: (-graph.edges[e][1], -graph.edges[e][0])):
            # an edge into a receiver with no path left to the logits changes nothing: its KL step is 0 < τ
            live = torch.nonzero(_alive(graph, masks)[:, graph.edges[e][1]]).flatten()
            masks[:, e] = 0.0
            if len(live):
                kl = kl_from_full(full, edge_outputs(model, graph, prompts.ids, masks[live], patched, clean)[-1])
                keep = kl - current[live] >= tau[live]
                masks[live[keep], e] = 1.0
                current[live[~keep]] = kl[~keep]
    return masks


def _alive(graph: Graph, masks: torch.Tensor) -> torch.Tensor:
    """[K, nodes] bool: the nodes with a path of kept edges to the logits in each edge mask."""
    alive = torch.zeros(masks.shape[0], len(graph.nodes), dtype=torch.bool)
    alive[:, -1] = True
    for n in range(len(graph.nodes) - 2, -1, -1):
        edges, receivers = graph.out_edges[n]
        alive[:, n] = (masks[:, edges].bool() & alive[:, receivers]).any(1)
    return alive


def circuit_heads(model: TinyTransformer, masks: torch.Tensor) -> torch.Tensor:
    """[K, n_heads_total] 0/1: the heads with a path of kept edges to the logits in each edge mask."""
    graph = Graph.of(model)
    alive = _alive(graph, masks)
    heads = torch.zeros(masks.shape[0], model.n_total_heads)
    for node in range(len(graph.nodes)):
        k = graph.head_index(node, model.n_heads)
        if k is not None:
            heads[:, k] = alive[:, node].float()
    return heads


def acdc_scores(model: TinyTransformer, prompts: Prompts, thresholds: Sequence[float],
                ablation: str = "corrupt") -> np.ndarray:
    """A head ranking from ACDC's circuits over the threshold sweep: the number of thresholds at which the head
    is in the circuit (kept at larger τ = more important), ties broken by its kept outgoing edges over the sweep
    (a fraction below 1)."""
    masks = acdc(model, prompts, thresholds, ablation)
    graph = Graph.of(model)
    heads = circuit_heads(model, masks)
    out_edges = torch.zeros(model.n_total_heads)
    for e, (s, _) in enumerate(graph.edges):
        k = graph.head_index(s, model.n_heads)
        if k is not None:
            out_edges[k] += masks[:, e].sum()
    return (heads.sum(0) + out_edges / (out_edges.max() + 1)).numpy()
