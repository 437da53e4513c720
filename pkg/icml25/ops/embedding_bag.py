r"""The weighted-sum embedding bag of a product-key memory layer (the Memory Layers chapter).

Each of B bags picks K rows of a value table $V \in \mathbb{R}^{N \times D}$ and sums them with its weights:

$$ y_b = \sum_{k} w_{bk}\, V_{i_{bk}}, \qquad
   \frac{\partial L}{\partial V_n} = \sum_{(b,k):\, i_{bk} = n} w_{bk}\, \frac{\partial L}{\partial y_b}, \qquad
   \frac{\partial L}{\partial w_{bk}} = \Big\langle \frac{\partial L}{\partial y_b},\, V_{i_{bk}} \Big\rangle. $$

The backward's first sum is a scatter with collisions (an index may repeat inside a bag and across bags). The
compiled kernel sorts the B·K slots by row (a counting sort) so that each row of the gradient is summed by one
thread, without atomics; that also makes it deterministic.
"""

from __future__ import annotations

import torch

from .build import KERNEL_DTYPES, compiled


def embedding_bag_reference(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """y[b] = sum_k weights[b, k] * values[indices[b, k]], as a gather and a sum (autograd's backward of the
    gather is an index_add into the value table)."""
    return (weights.unsqueeze(-1) * values[indices]).sum(-2)


class _EmbeddingBag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, indices, weights):
        ctx.save_for_backward(values, indices, weights)
        return compiled().embedding_bag_forward(values, indices, weights)

    @staticmethod
    def backward(ctx, grad_out):
        values, indices, weights = ctx.saved_tensors
        grad_values, grad_weights = compiled().embedding_bag_backward(grad_out.contiguous(), values, indices, weights)
        return grad_values, None, grad_weights


def embedding_bag(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted-sum embedding bag: `values` [N, D] float, `indices` [B, K] long in [0, N), `weights` [B, K] of
    `values`' dtype -> [B, D]; differentiable in `values` and `weights`. An empty bag (K = 0) gives zeros.
    Runs the compiled kernel (forward and sort-by-row backward) for float32/float64 when it built, the
    reference otherwise."""
    _check(values, indices, weights)
    if compiled() is None or values.dtype not in KERNEL_DTYPES:
        return embedding_bag_reference(values, indices, weights)
    return _EmbeddingBag.apply(values.contiguous(), indices.contiguous(), weights.contiguous())


def _check(values, indices, weights):
    if values.dim() != 2 or indices.dim() != 2 or weights.shape != indices.shape:
        raise ValueError(f"need values [N, D], indices [B, K] and weights [B, K]; got values "
                         f"{list(values.shape)}, indices {list(indices.shape)}, weights {list(weights.shape)}")
    if indices.dtype != torch.long or weights.dtype != values.dtype or not values.is_floating_point():
        raise ValueError(f"need float values, long indices and weights of the values' dtype; got {values.dtype}, "
                         f"{indices.dtype}, {weights.dtype}")
    if indices.numel() and not (0 <= int(indices.min()) and int(indices.max()) < values.shape[0]):
        raise ValueError(f"indices must lie in [0, {values.shape[0]}); got [{int(indices.min())}, "
                         f"{int(indices.max())}]")
