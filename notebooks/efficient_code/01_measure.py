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
# # Measuring untrusted code: the sandbox, ET, MU and TMU
#
# EffiCoder builds its fine-tuning data by *running* code that language models wrote: every candidate solution
# is executed on its task's tests, and among the correct ones the fastest, leanest becomes the training target.
# Two things must hold for that to work. The execution must be **safe** (the candidates are untrusted programs)
# and the measurement must be **stable** enough that "fastest" means something. This notebook checks both.
#
# The paper measures three quantities per program (its Section 3, with `mprof` sampling memory every 1 ms):
#
# $$\mathrm{ET} = t_\text{end} - t_\text{start}, \qquad \mathrm{MU} = \max_t m(t), \qquad
#   \mathrm{TMU} = \int m(t)\,dt \approx \sum_i \tfrac12 (m_i + m_{i-1})(t_i - t_{i-1}),$$
#
# and reports them normalised by a canonical solution's: $\mathrm{NET} = \mathrm{ET}/\mathrm{ET}_\text{canonical}$
# averaged over tasks (likewise NMU, NTMU). Here ET is the minimum over repeats of the mean CPU time per call on
# a large performance input, MU the process's resident high-water mark and TMU the integral of its resident memory
# over a timed batch, per call (measured from outside the sandbox, below).
#
# **Parameters** (`full` scale: 20× larger performance inputs and 30 repeated runs per program).

# %% tags=["parameters"]
scale = "ci"
seed = 0
families = None  # task families to measure; None: the scale's value
perf_size = None  # multiplier of the performance input's size; None: the scale's value
noise_runs = None  # fresh sandbox runs per program for the noise figure; None: the scale's value
constant = 7  # the instance constant c used in this notebook

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import efficient_code as E
from icml25.core import plot
from icml25.efficient_code import pipeline, tasks

plot.use_style()
cfg = E.config(scale, families=families, perf_size=perf_size, noise_runs=noise_runs)
cfg

# %% [markdown]
# ## The sandbox
#
# Generated code is untrusted, so `run_candidate` runs every program in an **operating-system sandbox**
# (bubblewrap) and trusts nothing the program says about itself. What it guarantees, and how it was tested
# (`tests/test_efficient_code.py`, one test per attack, each asserting that the side effect did not happen):
#
# | the program tries | what stops it | tested by |
# |---|---|---|
# | to write a file on the host (with the real builtins, reached through a `match` class pattern or `__subclasses__`) | read-only root; the only writable place is a private tmpfs that dies with the sandbox | the file is absent afterwards |
# | to read the parent's environment or processes (`/proc/<pid>/environ`) | new PID namespace with its own `/proc`; empty environment | the secret is absent from every output |
# | to return the expected answers from the harness's memory | the runner never receives them: it reports outputs, the parent compares | the job the sandbox gets holds no answer |
# | to fake its timing (replacing the clocks) or its result (a forged PASS line, then exit) | time is the runner's CPU time read by the parent from `/proc/<pid>/schedstat`, memory from `/proc/<pid>/status`; standard output is never read | a slow program stays slow; the forged line is a FAIL |
# | to start a process (`fork`, `posix_spawn`) | a user id of its own in a new user namespace, and a process limit that counts it | both are refused |
# | to outlive the sandbox or hold the caller (an endless loop, `sleep`, a new session) | the parent kills bubblewrap and the sandbox's PID 1 at the wall-clock limit; every wait is bounded | the caller is back within the limit + 1 s and no sandbox process is left |
# | to connect to the host's network | new network namespace | a listening socket on the host gets no connection |
#
# Resource limits cap CPU seconds (**TIMEOUT**), address space (**MEMORY**), file size and core dumps. The static
# allow-list stays as defence in depth: it reads the syntax tree (including `match` patterns) and refuses
# imports off the list, names starting with `_` and `eval`-like builtins (**BLOCKED**), but nothing above depends
# on it. Without bubblewrap, or where user namespaces are refused, `run_candidate` raises `SandboxUnavailable` with
# the fix; it never falls back to a weaker sandbox.
#
# **How ET, MU and TMU are measured.** Each candidate gets one fresh sandbox. After it has answered the unit
# tests, the same runner serves *batches* on the parent's command: "decode `L` fresh copies of the performance
# input" (untimed), then "call the entry once on each prepared copy". Around each call batch the parent reads the
# runner's CPU time (the scheduler's nanosecond count) from outside, so neither the sandbox's start-up nor the
# decoding of the input is in any measurement. ET is the cheapest of `repeats` call batches divided by `L`, as
# measured: nothing subtracted, no floor (`L` grows from 1 until a batch costs at least `min_time` of CPU, so
# even a constant-time solution is timed over many calls). MU is the process's resident high-water mark, as the
# paper's `mprof` reports it, and TMU the call batch's memory-time integral per call, sampled from `/proc` every
# millisecond. A program that escaped the restricted builtins could still end a call batch early by writing its
# end marker itself and look fast: the isolation does not depend on the static check, the timing of such a
# program does. Below, a gallery of programs, each run with the static check on and off; the unit test
# `f(3) == 3` passes only for a program that answers correctly.

# %%
gallery = {
    "correct": "def f(n):\n    return n\n",
    "wrong answer": "def f(n):\n    return n + 1\n",
    "syntax error": "def f(n)\n    return n\n",
    "infinite loop": "def f(n):\n    while True:\n        pass\n",
    "huge allocation": "def f(n):\n    return len([0] * 2 ** 31)\n",
    "write a file": "def f(n):\n    open('x.txt', 'w').write('x')\n    return n\n",
    "open a socket": "import socket\ndef f(n):\n    socket.socket().connect(('127.0.0.1', 80))\n    return n\n",
    "os.system": "import os\ndef f(n):\n    os.system('true')\n    return n\n",
    "dunder escape": "def f(n):\n    return ().__class__.__base__.__subclasses__() and n\n",
    "format escape": "def f(n):\n    return '{0.__class__}'.format(()) and n\n",
    "dunder os.system": "def f(n):\n    w = [c for c in ().__class__.__base__.__subclasses__()"
                        " if c.__name__ == '_wrap_close'][0]\n    w.__init__.__globals__['system']('true')\n"
                        "    return n\n",
}
# the loop must meet the CPU limit, whatever the machine's load: the wall-clock limit is far behind it
short = E.Limits(wall_s=20.0, cpu_s=1, repeats=1, min_time=0.005)
print(f"{'program':17s} {'static check on':18s} {'static check off':18s} detail (check off)")
for name, src in gallery.items():
    on = E.run_candidate(src, [[[3], 3]], [3], limits=short)
    off = E.run_candidate(src, [[[3], 3]], [3], limits=short, static_check=False)
    print(f"{name:17s} {on.status:18s} {off.status:18s} {off.detail.splitlines()[0][:60] if off.detail else ''}")

# %% [markdown]
# ## Task families: the same function at different costs
#
# Each family is a specification with a constant $c$ and equivalent programs of different cost: a loop against a
# closed form, a quadratic scan against a set, list against set membership, naive recursion against iteration,
# quadratic against Kadane's maximum subarray, recomputed range sums against prefix sums, repeated `max` and a
# full sort against a heap, and a list against a generator (same time, different memory). Unit tests take their
# expected values from a trusted reference; a large performance input is what ET, MU and TMU are measured on.

# %%
for fam in cfg.families:
    for variant in tasks.FAMILIES[fam].variants:
        mark = "  (canonical)" if variant == tasks.FAMILIES[fam].canonical else ""
        print(f"--- {fam} / {variant}{mark}")
        print(tasks.program(fam, variant, constant), end="")

# %% [markdown]
# ## Measurement noise
#
# Every variant is run `noise_runs` times, each time in a fresh sandbox, two at a time (as the paper's pipeline
# runs candidates concurrently). Error bars are ± one standard deviation over the runs; the spread is what a
# selection rule must see through (EffiBench's issue #10 reports ~5% run-to-run deviation).

# %%
noise = pipeline.variant_noise(cfg.families, constant, cfg.perf_size, cfg.noise_runs, workers=cfg.workers)
labels = [f"{f}\n{v}" for f, v in noise]
fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
for ax, (k, name, unit, factor) in zip(axes, [(0, "ET", "ms per call", 1e3), (1, "MU", "KiB", 1 / 1024),
                                              (2, "TMU", "KiB·ms", 1e3 / 1024)]):
    vals = np.array([v[:, k] for v in noise.values()]) * factor
    colors = [plot.PALETTE[list(cfg.families).index(f) % len(plot.PALETTE)] for f, _ in noise]
    ax.barh(range(len(vals)), vals.mean(1), xerr=vals.std(1), color=colors, capsize=2, label="mean ± sd over runs")
    ax.set(xscale="log", title=f"{name} of every variant (c = {constant})", xlabel=f"{name} ({unit}, log scale)")
    ax.set_yticks(range(len(vals)), labels if k == 0 else [""] * len(vals), fontsize=7)
    ax.legend(fontsize=7)
fig.tight_layout()

# %%
cv = {key: v.std(0) / v.mean(0) for key, v in noise.items()}
cv_arr = np.array(list(cv.values()))
fig, ax = plot.subplots()
for k, name in enumerate(["ET", "MU", "TMU"]):
    ax.hist(cv_arr[:, k], bins=12, alpha=0.6, label=f"{name}: median {np.median(cv_arr[:, k]):.1%}")
ax.set(title=f"Run-to-run coefficient of variation ({cfg.noise_runs} fresh sandboxes per program)",
       xlabel="coefficient of variation (sd / mean)", ylabel="programs")
ax.legend();

# %%
from IPython.display import Markdown, display

et = {key: v[:, 0].mean() for key, v in noise.items()}
spread = max(et.values()) / min(et.values())
display(Markdown(
    f"**What we see.** The costs of equivalent programs differ by a factor of {spread:,.0f} between the cheapest "
    f"and the dearest variant here, while the median run-to-run coefficient of variation of ET is "
    f"{np.median(cv_arr[:, 0]):.1%} (MU {np.median(cv_arr[:, 1]):.1%}, TMU {np.median(cv_arr[:, 2]):.1%}). "
    "Where the first is far above the second, \"the fastest correct candidate\" is well defined. ET is the "
    "CPU time of a batch of calls in one runner, divided by the calls, so what is left of its noise is the "
    "machine's (caches, other processes); MU is the whole process's peak, so the "
    "interpreter's own pages sit under every program's, and TMU is sampled at 1 ms, so a short call may fall "
    "between two samples. A list comprehension that materialises $n$ elements is "
    "the case where memory, not time, separates two variants. No claim is checked in this notebook; the claims "
    "are in [the fine-tuning notebook](02_finetune)."))
