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
# # How AoE picks experts, next to a router
#
# A routed mixture-of-experts layer scores the $n$ experts with a linear router, $s = x W_g$, and sends each token
# to the top $K$. The experts have no say: a router that misjudges a token sends it to an expert that does not
# know it. Autonomy-of-Experts (AoE) lets each expert judge for itself. Expert $i$'s first step is a low-rank
# projection $C_i = x W_\text{down}^i$; the experts are ranked by $\|C_i\|_2$ (an expert whose weights respond
# strongly to the token "knows" it), and only the top $K$ continue their forward pass from the same $C_i$:
#
# $$ y = \sum_{i \in \operatorname{top}_K} \hat p_i\,\big(\operatorname{SiLU}(C_i W_\text{up}^i) \odot x W_p^i\big)
#    W_o^i, \qquad \hat p = \operatorname{softmax}\big(\|C_i\|\big)_{i \in \operatorname{top}_K}. $$
#
# The $n$ projections are one GEMM with the concatenated $W_\text{down} \in \mathbb R^{d \times n d_\text{low}}$;
# the $n - K$ unselected experts waste only that low-rank part. Eq. 5 picks $d_\text{wide}$ so an AoE expert has
# the parameters of a SwiGLU expert of width $d_\text{ffn}$.

# %% tags=["parameters"]
scale = "ci"
seed = 0
d_model = None  # model width d
n_experts = None
top_k = None  # experts per token K
d_ffn = None  # width of the MoE's SwiGLU experts
d_lows = None  # AoE low-rank widths (the first is shown here)

# %%
import numpy as np
import torch

from icml25 import aoe
from icml25 import ops
from icml25.core import plot, seeding

plot.use_style()
cfg = aoe.config(scale, d_model=d_model, n_experts=n_experts, top_k=top_k, d_ffn=d_ffn, d_lows=d_lows)
cfg

# %% [markdown]
# ## Equal parameters (Eq. 5)
#
# $d_\text{wide} = (3 d\, d_\text{ffn} - d_\text{low} d)/(d_\text{low} + 2d)$, rounded up (the paper's 4B model has
# $d_\text{wide} = 6470$), so an AoE expert has at most one column of $d_\text{wide}$ more than the SwiGLU expert.

# %%
moe_layer = aoe.MoEFFN(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_ffn, seed=seed)
print(f"MoE expert: 3·d·d_ffn = {aoe.swiglu_expert_params(cfg.d_model, cfg.d_ffn):,d} parameters "
      f"(+ a router of {cfg.d_model * cfg.n_experts:,d} for the layer)")
for d_low in cfg.d_lows:
    w = aoe.d_wide_eq5(cfg.d_model, cfg.d_ffn, d_low)
    print(f"AoE d_low={d_low:3d}: d_wide={w}, {aoe.aoe_expert_params(cfg.d_model, d_low, w):,d} parameters")

# %% [markdown]
# ## One batch of tokens, two ways of choosing
#
# Both layers at initialisation, on the same 24 random tokens. Top row: the scores each layer ranks by (router
# logits; AoE expert norms $\|C_i\|$), with the chosen $K$ experts circled. Bottom row: the routing weights that
# reach the experts after the top-$K$ renormalisation.

# %%
aoe_layer = aoe.AoEFFN(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_ffn, cfg.d_lows[0], seed=seed)
x = torch.randn(24, cfg.d_model, generator=seeding.torch_generator(seed, "routing_demo"))
demos = {"routed MoE (router logits)": aoe.selection_demo(moe_layer, x),
         f"AoE (‖C_i‖, d_low={cfg.d_lows[0]})": aoe.selection_demo(aoe_layer, x)}
fig, axes = plot.subplots(2, 2, figsize=(11, 6.5))
for col, (name, demo) in enumerate(demos.items()):
    im = axes[0, col].imshow(demo["scores"].T.numpy(), aspect="auto", cmap="viridis")
    tok = np.repeat(np.arange(x.shape[0]), cfg.top_k)
    axes[0, col].scatter(tok, demo["index"].flatten().numpy(), s=40, facecolors="none", edgecolors="red",
                         label=f"top-{cfg.top_k}")
    axes[0, col].set(title=name, xlabel="token", ylabel="expert")
    fig.colorbar(im, ax=axes[0, col], label="score")
    dense = torch.zeros(x.shape[0], cfg.n_experts).scatter(1, demo["index"], demo["weight"])
    im2 = axes[1, col].imshow(dense.T.numpy(), aspect="auto", cmap="magma", vmin=0, vmax=1)
    axes[1, col].set(title="routing weights after top-k", xlabel="token", ylabel="expert")
    fig.colorbar(im2, ax=axes[1, col], label="weight")
    for ax in axes[:, col]:
        ax.grid(False)
axes[0, 0].legend(loc="upper right");

# %% [markdown]
# ## Three identities the layer relies on
#
# 1. softmax over all experts → top-$K$ → renormalise is the softmax over the $K$ selected scores;
# 2. the single GEMM $x\,[W_\text{down}^1 \dots W_\text{down}^n]$ gives every expert's $C_i$;
# 3. the vectorised layer, dispatching through the compiled `expert_ffn` kernel with $C$ as the gate input,
#    equals a naive loop over tokens and experts (the unit tests also compare gradients).

# %%
router_logits = aoe.selection_demo(moe_layer, x)["scores"]
routed, _ = aoe.top_k_softmax(router_logits, cfg.top_k)
subset = torch.softmax(router_logits.gather(1, routed.index), -1)
with torch.no_grad():
    C, norms = aoe.aoe_scores(x, aoe_layer.w_down, cfg.n_experts)
    per_expert = torch.stack([x @ aoe_layer.w_down[:, i * cfg.d_lows[0]:(i + 1) * cfg.d_lows[0]]
                              for i in range(cfg.n_experts)], 1)
    fast, slow = aoe_layer(x), aoe.aoe_reference(aoe_layer, x)
print(f"1. max |renormalised - subset softmax| = {float((routed.weight - subset).abs().max()):.1e}")
print(f"2. max |batched C - per-expert C|      = {float((C - per_expert).abs().max()):.1e}")
print(f"3. max |AoE layer - naive loop|         = {float((fast - slow).abs().max()):.1e}  (backend: {ops.backend()})")

# %% [markdown]
# ## How sure each layer is
#
# The *confidence entropy* of a token is the entropy of the selection distribution over all $n$ experts (low:
# the layer is sure which experts want the token); the *load entropy* is the entropy of the share of top-$K$
# slots each expert gets ($\log n$ = perfectly balanced). At initialisation both layers are near-uniform; the
# next notebook trains them and measures both again.

# %%
fig, ax = plot.subplots()
for (name, demo), color in zip(demos.items(), plot.PALETTE):
    ent = -(demo["probs"] * demo["probs"].log()).sum(-1).numpy()
    ax.hist(ent, bins=12, alpha=0.6, color=color, label=name)
ax.axvline(np.log(cfg.n_experts), color="k", ls="--", label=f"uniform (log {cfg.n_experts})")
ax.set(title="Selection entropy per token at initialisation", xlabel="entropy of p over experts (nats)",
       ylabel="tokens")
ax.legend(fontsize=8)
for name, demo in demos.items():
    print(f"{name}: Ent_conf={aoe.confidence_entropy(demo['probs']):.3f}, "
          f"Ent_load={aoe.load_entropy(demo['index'], cfg.n_experts):.3f} nats")
