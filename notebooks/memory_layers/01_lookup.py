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
# # The product-key lookup, step by step
#
# A memory layer stores $N$ trainable values and, for each token, reads the $k$ whose keys best match the token's
# query. Scoring all $N$ keys would cost as much as the dense layer it replaces once $N$ is large, so the keys are
# a *product*: key $(i, j)$ is the concatenation of a first-half sub-key $K^1_i$ and a second-half sub-key
# $K^2_j$, with $\sqrt N$ of each, and its score splits in two:
#
# $$ s\big(q, (i, j)\big) = \langle q_1, K^1_i\rangle + \langle q_2, K^2_j\rangle . \qquad (1) $$
#
# The best $k$ pairs can only use sub-keys that are in the top $k$ of their own half (any other pair is beaten by
# $k$ pairs that swap in better sub-keys), so it suffices to score $2\sqrt N$ sub-keys, take the top $k$ of each
# half, and pick the top $k$ of the $k^2$ candidate sums. The layer then returns the softmax-weighted sum of the
# $k$ selected values (an *embedding bag*, Eq. 2), gated as in a SwiGLU (the paper's Memory+, Eq. 3).
#
# **Parameters.** `scale` picks the preset; `None` takes the scale's value. At `full` scale the timing sweep goes
# to $N = 1024^2$ values (the paper's size).

# %% tags=["parameters"]
scale = "ci"
seed = 0
knn = None  # values read per head (the paper: 32)
heads = None  # query heads (the paper: 4)
k_dim = None  # query/key dimension per head, split in two halves
lookup_sizes = None  # sqrt(N) values for the timing sweep
lookup_tokens = None  # tokens per timing call

# %%
import numpy as np
import torch
import torch.nn.functional as F

from icml25 import memory_layers as ml
from icml25 import ops
from icml25.core import plot, seeding

plot.use_style()
cfg = ml.config(scale, knn=knn, heads=heads, k_dim=k_dim, lookup_sizes=lookup_sizes, lookup_tokens=lookup_tokens)
cfg

# %% [markdown]
# ## One query, drawn
#
# A single head with $\sqrt N = 16$ sub-keys per half ($N = 256$ values) and $k = 4$. The heat map is the full
# score table $s(q,(i,j))$, which the product-key search never computes: it only scores the 16 rows and 16 columns
# (the two halves), keeps the 4 best rows and the 4 best columns (the shaded cross), and ranks the $4 \times 4$
# candidates where they intersect. The stars (product-key result) sit exactly on the circles (brute force).

# %%
g = seeding.torch_generator(seed, "lookup_demo")
n_demo, k_demo = 16, 4
q = torch.randn(1, 1, cfg.k_dim, generator=g, dtype=torch.float64)
K1, K2 = (torch.randn(1, n_demo, cfg.k_dim // 2, generator=g, dtype=torch.float64) for _ in range(2))
s1, s2 = ml.half_scores(q, K1, K2)
scores, index = ml.product_key_topk(q, K1, K2, k_demo)
bf_scores, bf_index = ml.brute_force_topk(q, K1, K2, k_demo)
rows, cols = ml.decode_index(index[0, 0], n_demo)
bf_rows, bf_cols = ml.decode_index(bf_index[0, 0], n_demo)
print("product-key top-k (i, j):", list(zip(rows.tolist(), cols.tolist())))
print("brute force top-k (i, j):", list(zip(bf_rows.tolist(), bf_cols.tolist())))

# %%
full = (s1[0, 0][:, None] + s2[0, 0][None, :]).numpy()
top_rows, top_cols = s1[0, 0].topk(k_demo).indices.numpy(), s2[0, 0].topk(k_demo).indices.numpy()
fig, ax = plot.subplots(figsize=(6.2, 5.2))
im = ax.imshow(full, cmap="viridis")
for r in top_rows:
    ax.axhspan(r - 0.5, r + 0.5, color="white", alpha=0.18)
for c in top_cols:
    ax.axvspan(c - 0.5, c + 0.5, color="white", alpha=0.18)
ax.scatter(bf_cols, bf_rows, s=160, facecolors="none", edgecolors="red", linewidths=2, label="brute force top-4")
ax.scatter(cols, rows, marker="*", s=70, color="white", label="product-key top-4")
ax.set(title="Scores of all N = 256 product keys (Eq. 1)", xlabel="second-half sub-key j",
       ylabel="first-half sub-key i")
ax.grid(False)
fig.colorbar(im, ax=ax, label="score ⟨q₁,K¹ᵢ⟩ + ⟨q₂,K²ⱼ⟩")
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2);

# %% [markdown]
# ## Checked against brute force, on many queries and heads
#
# In float64 on random queries, with several heads and with the edge case $k = \sqrt N$, the product-key top-$k$
# equals the top-$k$ of all $N$ scores (values and indices); the unit tests repeat this check.

# %%
for n, k in ((16, 4), (32, 8), (8, 8)):
    Q = torch.randn(200, cfg.heads, cfg.k_dim, generator=g, dtype=torch.float64)
    A, B = (torch.randn(cfg.heads, n, cfg.k_dim // 2, generator=g, dtype=torch.float64) for _ in range(2))
    (ps, pi), (bs, bi) = ml.product_key_topk(Q, A, B, k), ml.brute_force_topk(Q, A, B, k)
    print(f"N={n * n:5d} k={k}: max |score diff| = {float((ps - bs).abs().max()):.1e}, "
          f"same indices: {bool((pi == bi).all())}")

# %% [markdown]
# ## The weighted sum goes through the compiled embedding bag
#
# Each token's $H$ heads form one bag of $H k$ indices, weighted by each head's softmax (so the weights of a bag
# sum to $H$). `icml25.ops.embedding_bag` computes it with a compiled kernel (a sort-by-row backward without
# atomics); here it matches PyTorch's `F.embedding_bag` on a Memory+ layer's real lookup.

# %%
values = ml.new_values(cfg.n_keys ** 2, cfg.d_model, seed)
layer = ml.MemoryPlus(cfg.d_model, values, cfg.heads, cfg.knn, cfg.k_dim, seed=seed)
x = torch.randn(64, cfg.d_model, generator=g)
with torch.no_grad():
    idx, w = layer.lookup(x)
    ours = ops.embedding_bag(values, idx, w)
    torch_ref = F.embedding_bag(idx, values, per_sample_weights=w, mode="sum")
print(f"backend: {ops.backend()}; bag weights sum to {float(w.sum(1).mean()):.3f} (= heads);"
      f" max |ours - F.embedding_bag| = {float((ours - torch_ref).abs().max()):.1e}")

# %% [markdown]
# ## What the trick saves
#
# Brute force scores all $N$ keys: $O(N\,k_\text{dim})$ per token per head. The product-key search scores
# $2\sqrt N$ half-keys and $k^2$ candidates: $O(\sqrt N\,k_\text{dim} + k^2)$. We time both on the same queries
# as $N$ grows (wall-clock on this machine, one call of `lookup_tokens` tokens, so noisy at the small end).

# %%
cost = ml.lookup_cost(cfg.lookup_sizes, cfg.d_model, cfg.heads, cfg.knn, cfg.k_dim, cfg.lookup_tokens, seed)
fig, ax = plot.subplots()
ax.loglog(cost["n_values"], np.array(cost["brute_force"]) * 1e6, "o-", label="brute force (all N keys)")
ax.loglog(cost["n_values"], np.array(cost["product_key"]) * 1e6, "s-", label="product keys (2√N + k²)")
ax.set(title="Top-k key search cost against memory size", xlabel="memory size N (values)",
       ylabel="time per token (µs)")
ax.legend()
print({n: f"{b / p:.1f}x" for n, b, p in zip(cost["n_values"], cost["brute_force"], cost["product_key"])})

# %% [markdown]
# **What we see.** The search is exact, and its cost grows like $\sqrt N$ while brute force grows like $N$: at the
# paper's $N = 1024^2$ brute force would score a million keys per token and head, the product-key search about two
# thousand. The next notebook uses this layer inside a tiny Llama and asks whether the extra capacity pays off.
