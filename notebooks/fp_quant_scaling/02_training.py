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
# # Training with quantised GEMMs, the critical data size, and fitting the law
#
# The paper trains LLaMA models with the inputs of each linear layer's GEMMs rounded to ExMy with one scale per
# $B$ elements: the weight $W$ in the forward product $Y = X\,Q(W)^\top$, the weight again in the input
# gradient $dX = dY\,Q(W)$, and the activation in the weight gradient $dW = dY^\top Q(X)$ (its P2, P4 and P6,
# the three that hurt least). Gradients pass through the rounding unchanged (straight-through). Its law:
#
# $$L(N, D, E, M, B) = \frac{n}{N^\alpha} + \frac{d}{D^\beta} + \epsilon
#     + \frac{D^\beta}{N^\alpha}\,\frac{\log_2 B}{\gamma\,(E+0.5)^\delta\,(M+0.5)^\nu}.$$
#
# **The regime.** The quantisation term grows with data per parameter, $D^\beta / N^\alpha$, so we train one
# *small* model (a 2-layer Llama with hidden size 8: about 1.3k linear weights inside its blocks) on *many*
# tokens of a 64-symbol Markov language (hundreds of tokens per linear weight at `ci`; "The runs" prints how
# many). Every seed trains four runs from the same initial weights on the same token stream: full precision, E2M1
# with blocks of 1024 elements (the low-precision run), E2M1 at $B = 16$, and E1M2 at $B = 1024$. So every
# comparison is paired within a seed. The learning rate is constant after a short warmup and the held-out loss is
# measured at checkpoints spaced evenly in $\log D$, so one run gives loss against data. The paired comparisons read
# the first `steps` of every run; full precision and the low-precision run carry on to `long_steps` (the same runs
# continued: same warmup, batches and checkpoint grid), for the critical data size, which needs training past it.
#
# Before block size, exponent bits, the fit or the critical data size are judged, the low-precision penalty
# (E2M1 at $B = 1024$ minus full precision, per seed) must be at least three times its spread over seeds
# (precondition `penalty_resolved`), and full precision must have learned to use the previous token
# (`fp_learns`).

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the language's seed
seeds = None  # verdict seeds (training seeds); None: the scale's value
steps = None  # training steps per run; tokens are steps x batch_size x seq_len
long_steps = None  # steps of full precision and the low-precision run, at least steps (critical data size)
n_checkpoints = None  # held-out evaluations per run, evenly spaced in log D
model = None  # (hidden, ffn) of the tiny Llama
# full: twelve seeds, weights of 32 x 32 and more, 8000 steps of 64 x 64 tokens, 32 checkpoints (hours on a CPU).

# %%
import numpy as np
from IPython.display import Markdown, display

from icml25 import fp_quant_scaling as fq
from icml25.core import check, plot

plot.use_style()
cfg = fq.config(scale, seeds=seeds, steps=steps, long_steps=long_steps, n_checkpoints=n_checkpoints, model=model)
cfg

# %% [markdown]
# ## The runs
#
# The runs are cached like a zoo model (`fq.sweep_results`, addressed by every knob and the code that trains them),
# so the book's builder trains them in its warm-up and this notebook reads them back. The long runs' length was
# chosen on calibration seeds within the warm-up's budget (`fq.CI_LONG_STEPS`; the record is printed with the
# critical data size below).

# %%
runs, language, computed_now = fq.sweep_results(cfg, seed)
print(f"{len(runs)} runs, {'computed now' if computed_now else 'loaded from the cache (computed in the warm-up)'}")
E, M, B = cfg.low
per_step = fq.tokens_per_step(cfg)
D_common = cfg.steps * per_step  # every run's first `steps`: what the paired comparisons read
common = [r.upto(D_common) for r in runs]
fp = {s: fq.find_run(runs, s) for s in cfg.seeds}  # full precision, trained `long_steps`
N, D_max = runs[0].N, cfg.long_steps * per_step
smallest = fq.smallest_weight(fq.make_lm(cfg, cfg.seeds[0]))  # elements of the smallest quantised weight matrix
weight_over_block = smallest / B
print(f"{len(runs)} runs ({fq.sweep_steps(cfg):,d} steps in all); N = {N:,d} linear weights, D up to {D_common:,d} "
      f"tokens ({D_common / N:.0f} per weight) in every run and {D_max:,d} ({D_max / N:.0f}) in full precision and "
      f"E{E}M{M} at B = {B}; "
      f"entropy rate (loss floor) {language.entropy_rate():.3f}, unigram entropy {language.unigram_entropy():.3f} "
      "nats/token")
specs = [(None, None, None), (E, M, B), (E, M, cfg.small_block), (*cfg.alt_format, B)]
fig, (ax, ax2) = plot.subplots(1, 2, figsize=(11, 4))
for (e, m, b), color in zip(specs, plot.PALETTE):
    curves = np.array([fq.find_run(runs, s, e, m, b).loss for s in cfg.seeds])
    D_axis = np.array(fq.find_run(runs, cfg.seeds[0], e, m, b).D)
    label = "full precision" if e is None else f"E{e}M{m}, B = {b}"
    plot.seed_errorbar(ax, curves, D_axis, color, label)
    if e is not None:
        gap = curves - np.array([fp[s].upto(D_axis[-1]).loss for s in cfg.seeds])
        plot.seed_errorbar(ax2, gap, D_axis, color, label)
ax.set(xscale="log", title=f"Held-out loss against training tokens (N = {N:,d})", xlabel="training tokens D",
       ylabel=f"loss (nats / token, mean ± sd over {len(cfg.seeds)} seeds)")
ax.legend(fontsize=8)
ax2.axhline(0, color="gray", ls="--", lw=1)
ax2.set(xscale="log", title="Penalty over full precision (same seed)", xlabel="training tokens D",
        ylabel="loss minus full precision's (nats / token)")
ax2.legend(fontsize=8);

# %% [markdown]
# ## The penalty and its noise
#
# Per seed, the late held-out loss (the mean over the checkpoints of the second half of the first `steps`, which
# averages out the step-to-step fluctuation of a constant learning rate) of E2M1 at $B = 1024$ minus full
# precision's. This is the size of the effect every later question is about; if it is not several times its
# seed-to-seed spread, nothing below can be read.
#
# Beside it, the law's own prediction with the paper's constants at this $N$ and $D$. For the block size, a
# block larger than a weight matrix is one scale for the whole tensor, so $B$ varies for $W$ (in the forward and
# input-gradient products) only while the matrices hold at least $B$ elements; the activations of the weight
# gradient have real blocks (along tokens) at any size. The block-size claim states this as its precondition
# `blocks_fill_weights`. Below each claim cell, a paragraph generated from its record says why a claim left
# undecided is undecided here and what deciding it would cost.

# %%
pen = fq.penalty(common, cfg.seeds, E, M, B)
fp_gain = [language.unigram_entropy() - fq.find_run(common, s).late for s in cfg.seeds]
slopes = fq.block_slope(common, cfg.seeds, E, M, cfg.small_block, B)
e_gap = [fq.find_run(common, s, *cfg.alt_format, B).late - fq.find_run(common, s, E, M, B).late for s in cfg.seeds]
resolution = fq.penalty_resolution({"penalty": pen})
print("penalty per seed:", np.round(pen, 4), f"mean / sd = {resolution:.2f}")
print("full-precision gain over the unigram entropy:", np.round(fp_gain, 3))
print("rise per doubling of B:", np.round(slopes, 5), "  E1M2 - E2M1:", np.round(e_gap, 4))
law_term = {b: float(fq.law_loss(N, D_common, E, M, b) - fq.law_loss(N, D_common)) for b in (cfg.small_block, B)}
law_slope = (law_term[B] - law_term[cfg.small_block]) / (np.log2(B) - np.log2(cfg.small_block))
print(f"the law with the paper's constants at N = {N:,d}, D = {D_common:,d}: penalty {law_term[B]:.5f} nats at B = {B}, "
      f"rise per doubling of B {law_slope:.6f}; measured: penalty {np.mean(pen):.4f}, rise {np.mean(slopes):.5f} "
      f"(sd over seeds {np.std(slopes, ddof=1) if len(slopes) > 1 else float('nan'):.5f})")

# %% [markdown]
# ## Fitting the law, judged on runs it was not fitted on
#
# Per seed, we leave one E2M1 run out (first $B = 16$, then $B = 1024$), fit $(n, d, \epsilon, \gamma, \delta,
# \nu)$ by least squares on every checkpoint of the seed's other three runs, with $\alpha$ and $\beta$ held at the
# paper's values (one model size cannot identify exponents, and $n/N^\alpha$ and $\epsilon$ are one constant here),
# and predict the left-out run's penalty over full precision at each of its checkpoints. With one model size the
# law's base cancels in that penalty, so what is predicted is the quantisation term alone, carried to the
# left-out block size through $\log_2 B$. The law fitted without the $B = 1024$ run also gives that run's critical
# data size $D_{crit}$, the prediction the next section measures against.

# %%
small, large = fq.QuantSpec(E, M, cfg.small_block), fq.QuantSpec(E, M, B)
fits = {(s, h.B): fq.fit_held_out([r for r in runs if r.seed == s], h) for s in cfg.seeds for h in (small, large)}
r2 = [np.mean([fits[s, h.B].r2 for h in (small, large)]) for s in cfg.seeds]
dcrit_fit = [fits[s, B].dcrit for s in cfg.seeds]
dcrit_paper = float(fq.critical_data_size(N, E, M, B))
fig, axes = plot.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, h in zip(axes, (small, large)):
    for s, color in zip(cfg.seeds, plot.PALETTE):
        f, D_held = fits[s, h.B], fq.find_run(runs, s, h.E, h.M, h.B).D
        ax.plot(D_held, f.measured, "o", color=color, label=f"seed {s} measured (R² = {f.r2:.2f})")
        ax.plot(D_held, f.predicted, "-", color=color, label=f"seed {s} predicted")
    ax.axhline(0, color="gray", ls="--", lw=1)
    ax.set(xscale="log", title=f"E{E}M{M}, B = {h.B}, left out of the fit", xlabel="training tokens D",
           ylabel="penalty over full precision (nats / token)")
    ax.legend(fontsize=7)
for s in cfg.seeds:
    law = fits[s, B].law
    print(f"seed {s}: R² held out B = {cfg.small_block}: {fits[s, cfg.small_block].r2:.3f}, B = {B}: "
          f"{fits[s, B].r2:.3f}; without B = {B}: delta {law.delta:.2f}, nu {law.nu:.2f}, gamma {law.gamma:.3g}, "
          f"D_crit {fits[s, B].dcrit:.3g} tokens")
print(f"D_crit with the paper's constants for N = {N:,d}: {dcrit_paper:.3g} tokens; trained: {D_max:,d}")

# %% [markdown]
# ## The critical data size, tested directly
#
# Past $D_{crit}$ the law says a low-precision run's loss *rises* with more data. We measure the slope of the
# held-out loss against $\log_2 D$ over the second half of the long runs (`long_steps`), for E2M1 at $B = 1024$
# and for full precision on the same seed (a rising curve in both would be a property of the training, not of the
# precision), and where each run's loss is lowest, against the $D_{crit}$ that the law fitted without this run
# predicts for it. The claim is judged only where the law fitted without this run itself predicts a rising loss over that
# second half, on at least two thirds of the seeds (precondition `law_predicts_rise`): a $D_{crit}$ inside the
# run is not enough, since up to $D_{crit}$ the law's loss still falls, so $D_{crit}$ must lie early enough in the
# late window. The paper's own constants put $D_{crit}$ of a model this small far beyond any run here.
#
# How long is long enough was measured on calibration seeds before the verdict seeds were trained: full
# precision and E2M1 at $B = 1024$ trained past `steps`, read at lengths a quarter octave apart, with the law
# refitted at each length (the fitted $D_{crit}$ may move as training grows). The record, per length: on how many
# calibration seeds the refitted law predicts the rise, on how many the whole late half lies past its $D_{crit}$,
# and the median $D_{crit}$ over the tokens trained.

# %%
calibration = fq.LENGTH_CALIBRATION
cal_table = fq.length_table(calibration)
for row in cal_table:
    print(f"{row['steps']:5d} steps: law predicts the rise on {row['law_predicts_rise']} of {row['seeds']} "
          f"calibration seeds, late half past D_crit on {row['late_half_past_dcrit']}, "
          f"D_crit / trained {row['median_dcrit_over_trained']:.3f} (median)")

# %%
late_low = [fq.late_slope(fq.find_run(runs, s, E, M, B), 0.5) for s in cfg.seeds]
law_low = [fq.law_late_slope(fits[s, B], fq.find_run(runs, s, E, M, B), 0.5) for s in cfg.seeds]
print("late slope the law fitted without the run predicts for it:", np.round(law_low, 4))
late_fp = [fq.late_slope(fp[s], 0.5) for s in cfg.seeds]
minima = [fq.loss_minimum(fq.find_run(runs, s, E, M, B)) for s in cfg.seeds]
print("late slope per doubling of D, E2M1:", np.round(late_low, 4), " full precision:", np.round(late_fp, 4))
interior = [d < D_max for d in minima]
print("D at the lowest loss of E2M1 per seed:", minima, f"(last checkpoint {D_max:,d}); over the fitted D_crit:",
      np.round(np.divide(minima, dcrit_fit), 3))

# %%
display(Markdown(
    f"**What we see.** The low-precision penalty is {np.mean(pen):.4f} ± {np.std(pen, ddof=1) if len(pen) > 1 else 0:.4f} "
    f"nats (mean ± sd over {len(pen)} seeds, {resolution:.1f} times its spread). Per doubling of the block size "
    f"the loss rises by {np.mean(slopes):.4f} nats on average, and E1M2 (a uniform, INT4-like grid here) is "
    f"{np.mean(e_gap):+.4f} nats from E2M1. The law fitted to the other runs predicts a left-out E2M1 run's "
    f"penalty with R² {np.mean(r2):.2f} on average; without the B = {B} run it puts that run's D_crit at "
    f"{np.median(dcrit_fit):.3g} tokens (median over seeds), against "
    f"{D_max:,d} trained and {dcrit_paper:.3g} with the paper's constants. Over the second half of training the "
    f"E2M1 loss changes by {np.mean(late_low):+.4f} nats per doubling of D (full precision {np.mean(late_fp):+.4f}); "
    f"its lowest loss is inside the run (before the last checkpoint) on {sum(interior)} of {len(interior)} seeds."
    " The claim cells below give the verdicts with their intervals and preconditions."))

# %% [markdown]
# ## Claim checks
#
# Declared in `icml25.fp_quant_scaling` before the runs. Each effect takes one value per seed.

# %%
base = {"penalty": pen, "fp_gain": fp_gain}
v = check(fq.BLOCK_SIZE, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          measured={**base, "block_slope": slopes, "weight_elements_over_block": weight_over_block},
          our_value=f"rise per doubling of B {np.mean(slopes):.4f} nats; penalty {np.mean(pen):.4f} "
                    f"({resolution:.1f} sd)")
plot.show_verdicts(v)

# %%
def failed(verdict):
    return [p for p in verdict.record["preconditions"] if not p["holds"]]


def power_line(verdict):
    need = verdict.record["effect"].get("units_needed")
    return f"about {need} seeds" if need else "no feasible number of seeds"


if "blocks_fill_weights" in [p["id"] for p in failed(v)]:
    wide = fq.hidden_to_fill_blocks(cfg)
    wide_lm = fq.make_lm(fq.config(scale, model=(wide, 2 * wide)), 0)
    display(Markdown(
        f"**Why `block_size` is undecidable on this model.** Its precondition `blocks_fill_weights` measures "
        f"{v.record['measured']['weight_elements_over_block']:.4g}: the smallest quantised weight matrix holds "
        f"{smallest} elements against B = {B}. Every block of {smallest} or more is one scale for that whole "
        f"matrix, so from B = {cfg.small_block} to {B} its blocks grow only from {min(cfg.small_block, smallest)} "
        f"to {smallest} elements, and the claim would measure mostly the activations' blocks. More seeds cannot "
        "change that (even with the "
        f"precondition set aside, the observed spread would need {power_line(v)}). The precondition needs a model "
        f"of hidden size {wide} or more (FFN {2 * wide}; its smallest weight holds "
        f"{fq.smallest_weight(wide_lm)} elements, N = {fq.block_params(wide_lm):,d} "
        f"linear weights against {N:,d} here), as the `full` scale trains "
        f"(hidden {fq.config('full').model[0]})."))

# %% [markdown]
# In this convention (the paper's: every code a finite value, bias $2^{E-1} - 1$) E1M2 has no exponent range to
# speak of: its non-negative values are 0, 0.5, 1, …, 3.5, a uniform grid like INT4's, while E2M1's are
# 0, 0.5, 1, 1.5, 2, 3, 4, 6. So the exponent-bits check below compares a float grid with an integer-like one.

# %%
print("E1M2 grid:", fq.format_grid(1, 2), " E2M1 grid:", fq.format_grid(2, 1))
v = check(fq.EXPONENT_BITS, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale, measured={**base, "e1m2_minus_e2m1": e_gap},
          our_value=f"E1M2 - E2M1 at B = {B}: {np.mean(e_gap):+.4f} nats")
plot.show_verdicts(v)

# %%
step_s = fq.seconds_per_step(runs, per_step)
if v.label == "inconclusive" and not failed(v):
    e = v.record["effect"]
    need = e.get("units_needed")
    per_seed = 3 * step_s * cfg.steps
    display(Markdown(
        f"**Why `exponent_bits` is undecided, and what deciding it would cost.** Its preconditions hold, but "
        f"E1M2 − E2M1 is {e['estimate']:+.4f} [{e['ci_low']:+.4f}, {e['ci_high']:+.4f}] nats over {e['n']} seeds, "
        f"with a seed-to-seed sd of {e['sd']:.4f}: at that spread {power_line(v)} would decide it (80% power). "
        f"A seed needs three runs of {cfg.steps} steps (full precision, E2M1 and E1M2 at B = {B}); one thread "
        f"trained the sweep at {step_s * 1e3:.1f} ms per step of one run on one thread, so a seed costs about "
        f"{per_seed:.0f} CPU-seconds"
        + (f" and {need} seeds about {need * per_seed / 3600:.1f} CPU-hours, against the "
           f"{sum(r.seconds for r in runs):.0f} s this chapter's whole sweep takes now." if need else ".")))

# %%
v = check(fq.FIT, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale, measured={**base, "r2_held_out": r2},
          our_value=f"R² on the held-out runs' penalty {np.mean(r2):.3f} (per seed {np.round(r2, 3).tolist()})")
plot.show_verdicts(v)

# %%
dcrit_ratio = [d / D_max if np.isfinite(d) else 1e30 for d in dcrit_fit]
v = check(fq.CRITICAL_DATA, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          measured={**base, "law_late_slope_low": law_low, "dcrit_over_trained": dcrit_ratio, "late_slope_low": late_low,
                    "late_slope_gap": np.subtract(late_low, late_fp), "loss_minimum_D": minima,
                    "loss_minimum_over_fitted_dcrit": np.divide(minima, dcrit_fit).tolist(),
                    "dcrit_paper_constants": dcrit_paper},
          our_value=f"late slope of E2M1 {np.mean(late_low):+.4f} nats per doubling of D (full precision "
                    f"{np.mean(late_fp):+.4f}); fitted D_crit / trained {np.median(dcrit_ratio):.3g}")
plot.show_verdicts(v)

# %%
cal_here = next((row for row in cal_table if row["steps"] == cfg.long_steps), None)
drift = fq.dcrit_drift(calibration)
pace = "slower than" if drift["drift"] < drift["training"] else "at least as fast as"
text = (f"**Reading `critical_data`.** Full precision and E2M1 at B = {B} trained {cfg.long_steps} steps "
        f"({D_max:,d} tokens). The law fitted without each seed's E2M1 run puts its D_crit at "
        f"{np.median(dcrit_ratio):.2f} times that (median over seeds; {min(dcrit_ratio):.2f} to "
        f"{max(dcrit_ratio):.2f}), and over the second half of training it predicts a rising loss on "
        f"{sum(x >= 0 for x in law_low)} of {len(law_low)} seeds, where `law_predicts_rise` asks for "
        f"{fq.RISE_SHARE:.2f} of them"
        + (f" (on the calibration seeds, at this length, {cal_here['law_predicts_rise']} of {cal_here['seeds']})"
           if cal_here else "")
        + f". The measured late slope of E2M1 is negative on {sum(x < 0 for x in late_low)} of {len(late_low)} "
        f"seeds (the loss still falls there) and above full precision's on {sum(np.subtract(late_low, late_fp) > 0)}. "
        f"Two cautions on the fitted D_crit: the fitted law predicts the held-out runs' penalty with R² "
        f"{np.mean(r2):.2f} on average, so D_crit is an extrapolation of a law that fits these runs poorly; and it "
        f"moves as training grows: on the calibration seeds, from {drift['from_steps']} to {drift['to_steps']} "
        f"steps, the length whose late half lies past the refitted D_crit moved from {drift['past_dcrit'][0]:.0f} "
        f"to {drift['past_dcrit'][1]:.0f} steps (median), {pace} the training ({drift['drift']:.2f}x against "
        f"{drift['training']:.2f}x).")
display(Markdown(text))

# %%
display(Markdown(fq.referee_sentence(fq.REFEREE_400, cfg.long_steps)))

# %%
if "law_predicts_rise" in [p["id"] for p in failed(v)]:
    low_runs = [fq.find_run(runs, s, E, M, B) for s in cfg.seeds]
    rise = fq.steps_for_share([fq.law_rise_steps(fits[s, B], r, per_step, cfg.n_checkpoints, fq.LATE_SHARE)
                               for s, r in zip(cfg.seeds, low_runs)], fq.RISE_SHARE)
    room = fq.steps_for_share([fq.steps_past_dcrit(fits[s, B], per_step) for s in cfg.seeds], fq.RISE_SHARE)
    long_runs = 2 * len(cfg.seeds)
    now_s = step_s * fq.sweep_steps(cfg)
    text = "**Why `critical_data` is undecided here, and what deciding it would cost.** "
    if room is None or rise is None:
        text += "The fitted laws give no D_crit on enough seeds to say how long a run would need."
    else:
        room_s = now_s + step_s * (room - cfg.long_steps) * long_runs
        text += (
            f"Were the fitted D_crit to stay where it is, the law would predict the rise on {fq.RISE_SHARE:.2f} of "
            f"the seeds "
            f"after {rise} steps, and the whole second half would lie past D_crit (room for the measured slope to "
            f"show it) after {room} steps, {room / cfg.long_steps:.2f} times the {cfg.long_steps} trained. One "
            f"thread trained this sweep ({len(runs)} runs) in {now_s:.0f} CPU-seconds ({step_s * 1e3:.1f} ms per "
            f"step of one run); with its {long_runs} long runs at {room} steps it would take about {room_s:.0f}, "
            f"{room_s - now_s:.0f} more, against the {fq.WARMUP_BUDGET_S} s the `ci` lengths were sized to"
            + (" (this build trained faster than that sizing assumed)" if now_s < fq.WARMUP_BUDGET_S else "")
            + (f". That fits the sized budget, so a longer `long_steps` would decide it here"
               if room_s <= fq.WARMUP_BUDGET_S else
               f". The whole `ci` book, warm-up included, must build within {fq.CI_LIMIT_S // 60} minutes, and no "
               "chapter's warm-up grows past what it was sized to unless another's shrinks, so at this length "
               "the claim is undecidable within CI's budget")
            + f"; the `full` scale trains {fq.config('full').steps} steps. ")
    display(Markdown(text))
