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
# # The benchmark: quality–cost curves and the AUC table
#
# The paper's Table 1 compares routing, a threshold cascade, the optimal cascade and cascade routing on
# RouterBench with 3, 5 and 11 models and three levels of estimator noise, by the area under each strategy's
# quality–cost curve (AUC, between the cheapest and the most expensive model's cost, normalised by that range, ×100).
# RouterBench is not available offline, so we build a synthetic one with the same ingredients:
#
# * models with geometric costs $3^k$ (the largest costs 1 per unit of query length), abilities that grow with
#   size plus a random per-domain specialisation, so a small model is sometimes the best one;
# * queries with a domain, a difficulty $\theta$ and a length; model $k$ answers correctly with probability
#   $\sigma(3(a_{k,\text{domain}} - \theta))$ and costs its base cost times the length;
# * the paper's estimators: true correctness plus Gaussian noise, $\sigma_{\text{pre}}/\sigma_{\text{post}}$ =
#   0.6/0.3 (low), 1.6/0.8 (medium), 2.4/1.2 (high), each calibrated by a per-model linear regression on a training
#   split; at high noise the per-query cost is unknown too (we use the model's mean cost).
#
# Each strategy sweeps its knob, fitted on the training split as the official code fits it: one $\lambda$ for
# routing; a multiplier **per step** $\lambda_j$ ($j$ = models run so far) for the optimal cascade and cascade
# routing, from the family $\lambda_j = \lambda_0 r^j$ (a grid of $\lambda_0$, ratios `step_ratios`; $r = 1$ is a
# constant $\lambda$); one threshold per step $\tau_j = 1 - \lambda_j$ for the threshold cascade. The settings on
# the training split's quality–cost envelope are then run on the test split. Mixing two neighbouring settings
# with probability $\gamma$ reaches every point of a chord, so a strategy's curve is the upper concave envelope of
# its points.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the seed whose curves are drawn
seeds = None  # seeds of the benchmark (pool, estimator noise and QMC points); None: the scale's value
pool_sizes = None  # numbers of models; None: the scale's value ([3, 5] at ci; full adds 7)
noise_levels = None  # None: ["low", "medium", "high"]
n_queries = None  # queries per pool (a training split calibrates the estimators); None: the scale's value
n_lambdas = None  # points on each strategy's sweep
qmc_samples = None  # quasi-Monte Carlo points for the expected maximum
max_depth = None  # the most models cascade routing may plan to run on one query
step_ratios = None  # ratios r of the per-step family: λ_j is λ_0 times r^j (1.0: a constant λ)

# %%
import time

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from icml25 import cascade_routing as cr
from icml25.core import check, plot

plot.use_style()
cfg = cr.config(scale, seeds=seeds, pool_sizes=pool_sizes, noise_levels=noise_levels, n_queries=n_queries,
                n_lambdas=n_lambdas, qmc_samples=qmc_samples, max_depth=max_depth, step_ratios=step_ratios)
cfg

# %% [markdown]
# ## Running every cell of the table
#
# One cell is a (pool size, noise level, seed): draw the pool, calibrate the estimators, tabulate the supermodel
# values $\hat q(T \mid S)$ for every pair of sets (3^K per query), then sweep the four strategies. Each cell is
# cached by `cr.benchmark_results`, which the book's builder runs before the notebooks (`cr.warm_up`); what is read
# back equals `cr.run_benchmark(cfg)` (a unit test checks it).

# %%
t0 = time.perf_counter()
cells, n_now = cr.benchmark_results(cfg)
state = "computed now" if n_now == len(cells) else "loaded from the cache (computed in the warm-up)"
print(f"{len(cells)} cells, {state}" + (f" but for {n_now}" if 0 < n_now < len(cells) else "")
      + f", in {time.perf_counter() - t0:.1f} s")

# %%
k_show = max(cfg.pool_sizes)
fig, axes = plot.subplots(1, len(cfg.noise_levels), sharey=True)
axes = np.atleast_1d(axes)
for ax, noise in zip(axes, cfg.noise_levels):
    cell = next(c for c in cells if (c["n_models"], c["noise"], c["seed"]) == (k_show, noise, cfg.seeds[0]))
    for name, color in zip(cr.STRATEGIES, plot.PALETTE):
        ec, eq = cr.upper_envelope(*cell["curves"][name])
        ec = np.append(ec, cell["model_cost"].max())
        eq = np.append(eq, eq[-1])
        ax.plot(ec, eq, color=color, label=f"{name} ({cell['auc'][name]:.1f})")
    ax.plot(cell["model_cost"], cell["model_quality"], "k*", ms=8, label="single models")
    ax.set(title=f"{k_show} models, {noise} noise", xscale="log", xlabel="mean cost per query (largest model = 1)",
           ylabel="accuracy (fraction correct)")
    ax.legend(fontsize=7, title="strategy (AUC×100)", title_fontsize=7)
fig.suptitle(f"Quality–cost curves, seed {cfg.seeds[0]}");

# %% [markdown]
# ## The AUC table (mean ± sd over seeds), as in the paper's Table 1

# %%
table = cr.auc_table(cells)
frame = pd.DataFrame({f"{k} models, {noise}": {s: f"{m:.1f} ± {sd:.1f}" for s, (m, sd) in row.items()}
                      for (k, noise), row in table.items()})
frame

# %%
keys = list(table)
fig, ax = plot.subplots(figsize=(9, 3.8))
width = 0.2
for j, (name, color) in enumerate(zip(cr.STRATEGIES, plot.PALETTE)):
    ax.bar(np.arange(len(keys)) + (j - 1.5) * width, [table[key][name][0] for key in keys], width,
           yerr=[table[key][name][1] for key in keys], capsize=2, color=color, label=name)
ax.set_xticks(range(len(keys)), [f"{k} models\n{noise}" for k, noise in keys])
lo = min(table[key][s][0] for key in keys for s in cr.STRATEGIES)
ax.set(title=f"AUC of each strategy (mean ± sd over {len(cfg.seeds)} seeds)", ylabel="AUC × 100 (accuracy points)",
       ylim=(lo - 8, None))
ax.legend(fontsize=8, ncol=2);

# %% [markdown]
# ## What we see
#
# The table above is the measurement; the claim checks below turn it into verdicts with the rules fixed in
# `icml25.cascade_routing` before any run. Each seed is one paired unit: the same pool, queries and estimators for
# every strategy, so a strategy's per-seed gain over another cancels the pool's own luck. Two differences from
# the paper matter when reading it. Our quality is a single 0/1 correctness per query, so a post-hoc estimate
# with noise 0.3 nearly reveals it: cascades, which read post-hoc estimates, profit more from low noise than
# routing, which only reads ex-ante ones. And the paper searches per-step λ with Hyperopt, where we fit a
# one-parameter family of per-step values on the same training split.

# %%
seed_gain = {key: [cr.cell_gain(c) for c in cells if (c["n_models"], c["noise"]) == key] for key in table}
gains = {key: float(np.mean(g)) for key, g in seed_gain.items()}  # the per-seed gains' mean, as the claims read it
display(Markdown("Gain of cascade routing over the better of routing and the optimal cascade (AUC×100), mean ± sd "
                 "over seeds: " + "; ".join(f"{k} models, {n}: {gains[(k, n)]:+.2f} ± {np.std(seed_gain[(k, n)]):.2f}"
                                            for k, n in table) + "."))

# %% [markdown]
# ## Claim checks
#
# Every per-seed value the claims read comes from `cr.claim_measurements(cells)`; the preconditions check that
# routing and the threshold cascade do better than blindly mixing the cheapest and the largest model (the
# estimators carry information and the baselines learned; worst low- or medium-noise cell of each seed). The λ
# grid brackets the trade-off by construction (λ = 0 and a huge λ are its ends; a unit test checks both). The
# verdict seeds are `cfg.seeds`, apart from the seeds the chapter was calibrated on (`cfg.calibration_seeds`).

# %%
measured = cr.claim_measurements(cells)
v = check(cr.BEATS_BOTH, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale, measured=measured,
          our_value="; ".join(f"{k} models {n}: {gains[(k, n)]:+.2f} ± {np.std(seed_gain[(k, n)]):.2f}"
                              for k, n in table if n in ("low", "medium") and k in cr.CLAIM_POOL_SIZES))
plot.show_verdicts(v)

# %%
diff = {key: row["optimal cascade"][0] - row["threshold cascade"][0] for key, row in table.items()}
v = check(cr.OPTIMAL_CASCADE, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale, measured=measured,
          our_value="; ".join(f"{k}/{n}: {d:+.2f}" for (k, n), d in diff.items() if k in cr.CLAIM_POOL_SIZES))
plot.show_verdicts(v)

# %%
if "low_minus_high" in measured:
    v = check(cr.ESTIMATORS_MATTER, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
              scale=scale, measured=measured,
              our_value="; ".join(f"{k} models: low {gains[(k, 'low')]:+.2f}, high {gains[(k, 'high')]:+.2f}"
                                  for k in cr.CLAIM_POOL_SIZES if (k, "low") in gains))
    plot.show_verdicts(v)
