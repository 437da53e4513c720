"""What the paper quantises: blocks of B elements rounded to ExMy (on the compiled kernel
`icml25.ops.fp_quantize`), and a `QLinear` whose GEMM inputs W, W_bwd and X_bwd are quantised."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.seeding import torch_generator
from ..ops import FPFormat, fp_quantize
from .law import _check_format


CONVENTION = "paper"  # every code is a finite value (E4M3 tops out at 480), as the paper's QPyTorch simulation


@dataclass(frozen=True)
class QuantSpec:
    """A format ExMy and block size B (elements per scaling factor). `E=None` means full precision."""

    E: int | None
    M: int | None = None
    B: int | None = None

    def __post_init__(self):
        if self.E is not None:
            _check_format(self.E, self.M, self.B)
            FPFormat(self.E, self.M, CONVENTION)  # the kernel's own range checks

    @property
    def label(self) -> str:
        return "FP32" if self.E is None else f"E{self.E}M{self.M}"

    @property
    def bits(self) -> int:
        return 32 if self.E is None else self.E + self.M + 1


def quantize_blocks(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Q_{E,M,B}(x): blocks of B consecutive elements of the row-major `x` (along its last axis, spanning rows
    when B exceeds it), each scaled so its absmax is FPmax, rounded to ExMy and scaled back (the kernel)."""
    if spec.E is None:
        return x
    return fp_quantize(x, spec.E, spec.M, spec.B, axis=None, convention=CONVENTION)


def format_grid(E: int, M: int, convention: str = CONVENTION) -> np.ndarray:
    r"""The non-negative values of ExMy: subnormals $2^{e_{\min}} m / 2^M$ and normals $2^e (1 + m/2^M)$ up to
    FPmax."""
    fmt = FPFormat(E, M, convention)
    frac = np.arange(2**M) / 2**M
    values = [2.0**fmt.emin * frac] + [2.0**e * (1 + frac) for e in range(fmt.emin, fmt.emax + 1)]
    grid = np.concatenate(values)
    return grid[grid <= fmt.fpmax]


def relative_error(x: torch.Tensor, spec: QuantSpec) -> float:
    """||Q(x) - x||^2 / ||x||^2: the quantisation noise of `spec` on a tensor."""
    return float((quantize_blocks(x, spec) - x).pow(2).sum() / x.pow(2).sum())


def float8_mismatches(n_random: int, seed: int) -> dict[str, int]:
    """Elements where our unscaled E4M3 ('fn') / E5M2 ('ieee') rounding differs from torch's float8 casts, over
    every finite float8 value and `n_random` random in-range values (torch turns overflow into NaN, so only
    in-range values compare)."""
    g = torch_generator(seed, "float8")
    out = {}
    for (E, M, conv), dtype in (((4, 3, "fn"), torch.float8_e4m3fn), ((5, 2, "ieee"), torch.float8_e5m2)):
        codes = torch.arange(256, dtype=torch.uint8).view(dtype).float()
        codes = codes[codes.isfinite()]
        top = FPFormat(E, M, conv).fpmax
        x = torch.cat([codes, (torch.rand(n_random, generator=g) * 2 - 1) * top,
                       torch.randn(n_random, generator=g) * 2.0 ** torch.randint(-20, 10, (n_random,), generator=g)])
        ours = fp_quantize(x, E, M, None, convention=conv)
        out[f"E{E}M{M}"] = int((ours != x.to(dtype).float()).sum())
    return out


class _QLinearFunction(torch.autograd.Function):
    """y = X Q(W)^T (P2); dX = dY Q(W_bwd) (P4, blocks along the output axis, the GEMM's reduction);
    dW = dY^T Q(X_bwd) (P6, blocks along tokens). dY and the forward X stay in full precision; the quantiser's
    own gradient is straight-through."""

    @staticmethod
    def forward(ctx, x, weight, spec):
        ctx.save_for_backward(x, weight)
        ctx.spec = spec
        return x @ quantize_blocks(weight, spec).t()

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        spec = ctx.spec
        x2, g2 = x.reshape(-1, x.shape[-1]), grad_y.reshape(-1, grad_y.shape[-1])
        w_bwd = quantize_blocks(weight.t().contiguous(), spec).t()  # [out, in], blocks along out
        x_bwd = quantize_blocks(x2.t().contiguous(), spec).t()  # [tokens, in], blocks along tokens
        grad_x = (g2 @ w_bwd).reshape(x.shape)
        grad_w = g2.t() @ x_bwd
        return grad_x, grad_w, None


class QLinear(torch.nn.Module):
    """A bias-free linear layer whose GEMM inputs W, W_bwd and X_bwd are quantised to `spec` (the paper's choice
    P2 + P4 + P6); with `spec.E = None` it is exactly `nn.Linear(bias=False)`."""

    def __init__(self, weight: torch.nn.Parameter, spec: QuantSpec):
        super().__init__()
        self.weight, self.spec = weight, spec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.spec.E is None:
            return torch.nn.functional.linear(x, self.weight)
        return _QLinearFunction.apply(x, self.weight, self.spec)

    def extra_repr(self) -> str:
        return f"{self.spec.label}, B={self.spec.B}, weight={tuple(self.weight.shape)}"


def quantize_model(model: torch.nn.Module, spec: QuantSpec) -> torch.nn.Module:
    """Replace every linear layer inside the transformer blocks (attention and MLP projections; not the
    embedding or the output head, as in the paper) by a `QLinear` sharing its weight. In place; returns `model`."""
    for block in model.model.layers:
        for name, child in list(block.named_modules()):
            if isinstance(child, torch.nn.Linear):
                if child.bias is not None:
                    raise ValueError(f"{name} has a bias; QLinear is bias-free like Llama's projections")
                parent = block.get_submodule(name.rpartition(".")[0]) if "." in name else block
                setattr(parent, name.rpartition(".")[2], QLinear(child.weight, spec))
    return model
