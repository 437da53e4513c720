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
    bits = torch.int64 if expected.dtype == torch.float64 else torch.int32
    a, e = (t[~nan].to(torch.float64 if bits == torch.int64 else torch.float32) for t in (actual, expected))
    bad = a.view(bits) != e.view(bits)
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


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(0, 9), min_size=0, max_size=3), fmt=formats, data=st.data(),
       block=st.one_of(st.none(), st.integers(1, 12)), log_scale=st.floats(-150, 40), n_special=st.integers(0, 4),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_compiled_kernel_equals_reference(shape, fmt, data, block, log_scale, n_special, dtype):
    """Random shapes (0-dim included), both working types, and scales down to float32's subnormals (blocks whose
    FPmax / absmax overflows)."""
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2.0**log_scale).to(dtype)
    flat = x.view(-1)
    for _ in range(n_special if flat.numel() else 0):
        flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(specials)
    axis = data.draw(st.one_of(st.none(), st.integers(-max(len(shape), 1), max(len(shape), 1) - 1)))
    assert_same_bits(fp_quantize(x, *fmt[:2], block, axis, fmt[2]),
                     fp_quantize_reference(x, FPFormat(*fmt), block, axis))


def test_a_0_dim_tensor_is_one_element():
    for block in (None, 1, 8):
        for axis in (-1, 0, None):
            y = fp_quantize(torch.tensor(1.0625), 4, 3, block, axis)
            assert y.shape == () and float(y) == pytest.approx(1.0 if block is None else 1.0625, rel=1e-6)  # s = FPmax / x
    with pytest.raises(ValueError, match="axis 1 is out of range"):
        fp_quantize(torch.tensor(1.0), 4, 3, axis=1)


def test_float64_is_rounded_once_onto_the_grid():
    # 1.0625 is the E4M3 midpoint of 1 and 1.125; a hair above it rounds up, which a first rounding to float32
    # (onto the tie, then to even) would lose
    hair = 2.0**-30
    x = torch.tensor([1.0625 + hair, 1.0625 - hair, 1.0625, -1.0625 - hair], dtype=torch.float64)
    y = fp_quantize(x, 4, 3)
    assert y.dtype == torch.float64 and y.tolist() == [1.125, 1.0, 1.0, -1.125]
    blocks = fp_quantize(x * 3, 4, 3, block_size=2)  # scaled blocks are rounded in float64 too
    assert_same_bits(blocks, fp_quantize_reference(x * 3, FPFormat(4, 3), 2))


def test_float64_agrees_with_float32_on_float32_values_without_scaling():
    # (with blocks the two differ in the last bits of the scale FPmax / absmax, as they should)
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(3))
    assert_same_bits(fp_quantize(x.double(), 3, 2, convention="paper"), fp_quantize(x, 3, 2, convention="paper").double())


@pytest.mark.parametrize("fmt", [(4, 3, "fn"), (2, 1, "paper"), (5, 2, "ieee"), (8, 7, "paper")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_block_scaling_commutes_with_powers_of_two_down_to_tiny_blocks(fmt, dtype):
    """Q(x 2^-j) = Q(x) 2^-j for block scaling, while every value stays a normal float32: also for blocks whose
    FPmax / absmax overflows (absmax below 1e-36, or below 1 for E8), which must not flush to zero."""
    gen = torch.Generator().manual_seed(4)
    base = (torch.rand(16, 32, generator=gen) * 0.875 + 0.125) * torch.randn(16, 32, generator=gen).sign()
    base = base.to(dtype)
    reference = fp_quantize(base, *fmt[:2], 8, convention=fmt[2])
    assert reference.ne(0).all()
    for j in (1, 40, 100, 118, 120, 122):
        assert_same_bits(fp_quantize(base * 2.0**-j, *fmt[:2], 8, convention=fmt[2]), reference * 2.0**-j)


def test_a_block_of_the_smallest_subnormals_keeps_its_values():
    x = torch.tensor([[1e-45, -1e-45, 0.0, 1e-45]])  # 2^-149: absmax 2^149 below what FPmax / absmax can hold
    assert_same_bits(fp_quantize(x, 4, 3, block_size=4), x)
    assert_same_bits(fp_quantize_reference(x, FPFormat(4, 3), 4), x)


def test_out_receives_the_result_in_place_and_alike():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(32, 64, generator=gen)
    for block, axis in ((None, -1), (16, -1), (16, None), (16, 0)):
        expected = fp_quantize(x, 4, 3, block, axis)
        out = torch.full_like(x, math.nan)
        assert fp_quantize(x, 4, 3, block, axis, out=out) is out
        assert_same_bits(out, expected)
        ref_out = torch.full_like(x, math.nan)
        assert fp_quantize_reference(x, FPFormat(4, 3), block, axis, out=ref_out) is ref_out
        assert_same_bits(ref_out, expected)
        inplace = x.clone()
        fp_quantize(inplace, 4, 3, block, axis, out=inplace)
        assert_same_bits(inplace, expected)
    strided = x.t()
    out = torch.empty(strided.shape)
    assert_same_bits(fp_quantize(strided, 4, 3, 16, out=out), fp_quantize(strided.contiguous(), 4, 3, 16))
    with pytest.raises(ValueError, match="out must match x"):
        fp_quantize(x, 4, 3, out=torch.empty(32, 63))
    with pytest.raises(ValueError, match="out must match x"):
        fp_quantize(x, 4, 3, out=torch.empty(32, 64, dtype=torch.float64))


def test_long_blocks_take_the_two_pass_path_and_agree_with_the_reference():
    x = torch.randn(3, 3 * 4096 + 5, generator=torch.Generator().manual_seed(6))
    x[1] *= 1e-38  # a tiny long block too
    for block in (4097, 10_000, None):
        assert_same_bits(fp_quantize(x, 4, 3, block), fp_quantize_reference(x, FPFormat(4, 3), block))
    assert_same_bits(fp_quantize(x, 4, 3, 10**6, axis=None), fp_quantize_reference(x, FPFormat(4, 3), 10**6, None))


def test_other_dtypes_are_quantised_in_float32_and_keep_their_dtype():
    x = torch.linspace(-3, 3, 50, dtype=torch.bfloat16)
    y = fp_quantize(x, 4, 3, block_size=8)
    assert y.dtype == torch.bfloat16 and y.equal(fp_quantize(x.float(), 4, 3, block_size=8).bfloat16())


def test_straight_through_gradient_passes_dy_unchanged():
    x = torch.randn(4, 16, requires_grad=True)
    dy = torch.randn(4, 16)
    y = fp_quantize_ste(x, 2, 1, block_size=8, convention="paper")
    y.backward(dy)
    assert y.equal(fp_quantize(x.detach(), 2, 1, block_size=8, convention="paper")) and x.grad.equal(dy)


def test_a_tensor_that_requires_grad_is_refused_instead_of_losing_its_gradient():
    x = torch.randn(4, 16, requires_grad=True)
    with pytest.raises(ValueError, match="fp_quantize_ste"):
        fp_quantize(x, 4, 3, block_size=8)
    with torch.no_grad():  # no graph is being built: nothing to lose
        assert fp_quantize(x, 4, 3, block_size=8).equal(fp_quantize(x.detach(), 4, 3, block_size=8))


def test_an_out_that_partially_overlaps_x_is_refused_on_both_paths():
    """Shifted by 8 elements in one buffer, the kernel would read blocks it had already written: a silent wrong
    answer before this check. PyTorch's own out= ops refuse partial overlap too; out=x stays allowed."""
    buffer = torch.randn(16 * 64 + 8, generator=torch.Generator().manual_seed(7))
    x, out = buffer[:-8].view(16, 64), buffer[8:].view(16, 64)
    before = buffer.clone()
    for quantize in (lambda: fp_quantize(x, 4, 3, 16, out=out), lambda: fp_quantize(x.t(), 4, 3, 16, out=out.t())):
        with pytest.raises(ValueError, match="out shares memory with x but is not x"):
            quantize()
    assert buffer.equal(before)  # refused before anything was written
    expected = fp_quantize(x, 4, 3, 16)
    assert_same_bits(fp_quantize(x, 4, 3, 16, out=x), expected)  # in place: the same elements in the same places
    apart = torch.randn(2, 16, 64)
    assert_same_bits(fp_quantize(apart[0], 4, 3, 16, out=apart[1]), fp_quantize(apart[0].clone(), 4, 3, 16))
