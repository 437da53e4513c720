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
# on a synthetic fact world, and follows it through: the key $k^*$ (the input of layer 0's MLP down-projection at
# the subject token), the value $v^*$ optimised so the model answers $o'$, and the rank-one update
#
# $$W' = W + \frac{(v^* - W k^*)\,(C^{-1} k^*)^\top}{(C^{-1} k^*)^\top k^*}, \qquad C = \mathbb{E}[k k^\top] \tag{1}$$
#
# with $C$ estimated from the model's own keys. Then: what changed and what did not.
#
# **Parameters.** At `scale="full"`: 2000 entities, 8 relations, a `base`-size model trained 20k steps.

# %% tags=["parameters"]
scale = "ci"
seed = 0
rome_layer = None  # the MLP whose down-projection is edited
v_steps = None  # optimisation steps for v*
v_lr = None

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from icml25 import knowledge_editing as ke
from icml25.core import plot

plot.use_style()
cfg = ke.config(scale, rome_layer=rome_layer, v_steps=v_steps, v_lr=v_lr)
cfg

# %% [markdown]
# ## The fact model
#
# Every entity has every relation; a question is asked with two training templates, and probed with a held-out
# rephrase and a held-out "persona" template the model never saw.

# %%
z, world = ke.base_model(cfg, seed)
model, tok = z.model, z.tokenizer
pairs = list(world.facts)
truth = [world.facts[p] for p in pairs]
for t in ke.TRAIN_TEMPLATES + ke.REPHRASE_TEMPLATES + ke.PERSONA_TEMPLATES:
    print(f"{t!r:32s} accuracy {ke.answer_accuracy(model, tok, pairs, truth, t):.2f}")

# %% [markdown]
# ## The edit, the key, the value

# %%
edit = ke.edit_stream(world, 1, 1, seed)[0].edits[0]
neighbours = [(edit.subject, r) for r in world.relations if r != edit.relation]
others = [p for p in pairs if p[0] != edit.subject]
C = ke.key_covariance(ke.subject_keys(model, tok, world, cfg.rome_layer))
templates = {"edit": ke.TRAIN_TEMPLATES[1], "other train template": ke.TRAIN_TEMPLATES[0], "rephrase": ke.REPHRASE_TEMPLATES[0], "persona": ke.PERSONA_TEMPLATES[0]}
before = {name: ke.next_token_probs(model, tok, [ke.question(edit.subject, edit.relation, t)], [edit.new])[0]
          for name, t in templates.items()}
acc_before = ke.answer_accuracy(model, tok, others, [world.facts[p] for p in others], ke.TRAIN_TEMPLATES[0])
W0 = model.model.layers[cfg.rome_layer].mlp.down_proj.weight.clone()
# the edit is fitted on the template that puts the relation before the subject, so the key at the subject token
# (layer 0) already carries the relation through attention; with "{s} {r} ?" it would be the subject alone
trace = ke.rome_edit(model, tok, world, edit, C, cfg.rome_layer, cfg.v_steps, cfg.v_lr,
                     template=ke.TRAIN_TEMPLATES[1])
print(edit)
print(f"‖W′k* − v*‖ = {(model.model.layers[cfg.rome_layer].mlp.down_proj.weight @ trace['k_star'] - trace['v_star']).norm():.2e}"
      f", rank(ΔW) = {int(torch.linalg.matrix_rank(trace['delta'], rtol=1e-4))}")

# %%
after = {name: ke.next_token_probs(model, tok, [ke.question(edit.subject, edit.relation, t)], [edit.new])[0]
         for name, t in templates.items()}
keep_nb = ke.answer_accuracy(model, tok, neighbours, [world.facts[p] for p in neighbours], ke.TRAIN_TEMPLATES[0])
acc_after = ke.answer_accuracy(model, tok, others, [world.facts[p] for p in others], ke.TRAIN_TEMPLATES[0])
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
axes[0].plot(trace["losses"], marker=".")
axes[0].set(title="Optimising v*: −log p(o′ | edit question)", xlabel="step", ylabel="loss (nats)")
x = np.arange(len(templates))
axes[1].bar(x - 0.2, list(before.values()), 0.4, label="before the edit", color=plot.PALETTE[0])
axes[1].bar(x + 0.2, list(after.values()), 0.4, label="after the edit", color=plot.PALETTE[1])
axes[1].set_xticks(x, list(templates), rotation=15)
print("p(o′) before:", {k: f"{v:.2e}" for k, v in before.items()}, "after:", {k: f"{v:.2e}" for k, v in after.items()})
axes[1].set(title="p(o′) for the edited fact", ylabel="probability of the new object (log scale)", yscale="log")
axes[1].legend()
print(f"same-subject neighbours still answered correctly: {keep_nb:.2f}; "
      f"other facts: {acc_before:.2f} before, {acc_after:.2f} after")

# %% [markdown]
# **What we see.** The value optimisation drives the new object's probability up on the question it was fitted
# on (by orders of magnitude, though 25 steps do not make it the top answer on this tiny model); the rank-one
# update then writes exactly that value for the key ($W'k^* = v^*$ to float precision, rank one). How far it
# carries to the other templates, and whether the subject's other relations (the hard neighbours) and unrelated
# facts survive, is printed above: a key at the subject token is shared by many questions about that subject,
# which is ROME's route to generalisation and its risk for locality. The lifelong
# experiment (windows of edits, every method, retention) is not built yet; see the chapter's issue.
