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
# # Does PLE align the plain policy better than SFT, RAFT, context distillation and DPO?
#
# Every method starts from the same principled model (see `01_method`) and runs the same number of iterations
# and optimiser steps. Each iteration the policy samples, for fresh queries, a plain answer $y\sim\pi(\cdot\mid x)$
# and a principle-guided one $y_p\sim\pi(\cdot\mid p\oplus x)$, which the methods use differently:
#
# | method | what it trains on (always conditioned on the plain $x$) |
# |---|---|
# | SFT-only | more of the original demonstrations (half careful, half sloppy), no generation |
# | RAFT | SFT on the better of $y$, $y_p$ |
# | context distillation | SFT on $y_p$ (the baseline a reviewer asked for) |
# | DPO | DPO on every pair, the better answer chosen |
# | **PLE** | ranking loss if $r(y_p)-r(y)>\tau_i$, else reward-weighted SFT on both; $\tau_i=\tau_0\alpha^i$ |
# | ablations | PLE with ranking only (SFT pairs dropped), weighted SFT only ($\tau=\infty$), constant $\tau$ |
#
# **Held-out reward.** We score the policy on held-out queries by its *expected* fraction of verified steps: the
# probability it gives each reference step given the correct prefix, averaged over steps, in one teacher-forced
# pass (`ple.expected_step_reward`). It is noise-free and cheap; sampled answers would add sampling noise and
# compounding errors on top. We measure it without the principle (the aligned behaviour we want) and with it (the
# gap PLE should close).

# %% tags=["parameters"]
scale = "ci"
seed = 0  # not used: the runs use `seeds` and `ablation_seeds`
seeds = None  # seeds of the main methods; None: the scale's value
ablation_seeds = None  # seeds of the ablations; None: the scale's value
n_iterations = None  # PLE iterations; None: the scale's value
n_queries = None  # queries per iteration
train_steps = None  # optimiser steps per iteration (equal for every method)
tau0 = None  # initial threshold τ₀ (paper: 0.2)
alpha = None  # threshold decay α (paper: 0.9)
# full scale: 5 seeds, 8 iterations of 512 queries and 40 steps (icml25.ple.config("full"))

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import ple
from icml25.core import check, plot

plot.use_style()
cfg = ple.config(scale, seeds=seeds, ablation_seeds=ablation_seeds, n_iterations=n_iterations,
                 n_queries=n_queries, train_steps=train_steps, tau0=tau0, alpha=alpha)
cfg

# %%
runs = ple.run_all(cfg)
measured = ple.summary(runs)
{k: round(v, 4) for k, v in measured.items()}

# %% [markdown]
# ## Held-out reward without the principle, per iteration

# %%
iters = np.arange(cfg.n_iterations + 1)
colors = dict(zip(ple.METHODS + ple.ABLATIONS, plot.PALETTE * 2))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
for m in cfg.methods:
    plot.seed_errorbar(ax1, [r.plain for r in runs[m]], iters, colors[m], ple.LABELS[m])
for m in ["ple", *cfg.ablations]:
    plot.seed_errorbar(ax2, [r.plain for r in runs[m]], iters, colors[m], ple.LABELS[m], ls="-" if m == "ple" else "--")
ax1.set(title="Methods (mean ± sd over seeds)", xlabel="iteration", ylabel="held-out expected reward without P\n"
        "(fraction of verified steps)")
ax2.set(title="PLE and its ablations", xlabel="iteration")
ax1.legend(fontsize=8), ax2.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Share of pairs routed to ranking, and the gap between prompting with and without the principle

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
taus = ple.threshold_schedule(cfg.tau0, cfg.alpha, cfg.n_iterations)
for m in ["ple", "constant_tau"]:
    if m in runs:
        plot.seed_errorbar(ax1, [r.ranked_share for r in runs[m]], iters[:-1], colors[m], ple.LABELS[m])
ax1.plot(iters[:-1], taus, "k:", label="τ_i = τ₀α^i")
ax1.set(title="Pairs routed to the ranking loss", xlabel="iteration", ylabel="share of pairs / threshold τ")
ax1.legend(fontsize=8)
for m in cfg.methods:
    plot.seed_errorbar(ax2, [r.gap for r in runs[m]], iters, colors[m], ple.LABELS[m])
ax2.axhline(0, color="k", lw=0.8)
ax2.set(title="Principle gap: reward(P⊕x) − reward(x)", xlabel="iteration", ylabel="reward gap (fraction of steps)")
ax2.legend(fontsize=8)
plt.show()

# %% [markdown]
# **What we see** (at `ci`, 3 seeds; the verdicts below are recomputed on every run). The premise holds at the
# start but is small for this tiny model: the principle-guided prompt is a few points of reward better than the
# plain one. Within the few iterations of the run every method erases that gap — and overshoots, because training only ever
# conditions on the plain query, so the principle-conditioned behaviour drifts and gets *worse*; a "gap
# reduction" therefore mixes a better plain policy with a worse principled one, and the plain reward itself is the
# cleaner measure. There, more SFT on the original half-careful demonstrations is as good as anything, and
# PLE ends *below* it. The ablations say why: weighted SFT alone keeps improving, while the ranking loss alone
# collapses the policy — a hinge on length-normalised likelihoods is satisfied most cheaply by making the plain
# answer $y$ less likely, which for a model this small means unlearning arithmetic. DPO degrades for the same
# reason. With a larger share of pairs routed to ranking early on (large margins first), PLE inherits part of
# that damage. A larger model and a real reward model could change this; the miniature cannot say.

# %% [markdown]
# ## Claim checks

# %%
final = {m: np.array([r.plain[-1] for r in runs[m]]) for m in runs}
gap_red = {m: np.array([r.gap[0] - r.gap[-1] for r in runs[m]]) for m in ("ple", "sft")}
check(ple.BEATS_SFT, measured=measured, seeds=cfg.seeds, scale=scale,
      our_value=f"final reward without P: PLE {final['ple'].mean():.3f} ± {final['ple'].std():.3f}, "
                f"SFT {final['sft'].mean():.3f} ± {final['sft'].std():.3f}, "
                f"RAFT {final['raft'].mean():.3f} ± {final['raft'].std():.3f}")

# %%
check(ple.CLOSES_GAP, measured=measured, seeds=cfg.seeds, scale=scale,
      our_value=f"gap reduction: PLE {gap_red['ple'].mean():.3f} ± {gap_red['ple'].std():.3f}, "
                f"SFT {gap_red['sft'].mean():.3f} ± {gap_red['sft'].std():.3f}")
