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
# # Pre-training MoE and AoE on a multi-domain language
#
# The paper pre-trains 732M- and 4B-parameter models on 100B tokens and finds AoE ahead of a routed MoE on
# downstream tasks, with lower training loss, more confident expert selection, comparable load balance and 97% of
# the MoE's throughput. Here the same comparison runs in miniature: two-layer Llamas whose every MLP is a mixture
# of `n_experts` experts (top-`top_k`), trained with the same steps, learning rate and Eq. 6 load-balancing loss
# ($\alpha$ = `alpha`), on a synthetic language of `n_domains` random Markov sources over one vocabulary (one source
# per sequence, so expert specialisation by domain is possible and measurable). AoE runs with two $d_\text{low}$,
# its width set by Eq. 5 so every model has the same parameters up to a few columns.
#
# At `full` scale: d = 256, four layers, 5000 steps of 32 × 128 tokens, d_low ∈ {32, 64, 128} (hours on a CPU).

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # training seeds (each also draws its own language)
steps = None  # optimizer steps per model
batch_size = None  # sequences per step
lr = None
d_lows = None  # AoE low-rank widths
alpha = None  # weight of the Eq. 6 load-balancing loss (0 turns it off)
bench_repeats = None  # interleaved timing rounds for the throughput check

# %%
import numpy as np

from icml25 import aoe
from icml25.core import check, plot

plot.use_style()
cfg = aoe.config(scale, seeds=seeds, steps=steps, batch_size=batch_size, lr=lr, d_lows=d_lows, alpha=alpha,
                 bench_repeats=bench_repeats)
cfg

# %% [markdown]
# ## Training
#
# The loss is the next-token cross-entropy plus each layer's auxiliary loss; the validation loss is the
# cross-entropy alone on held-out sequences. The dotted line is the language's entropy rate given the domain:
# the loss of a model that knows each source exactly.

# %%
runs = aoe.pretraining_experiment(cfg)
labels = [v[0] for v in aoe.variants(cfg)]
for label in labels:
    r = [r for r in runs if r["label"] == label]
    print(f"{label:14s} {r[0]['n_params']:>8,d} parameters, {np.mean([x['seconds'] for x in r]):5.1f} s per run")

# %%
fig, ax = plot.subplots()
for label, color in zip(labels, plot.PALETTE):
    curves = np.array([[v for _, v in r["evals"]] for r in runs if r["label"] == label])
    x = [s for s, _ in runs[0]["evals"]]
    ax.plot(x, curves.mean(0), "o-", color=color, label=label)
    ax.fill_between(x, curves.mean(0) - curves.std(0), curves.mean(0) + curves.std(0), color=color, alpha=0.2)
ax.axhline(np.mean([r["floor"] for r in runs]), color="k", ls=":", label="entropy rate (floor)")
ax.set(title="Validation loss during training", xlabel="optimizer step",
       ylabel=f"validation NLL (nats/token, mean ± sd, {len(cfg.seeds)} seeds)")
ax.legend();

# %% [markdown]
# ## Final loss and expert-selection entropies
#
# Left: final validation loss per seed (dots) and its mean. Middle and right: confidence entropy (how peaked the
# selection distribution is) and load entropy (how evenly the top-$K$ slots are spread over experts, maximum
# $\log n$) per layer, measured on the validation set.

# %%
final = {label: [r["val_loss"] for r in runs if r["label"] == label] for label in labels}
conf = {label: np.array([r["conf_entropy"] for r in runs if r["label"] == label]) for label in labels}
load = {label: np.array([r["load_entropy"] for r in runs if r["label"] == label]) for label in labels}
fig, axes = plot.subplots(1, 3, figsize=(15, 4))
for i, (label, color) in enumerate(zip(labels, plot.PALETTE)):
    axes[0].errorbar([i], [np.mean(final[label])], yerr=[np.std(final[label])], fmt="s", color=color, capsize=4)
    axes[0].scatter([i] * len(final[label]), final[label], color=color, alpha=0.5)
    layers = np.arange(cfg.n_layers)
    axes[1].errorbar(layers + 0.08 * i, conf[label].mean(0), yerr=conf[label].std(0), fmt="o-", color=color,
                     capsize=3, label=label)
    axes[2].errorbar(layers + 0.08 * i, load[label].mean(0), yerr=load[label].std(0), fmt="o-", color=color,
                     capsize=3, label=label)
axes[0].set_xticks(range(len(labels)), labels, rotation=15)
axes[0].set(title="Final validation loss", ylabel="NLL (nats/token; mean ± sd and seeds)")
axes[1].set(title="Confidence entropy", xlabel="layer", ylabel="Ent_conf (nats)")
axes[2].axhline(np.log(cfg.n_experts), color="k", ls=":", label="perfect balance")
axes[2].set(title="Load entropy", xlabel="layer", ylabel="Ent_load (nats)")
axes[1].legend(fontsize=8)
axes[2].legend(fontsize=8);

# %% [markdown]
# ## Do experts specialise by domain?
#
# For the last layer of seed 0: the share of each domain's top-$K$ slots that each expert receives. A uniform
# map means no specialisation; bright cells mean an expert serves mostly some domains.

# %%
shown = [r for r in runs if r["seed"] == cfg.seeds[0]]
fig, axes = plot.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.6))
for ax, r in zip(np.atleast_1d(axes), shown):
    im = ax.imshow(r["specialisation"][-1], cmap="viridis", vmin=0, aspect="auto")
    ax.set(title=r["label"], xlabel="expert", ylabel="domain")
    ax.grid(False)
fig.colorbar(im, ax=axes, label="share of the domain's slots");

# %% [markdown]
# ## Throughput
#
# Training tokens per second (forward and backward of the full loss) on one batch, each model timed in turn over
# `bench_repeats` interleaved rounds so load changes on this shared machine hit all alike; medians. Both use the
# compiled `expert_ffn` kernel; AoE additionally computes all $n$ low-rank projections.

# %%
tps = aoe.throughput(cfg, seed)
fig, ax = plot.subplots()
ax.bar(list(tps), [v / 1e3 for v in tps.values()], color=plot.PALETTE[:len(tps)])
ax.set(title="Training throughput", ylabel="thousand tokens / s (forward + backward)")
print({k: f"{v / tps['MoE']:.2f}x MoE" for k, v in tps.items()})

# %% [markdown]
# ## The claim checks
#
# Criteria fixed in `icml25.aoe` before these runs.

# %%
aoe_labels = labels[1:]
fmt = lambda v: f"{np.mean(v):.4f} ± {np.std(v):.4f}"
check(aoe.LOSS, seeds=cfg.seeds, scale=scale,
      measured={"moe_val_loss": final["MoE"], "aoe_val_loss": {k: final[k] for k in aoe_labels}},
      our_value=f"MoE {fmt(final['MoE'])}; " + "; ".join(f"{k} {fmt(final[k])}" for k in aoe_labels))

# %%
seed_conf = {k: conf[k].mean(1).tolist() for k in labels}  # per seed, mean over layers
check(aoe.CONFIDENCE, seeds=cfg.seeds, scale=scale,
      measured={"moe_conf_entropy": seed_conf["MoE"], "aoe_conf_entropy": {k: seed_conf[k] for k in aoe_labels}},
      our_value=f"MoE {fmt(seed_conf['MoE'])}; " + "; ".join(f"{k} {fmt(seed_conf[k])}" for k in aoe_labels))

# %%
smallest = aoe_labels[0]
check(aoe.THROUGHPUT, seeds=[seed], scale=scale,
      measured={"moe_tokens_per_s": tps["MoE"], "aoe_tokens_per_s": tps[smallest]},
      our_value=f"{smallest}: {tps[smallest] / tps['MoE']:.1%} of MoE's tokens/s")

# %% [markdown]
# **What we see.** The verdicts above come from this run. In the book's `ci` run the three models ended within a
# fraction of a seed standard deviation of each other in validation loss — AoE slightly *behind* the routed MoE
# on average, so the loss claim is not reproduced, but the gap is well inside the seed noise: at a few hundred steps
# on a two-layer model the comparison cannot resolve the percent-level gains the paper reports at 100B tokens. The
# paper's mechanistic signature does show: AoE's selection distribution has lower entropy than the router's, and
# more so with the larger $d_\text{low}$, while the load entropy stays close to the balanced $\log n$ for all
# models (the Eq. 6 loss is on for every model). Throughput lands near the 85% line, so that verdict can go either
# way from run to run on this shared 2-core machine; the extra cost is the $n \cdot d_\text{low}$ projection that
# every expert computes before the unselected ones stop, which is relatively larger at this tiny width than at the
# paper's d = 1280.
