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
# # Steering with pointwise and distribution-wise interventions, layer by layer
#
# The paper's three claims: D-ReFT beats LoReFT under perturbation (robustness), it is at least as good on clean
# inputs, and it helps most in early layers (its recipe: stochastic early, pointwise late). Here the frozen base
# (rule A: answer the first digit) is steered to rule B (answer its successor) from 256 examples, with a rank-4
# intervention at one layer at a time, and with the hybrid (D-ReFT at layer 0, LoReFT at layers 1–3) against
# LoReFT at every layer. Each test prompt is scored clean, with Gaussian noise of `noise_levels` × RMS(h) added to
# the hidden state at the intervened layer and positions, and with each digit replaced at random at
# `corrupt_rates` (labels stay those of the clean prompt). D-ReFT is scored as the paper runs it, sampling at
# inference; its deterministic mean mode is shown alongside.
#
# **Parameters.** At `ci`, 60 Adam steps at learning rate 1e-2 (the paper uses 3e-3 over 9 epochs; the short
# schedule is what fits the two-core budget). At `scale="full"`: 600 steps at 3e-3, 5 seeds, 5 noise levels, 5000
# test prompts.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # base-model and intervention seeds; None: the scale's value
steps = None  # optimiser steps per intervention
rank = None
layers = None  # single layers to intervene at
beta_kl = None  # weight of the KL term (5); the paper's default is 0

# %%
import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from icml25 import dist_interventions as di
from icml25.core import check, plot

plot.use_style()
cfg = di.config(scale, seeds=seeds, steps=steps, rank=rank, layers=layers, beta_kl=beta_kl)
cfg

# %% [markdown]
# ## Training every placement (a base model per seed, then every intervention on it)

# %%
runs = di.run_experiment(cfg)
print(f"{len(runs)} interventions trained")
where = [f"layer {l}" for l in cfg.layers]

# %% [markdown]
# ## Accuracy per layer, clean and perturbed

# %%
conditions = list(runs[0].sampled)
fig, axes = plt.subplots(1, len(conditions), figsize=(3.2 * len(conditions), 3.6), sharey=True)
for ax, key in zip(axes, conditions):
    for method, mode, color in [("loreft", "sampled", plot.PALETTE[0]), ("dreft", "sampled", plot.PALETTE[1]),
                                ("dreft", "mean", plot.PALETTE[2])]:
        vals = np.array([di.table(runs, w, method, key, mode) for w in where])
        ax.errorbar(cfg.layers, vals.mean(1), yerr=vals.std(1), marker="o", capsize=3, color=color,
                    label=f"{method}" + (" (mean mode)" if mode == "mean" and method == "dreft" else ""))
    ax.set(title=key, xlabel="intervened layer", xticks=cfg.layers)
axes[0].set(ylabel=f"rule-B accuracy (mean ± sd, {len(cfg.seeds)} seeds)")
axes[0].legend(fontsize=8)
fig.suptitle("Steering accuracy by layer, clean and perturbed");

# %% [markdown]
# ## D-ReFT minus LoReFT, and the hybrid

# %%
g = {w: di.gains(runs, w, cfg) for w in where}
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for i, kind in enumerate(["clean", "robust"]):
    m = [g[w][kind].mean() * 100 for w in where]
    s = [g[w][kind].std() * 100 for w in where]
    axes[0].bar(np.array(cfg.layers) + (i - 0.5) * 0.35, m, 0.35, yerr=s, capsize=3, color=plot.PALETTE[i],
                label="clean" if kind == "clean" else "perturbed (mean)")
axes[0].axhline(0, color="k", lw=0.8)
axes[0].set(title="D-ReFT − LoReFT accuracy by layer", xlabel="intervened layer",
            ylabel="accuracy difference (points, mean ± sd)", xticks=cfg.layers)
axes[0].legend()
if cfg.hybrid:
    for i, method in enumerate(["loreft", "hybrid"]):
        vals = np.array([di.table(runs, "all layers", method, k) for k in conditions])
        axes[1].bar(np.arange(len(conditions)) + (i - 0.5) * 0.35, vals.mean(1), 0.35, yerr=vals.std(1),
                    capsize=3, color=plot.PALETTE[i], label="LoReFT at all layers" if i == 0 else
                    "hybrid: D-ReFT at 0, LoReFT at 1–3")
    axes[1].set_xticks(np.arange(len(conditions)), conditions, rotation=20)
    axes[1].set(title="Intervening at every layer", ylabel="rule-B accuracy (mean ± sd)", ylim=(0, 1.05))
    axes[1].legend(fontsize=8);

# %% [markdown]
# ## Learned σ against gain
#
# The paper reports that larger learned σ goes with larger gains. Each point is one layer and seed: D-ReFT's mean
# σ (clamped to at most 0.2) against its advantage over LoReFT at the same layer and seed.

# %%
sig = np.array([[r.sigma for r in runs if r.placement == w and r.method == "dreft"] for w in where])
adv = np.array([g[w]["advantage"] for w in where])
fig, ax = plot.subplots()
for i, l in enumerate(cfg.layers):
    ax.scatter(sig[i], adv[i] * 100, color=plot.PALETTE[i % len(plot.PALETTE)], label=f"layer {l}")
ax.set(title="Learned σ vs D-ReFT's advantage", xlabel="mean learned σ (hidden-state units)",
       ylabel="D-ReFT − LoReFT (points, clean and perturbed)")
ax.legend()
if sig.size > 2:
    rho = stats.spearmanr(sig.ravel(), adv.ravel()).statistic
    print(f"Spearman correlation of σ and advantage over {sig.size} (layer, seed) pairs: {rho:.2f}")

# %% [markdown]
# **What we see** (at `ci`, 3 seeds). A rank-4 edit at the last layer re-maps the answer almost perfectly; at
# layer 0 the same edit reaches only about 60% on clean prompts, because the first digit's state must be moved so
# that three later layers still read it as its successor. The methods nearly coincide at layers 2–3; at layer 0
# D-ReFT is about 5 points ahead both clean and perturbed, with a large spread over seeds (one seed shows no gain),
# and at layer 1 it is 2–3 points behind. Intervening at every layer reaches about 99% clean accuracy, and there the
# hybrid and LoReFT-everywhere are indistinguishable, clean and perturbed. We see no consistent relation between
# learned σ and gain (the printed correlation is near zero over
# 12 points), unlike the paper. The claim checks below apply the criteria fixed in the module.
#
# **How fragile this is.** Before settling on this schedule the chapter ran two others with the same criteria: 100
# steps at learning rate 3e-3 gave D-ReFT − LoReFT at layer 0 of +1.3 ± 2.8 points perturbed (positive on one
# seed of three: `robust` not reproduced) and an advantage largest at layer 2 (`early` not reproduced); 60 steps at
# 3e-3 left every intervention under-trained (about 25% accuracy) and the methods indistinguishable. The learning
# rate was raised to 1e-2 because of that under-training, after those verdicts were seen; read the verdicts below
# as "consistent with the paper at this scale, not robustly so".

# %% [markdown]
# ## Claim checks

# %%
measured = di.measure_claims(runs, cfg)
fmt = lambda v: f"{np.mean(v) * 100:+.1f} ± {np.std(v) * 100:.1f} points"
check(di.ROBUST, measured={"robust_gain": measured["robust_gain"]}, seeds=cfg.seeds, scale=scale,
      our_value=f"layer 0, perturbed: D-ReFT − LoReFT = {fmt(measured['robust_gain'])}")

# %%
check(di.CLEAN, measured={"clean_gain": measured["clean_gain"]}, seeds=cfg.seeds, scale=scale,
      our_value=f"layer 0, clean: D-ReFT − LoReFT = {fmt(measured['clean_gain'])}")

# %%
check(di.EARLY, measured={"advantage_by_layer": measured["advantage_by_layer"]}, seeds=cfg.seeds, scale=scale,
      our_value="advantage by layer " + ", ".join(f"{l}: {a * 100:+.1f}" for l, a in
                                                  zip(cfg.layers, measured["advantage_by_layer"])) + " points")
