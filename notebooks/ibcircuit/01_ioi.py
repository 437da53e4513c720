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
# # IBCircuit on Indirect Object Identification
#
# Circuit discovery asks which components of a model carry a task. IBCircuit gives every attention head a mask
# $\lambda \in (0, 1)$ and replaces the head's output $H$ by
# $$Z = \lambda H + (1-\lambda)\mu + (1-\lambda)\sigma\varepsilon,$$
# a mix of the head and noise with the batch's mean $\mu$ and spread $\sigma$. The masks minimise a faithfulness
# term, $\mathrm{KL}(p_{\text{model}} \,\|\, p_{\text{masked}})$ at the answer, plus $\beta$ times a compression
# term, the exact KL between the distribution of $Z$ and the pure noise $\mathcal N(\mu, \sigma^2)$, which is zero
# only when $\lambda = 0$. Heads the output needs keep a high $\lambda$; the rest are pushed to noise. Unlike
# activation or attribution patching, no corrupted prompt has to be designed.
#
# Our testbed is small enough to know the answer: a 2-layer, 6-head transformer trained on a synthetic IOI task
# (`BOS A B f f S f END` → the name that appeared once), so all $2^{12} = 4096$ head subsets can be scored under
# mean ablation. For each circuit size we know the most faithful subset, and the *true circuit* is the smallest
# subset that recovers 90% of the logit difference.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the seed whose masks are drawn
seeds = None  # training seeds; None: the scale's value
beta = None  # compression weight
ib_steps = None  # mask optimisation steps
n_prompts = None  # prompts for statistics, masks and evaluation
# full: seeds 0-4, d_model 96, 5000 training steps, 256 prompts, 1300 IB steps at lr 0.05 (the official defaults)

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import ibcircuit as ib
from icml25.core import check, plot

plot.use_style()
cfg = ib.config(scale, seeds=seeds, beta=beta, ib_steps=ib_steps, n_prompts=n_prompts)
cfg

# %% [markdown]
# ## Train, search exhaustively, and run every method
#
# For each seed: train the model, score all 4096 subsets (the ground truth), then rank heads by IBCircuit's
# $\lambda$, by node-level attribution patching and by single-head activation patching (both with the ABC
# corruption: the repeated name replaced by a third name), by greedy ACDC-style pruning, and at random. Each
# ranking's top-$k$ heads are kept and the rest mean-ablated, for $k = 0 \dots 12$.

# %%
results = [ib.run_seed("ioi", cfg, s) for s in cfg.seeds]
print("task accuracy per seed:", [round(r.task_accuracy, 3) for r in results])
print("true circuit (heads, layer*6+head) per seed:", [list(np.flatnonzero(r.true_circuit)) for r in results])

# %% [markdown]
# ## The learned masks

# %%
r0 = results[cfg.seeds.index(seed)] if seed in cfg.seeds else results[0]
ib.plot_masks(r0, cfg);

# %% [markdown]
# ## Faithfulness against circuit size

# %%
summary = ib.summarise(results, cfg.recovery_threshold)
ib.plot_faithfulness(results, cfg, "IOI", "Logit-difference");

# %% [markdown]
# ## Against the true circuit, and regret

# %%
ib.plot_ranking(summary, cfg)
print(ib.summary_table(summary))
print("IBCircuit regret per size:", np.round(summary["IBCircuit"]["regret"].mean(0), 3))

# %% [markdown]
# ## What we see
#
# Every curve sits above the exhaustive optimum (dashed), as it must. The methods split in two. Attribution and
# activation patching rank the heads by how much they move the *logit difference* under the ABC corruption: they
# put the true circuit first (ROC-AUC 1 at `ci`) and reach 90% recovery with the fewest heads. IBCircuit and
# greedy pruning instead optimise the *KL to the full model's whole answer distribution*, which also depends on
# heads that shape the probabilities of the other names; they have the lowest KL at almost every size and a small
# regret against the optimum, but need one or two more heads for 90% logit-difference recovery. Which circuit is
# "better" depends on the faithfulness measure, and the paper's claim of both more faithful and more minimal is
# only half reproduced here. IBCircuit needs no corrupted prompt, and on this task it matches greedy pruning,
# which evaluates the faithfulness of every candidate directly, to within a few hundredths of a nat.

# %% [markdown]
# ## Claim checks

# %%
eap, ibs, rnd = summary["attribution patching"], summary["IBCircuit"], summary["random"]
check(ib.FAITHFUL, seeds=cfg.seeds, scale=scale,
      measured={"area_ib": ibs["area"], "area_eap": eap["area"], "area_ib_mean": ibs["area"].mean(),
                "area_eap_mean": eap["area"].mean()},
      our_value=f"KL area IBCircuit {ibs['area'].mean():.3f} ± {ibs['area'].std():.3f} vs attribution patching "
                f"{eap['area'].mean():.3f} ± {eap['area'].std():.3f}")

# %%
check(ib.MINIMAL, seeds=cfg.seeds, scale=scale,
      measured={"size90_ib": ibs["size90"], "size90_eap": eap["size90"], "size90_ib_mean": ibs["size90"].mean(),
                "size90_eap_mean": eap["size90"].mean()},
      our_value=f"heads for 90% recovery: IBCircuit {ibs['size90'].mean():.1f} ± {ibs['size90'].std():.1f} vs "
                f"attribution patching {eap['size90'].mean():.1f} ± {eap['size90'].std():.1f}")

# %%
check(ib.NEAR_OPTIMAL, seeds=cfg.seeds, scale=scale,
      measured={"regret_ib_per_size": ibs["regret"].mean(0), "regret_ib_mean": ibs["regret"].mean(),
                "regret_random_mean": rnd["regret"].mean()},
      our_value=f"mean regret IBCircuit {ibs['regret'].mean():.3f} vs random {rnd['regret'].mean():.3f} nats")
