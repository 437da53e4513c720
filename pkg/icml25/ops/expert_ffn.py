r"""Top-k dispatch of a mixture of SwiGLU experts, for a routed MoE and for Autonomy-of-Experts (AoE).

Token $t$ is sent to the $k$ experts $e_{t1..tk}$ with weights $p_{t1..tk}$ (top-k of a router for the MoE, top-k
of the expert norms $\|x W_{\text{down}}^{e}\|$ for AoE) and

$$ y_t = \sum_{j=1}^{k} p_{tj}\, E_{e_{tj}}(x_t), \qquad
   E_e(x) = \big(\operatorname{SiLU}(g_e W^{e}_{\text{gate}}) \odot x W^{e}_{\text{up}}\big) W^{e}_{\text{out}}, $$

where the gate's input $g_e$ is $x$ itself for a SwiGLU MoE, and for AoE (Lv et al., Alg. 2) the low-rank
activation $C_e = x W_{\text{down}}^{e}$ that the router already computed, so that $W_{\text{gate}} = W_{\text{up}}$
of the paper ($d_{\text{low}} \to d_{\text{wide}}$) and $W_{\text{up}}$ here is its $W_p$.

The compiled kernel counting-sorts the $T k$ (token, slot) pairs by expert, runs one GEMM per expert group for each
of the three products, and gathers the weighted outputs back per token, with no atomics in either direction.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .build import KERNEL_DTYPES, kernels_for


class Routing(NamedTuple):
    """Where each token goes: `index` [T, k] long expert ids, `weight` [T, k] float mixing weights."""

    index: torch.Tensor
    weight: torch.Tensor


class Experts(NamedTuple):
    """The stacked weights of n SwiGLU experts: `gate` [n, d_g, h], `up` [n, d, h], `out` [n, h, d]."""

    gate: torch.Tensor
    up: torch.Tensor
    out: torch.Tensor


def expert_ffn_reference(x: torch.Tensor, routing: Routing, experts: Experts,
                         gate_input: torch.Tensor | None = None) -> torch.Tensor:
    """The naive per-expert loop: pick expert e's tokens, run E_e on them, add their weighted outputs back."""
    y = torch.zeros_like(x)
    for e in range(experts.up.shape[0]):
        token, slot = (routing.index == e).nonzero(as_tuple=True)
        g = x[token] if gate_input is None else gate_input[token, e]
        h = F.silu(g @ experts.gate[e]) * (x[token] @ experts.up[e])
        y = y.index_add(0, token, routing.weight[token, slot, None] * (h @ experts.out[e]))
    return y


class _ExpertFFN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index, weight, gate, w_gate, w_up, w_out):
        y, *saved = kernels_for(x).expert_ffn_forward(x, index, weight, gate, w_gate, w_up, w_out)
        ctx.save_for_backward(index, weight, gate, w_gate, w_up, w_out, *saved)
        return y

    @staticmethod
    @once_differentiable  # a second derivative is refused with torch's own message, not mm()'s out= error
    def backward(ctx, grad_y):
        index, weight, gate, w_gate, w_up, w_out, *saved = ctx.saved_tensors
        gx, gw, gg, gwg, gwu, gwo = kernels_for(grad_y).expert_ffn_backward(grad_y.contiguous(), saved, index, weight, gate,
                                                                   w_gate, w_up, w_out)
        if gate.dim() == 2:  # the gate input was x itself: its gradient is already in gx
            gg = None
        return gx, None, gw, gg, gwg, gwu, gwo


def expert_ffn(x: torch.Tensor, routing: Routing, experts: Experts,
               gate_input: torch.Tensor | None = None) -> torch.Tensor:
    """The output [T, d] of a top-k mixture of SwiGLU experts, y[t] = sum_j weight[t,j] * E_{index[t,j]}(x[t]).

    Arguments (n experts, top-k, hidden width h):

    - `x` [T, d]: the tokens.
    - `routing`: `Routing(index [T, k] long in [0, n), weight [T, k])`; the experts of one token should differ
      (duplicates are allowed and simply add up).
    - `experts`: `Experts(gate [n, d_g, h], up [n, d, h], out [n, h, d])`, so E_e(x) =
      (SiLU(g_e @ gate[e]) * (x @ up[e])) @ out[e].
    - `gate_input`: the gate's input g_e. ``None`` for a SwiGLU MoE (g_e = x, d_g = d); for AoE, the per-expert
      low-rank activations C [T, n, d_low] = x @ W_down (d_g = d_low), so the gate becomes the paper's W_up.

    Differentiable in `x`, `routing.weight`, `gate_input` and the expert weights. Runs the compiled kernel for
    float32/float64 CPU tensors when it built, the reference loop otherwise (on a GPU, for instance).
    """
    _check(x, routing, experts, gate_input)
    gate = x if gate_input is None else gate_input
    if kernels_for(x, routing.index, routing.weight, gate, *experts) is None or x.dtype not in KERNEL_DTYPES:
        return expert_ffn_reference(x, routing, experts, gate_input)
    return _ExpertFFN.apply(x.contiguous(), routing.index.contiguous(), routing.weight.contiguous(),
                            gate.contiguous(), *(w.contiguous() for w in experts))


def _check(x, routing, experts, gate_input):
    n, d, h = experts.up.shape
    d_g = d if gate_input is None else gate_input.shape[-1]
    T, k = routing.index.shape
    want = {"x": ([T, d], x), "routing.weight": ([T, k], routing.weight), "experts.gate": ([n, d_g, h], experts.gate),
            "experts.out": ([n, h, d], experts.out)}
    if gate_input is not None:
        want["gate_input"] = ([T, n, d_g], gate_input)
    for name, (shape, tensor) in want.items():
        if list(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {list(tensor.shape)}; expected {shape} (T={T}, k={k}, n={n}, d={d}, "
                             f"d_g={d_g}, h={h})")
        if tensor.dtype != x.dtype:
            raise ValueError(f"{name} has dtype {tensor.dtype}; expected x's dtype {x.dtype}")
    if routing.index.dtype != torch.long:
        raise ValueError(f"routing.index must be torch.long, got {routing.index.dtype}")
    if routing.index.numel() and routing.index.device.type != "meta":  # a meta tensor has no values to check
        low, high = (int(v) for v in routing.index.aminmax())
        if not (0 <= low and high < n):
            raise ValueError(f"routing.index must lie in [0, {n}); got [{low}, {high}]")
