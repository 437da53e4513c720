"""fp_quantize: bit-exact against torch's and ml_dtypes' casts, the special values, block scaling, the compiled
kernel equal to the reference over random shapes, and the straight-through gradient."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.ops import backend
from icml25.ops.fp_quant import FPFormat, fp_quantize, fp_quantize_reference, fp_quantize_ste


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal bit for bit, NaN matching NaN (whatever its payload) and -0 distinct from +0."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan), "NaN positions differ"
    a, e = actual[~nan].float(), expected[~nan].float()
    bad = a.view(torch.int32) != e.view(torch.int32)
    assert not bad.any(), f"{int(bad.sum())} values differ, e.g. x->{a[bad][:5].tolist()} vs {e[bad][:5].tolist()}"


def grid_probe(grid: torch.Tensor, n_random: int, lo: float, hi: float, seed: int) -> torch.Tensor:
    """The grid values, the exact midpoints between neighbours (ties), points a hair either side of each
    midpoint, and random values with log-uniform magnitudes in [2^lo, 2^hi]; both signs."""
    g = grid.double().abs().unique().sort().values
    mid = ((g[1:] + g[:-1]) / 2).float()  # exact: the grids tested have at most 10 mantissa bits
    gen = torch.Generator().manual_seed(seed)
    rand = torch.exp2(torch.empty(n_random, dtype=torch.float64).uniform_(lo, hi, generator=gen)).float()
    pos = torch.cat([g.float(), mid, mid.nextafter(torch.tensor(0.0)), mid.nextafter(torch.tensor(float("inf"))), rand])
    return torch.cat([pos, -pos])


def all_values(dtype) -> torch.Tensor:
    """Every finite value of an 8- or 16-bit torch float type."""
    codes = torch.arange(2 ** (8 * dtype.itemsize)).to(torch.uint8 if dtype.itemsize == 1 else torch.int16)
    v = codes.view(dtype).float()
    return v[v.isfinite()]


def ml_cast(x: torch.Tensor, dtype) -> torch.Tensor:
    return torch.from_numpy(x.numpy().astype(dtype).astype(np.float32))


def ml_grid(dtype) -> torch.Tensor:
    """Every finite value of an ml_dtypes float type (stored one per byte)."""
    v = np.arange(2 ** ml_dtypes.finfo(dtype).bits, dtype=np.uint8).view(dtype).astype(np.float32)
    return torch.from_numpy(v[np.isfinite(v)])


def test_kernels_are_built_so_these_tests_cover_them():
    assert backend() == "compiled"


@pytest.mark.parametrize("fmt, expected", [((4, 3, "fn"), 448), ((4, 3, "paper"), 480), ((4, 3, "ieee"), 240),
                                           ((5, 2, "ieee"), 57344), ((5, 2, "paper"), 114688),
                                           ((2, 1, "paper"), 6), ((2, 3, "paper"), 7.5), ((3, 2, "paper"), 28),
                                           ((5, 10, "ieee"), 65504), ((8, 7, "ieee"), 3.3895313892515355e38)])
def test_fpmax(fmt, expected):
    assert FPFormat(*fmt).fpmax == expected


@pytest.mark.parametrize("dtype, fmt, limit", [(torch.float8_e4m3fn, (4, 3, "fn"), 448),
                                                (torch.float8_e5m2, (5, 2, "ieee"), 57344),
                                                (torch.float16, (5, 10, "ieee"), 65504),
                                                (torch.bfloat16, (8, 7, "ieee"), 3.3e38)])
def test_cast_equals_torch_bit_for_bit(dtype, fmt, limit):
    f = FPFormat(*fmt)
    x = grid_probe(all_values(dtype), 20_000, f.emin - f.man_bits - 3, math.log2(f.fpmax), seed=0)
    x = x[x.abs() <= limit]  # torch turns out-of-range float8 values into NaN, so compare in range only
    assert_same_bits(fp_quantize(x, fmt[0], fmt[1], convention=fmt[2]), x.to(dtype).float())


@pytest.mark.parametrize("dtype, fmt", [(ml_dtypes.float4_e2m1fn, (2, 1, "paper")),
                                        (ml_dtypes.float6_e2m3fn, (2, 3, "paper")),
                                        (ml_dtypes.float6_e3m2fn, (3, 2, "paper")),
                                        (ml_dtypes.float8_e4m3fn, (4, 3, "fn")),
                                        (ml_dtypes.float8_e4m3, (4, 3, "ieee")),
                                        (ml_dtypes.float8_e3m4, (3, 4, "ieee")),
                                        (ml_dtypes.float8_e5m2, (5, 2, "ieee"))])
def test_cast_equals_ml_dtypes_bit_for_bit(dtype, fmt):
    grid = ml_grid(dtype)
    fpmax = FPFormat(*fmt).fpmax
    assert grid.abs().max() == fpmax
    x = grid_probe(grid, 5_000, math.log2(grid[grid > 0].min()) - 3, math.log2(fpmax), seed=1)
    x = x[x.abs() <= fpmax]
    assert_same_bits(fp_quantize(x, fmt[0], fmt[1], convention=fmt[2]), ml_cast(x, dtype))


@pytest.mark.parametrize("convention", ["fn", "paper"])
def test_out_of_range_and_inf_saturate_and_nan_stays(convention):
    fmax = FPFormat(4, 3, convention).fpmax
    x = torch.tensor([1e6, -1e6, math.inf, -math.inf, math.nan, fmax * 1.06])
    y = fp_quantize(x, 4, 3, convention=convention)
    assert y[:4].tolist() == [fmax, -fmax, fmax, -fmax] and y[4].isnan() and y[5] == fmax


def test_ieee_overflow_rounds_to_inf_like_float16():
    x = torch.tensor([65519.0, 65520.0, -65520.0, 1e6, math.inf, -math.inf, math.nan])  # 65520: a tie, to even
    assert_same_bits(fp_quantize(x, 5, 10, convention="ieee"), x.half().float())


def test_signed_zero_and_subnormal_step():
    fmt = FPFormat(4, 3, "fn")
    step = 2.0 ** (fmt.emin - fmt.man_bits)  # the smallest subnormal, 2^-9
    x = torch.tensor([0.0, -0.0, step, -step, step / 2, -step / 2, step * 0.51, step * 1.5, step * 2.5, -1e-30])
    y = fp_quantize(x, 4, 3)
    assert y.tolist() == [0.0, 0.0, step, -step, 0.0, 0.0, step, 2 * step, 2 * step, 0.0]
    assert torch.signbit(y).tolist() == [False, True, False, True, False, True, False, False, False, True]


def test_grid_values_are_fixed_points_and_ties_go_to_even():
    grid = all_values(torch.float8_e4m3fn)
    assert_same_bits(fp_quantize(grid, 4, 3), grid)
    assert fp_quantize(torch.tensor([1.0625, 1.1875, 2.125]), 4, 3).tolist() == [1.0, 1.25, 2.0]


def test_block_scaling_maps_each_block_absmax_onto_fpmax():
    x = torch.tensor([[0.001, -0.003, 0.002, 5.2, -40.0, 1.0]])
    y = fp_quantize(x, 2, 1, block_size=3, convention="paper")
    # s = 6 / absmax per block; E2M1 values are 0, 0.5, 1, 1.5, 2, 3, 4, 6
    assert y[0].tolist() == pytest.approx([0.001, -0.003, 0.002, 40 / 6, -40.0, 0.0])  # 0.78 -> 1, 0.15 -> 0
    torch.testing.assert_close(fp_quantize(x, 2, 1, block_size=1, convention="paper"), x, rtol=1e-6, atol=0)


def test_block_larger_than_the_tensor_is_one_block_and_all_zero_blocks_stay_zero():
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    assert_same_bits(fp_quantize(x, 3, 2, block_size=1000), fp_quantize(x, 3, 2, block_size=7))
    assert_same_bits(fp_quantize(x, 3, 2, block_size=1000, axis=None), fp_quantize(x.flatten(), 3, 2, 21).view(3, 7))
    z = torch.zeros(2, 8).index_fill_(1, torch.tensor([5]), -0.0)
    assert_same_bits(fp_quantize(z, 4, 3, block_size=4), z)


def test_mse_grows_with_block_size_on_heavy_tailed_data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=gen) * torch.exp(2 * torch.randn(64, 256, generator=gen))
    errors = [((fp_quantize(x, 2, 1, b, convention="paper") - x) ** 2).mean() for b in (1, 16, 64, 256)]
    assert errors[0] < 1e-9 * errors[1] and errors[1] < errors[2] < errors[3]


def test_bad_formats_name_the_valid_values():
    with pytest.raises(ValueError, match="ieee, fn, paper"):
        fp_quantize(torch.ones(2), 4, 3, convention="ocp")
    with pytest.raises(ValueError, match="exp_bits"):
        fp_quantize(torch.ones(2), 9, 3)
    with pytest.raises(ValueError, match="no finite normal"):
        FPFormat(1, 3, "ieee")
    with pytest.raises(ValueError, match="block_size"):
        fp_quantize(torch.ones(2), 4, 3, block_size=0)


specials = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -3e-39, 3e38])
formats = st.tuples(st.integers(1, 8), st.integers(0, 10), st.sampled_from(["ieee", "fn", "paper"])).filter(
    lambda f: not (f[2] == "ieee" and f[0] == 1) and not (f[2] == "fn" and f[0] == 1 and f[1] == 0))


@settings(max_examples=150, deadline=None)
@given(shape=st.lists(st.integers(0, 9), min_size=1, max_size=3), fmt=formats, data=st.data(),
       block=st.one_of(st.none(), st.integers(1, 12)), log_scale=st.floats(-40, 40), n_special=st.integers(0, 4))
def test_compiled_kernel_equals_reference(shape, fmt, data, block, log_scale, n_special):
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    x = torch.randn(shape, generator=gen) * 2.0**log_scale
    flat = x.view(-1)
    for _ in range(n_special if flat.numel() else 0):
        flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(specials)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    assert_same_bits(fp_quantize(x, *fmt[:2], block, axis, fmt[2]),
                     fp_quantize_reference(x, FPFormat(*fmt), block, axis))


def test_other_dtypes_are_quantised_in_float32_and_keep_their_dtype():
    x = torch.linspace(-3, 3, 50, dtype=torch.float64)
    y = fp_quantize(x, 4, 3, block_size=8)
    assert y.dtype == torch.float64 and y.equal(fp_quantize(x.float(), 4, 3, block_size=8).double())


def test_straight_through_gradient_passes_dy_unchanged():
    x = torch.randn(4, 16, requires_grad=True)
    dy = torch.randn(4, 16)
    y = fp_quantize_ste(x, 2, 1, block_size=8, convention="paper")
    y.backward(dy)
    assert y.equal(fp_quantize(x, 2, 1, block_size=8, convention="paper")) and x.grad.equal(dy)
