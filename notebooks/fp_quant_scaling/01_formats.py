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
# # Floating-point formats ExMy and block scaling
#
# A floating-point format with $E$ exponent bits and $M$ mantissa bits stores $\pm 2^{e}(1 + m/2^M)$ for
# exponents $e$ from $e_{\min} = 2 - 2^{E-1}$ upward, plus the evenly spaced subnormals below $2^{e_{\min}}$.
# The paper (Sun et al.) treats every code as a finite number, so E4M3 reaches 480 where `torch.float8_e4m3fn`
# stops at 448. Before rounding, a block of $B$ consecutive elements is multiplied by
# $s = \text{FP}_{\max} / \max |X_{\text{block}}|$, so its largest element lands on the top of the grid; a larger
# block shares one scale among more elements, and small elements fall into the coarse or subnormal part of the grid.
# The law's quantisation term grows with $\log_2 B$ and shrinks with $(E+0.5)^\delta (M+0.5)^\nu$.
#
# All rounding here runs on the compiled kernel `icml25.ops.fp_quantize` (round to nearest, ties to even).

# %% tags=["parameters"]
scale = "ci"
seed = 0
formats = [(2, 1), (1, 2), (3, 1), (2, 2), (1, 3), (3, 2), (2, 3), (4, 3), (5, 2)]  # (E, M) to compare
block_sizes = [1, 4, 16, 64, 256, 1024]  # elements per scaling factor
n_random = 20000  # random values in the float8 comparison

# %%
import numpy as np
import torch

from icml25 import fp_quant_scaling as fq
from icml25.core import plot
from icml25.ops import backend

plot.use_style()
print("fp_quantize backend:", backend())

# %% [markdown]
# ## The grids
#
# Each row is one 4- to 6-bit format's non-negative values. Exponent bits buy range (E3M1 reaches 28), mantissa
# bits buy resolution within a binade (E2M3 has eight steps between 1 and 2).

# %%
fig, ax = plot.subplots(figsize=(8, 3.5))
shown = [(2, 1), (1, 2), (3, 1), (2, 2), (1, 3), (3, 2), (2, 3)]
for i, (E, M) in enumerate(shown):
    g = fq.format_grid(E, M)
    ax.scatter(g[1:], np.full(len(g) - 1, i), s=14, label=f"E{E}M{M} (max {g.max():g})")
ax.set(xscale="log", yticks=range(len(shown)), yticklabels=[f"E{E}M{M}" for E, M in shown],
       title="Positive values of low-bit ExMy formats (paper convention)", xlabel="value (log scale)",
       ylabel="format")
ax.legend(fontsize=7, loc="lower right");

# %% [markdown]
# ## Checking the kernel against PyTorch's float8
#
# With the `fn` convention (one NaN code, 448 at the top) and no block scaling, our E4M3 must agree with
# `torch.float8_e4m3fn` bit for bit, and our IEEE-convention E5M2 with `torch.float8_e5m2`: every finite float8
# value and random in-range values. The count of mismatches:

# %%
mismatch = fq.float8_mismatches(n_random, seed)
mismatch

# %% [markdown]
# ## Quantisation noise on real weights
#
# The weights of a tiny Llama trained in full precision on the next notebook's Markov language (its larger model
# and data size), flattened row by row: the relative squared error $\|Q(W) - W\|^2 / \|W\|^2$ for each format
# and block size, averaged over its fourteen linear layers.

# %%
cfg = fq.config(scale)
language = fq.MarkovLanguage.make(cfg.vocab, cfg.zipf, seed)
model, run = fq.train_model(cfg, fq.Run("L", "D2", fq.QuantSpec(None), seed), language)
print(f"trained: N = {run.N:,d} linear weights, D = {run.D:,d} tokens, held-out loss {run.loss:.3f}")
weights = [m.weight.detach() for m in model.model.layers.modules() if isinstance(m, fq.QLinear)]
err = np.array([[np.mean([fq.relative_error(w, fq.QuantSpec(E, M, B)) for w in weights]) for B in block_sizes]
                for E, M in formats])
fig, ax = plot.subplots()
for (E, M), row in zip(formats, err):
    ax.plot(np.log2(block_sizes), row, marker="o", label=f"E{E}M{M}")
ax.set(yscale="log", title="Quantisation error of a trained tiny LM's weights", xlabel="log2 of block size B",
       ylabel="relative squared error")
ax.legend(ncol=3, fontsize=7);

# %% [markdown]
# ## What we see
#
# At $B = 1$ every element gets its own scale and lands exactly on $\pm\text{FP}_{\max}$, so the error is float32
# round-off; it grows with $\log_2 B$ as more small elements share one scale. The best split at a fixed bit width
# depends on the block size: with small blocks mantissa bits win (at $B = 4$, E1M3 < E2M2 < E3M1 in error), with
# large blocks the ranking moves towards exponent bits (at 4 bits E2M1 beats E1M2 from $B = 64$ up), because one
# large element in a block pushes the others down into the range that only exponent bits cover. Exponent bits
# beyond what a block needs buy nothing: E5M2 and E3M2 have the same error. This is noise on weights, not
# training loss; the paper's exponent-versus-mantissa claim is about loss and is tested in the next notebook. The
# float8 check has zero mismatches, so the kernel rounds as PyTorch's casts do.
