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
# # Training with quantised GEMMs, and fitting the law
#
# The paper trains LLaMA models with the inputs of each linear layer's GEMMs rounded to ExMy with one scale per
# $B$ elements: the weight $W$ in the forward product $Y = X\,Q(W)^\top$, the weight again in the input
# gradient $dX = dY\,Q(W)$, and the activation in the weight gradient $dW = dY^\top Q(X)$ (its P2, P4 and P6,
# the three that hurt least). Gradients pass through the rounding unchanged (straight-through). Its law:
#
# $$L(N, D, E, M, B) = \frac{n}{N^\alpha} + \frac{d}{D^\beta} + \epsilon
#     + \frac{D^\beta}{N^\alpha}\,\frac{\log_2 B}{\gamma\,(E+0.5)^\delta\,(M+0.5)^\nu}.$$
#
# Here: tiny 2-layer Llama models (`QLinear` in every attention and MLP projection, not the embedding or head)
# learn a 64-symbol Markov language whose entropy rate is the floor of the loss. We sweep formats from FP4 to
# FP8 and full precision, block sizes 8 to 1024, two model sizes and two data sizes, and fit the law.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the language's seed
seeds = None  # training seeds on the small cell; None: the scale's value
steps = None  # training steps per data size, keys D1 and D2 (tokens = steps x batch x seq_len)
models = None  # (hidden, ffn) per model size, keys S and L
block_sizes = None  # the block-size sweep at block_format
formats = None  # (E, M) pairs of the format sweep at format_block
holdout_every = None  # every k-th quantised run is held out of the fit
# full: seeds 0-4, a 256-symbol language, models (64, 192) and (128, 384), 2000 and 8000 steps of 64 x 128
# tokens, 12 formats from E1M1 to E5M2, block sizes 8 to 4096 (hours on a CPU).

# %%
import numpy as np

from icml25 import fp_quant_scaling as fq
from icml25.core import check, plot

plot.use_style()
cfg = fq.config(scale, seeds=seeds, steps=steps, models=models, block_sizes=block_sizes, formats=formats,
                holdout_every=holdout_every)
cfg

# %% [markdown]
# ## The sweep
#
# Full precision in each of the four (model, data) cells; on the small cell, every seed trains the block-size
# sweep at E2M1 and the format sweep at $B$ = `format_block`; one extra quantised run in each other cell.

# %%
runs, floor = fq.run_sweep(cfg, seed)
print(f"{len(runs)} runs; entropy rate of the language (loss floor) {floor:.3f} nats/token")
for r in runs[:4]:
    print(f"{r.model} N={r.N:,d} {r.data} D={r.D:,d}  {r.spec.label}: {r.loss:.4f}")

# %% [markdown]
# ## Loss against block size
#
# At E2M1 on the small cell, each seed's held-out loss against $\log_2 B$, with the full-precision loss for
# reference. The law predicts a straight line rising with $\log_2 B$.

# %%
small = (next(iter(cfg.models)), next(iter(cfg.steps)))
fmt = tuple(cfg.block_format)
fig, ax = plot.subplots()
table = np.array([[next(r.loss for r in runs if r.seed == s and r.spec.B == b and (r.spec.E, r.spec.M) == fmt
                        and (r.model, r.data) == small) for b in cfg.block_sizes] for s in cfg.seeds])
x = np.log2(cfg.block_sizes)
ax.errorbar(x, table.mean(0), yerr=table.std(0, ddof=1) if len(cfg.seeds) > 1 else None, marker="o", capsize=3,
            label=f"E{fmt[0]}M{fmt[1]} (mean ± sd over {len(cfg.seeds)} seeds)")
fp32 = next(r.loss for r in runs if r.spec.E is None and (r.model, r.data) == small)
ax.axhline(fp32, color="gray", ls="--", label="full precision (seed 0)")
ax.set(title="Held-out loss against block size (small model, small data)", xlabel="log2 of block size B",
       ylabel="loss (nats / token)")
ax.legend();
slopes = fq.block_slope([r for r in runs if (r.model, r.data) == small], fmt)
slope, lo, hi = fq.mean_interval(slopes)
print(f"slope {slope:.4f} nats per doubling of B, 95% interval [{lo:.4f}, {hi:.4f}] over {len(slopes)} seeds")

# %% [markdown]
# ## Loss against format
#
# At $B$ = `format_block`, the held-out loss of each format on the small cell (mean ± sd over seeds), grouped by
# bit width.

# %%
labels, means, sds = [], [], []
for E, M in sorted({(r.spec.E, r.spec.M) for r in runs if r.spec.E is not None and r.spec.B == cfg.format_block
                    and (r.model, r.data) == small}, key=lambda em: (sum(em), em)):
    vals = [r.loss for r in runs if (r.spec.E, r.spec.M, r.spec.B) == (E, M, cfg.format_block)
            and (r.model, r.data) == small]
    labels.append(f"E{E}M{M}\n{E + M + 1} bits")
    means.append(np.mean(vals))
    sds.append(np.std(vals, ddof=1) if len(vals) > 1 else 0.0)
fig, ax = plot.subplots()
ax.bar(labels, means, yerr=sds, capsize=3, color=plot.PALETTE[0], label="quantised (mean ± sd)")
ax.axhline(fp32, color="gray", ls="--", label="full precision")
ax.set(title=f"Held-out loss by format (B = {cfg.format_block})", ylabel="loss (nats / token)",
       ylim=(min(means + [fp32]) - 0.05, max(means) + 0.05))
ax.legend();
best = fq.best_split_by_bits([r for r in runs if (r.model, r.data) == small])
print("best split per bit width:", {bits: f"E{e}M{m}" for bits, (e, m) in best.items()})

# %% [markdown]
# ## Fitting the law and predicting held-out runs
#
# We fit $(n, d, \epsilon, \gamma, \delta, \nu)$ by least squares on all runs except every
# `holdout_every`-th quantised one, with $\alpha$ and $\beta$ held at the paper's values (two model sizes and two
# data sizes cannot identify exponents), then predict the held-out runs.

# %%
fit_runs, held = fq.holdout_split(runs, cfg.holdout_every)
cols = fq.runs_table(fit_runs)
law = fq.fit_law(cols["N"], cols["D"], cols["E"], cols["M"], cols["B"], cols["loss"])
hcols = fq.runs_table(held)
pred_held = fq.predict(law, hcols["N"], hcols["D"], hcols["E"], hcols["M"], hcols["B"])
pred_fit = fq.predict(law, cols["N"], cols["D"], cols["E"], cols["M"], cols["B"])
r2_held = fq.r_squared(hcols["loss"], pred_held)
print({k: round(getattr(law, k), 4) for k in fq.FIT_FIELDS}, f"R^2 held-out {r2_held:.3f}")
fig, ax = plot.subplots()
ax.scatter(cols["loss"], pred_fit, label=f"fitted runs ({len(fit_runs)})", alpha=0.7)
ax.scatter(hcols["loss"], pred_held, marker="s", label=f"held-out runs ({len(held)}), R² = {r2_held:.2f}")
lims = [min(cols["loss"].min(), pred_fit.min()), max(cols["loss"].max(), pred_fit.max())]
ax.plot(lims, lims, color="gray", ls="--", label="perfect prediction")
ax.set(title="The law fitted to our runs", xlabel="measured loss (nats / token)",
       ylabel="predicted loss (nats / token)")
ax.legend();

# %% [markdown]
# ## What we see
#
# Model and data size dominate: the four full-precision cells are about a tenth of a nat apart, in the direction
# the law says. Quantisation adds only a few hundredths of a nat, and on the small cell that is the same order as
# the spread between seeds: the block-size slope is positive on every seed but its interval over three seeds
# reaches below zero, and the format ranking at equal bits does not separate E from M reliably. The held-out runs
# are mostly on that small cell, where the variation left after the law's model- and data-size terms is seed
# noise, so the fitted law has no skill there (R² near or below zero) even though its fitted $\delta$ and $\nu$
# are of the paper's order. The paper's quantisation effects need models that are tight on capacity and runs long
# enough for $D^\beta/N^\alpha$ to grow; at 5k–20k parameters and under 10⁵ tokens these verdicts say the trends
# are *not resolved* here, not that they are false.

# %% [markdown]
# ## Claim checks

# %%
check(fq.BLOCK_SIZE, seeds=cfg.seeds, scale=scale,
      measured={"slopes": slopes, "slope_mean": slope, "slope_low": lo, "slope_high": hi},
      our_value=f"slope {slope:.4f} nats per doubling, 95% CI [{lo:.4f}, {hi:.4f}]")

# %%
check(fq.FIT, seeds=cfg.seeds, scale=scale,
      measured={"r2_heldout": r2_held, "n_heldout": len(held), "n_fit": len(fit_runs),
                "delta": law.delta, "nu": law.nu},
      our_value=f"held-out R² {r2_held:.3f} on {len(held)} runs (fitted δ {law.delta:.2f}, ν {law.nu:.2f})")

# %%
check(fq.EXPONENT_BITS, seeds=cfg.seeds, scale=scale,
      measured={"best_splits": {str(b): list(em) for b, em in best.items()}},
      our_value=", ".join(f"{b} bits: E{e}M{m}" for b, (e, m) in best.items()))
