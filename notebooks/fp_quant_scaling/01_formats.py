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
weight_steps = None  # training steps of the model whose weights are quantised; None: a quarter of notebook 2's

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
# Each row is one 4- to 6-bit format's non-negative values. Exponent bits buy range (the legend gives each
# format's largest value), mantissa bits buy resolution within a binade (E2M3 has eight steps between 1 and 2).

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
# The weights of the next notebook's tiny Llama, trained in full precision on its Markov language, flattened
# row by row: the relative squared error $\|Q(W) - W\|^2 / \|W\|^2$ for each format and block size, averaged
# over its fourteen linear layers.

# %%
cfg = fq.config(scale)
cfg = fq.config(scale, steps=weight_steps or max(1, cfg.steps // 4))
language = fq.MarkovLanguage.make(cfg.vocab, cfg.zipf, seed)
run, model = fq.train_run(cfg, fq.QuantSpec(None), seed, language, return_model=True)
print(f"trained: N = {run.N:,d} linear weights, D = {run.D[-1]:,d} tokens, held-out loss {run.loss[-1]:.3f}")
weights = [m.weight.detach() for m in model.model.layers.modules() if isinstance(m, fq.QLinear)]
err = np.array([[np.mean([fq.relative_error(w, fq.QuantSpec(E, M, B)) for w in weights]) for B in block_sizes]
                for E, M in formats])
fig, ax = plot.subplots()
for (E, M), row in zip(formats, err):
    ax.plot(np.log2(block_sizes), row, marker="o", label=f"E{E}M{M}")
ax.set(yscale="log", title="Quantisation error of a trained tiny LM's weights", xlabel="log2 of block size B",
       ylabel="relative squared error")
ax.legend(ncol=3, fontsize=7);

# %%
from IPython.display import Markdown, display

i4 = block_sizes.index(4) if 4 in block_sizes else 0
errs = {f"E{E}M{M}": err[k] for k, (E, M) in enumerate(formats)}
display(Markdown(
    "**What we see.** At $B = 1$ every element gets its own scale and lands exactly on $\\pm$FPmax, so the error "
    f"is float32 round-off ({err[:, 0].max():.1e} at most); it grows with $\\log_2 B$ as more small elements share "
    f"one scale. Float8 mismatches against PyTorch's casts: {sum(mismatch.values())}. At 4 bits, E1M2 against E2M1 "
    f"in error: {errs['E1M2'][i4]:.3g} vs {errs['E2M1'][i4]:.3g} at B = {block_sizes[i4]}, "
    f"{errs['E1M2'][-1]:.3g} vs {errs['E2M1'][-1]:.3g} at B = {block_sizes[-1]}: with one large element in a block "
    "the others fall into the range only exponent bits cover. This is noise on weights, not training loss; the "
    "paper's exponent-versus-mantissa claim is about loss and is tested in the next notebook."))
