r"""The weighted-sum embedding bag of a product-key memory layer (the Memory Layers chapter).

Each of B bags picks K rows of a value table $V \in \mathbb{R}^{N \times D}$ and sums them with its weights:

$$ y_b = \sum_{k} w_{bk}\, V_{i_{bk}}, \qquad
   \frac{\partial L}{\partial V_n} = \sum_{(b,k):\, i_{bk} = n} w_{bk}\, \frac{\partial L}{\partial y_b}, \qquad
   \frac{\partial L}{\partial w_{bk}} = \Big\langle \frac{\partial L}{\partial y_b},\, V_{i_{bk}} \Big\rangle. $$

The backward's first sum is a scatter with collisions (an index may repeat inside a bag and across bags). The
compiled kernel radix-sorts the B·K slots by row so that each touched row of the gradient is summed by one thread,
without atomics; that also makes it deterministic. A second derivative (`backward(create_graph=True)`) takes the
same two sums in differentiable PyTorch ops instead, so no second-order term is lost. Only the touched rows (at most
B·K of the N) have a nonzero gradient, so with ``sparse=True`` the gradient of $V$ is a sparse COO tensor of those
rows, as with ``F.embedding_bag(..., sparse=True)``, and no dense $N \times D$ tensor is written. A gradient of 32
MiB or more (where the C allocator would map fresh pages anyway) lies on fresh anonymous pages (2 MiB pages where
the kernel grants them), which read as zeros: only the touched rows are written, once, and a 256 MiB table's
gradient costs 128 page faults instead of 65536.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .build import KERNEL_DTYPES, kernels_for


def embedding_bag_reference(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor,
                            sparse: bool = False) -> torch.Tensor:
    """y[b] = sum_k weights[b, k] * values[indices[b, k]], as a gather and a sum (autograd's backward of the
    gather is an index_add into the value table, or with `sparse` a sparse gradient of the gathered rows)."""
    return (weights.unsqueeze(-1) * F.embedding(indices, values, sparse=sparse)).sum(-2)


def embedding_bag_backward_reference(grad_out: torch.Tensor, values: torch.Tensor, indices: torch.Tensor,
                                     weights: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor]:
    """The backward's two sums of the module docstring in differentiable PyTorch ops (index_add, a gather), so
    that a second derivative through them keeps every term: dL/dV = index_add of w_bk dL/dy_b at row i_bk,
    dL/dw_bk = <dL/dy_b, V_i_bk>. Returns (dL/dV, None for the indices, dL/dw)."""
    B, K = indices.shape
    scattered = (weights.unsqueeze(-1) * grad_out.unsqueeze(1)).reshape(B * K, -1)
    grad_values = torch.zeros_like(values).index_add(0, indices.reshape(-1), scattered)
    grad_weights = (grad_out.unsqueeze(1) * values[indices]).sum(-1)
    return grad_values, None, grad_weights


class _EmbeddingBag(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, indices, weights, sparse):
        ctx.save_for_backward(values, indices, weights)
        ctx.sparse = sparse
        return kernels_for(values).embedding_bag_forward(values, indices, weights)

    @staticmethod
    def backward(ctx, grad_out):
        values, indices, weights = ctx.saved_tensors
        if torch.is_grad_enabled():  # backward(create_graph=True): a gradient that is itself differentiable
            if ctx.sparse:
                raise RuntimeError("embedding_bag(sparse=True) has no second derivative (a sparse gradient cannot "
                                   "carry one); use sparse=False to differentiate the gradient")
            return (*embedding_bag_backward_reference(grad_out, values, indices, weights), None)
        grad_values, grad_weights, rows = kernels_for(values).embedding_bag_backward(
            grad_out.contiguous(), values, indices, weights, ctx.sparse)
        if ctx.sparse:
            grad_values = torch.sparse_coo_tensor(rows.unsqueeze(0), grad_values, values.shape, is_coalesced=True,
                                                  check_invariants=False)  # sorted, distinct, in range
        return grad_values, None, grad_weights, None


def embedding_bag(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor,
                  sparse: bool = False) -> torch.Tensor:
    """Weighted-sum embedding bag: `values` [N, D] float, `indices` [B, K] long in [0, N), `weights` [B, K] of
    `values`' dtype -> [B, D]; differentiable in `values` and `weights`. An empty bag (K = 0) gives zeros.
    `sparse`: the gradient of `values` is a coalesced sparse COO tensor of the touched rows instead of a dense one
    (for an optimiser that takes sparse gradients, e.g. `torch.optim.SparseAdam` or SGD).
    Runs the compiled kernel (forward and sort-by-row backward) for float32/float64 CPU tensors when it built, the
    reference otherwise (on a GPU, for instance)."""
    _check(values, indices, weights)
    kernels = kernels_for(values, indices, weights)
    if kernels is None or values.dtype not in KERNEL_DTYPES:
        _check_range(values, indices)
        return embedding_bag_reference(values, indices, weights, sparse)
    if not (torch.is_grad_enabled() and (values.requires_grad or weights.requires_grad)):  # no graph to record
        return kernels.embedding_bag_forward(values.contiguous(), indices.contiguous(), weights.contiguous())
    return _EmbeddingBag.apply(values.contiguous(), indices.contiguous(), weights.contiguous(), sparse)


def _check(values, indices, weights):
    if values.dim() != 2 or indices.dim() != 2 or weights.shape != indices.shape:
        raise ValueError(f"need values [N, D], indices [B, K] and weights [B, K]; got values "
                         f"{list(values.shape)}, indices {list(indices.shape)}, weights {list(weights.shape)}")
    if indices.dtype != torch.long or weights.dtype != values.dtype or not values.is_floating_point():
        raise ValueError(f"need float values, long indices and weights of the values' dtype; got {values.dtype}, "
                         f"{indices.dtype}, {weights.dtype}")


def _check_range(values, indices):
    """The compiled forward checks the range of the indices as it reads them; the reference path checks here."""
    if indices.numel() and indices.device.type != "meta":  # a meta tensor has no values to check
        low, high = (int(v) for v in indices.aminmax())
        if not (0 <= low and high < values.shape[0]):
            raise ValueError(f"indices must lie in [0, {values.shape[0]}); got [{low}, {high}]")
