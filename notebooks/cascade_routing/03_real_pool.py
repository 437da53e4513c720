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
# # The real pool: routing and cascading among actual models
#
# The benchmark notebook routes among numbers. Here the pool is made of models that really answer: the zoo's
# arithmetic reasoners (`icml25.core.reasoners`), a ~27k-parameter *draft* that only ever saw chains of up to three
# operations and a ~108k-parameter *target* trained on up to five, plus the draft sampled at temperature 1 as a
# third, noisier member at the draft's price. Every member solves the same held-out problems (1–5 operations);
# each answer is checked exactly (`icml25.core.arithmetic.is_correct`) and costs the FLOPs of its forward passes
# over prompt and generated tokens (`icml25.core.flops.forward_flops`).
#
# The quality estimators are learned, not simulated: one logistic regression per stage, fitted on a training split
# of the problems. *Ex ante* (before running a model) it sees the prompt's number of operations, the model's
# log-size and the sampling temperature; *post hoc* (after running it) also the answer's mean token log-probability
# under the model that wrote it (`icml25.core.generation.sequence_logprobs`). The strategies see each model's mean
# training cost, since the length of an answer is known only after it is written; costs are in units of the
# target's mean FLOPs, as the synthetic pool's largest model costs 1. The covariance of
# ex-ante − post-hoc on the training split is the uncertainty of the supermodel's expected maximum, as before.
#
# `full` scale: 1,000 problems and ten seeds (the zoo models at `full` are larger and trained longer).

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the zoo models' training seed
seeds = None  # seeds of the calibration/test split and QMC points; None: the scale's value
real_n_problems = None  # held-out problems every member answers; None: the scale's value (400 at ci)
n_lambdas = None  # points on each strategy's sweep
qmc_samples = None  # quasi-Monte Carlo points for the expected maximum

# %%
import time

import numpy as np
import pandas as pd

from icml25 import cascade_routing as cr
from icml25.core import check, plot

plot.use_style()
cfg = cr.config(scale, seeds=seeds, real_n_problems=real_n_problems, n_lambdas=n_lambdas, qmc_samples=qmc_samples)
cfg

# %% [markdown]
# ## Running every member on every problem

# %%
t0 = time.perf_counter()
runs = cr.run_real_pool(cfg.real_n_problems, scale, seed)
print(f"{len(runs.correct)} problems × {len(cr.REAL_MEMBERS)} members in {time.perf_counter() - t0:.1f} s")
labels = [label for label, _, _ in cr.REAL_MEMBERS]
ops = np.unique(runs.n_ops).astype(int)
pd.DataFrame({"parameters": runs.n_params.astype(int), "mean FLOPs per query": runs.flops.mean(0).round(-3),
              "accuracy": runs.correct.mean(0).round(3),
              **{f"accuracy, {k} ops": runs.correct[runs.n_ops == k].mean(0).round(2) for k in ops}},
             index=labels)

# %% [markdown]
# ## The four strategies on the real pool

# %%
cells = cr.real_pool_cells(runs, cfg)
row = cr.mean_auc(cells)
pd.DataFrame({"AUC×100": {s: f"{m:.1f} ± {sd:.1f}" for s, (m, sd) in row.items()}})

# %%
cell = cells[0]
fig, ax = plot.subplots()
for name, color in zip(cr.STRATEGIES, plot.PALETTE):
    ec, eq = cr.upper_envelope(*cell["curves"][name])
    ax.plot(np.append(ec, cell["model_cost"].max()), np.append(eq, eq[-1]), color=color,
            label=f"{name} ({cell['auc'][name]:.1f})")
ax.plot(cell["model_cost"], cell["model_quality"], "k*", ms=9, label="single members")
for label, c, q in zip(labels, cell["model_cost"], cell["model_quality"]):
    ax.annotate(label, (c, q), textcoords="offset points", xytext=(4, -10), fontsize=7)
ax.set(title=f"Real pool: quality–cost curves (split seed {cell['seed']})",
       xlabel="mean cost per query (FLOPs, target = 1)", ylabel="accuracy (fraction correct)")
ax.legend(fontsize=7, title="strategy (AUC×100)", title_fontsize=7);

# %% [markdown]
# ## What we see
#
# The table above is the measurement. This pool is unlike the synthetic one in two ways that matter. The target
# is right on (nearly) every problem and the draft fails mostly on the long problems, which the prompt reveals:
# the number of operations is a strong *ex-ante* signal, so routing, which only needs ex-ante estimates, can send
# short problems to the draft and long ones to the target without paying for both. And a cascade must start at the
# cheapest member, here the sampled draft, which is dominated (same price as the greedy draft, lower accuracy):
# the cost-ordered prefixes of the optimal and threshold cascades pay for it on every escalated query, while cascade
# routing may skip it. Cascade routing can only beat routing where running the draft first and reading its answer's
# log-probability tells more than the prompt did; with one draft whose failures the operation count already
# predicts, there is little left to learn, so expect cascade routing and routing to be close here, and read the
# per-seed spread printed with the verdict before reading a winner into the gap. (The AUC starts at the first cost
# every strategy reaches: the two drafts cost almost the same, and which is cheaper differs between splits.)

# %% [markdown]
# ## Claim check

# %%
gain = cr.gain_over_best(row)
seed_gain = [c["auc"]["cascade routing"] - max(c["auc"]["routing"], c["auc"]["optimal cascade"]) for c in cells]
check(cr.REAL_POOL_BEATS_BOTH, seeds=cfg.seeds, scale=scale,
      measured={"real_gain": gain, "gain_sd": float(np.std(seed_gain)), "n_seeds": len(cells),
                "auc": {s: m for s, (m, _) in row.items()}},
      our_value=f"cascade routing {row['cascade routing'][0]:.1f} vs routing {row['routing'][0]:.1f}, optimal "
                f"cascade {row['optimal cascade'][0]:.1f} (gain {gain:+.2f} ± {np.std(seed_gain):.2f})")
