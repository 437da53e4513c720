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
# # Learning-rate robustness of the three initialisations
#
# The paper's claim: non-zero initialisation makes LoRA robust to *suboptimal, especially small*, learning rates,
# costs nothing at the best learning rate, and the noise it adds to the pretrained weight does no harm. We sweep
# the learning rate over three decades × the three inits × seeds on the MLP toy, then the init scale at a small
# learning rate, then a shorter sweep on the tiny Llama fine-tuned with LoRA from mod-10 to mod-7 arithmetic.
# In both, LoRA is the PEFT library's, re-initialised in place by `lora_init.init_lora`.
#
# **Parameters.** At `full` scale: 8 learning rates, 5 seeds, width 1024, 1000 steps; Llama 300 steps, rank 8.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None
lrs = None  # learning-rate grid of the MLP toy
init_scales = None  # multipliers of the Kaiming-uniform bounds of A and B
scale_lr = None  # the learning rate of the init-scale sweep
finetune_steps = None
lm_lrs = None  # learning-rate grid of the Llama experiment
lm_steps = None
lm_rank = None

# %%
import numpy as np

from icml25 import lora_init
from icml25.core import check, plot

plot.use_style()
cfg = lora_init.config(scale, seeds=seeds, lrs=lrs, init_scales=init_scales, scale_lr=scale_lr,
                       finetune_steps=finetune_steps, lm_lrs=lm_lrs, lm_steps=lm_steps, lm_rank=lm_rank)
cfg

# %% [markdown]
# ## The MLP toy: final test loss against learning rate
#
# Every (init, seed) pair shares its pretrained model, teacher, data stream and $A_0$ (and $B_0$), so differences
# between inits are paired by seed.

# %%
toys = {s: lora_init.mlp_toy(cfg, s) for s in cfg.seeds}
toy_grid = lora_init.lr_sweep(cfg, lambda m, lr, s: lora_init.finetune_toy(toys[s], cfg, m, lr, 1.0, s)["test_loss"],
                              cfg.lrs)
start = np.mean([lora_init.pretrained_loss(t) for t in toys.values()])

fig, ax = lora_init.plot_lr_sweep(toy_grid, cfg.lrs, "MLP toy: final loss vs learning rate (band: min-max over seeds)",
                                  "test MSE (target units²)")
ax.axhline(start, color="k", ls=":", lw=1, label="pretrained model");
ax.legend();

# %% [markdown]
# ## Init scale at a small learning rate
#
# Both factors are drawn with their Kaiming-uniform bound multiplied by the scale. Init[AB] carries the noise
# $\frac{\alpha}{r}B_0A_0$, which grows with the square of the scale; Init[AB+] removes it from $W$.

# %%
scale_grid = {m: np.array([[lora_init.finetune_toy(toys[s], cfg, m, cfg.scale_lr, c, s)["test_loss"]
                            for c in cfg.init_scales] for s in cfg.seeds]) for m in ("AB", "AB+")}
a_ref = np.array([lora_init.finetune_toy(toys[s], cfg, "A", cfg.scale_lr, 1.0, s)["test_loss"] for s in cfg.seeds])
fig, ax = plot.subplots()
for m, v in scale_grid.items():
    ax.errorbar(cfg.init_scales, v.mean(0), v.std(0), marker="o", capsize=3, label=f"Init[{m}]")
ax.axhline(a_ref.mean(), color="k", ls="--", lw=1, label="Init[A], scale 1")
ax.set(title=f"MLP toy: final loss vs init scale at learning rate {cfg.scale_lr:g}",
       xlabel="init scale (× Kaiming-uniform bound)", ylabel="test MSE (target units²)", xscale="log", yscale="log")
ax.legend();

# %% [markdown]
# ## The tiny Llama: LoRA on q_proj and v_proj, mod-10 → mod-7 arithmetic
#
# The zoo's arithmetic draft model (a Hugging Face `LlamaForCausalLM`), given a PEFT `LoraConfig` for a causal LM
# on its attention's query and value maps (PEFT's default targets for Llama), fine-tuned to the same problems
# evaluated modulo 7. Loss is held-out negative log-likelihood per solution
# token. The grid is coarser than the toy's to fit the budget.

# %%
llama = lora_init.pretrained_llama(scale)
lm_grid = lora_init.lr_sweep(cfg, lambda m, lr, s: lora_init.finetune_llama(cfg, llama, m, lr, s)["test_loss"],
                             cfg.lm_lrs)
lora_init.plot_lr_sweep(lm_grid, cfg.lm_lrs, "Tiny Llama: held-out loss vs learning rate (band: min-max over seeds)",
                       "held-out NLL (nats / token)");
for m, v in lm_grid.items():
    print(f"Init[{m}]: " + ", ".join(f"lr {lr:g}: {lora_init.format_mean_sd(v[:, i])}" for i, lr in enumerate(cfg.lm_lrs)))

# %% [markdown]
# ## Claim checks (MLP toy, paired by seed, 95% Student-t intervals)

# %%
two_smallest = np.argsort(cfg.lrs)[:2]
small_diffs = [toy_grid["A"][:, i] - toy_grid["AB"][:, i] for i in two_smallest]
small = [lora_init.paired_interval(d) for d in small_diffs]
check(lora_init.SMALL_LR, seeds=cfg.seeds, scale=scale,
      measured={"lrs": [cfg.lrs[i] for i in two_smallest], "a_minus_ab_lower": [lo for lo, _ in small],
                "a_minus_ab_upper": [hi for _, hi in small],
                "a_minus_ab_mean_sd": [lora_init.mean_sd(d) for d in small_diffs]},
      our_value="; ".join(f"lr {cfg.lrs[i]:g}: Init[A] − Init[AB] = {lora_init.format_mean_sd(d)}, "
                          f"95% CI [{lo:.3g}, {hi:.3g}]" for i, d, (lo, hi) in zip(two_smallest, small_diffs, small)))

# %%
best = {m: int(np.argmin(v.mean(0))) for m, v in toy_grid.items()}
at_best = {m: toy_grid[m][:, best[m]] for m in lora_init.MODES}
best_diffs = [at_best[m] - at_best["A"] for m in ("AB", "AB+")]
intervals = [lora_init.paired_interval(d) for d in best_diffs]
check(lora_init.SAME_AT_BEST, seeds=cfg.seeds, scale=scale,
      measured={"best_lr": {m: cfg.lrs[i] for m, i in best.items()},
                "best_loss": {m: lora_init.mean_sd(v) for m, v in at_best.items()}, "best_lr_intervals": intervals},
      our_value=", ".join(f"Init[{m}] {lora_init.format_mean_sd(at_best[m])} at lr {cfg.lrs[best[m]]:g}"
                          for m in lora_init.MODES)
                + "".join(f"; {m} − A = {lora_init.format_mean_sd(d)}, 95% CI [{lo:.3g}, {hi:.3g}]"
                          for m, d, (lo, hi) in zip(("AB", "AB+"), best_diffs, intervals)))

# %%
log_diff = (np.log(toy_grid["AB"]) - np.log(toy_grid["AB+"])).mean(1)  # per seed, averaged over the grid
lo, hi = lora_init.paired_interval(log_diff)
check(lora_init.NOISE_HARMLESS, seeds=cfg.seeds, scale=scale,
      measured={"ab_minus_abplus_lower": lo, "ab_minus_abplus_upper": hi,
                "ab_minus_abplus_mean_sd": lora_init.mean_sd(log_diff)},
      our_value=f"mean log-loss difference Init[AB] − Init[AB+] = {lora_init.format_mean_sd(log_diff)}, "
                f"95% CI [{lo:.3g}, {hi:.3g}]")

# %% [markdown]
# ## What we see
#
# At `ci` scale (150 steps, width 256, 3 seeds; numbers as mean ± sd over seeds, from the claim checks above) the
# picture is more nuanced than the paper's:
#
# - **Small learning rates.** Where the learning rate is small *but still learns* (about $10^{-4}$ to
#   $10^{-3}$ here), Init[AB] and Init[AB+] are clearly ahead of Init[A], as the zero gradient of $A$ predicts.
#   Below that ($10^{-5}$, $3 \times 10^{-5}$) no init moves far from the pretrained model within the budget, and
#   Init[AB] then still carries its initial noise: at $10^{-5}$ it is slightly *worse* than Init[A]
#   (Init[A] − Init[AB] = −0.017 ± 0.006), at $3 \times 10^{-5}$ the two are level (0.001 ± 0.008). The
#   `small_lr` criterion was fixed on the two smallest learning rates of the grid, which here fall in that frozen
#   regime, so the verdict reads "not reproduced" even though the curves show the effect one decade higher.
# - **Best learning rate.** All three inits are best at the largest learning rate, $10^{-2}$, and close there
#   (test MSE about 0.046-0.049); Init[AB] − Init[A] is within noise, but Init[AB+] is better than Init[A] by
#   0.003 ± 0.001, consistently enough over 3 seeds to exclude zero, so "within noise" fails in the direction
#   that favours non-zero initialisation. The best learning rate sits at the edge of the grid, so the true optimum
#   may lie above it.
# - **Noise.** At scale 1 the noise of Init[AB] costs a small but consistent 4% of loss relative to Init[AB+]
#   (mean log-loss difference 0.042 ± 0.009 over the grid); at scales 10 and 100 it is catastrophic for Init[AB]
#   and harmless for Init[AB+], which keeps improving.
# - **Tiny Llama.** The coarse sweep is descriptive only (20 steps; every init is best at the largest learning
#   rate, the grid's edge): Init[AB+] is at or below Init[A] at every learning rate, while Init[AB] is worse than
#   Init[A] at the smallest learning rate and better at the two larger ones. Our scale for $B$ (bound $1/\sqrt{r}$,
#   unverified against the official code) makes the noise $\frac{\alpha}{r}B_0A_0$ on `q_proj`/`v_proj` large
#   relative to a tiny model's weights, which is the regime the paper avoids by keeping the initial product small.
