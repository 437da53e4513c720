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

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # populations (and their sampling streams); None: the scale's value
n_population = None  # prompts N per population
n_finetune = None  # separate human labels used to fit the fine-tuned judge
n_grid = None  # numbers n of human labels to evaluate
repeats = None  # independent draws of n labelled prompts per (seed, n)
n_claim = None  # n at which the saving is measured for the claims
n_coverage_min = None  # smallest n at which the coverage claim is checked
tie_rate = None
gap_mean = None  # mean latent quality gap of A over B
judge_noise = None  # sd of the judges' perception noise on the gap
length_bias = None  # weight the off-the-shelf judge gives to the length feature

# %%
import numpy as np
import pandas as pd

from icml25 import hybrid_winrate as hw
from icml25.core import check, plot

plot.use_style()
cfg = hw.config(scale, seeds=seeds, n_population=n_population, n_finetune=n_finetune, n_grid=n_grid,
                repeats=repeats, n_claim=n_claim, n_coverage_min=n_coverage_min, tie_rate=tie_rate,
                gap_mean=gap_mean, judge_noise=judge_noise, length_bias=length_bias)
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

# %%
rows = hw.run_experiment(cfg)
S = len(cfg.seeds)

# %%
fig, axes = plot.subplots(1, 2, sharey=True)
for ax, judge in zip(axes, hw.JUDGES):
    for est, color, label in [("human", plot.PALETTE[7], "human only"), ("synthetic", plot.PALETTE[1], "synthetic only"),
                              ("cv", plot.PALETTE[0], "control variates (α fitted)")]:
        bias = [np.mean([r["est"][judge][est].mean() - r["truth"] for r in rows if r["n"] == n]) for n in cfg.n_grid]
        se = [np.sqrt(np.mean([r["est"][judge][est].var() / cfg.repeats for r in rows if r["n"] == n]) / S)
              for n in cfg.n_grid]
        ax.errorbar(cfg.n_grid, np.array(bias) * 100, yerr=np.array(se) * 300, marker="o", capsize=3, color=color,
                    label=label)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(title=f"Bias, {judge} judge", xscale="log", xlabel="human labels n",
           ylabel="estimate − truth (win-rate points)")
axes[0].legend(fontsize=8, title=f"mean over {S} seeds; bars ±3 MC s.e.", title_fontsize=8);

# %% [markdown]
# The judge alone is off by several points at every $n$ — more data does not help. Control variates sit on the
# truth; the smallest $n$ shows the $O(1/n)$ bias that fitting $\alpha$ on the same labels introduces.
#
# ## Variance, and the saving predicted by ρ²

# %%
fig, axes = plot.subplots(1, 2, sharey=True)
for ax, judge in zip(axes, hw.JUDGES):
    rho2 = np.mean([r["rho"][judge] ** 2 for r in rows if r["n"] == cfg.n_grid[0]])
    sd = {e: [np.mean([r["est"][judge][e].std() for r in rows if r["n"] == n]) for n in cfg.n_grid]
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
saving = {j: [[100 * v for v in hw.measured_saving(rows, j, n)] for n in cfg.n_grid] for j in hw.JUDGES}
fig, ax = plot.subplots()
for judge, color in zip(hw.JUDGES, plot.PALETTE[:2]):
    rho2 = 100 * np.mean([r["rho"][judge] ** 2 for r in rows if r["n"] == cfg.n_grid[0]])
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
for judge, color in zip(hw.JUDGES, plot.PALETTE[:2]):
    ax.plot(cfg.n_grid, [100 * hw.coverage(rows, judge, n) for n in cfg.n_grid], "o-", color=color, label=judge)
ax.axhspan(93, 97, color=plot.PALETTE[2], alpha=0.15, label="93–97% (claim band)")
ax.axhline(95, color="k", lw=0.8)
ax.set(title="Coverage of the nominal 95% control-variates interval", xscale="log", xlabel="human labels n",
       ylabel=f"coverage (% of {S}×{cfg.repeats} repeats)")
ax.legend(fontsize=8);

# %% [markdown]
# ## What we see
#
# The three figures say the same thing as the paper: synthetic-only evaluation is precise but wrong; control
# variates are right, and their spread is the human-only spread shrunk by $\sqrt{1-\rho^2}$, so the label saving is
# $\rho^2$ and can be read off before labelling. The normal-approximation interval under-covers at very small $n$
# (ties and a fitted $\alpha$ make the residual distribution lumpy), which is why the coverage claim starts at
# `n_coverage_min`. The fine-tuned judge saving more is largely built into this simulation (it is trained on the very
# signal humans use); what the experiment does test is that the estimator delivers the predicted saving.
#
# ## Claim checks

# %%
ns = cfg.n_grid
check(hw.UNBIASED, seeds=cfg.seeds, scale=scale,
      measured={"n_grid": ns,
                "cv_abs_z": [abs(hw.bias_z(rows, j, "cv", n)) for j in hw.JUDGES for n in ns],
                "synthetic_abs_z": [abs(hw.bias_z(rows, j, "synthetic", n)) for j in hw.JUDGES for n in ns]},
      our_value="max |z| of control variates " + f"{max(abs(hw.bias_z(rows, j, 'cv', n)) for j in hw.JUDGES for n in ns):.2f}"
                + "; min |z| of synthetic only "
                + f"{min(abs(hw.bias_z(rows, j, 'synthetic', n)) for j in hw.JUDGES for n in ns):.1f}")

# %%
at = [r for r in rows if r["n"] == cfg.n_claim]
rho2_pct = {j: [100 * r["rho"][j] ** 2 for r in at] for j in hw.JUDGES}
save_pct = {j: [100 * v for v in hw.measured_saving(rows, j, cfg.n_claim)] for j in hw.JUDGES}
check(hw.SAVING, seeds=cfg.seeds, scale=scale,
      measured={"judges": list(hw.JUDGES), "saving_pct": [np.mean(save_pct[j]) for j in hw.JUDGES],
                "saving_sd": [np.std(save_pct[j]) for j in hw.JUDGES],
                "rho2_pct": [np.mean(rho2_pct[j]) for j in hw.JUDGES]},
      our_value="; ".join(f"{j}: saved {np.mean(save_pct[j]):.1f} ± {np.std(save_pct[j]):.1f}% vs ρ² "
                          f"{np.mean(rho2_pct[j]):.1f}%" for j in hw.JUDGES))

# %%
check(hw.FINETUNED, seeds=cfg.seeds, scale=scale,
      measured={"saving_finetuned_pct": np.mean(save_pct["fine-tuned"]),
                "saving_offshelf_pct": np.mean(save_pct["off-the-shelf"])},
      our_value=f"fine-tuned {np.mean(save_pct['fine-tuned']):.1f} ± {np.std(save_pct['fine-tuned']):.1f}% vs "
                f"off-the-shelf {np.mean(save_pct['off-the-shelf']):.1f} ± {np.std(save_pct['off-the-shelf']):.1f}%")

# %%
cov_ns = [n for n in ns if n >= cfg.n_coverage_min]
cov = [100 * hw.coverage(rows, j, n) for j in hw.JUDGES for n in cov_ns]
check(hw.COVERAGE, seeds=cfg.seeds, scale=scale,
      measured={"n": cov_ns, "coverage_pct": cov},
      our_value=f"coverage {min(cov):.1f}–{max(cov):.1f}% for n ≥ {cfg.n_coverage_min}")
