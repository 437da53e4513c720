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
# # One ROME edit, traced
#
# WikiBigEdit (Thede et al., ICML 2025) streams real Wikidata fact changes into a model and asks how editors cope
# as edits accumulate. This notebook takes one editor, ROME, and one edit $(s, r) \to o'$ on a tiny Llama trained
# on a synthetic fact world, and follows it through: the key $k^*$ (the input of an MLP down-projection at the
# edited token), the value $v^*$ optimised so the model answers $o'$, and the rank-one update
#
# $$W' = W + \frac{(v^* - W k^*)\,(C^{-1} k^*)^\top}{(C^{-1} k^*)^\top k^*}, \qquad C = \mathbb{E}[k k^\top] \tag{1}$$
#
# with $C$ the second moment of the down-projection's inputs at every token of generic text in the fact world's
# language (ROME estimates it from 100k Wikipedia samples; here: questions under every template, two-hop questions
# and context lines with random subjects, relations and objects, none taken from the edits). Where to edit (which layer's MLP, at which token) is chosen as ROME
# chooses it, by causal tracing. Then: what changed and what did not.
#
# **Parameters.** The parameters at `scale="full"` are stated below the parameters cell, generated from the
# configuration.

# %% tags=["parameters"]
scale = "ci"
seed = 0
model = None  # a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
v_steps = None  # optimisation steps for v*
v_lr = None

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from icml25 import knowledge_editing as ke
from icml25.core import plot

plot.use_style()
cfg = ke.config(scale, model=model, v_steps=v_steps, v_lr=v_lr)
full = ke.config("full")
print(f"At scale='full': {full.n_entities} entities x {full.n_relations} relations, {full.model} edited")
cfg

# %% [markdown]
# ## The fact model
#
# Every entity has every relation; a question is asked with two training templates, and probed with a held-out
# rephrase and a held-out "persona" template the model never saw. The model also learned to read a context line
# "ctx s′ r′ x" placed before the question (so retrieval has a reader): to copy x when the line states the asked
# fact, and to answer its own fact when the line is irrelevant (another subject, or the same subject's other
# relation), and to answer the two-hop questions "s r₁ r₂ ?" of half the subjects in two tokens, the bridge
# o = (s, r₁) and then (o, r₂) (a chain of thought: a model this small does not compose two facts in one forward
# pass). The other half's chains test whether it composes two facts it learned separately. The "ignore irrelevant
# context" rows ask each question after an irrelevant line whose combination with the question was held out of
# training (a fixed fifth of the combinations, by a stable hash): a reader that copies every line fails them.

# %%
z, world = ke.base_model(cfg, seed)
model, tok = z.model, z.tokenizer
for name, acc in ke.base_report(model, tok, world, seed).items():
    print(f"{name:45s} {acc:.2f}")

# %% [markdown]
# ## Where is the fact? Causal tracing
#
# ROME finds the site to edit by causal tracing (Meng et al., 2022): corrupt the subject's input embedding with
# Gaussian noise (3 × the embeddings' sd) so the model loses the fact, then restore the clean output of one MLP at
# one token and measure how much of p(o) comes back. The indirect effect of each (layer, token), averaged over every
# fact, is the heat map below, one panel per training template. The edit site is the (layer, token) with the largest
# effect, among the subject token (ROME's choice in large models) and the question's last token.

# %%
fig, axes = plt.subplots(1, len(ke.TRAIN_TEMPLATES), figsize=(11, 3.2))
heats = {t: ke.causal_trace(model, tok, world, t, seed=seed) for t in ke.TRAIN_TEMPLATES}
for ax, template in zip(axes, ke.TRAIN_TEMPLATES):
    heat = heats[template]
    im = ax.imshow(heat, cmap="Purples", aspect="auto", vmin=0)
    words = [w.replace("{s}", "(subject)").replace("{r}", "(relation)") for w in template.split()]
    ax.set_xticks(range(len(words)), words, rotation=30)
    ax.set(title=f"restoring the MLP output: {template}", xlabel="token", ylabel="layer",
           yticks=range(heat.shape[0]))
    fig.colorbar(im, ax=ax, label="indirect effect on p(o)")
fig.tight_layout()
layer, token = ke.traced_site(model, tok, world, seed, heats)
print(f"traced edit site: layer {layer}, the {token} token")

# %% [markdown]
# ## The value optimisation at the subject token and at the traced site
#
# For comparison, the value step (the official objective: −log p(o′), a KL term that keeps the subject's
# "essence" prompt, a weight decay and a norm clamp on δ) at the traced layer with δ at the subject token and at
# the question's last token.

# %%
edit = ke.edit_stream(world, 1, 1, seed)[0].edits[0]
print(edit)
curves = {}
for tk in ("subject", "last"):
    prompts, pos = ke.edit_prompts(edit, tk)
    curves[tk] = ke.optimise_value(model, tok, prompts, pos, edit.new, layer, cfg.v_steps, cfg.v_lr,
                                   ke.essence_prompts(edit, tk), ke.objective_of(cfg))[1]
fig, ax = plt.subplots(figsize=(6, 3.5))
for tk, losses in curves.items():
    ax.plot(losses, marker=".", label=f"δ at the {tk} token")
ax.set(title=f"Optimising v* at layer {layer}: −log p(o′)", xlabel="step", ylabel="loss (nats)")
ax.legend()
print({t: f"{c[0]:.1f} → {c[-1]:.2f} nats in {len(c)} steps" for t, c in curves.items()})

# %% [markdown]
# ## The edit, the key, the value

# %%
C = ke.key_covariance(ke.generic_keys(model, tok, world, layer, cfg.c_texts, seed))
before = ke.edit_effect(model, tok, world, edit)
trace = ke.rome_edit(model, tok, world, edit, C, layer, cfg.v_steps, cfg.v_lr, token, ke.objective_of(cfg))
after = ke.edit_effect(model, tok, world, edit)
W = ke.down_weight(model, layer)
print(f"‖W′k* − v*‖ = {(W @ trace['k_star'] - trace['v_star']).norm():.2e}, "
      f"rank(ΔW) = {int(torch.linalg.matrix_rank(trace['delta'], rtol=1e-4))}, ‖ΔW‖/‖W‖ = "
      f"{trace['delta'].norm() / (W - trace['delta']).norm():.2f}")

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
x = np.arange(len(ke.ALL_TEMPLATES))
ax.bar(x - 0.2, before["p_new"], 0.4, label="before the edit", color=plot.PALETTE[0])
ax.bar(x + 0.2, after["p_new"], 0.4, label="after the edit", color=plot.PALETTE[1])
ax.set_xticks(x, ["training 1", "training 2", "rephrase", "persona"])
ax.set(title="p(o′) for the edited fact", ylabel="probability of the new object", yscale="log")
ax.legend()
print(f"same-subject neighbours answered correctly: {before['neighbours']:.2f} → {after['neighbours']:.2f}; "
      f"facts about other subjects: {before['others']:.2f} → {after['others']:.2f}")

# %% [markdown]
# **What we see.** The tracing figure shows where this model recalls a fact; the chapter's ROME and MEMIT edit at
# the printed site on every seed's model (the lifelong notebook traces each seed's model itself). The rank-one update
# writes the optimised value for the key ($W'k^* = v^*$ to float precision, rank one); the printed p(o′) and
# neighbour accuracies say how far the edit carries to held-out templates and what it costs the subject's other
# facts. One edit is cheap to make safely; notebook [02_lifelong](02_lifelong) asks what happens when they
# accumulate.
