r"""A routed mixture of SwiGLU experts: the layer two chapters compare against (AoE's baseline, the memory layers'
"MoE matched for compute and parameters").

A linear router scores every expert, $p = \operatorname{softmax}(x W_r)$ over all $n$ experts, the top $k$ are
kept and their probabilities renormalised (equal to a softmax over the $k$ selected logits), and the token's output
is the weighted sum of the selected experts' SwiGLU outputs:

$$ y = \sum_{i \in \operatorname{top}_k(p)} \frac{p_i}{\sum_{j \in \operatorname{top}_k(p)} p_j}\,
       \big(\operatorname{SiLU}(x W^i_\text{gate}) \odot x W^i_\text{up}\big) W^i_\text{out}. $$

The optional load-balancing loss (Switch-style; AoE's Eq. 6) is $\mathcal L_\text{aux} = \alpha\, n \sum_i f_i P_i$
with $f_i$ the fraction of tokens that have expert $i$ among their top $k$ and $P_i$ its mean probability.
Tokens are dispatched to their experts by the compiled `icml25.ops.expert_ffn` kernel (its PyTorch reference when
the kernel did not build).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import ops
from .seeding import torch_generator


def top_k_softmax(logits: torch.Tensor, k: int) -> tuple[ops.Routing, torch.Tensor]:
    """softmax over all n experts -> top-k -> renormalise; returns the routing and the full probabilities
    [T, n]. (Equal to a softmax over the k selected logits.)"""
    n = logits.shape[-1]
    if not 1 <= k <= n:
        raise ValueError(f"top_k={k} must lie in [1, n_experts={n}]")
    probs = torch.softmax(logits, dim=-1)
    weight, index = probs.topk(k, dim=-1)
    return ops.Routing(index, weight / weight.sum(-1, keepdim=True)), probs


def load_balancing_loss(probs: torch.Tensor, index: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha · n · sum_i f_i P_i, with f_i the fraction of tokens that have expert i among their top-k and P_i
    the mean probability of expert i. Uniform routing gives alpha · k."""
    n = probs.shape[-1]
    f = torch.zeros(n, dtype=probs.dtype).index_add_(0, index.flatten(), torch.ones(index.numel(), dtype=probs.dtype))
    f = f / probs.shape[0]
    return alpha * n * (f * probs.mean(0)).sum()


class RoutedLayer(nn.Module):
    """What every expert layer keeps of its last forward: the routing, the full probabilities and its auxiliary
    (load-balancing) loss, which a training loss adds (`aux_loss`)."""

    alpha: float

    def _record(self, routing: ops.Routing, probs: torch.Tensor) -> None:
        self.last_index, self.last_probs = routing.index.detach(), probs.detach()
        self.aux_loss = load_balancing_loss(probs, routing.index, self.alpha) if self.alpha else probs.new_zeros(())


def aux_loss(model: nn.Module) -> torch.Tensor | float:
    """The sum of the auxiliary losses of every routed layer of `model` from its last forward (0 if none)."""
    return sum(m.aux_loss for m in model.modules() if isinstance(m, RoutedLayer))


class MoEFFN(RoutedLayer):
    """A routed mixture of `n_experts` SwiGLU experts of width `d_ffn`, `top_k` per token (the equation above).

    The router is linear ([d, n]); with `router_hidden` = h > 0 it is an MLP, logits = SiLU(x W_in) W_r with
    W_in [d, h] and W_r [h, n] (AoE's "router with as many parameters" ablation)."""

    def __init__(self, d: int, n_experts: int, top_k: int, d_ffn: int, alpha: float = 0.0, seed: int = 0,
                 router_hidden: int = 0):
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"top_k={top_k} must lie in [1, n_experts={n_experts}]")
        if router_hidden < 0:
            raise ValueError(f"router_hidden={router_hidden} must be >= 0 (0: a linear router)")
        self.n_experts, self.top_k, self.d_ffn, self.alpha = n_experts, top_k, d_ffn, alpha
        g = torch_generator(seed, "moe")
        self.router = nn.Parameter(torch.randn(d, n_experts, generator=g) * d ** -0.5)
        self.w_gate = nn.Parameter(torch.randn(n_experts, d, d_ffn, generator=g) * d ** -0.5)
        self.w_up = nn.Parameter(torch.randn(n_experts, d, d_ffn, generator=g) * d ** -0.5)
        self.w_out = nn.Parameter(torch.randn(n_experts, d_ffn, d, generator=g) * d_ffn ** -0.5)
        self.router_in = None
        if router_hidden:  # the experts are drawn as in the linear-router MoE of the same seed
            gr = torch_generator(seed, "mlp_router")
            self.router_in = nn.Parameter(torch.randn(d, router_hidden, generator=gr) * d ** -0.5)
            self.router = nn.Parameter(torch.randn(router_hidden, n_experts, generator=gr) * router_hidden ** -0.5)

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The router's logits [T, n] for tokens `x` [T, d]."""
        return (x if self.router_in is None else F.silu(x @ self.router_in)) @ self.router

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x = hidden.reshape(-1, hidden.shape[-1])
        routing, probs = top_k_softmax(self.router_logits(x), self.top_k)
        self._record(routing, probs)
        y = ops.expert_ffn(x, routing, ops.Experts(self.w_gate, self.w_up, self.w_out))
        return y.view(hidden.shape)

    def flops_per_token(self) -> int:
        """Forward FLOPs (2 per multiply-add) per token: the router and `top_k` SwiGLU experts of 3·d·d_ffn
        weights each (softmax and top-k not counted)."""
        router = sum(p.numel() for p in (self.router_in, self.router) if p is not None)
        return 2 * (router + self.top_k * 3 * self.w_gate.shape[1] * self.d_ffn)

    def n_params(self) -> int:
        """Parameters: the router and every expert's three matrices."""
        return sum(p.numel() for p in self.parameters())


def moe_reference(layer: MoEFFN, x: torch.Tensor) -> torch.Tensor:
    """A naive forward of `layer`, one token and one selected expert at a time, for testing."""
    out = []
    for t in range(x.shape[0]):
        p = torch.softmax(layer.router_logits(x[t:t + 1])[0], 0)
        top = p.topk(layer.top_k).indices.tolist()
        y = torch.zeros_like(x[t])
        for i in top:
            y = y + p[i] / p[top].sum() * ((F.silu(x[t] @ layer.w_gate[i]) * (x[t] @ layer.w_up[i])) @ layer.w_out[i])
        out.append(y)
    return torch.stack(out)
