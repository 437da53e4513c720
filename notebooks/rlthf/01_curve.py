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
# features, with the bias set so that it is right on 75% of pairs. Its errors are *systematic* — the same pair always
# gets the same label, and a reward model trained on its labels learns the bias — and concentrated on *hard* pairs:
# the bias can only overturn a preference whose true reward difference is smaller than the style difference. (An
# earlier version of this chapter also let the labeller lapse at random on 12% of pairs; such lapses are what any
# flip rule removes, so they made the loop look good without humans. `ai_slip` brings them back.)

# %% tags=["parameters"]
scale = "ci"
seed = 0
n_train = None  # training pairs; None: the scale's value
ai_accuracy = None  # share of AI labels that agree with the truth (paper: ~75% on HH-RLHF)
ai_slip = None  # share of AI labels flipped at random on top of the style bias (default 0)
# full scale: 20000 pairs, a 64-unit RM and 300 epochs (icml25.rlthf.config("full"))

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from icml25 import rlthf
from icml25.core import plot

plot.use_style()
cfg = rlthf.config(scale, n_train=n_train, ai_accuracy=ai_accuracy, ai_slip=ai_slip)
cfg

# %%
train, test = rlthf.worlds(cfg, seed)
world_weights = rlthf.world_weights(seed, cfg.n_features)
rm = rlthf.train_reward_model(train.a, train.b, train.ai, None, cfg, seed)
curve, order = rlthf.sorted_margins(rm.margin(train.a, train.b, train.ai))
points = rlthf.curve_points(curve)
ai_right = (train.ai == train.true)[order]
print(f"AI labels right on {np.mean(train.ai == train.true):.1%} of pairs; human labels on "
      f"{np.mean(train.human == train.true):.1%}")
print(f"RM trained on AI labels: {rlthf.test_accuracy(rm, test):.1f}% on clean test labels")
print(points)

# %% [markdown]
# ## Where the AI labeller errs: the hard pairs
#
# The AI-label error rate against the size of the true reward difference $|r^*(a) - r^*(b)|$ (deciles of the
# training pairs): the labeller is nearly always right on easy pairs and errs on the hard ones.

# %%
true_gap = np.abs(rlthf.true_reward(train.a, *world_weights) - rlthf.true_reward(train.b, *world_weights))
deciles = np.quantile(true_gap, np.linspace(0, 1, 11))
which = np.clip(np.searchsorted(deciles, true_gap, side="right") - 1, 0, 9)
err = [100 * np.mean(train.ai[which == d] != train.true[which == d]) for d in range(10)]
fig, ax = plt.subplots(figsize=(6.5, 3.6))
ax.bar(np.arange(1, 11), err, color=plot.PALETTE[1])
ax.set(title="AI-label errors by difficulty", xlabel="decile of the true reward difference |Δr*| (1: hardest)",
       ylabel="AI labels that are wrong (%)")
plt.show()

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

# %%
inside, outside = rlthf.band_error_rates(train.ai, train.true, order, points)
display(Markdown(
    f"**What we see.** The AI labels are wrong on {100 * np.mean(train.ai != train.true):.1f}% of the training "
    f"pairs: on {err[0]:.0f}% of the hardest decile and {err[-1]:.0f}% of the easiest. Inside the band "
    f"[knee, reflection) that RLTHF sends to humans, {inside:.1f}% of the AI labels are wrong; outside it, "
    f"{outside:.1f}%. Because the reward model learns the labeller's bias from the labels themselves, many wrong "
    "labels sit in the confident part of the curve, where no margin rule can find them; human labels in the band "
    "are what teaches the reward model to unlearn the bias. The next notebook measures how much that buys."))
