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
# # Control variates: fewer human labels, no bias
#
# We want the win rate $\mu = \mathbb E[z]$ of model A over model B, where a human label $z$ is 1 (A preferred),
# 0 (B preferred) or ½ (a tie). Human labels are expensive, so we have only $n$ of them; a synthetic judge gives a
# score $\hat s \in [0, 1]$ on all $N$ prompts for free, but it is biased. The control-variates estimator
#
# $$\hat\mu = \bar z_n - \alpha\,(\bar{\hat s}_n - \bar{\hat s}_N), \qquad \alpha = \frac{\operatorname{Cov}(z, \hat s)}{\operatorname{Var}(\hat s)}$$
#
# subtracts from the human mean the part the judge can predict. Because $\mathbb E[\bar{\hat s}_n] = \bar{\hat s}_N$,
# it is unbiased for any judge; with the optimal $\alpha$ its variance is $(1 - \rho^2)\operatorname{Var}(z)/n$,
# $\rho = \operatorname{Corr}(z, \hat s)$. So $n$ labels do the work of $n / (1 - \rho^2)$, a saving of $\rho^2$ of the
# human labels, known before labelling. The paper's main variant fits $\alpha$ on the same $n$ labelled samples.
#
# **Our population.** Each prompt has a latent quality gap $g \sim \mathcal N(0.2, 1)$; humans prefer A with
# probability $\sigma(2g)$, tie 10% of the time, and ignore a length difference $\ell \sim \mathcal N(0, 1)$. Both
# judges perceive $g$ through noise. The *off-the-shelf* judge scores $\sigma(\tilde g + \ell + ½)$: it rewards length
# and favours A. The *fine-tuned* judge is a logistic regression on $(\tilde g, \ell)$ fitted to a separate set of
# human labels, so it learns to ignore length.
#
# **What is a claim here.** On this population, and on any other, the control-variates estimate with a known
# $\alpha$ is unbiased, its saving equals $\rho^2$, and its normal interval covers at large $n$: these hold for any
# judge, so they are unit tests (`tests/test_hybrid_winrate.py`), and the figures below only show them. What the
# paper *measured* is how much real judges save, how much fine-tuning on human labels adds, and whether the
# estimator it uses (α fitted on the same $n$ labels) stays unbiased at the $n$ where its figures read it (200 and
# up). Those are decided on a judge designed by nobody: the zoo's arithmetic **target** model, used as an LLM judge
# through its own likelihood, compares its own sampled solution (A) with the zoo draft's (B) on fresh problems, and the "human"
# label is exact correctness (1 if only A is right, 0 if only B is, ½ if both or neither). Its **fine-tuned** version
# is fine-tuned the way the paper fine-tunes its reward models (the official `finetune/` scripts train every weight of
# Skywork-Reward with TRL's `RewardTrainer` on Chatbot Arena votes, ties dropped, on pairs without the held-out model,
# and score with the same σ(r_A − r_B) as before): the same LM and the same score, all its weights trained by the
# Bradley–Terry loss $-\log\sigma(r_\text{chosen} - r_\text{rejected})$ on its reward $r$ (the mean token
# log-probability whose exponential is its score), over the decided correctness labels of separate problems. Both
# judges read the same thing; the only difference is the fine-tuning. The learning rate and the number of epochs are
# chosen on calibration seeds that decide nothing.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the simulated population drawn in the first figures
seeds = None  # verdict seeds: populations, zoo problems and sampling streams; None: the scale's value
n_population = None  # prompts N per population
n_finetune = None  # separate human labels used to fit the fine-tuned judge
n_grid = None  # numbers n of human labels to evaluate
repeats = None  # independent draws of n labelled prompts per (seed, n)
n_claim = None  # n at which the saving is measured for the claims
n_small = None  # the smallest n of the paper's range, where unbiasedness is decided
tie_rate = None
gap_mean = None  # mean latent quality gap of A over B
judge_noise = None  # sd of the judges' perception noise on the gap
length_bias = None  # weight the off-the-shelf judge gives to the length feature
zoo_problems = None  # problems per seed in the zoo judges' population
zoo_finetune_problems = None  # separate problems per seed whose labelled pairs fine-tune the zoo judge
calibration_seeds = None  # seeds on which the fine-tuning's learning rate and epochs are chosen
ft_lrs = None  # learning rates tried on the calibration seeds
ft_epochs = None  # epochs tried on the calibration seeds
ft_batch_size = None  # preference pairs per fine-tuning step

# %%
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from icml25 import hybrid_winrate as hw
from icml25.core import check, plot

plot.use_style()
cfg = hw.config(scale, seeds=seeds, n_population=n_population, n_finetune=n_finetune, n_grid=n_grid,
                repeats=repeats, n_claim=n_claim, n_small=n_small, tie_rate=tie_rate,
                gap_mean=gap_mean, judge_noise=judge_noise, length_bias=length_bias,
                zoo_problems=zoo_problems, zoo_finetune_problems=zoo_finetune_problems,
                calibration_seeds=calibration_seeds, ft_lrs=ft_lrs, ft_epochs=ft_epochs, ft_batch_size=ft_batch_size)
cfg

# %% [markdown]
# ## The population and its two judges

# %%
pop = hw.make_population(cfg, seed)
print(f"true win rate {pop.true_win_rate:.4f}")
for judge in hw.JUDGES:
    print(f"{judge:14s} mean score {pop.scores[judge].mean():.4f}   ρ = {pop.rho(judge):.3f}   "
          f"predicted saving ρ² = {100 * pop.rho(judge) ** 2:.1f}%")

# %% [markdown]
# ## Simulating the evaluation
#
# For each seed (a fresh population and judge) and each $n$, we draw `repeats` independent sets of $n$ prompts with
# fresh human labels and compute every estimator on the same draws.

# %% [markdown]
# ## Calibrating the fine-tuning (calibration seeds only)
#
# The official scripts fine-tune an 8B reward model for one epoch at learning rate 3e-6; neither value carries to a
# judge of a quarter of a million parameters fine-tuned on a few hundred pairs. So both are chosen here, on the
# calibration seeds alone, by the fine-tuned judge's ρ² on their evaluation pairs (epochs 0 is the off-the-shelf
# judge). The verdict seeds use the winner. The calibration and the zoo judges' scores on the verdict seeds are computed
# once and cached (`hw.cached_runs`, the chapter's warm-up).

# %%
cal, runs = hw.cached_runs(cfg)
cal_table = pd.DataFrame(cal["table"]).pivot_table(index=["lr", "epochs"], columns="seed", values="rho2")
cal_table["mean"] = cal_table.mean(axis=1)
display((100 * cal_table).round(2).rename_axis(columns="ρ² (%) on calibration seed"))
print(f"chosen: learning rate {cal['lr']:g}, {cal['epochs']} epoch(s) of batches of {cfg.ft_batch_size} pairs")

# %%
zoo_pops = {s: hw.zoo_populations(z, scores, s) for s, (z, scores) in runs.items()}
for s, (pops, decided) in zoo_pops.items():
    print(f"seed {s}: {len(pops[hw.ZOO_JUDGE].z)} pairs ({100 * decided:.0f}% decided), true win rate "
          f"{pops[hw.ZOO_JUDGE].truth:.3f}; " + ", ".join(f"{j}: mean {p.s.mean():.3f}, ρ = {p.rho:.3f}"
                                                        for j, p in pops.items()))
rows = hw.run_experiment(cfg) + hw.run_zoo_experiment(cfg, zoo_pops)
ALL_JUDGES = hw.JUDGES + hw.ZOO_JUDGES
S = len(cfg.seeds)

# %%
fig, axes = plot.subplots(1, 4, sharey=True, figsize=(19, 4))
for ax, judge in zip(axes, ALL_JUDGES):
    for est, color, label in [("human", plot.PALETTE[7], "human only"), ("synthetic", plot.PALETTE[1], "synthetic only"),
                              ("cv", plot.PALETTE[0], "control variates (α fitted)")]:
        bias = [np.mean(hw.bias_pts(rows, judge, est, n)) for n in cfg.n_grid]
        se = [np.sqrt(np.mean(np.square(hw.mc_se_pts(rows, judge, est, n))) / S) for n in cfg.n_grid]
        ax.errorbar(cfg.n_grid, bias, yerr=3 * np.array(se), marker="o", capsize=3, color=color, label=label)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(title=f"Bias, {judge} judge", xscale="log", xlabel="human labels n",
           ylabel="estimate − truth (win-rate points)")
axes[0].legend(fontsize=8, title=f"mean over {S} seeds; bars ±3 MC s.e.", title_fontsize=8);

# %% [markdown]
# A judge alone is off by a fixed amount at every $n$ — more data does not help — unless it happens to be calibrated
# in the mean (the simulated fine-tuned judge is, by construction: a logistic regression with an intercept matches the
# mean of the labels it was fitted to). Control variates sit on the truth; the smallest $n$ shows the $O(1/n)$ bias that
# fitting $\alpha$ on the same labels introduces.
#
# ## The O(1/n) cost of fitting α on the same labels
#
# With α fitted on the $n$ labels it corrects, the estimate is unbiased only to first order: to order $1/n$ its bias is
# $-\mathbb E[e\,(\hat s - \mathbb E\hat s)^2] / (n \operatorname{Var}\hat s)$, $e$ the residual of the population
# regression of $z$ on $\hat s$ (the classical bias of the regression estimator). The table sets it, computed on each
# seed's population, beside the Monte Carlo bias with α fitted and with α known, for the zoo judge.

# %%
off = hw.ZOO_JUDGE
bias_table = pd.DataFrame({
    "α fitted (measured)": [np.mean(hw.bias_pts(rows, off, "cv", n)) for n in cfg.n_grid],
    "α fitted (predicted O(1/n))": [100 * np.mean([r["predicted_cv_bias"][off] for r in rows
                                                   if r["n"] == n and off in r["est"]]) for n in cfg.n_grid],
    "α known (measured)": [np.mean(hw.bias_pts(rows, off, "cv_known_alpha", n)) for n in cfg.n_grid],
    "MC s.e. of the mean": [np.sqrt(np.mean(np.square(hw.mc_se_pts(rows, off, "cv", n))) / S) for n in cfg.n_grid],
}, index=pd.Index(cfg.n_grid, name="n")).round(3)
display(bias_table.rename_axis(columns=f"bias (points), {off} judge, mean of {S} seeds"))
margin = hw.UNBIASED.effects[0].margin
fitted = bias_table["α fitted (measured)"].abs()
inside = [n for n in cfg.n_grid if (fitted[[m for m in cfg.n_grid if m >= n]] < margin).all()]
ratio = {n: bias_table.loc[n, "α fitted (predicted O(1/n))"] / bias_table.loc[n, "α fitted (measured)"]
         for n in (cfg.n_small, cfg.n_claim)}
display(Markdown(
    f"At n = {cfg.n_small} the fitted-α estimate is off by {bias_table.loc[cfg.n_small, 'α fitted (measured)']:+.2f} "
    f"points, against {bias_table.loc[cfg.n_small, 'α known (measured)']:+.2f} with α known; the first-order term "
    f"predicts {bias_table.loc[cfg.n_small, 'α fitted (predicted O(1/n))']:+.2f} there "
    f"({100 * ratio[cfg.n_small]:.0f}% of it: at so few labels the higher-order terms count too) and {100 * ratio[cfg.n_claim]:.0f}% of it at "
    f"n = {cfg.n_claim}. The measured fitted-α bias stays inside the claim's ±{margin}-point margin from "
    f"n = {min(inside) if inside else 'beyond the grid'} on this grid, and at n = {cfg.n_claim}, where `unbiased` is "
    f"decided, it is {bias_table.loc[cfg.n_claim, 'α fitted (measured)']:+.3f} points. The paper reads unbiasedness "
    f"there: its error figures (averaged MSE over model pairs, α fitted on the same labels) start at n = 200. Below "
    f"that, the bias of fitting α on the labels it corrects is a real cost of the method that those figures do not "
    f"show."))

# %% [markdown]
# ## Variance, and the saving predicted by ρ²

# %%
fig, axes = plot.subplots(1, 4, sharey=True, figsize=(19, 4))
for ax, judge in zip(axes, ALL_JUDGES):
    rho2 = np.mean(hw.rho2(rows, judge, cfg.n_grid[0]))
    sd = {e: [np.mean([r["est"][judge][e].std() for r in rows if r["n"] == n and judge in r["est"]])
              for n in cfg.n_grid]
          for e in ("human", "cv", "cv_known_alpha")}
    ax.plot(cfg.n_grid, sd["human"], "o-", color=plot.PALETTE[7], label="human only")
    ax.plot(cfg.n_grid, np.array(sd["human"]) * np.sqrt(1 - rho2), "--", color=plot.PALETTE[2],
            label="human only × √(1 − ρ²) (predicted)")
    ax.plot(cfg.n_grid, sd["cv"], "o", color=plot.PALETTE[0], label="control variates (α fitted)")
    ax.plot(cfg.n_grid, sd["cv_known_alpha"], "x", color=plot.PALETTE[4], label="control variates (α known)")
    ax.set(title=f"Spread, {judge} judge (ρ² = {rho2:.3f})", xscale="log", yscale="log", xlabel="human labels n",
           ylabel="sd of the estimate (win rate)")
axes[0].legend(fontsize=8);

# %%
saving = {j: [[100 * v for v in hw.measured_saving(rows, j, n)] for n in cfg.n_grid] for j in ALL_JUDGES}
fig, ax = plot.subplots()
for judge, color in zip(ALL_JUDGES, plot.PALETTE[:4]):
    rho2 = 100 * np.mean(hw.rho2(rows, judge, cfg.n_grid[0]))
    ax.errorbar(cfg.n_grid, [np.mean(s) for s in saving[judge]], yerr=[np.std(s) for s in saving[judge]],
                marker="o", capsize=3, color=color, label=f"{judge}: measured")
    ax.axhline(rho2, color=color, ls="--", label=f"{judge}: predicted ρ² = {rho2:.1f}%")
ax.set(title="Human labels saved by control variates", xscale="log", xlabel="human labels n",
       ylabel="saving 1 − Var(cv)/Var(human) (%)")
ax.legend(fontsize=8, title=f"mean ± sd over {S} seeds", title_fontsize=8);

# %% [markdown]
# ## Coverage of the 95% intervals

# %%
fig, ax = plot.subplots()
for judge, color in zip(ALL_JUDGES, plot.PALETTE[:4]):
    ax.plot(cfg.n_grid, [100 * hw.coverage(rows, judge, n) for n in cfg.n_grid], "o-", color=color, label=judge)
ax.axhline(95, color="k", lw=0.8)
ax.set(title="Coverage of the nominal 95% control-variates interval", xscale="log", xlabel="human labels n",
       ylabel=f"coverage (% of {S}×{cfg.repeats} repeats)")
ax.legend(fontsize=8);

# %% [markdown]
# ## Claim checks
#
# One unit per verdict seed: a fresh set of problems, sampled solutions and fine-tuning pairs, with every
# estimator computed on the same draws. `saving_zoo` is checked beside its null control, the same judge's scores
# permuted across the pairs, run through the same pipeline at the same n: a saving that a judge knowing nothing
# about the pairs would also show (the fitted α costs a little, it does not save) is not evidence.

# %%
meas = hw.claim_measurements(rows, cfg)
null_rows = hw.run_zoo_experiment(cfg, {s: hw.zoo_populations(z, scores, s, null=True)
                                        for s, (z, scores) in runs.items()})
null_meas = hw.claim_measurements(null_rows, cfg)
verdicts = {
    "unbiased": check(hw.UNBIASED, measured=meas, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
                      scale=scale, our_value=f"bias at n = {cfg.n_claim}: α fitted "
                      f"{np.mean(meas['cv_bias_pts']):+.3f} points (at n = {cfg.n_small}: "
                      f"{np.mean(meas['cv_bias_small_n_pts']):+.2f}, α known "
                      f"{np.mean(meas['cv_known_alpha_bias_small_n_pts']):+.2f})"),
    "saving_zoo": check(hw.SAVING_ZOO, measured=meas, null=null_meas, seeds=cfg.seeds,
                        calibration_seeds=cfg.calibration_seeds, scale=scale,
                        our_value=f"saved {np.mean(meas['saving_zoo_pct']):.1f}% at n = {cfg.n_claim} (ρ² "
                                  f"{np.mean(meas['rho2_zoo_pct']):.1f}%); permuted judge "
                                  f"{np.mean(null_meas['saving_zoo_pct']):+.1f}%"),
    "finetuned": check(hw.FINETUNED, measured=meas, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
                       scale=scale, our_value=f"fine-tuned {np.mean(meas['saving_finetuned_pct']):.1f}% vs "
                                              f"off-the-shelf {np.mean(meas['saving_zoo_pct']):.1f}% saved"),
}
plot.show_verdicts(*verdicts.values())

# %% [markdown]
# ## What we see

# %%
display(Markdown(
    f"The zoo judge saves {np.mean(meas['saving_zoo_pct']):.1f}% of the human labels at n = {cfg.n_claim} on "
    f"average over {S} seeds (its ρ² is {np.mean(meas['rho2_zoo_pct']):.1f}%), against "
    f"{np.mean(null_meas['saving_zoo_pct']):+.1f}% for the same scores permuted across the pairs; fine-tuned "
    f"(Bradley–Terry, every weight) on the decided pairs of {cfg.zoo_finetune_problems} separate problems per seed "
    f"it saves {np.mean(meas['saving_finetuned_pct']):.1f}% (ρ² {np.mean(meas['rho2_finetuned_pct']):.1f}%). At "
    f"n = {cfg.n_claim} the estimator with α fitted on the same labels is off by "
    f"{np.mean(meas['cv_bias_pts']):+.3f} points on average; at n = {cfg.n_small} by "
    f"{np.mean(meas['cv_bias_small_n_pts']):+.2f}, with α known by "
    f"{np.mean(meas['cv_known_alpha_bias_small_n_pts']):+.2f}: the difference is the O(1/n) cost of fitting α. "
    f"The verdicts: unbiased **{verdicts['unbiased'].label}**, saving_zoo **{verdicts['saving_zoo'].label}**, "
    f"finetuned **{verdicts['finetuned'].label}**."))

# %% [markdown]
# **A convention.** Our $\hat\alpha = \widehat{\mathrm{Cov}}(z, \hat s)/\widehat{\mathrm{Var}}(\hat s)$ uses the same
# normalisation for both moments, so it does not depend on it. The official code's main variant divides a ddof = 1
# covariance (`np.cov`) by a ddof = 0 variance (`np.var`), so its $\hat\alpha$ is ours times $n/(n-1)$: 0.5% larger at
# n = 200, and a difference that matters only at the smallest $n$.
