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
# # The Proposition: an outcome reward that is secretly a process reward
#
# A process reward model (PRM) scores every *step* of a solution, which is what best-of-N search and guided
# decoding want, but training one normally needs step labels (human or Monte-Carlo). Yuan et al. observe that if
# an outcome reward is written as a log-likelihood ratio,
#
# $$r_\theta(\mathbf y) = \beta \log \frac{\pi_\theta(\mathbf y)}{\pi_{\mathrm{ref}}(\mathbf y)},$$
#
# then its partial sums over the first $t$ tokens (or steps),
#
# $$q_\theta^t = \sum_{i \le t} \beta \log \frac{\pi_\theta(y_i \mid \mathbf y_{<i})}{\pi_{\mathrm{ref}}(y_i \mid \mathbf y_{<i})}
#   \;=\; \beta \log \mathbb E_{\pi_{\mathrm{ref}}(\mathbf y \mid \mathbf y_{\le t})}\, e^{r_\theta(\mathbf y)/\beta},$$
#
# are exactly a soft value of the partial solution: the (soft) expected outcome reward of finishing it with
# $\pi_{\mathrm{ref}}$. Whatever loss trained $\theta$ on outcome labels, the step reward
# $r_t = q^t - q^{t-1}$ comes for free. This notebook checks the identity exactly on a model small enough to
# enumerate, then draws the step rewards of one arithmetic solution under this chapter's trained PRM.
#
# **Parameters.** `scale` picks the preset; other knobs default to the scale's value (`None`). At `full` scale
# the tabular model has 4 symbols and length 5 and the PRM is trained on 4000 prompts × 8 responses.

# %% tags=["parameters"]
scale = "ci"
seed = 0
beta = None  # β of the implicit reward; None: the scale's value
tabular_vocab = None  # symbols of the enumerable model
tabular_length = None  # sequence length of the enumerable model

# %%
import numpy as np

from icml25 import implicit_prm
from icml25.core import arithmetic, plot, zoo
from icml25.core.seeding import torch_generator

plot.use_style()
cfg = implicit_prm.config(scale, beta=beta, tabular_vocab=tabular_vocab, tabular_length=tabular_length)
cfg

# %% [markdown]
# ## An exact check by enumeration
#
# `TabularLM` gives every prefix its own random next-symbol distribution, so $\pi_\theta$ and $\pi_{\mathrm{ref}}$
# are arbitrary autoregressive models, with no training involved: the Proposition is an identity, not a learned
# property. For every sequence $\mathbf y$ and every prefix length $t$ we compute the left side (the partial sum
# of log-ratios, `implicit_q`) and the right side (the log-expectation over all continuations drawn from
# $\pi_{\mathrm{ref}}$, `expected_exp_reward`).

# %%
policy_tab = implicit_prm.TabularLM(cfg.tabular_vocab, cfg.tabular_length, seed=seed * 2 + 1)
ref_tab = implicit_prm.TabularLM(cfg.tabular_vocab, cfg.tabular_length, seed=seed * 2 + 2)
table = implicit_prm.proposition_table(policy_tab, ref_tab, cfg.beta)
gap = np.abs(table[:, 0] - table[:, 1]).max()
print(f"{len(table)} (sequence, prefix) pairs; largest |lhs - rhs| = {gap:.2e}")

# %%
fig, ax = plot.subplots()
ax.scatter(table[:, 1], table[:, 0], s=12, alpha=0.6, label="every (y, t)")
lo, hi = table.min(), table.max()
ax.plot([lo, hi], [lo, hi], color=plot.PALETTE[1], lw=1, label="identity")
ax.set(title=f"Proposition on a {cfg.tabular_vocab}-symbol, length-{cfg.tabular_length} model (β={cfg.beta})",
       xlabel="β·log E_ref exp(r/β)   (nats × β)", ylabel="q^t = Σ β·log-ratio   (nats × β)")
ax.legend();

# %% [markdown]
# Every point sits on the identity line to floating-point precision. The unit tests repeat this check for three
# values of β and show that a *different* policy's partial sums do not match it, so the test can fail.
#
# ## Step rewards of one arithmetic solution
#
# Now the real thing: $\pi_{\mathrm{ref}}$ is the zoo's *target* arithmetic reasoner and $\pi_\theta$ started as a
# copy of it and was trained with the cross-entropy objective on solutions $\pi_{\mathrm{ref}}$ itself sampled, as
# in the paper, labelled only by whether the final answer was right (`implicit_prm.main_prm`; the next notebook
# measures it). We draw one of the *draft* reasoner's solutions (the generator of the candidates it reranks)
# that contains a wrong step
# that contains a wrong step and show $r_t$ per step (colour: the exact step verifier's verdict, which the PRM
# never saw) and the running sum $q^t$.

# %%
gen = zoo.get(implicit_prm.GENERATOR, scale, cfg.ref_seed)
prm, training = implicit_prm.main_prm(cfg, seed)
cands = implicit_prm.sample_candidates(gen.model, gen.tokenizer, implicit_prm.test_problems(cfg, seed)[:20], 4,
                                       cfg.temperature, torch_generator(seed, "implicit_prm", "example"))
problem, text, labels = implicit_prm.pick_example(cands)
steps = arithmetic.split_steps(text)
r = prm.step_rewards([problem.prompt], [text], on_missing="whole")[0]
print(f"prompt {problem.prompt}  solution {text}  (correct: {problem.solution})")
for s, rt, ok in zip(steps, r, labels):
    print(f"  {s:10s} r_t = {rt:+.3f}   verifier: {'right' if ok else 'WRONG'}")

# %%
fig, ax = plot.subplots()
x = np.arange(len(r))
colors = [plot.PALETTE[2] if ok else plot.PALETTE[1] for ok in labels]
ax.bar(x, r, color=colors)
ax.plot(x, np.cumsum(r), marker="o", color="black", label="q^t (running sum)")
ax.bar([], [], color=plot.PALETTE[2], label="step right (verifier)")
ax.bar([], [], color=plot.PALETTE[1], label="step wrong (verifier)")
ax.axhline(0, color="grey", lw=0.8)
ax.set_xticks(x, [s.rstrip(";") for s in steps])
ax.set(title=f"Implicit step rewards of one draft solution to {problem.prompt}", xlabel="step",
       ylabel="reward (β × nats)")
ax.legend();

# %% [markdown]
# **What we see.** The running sum ends at the outcome reward $r_\theta(\mathbf y)$, by construction. Whether the
# wrong step gets the lowest $r_t$ is an empirical question about how well training on outcome labels taught
# $\pi_\theta$ to disagree with $\pi_{\mathrm{ref}}$ at the right places; one example proves nothing, so the next
# notebook measures it over hundreds of solutions and several seeds. The final check here is the exact identity:

# %%
assert gap < 1e-8, gap
assert abs(np.sum(r) - prm.outcome_rewards([problem.prompt], [text])[0]) < 1e-5
print("Proposition holds exactly; step rewards telescope to the outcome reward.")
