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
# # Which mechanism do tiny transformers learn?
#
# We train tiny Llama models (or, with the `model` knob, any causal LM checkpoint) on the $S_3$ word problem
# with direct-state supervision (at the position of $a_t$ the model must name $s_t = a_1 \cdots a_t$), under two
# conditions that share every seed's initialisation and data order:
#
# * **plain**: the state loss alone;
# * **parity_aux**: the same state loss plus `parity_weight` times the cross-entropy of the parity
#   $\varepsilon(s_t) = \sum_{i\le t}\varepsilon(a_i) \bmod 2$ (paper Eq. 1), at every position and every step,
#   read from the residual stream after block `parity_layer` through the final norm and the output head (a logit
#   lens): layer-wise parity supervision, which asks for the parity *early*, as the official code's layer-wise
#   supervision does. A parity loss at the output adds no such pressure (parity is a linear read-out of the state
#   there), and it did not steer in this chapter's previous design.
#
# Both train under a **length curriculum**: stories start at `start_length` actions and grow one action at a time
# to the training length $T$ over the first `ramp` share of the steps, then stay at $T$.
#
# **A precondition.** A mechanism is only worth reading in a model that solves the task: a run has *learned* if
# its held-out accuracy of $s_T$ at $t = T$ is at least `st.LEARNED_ACCURACY`. Runs that miss it are shown and
# counted but get no label and enter no claim.
#
# **Three signatures, one vote.** Each learned run is read three ways, each scaled so that 0 is what AA predicts
# and 1 what PAA predicts:
#
# 1. **errors**: among the errors made where the model still tracks (accuracy at least `st.ABOVE_CHANCE`), the
#    share that keep the true parity, scaled from chance;
# 2. **probes**: logistic-regression probes for $s_t$ and $\varepsilon(s_t)$ at every layer, pooled over
#    positions as in the official code; the parity *surplus* over what the state probe implies, at the layers that
#    have not yet resolved the state;
# 3. **patching**: the first action is swapped for one of the same or of the other parity, and the clean run's
#    residual stream at one layer and one token is replaced by the corrupted run's; the last token's share of the
#    effect after `early_layer` blocks, parity-changing minus parity-keeping swap.
#
# A signature votes AA at or below 1/3 and PAA at or above 2/3; a run is AA-like (PAA-like) when every voting
# signature (`st.VOTING`) votes for it. Which signatures vote was chosen from the rule's **positive control** on the
# calibration seeds (table at the end): the `parity_aux` runs are forced to compute the parity after block 1, so a
# signature that cannot vote PAA on them cannot be part of the rule. Only the probe signature passed; the error and
# patching signatures are drawn and tabled but do not vote. AA-like therefore means only "no parity surplus": the
# rule has no positive test for an associative scan.
#
# **Does the state computation use the parity?** The parity loss of `parity_aux` is a logit lens after block
# `parity_layer`, so a linear probe there reads the parity by construction: the probe signature of a `parity_aux`
# run is guaranteed, not found. What the loss does not train is the state's *dependence* on that parity. So in each
# run the parity is **erased** from the residual stream after block `parity_layer` and the rest of the model re-run;
# the accuracy lost at the trained positions $t \le T$ is the run's erasure drop (`st.parity_erasure_drops`). The
# erasure is LEACE, least-squares concept erasure (Belrose et al., 2023), fitted on the rows $x$ of held-out "probe"
# stories (every action's position) and their parity $z = \varepsilon(s_t)$, in the paper's closed form
#
# $$r(x) = x - W^{+} P_{W\Sigma_{xz}} W \,(x - \mathbb{E}[x]), \qquad W = (\Sigma_{xx}^{1/2})^{+},$$
#
# with $P_{W\Sigma_{xz}}$ the orthogonal projection onto the span of $W\Sigma_{xz}$: the affine edit of least mean
# squared change $\mathbb{E}\lVert x - r(x)\rVert^2$ after which no linear predictor of $z$ does better than a
# constant. For a binary concept $\Sigma_{xz} \propto \delta$, the difference of the two parity classes' mean rows,
# so $r(x) = x - \delta\,\delta^\top\Sigma_{xx}^{+}(x - \mathbb{E}[x]) / (\delta^\top\Sigma_{xx}^{+}\delta)$: a
# rank-one oblique projection that moves each row along $\delta$ alone and leaves both classes with one mean
# (`st.leace_eraser`, the authors' `concept-erasure` package with the closed form as stated). It is applied at every
# action's position (not at the bos token, whose constant row it was not fitted on). Whether it removed the parity is
# read on a third set of stories: a logistic probe fitted again after the erasure must read the parity at no better
# than `st.PARITY_ERASED` (chance is 0.5) in every `parity_aux` run, `steerable`'s precondition `parity_erased`.
#
# **Controls of the same size.** An edit that changes the residual stream this much may cost accuracy whatever it
# removes. So in every run, `n_ablation_controls` controls are applied at the same positions, each the mean ablation
# of a random direction orthogonal to $\delta$ (the parity classes have one mean along it, so it carries no linear
# parity signal) tilted toward the high-variance principal components until its mean squared change equals the
# erasure's, or, where no single such direction carries that much, a random subspace of the fewest dimensions that
# do, tilted the same way (`st.variance_matched_controls`). Where the whole complement of $\delta$ carries less than
# the erasure's change, no such control exists: a seed counts in `steerable` only when the controls of both its runs
# match the erasure's change within `st.VARIANCE_TOLERANCE` (`st.controls_match`, read from the edits' geometry before
# any flip), and its precondition `variance_matched` asks that at least `st.MATCHED_SEED_SHARE` of the seeds with both
# runs learned are kept (a rule declared after the verdicts on seeds 3400-3407; why: the calibration section below).
#
# **Parity flips beyond an edit of its size, against the unsteered run.** `steerable` is decided per seed. In
# each run, the rate over *all* predictions at $t \le T$ (right or wrong) of predicted states with the *other*
# parity than the true state is counted after the erasure and after the controls (pooled over the
# `n_ablation_controls` controls); their difference is the run's parity flips beyond an edit of the erasure's size
# (`st.ErasureDrops.flip_excess`). The statistic is that quantity in the seed's `parity_aux` run minus the same in
# the seed's `plain` run, which shares its initialisation and data order: the unsteered runs are the claim's null.
# If the parity supervision makes the state computation go through the parity, erasing it flips more predictions
# across the parity classes in the supervised run than in the unsteered one; if training without it makes the
# later blocks read the parity as much, the difference is near 0. A rate, unlike a share of the errors, counts how
# many errors the erasure causes: an erasure that costs a plain run little accuracy flips few of its predictions,
# however its few errors split.
#
# **Reported, not decisive.** The share of the errors with the other parity after the erasure minus after the
# controls (`st.ErasureDrops.wrong_parity_contrast`; a uniform error has the other parity with chance
# $(n!/2)/(n!-1)$, `st.other_parity_chance`, 3/5 for $S_3$) decided before, in the `parity_aux` runs alone, and
# reproduced on seeds 3300-3307; the plain runs met it nearly as well, so it did not separate the supervision from
# training without it. The erasure's accuracy drop minus its controls' decided before that (refuted on seeds
# 3100-3107); the parity loss puts variance on the parity, so a control that changes the stream as much must
# remove more of its other directions (a subspace of up to nearly all of them) and cannot be like-for-like in
# accuracy.
#
# **The earlier measure, reported.** `steerable` was decided before by mean-ablating the parity probe's direction
# (`st.ablate_direction`) against controls of that direction's variance (`st.parity_ablation_drops`). A referee
# showed that the parity stays readable after that ablation, so it measured the direction, not the parity. It is
# still measured and drawn below (with a fixed random direction, and the plain runs' drops), and decides nothing.

# %% tags=["parameters"]
scale = "ci"
seed = None  # the run shown in single-run figures (prefix patching) and the S5 run's seed; None: the first of seeds
model = None  # fine-tuned on the task: "tinylm" (a fresh tiny Llama), a save_pretrained folder, a Hub id; None: scale's
group_n = None  # 3 (S3) or 5 (S5, 120 states; far more training than ci's budget); None: the scale's value
seeds = None  # training seeds per condition; None: the scale's value (`st.config(scale).seeds`)
steps = None  # optimiser steps per run
train_length = None  # actions per training story at the end of the curriculum
start_length = None  # actions per story at the start of the curriculum
n_layers = None  # transformer blocks
parity_weight = None  # weight of the layer-wise parity loss under parity_aux
parity_layer = None  # the block after which parity_aux reads the parity (logit lens)
n_eval = None  # held-out stories for accuracy and errors (length 2 T)
n_probe = None  # stories for the probes (pooled over positions: 1000 rows fit, the rest scored)
n_patch = None  # story pairs for activation patching
n_ablation_controls = None  # variance-matched control directions ablated per run (steerable's control)
s5_steps = None  # optimiser steps of the one S5 run (plain, seed `seed`); None: the scale's value
# full scale: GPT-2 small fine-tuned on the task (model), seeds 100-109, T = 16, 20000 steps of batch 128, lr 1e-3
# (meant for a GPU; not run here, so whether those runs meet the precondition is untested)

# %%
import time

import numpy as np
from scipy.stats import spearmanr

from icml25 import state_tracking as st
from icml25.core import check, plot
from icml25.core.claims import MIN_UNITS, mean_sd
from icml25.core.seeding import one_thread
from IPython.display import Markdown, display

plot.use_style()
cfg = st.config(scale, model=model, group_n=group_n, seeds=seeds, steps=steps, train_length=train_length,
                start_length=start_length, n_layers=n_layers, parity_weight=parity_weight,
                parity_layer=parity_layer, n_eval=n_eval, n_probe=n_probe, n_patch=n_patch,
                n_ablation_controls=n_ablation_controls)
seed = cfg.seeds[0] if seed is None else seed
n_states = len(st.elements(cfg.group_n))
cfg

# %% [markdown]
# ## Training and measuring every run
#
# `st.measure_all` fetches each trained model from the zoo (`st-s3-plain`, `st-s3-parity_aux`; trained once and
# cached) and measures it. The book's builder trains them (and the $S_5$ run below) in its warm-up, before the
# notebooks run (`st.train_design`), so this notebook's runtime is the measurement's. The runs of all seeds and
# both conditions are trained together, in one batched optimisation (`st.train_trackers`: the weights stacked run
# by run, each run on its own initialisation, stories, loss and gradient clipping), which gives each run the model
# a separate run would train, up to float rounding, at a fraction of the CPU time. The curve is the training loss
# (under `parity_aux`, state plus weighted parity loss); the dotted line marks the end of the length curriculum.

# %%
start = time.perf_counter()
reports = st.measure_all(cfg)
measure_seconds = time.perf_counter() - start  # with the runs' training seconds, what a seed costs (power lines)
colors = dict(zip(st.CONDITIONS, plot.PALETTE))
fig, ax = plot.subplots()
for r in reports:
    ax.plot(r.losses, color=colors[r.condition], alpha=0.6,
            label=r.condition if r.seed == cfg.seeds[0] else None)
ax.axvline(int(cfg.ramp * cfg.steps), color="grey", ls=":", lw=1, label=f"curriculum reaches T = {cfg.train_length}")
ax.axhline(np.log(n_states), color="grey", ls="--", lw=1, label=f"chance for the state, ln {n_states}")
ax.set(title="Training loss, every run", xlabel="optimizer step", ylabel="cross-entropy (nats / token)")
ax.legend()
print(f"precondition: accuracy of s_T at t = T = {cfg.train_length} at least {st.LEARNED_ACCURACY}")
for r in reports:
    print(f"{r.condition + ' seed ' + str(r.seed):>20}  accuracy at t = T {r.trained_accuracy:.3f}  "
          f"{'learned' if r.learned else 'NOT learned (excluded)'}")
print(f"{sum(r.learned for r in reports)} of {len(reports)} runs learned the task")

# %% [markdown]
# ## Accuracy by position, and beyond the training length
#
# Every position is supervised, so a run that has learned a length-independent algorithm is right at every $t$;
# one that has not falls off after some $t$. Positions right of the dotted line were never seen in training. The
# error signature reads only positions above the dash-dotted line.

# %%
t = np.arange(1, st.eval_length(cfg) + 1)
fig, ax = plot.subplots()
for c in st.CONDITIONS:
    acc = np.array([r.accuracy for r in reports if r.condition == c])
    ax.errorbar(t, acc.mean(0), yerr=acc.std(0), marker="o", ms=3, capsize=2, color=colors[c],
                label=f"{c} (mean ± sd, {len(acc)} seeds)")
ax.axvline(cfg.train_length + 0.5, color="grey", ls=":", label="training length")
ax.axhline(1 / n_states, color="grey", ls="--", lw=1, label=f"chance (1/{n_states})")
ax.axhline(st.ABOVE_CHANCE, color="grey", ls="-.", lw=1, label="errors read above this")
ax.plot([cfg.train_length], [st.LEARNED_ACCURACY], marker="_", ms=18, mew=2, color="black",
        label=f"precondition at t = T ({st.LEARNED_ACCURACY})")
ax.set(title="State accuracy by position", xlabel="position t (actions read)", ylabel="accuracy of s_t",
       ylim=(0, 1.05))
ax.legend(fontsize=8, loc="upper right");

# %% [markdown]
# ## Probes: where are the state and its parity decodable?
#
# One logistic-regression probe per layer and target, fitted on positions pooled (as in the official code) and
# scored on held-out rows. Left: accuracy scaled from chance (0) to perfect (1), so that a layer holding only
# state information has its parity curve on its state curve; a parity curve *above* the state curve is parity
# decodable ahead of the state (PAA). Right: the same pooled state probes scored position by position.

# %%
fig, axes = plot.subplots(1, 2, figsize=(11, 4))
layers = np.arange(cfg.n_layers + 1)
for c in st.CONDITIONS:
    for target, k, ls in (("state", n_states, "-"), ("parity", 2, "--")):
        z = np.array([st.scaled_probe(r.probes[target], k) for r in reports if r.condition == c and r.learned])
        if len(z):
            axes[0].errorbar(layers + (0.04 if c != "plain" else 0), z.mean(0), yerr=z.std(0), ls=ls, marker="o",
                             capsize=2, color=colors[c], label=f"{c}: {target} ({len(z)} runs)")
axes[0].set(title="Pooled probes by layer (scaled from chance)", xlabel="layer (0 = embeddings)",
            ylabel="probe accuracy, 0 = chance, 1 = perfect", xticks=layers)
axes[0].legend(fontsize=8)
m_plain, k_plain = st.mean_map(reports, "plain", lambda r: r.probes["state_by_t"])
im = axes[1].imshow(m_plain, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis",
                    extent=(0.5, m_plain.shape[1] + 0.5, -0.5, m_plain.shape[0] - 0.5))
tt = np.arange(1, cfg.train_length + 1)
axes[1].step(tt, np.ceil(np.log2(tt)), where="mid", color="white", ls="--", label="ceil(log2 t): scan rounds")
axes[1].set(title=f"State probe by position, plain ({k_plain} runs)", xlabel="position t",
            ylabel="layer (0 = embeddings)", yticks=layers, xticks=tt)
axes[1].grid(False)
axes[1].legend(fontsize=8, loc="lower right")
fig.colorbar(im, ax=axes[1], label="held-out accuracy (mean over runs)");

# %% [markdown]
# ## Activation patching: layer × token maps
#
# The first action is replaced by another of the same parity (left) or of the other parity (right); each cell
# replaces the clean run's residual stream at one layer and one token by the corrupted run's and reports the
# share of the corruption's effect on the final answer it carries (normalised logit difference, clipped to
# [0, 1], mean over story pairs and over the runs that learned the task). An associative scan carries $a_1$'s
# information forward one round per layer, whatever its parity; PAA sends the parity to every later token early,
# so in the right-hand map the last token lights up at an early layer.

# %%
fig, axes = plot.subplots(2, 2, figsize=(10, 6.5))
for i, c in enumerate(st.CONDITIONS):
    for j, kind in enumerate(("same", "different")):
        m, k = st.mean_map(reports, c, lambda r, kind=kind: r.patching[kind])
        im = axes[i, j].imshow(m, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="magma",
                               extent=(0.5, m.shape[1] + 0.5, -0.5, m.shape[0] - 0.5))
        axes[i, j].set(title=f"{c}: {kind}-parity swap of a_1 ({k} runs)", xlabel="patched token t",
                       ylabel="layer (0 = embeddings)", yticks=layers, xticks=tt)
        axes[i, j].grid(False)
fig.colorbar(im, ax=axes, label="share of the effect restored (NLD)");

# %% [markdown]
# Prefix patching (every token up to $t$ replaced at once), for the run with seed `seed` of each condition: where
# the boundary between "the prefix still holds $a_1$'s effect" and "it has moved on" lies at each layer.

# %%
fig, axes = plot.subplots(1, 2, figsize=(10, 3.6))
for ax, c in zip(axes, st.CONDITIONS):
    z = st.get_tracker(cfg, seed, c)
    with one_thread():  # as `st.measure_run`: a second thread only stalls these tiny products on a busy machine
        maps = st.patching_maps(z.model, z.tokenizer, cfg, seed, mode="prefix")
    diff = maps["different"] - maps["same"]
    im = ax.imshow(diff, origin="lower", aspect="auto", vmin=-1, vmax=1, cmap="coolwarm",
                   extent=(0.5, diff.shape[1] + 0.5, -0.5, diff.shape[0] - 0.5))
    ax.set(title=f"{c}, seed {seed}: prefix patching,\nother-parity minus same-parity swap", xlabel="prefix 1 … t",
           ylabel="layer (0 = embeddings)", yticks=layers, xticks=tt)
    ax.grid(False)
fig.colorbar(im, ax=axes, label="NLD difference");

# %% [markdown]
# ## The three signatures and the label, run by run
#
# Each point is one learned run; the shaded bands are the abstention zone (between 1/3 and 2/3) of the two
# signatures drawn. The table lists all three, the number of errors the error signature read, and the label.

# %%
fig, ax = plot.subplots()
for c in st.CONDITIONS:
    rs = [r for r in reports if r.condition == c and r.learned]
    ax.scatter([r.signatures["probes"] for r in rs], [r.signatures["patching"] for r in rs], s=45, color=colors[c],
               label=f"{c} ({len(rs)} runs)")
ax.axvspan(st.AA_BAND, st.PAA_BAND, color="grey", alpha=0.12)
ax.axhspan(st.AA_BAND, st.PAA_BAND, color="grey", alpha=0.12, label="abstention band")
ax.set(title="Each run's probe and patching signatures (0 = AA, 1 = PAA)", xlabel="probe signature (parity surplus)",
       ylabel="patching signature (parity reaches the answer early)", xlim=(-0.3, 1.1), ylim=(-0.3, 1.1))
ax.legend(fontsize=8)
print(f"{'run':>20}  {'label':>11}  acc at T  errors read  errors  probes  patching  beyond-T accuracy"
      "  erasure drop  controls' drop  probe-direction drop  its controls' drop")
for r in reports:
    s_ = r.signatures
    print(f"{r.condition + ' seed ' + str(r.seed):>20}  {r.label:>11}  {r.trained_accuracy:>8.2f}  {r.n_errors:>11}"
          f"  {s_['errors']:>6.2f}  {s_['probes']:>6.2f}  {s_['patching']:>8.2f}  {r.long_accuracy:>17.2f}"
          f"  {r.erasure.erased:>12.3f}  {r.erasure.matched_mean:>14.3f}  {r.ablation.parity:>20.3f}"
          f"  {r.ablation.matched_mean:>18.3f}")

# %% [markdown]
# ## Does the state rest on the parity?
#
# Top: each run's accuracy lost at $t \le T$ when the parity is erased after block `parity_layer` (large dot),
# beside the loss under each of its controls of the same size (small dots); `steerable` asks whether, in the
# parity_aux runs, the large dot lies above the small ones. Bottom: how well a logistic probe fitted again on
# held-out stories reads the parity after the erasure (large dot) and after each control (small dots); the dashed
# line is the precondition's bar, `st.PARITY_ERASED`.

# %%
def _share(errors):
    """A (errors, wrong-parity errors) pair's wrong-parity share."""
    return st.wrong_parity_share(*errors)


fig, axes = plot.subplots(2, 2, figsize=(11, 6.5), sharey="row")
for col, c in enumerate(st.CONDITIONS):
    rs = [r for r in reports if r.condition == c and r.learned]
    for i, r in enumerate(rs):
        e = r.erasure
        for row, (controls, erased) in enumerate(((e.matched, e.erased), (e.parity_after_controls, e.parity_after))):
            axes[row, col].scatter([i] * len(controls), controls, s=10, color="grey", alpha=0.6,
                                   label="controls of the same size" if i == 0 else None)
            axes[row, col].scatter([i], [erased], s=50, color=colors[c], label="parity erased" if i == 0 else None)
    axes[0, col].axhline(0, color="grey", lw=1)
    axes[1, col].axhline(st.PARITY_ERASED, color="grey", ls="--", lw=1, label="parity_erased's bar")
    axes[0, col].set(title=f"{c}: accuracy lost, edit after block {cfg.parity_layer}")
    axes[1, col].set(title=f"{c}: parity probe after the edit (held out)", xlabel="run (seed)")
    for row in (0, 1):
        axes[row, col].set(xticks=range(len(rs)), xticklabels=[str(r.seed) for r in rs])
        axes[row, col].tick_params(axis="x", labelrotation=45)
        axes[row, col].legend(fontsize=8)
axes[0, 0].set_ylabel("state accuracy lost at t <= T")
axes[1, 0].set_ylabel("parity probe accuracy")
for r in reports:
    if r.learned:
        e = r.erasure
        print(f"{r.condition + ' seed ' + str(r.seed):>20}: erasure drop {e.erased:.3f}, controls' mean drop "
              f"{e.matched_mean:.3f}; parity probe after the erasure {e.parity_after:.3f}, after the controls "
              f"{min(e.parity_after_controls):.3f}-{max(e.parity_after_controls):.3f}; the erasure's mean squared "
              f"change {e.change_share:.1%} of the residual variance; controls of {min(e.matched_dimensions)}-"
              f"{max(e.matched_dimensions)} dimensions")

# %% [markdown]
# ## Which parity do the errors have?
#
# Each learned run's share of the state errors at $t \le T$ (held-out "eval" stories) whose predicted state has the
# other parity than the true one, after the erasure (large dot) and after its controls (small dot, their errors
# pooled); the dashed line is the chance share of a uniform error, `st.other_parity_chance`. `steerable` decides, in
# the parity_aux runs, on the large dot minus the small one; the plain runs are drawn for comparison and enter no
# criterion.

# %%
chance_other = st.other_parity_chance(cfg.group_n)
fig, axes = plot.subplots(1, 2, figsize=(11, 3.8), sharey=True)
for ax, c in zip(axes, st.CONDITIONS):
    rs = [r for r in reports if r.condition == c and r.learned]
    ax.scatter(range(len(rs)), [r.erasure.erased_wrong_parity for r in rs], s=50, color=colors[c],
               label="after the erasure")
    ax.scatter(range(len(rs)), [r.erasure.matched_wrong_parity for r in rs], s=20, color="grey",
               label="after its controls (pooled)")
    ax.axhline(chance_other, color="grey", ls="--", lw=1, label=f"chance {chance_other:.2f}")
    ax.set(title=f"{c}: errors at t <= T with the other parity", xlabel="run (seed)", ylim=(-0.05, 1.05),
           xticks=range(len(rs)), xticklabels=[str(r.seed) for r in rs])
    ax.tick_params(axis="x", labelrotation=45)
    ax.legend(fontsize=8)
axes[0].set_ylabel("wrong-parity share of the errors")
for r in reports:
    if r.learned:
        e = r.erasure
        print(f"{r.condition + ' seed ' + str(r.seed):>20}: wrong-parity share {e.erased_wrong_parity:.3f} of "
              f"{e.erased_errors[0]} errors after the erasure, {e.matched_wrong_parity:.3f} of "
              f"{sum(n_ for n_, _ in e.matched_errors)} after its {len(e.matched_errors)} controls pooled "
              f"(each control: {min(_share(x) for x in e.matched_errors):.3f}-"
              f"{max(_share(x) for x in e.matched_errors):.3f}); difference {e.wrong_parity_contrast:+.3f} "
              f"(chance {chance_other:.2f})")

# %% [markdown]
# **The earlier measure (reported, decides nothing).** Each run's accuracy lost when the parity probe's direction
# after block `parity_layer` is mean-ablated (large dot), beside the loss for each of its variance-matched control
# directions (small dots) and a fixed random direction (cross).

# %%
fig, axes = plot.subplots(1, 2, figsize=(11, 3.8), sharey=True)
for ax, c in zip(axes, st.CONDITIONS):
    rs = [r for r in reports if r.condition == c and r.learned]
    for i, r in enumerate(rs):
        ab = r.ablation
        ax.scatter([i] * len(ab.matched), ab.matched, s=10, color="grey", alpha=0.6,
                   label="variance-matched controls" if i == 0 else None)
        ax.scatter([i], [ab.random], marker="x", color="black", label="random direction" if i == 0 else None)
        ax.scatter([i], [ab.parity], s=50, color=colors[c], label="parity direction" if i == 0 else None)
    ax.axhline(0, color="grey", lw=1)
    ax.set(title=f"{c}: accuracy lost by mean ablation after block {cfg.parity_layer}", xlabel="run (seed)",
           xticks=range(len(rs)), xticklabels=[str(r.seed) for r in rs])
    ax.tick_params(axis="x", labelrotation=45)
    ax.legend(fontsize=8)
axes[0].set_ylabel("state accuracy lost at t <= T");

# %% [markdown]
# **Does ablating the parity probe's direction remove the parity?** (A check added after the earlier measure's
# verdict on seeds 2900-2907 was seen; described, not part of any criterion.) Mean ablation removes one direction,
# the probe's; if the parity stays linearly readable after it from the rest of the stream, the ablation drop
# measures what removing that direction costs, not what losing the parity costs, which is why the erasure above
# now decides. Below, for each learned parity_aux run, a parity probe (pooled, as above) is fitted again after
# block `parity_layer` on the "probe" stories with the probe direction mean-ablated.

# %%
parity_after = {}
with one_thread():  # as `st.measure_run`
    for r in reports:
        if r.condition == "parity_aux" and r.learned:
            z = st.get_tracker(cfg, r.seed, r.condition)
            probe_acts = st.eval_actions(cfg, cfg.n_probe, cfg.train_length, "probe")
            w, mu = st.parity_direction(z.model, z.tokenizer, cfg.group_n, probe_acts, cfg.parity_layer)
            h = st.hidden_states(z.model, probe_acts, z.tokenizer, cfg.group_n)[cfg.parity_layer]
            parity = st.parity_of_states(st.state_sequence(probe_acts, cfg.group_n), cfg.group_n).numpy()
            parity_after[r.seed] = st.pooled_probe(st.ablate_direction(h, w, mu).numpy(), parity)[0]
            print(f"parity_aux seed {r.seed}: parity probe after block {cfg.parity_layer} {r.parity_readable:.3f}, "
                  f"with the probe direction mean-ablated {parity_after[r.seed]:.3f}")

# %% [markdown]
# ## Claim checks
#
# The criteria were fixed in `icml25.state_tracking` before any run; the verdicts below are computed from the
# measurements above, over the runs that learned the task (mean ± sd over those runs or seed pairs).
#
# **A null control for `two_mechanisms`.** A vote over noisy signatures could hand out both labels by chance.
# So every learned run is also read with the parity replaced by `st.shuffled_parity`, a fixed random split of
# the states into two halves that is not a homomorphism (shuffled parity labels): errors, probes and the
# same/other-class swaps of the patching maps all refer to that split. No algorithm for the word problem computes
# it first, so the rule should find no PAA-like run there; if the claim's criterion also passes on this null, the
# verdict is inconclusive.
#
# **A positive control for the rule.** The `parity_aux` runs are supervised to compute the parity after block 1:
# they are planted parity-first runs. `two_mechanisms` and `aa_generalises` count labels, so both declare that the
# rule labels at least half of those runs PAA-like (`st.POSITIVE_CONTROL_SHARE`); a rule that cannot see a planted
# parity-first run cannot count PAA-like runs, and the claims are then inconclusive for that reason. Being planted,
# these runs are not evidence that models *learn* PAA: `two_mechanisms` counts the labels of the plain runs only.
# The same planting makes their probe signature 1 by design, so it shows the rule can see parity, not that
# steering works: `steerable` is decided on which parity the errors have after the parity's erasure, against its
# controls of the same size, instead.
#
# **What each claim decides.** `two_mechanisms` is decided on the PAA-like share of the learned plain runs against
# its share on the null; the AA-like share is printed as a description only, since "AA-like" is the absence of a
# parity surplus and the null labels every run so. `aa_generalises` compares, within each seed whose two runs got
# different labels, the AA-like run with the PAA-like one; its precondition `off_the_floor` asks that the runs of one
# label still track above chance past one step beyond $T$ (positions where all runs are at chance cannot show
# one mechanism generalising better).

# %%
m = st.summarise(reports)
ms = mean_sd
steerable = check(st.STEERABLE, measured={k: m[k] for k in (
    "flip_excess_aux_minus_plain", "flip_excess", "erased_flip_rate", "matched_flip_rate",
    "parity_after_erasure_both",
    "edit_errors_min", "erased_wrong_parity", "matched_wrong_parity", "wrong_parity_contrast_by_run", "n_forced",
    "parity_probe_min", "parity_after_erasure", "change_mismatch",
    "n_not_learned", "erasure_drop", "erasure_matched_drop", "erasure_change_share", "erased_minus_matched",
    "parity_after_erasure_by_run", "parity_after_controls_min", "ablation_drop", "matched_ablation_drop",
    "control_ablation_drop", "parity_variance_share", "parity_minus_matched", "steer_ablation_diff",
    "steer_probes_diff", "steer_patching_diff", "steer_errors_diff", "n_pairs", "n_kept_pairs", "seed_matched",
    "steerable_seeds")},
    seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
    our_value=f"over the {m['n_kept_pairs']} kept seeds of the {m['n_pairs']} with both runs learned (kept: the "
              f"controls of both runs match the erasure's change within {st.VARIANCE_TOLERANCE:.0%}), parity flips "
              f"beyond the controls (rate over all "
              f"predictions at t <= T of states with the other parity, after the parity's erasure (LEACE) minus "
              f"after its controls, pooled): parity_aux {ms(m['flip_excess']['parity_aux'])} "
              f"({ms(m['erased_flip_rate']['parity_aux'])} vs {ms(m['matched_flip_rate']['parity_aux'])}), plain "
              f"{ms(m['flip_excess']['plain'])} ({ms(m['erased_flip_rate']['plain'])} vs "
              f"{ms(m['matched_flip_rate']['plain'])}), paired difference {ms(m['flip_excess_aux_minus_plain'])}; "
              f"parity probe after the erasure at most {m['parity_after_erasure_both']:.3f} in either condition. "
              f"Reported, not decisive: share of the errors at t <= T with the other parity in the parity_aux runs "
              f"{ms(m['erased_wrong_parity']['parity_aux'])} after the erasure, "
              f"{ms(m['matched_wrong_parity']['parity_aux'])} after its controls, difference "
              f"{ms(m['wrong_parity_contrast_by_run']['parity_aux'])} "
              f"(chance {st.other_parity_chance(cfg.group_n):.2f}; fewest errors "
              f"under an edit {m['edit_errors_min']:.0f}); plain runs: "
              f"{ms(m['erased_wrong_parity']['plain'])} after the erasure, "
              f"{ms(m['matched_wrong_parity']['plain'])} after its controls; "
              f"accuracy lost at t <= T when the parity is erased "
              f"{ms(m['erasure_drop']['parity_aux'])}, under a control of the same size "
              f"{ms(m['erasure_matched_drop']['parity_aux'])}, "
              f"difference {ms(m['erased_minus_matched']['parity_aux'])} (the "
              f"erasure changes {ms(m['erasure_change_share']['parity_aux'])} of the residual variance; parity probe "
              f"after it at most {m['parity_after_erasure']:.3f}); described, not decisive: plain runs' erasure drop "
              f"{ms(m['erasure_drop']['plain'])} (beyond their controls {ms(m['erased_minus_matched']['plain'])}); "
              f"the parity probe direction's mean ablation costs the parity_aux runs "
              f"{ms(m['ablation_drop']['parity_aux'])} and its variance-matched controls "
              f"{ms(m['matched_ablation_drop']['parity_aux'])}, difference {ms(m['parity_minus_matched']['parity_aux'])}; "
              f"probe signature rise {ms(m['steer_probes_diff'])} (guaranteed by the parity loss), errors "
              f"{ms(m['steer_errors_diff'])}, patching {ms(m['steer_patching_diff'])}")
plot.show_verdicts(steerable)
ref = st.REFEREE_3700
display(Markdown(
    f"**What the label means, and a referee's re-decision.** A referee with no stake re-decided steerable on fresh "
    f"seeds {ref['seeds']} after this verdict was recorded, with only the seeds changed: {ref['steerable']}, "
    f"{ref['flip_excess_aux_minus_plain'][0]:+.3f} [{ref['flip_excess_aux_minus_plain'][1]:+.3f}, "
    f"{ref['flip_excess_aux_minus_plain'][2]:+.3f}], {ref['kept'][0]} of {ref['kept'][1]} seeds kept. Where the "
    f"edits act, the controls fell short of the erasure's change by up to {ref['eval_shortfall_aux']:.0%} in the "
    f"parity_aux runs, which explains at most {ref['flips_from_shortfall']:.4f} of a run's flip rate, so the "
    f"contrast is not an artefact of the edits' sizes. The label is narrower than the paper's sentence: parity "
    f"supervision makes the state computation go through a parity that is linearly present after block "
    f"{cfg.parity_layer}; it does not show that these runs resolve the state within its parity class, as PAA does "
    f"(two_mechanisms, below, reads that)."))

# %%
if m["is_aa"]:  # the null comparison needs learned runs to compare
    two = check(st.TWO_MECHANISMS, measured={k: m[k] for k in (
        "is_aa", "is_paa", "n_not_learned", "n_signatures_read", "forced_is_paa", "labels")}, seeds=cfg.seeds,
        calibration_seeds=cfg.calibration_seeds, scale=scale,
        our_value=f"of the {m['n_unsteered']} learned plain runs {m['n_paa']} PAA-like (decisive), {m['n_aa']} "
                  f"AA-like (described: no parity surplus), {m['n_mixed_label']} mixed ({m['n_not_learned']} runs "
                  f"of {len(reports)} not learned); against the shuffled parity {int(sum(m['null']['is_paa']))} "
                  f"PAA-like, {int(sum(m['null']['is_aa']))} AA-like",
        null=m["null"])
    plot.show_verdicts(two)
else:
    two = None
    print("no run learned the task, so no run has a label: two_mechanisms is not checked here")

# %%
gen = check(st.AA_GENERALISES, measured={k: m[k] for k in (
    "aa_minus_paa_long_accuracy", "n_mixed_seeds", "n_not_learned", "n_signatures_read", "forced_is_paa",
    "far_above_chance", "mixed_aa_conditions")},
    seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
    our_value=f"{m['n_mixed_seeds']} seeds with one AA-like and one PAA-like run (the AA-like run plain in "
              f"{m['mixed_aa_conditions'].count('plain')}, so those pairs are plain vs parity_aux); beyond-T "
              f"accuracy AA-like {ms(m['long_accuracy_aa'])} vs PAA-like {ms(m['long_accuracy_paa'])}; the better "
              f"label's accuracy over T + 2 <= t <= 2T is {m['far_above_chance']:+.3f} from chance")
plot.show_verdicts(gen)

# %% [markdown]
# ## $S_5$: the same pipeline on 120 states
#
# The paper's main group is $S_5$. At `ci` one plain run (seed `seed`) is trained on $S_5$ with the settings of
# `st.S5_TRAIN` (2-action stories: composing two actions is already a 120 × 120 table to learn) and measured
# exactly as above: accuracy by position, the same precondition, probes, patching and the three signatures. It
# enters no claim: it checks that the pipeline runs on $S_5$ and shows what a model of this budget learns there.
# The calibration recorded in the module expected this run to miss the precondition; the lines below say what it
# did.

# %%
cfg5 = st.s5_config(scale, model=model, steps=s5_steps)
r5 = st.measure_run(cfg5, seed, "plain")
k5 = len(st.elements(5))
fig, axes = plot.subplots(1, 2, figsize=(10, 3.6))
t5 = np.arange(1, st.eval_length(cfg5) + 1)
axes[0].plot(t5, r5.accuracy, marker="o", color=colors["plain"], label=f"plain, seed {seed}")
axes[0].axvline(cfg5.train_length + 0.5, color="grey", ls=":", label="training length")
axes[0].axhline(1 / k5, color="grey", ls="--", lw=1, label=f"chance (1/{k5})")
axes[0].set(title="S5: state accuracy by position", xlabel="position t (actions read)", ylabel="accuracy of s_t",
            ylim=(0, 1.05), xticks=t5)
axes[0].legend(fontsize=8)
layers5 = np.arange(cfg5.n_layers + 1)
for target, k, ls in (("state", k5, "-"), ("parity", 2, "--")):
    axes[1].plot(layers5, st.scaled_probe(r5.probes[target], k), ls=ls, marker="o", color=colors["plain"],
                 label=target)
axes[1].set(title="S5: pooled probes by layer (scaled from chance)", xlabel="layer (0 = embeddings)",
            ylabel="probe accuracy, 0 = chance, 1 = perfect", xticks=layers5)
axes[1].legend(fontsize=8)
print(f"S5, {cfg5.steps} steps on {cfg5.train_length}-action stories: accuracy by position "
      + " ".join(f"{a:.2f}" for a in r5.accuracy))
print(f"accuracy at t = T = {cfg5.train_length}: {r5.trained_accuracy:.3f} -> "
      f"{'learned' if r5.learned else 'NOT learned'}; label: {r5.label}; signatures: "
      + ", ".join(f"{name} {r5.signatures[name]:.2f}" for name in st.SIGNATURES))

# %% [markdown]
# ## What we see
#
# Generated from this build's measurements:

# %%
learned = [r for r in reports if r.learned]
PARITY_STILL_READ = st.LEARNED_ACCURACY  # "still readable": the bar a probe's accuracy meets to read a variable
votes = {c: [r.label for r in learned if r.condition == c] for c in st.CONDITIONS}
lines = [f"* **Training.** {len(learned)} of {len(reports)} runs met the precondition at $T = {cfg.train_length}$; "
         f"beyond the training length their mean accuracy was "
         f"{ms([r.long_accuracy for r in learned]) if learned else 'not measured'}."]
for c in st.CONDITIONS:
    rs = [r for r in learned if r.condition == c]
    if rs:
        lines.append(f"* **{c}.** labels: " + ", ".join(f"{lab} ×{votes[c].count(lab)}" for lab in
                                                          ("AA-like", "PAA-like", "mixed") if votes[c].count(lab))
                     + "; signatures (mean ± sd): " + "; ".join(
                         f"{name} {ms([r.signatures[name] for r in rs])}" for name in st.SIGNATURES))
forced = [r for r in learned if r.condition == "parity_aux"]
if forced:
    lines.append(f"* **Positive control.** The rule labels {sum(r.label == 'PAA-like' for r in forced)} of "
                 f"{len(forced)} learned parity_aux runs (parity supervised after block 1) PAA-like; the claims that "
                 f"count labels ask for at least {st.POSITIVE_CONTROL_SHARE:.0%}. Their probe signatures are "
                 f"{ms([r.signatures['probes'] for r in forced])}; their error signatures, which do not vote, "
                 f"{ms([r.signatures['errors'] for r in forced])}.")
if two is not None:
    lines.append(f"* **AA-like, described.** {m['n_aa']} of the {m['n_unsteered']} learned plain runs are AA-like; "
                 "that label means only that the probe signature found no parity surplus (the rule has no positive "
                 "test for an associative scan), and the shuffled-parity null labels every run so, which is why the "
                 "AA-like share does not decide `two_mechanisms`.")
if two is not None and two.label == "inconclusive":
    paa_effect = st.TWO_MECHANISMS.effects[0]
    eff = next(e for e in two.record["effects"] if e["name"] == paa_effect.name)
    vs_null = next((c for c in two.record.get("null", {}).get("comparisons", []) if c["name"] == paa_effect.name),
                   None)
    interval = (f" (exact interval [{eff['ci_low']:.3f}, {eff['ci_high']:.3f}])" if eff["ci_low"] is not None
                else " (no interval)")
    head = (f"* **What would decide `two_mechanisms`.** {m['n_paa']} of the {m['n_unsteered']} learned plain runs "
            f"are PAA-like{interval}. ")
    if eff["verdict"] == "reproduced" and vs_null is not None and not vs_null["beats_null"]:
        need = two.record.get("units_needed")
        seed_seconds = (np.nansum([r.train_seconds for r in reports]) + measure_seconds) / len(cfg.seeds)
        cost = (f"A seed (its plain run, which counts, and its parity_aux run, the positive control) costs about "
                f"{seed_seconds:.0f} s at this scale: its share of the design's training in the warm-up and of "
                f"this notebook's measurements")
        lines.append(head + f"That interval lies above 0, but the share does not beat the null's "
                     f"({vs_null['null_mean']:.2f}; permutation p = {vs_null['p_value']:.2f}): reproducing it needs "
                     "more PAA-like runs without steering than the rule finds on the shuffled parity; refuting it "
                     f"needs the exact interval wholly below {paa_effect.min_effect:g}. "
                     + (f"So it is undecidable at this scale, which trains {len(cfg.seeds)} seeds: if the observed "
                        f"shares held, {need} learned plain runs, read against as many on the null, would beat the "
                        f"null (the record's power line, `units_needed`, from Fisher's exact test). {cost}, so "
                        f"deciding it would take about {need * seed_seconds:,.0f} s, with no learning failures."
                        if need else "At the observed shares no feasible number of runs beats the null (the record "
                        f"says why). {cost}."))
    else:
        need = eff.get("units_needed")
        lines.append(head + "Reproducing it needs PAA-like runs to appear without steering, more often than on the "
                     f"null; refuting it needs the exact interval wholly below {paa_effect.min_effect:g}. "
                     + (f"If the observed share held, {need} learned plain runs would decide it (the record's "
                        f"`units_needed`, exact for a share; this build trained {len(cfg.seeds)})" if need else
                        "At the observed share no feasible number of runs decides it (the record says why)")
                     + ".")
erasure = m["erasure_drop"]
if all(erasure.values()):
    lines.append(f"* **Steering, by erasure.** Erasing the parity after block {cfg.parity_layer} (LEACE) costs the "
                 f"parity_aux runs {ms(erasure['parity_aux'])} of their accuracy at t <= T and the plain runs "
                 f"{ms(erasure['plain'])}. After it, a parity probe fitted again on held-out stories reads "
                 f"{ms(m['parity_after_erasure_by_run']['parity_aux'])} in the parity_aux runs (highest "
                 f"{m['parity_after_erasure']:.3f}; `parity_erased` asks at most {st.PARITY_ERASED:g}, chance 0.5); "
                 f"after a control it still reads at least {min(m['parity_after_controls_min']['parity_aux']):.3f}. "
                 f"The erasure changes the parity_aux runs' residual stream there by "
                 f"{ms(m['erasure_change_share']['parity_aux'])} of its variance (plain runs: "
                 f"{ms(m['erasure_change_share']['plain'])}); controls that change it as much and carry no parity "
                 f"signal cost them {ms(m['erasure_matched_drop']['parity_aux'])} (plain runs: "
                 f"{ms(m['erasure_matched_drop']['plain'])}), so losing the parity costs "
                 f"{ms(m['erased_minus_matched']['parity_aux'])} of accuracy beyond an edit of its size (reported, not "
                 f"decisive; the largest relative miss of a control's change was {m['change_mismatch']:.1e}, "
                 f"tolerance {st.VARIANCE_TOLERANCE:.0%}). The probe signature's rise "
                 f"under parity_aux ({ms(m['steer_probes_diff'])}) is guaranteed by the parity loss (a logit lens for "
                 "the parity is a linear probe), so it is the rule's positive control, not evidence of steering.")
    chance_other = st.other_parity_chance(cfg.group_n)
    flips = m["flip_excess"]
    lines.append(f"* **Parity flips beyond the controls (`steerable`'s statistic).** After the erasure, "
                 f"{ms(m['erased_flip_rate']['parity_aux'])} of the parity_aux runs' predictions at t <= T name a "
                 f"state of the other parity than the true one, after its controls (pooled) "
                 f"{ms(m['matched_flip_rate']['parity_aux'])}: {ms(flips['parity_aux'])} beyond an edit of its size. "
                 f"In the plain runs: {ms(m['erased_flip_rate']['plain'])} after the erasure, "
                 f"{ms(m['matched_flip_rate']['plain'])} after the controls, {ms(flips['plain'])} beyond. Per kept "
                 f"seed ({m['n_kept_pairs']} of the {m['n_pairs']} with both runs learned), parity_aux minus plain: "
                 f"{ms(m['flip_excess_aux_minus_plain'])} (smallest effect {st.WRONG_PARITY_MIN_EFFECT:g}; "
                 f"`parity_erased` reads both conditions: a probe after the erasure reads at most "
                 f"{m['parity_after_erasure_both']:.3f}, the plain runs "
                 f"{ms(m['parity_after_erasure_by_run']['plain'])}).")
    left_out = [row for row in m["steerable_seeds"] if not row["kept"]]
    lines.append(f"* **Which seeds `steerable` keeps.** A seed's unit counts only when the controls of both its runs "
                 f"match the erasure's mean squared change within {st.VARIANCE_TOLERANCE:.0%}, read from the edits' "
                 f"geometry before any flip; `variance_matched` asks that at least {st.MATCHED_SEED_SHARE:.0%} of "
                 f"the seeds with both runs learned are kept. Here {m['n_kept_pairs']} of {m['n_pairs']} are "
                 f"({np.mean(m['seed_matched']):.0%})"
                 + (": " + "; ".join(f"seed {row['seed']} is left out (" + ", ".join(
                     f"the {c} run's controls reach {row[c + '_ratio']:.2f} of the erasure's change"
                     for c in st.CONDITIONS if abs(row[c + '_ratio'] - 1) > st.VARIANCE_TOLERANCE) + ")"
                     for row in left_out)
                    + ". A share below 1 is what the whole complement of the parity classes' mean difference "
                    "carries: less than the erasure's change, so no edit of its size without parity signal exists "
                    "there (why: the calibration section below)." if left_out else "."))
    lines += ["", "| seed | plain run: controls' change over the erasure's | parity_aux run: the same | kept |",
              "|---" * 4 + "|", *(f"| {row['seed']} | {row['plain_ratio']:.3f} | {row['parity_aux_ratio']:.3f} "
                                  f"| {'yes' if row['kept'] else 'no, left out'} |" for row in m["steerable_seeds"]),
              "", "(each run's control farthest from the erasure's change; generated from this build's record)", ""]
    lines.append(f"* **Which parity the errors have (reported; it decided under the declaration before).** After the "
                 f"erasure, {ms(m['erased_wrong_parity']['parity_aux'])} of the parity_aux runs' state errors at "
                 f"t <= T predict a state of the other parity than the true one; after its controls (errors pooled), "
                 f"{ms(m['matched_wrong_parity']['parity_aux'])}; the difference is "
                 f"{ms(m['wrong_parity_contrast_by_run']['parity_aux'])} "
                 f"(a uniform error has the other parity with chance "
                 f"{chance_other:.2f}; the fewest errors under one edit were {m['edit_errors_min']:.0f}, the dropped "
                 f"`enough_errors` asked at least {st.MIN_EDIT_ERRORS}). In the plain runs: "
                 f"{ms(m['erased_wrong_parity']['plain'])} after the erasure, "
                 f"{ms(m['matched_wrong_parity']['plain'])} after its controls, difference "
                 f"{ms([x for x in m['wrong_parity_contrast_by_run']['plain'] if np.isfinite(x)])} (over the plain "
                 f"runs with errors under both edits).")
    forced_er = [r.erasure for r in learned if r.condition == "parity_aux"]
    dims = [max(e.matched_dimensions) for e in forced_er]
    multi = [d for d in dims if d > 1]
    d_model = st.get_tracker(cfg, cfg.seeds[0], "parity_aux").model.config.hidden_size
    dose = spearmanr(dims, [e.erased_minus_matched for e in forced_er])[0] if len(set(dims)) > 1 else float("nan")
    reading = {
        "reproduced": f"So erasing the parity after block {cfg.parity_layer} flips more of the parity_aux runs' "
                      "predictions to the other parity, beyond edits of its size, than it flips in the plain run of "
                      "the same seed: under the parity supervision the state computation goes through the parity "
                      "there more than it does without it, as steering toward a state computed through an early "
                      "parity would. (It does not show that the runs resolve the state within its parity class as "
                      "the paper's PAA does.)",
        "refuted": f"So erasing the parity after block {cfg.parity_layer} flips fewer than "
                   f"{st.WRONG_PARITY_MIN_EFFECT:g} more of the parity_aux runs' predictions to the other parity, "
                   "beyond edits of its size, than it flips in the plain run of the same seed: by this measure the "
                   "parity supervision does not make the state computation go through the parity much more than "
                   "training without it.",
    }.get(steerable.label, "The verdict box says what the interval and the preconditions decide.")
    lines.append(f"* **What `steerable`'s verdict reads.** " + reading + " The accuracy comparison that decided "
                 "before is not like-for-like: a control was a single direction in "
                 f"{dims.count(1)} of the {len(forced_er)} parity_aux runs"
                 + (f", in the other {len(multi)} a subspace of {min(multi)} to {max(multi)} of the stream's "
                    f"{d_model} dimensions (no direction orthogonal to the parity's mean difference carried the "
                    "erasure's change)" if multi else "")
                 + f"; across these runs the erasure's drop minus its controls' has a Spearman correlation of "
                 f"{dose:+.2f} with each run's largest control dimensions (the referee on seeds "
                 f"{st.STEERABLE_REFEREE['seeds']}: {st.STEERABLE_REFEREE['dose_spearman']:+.2f})"
                 + (": the more of the stream a control must take to match the erasure's change, the more it costs "
                    "beside the erasure." if dose < 0 else "."))
ablation = m["ablation_drop"]
if all(ablation.values()):
    lines.append(f"* **The earlier measure (described).** Mean-ablating the parity probe's direction costs the "
                 f"parity_aux runs {ms(ablation['parity_aux'])} (plain runs: {ms(ablation['plain'])}); controls of "
                 f"that direction's variance cost them {ms(m['matched_ablation_drop']['parity_aux'])}, a difference "
                 f"of {ms(m['parity_minus_matched']['parity_aux'])}; a fixed random direction costs "
                 f"{ms(m['control_ablation_drop']['parity_aux'])}."
                 + (f" With that direction ablated a parity probe fitted again still reads the parity at "
                    f"{ms(list(parity_after.values()))} (lowest {min(parity_after.values()):.3f}), so that measure "
                    + ("leaves the parity readable and speaks of the direction, not of the parity."
                       if min(parity_after.values()) >= PARITY_STILL_READ else
                       "does not leave the parity readable in every run.") if parity_after else ""))
if m["n_mixed_seeds"]:
    lines.append(f"* **Who is compared in `aa_generalises`.** In {m['mixed_aa_conditions'].count('plain')} of the "
                 f"{m['n_mixed_seeds']} seeds with one AA-like and one PAA-like run the AA-like run is the plain one "
                 "and the PAA-like run the parity_aux one: the comparison confounds the mechanism with the extra "
                 f"loss. Beyond one step past T (T + 2 <= t <= 2T) the better label is "
                 f"{m['far_above_chance']:+.3f} from chance; `off_the_floor` asks for at least "
                 f"+{st.GENERALISATION_MIN_EFFECT:g}.")
long_t = np.arange(cfg.train_length + 1, st.eval_length(cfg) + 1)
for lab in ("AA-like", "PAA-like"):
    rs = [r for r in learned if r.label == lab]
    if rs:
        lines.append(f"* **Beyond the training length, {lab} runs** ({len(rs)}): mean accuracy at t = "
                     + ", ".join(f"{t_}: {a:.2f}" for t_, a in zip(long_t, np.mean(
                         [r.accuracy[cfg.train_length:] for r in rs], axis=0)))
                     + f" (chance {1 / n_states:.2f}); `aa_generalises` averages these positions.")
lines.append(f"* **$S_5$.** One plain run of {cfg5.steps} steps on {cfg5.train_length}-action stories was right "
             f"at t = 1 {r5.accuracy[0]:.0%} of the time and at t = {cfg5.train_length} {r5.trained_accuracy:.0%} "
             f"(chance {1 / k5:.1%}): it " + ("met the precondition, label " + r5.label if r5.learned else
                                             "did not meet the precondition, so it gets no label") + ".")
lines.append("* **Verdicts.** " + " ".join(f"`{v.claim.id}`: **{v.label}** ({v.record['reason']})."
                                            for v in (steerable, two, gen) if v is not None))
display(Markdown("\n".join(lines)))

# %% [markdown]
# ## How the training length was chosen, and what this cannot show
#
# Generated from the settings and from the calibration recorded in `icml25.state_tracking` (not re-measured here):

# %%
rows = ["| T | steps | batch | lr | ramp | calibration seeds | runs | slowest run | fastest run | all learned "
        "| seconds |", "|---" * 11 + "|"]
for row in st.LENGTH_CALIBRATION:
    accs = row["accuracy_at_T"]
    rows.append(f"| {row['train_length']} | {row['steps']} | {row['batch_size']} | {row['lr']:g} | {row['ramp']:g} | "
                f"0-{row['seeds'] - 1} | {len(accs)} | {min(accs):.3f} | {max(accs):.3f} | "
                f"{'yes' if min(accs) >= st.LEARNED_ACCURACY else 'no'} | {row['seconds']:.0f} |")
control = ["| condition | signature | votes | " + " | ".join(f"seed {s}" for s in range(len(
    st.POSITIVE_CONTROL["plain"]["probes"]))) + " | PAA votes |", "|---" * 12 + "|"]
for c, sigs in st.POSITIVE_CONTROL.items():
    for name, values in sigs.items():
        control.append(f"| {c} | {name} | {'yes' if name in st.VOTING else 'no'} | "
                       + " | ".join(f"{v:.2f}" for v in values)
                       + f" | {sum(st.vote(v) == 'PAA' for v in values)} of {len(values)} |")
ablation_rows = ["| condition | seed | parity drop | matched controls' drop | parity variance share "
                 "| control dimensions | single-direction control's miss |", "|---" * 7 + "|"]
for row in st.ABLATION_CALIBRATION:
    ablation_rows.append(f"| {row['condition']} | {row['seed']} | {row['parity_drop']:.3f} | {row['matched_drop']:.3f} | "
                         f"{row['parity_variance_share']:.3f} | {row['control_dimensions']} | "
                         f"{row['single_direction_miss']:.0%} |")
ref = st.STEERABLE_REFEREE
prev = st.STEERABLE_ERROR_SHARE_VERDICT


def _ci(triple, sign="+"):
    """A recorded (mean, low, high) as 'mean [low, high]' (signed unless `sign` is "")."""
    return f"{triple[0]:{sign}.3f} [{triple[1]:{sign}.3f}, {triple[2]:{sign}.3f}]"


erasure_rows = ["| condition | seed | parity probe before | after the erasure | after a control (lowest) "
                "| erasure's change (share of variance) | control dimensions |", "|---" * 7 + "|"]
for row in st.ERASURE_CALIBRATION:
    erasure_rows.append(f"| {row['condition']} | {row['seed']} | {row['parity_before']:.3f} | {row['parity_after']:.3f} "
                        f"| {row['parity_after_controls_min']:.3f} | {row['change_share']:.3f} "
                        f"| {row['control_dimensions']} |")
ceiling = st.CONTROL_CEILING
flipped = st.STEERABLE_FLIP_VERDICT
ci_seeds = st.config("ci").seeds
ceiling_rows = ["| condition | seed | erasure's change (share of variance) | variance along δ (share) "
                "| complement of δ over the change | control dimensions | miss (solved-on stories) "
                "| miss (evaluation stories) |", "|---" * 8 + "|"]
for row in ceiling:
    ceiling_rows.append(f"| {row['condition']} | {row['seed']} | {row['change_share']:.3f} "
                        f"| {row['delta_variance_share']:.3f} | {row['complement_over_change']:.3f} "
                        f"| {row['control_dimensions']} | {row['miss']:.1e} | {row['miss_on_eval']:.3f} |")
aux_rows = [r for r in ceiling if r["condition"] == "parity_aux"]
plain_rows = [r for r in ceiling if r["condition"] == "plain"]
beyond = [r for r in ceiling if r["complement_over_change"] < 1]
matched_rows = [r for r in ceiling if r["complement_over_change"] >= 1]
near = [r for r in matched_rows if r["complement_over_change"] < 1 + st.VARIANCE_TOLERANCE]


earlier = {(r["condition"], r["seed"]): r for r in st.ERASURE_CALIBRATION}
retrained = "".join(
    f" The {r['condition']} run of seed {r['seed']} as trained for `st.ERASURE_CALIBRATION` had "
    f"{earlier[r['condition'], r['seed']]['control_dimensions']}-dimensional controls that matched, at a change share "
    f"of {earlier[r['condition'], r['seed']]['change_share']:.3f} (now {r['change_share']:.3f}): a run this near the "
    "ceiling crosses it between trainings of the same code and seed."
    for r in beyond if (r["condition"], r["seed"]) in earlier)


def _share_range(rows, key="delta_variance_share"):
    return f"{min(r[key] for r in rows):.0%}-{max(r[key] for r in rows):.0%}"


display(Markdown("\n".join([
    f"**The training length.** The runs are trained in the book builder's warm-up, before the notebooks run, so "
    f"their training does not count against this chapter's time. The training length was calibrated on the "
    f"calibration seeds {list(st.CALIBRATION_SEEDS)} by the precondition alone (accuracy of $s_T$ at $t = T$ at "
    f"least {st.LEARNED_ACCURACY} for every run, on held-out stories); the verdicts are decided on the seeds "
    f"{list(cfg.seeds)}. The settings tried (the slowest and fastest run's accuracy at $t = T$, and the seconds of one thread "
    f"the runs' batched training took; $T = {max(r['train_length'] for r in st.LENGTH_CALIBRATION)}$ could not train eight seed pairs "
    f"in the warm-up's budget, so the "
    f"chosen setting is this build's: $T = {cfg.train_length}$, {cfg.steps} steps of "
    f"batch {cfg.batch_size}, lr {cfg.lr:g}, ramp {cfg.ramp:g}):",
    "", *rows, "",
    f"**The rule's positive control.** On the calibration seeds, before any verdict of this design, every run was "
    f"read by the three signatures; a signature that cannot vote PAA (at or above {st.PAA_BAND:.2f}) on the "
    f"parity_aux runs, forced to compute the parity after block {cfg.parity_layer}, cannot be part of the rule:",
    "", *control, "",
    f"**`steerable`'s control.** On the calibration seeds {list(st.ABLATION_CALIBRATION_SEEDS)}, before any run on "
    f"the verdict seeds, each control was first a single direction outside the parity signal tilted to the parity "
    f"direction's variance; in the parity_aux runs none carried that much (each fell short by more than the "
    f"tolerance, {st.VARIANCE_TOLERANCE:.0%}, last column), so the precondition `variance_matched` would have failed "
    f"on every run, and each control became a subspace of the fewest dimensions that carry the variance. The drops "
    f"of these runs (recorded in `st.ABLATION_CALIBRATION`, not re-measured here) were seen before the verdict run; "
    f"the statistic (the parity direction's drop minus its controls'), its smallest effect "
    f"({st.ABLATION_MIN_EFFECT:g}) and the tolerance were declared before them, and only what a control is changed "
    f"after them:",
    "", *ablation_rows, "",
    f"**`steerable`'s erasure.** That control decided `steerable` on seeds 2900-2907 (refuted), and a referee then "
    f"found the parity still readable after the probe's direction was ablated; only then was the erasure declared "
    f"(statistic, the precondition `parity_erased` at most {st.PARITY_ERASED:g}, the same smallest effect and "
    f"tolerance) and ledgered. It was tried on the same calibration seeds {list(st.ABLATION_CALIBRATION_SEEDS)} "
    f"before any run on the verdict seeds {list(cfg.seeds)}, reading its preconditions alone: the calibration "
    f"printed no drop, so the statistic's values and sign there were not seen, and as every precondition held at the "
    f"first try nothing was changed after it (recorded in `st.ERASURE_CALIBRATION`, not re-measured here):",
    "", *erasure_rows, "",
    f"**`steerable` re-declared on which parity the errors have.** The erasure's accuracy statistic was decided on "
    f"fresh seeds 3100-3107: refuted. A referee with no stake then ran the chapter's functions on fresh seeds "
    f"{ref['seeds']} and found that refutation did not replicate: erasure minus controls {_ci(ref['accuracy_statistic'])} "
    f"(also {ref['accuracy_statistic_parity_weight_1']:+.3f} at parity_weight 1.0 and "
    f"{ref['accuracy_statistic_lr_4e-3']:+.3f} at lr 4e-3), falling as the controls need more dimensions (Spearman "
    f"{ref['dose_spearman']:+.2f}): matching on squared change controls away what the parity loss trains, variance on "
    f"the parity. It also measured which parity the errors have: after the erasure {_ci(ref['erased_wrong_parity'], '')} "
    f"of the errors at t <= T had the other parity, after the controls {_ci(ref['matched_wrong_parity'], '')}, paired "
    f"difference {_ci(ref['wrong_parity_contrast'])} (also {ref['wrong_parity_contrast_parity_weight_1']:+.2f} at "
    f"parity_weight 1.0, {ref['wrong_parity_contrast_lr_4e-3']:+.2f} at lr 4e-3; chance "
    f"{st.other_parity_chance(3):.1f}); in its plain runs the parity was readable after block 1 at "
    f"{ref['plain_parity_readable'][0]:.2f}-{ref['plain_parity_readable'][1]:.2f}, and the erasure cost "
    f"{ref['plain_erasure_drop']:.3f} of accuracy (recorded in `st.STEERABLE_REFEREE`, not re-measured here). Only "
    f"then was `steerable` re-declared on that difference, with the smallest effect "
    f"{st.WRONG_PARITY_MIN_EFFECT:g} (a round size on a share, not derived from the data, but proposed by the referee "
    f"after it had seen those numbers, which lie far above it) and the precondition `enough_errors` (at least "
    f"{st.MIN_EDIT_ERRORS} errors under the erasure and under the controls pooled), ledgered, and decided on fresh "
    f"seeds 3300-3307 that no earlier run had used; the accuracy statistic was reported beside it.",
    "",
    f"**`steerable` re-declared against the unsteered runs.** On seeds {prev['seeds']} the wrong-parity share "
    f"contrast was reproduced in the parity_aux runs, {_ci(prev['wrong_parity_contrast'])}, n = 8. But the plain "
    f"runs, outside that criterion, showed nearly the same contrast ({prev['plain_wrong_parity_contrast'][0]:.2f} ± "
    f"{prev['plain_wrong_parity_contrast'][1]:.2f}) though the erasure cost them about "
    f"{prev['plain_erasure_drop']:.2f} of accuracy against about {prev['parity_aux_erasure_drop']:.2f} in the "
    f"parity_aux runs (recorded in `st.STEERABLE_ERROR_SHARE_VERDICT`, not re-measured here): the statistic passed "
    f"on the claim's null, since later blocks read whatever parity signal is there, and a share of the errors "
    f"ignores how many errors the erasure causes. Only then was `steerable` re-declared on the parity flips the "
    f"erasure causes beyond its controls, as a rate over all predictions at t <= T, in each seed's parity_aux run "
    f"minus its plain run (paired t over seeds), with the same smallest effect {st.WRONG_PARITY_MIN_EFFECT:g} (set "
    f"before this design, but after the referee's numbers and the verdict on {prev['seeds']} were seen, so not "
    f"blind to them); `parity_erased` and `variance_matched` now read the runs of both conditions, `enough_errors` "
    f"was dropped (a rate is defined however few errors an edit causes), and at least 3 seeds must have both runs "
    f"learned. Ledgered, and decided on fresh seeds {flipped['seeds']} that no earlier run had used; the shares and "
    f"the accuracy statistic are reported beside it.",
    "",
    f"**Why `steerable`'s controls missed on {flipped['seeds']}, and what changed after it.** That verdict was "
    f"inconclusive: `variance_matched` failed (largest relative miss {flipped['change_mismatch']:.3f}, tolerance "
    f"{st.VARIANCE_TOLERANCE:.0%}) in the {flipped['missed_run'][0]} run of seed {flipped['missed_run'][1]}, whose "
    f"controls, the whole complement of the parity classes' mean difference δ, reached "
    f"{flipped['controls_reach']:.2f} of the erasure's change; its statistic, "
    f"{_ci(flipped['flip_excess_aux_minus_plain'])}, decided nothing. A second build of the same seeds under the "
    f"same declaration, after the diagnosis below, met `variance_matched` (largest miss "
    f"{flipped['rebuild_change_mismatch']:.1e}) with the statistic "
    f"{_ci(flipped['rebuild_flip_excess_aux_minus_plain'])}: its runs differ from the first build's, though code "
    f"and seeds are the same (recorded in `st.STEERABLE_FLIP_VERDICT`). Why was diagnosed afterwards on the "
    f"calibration seeds alone, reading the edits' geometry and the controls' match, no flip, drop or statistic "
    f"(recorded in `st.CONTROL_CEILING`, not re-measured here). The erasure's target and each control's change are "
    f"read on the same stories in float64, and wherever a match exists it is found ({len(matched_rows)} of "
    f"{len(ceiling)} runs, each within {max(r['miss'] for r in matched_rows):.0e}). But a mean ablation orthogonal "
    f"to δ removes at most what the whole complement of δ carries, while LEACE moves the rows along δ alone, by at "
    f"most the variance there. The parity supervision puts {_share_range(aux_rows)} of the parity_aux runs' "
    f"variance after block {cfg.parity_layer} along δ (plain runs {_share_range(plain_rows)}), and the erasure "
    f"changes {_share_range(aux_rows, 'change_share')} of the stream's variance there; in {len(beyond)} of the "
    f"{len(aux_rows)} calibration parity_aux runs ("
    + ", ".join(f"seed {r['seed']}: δ carries {r['delta_variance_share']:.0%}, the complement "
                f"{r['complement_over_change']:.2f} of the change" for r in beyond)
    + f") the erasure changes the stream by more than everything else in it carries, as in seed "
    f"{flipped['missed_run'][1]}, and {len(near)} more lie within the tolerance above that ceiling. No edit of the "
    f"erasure's size that keeps the parity exists in such a run: a property of the steered runs, not a defect of how "
    f"the controls are built. A control that always exists would have to add to the stream (noise, an overshoot past "
    f"the mean), an edit of another kind than the erasure's removal. Found on the way, not the miss's cause: "
    f"`variance_matched` reads the match on the stories the controls were solved on, where it holds by "
    f"construction; on the evaluation stories, where the edits act, a control matched there differs from the "
    f"erasure by up to {max(r['miss_on_eval'] for r in matched_rows):.0%}." + retrained,
    "", *ceiling_rows, "",
    f"**What changed after the verdicts on {flipped['seeds']}.** Under a precondition asked of every run, one run "
    f"that cannot have a control voids the whole claim, and runs this near the ceiling cross it between trainings: "
    f"the first build of {flipped['seeds']} was inconclusive on `variance_matched`, the second (whose every run "
    f"matched) was recorded by the builder as reproduced, a re-measurement of seeds already decided. After both "
    f"were seen, the chapter's lead made the ceiling a declared per-seed rule: a seed's unit enters the statistic "
    f"only when the controls of both its runs match the erasure's change within {st.VARIANCE_TOLERANCE:.0%} "
    f"(`st.controls_match`), which the edits' geometry decides before any flip is read (that geometry is not "
    f"independent of the outcome: a referee found the erasure's share of the variance and its flips rank-correlated "
    f"across parity_aux runs, ρ {st.REFEREE_3700['share_flip_rho']['3500-3509']:+.2f} on 3500-3509, so leaving "
    f"seeds out could bias the statistic, and the table above says how many were); and `variance_matched` became "
    f"a share, at least {st.MATCHED_SEED_SHARE:.0%} of the seeds with both runs learned kept, so controls that fail systematically still block the claim; "
    f"`paired_seeds` counts the kept seeds, and the contract's floor of {MIN_UNITS} units applies to them. The "
    f"statistic, its smallest effect and the tolerance are unchanged. Since about one parity_aux run in "
    f"{round(len(aux_rows) / max(len(beyond), 1))} lies beyond the ceiling on the calibration seeds, the verdict "
    f"seeds at `ci` grew to {len(ci_seeds)}, fresh ({ci_seeds[0]}-{ci_seeds[-1]}), and the other claims, which read "
    f"the same runs, moved with them; every change was ledgered before their build. The table above lists which seeds "
    f"this build kept.",
    "",
    f"**What this cannot show.** Stories of {cfg.train_length} actions cannot tell $\\log t$ growth of the resolving "
    f"depth from linear growth, and {cfg.n_layers} blocks leave the patching maps coarse; the paper's models read "
    f"100 actions. The length curriculum and the precondition make sure the signatures are read in models that track "
    f"the state, not that these models are large enough to split into the paper's two mechanisms. A model right at "
    f"nearly every trained position makes few errors where it still tracks, so its error signature is often "
    f"unreadable or noisy; and the errors of a model whose early layers hold the parity need not keep it. The $S_5$ "
    f"run checks the pipeline on the paper's main group, not the claims: {len(st.elements(5))} states need far more training than this budget. "
    f"`scale=\"full\"` (longer stories, deeper models, many more steps; documented in the parameters cell, not run "
    f"here) is where a split could show."])))
