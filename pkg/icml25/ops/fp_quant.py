r"""Block-scaled fake quantisation to any ExMy floating-point format (the FP-quantisation scaling-law chapter).

A format with E exponent bits and M mantissa bits has bias $2^{E-1}-1$, smallest normal exponent
$e_{\min} = 1 - \text{bias}$, and grid values $\pm 2^{e}(1 + m/2^M)$ (normals) or $\pm 2^{e_{\min}} m/2^M$
(subnormals). Three conventions fix the top of the grid:

- ``ieee``: the top exponent code is Inf/NaN (as ``torch.float8_e5m2``): $e_{\max} = 2^E - 2 - \text{bias}$,
  $\text{FP}_{\max} = (2 - 2^{-M})\,2^{e_{\max}}$, and overflow rounds to Inf;
- ``fn``: finite-only with one NaN code, the top exponent's all-ones mantissa (as ``torch.float8_e4m3fn``):
  $e_{\max} = 2^E - 1 - \text{bias}$, $\text{FP}_{\max} = (2 - 2^{1-M})\,2^{e_{\max}}$ (448 for E4M3), saturating;
- ``paper``: every code is a finite value (Sun et al.; ``ml_dtypes.float4_e2m1fn``, ``float6_e2m3fn``,
  ``float6_e3m2fn``): $\text{FP}_{\max} = (2 - 2^{-M})\,2^{2^E - 1 - \text{bias}}$ (480 for E4M3), saturating.

Quantisation (the paper's Eq. for $Q_{E,M,B}$): per block $X_i$ of $B$ consecutive elements along ``axis``,
$s_i = \text{FP}_{\max} / \max|X_i|$ and $\hat X_i = Q(s_i X_i) / s_i$, where
$Q(v) = \text{ulp}\cdot\operatorname{round}(v / \text{ulp})$ with
$\text{ulp} = 2^{\max(\lfloor \log_2 |v| \rfloor,\, e_{\min}) - M}$, ties to even, then saturation at
$\pm\text{FP}_{\max}$. Without a block size, $s = 1$: a plain cast to the format and back. A block with no
finite nonzero value keeps $s = 1$. When $\text{FP}_{\max} / \max|X_i|$ overflows the working type (a block whose
absmax is below about $10^{-36}$ in float32, or below 1 for an E8 format), the block is first multiplied by an
exact power of two $2^k = 2^a 2^b$ that brings its absmax into $[1, 2)$, and
$\hat X_i = \big(Q(X_i 2^a 2^b s_i) / s_i\big)\, 2^{-b} 2^{-a}$ with $s_i = \text{FP}_{\max} / (\max|X_i|\, 2^k)$,
so a tiny block is scaled onto the grid like any other instead of flushing to zero.
The work is done in float32, or in float64 for a float64 input (rounded once, onto the grid, never first to
float32); for E = 8 the top binade $2^{128}$ of ``fn``/``paper`` lies beyond float32 and is dropped ($e_{\max}$
is capped at 127) in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .build import kernels_for

CONVENTIONS = ("ieee", "fn", "paper")


@dataclass(frozen=True)
class FPFormat:
    """The ExMy grid: `emin`, `fpmax` and whether overflow saturates (fn, paper) or becomes Inf (ieee)."""

    exp_bits: int
    man_bits: int
    convention: str = "fn"

    def __post_init__(self):
        if self.convention not in CONVENTIONS:
            raise ValueError(f"unknown convention {self.convention!r}; valid conventions: {', '.join(CONVENTIONS)}")
        if not (1 <= self.exp_bits <= 8 and 0 <= self.man_bits <= 10):
            raise ValueError(f"E{self.exp_bits}M{self.man_bits}: need 1 <= exp_bits <= 8 and 0 <= man_bits <= 10")
        if self.emax < self.emin or self.fpmax <= 0:
            raise ValueError(f"E{self.exp_bits}M{self.man_bits} has no finite normal values in the "
                             f"{self.convention!r} convention")

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        top = 2**self.exp_bits - 1 - self.bias
        if self.convention == "ieee":
            top -= 1
        elif self.convention == "fn" and self.man_bits == 0:
            top -= 1  # the top exponent's only code is the NaN
        return min(top, 127)

    @property
    def fpmax(self) -> float:
        reserved = self.convention == "fn" and self.man_bits > 0 and self.emax == 2**self.exp_bits - 1 - self.bias
        return (2 - 2.0 ** (-self.man_bits) * (2 if reserved else 1)) * 2.0**self.emax

    @property
    def saturate(self) -> bool:
        return self.convention != "ieee"


def fp_quantize_reference(x: torch.Tensor, fmt: FPFormat, block_size: int | None = None, axis: int | None = -1,
                          out: torch.Tensor | None = None):
    """The plain-PyTorch quantiser; `fp_quantize` documents the arguments."""
    rows, restore = _as_rows(x, block_size, axis)
    n_rows, length = rows.shape
    size = max(1, min(block_size or length, length))
    n_blocks = -(-length // size)
    blocks = torch.nn.functional.pad(rows, (0, n_blocks * size - length)).reshape(n_rows, n_blocks, size)
    if block_size:
        amax = torch.where(blocks.isfinite(), blocks.abs(), 0).amax(-1, keepdim=True)
        fpmax = torch.tensor(fmt.fpmax, dtype=rows.dtype)
        scale = torch.where(amax > 0, fpmax / amax, 1.0)
        y = _round_to_grid(blocks * scale, fmt) / scale
        tiny = ~scale.isfinite().squeeze(-1)  # FPmax / absmax overflows: bring those blocks up by 2^a 2^b first
        if tiny.any():
            small = amax[tiny]
            k = 1 - torch.frexp(small).exponent
            pre_a, pre_b = (torch.ldexp(torch.ones_like(small), e.to(rows.dtype)) for e in (k // 2, k - k // 2))
            scale = fpmax / (small * pre_a * pre_b)
            y[tiny] = _round_to_grid(blocks[tiny] * pre_a * pre_b * scale, fmt) / scale / pre_b / pre_a
    else:
        y = _round_to_grid(blocks, fmt)
    y = restore(y.reshape(n_rows, n_blocks * size)[:, :length])
    return y if out is None else out.copy_(y)


def _round_to_grid(v: torch.Tensor, fmt: FPFormat) -> torch.Tensor:
    """Q(v) = ulp * round(v / ulp), ulp = 2^(max(floor(log2|v|), emin) - M), ties to even, then saturation."""
    a = v.abs()
    exponent = torch.frexp(a).exponent - 1  # floor(log2 a) for a > 0
    ulp = torch.ldexp(torch.ones_like(a), (exponent.clamp(min=fmt.emin) - fmt.man_bits).to(a.dtype))
    q = torch.round(a / ulp) * ulp
    overflow = fmt.fpmax if fmt.saturate else torch.inf
    q = torch.where((q > fmt.fpmax) | a.isinf(), overflow, q)
    return torch.where(v.isnan(), v, torch.copysign(q, v))


def _as_rows(x: torch.Tensor, block_size: int | None, axis: int | None):
    """`x` as a contiguous [rows, L] matrix with `axis` last (or flat), in float64 for a float64 input and in
    float32 otherwise, and the function that undoes it. A 0-dim tensor is one row of one element."""
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1):
        raise ValueError(f"block_size must be a positive integer or None, got {block_size!r}")
    if axis is not None and not -max(x.dim(), 1) <= axis < max(x.dim(), 1):
        raise ValueError(f"axis {axis} is out of range for a tensor of {x.dim()} dimension(s)")
    work = x.detach().to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    moved = work.reshape(1, -1) if axis is None or x.dim() == 0 else work.movedim(axis, -1)
    rows = moved.contiguous().reshape(math.prod(moved.shape[:-1]), moved.shape[-1])

    def restore(y: torch.Tensor) -> torch.Tensor:
        y = y.reshape(moved.shape)
        return (y.reshape(x.shape) if axis is None or x.dim() == 0 else y.movedim(-1, axis)).to(x.dtype)

    return rows, restore


def fp_quantize(x: torch.Tensor, exp_bits: int, man_bits: int, block_size: int | None = None,
                axis: int | None = -1, convention: str = "fn", out: torch.Tensor | None = None) -> torch.Tensor:
    """Fake-quantise `x` to the ExMy format `convention` with one scale per `block_size` elements along `axis`.

    `block_size=None`: no scaling (a cast to the format and back); a block longer than the axis is the whole
    axis; `axis=None` treats `x` as one flat row (so `block_size >= x.numel()` is tensor-wise scaling).
    Returns a tensor of `x`'s shape and dtype (the arithmetic is float64 for float64 input, float32 otherwise), or
    writes it into `out` (of `x`'s shape and dtype; `out=x` quantises in place). For a contiguous float32/float64
    CPU `x` quantised along its last axis (or flat), the compiled kernel reads `x` once and writes `out` once, with
    no temporary. Runs the compiled kernel when it built and `x` is on the CPU, the reference otherwise. No
    gradient: a tensor that requires grad, with grad enabled, is refused (the result would silently be a
    constant); use `fp_quantize_ste` for training, or pass `x.detach()`.
    """
    fmt = FPFormat(exp_bits, man_bits, convention)
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError("fp_quantize has no gradient and x requires grad: use fp_quantize_ste (straight-through) "
                         "to train through the quantiser, or pass x.detach() for a constant")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or out.device != x.device):
        raise ValueError(f"out must match x: got {list(out.shape)} {out.dtype} on {out.device}, expected "
                         f"{list(x.shape)} {x.dtype} on {x.device}")
    if out is not None and _partially_overlap(x, out):
        raise ValueError("out shares memory with x but is not x itself (the kernel would read values it has "
                         "already overwritten); pass out=x to quantise in place, or an out of its own")
    kernels = kernels_for(x)
    if kernels is None:
        return fp_quantize_reference(x, fmt, block_size, axis, out)
    rows, restore = _as_rows(x, block_size, axis)
    direct = (out is not None and x.is_contiguous() and out.is_contiguous() and rows.dtype == x.dtype
              and rows.data_ptr() == x.data_ptr())
    target = out.view(rows.shape) if direct else torch.empty_like(rows)
    kernels.fp_quantize(rows, target, block_size or 0, fmt.man_bits, fmt.emin, fmt.fpmax, fmt.saturate)
    if direct:
        return out
    y = restore(target)
    return y if out is None else out.copy_(y)


def _memory_span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [first, end) between a non-empty tensor's first and last element (torch strides are >= 0)."""
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _partially_overlap(x: torch.Tensor, out: torch.Tensor) -> bool:
    """`out`'s span of memory meets `x`'s without `out` being `x` (the same elements in the same places). As
    PyTorch's own `out=` ops, this refuses what it cannot prove safe: two interleaved views of one buffer count too."""
    if x.numel() == 0 or x.device.type == "meta":
        return False
    same = out.data_ptr() == x.data_ptr() and out.stride() == x.stride()
    (a, b), (c, d) = _memory_span(x), _memory_span(out)
    return not same and a < d and c < b


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, exp_bits, man_bits, block_size, axis, convention):
        return fp_quantize(x, exp_bits, man_bits, block_size, axis, convention)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None, None, None


def fp_quantize_ste(x: torch.Tensor, exp_bits: int, man_bits: int, block_size: int | None = None,
                    axis: int | None = -1, convention: str = "fn") -> torch.Tensor:
    """`fp_quantize` with the straight-through estimator: the forward quantises, the backward passes dY unchanged
    (dL/dx := dL/dx̂), as in quantisation-aware training."""
    return _StraightThrough.apply(x, exp_bits, man_bits, block_size, axis, convention)
