"""`icml25 bench`: each compiled kernel against its reference and the best stock PyTorch path, in one run.

Like with like: where a kernel has an `out=` form (fp_quantize) every contender writes into a preallocated output,
as the copy ceiling `y.copy_(x)` does; where autograd allocates (the forward and backward of embedding_bag and
expert_ffn) every contender allocates alike. The quantiser's tensor is a declared multiple of the machine's
last-level cache, so the ceiling is the memory bandwidth, not a cache's, and the ceiling is timed at that size in
the same rounds. The expert layer's ceiling is compute: the best FLOP rate of plain `torch.mm` into a preallocated
output over the layer's own GEMM shapes and a few large square ones (the machine's practical peak), each timed in
the same rounds; its rate over the stock path's says how large a speedup over stock any kernel doing the layer's
FLOPs could reach.
The contenders of one case are timed interleaved, round by round (each round runs every contender's unit once, in
a rotating order; a contender faster than `MIN_UNIT_SECONDS` runs several calls in a row as its unit), so a burst of
load on a shared machine hits all of them alike; throughput is per second of the minimum time per call over
`repeats` rounds, and each round gives one paired speedup of the compiled kernel over each
other contender (the units the appendix claims are decided on).

The C allocator's policy is fixed for the whole run (`fix_allocator`), because with glibc's default a block's fresh
pages depend on the process's allocation history: its mmap threshold starts at 128 KiB and rises to the size of each
mapped block freed (up to 32 MiB), and the top of its heap is returned to the system beyond twice that. Whether a 16 MiB
gradient (the embedding bag's dense one at N=2^16, kernel and reference alike) lies on pages the process already touched
or on fresh ones (a minor page fault and the system's zeroing for each 4 KiB) therefore differed from build to build: in
six builds of the one-thread pass (2026-12-05, before the policy; other processes took 2-31% of the CPU), the median
call took 0-816 page faults for the kernel and 0-2048 for the reference, different in each build, and the kernel's
median call 2.9-4.0 ms; with the policy fixed, the median call of either took no page fault in five builds, the kernel's
2.4-3.2 ms and the reference's 7.8-8.2 ms. Every contender of every case runs under it, as a long-running training
process ends up: blocks under 32 MiB reuse memory the process has touched.
"""

from __future__ import annotations

import ctypes
import json
import math
import statistics
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import kernels
from ..core.config import COUNT, POSITIVE, make_config
from ..core.machine import last_level_cache_bytes
from ..core.seeding import one_thread
from .build import backend, compiled
from .embedding_bag import embedding_bag, embedding_bag_reference
from .expert_ffn import Experts, Routing, expert_ffn, expert_ffn_reference
from .fp_quant import FPFormat, fp_quantize, fp_quantize_reference
from .timing import ForeignLoad

config = make_config({
    "smoke": {"fp_cache_multiple": None, "fp_max_mib": None, "fp_shape": (256, 256), "fp_block": 32, "bag_rows": (2**10,),
              "bag_batch": 64, "bag_k": 8, "bag_dim": 32, "moe_tokens": 128, "moe_dims": (32,), "moe_experts": 8,
              "moe_k": 2, "gemm_squares": (128,), "repeats": 3, "reference_repeats": 3, "min_unit": 0.002},
    "ci": {"fp_cache_multiple": 2, "fp_max_mib": 128, "fp_shape": None, "fp_block": 32, "bag_rows": (2**14, 2**16), "bag_batch": 512,
           "bag_k": 32, "bag_dim": 64, "moe_tokens": 1024, "moe_dims": (64, 128), "moe_experts": 8, "moe_k": 2,
           "gemm_squares": (1024, 2048), "repeats": 12, "reference_repeats": 32, "min_unit": 0.02},
    "full": {"fp_cache_multiple": 8, "fp_max_mib": 512, "fp_shape": None, "fp_block": 32, "bag_rows": (2**16, 2**20),
             "bag_batch": 2048, "bag_k": 64, "bag_dim": 64, "moe_tokens": 4096, "moe_dims": (64, 256),
             "moe_experts": 8, "moe_k": 2, "gemm_squares": (1024, 2048), "repeats": 12, "reference_repeats": 32,
             "min_unit": 0.02},
},
    fp_cache_multiple=COUNT, fp_max_mib=COUNT, fp_shape=COUNT, fp_block=COUNT, bag_rows=COUNT, bag_batch=COUNT, bag_k=COUNT,
    bag_dim=COUNT, moe_tokens=COUNT, moe_dims=COUNT, moe_experts=COUNT, moe_k=COUNT, gemm_squares=COUNT,
    repeats=COUNT, reference_repeats=COUNT, min_unit=POSITIVE)


#: glibc's mallopt parameters (malloc.h), and the values `fix_allocator` fixes them at: the mmap threshold at the
#: largest value glibc's dynamic threshold reaches (blocks below it come from the heap), the trim threshold as high
#: as mallopt takes (freed memory stays with the process)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
ALLOCATOR_POLICY = {M_MMAP_THRESHOLD: 32 * 2**20, M_TRIM_THRESHOLD: 2**31 - 1}


def fix_allocator() -> bool:
    """Fix the C allocator's policy for the rest of the process (`ALLOCATOR_POLICY`; setting either threshold
    also stops glibc from moving them with the allocation history), so that whether a block's pages are fresh no
    longer depends on what the process allocated before. Returns whether the C library took every setting (False
    where it has no mallopt, i.e. is not glibc)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    return all([mallopt(param, value) == 1 for param, value in ALLOCATOR_POLICY.items()])


def fp_shape(cfg, llc: int | None = None) -> tuple[int, int]:
    """The quantiser's float32 tensor: `fp_shape`, or rows of 4096 filling `fp_cache_multiple` last-level caches
    (`llc` bytes each, default `last_level_cache_bytes`), but at most `fp_max_mib` MiB where that is set. The cap
    keeps a run in its time and memory: a small virtual machine may report its host's whole shared cache (480 MiB
    seen here), and two of those made a 960 MiB tensor whose benchmark took about 350 s of the appendix's ci run (a
    32 MiB cache gives 64 MiB), while full's eight would make a 3.75 GiB tensor beside its output and the stock
    path's buffers (about 12 GiB) and the blocked reference's several tensor-sized temporaries, more than such a
    machine's 23 GiB (an estimate: it was not run); capped at 512 MiB, full's benchmark took 5 min and 6.3 GiB here.
    Full's cap binds only where a cache over 64 MiB is reported.
    Where the cap binds, the tensor fills fewer caches than asked, and the claim's `beyond_cache` precondition says
    so."""
    if cfg.fp_cache_multiple is None:
        return tuple(cfg.fp_shape)
    n_bytes = cfg.fp_cache_multiple * (llc or last_level_cache_bytes())
    if cfg.fp_max_mib is not None:
        n_bytes = min(n_bytes, cfg.fp_max_mib * 2**20)
    return math.ceil(n_bytes / (4 * 4096)), 4096


#: the shortest timed unit (the config's `min_unit` at ci and full; smoke, which only checks that the benchmark
#: runs, takes a tenth): a contender faster than this is called as many times in a row as reach it and its time is
#: the mean per call (as `timeit` does), so one timer interrupt or preemption cannot double a round
MIN_UNIT_SECONDS = 0.02


def calls_per_unit(seconds: float, min_unit: float = MIN_UNIT_SECONDS) -> int:
    """How many calls in a row, of a contender whose call takes `seconds`, make a timed unit of at least
    `min_unit` seconds (one for a contender as slow as that or slower)."""
    return max(1, math.ceil(min_unit / max(seconds, 1e-9)))


def interleaved(fns: dict, repeats: int, min_unit: float = MIN_UNIT_SECONDS) -> dict[str, list[float]]:
    """Wall times per call of each contender over `repeats` rounds, after two warm-up rounds (the allocator
    settles, and the first sizes each contender's unit: `calls_per_unit` calls timed together); each round runs
    every contender's unit once, the order rotating from round to round."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    calls = dict.fromkeys(names, 1)
    for r in range(repeats + 2):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            for _ in range(calls[name]):
                fns[name]()
            seconds = (time.perf_counter() - start) / calls[name]
            if r == 0:
                calls[name] = calls_per_unit(seconds, min_unit)
            elif r >= 2:
                times[name].append(seconds)
    return times


def row(kernel: str, label: str, case: str, unit: str, work: float, times: dict[str, list[float]],
        stock_path: str, names: dict[str, str] | None = None, ceiling: list[float] | None = None):
    """One line of the table: throughputs (`work` per second of the minimum time) and the compiled kernel's
    speedups. `names` maps the columns compiled / reference / stock to contenders of `times` (default: the same
    names). `per_round` holds the paired reference / compiled speedups of the rounds, `per_round_stock` the paired
    stock / compiled ones. With `ceiling` (the times, in the same rounds, that the contender bounding the case takes
    for the same work) `of_ceiling` is the compiled kernel's
    throughput over the ceiling's and `attainable_x_stock` the ceiling's over stock's: the largest speedup over
    stock that a kernel doing this work could reach; `per_round_ceiling` and `per_round_attainable` hold them per
    round. `label` is the short name of the case for plots."""
    names = names or {c: c for c in ("compiled", "reference", "stock")}
    t = {column: times[name] for column, name in names.items()}
    best = {column: min(v) for column, v in t.items()}
    out = {"kernel": kernel, "label": label, "case": case, "unit": unit, "stock_path": stock_path}
    for column in ("compiled", "reference", "stock"):
        out[column] = work / best[column]
    out["x_reference"] = best["reference"] / best["compiled"]
    out["x_stock"] = best["stock"] / best["compiled"]
    out["per_round"] = [r / c for r, c in zip(t["reference"], t["compiled"])]
    out["per_round_stock"] = [s / c for s, c in zip(t["stock"], t["compiled"])]
    out["of_ceiling"] = out["attainable_x_stock"] = None
    if ceiling is not None:
        out["of_ceiling"] = min(ceiling) / best["compiled"]
        out["attainable_x_stock"] = best["stock"] / min(ceiling)
        out["per_round_ceiling"] = [k / c for k, c in zip(ceiling, t["compiled"])]
        out["per_round_attainable"] = [s / k for k, s in zip(ceiling, t["stock"])]
    return out


def bench_fp_quantize(cfg, gen):
    """GB/s (bytes read + written) of E4M3 fake quantisation, unscaled and with blocks of `fp_block`, every
    contender writing into the same preallocated float32 output, beside `y.copy_(x)`."""
    shape = fp_shape(cfg)
    x = torch.randn(shape, generator=gen)
    y = torch.empty_like(x)
    n_bytes = 2 * x.numel() * x.element_size()
    fmt = FPFormat(4, 3, "fn")
    B = cfg.fp_block
    f8 = torch.empty(shape, dtype=torch.float8_e4m3fn)
    blocks, out_blocks = x.view(-1, B), y.view(-1, B)
    amax, scaled = torch.empty(blocks.shape[0], 1), torch.empty_like(x).view(-1, B)

    def stock_cast():  # cast to float8 and back, into preallocated buffers
        f8.copy_(x)
        y.copy_(f8)

    def stock_blocks():  # amax, scale, cast, dequantise: the usual eager-mode recipe, into preallocated buffers
        torch.abs(blocks, out=scaled)
        torch.amax(scaled, -1, keepdim=True, out=amax)
        torch.div(fmt.fpmax, amax, out=amax)
        torch.mul(blocks, amax, out=scaled)
        f8.view(-1, B).copy_(scaled)
        out_blocks.copy_(f8.view(-1, B)).div_(amax)

    llc = last_level_cache_bytes()
    size = f"{shape[0]}x{shape[1]} ({x.numel() * 4 / llc:.1f}x the {llc / 2**20:.0f} MiB last-level cache)"
    cases = {
        "no scaling": ({"compiled": lambda: fp_quantize(x, 4, 3, out=y),
                        "reference": lambda: fp_quantize_reference(x, fmt, out=y), "stock": stock_cast},
                       "x.to(float8_e4m3fn).float(), preallocated"),
        f"blocks of {B}": ({"compiled": lambda: fp_quantize(x, 4, 3, B, out=y),
                            "reference": lambda: fp_quantize_reference(x, fmt, B, out=y), "stock": stock_blocks},
                           "amax, scale, float8 cast, preallocated"),
    }
    rows = []
    for case, (fns, stock_path) in cases.items():
        times = interleaved(dict(fns, copy=lambda: y.copy_(x)), cfg.repeats, cfg.min_unit)
        copy = times.pop("copy")
        rows.append(row("fp_quantize", case, f"E4M3 fn, {case}, {size}", "GB/s", n_bytes / 1e9, times, stock_path,
                        ceiling=copy))
        rows[-1]["copy_times"] = copy  # the timing noise of this run: the copy's rounds
        rows[-1]["ceiling_gbs"] = n_bytes / 1e9 / min(copy)
        rows[-1]["cache_multiple"] = x.numel() * 4 / llc
    return rows, max(r["ceiling_gbs"] for r in rows)


class BagFloor(torch.autograd.Function):
    """An embedding bag's forward and backward through autograd with no arithmetic: the output [B, D] allocated,
    the dense gradient zeroed (as any dense gradient of the table must be) or the sparse one built from the
    touched rows (`rows`, found beforehand) and uninitialised values, the weights' gradient allocated. What any
    kernel called this way pays before it computes anything: the floor of the forward and backward."""

    @staticmethod
    def forward(ctx, values, indices, weights, rows):
        ctx.shape, ctx.rows, ctx.weights_shape = values.shape, rows, weights.shape
        return values.new_empty(indices.shape[0], values.shape[1])

    @staticmethod
    def backward(ctx, grad_out):
        N, D = ctx.shape
        if ctx.rows is None:
            grad_values = grad_out.new_zeros(N, D)
        else:
            grad_values = torch.sparse_coo_tensor(ctx.rows.unsqueeze(0), grad_out.new_empty(len(ctx.rows), D),
                                                  (N, D), is_coalesced=True, check_invariants=False)
        return grad_values, None, grad_out.new_empty(ctx.weights_shape), None


def bag_inputs(cfg, N: int, gen) -> tuple[torch.Tensor, ...]:
    """An embedding bag's memory of `N` rows, its lookups, their weights and an output gradient, drawn from `gen`."""
    values = torch.randn(N, cfg.bag_dim, generator=gen, requires_grad=True)
    indices = torch.randint(0, N, (cfg.bag_batch, cfg.bag_k), generator=gen)
    weights = torch.rand(cfg.bag_batch, cfg.bag_k, generator=gen, requires_grad=True)
    return values, indices, weights, torch.randn(cfg.bag_batch, cfg.bag_dim, generator=gen)


def bag_size(N: int) -> str:
    return f"N=2^{N.bit_length() - 1}"


def bag_forward(fn, values, indices, weights) -> None:
    """The bag `fn` forward alone, without autograd."""
    with torch.no_grad():
        fn(values, indices, weights)


def bag_step(fn, values, indices, weights, dy, sparse: bool) -> None:
    """The bag `fn` forward and backward with a dense or sparse gradient of `values`, the gradients set to None
    first, as optimizer.zero_grad() does."""
    values.grad = weights.grad = None
    fn(values, indices, weights, sparse=sparse).backward(dy)


def bench_embedding_bag(cfg, gen):
    """Million bag entries per second for memories of `bag_rows` rows: the forward alone, and the forward and
    backward with a dense gradient and with a sparse one (the stock path's `sparse=True`), beside `BagFloor` in the
    same rounds: the fwd+bwd row of the sparse layout gets `floor_x_best_stock`, the faster stock layout's time
    over the faster floor's, the largest speedup over stock that any kernel called through autograd could reach."""
    rows = []
    for N in cfg.bag_rows:
        values, indices, weights, dy = bag_inputs(cfg, N, gen)
        fns = {"compiled": embedding_bag, "reference": embedding_bag_reference,
               "stock": lambda v, i, w, sparse=False: F.embedding_bag(i, v, mode="sum", per_sample_weights=w,
                                                                      sparse=sparse)}
        n = bag_size(N)
        shape = f"{n}, B={cfg.bag_batch}, K={cfg.bag_k}, D={cfg.bag_dim}"
        work = indices.numel() / 1e6
        times = interleaved({name: (lambda fn=fn: bag_forward(fn, values, indices, weights))
                             for name, fn in fns.items()}, cfg.repeats, cfg.min_unit)
        rows.append(row("embedding_bag", f"fwd, {n}", f"fwd, {shape}", "M entries/s", work, times,
                        "F.embedding_bag"))

        steps = {f"{name} {grad}": partial(bag_step, fn, values, indices, weights, dy, sparse=grad == "sparse")
                 for name, fn in fns.items() for grad in ("dense", "sparse")}
        touched = indices.unique()
        for grad, rows_of in (("dense", None), ("sparse", touched)):
            floor = lambda v, i, w, sparse, rows_of=rows_of: BagFloor.apply(v, i, w, rows_of)  # noqa: E731
            steps[f"floor {grad}"] = partial(bag_step, floor, values, indices, weights, dy, sparse=False)
        steps |= kernel_phases(values.detach(), indices, weights.detach(), dy)
        times = interleaved(steps, cfg.repeats, cfg.min_unit)
        for grad in ("dense", "sparse"):
            rows.append(row("embedding_bag", f"fwd+bwd {grad}, {n}", f"fwd+bwd, {grad} gradient, {shape}",
                            "M entries/s", work, times, f"F.embedding_bag{', sparse=True' if grad == 'sparse' else ''}",
                            names={c: f"{c} {grad}" for c in ("compiled", "reference", "stock")}))
        # the best of each side per round: the compiled kernel's faster gradient layout against stock's faster one
        rows[-1]["per_round_best_stock"] = [
            min(sd, ss) / min(cd, cs) for cd, cs, sd, ss in zip(times["compiled dense"], times["compiled sparse"],
                                                                times["stock dense"], times["stock sparse"])]
        best = {side: min(min(times[f"{side} dense"]), min(times[f"{side} sparse"]))
                for side in ("compiled", "stock", "floor")}
        rows[-1].update(x_best_stock=best["stock"] / best["compiled"], floor_x_best_stock=best["stock"] / best["floor"],
                        floor_ms=best["floor"] * 1e3, compiled_ms=best["compiled"] * 1e3, stock_ms=best["stock"] * 1e3)
        rows[-1].update(phases_ms(times, best["stock"]))
    return rows


def kernel_phases(values, indices, weights, dy) -> dict:
    """The compiled embedding_bag's own calls without autograd, as contenders of the fwd+bwd rounds: the forward,
    and the backward with each gradient layout (its sort by row and its sums; no autograd Function, no sparse COO
    tensor built around the rows); none when the kernels did not build (the compiled contenders are then the
    references)."""
    module = compiled()
    if module is None:
        return {}
    out = {"kernel forward": lambda: module.embedding_bag_forward(values, indices, weights)}
    for grad in ("dense", "sparse"):
        out[f"kernel backward {grad}"] = (lambda sparse=grad == "sparse": module.embedding_bag_backward(
            dy, values, indices, weights, sparse))
    return out


def phases_ms(times: dict[str, list[float]], stock_seconds: float) -> dict:
    """Where the compiled fwd+bwd's time goes, for its faster gradient layout (best rounds): the kernel's forward
    and backward calls, and the rest (autograd's Function, the sparse tensor, the allocations), with
    `kernel_x_best_stock`: the faster stock layout's time over the kernel's own forward + backward, the largest
    speedup over stock that this kernel reaches if everything around its two calls cost nothing."""
    if "kernel forward" not in times:
        return {}
    grad = min(("dense", "sparse"), key=lambda g: min(times[f"compiled {g}"]))
    forward, backward = min(times["kernel forward"]), min(times[f"kernel backward {grad}"])
    return {"phases_layout": grad, "kernel_forward_ms": forward * 1e3, "kernel_backward_ms": backward * 1e3,
            "around_kernel_ms": (min(times[f"compiled {grad}"]) - forward - backward) * 1e3,
            "kernel_x_best_stock": stock_seconds / (forward + backward)}


def expert_loop(x, routing, experts, gate_input=None):
    """The per-expert loop users write (as in the Mixtral implementation of transformers): for each expert, find
    its tokens, run it on them, and add the weighted outputs back in place."""
    y = torch.zeros_like(x)
    for e in range(experts.up.shape[0]):
        token, slot = torch.where(routing.index == e)
        if token.numel() == 0:
            continue
        g = x[token] if gate_input is None else gate_input[token, e]
        h = F.silu(g @ experts.gate[e]) * (x[token] @ experts.up[e])
        y.index_add_(0, token, (h @ experts.out[e]) * routing.weight[token, slot, None])
    return y


def expert_sorted_loop(x, routing, experts, gate_input=None):
    """The per-expert loop as a competent PyTorch user writes a top-k MoE: the T k routing slots sorted by expert
    once (one argsort), the tokens (and gate inputs) gathered once in that order, each expert's three products on
    its contiguous group, and the weighted outputs added back with one in-place index_add_. The same function as
    `expert_ffn_reference` (the naive loop that the kernel's tests hold it to, which searches every expert's tokens
    and copies y for each expert); the reference of faster_than_reference's expert cases."""
    n, k = experts.up.shape[0], routing.index.shape[1]
    expert = routing.index.reshape(-1)
    order = expert.argsort(stable=True)
    token = order.div(k, rounding_mode="floor")
    xs = x[token]
    gs = xs if gate_input is None else gate_input[token, expert[order]]
    counts = torch.bincount(expert, minlength=n).tolist()
    outs = [(F.silu(g @ experts.gate[e]) * (u @ experts.up[e])) @ experts.out[e]
            for e, (g, u) in enumerate(zip(gs.split(counts), xs.split(counts)))]
    return torch.zeros_like(x).index_add_(0, token, torch.cat(outs) * routing.weight.reshape(-1)[order, None])


def expert_ffn_flops(T: int, k: int, d: int, h: int, d_gate: int) -> int:
    """Floating-point operations (a multiply-add counts two) of one forward and backward of a top-k mixture of
    SwiGLU experts on T tokens: the 9 GEMMs of each expert group, whose rows add up to the T k routing slots.

    Forward, per slot: A = g W_gate (d_gate -> h), U = x W_up (d -> h), O = H W_out (h -> d), so
    2 h (d_gate + 2 d). Backward: each product P W gives the weight's gradient P^T dC and the input's dC W^T, twice
    the forward (the gate input's gradient is counted when it is x itself too: it is added into dX). The SwiGLU,
    the gathers and the weighted sums are O(T k h) and not counted, so this is the work a GEMM ceiling bounds."""
    forward = 2 * T * k * h * (d_gate + 2 * d)
    return 3 * forward


def gemm_shapes(T: int, k: int, n: int, d: int, h: int, squares: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """The (M, K, N) of [M, K] x [K, N] products that bound the expert layer: its own GEMMs at the per-expert size
    (m = T k / n rows; forward x W [m, d] x [d, h] and H W_out [m, h] x [h, d]; backward the weights' X^T dC
    [d, m] x [m, h] and H^T dO [h, m] x [m, d], the inputs' dC W^T of the forward's shapes), all T k rows through one
    up-projection, and large square products (the machine's practical peak), without repeats."""
    m = T * k // n
    shapes = [(m, d, h), (m, h, d), (d, m, h), (h, m, d), (T * k, d, h), *((s, s, s) for s in squares)]
    return list(dict.fromkeys(shapes))


def own_gemm_seconds(T: int, k: int, n: int, d: int, h: int, rate: dict[tuple[int, int, int], float]) -> float:
    """Seconds the expert layer's own GEMMs take, forward and backward, at the FLOP rates `rate` of their shapes
    ({(M, K, N): FLOP/s}): per expert (m = T k / n rows) the forward's x W_gate and x W_up [m, d] x [d, h] and
    H W_out [m, h] x [h, d]; the backward's dH = dO W_out^T [m, d] x [d, h], the inputs' dA W_gate^T and
    dU W_up^T [m, h] x [h, d], the gate and up weights' X^T dC [d, m] x [m, h] and the output weight's H^T dO
    [h, m] x [m, d]. A kernel that runs these products one expert at a time through the library's GEMM (as
    expert_ffn does) cannot take less, whatever its bookkeeping."""
    m = T * k // n
    nine = [(m, d, h)] * 3 + [(m, h, d)] * 3 + [(d, m, h)] * 2 + [(h, m, d)]  # shapes may coincide (h = m)
    return n * sum(2 * M * K * N / rate[(M, K, N)] for M, K, N in nine)


def gemm_name(shape: tuple[int, int, int]) -> str:
    M, K, N = shape
    return f"gemm [{M}, {K}] x [{K}, {N}]"


def gemm_contenders(shapes, gen) -> tuple[dict, dict[str, float]]:
    """One contender per shape, `torch.mm(a, b, out=c)` into a preallocated output, and each one's FLOPs per call."""
    fns, flops = {}, {}
    for M, K, N in shapes:
        a, b, c = torch.randn(M, K, generator=gen), torch.randn(K, N, generator=gen), torch.empty(M, N)
        name = gemm_name((M, K, N))
        fns[name] = lambda a=a, b=b, c=c: torch.mm(a, b, out=c)
        flops[name] = 2 * M * K * N
    return fns, flops


def expert_inputs(cfg, d: int, gen) -> tuple:
    """Tokens [T, d], a top-k routing over `moe_experts` SwiGLU experts of width d (hidden 2d), the experts'
    weights and an output gradient, drawn from `gen`."""
    n, k, T, h = cfg.moe_experts, cfg.moe_k, cfg.moe_tokens, 2 * d
    x = torch.randn(T, d, generator=gen, requires_grad=True)
    experts = Experts(*(torch.randn(n, a, b, generator=gen).div_(a**0.5).requires_grad_()
                        for a, b in ((d, h), (d, h), (h, d))))
    top, index = torch.randn(T, n, generator=gen).topk(k, dim=-1)
    routing = Routing(index, top.softmax(-1).requires_grad_())
    return x, routing, experts, torch.randn(T, d, generator=gen)


def expert_step(fn, x, routing, experts, dy) -> None:
    """The expert layer `fn` forward and backward, every gradient set to None first."""
    for t in (x, routing.weight, *experts):
        t.grad = None
    fn(x, routing, experts).backward(dy)


def bench_expert_ffn(cfg, gen):
    """Thousand tokens per second, forward and backward, of a top-k SwiGLU MoE (hidden width 2d), beside the GEMM
    ceiling: per round, the best FLOP rate of `torch.mm` over `gemm_shapes` (each timed as a contender in the same
    rounds). Each row gets the step's `flops`, the ceiling's `gemm_ceiling_gflops` (best round), the shape that
    reached it (`gemm_shape`), every shape's best rate (`gemm_rates`), and its fraction and attainable speedup
    (`row`, with the ceiling as the time the layer's FLOPs take at each round's best rate)."""
    rows = []
    n, k, T = cfg.moe_experts, cfg.moe_k, cfg.moe_tokens
    for d in cfg.moe_dims:
        h = 2 * d
        x, routing, experts, dy = expert_inputs(cfg, d, gen)
        flops = expert_ffn_flops(T, k, d, h, d)
        shapes = gemm_shapes(T, k, n, d, h, cfg.gemm_squares)
        gemms, gemm_flops = gemm_contenders(shapes, gen)

        fns = {"compiled": expert_ffn, "reference": expert_ffn_reference, "stock": expert_loop}
        times = interleaved(dict({name: (lambda fn=fn: expert_step(fn, x, routing, experts, dy))
                                  for name, fn in fns.items()}, **gemms),
                            cfg.repeats, cfg.min_unit)
        rates = {name: [gemm_flops[name] / t for t in times.pop(name)] for name in gemms}  # FLOP/s per round
        best_per_round = [max(r) for r in zip(*rates.values())]
        rows.append(row("expert_ffn", f"d={d}", f"fwd+bwd, T={T}, d={d}, h={h}, {n} experts, top-{k}",
                        "k tokens/s", T / 1e3, times, "per-expert loop, in-place index_add_",
                        ceiling=[flops / rate for rate in best_per_round]))
        best = max(rates, key=lambda name: max(rates[name]))
        own = own_gemm_seconds(T, k, n, d, h, {shape: max(rates[gemm_name(shape)]) for shape in shapes})
        rows[-1].update(flops=flops, gemm_shape=best.removeprefix("gemm "), own_gemm_ms=own * 1e3,
                        own_gemm_x_loop=min(times["stock"]) / own,
                        gemm_ceiling_gflops=max(best_per_round) / 1e9,
                        gemm_rates={name.removeprefix("gemm "): max(v) / 1e9 for name, v in rates.items()},
                        **{f"{name}_gflops": flops / 1e9 / min(times[name]) for name in ("compiled", "stock")})
    return rows


def gemm_ceiling(rows: list[dict]) -> float | None:
    """The machine's GEMM ceiling in this run: the fastest FLOP rate of the expert rows' torch.mm shapes
    (GFLOP/s), or None without expert rows."""
    return max((r["gemm_ceiling_gflops"] for r in rows if "gemm_ceiling_gflops" in r), default=None)


def reference_contenders(cfg, gen) -> dict[str, dict]:
    """The cases of the appendix's faster_than_reference at the sizes of `cfg`, each with tensors of its own drawn
    from `gen`: {"<kernel> <label>": {"compiled": fn, "reference": fn}}, the labels those of `run`'s rows: per
    memory size the embedding bag's forward and its forward and backward with each gradient layout, per width the
    expert layer's forward and backward."""
    cases = {}
    pair = {"compiled": embedding_bag, "reference": embedding_bag_reference}
    for N in cfg.bag_rows:
        bag = bag_inputs(cfg, N, gen)
        cases[f"embedding_bag fwd, {bag_size(N)}"] = {side: partial(bag_forward, fn, *bag[:3])
                                                      for side, fn in pair.items()}
        for grad in ("dense", "sparse"):
            cases[f"embedding_bag fwd+bwd {grad}, {bag_size(N)}"] = {
                side: partial(bag_step, fn, *bag, sparse=grad == "sparse") for side, fn in pair.items()}
    for d in cfg.moe_dims:
        layer = expert_inputs(cfg, d, gen)
        cases[f"expert_ffn d={d}"] = {side: partial(expert_step, fn, *layer)
                                      for side, fn in (("compiled", expert_ffn), ("reference", expert_sorted_loop))}
    return cases


def copy_contender(cfg, gen):
    """`y.copy_(x)` of a float32 tensor of the quantiser's size (`fp_shape`), drawn from `gen`: the one-thread
    pass's noise gauge, a contender whose only work is memory traffic."""
    x = torch.randn(fp_shape(cfg), generator=gen)
    y = torch.empty_like(x)
    return lambda: y.copy_(x)


def one_thread_x_reference(cases: dict[str, dict], copy, repeats: int, min_unit: float = MIN_UNIT_SECONDS
                           ) -> tuple[dict[str, list[float]], list[float]]:
    """Per case of `reference_contenders`, the reference's time over the compiled kernel's in each of `repeats`
    rounds, timed on one thread (the caller's thread count restored after), every case's two contenders in the
    same interleaved rounds (each case's pair side by side), so that a change in the machine's state hits every
    case alike; and the times of `copy` (`copy_contender`) in the same rounds, the pass's own noise gauge."""
    fns = {f"{case}\0{side}": fn for case, pair in cases.items() for side, fn in pair.items()}
    with one_thread():
        times = interleaved(dict(fns, copy=copy), repeats, min_unit)
    return {case: [r / c for r, c in zip(times[f"{case}\0reference"], times[f"{case}\0compiled"])]
            for case in cases}, times["copy"]


def run(cfg, seed: int = 0) -> tuple[list[dict], float]:
    """All benchmark rows and the copy bandwidth ceiling (GB/s) at the quantiser's size; each row carries the share
    of the machine's CPU time that other processes used during the run (`foreign_cpu_share`, `ForeignLoad`), and
    each row of an embedding_bag or expert_ffn case its speedups over the reference on one thread
    (`per_round_one_thread`, `one_thread_x_reference`, after the other benchmarks and with tensors of its own) and
    the times of that pass's copy (`one_thread_copy_times`); every row says whether the allocator's policy was
    fixed before anything was timed (`allocator_fixed`, `fix_allocator`)."""
    fixed = fix_allocator()
    gen = torch.Generator().manual_seed(seed)
    with ForeignLoad() as load:
        fp_rows, ceiling = bench_fp_quantize(cfg, gen)
        rows = fp_rows + bench_embedding_bag(cfg, gen) + bench_expert_ffn(cfg, gen)
        cases = reference_contenders(cfg, gen)
        one, copy = one_thread_x_reference(cases, copy_contender(cfg, gen), cfg.reference_repeats, cfg.min_unit)
    out = []
    for r in rows:
        case = f"{r['kernel']} {r['label']}"
        own = {"per_round_one_thread": one[case], "one_thread_copy_times": copy} if case in one else {}
        out.append(dict(r, foreign_cpu_share=load.share, allocator_fixed=fixed, **own))
    return out, ceiling


def table(rows: list[dict], ceiling: float) -> str:
    """The rows as a fixed-width text table, with the copy and GEMM ceilings below it."""
    width = max(len(r["case"]) for r in rows)
    head = (f"{'kernel':14s} {'case':{width}s} {'unit':12s} {'compiled':>9s} {'reference':>9s} {'stock':>9s} "
            f"{'x ref':>6s} {'x stock':>7s} {'of ceil':>7s} {'attain':>6s}  stock path")
    lines = [head, "-" * len(head)]
    for r in rows:
        of = f"{r['of_ceiling']:7.0%}" if r["of_ceiling"] is not None else f"{'':7s}"
        attain = f"{r['attainable_x_stock']:6.2f}" if r["attainable_x_stock"] is not None else f"{'':6s}"
        lines.append(f"{r['kernel']:14s} {r['case']:{width}s} {r['unit']:12s} {r['compiled']:9.2f} "
                     f"{r['reference']:9.2f} {r['stock']:9.2f} {r['x_reference']:6.1f} {r['x_stock']:7.2f} {of} "
                     f"{attain}  {r['stock_path']}")
    lines.append(f"memory bandwidth ceiling (y.copy_(x), preallocated, same size, same rounds): {ceiling:.1f} GB/s")
    for r in rows:
        if "gemm_ceiling_gflops" in r:
            shapes = ", ".join(f"{shape} {rate:.0f}" for shape, rate in r["gemm_rates"].items())
            lines.append(f"GEMM ceiling for expert_ffn {r['label']}: {r['gemm_ceiling_gflops']:.0f} GFLOP/s, the best "
                         f"of torch.mm(a, b, out=c) in the same rounds over the layer's shapes and square ones "
                         f"(GFLOP/s: {shapes}); compiled {r['compiled_gflops']:.0f}, stock {r['stock_gflops']:.0f} "
                         f"GFLOP/s of {r['flops'] / 1e9:.3g} GFLOP per step")
    lines += [expert_target_line(t) for t in expert_targets(rows)]
    for r in rows:
        if "floor_x_best_stock" in r:
            lines.append(f"embedding_bag fwd+bwd {r['label'].split(', ')[-1]}: compiled {r['compiled_ms']:.3f} ms, the "
                         f"faster stock layout {r['stock_ms']:.3f} ms, autograd's floor (outputs and gradients "
                         f"allocated, nothing computed) {r['floor_ms']:.3f} ms: no kernel called this way can beat "
                         f"stock by more than {r['floor_x_best_stock']:.2f}x (best layouts, best rounds)"
                         + (phases_text(r) if "kernel_x_best_stock" in r else ""))
    lines.append("on one thread (the appendix's faster_than_reference pass), each kernel against its reference, "
                 "median over the rounds: " + ", ".join(f"{c} {x:.2f}x" for c, x in one_thread_medians(rows).items()))
    lines.append(f"other processes took {rows[0]['foreign_cpu_share']:.1%} of the machine's CPU time during the run")
    lines.append("of ceil: the compiled kernel's fraction of the copy (fp_quantize) or GEMM (expert_ffn) ceiling; "
                 "attain: the ceiling over stock, the largest speedup over stock any kernel doing this work could "
                 f"reach; {torch.get_num_threads()} threads; kernels: {backend()}; minimum of "
                 f"{len(rows[0]['per_round'])} interleaved rounds")
    return "\n".join(lines)


def one_thread_medians(rows: list[dict]) -> dict[str, float]:
    """Per case of the one-thread pass, the median over its rounds of the kernel's speedup over its reference."""
    return {f"{r['kernel']} {r['label']}": statistics.median(r["per_round_one_thread"])
            for r in rows if "per_round_one_thread" in r}


def phases_text(r: dict) -> str:
    return (f"; of the compiled {r['phases_layout']} layout's time the kernel's forward takes "
            f"{r['kernel_forward_ms']:.3f} ms, its backward (sort by row and sums) {r['kernel_backward_ms']:.3f} ms, "
            f"the rest (autograd, tensors) {r['around_kernel_ms']:.3f} ms: the kernel's own two calls cap it at "
            f"{r['kernel_x_best_stock']:.2f}x stock")


def expert_targets(rows: list[dict]) -> list[dict]:
    """Per expert width, the target of `icml25.kernels` restated against the GEMM ceiling (best rounds): whether
    MOE_X_LOOP times the loop is within the ceiling, the restated target min(MOE_X_LOOP, MOE_OF_CEILING x the
    ceiling over the loop), the speedup measured and its fraction of the target, whether it meets the target, the
    bound of the layer's own GEMMs at their shapes' rates and its fraction of the target, and the outcome
    (`target_outcome`); and round by round, as expert_ffn_beats_the_loop decides (`icml25.kernels.moe_x_target`),
    the rounds at or above that round's target and the median over rounds of the speedup's fraction of it."""
    targets = []
    for r in (r for r in rows if r["kernel"] == "expert_ffn"):
        target, per_round = kernels.restated_target(r), kernels.moe_x_target(r)
        met, within = r["x_stock"] >= target, target <= r["own_gemm_x_loop"]
        targets.append({"case": r["label"], "attainable_x_loop": r["attainable_x_stock"],
                        "loop_target_reachable": kernels.target_reachable(r), "target_x_loop": target,
                        "x_loop": r["x_stock"], "of_target": r["x_stock"] / target, "met": met,
                        "own_gemm_x_loop": r["own_gemm_x_loop"], "own_gemm_of_target": r["own_gemm_x_loop"] / target,
                        "within_own_gemms": within, "outcome": target_outcome(met, within),
                        "rounds_met": sum(v >= 1 for v in per_round), "rounds": len(per_round),
                        "median_of_target": statistics.median(per_round)})
    return targets


def target_outcome(met: bool, within_own_gemms: bool) -> str:
    """met; else unreachable where the layer's own GEMMs at their measured rates already take longer than the target
    allows (no kernel that runs them through torch.mm, as expert_ffn does, can meet it); else not met."""
    return "met" if met else "not met" if within_own_gemms else "unreachable through torch.mm"


def expert_target_line(t: dict) -> str:
    reach = ("within" if t["loop_target_reachable"] else "beyond") + " the GEMM ceiling"
    own = ("so the target is within reach of a kernel that runs them through torch.mm" if t["within_own_gemms"] else
           "so no kernel that runs them through torch.mm, as expert_ffn does, can reach the target")
    return (f"expert_ffn {t['case']} target: {kernels.MOE_X_LOOP:g}x the loop is {reach} (attainable "
            f"{t['attainable_x_loop']:.2f}x), so the target is {t['target_x_loop']:.2f}x the loop; measured "
            f"{t['x_loop']:.2f}x, {t['of_target']:.0%} of the target: {t['outcome']} (best rounds); round by round "
            f"at or above its target in {t['rounds_met']} of {t['rounds']} rounds, median {t['median_of_target']:.0%} "
            f"of it. The layer's own GEMMs at their shapes' measured rates bound it at "
            f"{t['own_gemm_x_loop']:.2f}x the loop, {t['own_gemm_of_target']:.0%} of the target, {own}")


JSON_KEYS = ("kernel", "case", "unit", "compiled", "reference", "stock", "x_reference", "x_stock", "of_ceiling",
             "attainable_x_stock")


def as_json(rows: list[dict], ceiling: float) -> str:
    """The run as one JSON object: {"ceiling_gbs": ..., "gemm_ceiling_gflops": ..., "foreign_cpu_share": ...,
    "gemm_rates": ..., "expert_ffn_targets": [...], "one_thread_x_reference": {...}, "rows": [{kernel, case, unit,
    compiled, reference, stock, x_reference, x_stock, of_ceiling, attainable_x_stock}, ...]}: the copy ceiling, the
    fastest of the expert rows' GEMM ceilings (`gemm_ceiling`), the share of the machine's CPU time other processes
    took during the run, every GEMM shape's best rate per width, the expert layer's restated targets
    (`expert_targets`), each case's median speedup over its reference on one thread (`one_thread_medians`), and each
    row with its ceiling's fraction and attainable speedup (null where a row has no ceiling)."""
    return json.dumps({"ceiling_gbs": ceiling, "gemm_ceiling_gflops": gemm_ceiling(rows),
                       "foreign_cpu_share": rows[0]["foreign_cpu_share"],
                       "gemm_rates": {r["label"]: r["gemm_rates"] for r in rows if "gemm_rates" in r},
                       "expert_ffn_targets": expert_targets(rows), "one_thread_x_reference": one_thread_medians(rows),
                       "rows": [{k: r[k] for k in JSON_KEYS} for r in rows]})


def main(scale: str = "full", as_json_output: bool = False) -> int:
    """Benchmark at `scale` (the full-size shapes by default) and print one table (or one JSON object)."""
    cfg = config(scale)
    rows, ceiling = run(cfg)
    print(as_json(rows, ceiling) if as_json_output else table(rows, ceiling))
    return 0
