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
# # MPO with tiny language models
#
# The reference policy is the zoo's arithmetic *draft* model. Three single-objective policies are fine-tuned from
# it for conflicting rewards on the final answer — it is **correct**, it is a **large** digit (≥ 5), it is
# **even** — and MPO mixes them. Everything is now estimated from samples.
#
# **Parameters.** At `full` scale: 512 training prompts × 16 samples, 400 fine-tuning steps, 500 test prompts,
# 5 seeds.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # seeds of the whole pipeline (fine-tuning data, BSMD, evaluation samples)
lm_prompts = None  # training prompts (reference samples per prompt: lm_samples)
lm_samples = None
lm_finetune_steps = None  # reward-weighted fine-tuning steps per single-objective policy
lm_batch_size = None
lm_lr = None
lm_beta = None  # β of the single-objective policies and of the max-min objective
lm_eval_prompts = None  # held-out prompts, one sample each per method
lm_bsmd_steps = None
lm_bsmd_m = None  # reference samples per prompt in BSMD's pool
step_scales = None

# %%
import numpy as np

from icml25 import mpo
from icml25.core import check, plot

plot.use_style()
cfg = mpo.config(scale, seeds=seeds, lm_prompts=lm_prompts, lm_samples=lm_samples,
                 lm_finetune_steps=lm_finetune_steps, lm_batch_size=lm_batch_size, lm_lr=lm_lr, lm_beta=lm_beta,
                 lm_eval_prompts=lm_eval_prompts, lm_bsmd_steps=lm_bsmd_steps, lm_bsmd_m=lm_bsmd_m,
                 step_scales=step_scales)
cfg

# %% [markdown]
# ## From sequences to tokens
#
# The single-objective policies are trained to approximate $\pi_k \propto \pi_{\text{ref}} e^{r_k/\beta}$ by
# reward-weighted likelihood on reference samples (weights $e^{r/\beta}$ normalised within each prompt's samples).
# MPO's weights come from BSMD exactly as in the tabular notebook, with sequence log-probabilities
# $\log \pi_k(y|x) - \log \pi_{\text{ref}}(y|x)$ of a pool of reference samples.
#
# Sampling the sequence-level mix $\pi_\lambda \propto \prod_k \pi_k^{\lambda_k}$ exactly would need the
# normaliser over all continuations; like the paper's language-model experiments we decode **per token**,
# $p(y_t) \propto \prod_k \pi_k(y_t \mid x, y_{<t})^{\lambda_k}$, which is an approximation. The value of each
# method is the Monte-Carlo estimate of Eq. (3): $\min_k \hat{\mathbb{E}}[\tilde r_k] - \beta\,\widehat{\mathrm{KL}}$,
# with $\tilde r_k = \beta \log \pi_k/\pi_{\text{ref}}$ and the KL from the sampled sequences' own log-probabilities.

# %%
runs = [mpo.run_language_models(cfg, s, scale) for s in cfg.seeds]
names = list(runs[0].values)
for s, r in zip(cfg.seeds, runs):
    print(f"seed {s}: MPO λ̄ = {np.round(r.lam, 3)} over {mpo.LM_OBJECTIVES}")

# %% [markdown]
# ## Per-objective results
#
# Left: the implied rewards $\mathbb{E}[\tilde r_k]$ that MPO balances; right: the raw rewards (accuracy and the
# rates of large and even answers). Mean ± sd over seeds.

# %%
fig, axes = plot.subplots(1, 2, figsize=(13, 4.4))
width = 0.8 / len(mpo.LM_OBJECTIVES)
for ax, table, ylabel in ((axes[0], "per_objective", "E[r̃_k] = β E[log π_k/π_ref] (nats × β)"),
                          (axes[1], "raw_rewards", "mean raw reward (rate)")):
    for k, obj in enumerate(mpo.LM_OBJECTIVES):
        vals = np.array([[getattr(r, table)[n][k] for n in names] for r in runs])
        ax.bar(np.arange(len(names)) + (k - 1) * width, vals.mean(0), width, yerr=vals.std(0), capsize=2, label=obj)
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set(title="Implied rewards per objective" if table == "per_objective" else "Raw rewards per objective",
           ylabel=ylabel)
    ax.legend(title="objective", fontsize=8)

# %%
values = np.array([[r.values[n] for n in names] for r in runs])
fig, ax = plot.subplots()
ax.bar(names, values.mean(0), yerr=values.std(0), capsize=3, color=plot.PALETTE[: len(names)])
ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right")
ax.set(title="Max-min value of each policy (Eq. 3, estimated)", ylabel=f"V (mean ± sd over {len(runs)} seeds)");

# %% [markdown]
# ## Claim check
#
# `mpo.balanced_lm`: averaged over seeds, MPO's max-min value beats each single-objective policy's and the uniform
# per-token mix's.

# %%
mean = dict(zip(names, values.mean(0)))
singles = [mean[f"π_{o}"] for o in mpo.LM_OBJECTIVES]
check(mpo.BALANCED_LM, seeds=cfg.seeds, scale=scale,
      measured={"mpo": mean["MPO"], "singles": singles, "uniform": mean["uniform per-token mix"],
                "mpo_sd": float(values[:, names.index("MPO")].std()),
                "uniform_sd": float(values[:, names.index("uniform per-token mix")].std())},
      our_value=f"V: MPO {mean['MPO']:.3f} ± {values[:, names.index('MPO')].std():.3f}, uniform mix "
                f"{mean['uniform per-token mix']:.3f}, best single {max(singles):.3f}")

# %% [markdown]
# ## What we see
#
# Each single-objective policy raises its own implied reward and pays on the others, so its worst objective is
# poor; both mixes are far more balanced. Whether MPO's weights beat the uniform mix here is within the noise of a
# few hundred samples, and two approximations stand between this experiment and the theory: the per-token mix is
# not the sequence-level $\pi_\lambda$ that BSMD optimises, and the fine-tuned policies are only rough versions of
# $\pi_{\text{ref}} e^{r_k/\beta}/Z$ (with a few hundred samples, the correctness policy need not even raise the
# raw accuracy, and in our first runs it did not), so their implied rewards $\tilde r_k$ are not the rewards we wrote down.
