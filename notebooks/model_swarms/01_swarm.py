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
# # The swarm on a 2-D toy utility
#
# Model Swarms treats each LLM expert as a *particle* in weight space. Every particle has a position $x_i$
# (its weights), a velocity $v_i$ and the best position it has visited, $p_i$; the swarm shares the best
# position anyone has found, $g$, and the worst, $g_w$. One iteration moves every particle:
#
# $$v_i \leftarrow \frac{r_w\varphi_v\, v_i + r_p\varphi_p\,(p_i - x_i) + r_s\varphi_g\,(g - x_i) + r_b\varphi_w\,(x_i - g_w)}
#                       {r_w\varphi_v + r_p\varphi_p + r_s\varphi_g + r_b\varphi_w}, \qquad
#   x_i \leftarrow x_i + \lambda\, v_i,$$
#
# with $r_\cdot \sim U(0,1)$ drawn once per particle and iteration, inertia $\varphi_v=0.4$, cognitive and
# social pulls $\varphi_p=\varphi_g=0.3$, repulsion from the worst $\varphi_w=0.3$, and a step length that decays
# as $\lambda \leftarrow \max(0.95\lambda, 0.1)$. Particles whose best is stale restart at $p_i$ with zero velocity,
# and the search stops when $g$ has not improved for `patience` rounds. The swarm starts from the experts plus
# crossovers $w x_a + (1-w) x_b$, $w = 2\,U(0,1)$.
#
# Before moving real adapters, we watch the search on a 2-D utility whose experts are points in the plane: four
# experts, a low peak near two of them, a higher one away from all of them.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # seeds for the repeated toy runs; None: the scale's value
n_particles = 8  # experts (4) plus crossovers
max_iteration = 40
patience = 10

# %%
import numpy as np

from icml25 import model_swarms as ms
from icml25.core import plot

plot.use_style()
cfg = ms.config(scale, seeds=seeds)
res = ms.swarm_search(ms.TOY_EXPERTS, ms.toy_utility, seed, n_particles, max_iteration, patience)
print(f"{res.n_iterations} iterations, {res.n_evaluations} utility calls, {res.restarts} restarts; "
      f"g = {res.g:.3f} at {np.round(res.global_best, 2)}, found by particle {res.g_particle} "
      f"(initial rank {res.initial_rank} of {len(res.initial_utilities)})")

# %% [markdown]
# ## Trajectories
#
# Each line is one particle, from its start (circle) to its last position; the stars are the four experts and
# the cross the final global best. The contour lines are the utility.

# %%
grid = np.linspace(-3, 3, 121)
xx, yy = np.meshgrid(grid, grid)
zz = ms.toy_utility(np.stack([xx.ravel(), yy.ravel()], 1)).reshape(xx.shape)
fig, ax = plot.subplots(figsize=(6.2, 5.2))
cs = ax.contourf(xx, yy, zz, levels=15, cmap="Greys", alpha=0.6)
fig.colorbar(cs, ax=ax, label="utility f(x)")
traj = np.stack(res.positions)  # [rounds, N, 2]
for i in range(traj.shape[1]):
    ax.plot(traj[:, i, 0], traj[:, i, 1], "-", lw=1, alpha=0.8, color=plot.PALETTE[i % len(plot.PALETTE)])
    ax.plot(*traj[0, i], "o", ms=4, color=plot.PALETTE[i % len(plot.PALETTE)])
ax.plot(*ms.TOY_EXPERTS.T, "*", ms=14, color="black", label="initial experts")
ax.plot(*res.global_best, "X", ms=12, color=plot.PALETTE[1], label="final global best g")
ax.set(title="Particle trajectories on a 2-D utility", xlabel="weight coordinate 1", ylabel="weight coordinate 2",
       xlim=(-3, 3), ylim=(-3, 3))
ax.legend(loc="lower right");

# %% [markdown]
# ## Global best, global worst and the particles per iteration
#
# $g$ never decreases and $g_w$ never increases; the particles themselves keep moving (and the repel term keeps
# pushing them away from the worst point), so their utilities go up and down.

# %%
u = np.stack(res.utilities)
fig, ax = plot.subplots()
ax.plot(u, color="grey", alpha=0.35, lw=1)
ax.plot(res.g_history, lw=2.5, label="global best g")
ax.plot(res.g_worst_history, lw=2.5, label="global worst g_w")
ax.plot([], [], color="grey", label="particles")
ax.set(title="Utilities during the toy search", xlabel="iteration", ylabel="utility f(x) (unitless)")
ax.legend();

# %% [markdown]
# ## Does the swarm leave the experts behind?
#
# The best expert sits near the low peak. Over several seeds, how often does the search find the higher peak,
# which no expert is near, and how far does the best position end up from the best expert?

# %%
runs = [ms.swarm_search(ms.TOY_EXPERTS, ms.toy_utility, s, n_particles, max_iteration, patience) for s in cfg.seeds]
best_expert = ms.toy_utility(ms.TOY_EXPERTS).max()
final = np.array([r.g for r in runs])
fig, ax = plot.subplots()
ax.bar(["best expert"] + [f"seed {s}" for s in cfg.seeds], [best_expert, *final],
       color=[plot.PALETTE[7]] + [plot.PALETTE[0]] * len(final))
ax.axhline(max(h for _, h, _ in ms.TOY_PEAKS), ls="--", color=plot.PALETTE[1], label="highest peak")
ax.set(title="Final global best per seed", ylabel="utility f(g) (unitless)")
ax.legend();
print(f"higher peak found on {np.mean(final > 0.7):.0%} of {len(final)} seeds; mean f(g) = {final.mean():.3f} "
      f"vs best expert {best_expert:.3f}")

# %% [markdown]
# **What we see.** The experts start far from both peaks; crossovers and the random initial velocities spread
# the swarm, the social pull gathers it around whichever peak was found first, and the personal bests keep
# the record. Whether the higher peak is found depends on the seed: the swarm is a stochastic, derivative-free
# search, not a guarantee. The real experiment (next notebook) runs the same function on LoRA adapters.
