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
# # The RSD mixture and why a threshold is optimal
#
# Reward-guided speculative decoding (RSD) lets a cheap **draft** model write each reasoning step, asks a process
# reward model (PRM) for the step's reward $r$, and keeps the step when $r \ge \delta$; otherwise the expensive
# **target** model writes that step instead. For one step this defines a mixture of the two models:
#
# $$P_\text{RSD}(y) = \omega(r(y))\,P_\text{draft}(y) + \nu\,P_\text{target}(y), \qquad
#   \nu = \sum_y \big(1-\omega(r(y))\big)\,P_\text{draft}(y), \qquad \omega(r) = \mathbf 1\{r \ge \delta\}.
#   \tag{1, 2}$$
#
# $\nu$ is the probability that the target is called. RSD is *biased* on purpose: unlike classic speculative
# decoding it does not reproduce $P_\text{target}$; it leans towards high-reward outputs. This notebook checks the
# mixture on a toy categorical by sampling, then checks the paper's optimality argument by brute force.

# %% tags=["parameters"]
scale = "ci"
seed = 0
toy_samples = None  # RSD draws for the sampling check; None: the scale's value
toy_delta = None  # the threshold δ shown in the first figure; None: the scale's value

# %%
import numpy as np

from icml25 import rsd
from icml25.core import plot

plot.use_style()
cfg = rsd.config(scale, toy_samples=toy_samples, toy_delta=toy_delta)
cfg

# %% [markdown]
# ## The mixture, computed and sampled
#
# Five outcomes, a draft that likes the low-reward ones and a target that likes the high-reward ones. We compute
# Eq. (1) with `rsd.mixture` and compare it with outcomes drawn the way RSD draws them (`sample_rsd_categorical`:
# draw from the draft, keep if $r \ge \delta$, else draw from the target).

# %%
p_draft = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
p_target = np.array([0.05, 0.1, 0.15, 0.3, 0.4])
reward = np.array([0.2, 0.5, 0.75, 0.9, 0.95])
mix = rsd.mixture(p_draft, p_target, reward, cfg.toy_delta)
draws = rsd.sample_rsd_categorical(p_draft, p_target, reward, cfg.toy_delta, cfg.toy_samples, seed)
empirical = np.bincount(draws, minlength=len(mix)) / len(draws)
tv = 0.5 * np.abs(empirical - mix).sum()

fig, ax = plot.subplots()
x = np.arange(len(mix))
for k, (vals, lab) in enumerate([(p_draft, "draft"), (p_target, "target"), (mix, "RSD, Eq. (1)"),
                                 (empirical, f"RSD, {cfg.toy_samples:,} samples")]):
    ax.bar(x + (k - 1.5) * 0.2, vals, width=0.2, label=lab)
ax.set_xticks(x, [f"y{i}\nr={r:.2f}" for i, r in enumerate(reward)])
ax.set(title=f"One RSD step at δ = {cfg.toy_delta}", xlabel="outcome and its reward", ylabel="probability")
ax.legend()
print(f"Eq. (1) sums to {mix.sum():.6f}; target called with probability ν = {p_draft[reward < cfg.toy_delta].sum():.2f}; "
      f"total variation between samples and Eq. (1): {tv:.4f}")

# %% [markdown]
# **What we see.** Outcomes with $r \ge \delta$ keep their draft mass *plus* a share of the target's; outcomes
# below the threshold get only the target's share, scaled by $\nu$. The sampled frequencies sit on Eq. (1).
#
# ## Expected reward against target calls, as δ moves
#
# The paper's objective is the expected reward of the mixture,
#
# $$\mathbb E_{P_\text{RSD}}[r] = \sum_{y\in S} P_\text{draft}(y)\,r(y) + P_\text{draft}(S^c)\,
#   \mathbb E_{P_\text{target}}[r], \tag{3}$$
#
# where $S$ is the set of accepted draft outcomes. Sweeping $\delta$ trades target calls ($\nu$) for reward.

# %%
deltas = np.linspace(0, 1.01, 102)
nu = [p_draft[reward < d].sum() for d in deltas]
value = [rsd.expected_reward(p_draft, p_target, reward, reward >= d) for d in deltas]
fig, ax = plot.subplots()
ax.plot(deltas, value, label="E[r] under RSD, Eq. (3)")
ax.plot(deltas, nu, "--", label="ν: probability of a target call")
ax.axhline((p_draft * reward).sum(), color="grey", lw=0.8, label="E[r], draft only")
ax.axhline((p_target * reward).sum(), color="k", lw=0.8, label="E[r], target only")
ax.set(title="Reward and target calls as the threshold moves", xlabel="threshold δ",
       ylabel="expected reward / probability")
ax.legend();

# %% [markdown]
# ## Is the threshold set really the best acceptance set?
#
# Fix the budget on target calls, i.e. the draft mass $P_\text{draft}(S)$ that is accepted. Among **all** $2^8$
# acceptance sets of eight outcomes with that draft mass, which maximises Eq. (3)? The paper's answer is the
# threshold set $\{r \ge \delta\}$: any other set of equal mass swaps some high-reward outcomes for lower-reward
# ones. We check it by enumeration (`brute_force_best`), with draft masses in sixteenths so that many sets tie in
# mass and the threshold set has real competitors.

# %%
rng = np.random.default_rng(seed)
p_m8 = rng.multinomial(16 - 8, np.full(8, 1 / 8)) + 1  # every outcome gets at least 1/16
p_m8 = p_m8 / p_m8.sum()
p_t8 = rng.dirichlet(np.ones(8))
r8 = rng.random(8)
rows = []
for d in np.sort(r8):
    s_delta = r8 >= d
    mass = p_m8[s_delta].sum()
    competitors = [s for s in rsd.acceptance_sets(8) if abs(p_m8[s].sum() - mass) < 1e-9]
    values = [rsd.expected_reward(p_m8, p_t8, r8, s) for s in competitors]
    best, _ = rsd.brute_force_best(p_m8, p_t8, r8, mass)
    rows.append((mass, rsd.expected_reward(p_m8, p_t8, r8, s_delta), best, values))

fig, ax = plot.subplots()
for k, (mass, thr, best, values) in enumerate(rows):
    ax.scatter([mass] * len(values), values, color=plot.PALETTE[7], s=12, alpha=0.6,
               label="any acceptance set of that mass" if k == 0 else None)
    ax.scatter([mass], [thr], color=plot.PALETTE[1], marker="*", s=120, label="threshold set {r ≥ δ}" if k == 0 else None)
ax.set(title="Threshold sets against every set of equal draft mass (8 outcomes)",
       xlabel="accepted draft mass P_draft(S) = 1 − ν", ylabel="expected reward, Eq. (3)")
ax.legend()
optimal = all(abs(thr - best) < 1e-12 for _, thr, best, _ in rows)
print(f"{sum(len(v) for *_, v in rows)} sets compared over {len(rows)} thresholds; "
      f"threshold set optimal every time: {optimal}")

# %% [markdown]
# **What we see.** At every budget the threshold set (star) is at the top of its column: no other acceptance set
# with the same rate of target calls earns more expected reward. This is the paper's theoretical result in
# miniature; notebook 2 asks whether it matters on real (tiny) reasoning models, where the reward comes from a PRM
# and the steps of a solution interact. The chapter's claim checks (efficiency, best-of-N, threshold vs. random)
# are made there, on the reasoners; this notebook's checks are exact and are also unit tests.
