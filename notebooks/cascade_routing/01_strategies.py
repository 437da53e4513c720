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
# # How each strategy decides, on one query
#
# A pool of models, ordered by cost, answers a query. Before running anything we have an *ex-ante* estimate
# $\hat q^{\text{pre}}_m$ of each model's quality and an estimate $\hat c_m$ of its cost; once model $m$ has run we
# also get a sharper *post-hoc* estimate $\hat q^{\text{post}}_m$ (think of a verifier reading the answer). All
# strategies trade quality against cost with one multiplier $\lambda$:
#
# * **routing** runs the single model maximising $\hat q^{\text{pre}}_m - \lambda \hat c_m$;
# * a **threshold cascade** runs models cheapest first and stops when $\hat q^{\text{post}}$ clears a threshold;
# * the **optimal cascade** continues only if some longer prefix $M_{1:i}$ has a better trade-off
#   $\hat q(M_{1:i}) - \lambda \hat c(M_{1:i})$ than the models already run;
# * **cascade routing** asks the same question of *every* superset of the models already run, and runs the cheapest
#   model of the best one.
#
# The quality of a set of models (a "supermodel") is the expected quality of its best member,
# $\hat q(M) = \mathbb{E}[\max_{m \in M} Q_m]$, with $Q_m$ known for models already run and
# $Q_m \sim \mathcal N(\hat q^{\text{pre}}_m, \Sigma)$ for the others, where $\Sigma$ is the covariance of
# $\hat q^{\text{pre}} - \hat q^{\text{post}}$ on training queries. The uncertainty is what makes running an extra
# model worth its cost: its answer *might* be much better.

# %% tags=["parameters"]
scale = "ci"
seed = 0
n_models = 5  # pool size of the worked example
noise = "low"  # estimator noise: low / medium / high (the paper's RouterBench settings)
lam = 0.5  # the quality-cost multiplier λ of the worked example (quality points per unit cost)
query = None  # index of the query to trace; None: the first one where cascade routing runs two models or more
n_queries = None  # None: the scale's value
qmc_samples = None

# %%
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from icml25 import cascade_routing as cr
from icml25.core import plot

plot.use_style()
cfg = cr.config(scale, n_queries=n_queries, qmc_samples=qmc_samples)
cfg

# %% [markdown]
# ## The supermodel's expected maximum
#
# For two Gaussians Clark's closed form gives $\mathbb E[\max(X_1, X_2)]$; beyond two we use quasi-Monte Carlo
# (scrambled Sobol points, antithetic, so the estimate never falls below $\max\mu$). The value of adding an unrun
# model whose estimate is $\mu_2$ next to a known quality $\mu_1 = 0.6$ grows with its uncertainty $\sigma_2$ —
# even a model that looks worse on average is worth trying if it might be much better.

# %%
sigmas = np.linspace(0, 0.6, 31)
fig, ax = plot.subplots()
for mu2, color in zip([0.4, 0.6, 0.8], plot.PALETTE):
    closed = [cr.expected_max([0.6, mu2], np.diag([0.0, s**2])) for s in sigmas]
    qmc_ = [cr.expected_max([0.6, mu2], np.diag([0.0, s**2]), n_samples=cfg.qmc_samples) for s in sigmas]
    ax.plot(sigmas, closed, color=color, label=f"closed form, μ₂ = {mu2}")
    ax.plot(sigmas, qmc_, "o", ms=3, color=color, label=f"QMC ({cfg.qmc_samples} points), μ₂ = {mu2}")
ax.set(title="Expected max of a known quality 0.6 and an unrun model", xlabel="σ₂ of the unrun model's quality",
       ylabel="E[max(Q₁, Q₂)] (quality)")
ax.legend(fontsize=8, ncol=2);

# %% [markdown]
# ## One query, four strategies
#
# We draw a synthetic RouterBench pool (models with geometric costs $3^k$, abilities growing with size plus
# domain specialists; see the next notebook) and the paper's low-noise estimators, then trace each strategy on one
# query at $\lambda$ = `lam`.

# %%
full = cr.make_pool(n_models, cfg.n_queries, seed, cfg.n_domains)
pool, est = cr.make_estimates(full, noise, seed, cfg.train_fraction)
table = cr.supermodel_table(est, cfg.qmc_samples, seed)
outs = {"routing": cr.routing(est, lam), "optimal cascade": cr.optimal_cascade(est, table, lam),
        "cascade routing": cr.cascade_routing(est, table, lam, cfg.max_depth)}
if query is None:
    query = int(np.flatnonzero(outs["cascade routing"].ran.sum(1) >= 2)[0])
print(f"query {query}: true correctness per model {pool.quality[query].astype(int)}")
print("ex-ante estimates ", est.pre[query].round(2))
print("post-hoc estimates", est.post[query].round(2))
print("estimated costs   ", est.cost[query].round(3))
for name, o in outs.items():
    print(f"{name:16s} runs models {np.flatnonzero(o.ran[query]).tolist()}, answers with model {o.answer[query]}")

# %% [markdown]
# Cascade routing's first decision compares every non-empty set $T$ of models by
# $\hat q(T) - \lambda \hat c(T)$ (nothing has run yet). Prefixes of the cost order are what the optimal cascade
# may consider, singletons are what routing may consider; cascade routing sees them all.

# %%
k = n_models
cands = cr._candidates(0, k, cfg.max_depth, prefix_only=False)
value = np.array([table[cr.config_index(0, c, k), query] - lam * sum(est.cost[query, j] for j in range(k) if c >> j & 1)
                  for c in cands])
order = np.argsort(value)[::-1][:12]
labels = ["{" + ",".join(str(j) for j in range(k) if cands[i] >> j & 1) + "}" for i in order]
is_prefix = [cands[i] & (cands[i] + 1) == 0 for i in order]
is_single = [bin(cands[i]).count("1") == 1 for i in order]
colors = [plot.PALETTE[2] if p else plot.PALETTE[0] if s_ else plot.PALETTE[7] for p, s_ in zip(is_prefix, is_single)]
fig, ax = plot.subplots()
ax.bar(range(len(order)), value[order], color=colors)
ax.set_xticks(range(len(order)), labels, rotation=45)
ax.legend(handles=[Patch(color=plot.PALETTE[2], label="prefix (the optimal cascade may pick it)"),
                   Patch(color=plot.PALETTE[0], label="single model (routing may pick it)"),
                   Patch(color=plot.PALETTE[7], label="other set (only cascade routing)")], fontsize=8)
ax.set(title=f"Query {query}: the 12 best candidate sets before any model runs (λ = {lam})",
       xlabel="set of models T (0 = cheapest)", ylabel="q̂(T) − λ ĉ(T) (quality)");

# %% [markdown]
# ## What we see
#
# The expected maximum rewards uncertainty: an unrun model is worth its cost when its answer could beat what we
# already have. Routing commits to one model before seeing any answer; a cascade must pay for every cheaper model
# on the way up; cascade routing may skip models (a set such as {1, 3}) and still stop early. The benchmark in the
# next notebook checks whether that extra freedom pays off across thousands of queries.
