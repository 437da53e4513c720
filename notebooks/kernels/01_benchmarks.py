# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Benchmarks of the compiled kernels
#
# Three loops of the chapters are worth a compiled CPU kernel (C++ with OpenMP, in `kernels/`, built once by
# `torch.utils.cpp_extension` into `_build/kernels/` before the notebooks run). Each has a plain PyTorch
# reference in `icml25.ops` that states the math and that the tests hold the kernel to:
#
# | kernel | used by | what it computes | kernel design |
# |---|---|---|---|
# | `fp_quantize` | FP-quantisation scaling laws | per block of $B$ values, $s = \mathrm{FP}_{\max}/\max\lvert x\rvert$, $\hat x = Q_{E,M}(s x)/s$ | one pass over float32 bits; exact round-to-nearest-even with subnormals |
# | `embedding_bag` | memory layers | $y_b = \sum_k w_{bk} V_{i_{bk}}$ and its gradients | backward sorts the lookups by row, so every row's gradient has one owner: no atomics |
# | `expert_ffn` | Autonomy-of-Experts | $y_t = \sum_j p_{tj} E_{e_{tj}}(x_t)$ for SwiGLU experts | counting sort by expert, one GEMM per expert group, SwiGLU in one vectorised pass, gather back per token |
#
# Like with like: the quantiser and its contenders write into a preallocated output, as the copy ceiling
# `y.copy_(x)` does, on a tensor several times the machine's last-level cache (so the ceiling is the memory
# bandwidth, measured at that size in the same rounds); under autograd (the embedding bag and the expert layer,
# forward and backward) every contender allocates alike. The expert layer's ceiling is compute rather than memory:
# the best FLOP rate of plain `torch.mm(a, b, out=c)` over the layer's own nine GEMM shapes at the per-expert size,
# all $Tk$ routed tokens through one up-projection, and large square products (the machine's practical GEMM peak),
# each timed in the same rounds. "Reference" is
# the package's pure-PyTorch version; "stock" is the best plain PyTorch path for the same job (named in the table):
# for the embedding bag both of stock's gradient layouts, dense and `sparse=True`, and for the expert layer the
# per-expert loop users write. Contenders are timed in interleaved rounds and the table shows the fastest round.
# The numbers are measured on the machine that built this book, on its CPU threads, at the scale of this run
# (`icml25 bench` runs the full-size shapes). On a shared machine, other work running beside the benchmark moves
# single rounds by tens of percent, which is why the claims below are decided round by round, by a statistic that
# a few slow rounds do not move.

# %% tags=["parameters"]
import os

scale = "ci"
seed = int(os.environ.get("ICML25_BENCH_SEED", 0))  # the bench seed (the builder passes only the scale)
repeats = None  # interleaved timing rounds (the table shows the fastest); None: the scale's value

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
from IPython.display import Markdown, display

from icml25 import kernels, ops
from icml25.core import check, plot
from icml25.ops import bench, timing

plot.use_style()
cfg = bench.config(scale, repeats=repeats)
print(f"kernels: {ops.backend()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
cfg

# %% [markdown]
# ## The table
#
# Throughput is work per second: GB/s (bytes read and written) for the quantiser, million bag entries per second
# for the embedding bag (forward alone; forward and backward with each gradient layout), thousand tokens per second
# (forward and backward) for the expert layer. "x ref" and "x stock" are the compiled kernel's speedups. "of ceil"
# is the compiled kernel's fraction of its ceiling: for the quantiser the copy ceiling, `y.copy_(x)` of the same
# tensor in the same rounds; for the expert layer the GEMM ceiling, its FLOP rate against the best rate of
# `torch.mm` over the GEMM shapes listed under the table (the FLOPs are those of the layer's nine GEMMs per expert
# group, `bench.expert_ffn_flops`). "attain" is the ceiling over stock: the largest speedup over stock that any
# kernel doing the same work could reach on this machine. The lines under the table give each ceiling, every GEMM
# shape's rate, and the expert layer's target restated against its ceiling.

# %%
rows, ceiling = bench.run(cfg, seed)
print(bench.table(rows, ceiling))

# %% [markdown]
# ## Speedups
#
# Bars above 1 mean the compiled kernel is faster. The quantiser is judged against the memory ceiling instead: a
# plain copy reads and writes every byte once, as the quantiser must, so it is the practical bound of such a pass
# (not a hard one: a kernel can edge past `copy_`; the table's "of ceil" column shows where each case sits).

# %%
labels = ["\n".join([r["kernel"], *r["label"].split(", ")]) for r in rows]  # one line per part, so they fit
x = np.arange(len(rows))
fig, ax = plot.subplots(figsize=(12, 4.4))
ax.bar(x - 0.2, [r["x_reference"] for r in rows], 0.4, label="over the pure-PyTorch reference")
ax.bar(x + 0.2, [r["x_stock"] for r in rows], 0.4, label="over the best stock PyTorch path")
ax.axhline(1, color="black", lw=1, ls="--", label="equal speed")
ax.set(title=f"Compiled kernels: speedup at scale {scale!r}", ylabel="speedup (× wall time, log scale)",
       yscale="log", xticks=x)
ax.set_xticklabels(labels, fontsize=7)
ax.legend();

# %% [markdown]
# The bars are the fastest rounds, on the builder's threads. The claim against the reference is decided on a pass of
# its own on one thread (see the claim checks below), so here is every round of that pass for the cases it covers:
# the claim asks whether the mean of each case's log speedup, with its build-to-build spread, lies above the dotted
# line.

# %%
against_reference = [r for r in rows if r["kernel"] != "fp_quantize"]
fig, ax = plot.subplots(figsize=(12, 4.4))
for i, r in enumerate(against_reference):
    per_round = r["per_round_one_thread"]
    ax.scatter(np.full(len(per_round), i) + np.linspace(-0.25, 0.25, len(per_round)), per_round, s=12,
               color=plot.PALETTE[0])
ax.axhline(kernels.MARGIN, color="black", lw=1, ls=":", label=f"the claim's margin: {kernels.MARGIN:g}x")
ax.axhline(1, color="black", lw=1, ls="--", label="equal speed")
ax.set(title="Speedup over the reference on one thread in each timing round (rounds left to right within a case)",
       ylabel="speedup (log scale)", yscale="log", xticks=np.arange(len(against_reference)))
ax.set_xticklabels(["\n".join([r["kernel"], *r["label"].split(", ")]) for r in against_reference], fontsize=7)
ax.legend();

# %%
fp = [r for r in rows if r["kernel"] == "fp_quantize"]
fig, ax = plot.subplots()
xs = np.arange(len(fp))
for i, (name, label) in enumerate([("compiled", "compiled kernel"), ("reference", "reference"), ("stock", "stock")]):
    ax.bar(xs + (i - 1) * 0.27, [r[name] for r in fp], 0.27, label=label)
ax.axhline(ceiling, color="black", ls="--", lw=1, label=f"copy ceiling ({ceiling:.0f} GB/s)")
ax.set(title="fp_quantize against the memory ceiling", ylabel="throughput (GB/s read + written)", xticks=xs)
ax.set_xticklabels([f"E4M3, {r['label']}" for r in fp])
ax.legend();

# %% [markdown]
# The expert layer against its compute ceiling: the compiled kernel and the per-expert loop do the same GEMMs, so
# neither can beat the best FLOP rate of plain `torch.mm` on this machine. The ceiling is the best over the layer's
# own GEMM shapes and large square ones (the dots: each shape's rate). The target, 1.5x the loop, is restated
# against it: where 1.5x the loop would lie beyond 90% of the ceiling, the target is 90% of the ceiling (the
# dotted line over each width).

# %%
moe = [r for r in rows if r["kernel"] == "expert_ffn"]
fig, ax = plot.subplots()
xs = np.arange(len(moe))
bars = [("stock_gflops", "per-expert loop (stock)"), ("compiled_gflops", "compiled kernel"),
        ("gemm_ceiling_gflops", "GEMM ceiling: the best torch.mm")]
for i, (key, label) in enumerate(bars):
    ax.bar(xs + (i - 1) * 0.27, [r[key] for r in moe], 0.27, label=label)
for i, r in enumerate(moe):
    ax.scatter(np.full(len(r["gemm_rates"]), i + 0.27), list(r["gemm_rates"].values()), s=10, color="black",
               zorder=3, label="torch.mm at one shape" if i == 0 else None)
ax.hlines([kernels.restated_target(r) * r["stock_gflops"] for r in moe], xs - 0.42, xs + 0.42, colors="black",
          linestyles=":", label=f"target: min({kernels.MOE_X_LOOP:g}x the loop, "
                                f"{kernels.MOE_OF_CEILING:.0%} of the ceiling)")
ax.set(title="expert_ffn forward and backward against the GEMM ceiling", ylabel="GFLOP/s (the layer's GEMMs)",
       xlabel="expert width (and the GEMM shape that set the ceiling)", xticks=xs)
ax.set_xticklabels([f"{r['label']}, {r['gemm_shape']}" for r in moe], fontsize=8)
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8);

# %% [markdown]
# The target was stated at d=256, a width that only the full-size shapes time (`icml25 bench`, not this
# run). On the machine that built this book it was settled by two full runs, recorded in `kernels.D256_BENCH_RUNS`:

# %%
display(Markdown("\n".join(
    f"- run {i}: GEMM ceiling {run['gemm_ceiling_gflops']:.0f} GFLOP/s, {run['attainable_x_loop']:.2f}x the loop, so "
    f"{kernels.MOE_X_LOOP:g}x the loop is {'within' if run['attainable_x_loop'] >= kernels.MOE_X_LOOP else 'beyond'} "
    f"it and the target is {run['target_x_loop']:.2f}x; the kernel {run['x_loop']:.2f}x the loop in its fastest "
    f"rounds, {run['x_loop'] / run['target_x_loop']:.0%} of the target: **{run['outcome']}**"
    + (f"; at or above its target in {run['rounds_met']} of {run['rounds']} rounds, median "
       f"{run['median_of_target']:.0%} of it" if "rounds" in run else "")
    + f". The layer's own GEMMs at their shapes' rates bound a torch.mm kernel at {run['own_gemm_x_loop']:.2f}x "
    f"the loop ({run['own_gemm_x_loop'] / run['target_x_loop']:.0%} of the target); other processes took "
    f"{run['foreign_cpu_share']:.1%} of the CPU" for i, run in enumerate(kernels.D256_BENCH_RUNS, 1))))

# %% [markdown]
# ## What we see
#
# - **fp_quantize.** The kernel rounds with a few integer operations on the float32 bits, and a block of up to 4096
#   values is scaled and rounded while it sits in the L1 cache, so blocked or not it reads the tensor once and
#   writes it once. The reference (`frexp`, `ldexp`, `round`, several `where`s) makes a dozen passes; the stock
#   path converts twice and, with blocks, adds the absmax and scaling passes.
# - **embedding_bag.** The forward prefetches the rows of the lookups a few slots ahead, so the random reads of the
#   table overlap. The backward radix-sorts the lookups by row, so every touched row of the value gradient has one
#   owner: no atomics. A dense gradient must write all $N \times D$ values (and on a fresh allocation, fault in
#   every page), which comes to dominate as the memory grows; the sparse layout writes only the touched rows. What
#   is left at small sizes is the price of being called through autograd at all: the benchmark times a stand-in
#   that allocates the same output and gradients and computes nothing (`bench.BagFloor`), and the kernel's
#   speedup over stock cannot exceed stock's time over that floor (listed below).
# - **expert_ffn.** Against the per-expert loop the grouped kernel runs the same GEMMs, so its gain is the
#   bookkeeping (one sort instead of a search per expert, the gathers, the scatter, the SwiGLU in one pass instead
#   of several, and autograd's graph), which matters more the smaller the experts are. The GEMMs themselves bound
#   both: where the loop already runs at a large fraction of the GEMM ceiling (large experts), no kernel doing
#   these FLOPs can be much faster than the loop, whatever its bookkeeping. The ceiling is the best rate any of the
#   shapes reached, so it bounds the machine, not one shape: the layer's own small per-expert products may run
#   well below it.
#
# The measured values are listed with the claim checks below.

# %% [markdown]
# ## The claim checks
#
# The appendix's claims, declared in `icml25.kernels` before the benchmark runs: the embedding bag and the expert
# layer beat their references on every case measured here by a declared margin; the quantiser, whose reference is a
# dozen-pass loop that any one-pass kernel beats by far (the table's "x ref"), is held to the copy ceiling instead;
# and the kernels' targets (the embedding bag against stock's faster gradient layout, the expert layer against the
# per-expert loop, restated against the GEMM ceiling). The paired units are the timing rounds: each round runs every
# contender of a case once, so a round gives one paired value per case. Except for the first claim (see below),
# each case is tested on whether its median
# over the rounds clears its bar, by a sign test (the share of rounds at or above the bar, with an exact interval,
# must exceed one half), and a claim over several cases holds when every case's test does, which is the test of its
# binding case (the one with the fewest rounds at its bar; it is named below). A machine too noisy to time (the copy
# ceiling's middle rounds spread too far) makes a verdict inconclusive, and so does a machine that is not the
# benchmark's alone (other processes took more than a tenth of its CPU time while it ran, `timing.ForeignLoad`: a
# niced process beside it slows every contender alike, which the spread of the rounds does not show), and a
# quantiser tensor that fits in the cache (at `smoke`).
#
# **Why a sign test per case.** One slow round of any case should not decide a claim: the sign test per case moves
# only where a round changes which side of its bar that case falls on, and needs the binding case at its bar in 10 of
# 12 rounds (at `repeats` = 12, the `ci` and `full` value). The noise gate, the copy's interquartile range over its
# median (at most 25%), is not moved by one preempted round. The expert layer's GEMM ceiling is the best rate over
# the layer's own shapes and large square products, and its target is 1.5x the loop, or 90% of the ceiling where 1.5x
# the loop would lie beyond that. How these claims were declared before, and why each changed, is in the chapter's
# generated deviations section.
#
# **Why faster_than_reference is decided by build, not by round.** When it was decided by a sign test over rounds,
# its binding case then, the embedding bag's forward and backward with a sparse gradient, sat near its bar on the
# machine of the time, and its label went reproduced, inconclusive, refuted over three builds of the same code (on
# the present machine no case is near the bar: the cell after the calibration gives each verdict build's deciding
# case and its interval beside the bar). What moved that case was the build (something in the
# process or the machine that holds for a whole run; calibration builds show its mean jumping from build to build
# while its rounds within a build agree), which no statistic over the rounds of one build can see. So this claim
# takes each case's mean log speedup over its rounds, with a t interval widened by that case's own between-build sd
# of its mean, measured on calibration builds of this benchmark that are not verdicts (`kernels.CASE_RUN_SD`), as
# the Autonomy-of-Experts chapter does for its throughput. "Every case clears its bar" is an intersection-union
# test: it holds when every case's own interval lies above the bar (no correction for the number of cases is
# needed), and fails when any case's interval lies below it; the case with the lowest lower bound decides. A case
# whose builds scatter across the bar is then inconclusive instead of flipping, and only that case. What is
# compared did not change: the reference's sparse gradient (`F.embedding(sparse=True)`) is uncoalesced, one row per
# lookup, and the compiled kernel's is coalesced (sorted, one row per touched row), so the kernel does more work for
# the same gradient. Coalescing the reference's inside the timed step would charge it a sort that an optimiser such
# as SGD, which adds an uncoalesced gradient into the table directly, never pays (`SparseAdam` does coalesce);
# deciding that after a refuted verdict would be choosing the comparison by its outcome, so the case stays as it was.
#
# **Why it is timed on one thread, and why each case carries its own spread.** The cell below gives what the
# calibration builds measured, first on the builder's two threads and then on one, what the verdict builds of that
# one-thread design found, and the calibration of the design that followed them (7d230ec's, each case with its own
# spread). A referee's check of that design, and the design that answers it (the present one), come after it.

# %%
def calibration(runs: dict, rounds: int) -> str:
    """The widest case of calibration builds: its range of build means, and the between-build sd it gives."""
    sd = kernels.case_run_sd(runs, rounds)
    case = max(sd, key=sd.get)
    means = [m for m, _ in runs[case]]
    return (f"over {len(runs[case])} calibration builds of {rounds} rounds the between-build sd of a case's mean "
            f"was at most {sd[case]:.3f} in logs, for {case}, whose build means went "
            f"from {np.exp(min(means)):.2f}x to {np.exp(max(means)):.2f}x its reference")


two = calibration(kernels.TWO_THREAD_CALIBRATION_RUNS, kernels.TWO_THREAD_CALIBRATION_ROUNDS)
one = calibration(kernels.REFERENCE_CALIBRATION_RUNS, kernels.REFERENCE_CALIBRATION_ROUNDS)
lent = [case for case, *_ in kernels.LARGEST_SD_VERDICT_BUILDS]
binding_own = kernels.case_run_sd(kernels.REFERENCE_CALIBRATION_RUNS, kernels.REFERENCE_CALIBRATION_ROUNDS)[lent[0]]
dropped = "; ".join(f"seed {seed}, {why}" for seed, why in kernels.FIRST_CASE_CALIBRATION_DROPPED.items()) or "none"
seen = "; ".join(f"{np.exp(est):.2f}x, log {est:.3f} [{lo:.3f}, {hi:.3f}]"
                 for _, est, lo, hi in kernels.LARGEST_SD_VERDICT_BUILDS)
display(Markdown(
    f"On the builder's two threads, {two}; an interval carrying that spread could not decide any build: it was "
    f"inconclusive in every one. A diagnosis found episodes, lasting seconds, in which the second thread stops "
    f"helping the reference's PyTorch operations, so a case's speedup depended on where in a build such episodes "
    f"fell. The claim's cases are therefore timed in a pass of their own on one thread "
    f"(`bench.one_thread_x_reference`, after the other benchmarks and with tensors of their own), every case's "
    f"kernel and reference side by side in the same interleaved rounds, so that a change in the machine's state "
    f"hits every case alike. On one thread, {one}. This changes what is claimed: the speed of a kernel against its "
    f"reference per thread, each on one core, not on the whole machine. The other claims are still timed on the "
    f"builder's threads. The change was declared before any verdict build of this design (the chapter's "
    f"deviations section).\n\n"
    f"That design decided on the case with the lowest mean alone, by an interval that carried the largest "
    f"between-build sd of any case ({kernels.REFERENCE_RUN_SD:.4f}). Its {len(lent)} verdict builds were all "
    f"inconclusive, each time on {' and '.join(sorted(set(lent)))} (log speedup and interval against the bar "
    f"log {kernels.MARGIN:g} = {np.log(kernels.MARGIN):.4f}: {seen}): the estimate hardly moved between builds, "
    f"but the interval carried the spread of another case, while this case's own between-build sd in the same "
    f"calibration was {binding_own:.4f}. Borrowing the widest case's spread is not what the claim needs: every case "
    f"clearing its bar is decided by every case's own interval. So, after seeing those builds, the claim was "
    f"declared again as such an intersection-union test, each case with its own between-build sd, measured on "
    f"{len(kernels.FIRST_CASE_CALIBRATION_SEEDS)} fresh calibration builds (bench seeds "
    f"{min(kernels.FIRST_CASE_CALIBRATION_SEEDS)}-{max(kernels.FIRST_CASE_CALIBRATION_SEEDS)}, "
    f"{kernels.FIRST_CASE_CALIBRATION_KEPT} of them with every precondition holding and kept; dropped: {dropped}) that "
    f"the new statistic had not seen, before any verdict build of the new design; the bar, the rounds and the "
    f"preconditions did not "
    f"change. The table gives each case's calibration: the mean over builds of its build means, the mean sd of "
    f"its rounds within a build, and its between-build sd $s_c$, which its interval carries"
    + ("; where $s_c$ is 0 the case's build means scatter no more than its rounds alone would make them, and its "
       "interval is the plain t interval over its rounds." if 0 in kernels.FIRST_CASE_RUN_SD.values() else ".")))

case_table = ["| case | build means (geometric, range) | mean log speedup | sd of rounds | $s_c$ |",
              "|---|---|---|---|---|"]
for case, builds in kernels.FIRST_CASE_CALIBRATION_RUNS.items():
    means, sds = zip(*builds)
    case_table.append(f"| {case} | {np.exp(min(means)):.2f}x-{np.exp(max(means)):.2f}x | {np.mean(means):.4f} | "
                      f"{np.mean(sds):.4f} | {kernels.FIRST_CASE_RUN_SD[case]:.4f} |")
display(Markdown("\n".join(case_table)))

# %% [markdown]
# **A referee (after the verdict builds of the per-case design were recorded; the present design, below, followed
# it).** A
# referee with no stake decided faster_than_reference as declared on two bench seeds the book's builds never used,
# checked that kernel and reference compute the same thing on one thread, timed a fairer expert loop, and simulated
# the interval's coverage; its numbers, as measured, are in `kernels.REFEREE_151` and printed below.

# %%
r = kernels.REFEREE_151
iv = lambda t: f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
display(Markdown(
    f"Bench seeds {r['seeds'][0]} and {r['seeds'][1]}: {r['verdicts'][0]} and {r['verdicts'][1]}; the deciding "
    f"case expert_ffn d=128 at log speedup {iv(r['d128'][0])} and {iv(r['d128'][1])}. Kernel and reference agree on "
    f"the timed inputs (largest differences: " + ", ".join(f"{k} {v:.1e}" for k, v in r["outputs_max_abs_diff"].items())
    + f"), and the kernel's CPU time over wall time on one thread is {r['cpu_over_wall_one_thread']:.2f}. Against "
    f"a fairer expert loop than the reference (one argsort, one gather, one in-place `index_add_`) d=128 runs "
    f"{r['d128_x_fair_loop'][0]:.2f}x (log {r['d128_x_fair_loop'][1]:.3f}), still above the bar, so about a quarter "
    f"of the margin is the reference's naivety. With each $s_c$ from 8 builds the interval covers about "
    f"{r['coverage_at_7_df']:.0%} instead of 95% (simulated); with a 95% upper bound on each $s_c$ both seeds' "
    f"verdicts stand (lowest lower bound {r['ucb_lowest_lower_bound']:.3f}); d=128 would flip only with an $s_c$ of "
    f"about {r['d128_sd_to_flip']:.3f}. The quiet_machine precondition reads the copy rounds of the builder's "
    f"two-thread pass, not the one-thread pass this claim reads: it blocked {r['quiet_blocked_tight_runs'][0]} of "
    f"{r['quiet_blocked_tight_runs'][1]} verdict-style runs whose one-thread intervals were tight."))
# %% [markdown]
# **The design that answered the referee (c94c5ce, declared after the referee's check, before any verdict build of
# it; the present design keeps it, with each case's spread measured again on this machine, below).** Three changes
# answer the referee, each ledgered with what had been seen before it (the chapter's deviations section): this
# claim's noise gate reads its own pass; the expert cases are timed against a fair PyTorch loop; and each case's
# between-build sd is measured again, on fresh calibration builds, and carried as an upper confidence bound. The
# cell below gives what each rests on.

# %%
spreads = kernels.OLD_MACHINE_CALIBRATION_COPY_SPREADS
spread_median = float(np.median(list(spreads.values())))
seeds = kernels.OLD_MACHINE_CALIBRATION_SEEDS
new_dropped = "; ".join(f"seed {s}, {why}" for s, why in kernels.OLD_MACHINE_CALIBRATION_DROPPED.items()) or "none"
display(Markdown(
    f"**Its own noise gate.** `quiet_machine` reads the copy ceiling's rounds in the builder's two-thread pass, "
    f"which this claim does not read. The claim's gate is now a copy of the quantiser's tensor timed as one more "
    f"contender in the one-thread pass's own rounds (`bench.copy_contender`): its quartile spread must be at most "
    f"{kernels.QUIET:.0%} of its median, quiet_machine's bar read on the right pass. In the "
    f"{len(spreads)} calibration builds alone on the machine it ranged {min(spreads.values()):.3f} to "
    f"{max(spreads.values()):.3f} (median {spread_median:.3f}); a bar at twice that median, the first plan, would "
    f"have rejected {sum(v > 2 * spread_median for v in spreads.values())} of them for a tail of the copy's own "
    f"spread, so the gate keeps quiet_machine's bar (changed before any "
    f"verdict build; see `kernels.OLD_MACHINE_CALIBRATION_SEEDS`'s comment). The other three claims keep "
    f"`quiet_machine`.\n\n"
    f"**Two expert references.** `ops.expert_ffn_reference` is the naive loop that states the math (for each "
    f"expert a search for its tokens, and a fresh copy of the output per expert): the kernel's tests hold it to "
    f"this loop, `ops.expert_ffn` runs it where the kernels did not build (the Autonomy-of-Experts layer "
    f"included), and the table's \"x ref\" of the expert rows is against it. faster_than_reference's expert cases "
    f"are timed against `bench.expert_sorted_loop` instead, the same function as a competent PyTorch user writes "
    f"a top-k MoE: the routing slots sorted by expert once, the tokens gathered once, each expert's products on "
    f"its contiguous group, one in-place `index_add_` (the tests hold it equal to the naive loop, outputs and "
    f"gradients). expert_ffn_beats_the_loop keeps its own contender, `bench.expert_loop`, the per-expert loop of "
    f"the Mixtral implementation that its {kernels.MOE_X_LOOP:g}x target was declared against, so what that "
    f"target means does not move.\n\n"
    f"**A fresh calibration.** The expert cases' values change with their reference, so every case's "
    f"between-build sd was measured again on {len(seeds)} calibration builds on bench seeds never used "
    f"({min(seeds)}-{max(seeds)}; {kernels.OLD_MACHINE_CALIBRATION_KEPT} kept; dropped and replaced by the next seed: "
    f"{new_dropped}). From about ten builds a plug-in $s_c$ makes the interval cover less than 95% (the referee "
    f"simulated about 92% with eight), so each case's interval now carries a one-sided "
    f"{kernels.RUN_SD_CONFIDENCE:.0%} upper bound on its $s_c$ (`kernels.case_run_sd_upper`: the chi-square "
    f"bound on the variance of a build's mean over the builds' degrees of freedom, less the rounds' share), which "
    f"can only widen an interval, moving a verdict toward inconclusive, never toward a decision. The table gives "
    f"each case's calibration, its plug-in estimate, the bound it carries, and what 7d230ec's calibration gave."))

def calibration_table(runs: dict, carried: dict, before: dict, before_name: str) -> str:
    """Per case of calibration builds `runs`: the range of its build means, their mean, the mean sd of its rounds,
    its plug-in between-build sd, the upper bound its interval carries (`carried`) and a former calibration's."""
    estimate = kernels.case_run_sd(runs, kernels.CASE_CALIBRATION_ROUNDS)
    lines = ["| case | build means (geometric, range) | mean log speedup | sd of rounds | $s_c$ | $s_c$ carried "
             f"(upper bound) | $s_c$ {before_name} |", "|---|---|---|---|---|---|---|"]
    for case, builds in runs.items():
        means, sds = zip(*builds)
        lines.append(f"| {case} | {np.exp(min(means)):.2f}x-{np.exp(max(means)):.2f}x | {np.mean(means):.4f} | "
                     f"{np.mean(sds):.4f} | {estimate[case]:.4f} | {carried[case]:.4f} | {before[case]:.4f} |")
    return "\n".join(lines)


def faster_builds(builds: dict) -> str:
    """Verdict builds of faster_than_reference ({bench seed: (verdict, deciding case, estimate, low, high)})."""
    return "; ".join(f"bench seed {seed}: {verdict}, deciding case {case} at log {est:.3f} [{lo:.3f}, {hi:.3f}]"
                     for seed, (verdict, case, est, lo, hi) in builds.items())


display(Markdown(calibration_table(kernels.OLD_MACHINE_CALIBRATION_RUNS, kernels.OLD_MACHINE_CASE_RUN_SD,
                                   kernels.FIRST_CASE_RUN_SD, "in 7d230ec")))
labels = {verdict for verdict, *_ in kernels.OLD_MACHINE_VERDICT_BUILDS.values()}
display(Markdown(
    f"**The verdict builds of this design** on the machine it was calibrated on "
    f"({len(kernels.OLD_MACHINE_VERDICT_BUILDS)}, one after another, each alone on the machine): "
    f"{faster_builds(kernels.OLD_MACHINE_VERDICT_BUILDS)}. "
    + ("The label was the same in every build." if len(labels) == 1 else
       "The label was not the same in every build: the case with the widest between-build sd could still reach the "
       "bar.")))

# %% [markdown]
# **The present calibration: this machine, the allocator fixed.** The book is now built on another machine, and every
# timing claim here runs with the C allocator's policy fixed (`bench.fix_allocator`; see the module docstring of
# `icml25.kernels` for the page faults it removed). The between-build spreads above were measured on the old
# machine before the fix, so each case's $s_c$ was measured again here, on fresh calibration builds under the fix,
# by the same rule and the same bound, before any verdict build with it (ledgered). The cell gives the calibration,
# then the verdict builds of the present design: every claim's label in each, and whether it repeated.

# %%
spreads = kernels.CASE_CALIBRATION_COPY_SPREADS
foreign = [kernels.CASE_CALIBRATION_FOREIGN_SHARES[s] for s in spreads]  # the builds kept
dropped = "; ".join(f"seed {s}, {why}" for s, why in kernels.CASE_CALIBRATION_DROPPED.items()) or "none"
display(Markdown(
    f"{len(kernels.CASE_CALIBRATION_SEEDS)} calibration builds on bench seeds never used "
    f"({', '.join(map(str, kernels.CASE_CALIBRATION_SEEDS))}), {kernels.CASE_CALIBRATION_KEPT} kept (dropped and "
    f"replaced: {dropped}); in the builds kept other processes took {min(foreign):.1%}-{max(foreign):.1%} of the "
    f"machine's CPU time, and the one-thread copy's quartile spread was {min(spreads.values()):.3f}-"
    f"{max(spreads.values()):.3f}. The quantiser's tensor, and so the gate's copy, is capped at "
    f"{bench.config(kernels.CASE_CALIBRATION_SCALE).fp_max_mib} MiB at {kernels.CASE_CALIBRATION_SCALE} here "
    f"(`bench.fp_shape`): builds {', '.join(map(str, kernels.PRE_CAP_CALIBRATION_SEEDS))}, run under the fix "
    f"before the cap, are not used."))
display(Markdown(calibration_table(kernels.CASE_CALIBRATION_RUNS, kernels.CASE_RUN_SD, kernels.OLD_MACHINE_CASE_RUN_SD,
                                   "on the old machine")))
per_claim = {claim.id: [kernels.VERDICT_BUILD_LABELS[seed][claim.id] for seed in kernels.VERDICT_BUILD_LABELS]
             for claim in kernels.CLAIMS}
display(Markdown(
    f"**The verdict builds of the present design** ({len(kernels.VERDICT_BUILDS)}, one after another, each alone "
    f"under the timing lock; other processes took "
    + ", ".join(f"{share:.1%}" for share in kernels.VERDICT_BUILD_FOREIGN_SHARES.values())
    + f" of the CPU): faster_than_reference on {faster_builds(kernels.VERDICT_BUILDS)}. Every claim's label by bench "
    f"seed ({', '.join(map(str, kernels.VERDICT_BUILD_LABELS))}):\n\n"
    + "\n".join(f"- {claim}: {labels[0] if len(set(labels)) == 1 else ', '.join(labels)}: "
                f"{kernels.label_repeats(labels)}" for claim, labels in per_claim.items())))

# %% [markdown]
# **The timed unit and the threads.** A contender whose call is shorter than `icml25.ops.bench.MIN_UNIT_SECONDS`
# is called as many times in a row as reach it, and its round's time is the mean per call (as `timeit` does): a
# copy of the `ci` tensor takes a few milliseconds, and one timer interrupt would otherwise decide a round. The
# builder gives this notebook, which runs alone at the end of a build, every core, because the targets are the ones
# `icml25 bench` states on the whole machine (all but faster_than_reference, timed on one thread, as above). The
# table's footer says how many threads ran.

# %%
fp_rows = [r for r in rows if r["kernel"] == "fp_quantize"]
best_stock = {r["label"].split(", ")[-1]: r["x_best_stock"] for r in rows if "x_best_stock" in r}
targets = bench.expert_targets(rows)
display(Markdown("\n".join(
    [f"- fp_quantize, {r['label']}: {r['of_ceiling']:.0%} of the copy ceiling ({ceiling:.1f} GB/s), "
     f"{r['x_stock']:.2f}x stock" for r in fp_rows]
    + [f"- embedding_bag {r['label']}: {r['x_stock']:.2f}x stock" for r in rows if r["kernel"] == "embedding_bag"]
    + [f"- embedding_bag fwd+bwd, {r['label'].split(', ')[-1]}: {r['x_best_stock']:.2f}x the faster stock gradient "
       f"layout ({r['compiled_ms']:.3f} ms against {r['stock_ms']:.3f} ms); autograd's floor, the same outputs and "
       f"gradients allocated with nothing computed, takes {r['floor_ms']:.3f} ms, so no kernel called this way can "
       f"beat stock by more than {r['floor_x_best_stock']:.2f}x here"
       + (f". Of the compiled {r['phases_layout']} layout's time, the kernel's forward call takes "
          f"{r['kernel_forward_ms']:.3f} ms and its backward call (the sort by row and the sums) "
          f"{r['kernel_backward_ms']:.3f} ms; the rest, {r['around_kernel_ms']:.3f} ms, is autograd and the tensors "
          f"around them. The two calls alone cap the kernel at {r['kernel_x_best_stock']:.2f}x stock, so "
          + ("the target needs a faster kernel, not less overhead" if r["kernel_x_best_stock"] < kernels.BAG_STEP_X_BEST_STOCK
             else "the overhead around the calls is what stands between the kernel and the target")
          if "kernel_x_best_stock" in r else "")
       for r in rows if "floor_x_best_stock" in r]
    + [f"- expert_ffn {r['label']}: {r['x_stock']:.2f}x the per-expert loop; {r['compiled_gflops']:.0f} GFLOP/s, "
       f"{r['of_ceiling']:.0%} of the GEMM ceiling ({r['gemm_ceiling_gflops']:.0f} GFLOP/s, torch.mm at "
       f"{r['gemm_shape']}); the ceiling is {t['attainable_x_loop']:.2f}x the loop's {r['stock_gflops']:.0f} "
       f"GFLOP/s, so {kernels.MOE_X_LOOP:g}x the loop is {'within' if t['loop_target_reachable'] else 'beyond'} "
       f"reach and the target is {t['target_x_loop']:.2f}x the loop: {t['outcome']} in the fastest rounds "
       f"({t['of_target']:.0%} of the target). The layer's own nine GEMMs per expert, at the rates their shapes "
       f"reached here (`bench.own_gemm_seconds`), take {r['own_gemm_ms']:.2f} ms, so a kernel that runs them through "
       f"torch.mm, as this one does, is at most {r['own_gemm_x_loop']:.2f}x the loop ({t['own_gemm_of_target']:.0%} "
       f"of the target): the target is {'within' if t['within_own_gemms'] else 'beyond'} that bound"
       for r, t in zip(moe, targets)])))

measured = kernels.measurements(rows, cfg.repeats, scale)
print(f"Other processes used {measured['foreign_cpu_share']:.1%} of the machine's CPU time while the benchmark ran "
      f"(the claims ask for at most {timing.FOREIGN_SHARE:.0%}); the copy's rounds spread "
      f"{measured['copy_quartile_spread']:.1%} of their median (at most {kernels.QUIET:.0%}), and in the one-thread "
      f"pass {measured['one_thread_copy_quartile_spread']:.1%} (faster_than_reference asks for at most "
      f"{kernels.QUIET:.0%}); bench seed {seed}.")


def binding(name: str) -> str:
    at_bar = measured[name]
    return f"binding case {measured[name + '_case']}, at its bar in {sum(at_bar):.0f} of {len(at_bar)} rounds"


medians = ", ".join(f"{case}: {x:.1f}x" for case, x in measured["median_x_reference"].items())
per_case = ", ".join(f"{case}: {np.exp(np.mean(measured[kernels.case_key(case)])):.2f}x (s_c "
                     f"{kernels.CASE_RUN_SD[case]:.4f})" for case in kernels.REFERENCE_CASES
                     if measured[kernels.case_key(case)])
uncalibrated = (f"; no calibration at scale {scale!r} for {', '.join(measured['uncalibrated_cases'])}, so no case "
                f"decides here" if measured["uncalibrated_cases"] else "")
our_values = [
    (kernels.FASTER_THAN_REFERENCE, f"on one thread, median over rounds: {medians}"
                                    + (f"; geometric mean over {measured['reference_rounds']} rounds, with each "
                                       f"case's own between-build sd in logs: {per_case}" if per_case else "")
                                    + uncalibrated),
    (kernels.NEAR_THE_COPY_CEILING, ", ".join(f"{r['label']}: {r['of_ceiling']:.0%} of {ceiling:.1f} GB/s"
                                              for r in fp_rows)
     + f"; {binding('unscaled_at_ceiling')}; {binding('blocked_at_ceiling')}"),
    (kernels.EMBEDDING_BAG_BEATS_STOCK, ", ".join(
        [f"{r['label']}: {r['x_stock']:.2f}x stock" for r in rows if r["label"].startswith("fwd,")]
        + [f"fwd+bwd {n}: {x:.2f}x the faster stock layout" for n, x in best_stock.items()])
     + f"; {binding('bag_forward_beats_stock')}; {binding('bag_step_beats_best_stock')}"),
    (kernels.EXPERT_FFN_BEATS_THE_LOOP, ", ".join(
        f"{t['case']}: {t['x_loop']:.2f}x the loop against a target of {t['target_x_loop']:.2f}x" for t in targets)
     + f"; {binding('moe_meets_target')}"),
]
design_seeds = [*kernels.FIRST_CASE_CALIBRATION_SEEDS, *kernels.REFEREE_151["seeds"],
                *kernels.OLD_MACHINE_CALIBRATION_SEEDS, *kernels.PRE_CAP_CALIBRATION_SEEDS,
                *kernels.CASE_CALIBRATION_SEEDS]
calibration_seeds = {kernels.FASTER_THAN_REFERENCE.id: design_seeds}  # every bench seed its design has seen
for claim, our_value in our_values:
    verdict = check(claim, seeds=[seed], calibration_seeds=calibration_seeds.get(claim.id, []), scale=scale,
                    measured=measured, our_value=our_value)
    display(verdict)
    plot.effect_plot(verdict)
    plt.show()
    if (claim is kernels.NEAR_THE_COPY_CEILING and cfg.fp_max_mib  # smoke's tensor is a fixed small one
            and measured["cache_multiple"] < kernels.MIN_CACHE_MULTIPLE):
        llc = bench.last_level_cache_bytes() / 2**20
        display(Markdown(
            f"Here beyond_cache fails for the size the machine reports, not for the timing: it reports a last-level "
            f"cache of {llc:.0f} MiB, and the tensor, capped at {cfg.fp_max_mib} MiB at this scale, fills "
            f"{measured['cache_multiple']:.2f} of them. Where a machine reports a cache this large (a virtual machine "
            f"may report its host's whole shared cache), no tensor that fits the run's time and memory fills two, so "
            f"the claim is not decided here; the "
            f"rounds above still show how near the copy ceiling the quantiser runs."))
    if claim is kernels.FASTER_THAN_REFERENCE:
        e = kernels.deciding_case(verdict.record)
        interval = (f"log speedup {e['estimate']:.4f} [{e['ci_low']:.4f}, {e['ci_high']:.4f}], "
                    f"{np.exp(e['estimate']):.2f}x its reference" if e["ci_low"] is not None else "no interval")
        display(Markdown(f"The deciding case of faster_than_reference: {e['name']}, {interval}, against the bar "
                         f"log {kernels.MARGIN:g} = {np.log(kernels.MARGIN):.4f} ({e['verdict']})."))

