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
# # The reward model's margin curve: where the AI labels go wrong
#
# RLTHF starts from AI preference labels and trains a Bradley–Terry reward model (RM) on them,
#
# $$\mathcal{L} = -\,\mathbb{E}\,\log\sigma\big(\hat r(\rho_c) - \hat r(\rho_r)\big),$$
#
# then computes, for every training pair, the margin $\Delta_i = \hat r(\rho_{c,i}) - \hat r(\rho_{r,i})$ for the
# labelled preference and sorts the margins in decreasing order. A large positive margin means the RM confidently
# agrees with the label; a large negative one means it confidently contradicts it — the label is probably wrong.
# The shape of this curve tells RLTHF what to do with each region: trust the head, flip the tail past the
# *reflection point*, and send the ambiguous band between the *knee* and the reflection point to humans.
#
# **Our world.** Pairs of responses described by 16 features; a true reward $r^*(x) = w^*\!\cdot x +
# \tfrac12\tanh(u\cdot x)$; humans label by $r^*$ with 3% errors; the "AI" labeller is biased towards three style
# features and also lapses at random on a share of pairs, with the bias set so that it is right on 75% of pairs.

# %% tags=["parameters"]
scale = "ci"
seed = 0
n_train = None  # training pairs; None: the scale's value
ai_accuracy = None  # share of AI labels that agree with the truth (paper: ~75% on HH-RLHF)
ai_slip = None  # share of AI labels flipped at random (the rest of its errors come from the style bias)
# full scale: 20000 pairs, a 64-unit RM and 300 epochs (icml25.rlthf.config("full"))

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import rlthf
from icml25.core import plot

plot.use_style()
cfg = rlthf.config(scale, n_train=n_train, ai_accuracy=ai_accuracy, ai_slip=ai_slip)
cfg

# %%
train, test = rlthf.worlds(cfg, seed)
rm = rlthf.train_reward_model(train.a, train.b, train.ai, None, cfg, seed)
curve, order = rlthf.sorted_margins(rm.margin(train.a, train.b, train.ai))
points = rlthf.curve_points(curve)
ai_right = (train.ai == train.true)[order]
print(f"AI labels right on {np.mean(train.ai == train.true):.1%} of pairs; human labels on "
      f"{np.mean(train.human == train.true):.1%}")
print(f"RM trained on AI labels: {rlthf.test_accuracy(rm, test):.1f}% on clean test labels")
print(points)

# %% [markdown]
# ## Finding the points
#
# The paper finds the elbow and knee from the curve's derivative but gives no exact rule. Ours (`rlthf.curve_points`):
# on the curve normalised to the unit square, the **elbow** is the Kneedle point of the first half (where the steep
# head bends into the flat middle: farthest below the chord), the **knee** is the Kneedle point of the rest (where
# the flat middle bends down into the tail: farthest above the chord), and the **reflection point** mirrors the
# elbow through zero: the first pair past the knee whose margin is at most $-\Delta_{\text{elbow}}$.

# %%
idx = np.arange(len(curve))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
ax1.plot(idx, curve, color=plot.PALETTE[0], lw=1.5, label="sorted margin ϑ")
bottom = curve.min() - 0.08 * (curve.max() - curve.min())
ax1.plot(idx[~ai_right], np.full((~ai_right).sum(), bottom), "|", color=plot.PALETTE[1], ms=10, alpha=0.4,
         label="pairs whose AI label is wrong (rug)")
for name, i, ls in (("elbow", points.elbow, "--"), ("knee", points.knee, "-."), ("reflection", points.reflection, ":")):
    ax1.axvline(min(i, len(curve) - 1), color="k", ls=ls, lw=1, label=f"{name} ({i})")
ax1.axhline(0, color="grey", lw=0.6)
ax1.set(title="Sorted RM margins on AI-labelled pairs", xlabel="pair rank (sorted by margin)",
        ylabel="margin Δ = r̂(chosen) − r̂(rejected) (reward units)")
ax1.legend(fontsize=8, markerscale=3)
window = max(1, len(curve) // 40)
acc = np.convolve(ai_right, np.ones(window) / window, mode="valid")
ax2.plot(idx[window // 2:window // 2 + len(acc)], 100 * acc, color=plot.PALETTE[2], label=f"AI-label accuracy (moving window of {window})")
for i, ls in ((points.elbow, "--"), (points.knee, "-."), (points.reflection, ":")):
    ax2.axvline(min(i, len(curve) - 1), color="k", ls=ls, lw=1)
ax2.set(title="Where the AI labels are wrong", xlabel="pair rank (sorted by margin)",
        ylabel="AI labels agreeing with truth (%)", ylim=(0, 102))
ax2.legend(fontsize=8)
plt.show()

for name, lo, hi in (("head (before elbow)", 0, points.elbow), ("middle (elbow to knee)", points.elbow, points.knee),
                     ("band (knee to reflection)", points.knee, points.reflection),
                     ("tail (past reflection)", points.reflection, len(curve))):
    share = f"{ai_right[lo:hi].mean():.1%}" if hi > lo else "—"
    print(f"{name:28s} {hi - lo:5d} pairs, AI labels right: {share}")

# %% [markdown]
# **What we see.** The head of the curve is almost all correct AI labels, and the accuracy of the AI labels falls
# along the curve: the band between the knee and the reflection point is where wrong labels are densest, and past
# the reflection point the RM contradicts labels that are mostly wrong — those are flipped without asking anyone.
# The errors caused by the *style bias* are harder: the RM learns the bias from the AI labels themselves, so those
# wrong labels sit in the confident middle of the curve, where no margin rule can find them. Human labels in the
# band are what teaches the RM to unlearn the bias; the next notebook measures how much that buys.
