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
# # The KABB selector on one task
#
# A multi-agent system can answer a task by asking every expert model and merging the answers (a
# mixture-of-agents), or by asking a small team. KABB chooses the team with Thompson sampling: every expert keeps
# a Beta posterior over its success rate, and a *knowledge distance* between the task and the expert shrinks the
# posterior of experts that look like a poor fit before sampling. This notebook draws the pieces on one task.
#
# **Parameters.** `task_concepts` and `difficulty` describe the task; `seed` picks the simulated experts. At
# `scale="full"` nothing changes here (the full-scale knobs are in `02_simulation`).

# %% tags=["parameters"]
scale = "ci"
seed = 0
task_concepts = ["algebra", "coding"]  # concepts the task needs (from icml25.kabb.CONCEPTS)
difficulty = 3.0  # task difficulty d in [1, 5]
k = None  # team size; None: the scale's value
n_draws = 4000  # Thompson draws used to estimate each expert's selection probability

# %%
import numpy as np

from icml25 import kabb
from icml25.core import plot
from icml25.core.seeding import numpy_rng

plot.use_style()
cfg = kabb.config(scale, k=k)
env = kabb.make_environment([seed], 2, cfg.n_experts)
required = kabb.task_concepts(task_concepts)
cfg

# %% [markdown]
# ## The knowledge distance
#
# For expert $e$ and task $t$ (Eq. 1 of `icml25.kabb`, the official code's form):
#
# $$\mathrm{Dist}(e,t) = \ln(1+d_t)\,\big[w_1(1-\rho_{e,t}) + w_2\,|\mathrm{dep}_e|/K + w_3(1-h_e)\big],\qquad
# \kappa_e = e^{-\mathrm{Dist}(e,t)},$$
#
# where $\rho$ is the share of the task's concepts that the knowledge graph credits to the expert, $|\mathrm{dep}|$
# its dependencies, $h = \alpha/(\alpha+\beta)$ its record, and $d$ the difficulty. Sampling $\theta_e \sim
# \mathrm{Beta}(\kappa_e\alpha_e, \beta_e)$ and keeping the top $k$ is the selection.

# %%
alpha, beta = np.full((1, cfg.n_experts), cfg.prior_alpha), np.full((1, cfg.n_experts), cfg.prior_beta)
rho = kabb.concept_overlap(env.graph[0], required)
dist = kabb.knowledge_distance(rho, env.dependencies[0], alpha[0] / (alpha[0] + beta[0]), difficulty, cfg.n_experts)
kappa = np.exp(-dist)
rng = numpy_rng(seed, "selector-demo")
draws = np.array([kabb.kabb_select(alpha, beta, env.graph, env.dependencies, required[None], np.array([difficulty]),
                                   cfg.k, rng)[0][0] for _ in range(n_draws)])
truth = kabb.success_probability(env.capability[0], np.eye(cfg.n_experts, dtype=bool), required, difficulty)

fig, (ax, ax2) = plot.subplots(1, 2, figsize=(10, 3.8))
x = np.arange(cfg.n_experts)
ax.bar(x - 0.2, rho, 0.4, label="concept overlap ρ")
ax.bar(x + 0.2, kappa, 0.4, label="κ = exp(−Dist)")
ax.set(title=f"Task needs {', '.join(task_concepts)} (d = {difficulty:g})", xlabel="expert",
       ylabel="value (unitless)", xticks=x)
ax.legend()
ax2.bar(x - 0.2, draws.mean(0), 0.4, label=f"P(selected) over {n_draws} draws")
ax2.bar(x + 0.2, truth, 0.4, label="true solo success probability")
ax2.set(title="Who gets picked before any feedback", xlabel="expert", ylabel="probability", xticks=x)
ax2.legend();

# %% [markdown]
# **What we see.** Before any feedback every expert has the same Beta(3, 2) prior, so the only thing that
# separates them is κ: the experts that the knowledge graph credits with the task's concepts get picked far more
# often, and with a correct graph these are the experts that actually succeed. That head start is the whole
# advantage of the knowledge-aware prior over plain Thompson sampling, and it is only as good as the graph.
#
# ## How the posterior moves
#
# The dual adaptation: each round every posterior decays, $(\alpha,\beta)\leftarrow\gamma(\alpha,\beta)$ with a
# floor (same mean, wider), and the experts called get $\alpha \mathrel{+}= r$, $\beta \mathrel{+}= 1-r$.

# %%
from scipy import stats

a, b = np.array([cfg.prior_alpha]), np.array([cfg.prior_beta])
grid = np.linspace(0.001, 0.999, 300)
fig, ax = plot.subplots()
ax.plot(grid, stats.beta.pdf(grid, a, b), label=f"prior Beta({a[0]:g}, {b[0]:g})")
for i in range(20):
    a, b = kabb.update(a, b, np.array([True]), np.array(float(i % 5 != 0)))
ax.plot(grid, stats.beta.pdf(grid, a, b), label=f"after 20 calls, 16 successes: Beta({a[0]:g}, {b[0]:g})")
gamma = kabb.decay_gamma(cfg)
a2, b2 = kabb.decay(a, b, 100, gamma, cfg.floor)
ax.plot(grid, stats.beta.pdf(grid, a2, b2), label=f"then 100 idle rounds of decay (γ = {gamma:g})")
ax.set(title="One expert's posterior: learning and forgetting", xlabel="success rate θ", ylabel="density")
ax.legend();
