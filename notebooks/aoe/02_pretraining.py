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
# downstream tasks, with lower training loss, more confident expert selection (most of all in deeper layers),
# comparable load balance and 97% of the MoE's throughput. Here the same comparison runs in miniature:
# `n_layers`-layer Llamas (four at `ci`, so that "deeper" compares more than two layers) whose every MLP is a
# mixture of `n_experts` experts (top-`top_k`), trained with the same steps and Eq. 6 load-balancing loss
# ($\alpha$ = `alpha`), each model at its own learning rate chosen on a held-out language, on a synthetic language of `n_domains` random Markov
# sources over one vocabulary. Each sequence starts with its domain's tag token, then follows that domain's
# bigram chain, so a model that reads the tag can predict far better than any domain-blind bigram, and experts
# have domains to specialise on. AoE runs at each $d_\text{low}$ of `d_lows`, its width set by Eq. 5 so every
# model has the same parameters up to a few columns; one more model, a MoE whose router has as many parameters as
# AoE's $W_\text{down}$, is the paper's router ablation. The claims use $d_\text{low}$ = `claim_d_low` (about
# $d/3$, the paper's best ratio).
#
# Two reference losses frame every curve: the **domain-blind bigram** (counted on the training data; what a model
# gets without using the tag) and the **true source** (the loss of the domain's own transition matrix, the
# floor). A claim is judged only if every model has come at least half of the way from the first to the second.
#
# At `full` scale: d = 256, four layers, 5000 steps of 32 × 128 tokens, d_low ∈ {32, 64, 128} (hours on a CPU).

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # training seeds (each also draws its own language and data order); None: the scale's
steps = None  # optimizer steps per model
batch_size = None  # sequences per step
lrs = None  # the learning-rate grid each model's rate is chosen from
tune_seed = None  # the held-out language on which the learning rates are chosen
d_lows = None  # AoE low-rank widths
claim_d_low = None  # the d_low the claims are checked at
alpha = None  # weight of the Eq. 6 load-balancing loss (0 turns it off)
n_domains = None  # Markov sources in the language
concentration = None  # Dirichlet concentration of each source's transition rows (small: peaked)
bench_repeats = None  # interleaved timing rounds per block (one block per seed) of the throughput check

# %%
import numpy as np
from IPython.display import Markdown, display

from icml25 import aoe
from icml25.core import check, plot

plot.use_style()
cfg = aoe.config(scale, seeds=seeds, steps=steps, batch_size=batch_size, lrs=lrs, tune_seed=tune_seed, d_lows=d_lows,
                 claim_d_low=claim_d_low, alpha=alpha, n_domains=n_domains, concentration=concentration,
                 bench_repeats=bench_repeats)
cfg

# %% [markdown]
# ## Learning rates, chosen on a held-out language
#
# A learning rate shared by both models decided the confidence verdicts before (a threefold change reversed
# them), so each model now gets its own: the MoE and AoE at `claim_d_low` train at every rate of `lrs` on a
# language drawn from `tune_seed`, which no claim uses, and keep the rate with the lowest validation loss (the
# router ablation keeps the MoE's, every AoE width AoE's). The precondition `lr_grid_brackets` asks that neither
# choice sits at the grid's edge. The search is cached (`aoe.learning_rate_search`), so the book's builder runs it
# before the notebooks fan out.

# %%
tuning, searched_now = aoe.learning_rate_search(cfg)
chosen = aoe.chosen_learning_rates(tuning, cfg)
edge = aoe.lrs_at_grid_edge(tuning)
fig, ax = plot.subplots()
for label, color in zip(sorted({r["label"] for r in tuning}), plot.PALETTE):
    rs = sorted((r for r in tuning if r["label"] == label), key=lambda r: r["lr"])
    ax.plot([r["lr"] for r in rs], [r["val_loss"] for r in rs], "o-", color=color, label=label)
ax.set(xscale="log", title=f"Held-out language (seed {cfg.tune_seed}): validation loss against learning rate",
       xlabel="learning rate", ylabel="validation NLL (nats/token)")
ax.legend()
display(Markdown(f"The search ({'trained now' if searched_now else 'loaded from the zoo cache'}) chose: "
                 + ", ".join(f"{k} **{v:.3g}**" for k, v in chosen.items())
                 + (f"; at the grid's edge: {', '.join(edge)}." if edge else "; both inside the grid.")))

# %% [markdown]
# ## Training
#
# The loss is the next-token cross-entropy plus each layer's auxiliary loss; the validation loss is the
# cross-entropy alone on held-out sequences. All models of one seed see the same language and the same batches,
# so their losses are compared seed by seed. The runs are cached like the search (`aoe.pretraining_results`) and
# trained by the builder's warm-up, so the manifest lists their time under `zoo_warmup`.

# %%
runs, trained_now = aoe.pretraining_results(cfg, chosen)
print(f"{len(runs)} runs ({'trained now' if trained_now else 'loaded from the zoo cache'})")
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
ax.axhline(np.mean([r["bigram"] for r in runs]), color="k", ls="--", label="domain-blind bigram")
ax.axhline(np.mean([r["floor"] for r in runs]), color="k", ls=":", label="true source (floor)")
ax.set(title="Validation loss during training", xlabel="optimizer step",
       ylabel=f"validation NLL (nats/token, mean ± sd, {len(cfg.seeds)} seeds)")
ax.legend();

# %% [markdown]
# ## Final loss and expert-selection entropies, layer by layer
#
# Left: final validation loss per seed (dots) and its mean. Middle and right: confidence entropy (how peaked the
# selection distribution is) and load entropy (how evenly the top-$K$ slots are spread over experts, maximum
# $\log n$) in each layer, measured on the validation set.

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
axes[1].set(title="Confidence entropy", xlabel="layer", ylabel="Ent_conf (nats)", xticks=layers)
axes[2].axhline(np.log(cfg.n_experts), color="k", ls=":", label="perfect balance")
axes[2].set(title="Load entropy", xlabel="layer", ylabel="Ent_load (nats)", xticks=layers)
axes[1].legend(fontsize=8)
axes[2].legend(fontsize=8);

# %% [markdown]
# ## Do experts specialise by domain?
#
# For the last layer of the first verdict seed: the share of each domain's top-$K$ slots that each expert receives. A uniform
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
# ## A router with as many parameters
#
# The paper asks whether AoE's gain is only the extra parameters it spends on selection, and answers with a
# routed MoE whose router is made as large as AoE's $W_\text{down}$. Here that ablation (our reading of it; the
# paper's exact router was not checked) is `MoE, MLP router`: logits $= \operatorname{SiLU}(x W_\text{in}) W_r$
# with $W_\text{in} \in \mathbb R^{d \times n d_\text{low}}$ ($d_\text{low}$ = `claim_d_low`, the shape of
# AoE's $W_\text{down}$) and $W_r \in \mathbb R^{n d_\text{low} \times n}$; its experts are the MoE's, drawn
# from the same seed. Each dot is one seed's paired difference of final validation loss (left) and of the
# layer-averaged confidence entropy (right) against the MoE with the linear router.

# %%
claimed = f"AoE d_low={cfg.claim_d_low}"
others = [claimed, aoe.MLP_ROUTER]
fig, axes = plot.subplots(1, 2)
for j, label in enumerate(others):
    color = plot.PALETTE[labels.index(label)]
    for ax, values in ((axes[0], aoe.paired(final[label], final["MoE"])),
                       (axes[1], conf[label].mean(1) - conf["MoE"].mean(1))):
        ax.scatter([j] * len(values), values, color=color, alpha=0.6)
        ax.errorbar([j + 0.15], [np.mean(values)], yerr=[np.std(values)], fmt="s", color=color, capsize=4)
for ax, title, ylabel in ((axes[0], "Validation loss against the MoE", "paired difference (nats/token)"),
                          (axes[1], "Confidence entropy against the MoE",
                           "paired difference, mean over layers (nats)")):
    ax.axhline(0, color="k", lw=1)
    ax.set_xticks(range(len(others)), [f"{o} - MoE" for o in others])
    ax.set(title=title, ylabel=ylabel)
params = {label: [r for r in runs if r["label"] == label][0]["n_params"] for label in labels}
mlp_gap = aoe.paired(final[aoe.MLP_ROUTER], final["MoE"])
display(Markdown(
    f"Parameters: MoE {params['MoE']:,d}, {claimed} {params[claimed]:,d}, {aoe.MLP_ROUTER} "
    f"{params[aoe.MLP_ROUTER]:,d}. Paired by seed, the MLP router changes the MoE's validation loss by "
    f"{aoe.mean_sd3(mlp_gap)} nats and {claimed} changes it by "
    f"{aoe.mean_sd3(aoe.paired(final[claimed], final['MoE']))} nats; the layer-averaged confidence entropy by "
    f"{aoe.mean_sd3(conf[aoe.MLP_ROUTER].mean(1) - conf['MoE'].mean(1))} and "
    f"{aoe.mean_sd3(conf[claimed].mean(1) - conf['MoE'].mean(1))} nats (mean ± sd over {len(cfg.seeds)} seeds)."))

# %% [markdown]
# ## The claim checks
#
# Criteria fixed in `icml25.aoe` before these runs. Every effect is a per-seed paired difference; the
# precondition `both_learn_the_domains` asks every model (every seed) to have closed at least half the way from the
# domain-blind bigram to the true source's loss.

# %%
closed = [aoe.gap_closed(r["val_loss"], r["bigram"], r["floor"]) for r in runs]
loss_diff = aoe.paired(final[claimed], final["MoE"])
common = {"gap_closed": closed, "lrs_at_grid_edge": len(edge)}
v_loss = check(aoe.LOSS, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
               measured={"loss_diff": loss_diff, **common},
               our_value=f"{claimed} - MoE validation loss {aoe.mean_sd3(loss_diff)} nats "
                         f"(MoE {aoe.mean_sd3(final['MoE'])}, {claimed} {aoe.mean_sd3(final[claimed])})")
plot.show_verdicts(v_loss)

# %%
gap = conf[claimed] - conf["MoE"]  # [seeds, layers], paired by seed
initial = {label: np.array([r["initial_conf_entropy"] for r in runs if r["label"] == label]) for label in labels}
gap0 = initial[claimed] - initial["MoE"]  # the same gap at initialisation
v_conf = check(aoe.CONFIDENCE, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
               measured={"entropy_diff": gap.mean(1), "initial_entropy_diff": gap0.mean(1), **common},
               our_value=f"Ent_conf gap {claimed} - MoE, mean over layers, {aoe.mean_sd3(gap.mean(1))} nats "
                         f"(at initialisation {aoe.mean_sd3(gap0.mean(1))})")
plot.show_verdicts(v_conf)

# %%
slopes = aoe.depth_slope(gap)
v_deep = check(aoe.DEEPER, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
               measured={"depth_slope": slopes, "n_layers": cfg.n_layers, **common},
               our_value=f"slope of the gap over {cfg.n_layers} layers {aoe.mean_sd3(slopes)} nats per layer "
                         f"(layer 0 {aoe.mean_sd3(gap[:, 0])}, layer {cfg.n_layers - 1} {aoe.mean_sd3(gap[:, -1])})")
plot.show_verdicts(v_deep)

# %% [markdown]
# ## Throughput
#
# At the training models' width ($d$ = 48) a step is bound by per-operation overhead, so its time says little
# about routing. The throughput is therefore timed on one layer at `bench_shape` = $(d, d_\text{ffn},
# d_\text{low})$ (at `ci` 256, 512 and 64, the paper's $d_\text{low}$ for its throughput figure) on
# `bench_tokens` tokens: forward and backward of the layer's output and its Eq. 6 loss. Both use the compiled
# `expert_ffn` kernel; AoE additionally computes all $n$ low-rank projections, the price of routing without a
# router. The two layers are timed in turn over `bench_repeats` interleaved rounds (`icml25.ops.bench.interleaved`:
# the order rotates, each timed unit lasts at least 20 ms), so load changes on this shared machine hit both alike,
# and the ratio is taken round by round.
#
# **Changed after the verdicts of identical builds were seen** (recorded in the chapter's ledger with the verdicts
# seen before it). The claim was first decided on the rounds of one timing of one pair of layers drawn from one
# seed: a t interval over a few hundred rounds. Identical builds gave intervals that did not overlap, and labels
# that flipped, because the rounds of one timing share whatever changes from one timing to the next, so they are
# not independent units of it. Repeated timings (calibration runs on seeds no verdict uses, in separate processes
# at different times) found two such sources: the layers a timing draws (their routing, where their tensors sit),
# which vary from block to block within one process, and the machine's state over minutes, which blocks timed one
# after the other share, in one process or each in a fresh one. The claim is now decided over **blocks**: one per
# verdict seed, each with its own layers and tokens, its ratio the mean over its rounds; the interval is a t
# interval over the blocks' ratios, and the rounds per block are chosen so that the timing costs what the single
# timing did. The bar (0.85) is unchanged. The blocks capture the first source, not the second: the interval is
# honest about the layers, not about the hour a build ran in, so a ratio close to the bar can still be decided
# differently by builds at different times. **Changed again after that design's verdict (reproduced) and three
# identical re-timings (inconclusive, refuted, inconclusive) were seen** (their values are in the ledger's deviation
# record for this claim): the interval
# now also carries the spread that a whole build shares, the between-run sd of a build's mean measured on the
# calibration runs alone (`aoe.THROUGHPUT_CALIBRATION_RUNS`: nine timings of eight blocks, the random-effects
# estimate `aoe.throughput_run_sd`), added to the blocks' standard error. A ratio within about two of those sds of the
# bar is then inconclusive whatever the number of blocks; a build whose mean lands beyond that spread still
# decides, so the label can still move between builds, only more rarely (the spread was estimated on nine runs of
# one session, part of them before a change to the expert kernel both layers run).

# %%
from scipy import stats

from icml25.core.claims import t_interval

blocks, foreign_cpu_share = aoe.throughput_blocks(cfg, cfg.seeds)
claimed_bench = list(blocks[0])[1]
block_ratios = [aoe.block_ratio(b) for b in blocks]
v_tp = check(aoe.THROUGHPUT, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
             measured={"block_ratio": block_ratios, "rounds_per_block": min(len(b["MoE"]) for b in blocks),
                       "moe_cv": max(aoe.time_cv(b["MoE"]) for b in blocks), "foreign_cpu_share": foreign_cpu_share},
             our_value=f"{claimed_bench} at d = {cfg.bench_shape[0]}: {np.mean(block_ratios):.1%} of MoE's tokens/s "
                       f"(mean of {len(blocks)} blocks of {cfg.bench_repeats} rounds)")
round_ratios = [np.array(b[claimed_bench]) / np.array(b["MoE"]) for b in blocks]
within = np.array([t_interval(r, 0.95) for r in round_ratios])  # each block's own interval over its rounds
effect = v_tp.record["effect"]
fig, ax = plot.subplots()
ax.errorbar(cfg.seeds, within[:, 0], yerr=[within[:, 0] - within[:, 1], within[:, 2] - within[:, 0]], fmt="o",
            color=plot.PALETTE[0], capsize=3, label="one block: mean of its rounds, t interval over them")
if effect["ci_low"] is not None:
    ax.axhspan(effect["ci_low"], effect["ci_high"], color=plot.PALETTE[1], alpha=0.25,
               label="the claim's interval over the blocks")
ax.axhline(aoe.THROUGHPUT.effects[0].null, color="k", ls="--", lw=1, label="the bar")
ax.set(title=f"{claimed_bench} over MoE tokens/s, one block per seed", xlabel="verdict seed (block)",
       ylabel="throughput ratio")
ax.legend()
plot.show_verdicts(v_tp)

# %%
pooled = t_interval(np.concatenate(round_ratios), 0.95)
blocks_only = t_interval(np.array(block_ratios), 0.95)
calibration_means = [float(np.mean(run)) for run in aoe.THROUGHPUT_CALIBRATION_RUNS]
apart = stats.f_oneway(*round_ratios).pvalue if len(round_ratios) > 1 else None  # blocks against their rounds' noise
display(Markdown(
    f"The blocks' ratios range from {min(block_ratios):.3f} to {max(block_ratios):.3f}; one block's own interval "
    f"over its {cfg.bench_repeats} rounds is {np.mean(within[:, 2] - within[:, 1]) / 2:.3f} wide on each side on "
    f"average" + ("" if apart is None else
                  f", and the blocks differ {'by more than' if apart < 0.05 else 'by no more than'} their rounds' "
                  f"noise explains (one-way ANOVA over the rounds, p = {apart:.2g})")
    + f". Pooled as one sample of {sum(map(len, round_ratios))} rounds, as the earlier decision did, the same "
    f"timings give {pooled[0]:.3f} [{pooled[1]:.3f}, {pooled[2]:.3f}]; over the blocks alone, without the "
    f"between-run sd, {blocks_only[0]:.3f} [{blocks_only[1]:.3f}, {blocks_only[2]:.3f}]. The calibration runs' "
    f"means range from {min(calibration_means):.3f} to {max(calibration_means):.3f}, a between-run sd of "
    f"{aoe.THROUGHPUT_RUN_SD:.4f}, which the claim's interval carries."))

# %% [markdown]
# **What we see.**

# %%
display(Markdown(
    f"Every model closed at least {min(closed):.0%} of the way from the domain-blind bigram "
    f"({aoe.mean_sd3([r['bigram'] for r in runs if r['label'] == 'MoE'])} nats) to the true source "
    f"({aoe.mean_sd3([r['floor'] for r in runs if r['label'] == 'MoE'])} nats). {claimed} against the MoE, "
    f"paired by seed: validation loss {aoe.mean_sd3(loss_diff)} nats (**{v_loss.label}**); confidence entropy "
    f"{aoe.mean_sd3(gap.mean(1))} nats averaged over layers (**{v_conf.label}**; at initialisation, before any "
    f"training, the same gap is {aoe.mean_sd3(gap0.mean(1))}), {aoe.mean_sd3(gap[:, 0])} in layer 0 and "
    f"{aoe.mean_sd3(gap[:, -1])} in layer {cfg.n_layers - 1}, a slope of {aoe.mean_sd3(slopes)} nats per layer "
    f"(larger deeper: **{v_deep.label}**); the throughput, a timing of this machine, is in its own cell above. "
    f"These verdicts are about {cfg.steps} steps of a {cfg.n_layers}-layer model on "
    f"{len(cfg.seeds)} seeds; the paper's gains are measured after 100B tokens on models a thousand times larger."))
