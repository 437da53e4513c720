"""`icml25 bench`: each compiled kernel against its reference and the best stock PyTorch path, in one run.

Every contender allocates its own output (like with like). The contenders of one case are timed interleaved,
round by round (each round runs every contender once, in a rotating order), so a burst of load on a shared
machine hits all of them alike; throughput is per second of the minimum wall time over `repeats` rounds, and each
round gives one paired speedup of the compiled kernel over the reference (the unit the appendix claim is decided
on). For fp_quantize the table also gives the fraction of the machine's memory bandwidth, with `y.copy_(x)` into a
preallocated tensor of the same size as the ceiling, timed in the same rounds.
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F

from ..core.config import COUNT, make_config
from .build import backend
from .embedding_bag import embedding_bag, embedding_bag_reference
from .expert_ffn import Experts, Routing, expert_ffn, expert_ffn_reference
from .fp_quant import FPFormat, fp_quantize, fp_quantize_reference

config = make_config({
    "smoke": {"fp_shape": (256, 256), "fp_block": 32, "bag_rows": (2**10,), "bag_batch": 64, "bag_k": 8,
              "bag_dim": 32, "moe_tokens": 128, "moe_dims": (32,), "moe_experts": 8, "moe_k": 2, "repeats": 3},
    "ci": {"fp_shape": (1024, 1024), "fp_block": 32, "bag_rows": (2**14, 2**16), "bag_batch": 512, "bag_k": 32,
           "bag_dim": 64, "moe_tokens": 1024, "moe_dims": (64, 128), "moe_experts": 8, "moe_k": 2, "repeats": 10},
    "full": {"fp_shape": (4096, 4096), "fp_block": 32, "bag_rows": (2**16, 2**20), "bag_batch": 2048, "bag_k": 64,
             "bag_dim": 64, "moe_tokens": 4096, "moe_dims": (64, 256), "moe_experts": 8, "moe_k": 2, "repeats": 10},
},
    fp_shape=COUNT, fp_block=COUNT, bag_rows=COUNT, bag_batch=COUNT, bag_k=COUNT, bag_dim=COUNT, moe_tokens=COUNT,
    moe_dims=COUNT, moe_experts=COUNT, moe_k=COUNT, repeats=COUNT)


def interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Wall times of each contender over `repeats` rounds, after two warm-up rounds (the allocator settles); each
    round runs every contender once, the order rotating from round to round."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats + 2):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            fns[name]()
            if r >= 2:
                times[name].append(time.perf_counter() - start)
    return times


def row(kernel: str, label: str, case: str, unit: str, work: float, times: dict[str, list[float]],
        stock_path: str, ceiling: float | None = None):
    """One line of the table: throughputs (`work` per second of the minimum time) and the compiled kernel's
    speedups; `per_round` holds the paired reference / compiled speedup of every round; `label` is the short name
    of the case for plots."""
    best = {name: min(t) for name, t in times.items()}
    out = {"kernel": kernel, "label": label, "case": case, "unit": unit, "stock_path": stock_path}
    for name in ("compiled", "reference", "stock"):
        out[name] = work / best[name]
    out["x_reference"] = best["reference"] / best["compiled"]
    out["x_stock"] = best["stock"] / best["compiled"]
    out["of_ceiling"] = None if ceiling is None else out["compiled"] / ceiling
    out["per_round"] = [r / c for r, c in zip(times["reference"], times["compiled"])]
    return out


def bench_fp_quantize(cfg, gen):
    """GB/s (bytes read + written) of E4M3 fake quantisation, unscaled and with blocks of `fp_block`."""
    x = torch.randn(cfg.fp_shape, generator=gen)
    n_bytes = 2 * x.numel() * x.element_size()
    y = torch.empty_like(x)
    fmt = FPFormat(4, 3, "fn")
    B = cfg.fp_block

    def stock_blocks():  # amax, scale, cast, dequantise: the usual eager-mode recipe
        blocks = x.view(-1, B)
        scale = fmt.fpmax / blocks.abs().amax(-1, keepdim=True)
        return ((blocks * scale).to(torch.float8_e4m3fn).float() / scale).view_as(x)

    cases = {
        "no scaling": ({"compiled": lambda: fp_quantize(x, 4, 3), "reference": lambda: fp_quantize_reference(x, fmt),
                              "stock": lambda: x.to(torch.float8_e4m3fn).float()}, "x.to(float8_e4m3fn).float()"),
        f"blocks of {B}": ({"compiled": lambda: fp_quantize(x, 4, 3, B),
                                  "reference": lambda: fp_quantize_reference(x, fmt, B),
                                  "stock": stock_blocks}, "amax, scale, float8 cast"),
    }
    rows, ceilings = [], []
    for case, (fns, stock_path) in cases.items():
        times = interleaved(dict(fns, copy=lambda: y.copy_(x)), cfg.repeats)
        copy = times.pop("copy")
        ceilings.append(n_bytes / min(copy) / 1e9)
        rows.append(row("fp_quantize", case, f"E4M3 fn, {case}, {x.shape[0]}x{x.shape[1]}", "GB/s", n_bytes / 1e9,
                        times, stock_path, ceilings[-1]))
        rows[-1]["copy_spread"] = max(copy) / min(copy)  # the timing noise of this run: slowest / fastest copy
    return rows, max(ceilings)


def bench_embedding_bag(cfg, gen):
    """Million bag entries per second, forward and backward, for memories of `bag_rows` rows."""
    rows = []
    for N in cfg.bag_rows:
        values = torch.randn(N, cfg.bag_dim, generator=gen, requires_grad=True)
        indices = torch.randint(0, N, (cfg.bag_batch, cfg.bag_k), generator=gen)
        weights = torch.rand(cfg.bag_batch, cfg.bag_k, generator=gen, requires_grad=True)
        dy = torch.randn(cfg.bag_batch, cfg.bag_dim, generator=gen)

        def step(fn):
            values.grad = weights.grad = None
            fn(values, indices, weights).backward(dy)

        fns = {"compiled": embedding_bag, "reference": embedding_bag_reference,
               "stock": lambda v, i, w: F.embedding_bag(i, v, mode="sum", per_sample_weights=w)}
        times = interleaved({name: (lambda fn=fn: step(fn)) for name, fn in fns.items()}, cfg.repeats)
        rows.append(row("embedding_bag", f"N=2^{N.bit_length() - 1}", f"fwd+bwd, N=2^{N.bit_length() - 1}, "
                        f"B={cfg.bag_batch}, K={cfg.bag_k}, D={cfg.bag_dim}", "M entries/s", indices.numel() / 1e6,
                        times, "F.embedding_bag"))
    return rows


def dense_expert_ffn(x, routing, experts, gate_input=None):
    """Every expert on every token, masked by a dense [T, n] weight matrix: the stock batched-einsum MoE."""
    n = experts.up.shape[0]
    dense = torch.zeros(x.shape[0], n, dtype=x.dtype).scatter_add(1, routing.index, routing.weight)
    g = torch.einsum("td,edh->teh", x, experts.gate) if gate_input is None else \
        torch.einsum("ted,edh->teh", gate_input, experts.gate)
    h = F.silu(g) * torch.einsum("td,edh->teh", x, experts.up)
    return torch.einsum("te,teh,ehd->td", dense, h, experts.out)


def bench_expert_ffn(cfg, gen):
    """Thousand tokens per second, forward and backward, of a top-k SwiGLU MoE (hidden width 2d)."""
    rows = []
    n, k, T = cfg.moe_experts, cfg.moe_k, cfg.moe_tokens
    for d in cfg.moe_dims:
        x = torch.randn(T, d, generator=gen, requires_grad=True)
        experts = Experts(*(torch.randn(n, a, b, generator=gen).div_(a**0.5).requires_grad_()
                            for a, b in ((d, 2 * d), (d, 2 * d), (2 * d, d))))
        top, index = torch.randn(T, n, generator=gen).topk(k, dim=-1)
        routing = Routing(index, top.softmax(-1).requires_grad_())
        dy = torch.randn(T, d, generator=gen)

        def step(fn):
            for t in (x, routing.weight, *experts):
                t.grad = None
            fn(x, routing, experts).backward(dy)

        fns = {"compiled": expert_ffn, "reference": expert_ffn_reference, "stock": dense_expert_ffn}
        times = interleaved({name: (lambda fn=fn: step(fn)) for name, fn in fns.items()}, cfg.repeats)
        rows.append(row("expert_ffn", f"d={d}", f"fwd+bwd, T={T}, d={d}, h={2 * d}, {n} experts, top-{k}",
                        "k tokens/s", T / 1e3, times, "dense masked einsum"))
    return rows


def run(cfg, seed: int = 0) -> tuple[list[dict], float]:
    """All benchmark rows and the copy bandwidth ceiling (GB/s)."""
    gen = torch.Generator().manual_seed(seed)
    fp_rows, ceiling = bench_fp_quantize(cfg, gen)
    return fp_rows + bench_embedding_bag(cfg, gen) + bench_expert_ffn(cfg, gen), ceiling


def table(rows: list[dict], ceiling: float) -> str:
    """The rows as a fixed-width text table."""
    head = (f"{'kernel':14s} {'case':52s} {'unit':12s} {'compiled':>9s} {'reference':>9s} {'stock':>9s} "
            f"{'x ref':>6s} {'x stock':>7s} {'of BW':>6s}  stock path")
    lines = [head, "-" * len(head)]
    for r in rows:
        bw = f"{r['of_ceiling']:6.0%}" if r["of_ceiling"] is not None else f"{'':6s}"
        lines.append(f"{r['kernel']:14s} {r['case']:52s} {r['unit']:12s} {r['compiled']:9.2f} {r['reference']:9.2f} "
                     f"{r['stock']:9.2f} {r['x_reference']:6.1f} {r['x_stock']:7.2f} {bw}  {r['stock_path']}")
    lines.append(f"memory bandwidth ceiling (y.copy_(x), preallocated, same rounds): {ceiling:.1f} GB/s; "
                 f"{torch.get_num_threads()} threads; kernels: {backend()}; minimum of {len(rows[0]['per_round'])} "
                 "interleaved rounds")
    return "\n".join(lines)


JSON_KEYS = ("kernel", "case", "unit", "compiled", "reference", "stock", "x_reference", "x_stock", "of_ceiling")


def as_json(rows: list[dict], ceiling: float) -> str:
    """The run as one JSON object: {"ceiling_gbs": ..., "rows": [{kernel, case, unit, compiled, reference, stock,
    x_reference, x_stock, of_ceiling}, ...]}."""
    return json.dumps({"ceiling_gbs": ceiling, "rows": [{k: r[k] for k in JSON_KEYS} for r in rows]})


def main(scale: str = "full", as_json_output: bool = False) -> int:
    """Benchmark at `scale` (the full-size shapes by default) and print one table (or one JSON object)."""
    cfg = config(scale)
    rows, ceiling = run(cfg)
    print(as_json(rows, ceiling) if as_json_output else table(rows, ceiling))
    return 0
