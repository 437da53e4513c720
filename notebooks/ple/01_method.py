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
# # PLE, step by step: principle prompting, a falling threshold, and two losses
#
# PLE (Progressively Label Enhancement) asks the policy the same query twice: once plainly, $y \sim \pi(\cdot\mid x)$,
# and once with a *principle* $p$ prepended, $y_p \sim \pi(\cdot\mid p\oplus x)$. A reward model scores both.
# The pair then goes to exactly one of two losses (Algorithm 1 of the paper):
#
# $$
# \text{pair } (x, y, y_p) \;\to\;
# \begin{cases}
#   \text{ranking loss: } \pi(\cdot\mid x) \text{ ranks } y_p \text{ above } y & \text{if } r(y_p) - r(y) > \tau_i,\\
#   \text{reward-weighted SFT on } y \text{ and } y_p & \text{otherwise,}
# \end{cases}
# \qquad \tau_i = \tau_0\,\alpha^i .
# $$
#
# The threshold falls every iteration, so the clearest improvements are learnt by ranking first and smaller
# ones later; no generated answer is thrown away. Training always conditions on the *plain* query: the principle
# is only a way to generate better answers, which the plain policy should learn to give unprompted.
#
# **Our miniature.** The policy is the book's small arithmetic reasoner (`arith-draft`), fine-tuned once so that
# a principle marker `P` before the expression goes with careful solutions and the plain expression with sloppy
# ones (some steps corrupted), on expressions of at most three operations (the draft's training mix). The reward
# is the fraction of verified steps. This notebook draws one iteration's data and shows how the falling threshold
# routes it. The `model` parameter puts any causal LM in the draft's place.

# %% tags=["parameters"]
scale = "ci"
seed = 0
n_queries = None  # queries per iteration; None: the scale's value
n_iterations = None  # PLE iterations; None: the scale's value
tau0 = None  # initial threshold τ₀ (paper: 0.2)
alpha = None  # threshold decay α (paper: 0.9)
model = None  # the base policy: a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
# full scale: n_queries=512, n_iterations=8, its own seeds (see icml25.ple.config("full"))

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import ple
from icml25.core import plot, seeding

plot.use_style()
cfg = ple.config(scale, n_queries=n_queries, n_iterations=n_iterations, tau0=tau0, alpha=alpha, model=model)
cfg

# %% [markdown]
# ## The principled starting model
#
# `ple.start_model` loads the zoo entry `ple-start`: the zoo's arithmetic draft model with one new token `P`,
# fine-tuned (at the draft's own learning rate) on demonstrations where `P⊕x` is answered carefully and `x`
# sloppily. Sampling both ways shows the
# gap PLE wants to close.

# %%
policy, tok = ple.start_model(cfg)
queries = ple.training_queries(cfg, seed, 0)
pairs = ple.generate_pairs(policy, tok, queries, seeding.torch_generator(seed, "ple-method"))
for p, y, yp, r, rp in list(zip(pairs.problems, pairs.plain, pairs.principle, pairs.reward_plain,
                                pairs.reward_principle))[:4]:
    print(f"x = {p.prompt:12s} y   = {y:34s} r = {r:.2f}\n{'':16s} y_p = {yp:34s} r = {rp:.2f}")
print(f"sampled answers, mean reward: plain {pairs.reward_plain.mean():.3f}, "
      f"principle-guided {pairs.reward_principle.mean():.3f}")
print("held-out reward of sampled answers (the score of 02_alignment):",
      ple.evaluate(policy, tok, ple.eval_problems(cfg), ple.eval_generator(seed, "start")))

# %% [markdown]
# ## The threshold schedule and the routing
#
# `ple.threshold_schedule` gives $\tau_i = \tau_0\alpha^i$; `ple.route` sends a pair to the ranking loss when its
# reward margin $r(y_p) - r(y)$ exceeds $\tau_i$. With this iteration's data held fixed, the share routed to
# ranking can only grow as $\tau$ falls. (In the real loop the data change every iteration, too.)

# %%
taus = ple.threshold_schedule(cfg.tau0, cfg.alpha, max(cfg.n_iterations, 12))
shares = [ple.route(pairs.reward_plain, pairs.reward_principle, t).mean() for t in taus]

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
jitter = seeding.numpy_rng(seed, "jitter").normal(0, 0.01, (2, len(pairs.problems)))
ranked = ple.route(pairs.reward_plain, pairs.reward_principle, cfg.tau0)
for mask, color, label in ((ranked, plot.PALETTE[0], "→ ranking loss"),
                           (~ranked, plot.PALETTE[1], "→ weighted SFT")):
    ax1.scatter(pairs.reward_plain[mask] + jitter[0, mask], pairs.reward_principle[mask] + jitter[1, mask],
                s=14, color=color, alpha=0.7, label=label)
grid = np.linspace(0, 1, 2)
for t, ls in ((cfg.tau0, "-"), (taus[-1], ":")):
    ax1.plot(grid, grid + t, color="k", ls=ls, lw=1, label=f"r(y_p) = r(y) + τ, τ = {t:.3f}")
ax1.set(title=f"Routing at iteration 0 (τ₀ = {cfg.tau0})", xlabel="reward of plain answer r(y) (fraction of steps)",
        ylabel="reward of principle-guided answer r(y_p)", xlim=(-0.05, 1.05), ylim=(-0.05, 1.05))
ax1.legend(fontsize=8, loc="lower right")
ax2.plot(np.arange(len(taus)), taus, "o-", color=plot.PALETTE[2], label="threshold τ_i")
ax2.plot(np.arange(len(taus)), shares, "s-", color=plot.PALETTE[0], label="share of pairs routed to ranking")
ax2.set(title="Falling threshold, fixed data", xlabel="iteration i", ylabel="τ_i (reward units) / share of pairs",
        ylim=(0, None))
ax2.legend()
plt.show()

# %% [markdown]
# **What we see.** Many pairs sit on or near the diagonal (both answers equally good or equally bad): they go to
# reward-weighted SFT. The pairs well above the diagonal — the principle-guided answer clearly better — go to the
# ranking loss; many pairs lie *below* the diagonal, too, because our small policy samples noisy answers either way. The
# printed rewards show the premise of the method — the principle-guided policy is better than the plain one — and
# how large it is for this model: the gap PLE has to close. The reward takes few distinct values (fractions of
# 1–6 steps), so the share routed to ranking rises in steps as $\tau$ crosses those values.
#
# ## The two losses on one pair
#
# Both losses are computed on the *plain* query. Ranking, as RRHF defines it: a hinge on length-normalised
# log-likelihoods plus the SFT anchor on the better answer, $\max(0, \bar p(y\mid x) - \bar p(y_p\mid x)) -
# \bar p(y_p\mid x)$; the hinge is zero once $y_p$ is already preferred, the anchor keeps raising $y_p$. Weighted
# SFT: $-(w\,\bar p(y\mid x) + w_p\,\bar p(y_p\mid x))$ with $(w, w_p) = \mathrm{softmax}(r/T)$. Every method,
# PLE included, also trains on one batch of the SFT set $D_{\mathrm{sft}}$ beside each batch of its own loss. (The
# paper's exact forms were not retrieved; these are our reconstruction — see the chapter page.)

# %%
import torch

from icml25.core.generation import encode_completions

batch_y = encode_completions(tok, [p.prompt for p in pairs.problems], pairs.plain, add_eos=True)
batch_yp = encode_completions(tok, [p.prompt for p in pairs.problems], pairs.principle, add_eos=True)
with torch.no_grad():
    lp, lpp = ple.mean_logprob(policy, batch_y), ple.mean_logprob(policy, batch_yp)
w = ple.sft_weights(torch.as_tensor(pairs.reward_plain, dtype=torch.float32),
                    torch.as_tensor(pairs.reward_principle, dtype=torch.float32), cfg.sft_temperature)
print(f"ranked pairs: mean hinge {ple.ranking_loss(lp, lpp)[torch.as_tensor(ranked)].mean():.3f}, "
      f"mean ranking loss with anchor {ple.ranking_with_anchor(lp, lpp)[torch.as_tensor(ranked)].mean():.3f}; "
      f"share already ranked right {(lpp > lp)[torch.as_tensor(ranked)].float().mean():.2f}")
print(f"SFT pairs: mean weight on y_p {w[torch.as_tensor(~ranked), 1].mean():.2f}")
p_id = tok.convert_tokens_to_ids(ple.PRINCIPLE)
prompt_tokens = batch_y["input_ids"][batch_y["completion_mask"] == 0]
print("principle markers in the training prompts:", int((prompt_tokens == p_id).sum()),
      "| sampled answers that emit the marker themselves:", sum(ple.PRINCIPLE in y for y in pairs.plain))
