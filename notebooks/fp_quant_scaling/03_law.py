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
# # What the law implies: critical data size and optimal precision
#
# With the paper's fitted constants (its Table 2), the law makes three predictions we can recompute exactly.
#
# **Critical data size.** The quantisation term grows as $D^\beta$ while the data term shrinks as $D^{-\beta}$,
# so at fixed $N$ the loss has a minimum in $D$: setting $\partial L / \partial D = 0$ gives
# $$D_{crit} = \left[\frac{d\,\gamma\,N^\alpha (E+0.5)^\delta (M+0.5)^\nu}{\log_2 B}\right]^{1/(2\beta)}.$$
# Past it, more training tokens *raise* the loss of a low-precision run.
#
# **Optimal layout.** At $P = E + M + 1$ bits, minimising the quantisation term gives
# $M_{opt} = \nu P / (\delta + \nu) - 0.5$; since $\delta > \nu$, slightly more bits go to the exponent.
#
# **Cost-optimal precision.** With cost $C = k P N D$ ($k = 6/16$), the best precision at each budget.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # nothing here is random; kept for the common interface
model_size = 1e9  # N for the critical-data-size figure
block_size = 128  # B
compute_budgets = [1e21, 1e23, 1e25, 1e27, 1e29]  # FLOPs for the cost-optimal precision

# %%
import numpy as np

from icml25 import fp_quant_scaling as fq
from icml25.core import plot

plot.use_style()
fq.PAPER

# %% [markdown]
# ## The paper's derived numbers

# %%
dcrit = {f"E{E}M{M}": fq.critical_data_size(model_size, E, M, block_size) for E, M in [(8, 7), (4, 3), (2, 1)]}
layouts = [fq.best_layout(b) for b in (4, 8, 16)]
print({k: f"{v / 1e12:.3g}T tokens" for k, v in dcrit.items()})
print("best layouts for 4, 8, 16 bits:", [f"E{e}M{m}" for e, m in layouts],
      "M_opt:", np.round(fq.optimal_mantissa([4, 8, 16]), 2))

# %% [markdown]
# ## Loss against data: the critical point
#
# For a 1B model at $B = 128$, the law's loss against training tokens in three formats; the dot marks
# $D_{crit}$.

# %%
D = np.logspace(10, 17, 300)
fig, ax = plot.subplots()
for (E, M), color in zip([(8, 7), (4, 3), (2, 1)], plot.PALETTE):
    ax.plot(D, fq.law_loss(model_size, D, E, M, block_size), color=color, label=f"E{E}M{M}")
    dc = fq.critical_data_size(model_size, E, M, block_size)
    ax.scatter([dc], [fq.law_loss(model_size, dc, E, M, block_size)], color=color, zorder=3)
ax.plot(D, fq.law_loss(model_size, D), color="gray", ls="--", label="no quantisation")
ax.set(xscale="log", ylim=(2.2, 3.2), title=f"The unified law for N = {model_size:.0e}, B = {block_size}",
       xlabel="training tokens D", ylabel="predicted loss (nats / token)")
ax.legend();

# %% [markdown]
# ## Cost-optimal precision

# %%
best_p = [fq.cost_optimal_precision(c, block_size) for c in compute_budgets]
fig, ax = plot.subplots()
ax.plot(compute_budgets, best_p, marker="o", label="argmin over P of the law at C = kPND")
ax.axhspan(4, 8, color="gray", alpha=0.2, label="paper: 4 to 8 bits")
ax.set(xscale="log", title="Cost-optimal precision", xlabel="compute budget C (FLOPs)",
       ylabel="precision P (bits)")
ax.legend();
print(dict(zip([f"{c:.0e}" for c in compute_budgets], np.round(best_p, 2))))

# %% [markdown]
# ## What we see
#
# These numbers are arithmetic on the paper's constants, not measurements, so they are not claims: the unit
# tests (`tests/test_fp_quant_scaling.py`) check that the formula reproduces the paper's critical sizes (about
# 1730T, 27T and 0.4T tokens) and layouts (E2M1, E4M3, E8M7), and that the loss is stationary in $D$ at
# $D_{crit}$. The cost-optimal precision depends on our reading of the cost model ($C = kPND$ and a free
# choice of $N$), which the paper states only briefly; the printed values above can be set against the
# paper's 4–8 bit band. Whether a trained low-precision model's loss really turns up past a critical data size
# is measured in the previous notebook.
