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
# a mix of the head and noise with the batch's mean $\mu$ and spread $\sigma$. As in the official code, there is
# one mask per prompt and head (a head's score is its mask averaged over the prompts), $\mu$ and $\sigma$ are
# taken in every forward pass from that layer's head outputs in the noisy pass itself, one noise draw is shared
# by the prompts, and the masks train for 1300 Adam steps at learning rate 0.05. The masks minimise a faithfulness
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
model = None  # "tiny" (trained here), a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
seed = 100  # the seed whose masks are drawn (the first of `seeds` when it is not among them)
seeds = None  # training seeds, the claims' paired units; None: the scale's value
beta = None  # compression weight
ib_steps = None  # mask optimisation steps
n_prompts = None  # prompts for statistics, masks and evaluation
acdc_thresholds = None  # ACDC's thresholds τ in the sweep
# full: GPT-2 small, 256 prompts, 1300 IB steps at lr 0.05 (the official defaults)

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from icml25 import ibcircuit as ib
from icml25.core import check, plot
from icml25.core.claims import mean_sd, t_interval
from IPython.display import Markdown, display

plot.use_style()
cfg = ib.config(scale, model=model, seeds=seeds, beta=beta, ib_steps=ib_steps, n_prompts=n_prompts,
                acdc_thresholds=acdc_thresholds)
cfg

# %% [markdown]
# ## Train, search exhaustively, and run every method
#
# For each seed: train the model (the seeds' models are trained side by side in one batched run, each from its
# own initialisation on its own batches), score all 4096 subsets (the ground truth), then rank heads by IBCircuit's
# $\lambda$, by node-level attribution patching and by single-head activation patching (both with the ABC
# corruption: the repeated name replaced by a third name), by ACDC, by greedy head pruning, and at random. Each
# ranking's top-$k$ heads are kept and the rest mean-ablated, for $k = 0 \dots 12$.
#
# **ACDC** (Conmy et al., 2023) prunes *edges* of the computational graph: every node (embeddings, each head,
# each MLP) writes into the residual stream, and an edge joins it to every later reader (heads, MLPs, logits),
# 90 edges here. Visiting the readers from the logits backwards, it removes an edge, patching in the sender's
# output on the corrupted prompt, whenever that raises KL(full ‖ circuit) by less than a threshold $\tau$. We run
# it for `acdc_thresholds` values of $\tau$ at once (log-spaced, `ib.ACDC_TAU_RANGE`) and rank a head by how many
# thresholds keep it connected to the logits. **Greedy head pruning** works on nodes under mean ablation, the
# measure every curve below uses: it repeatedly removes the head whose removal raises the KL least. Since it
# searches the very measure of the curves and the paper names it nowhere, the paper's claims (`faithful`,
# `minimal`) are judged against the prior methods the paper names (ACDC and attribution patching, EAP), with greedy
# pruning drawn beside them as an oracle-like reference. `near_optimal`, this book's own claim that IBCircuit comes
# close to the exhaustive optimum, is the one exception, on purpose: it is judged against the best method of each
# seed *including* greedy pruning (see "Which methods judge `near_optimal`" below the claim boxes).
#
# IBCircuit's masks for the book's seeds are computed once in the builder's warm-up and read from the cache
# (`ib.cached_ib_circuits`); other seeds are computed here.

# %%
start = time.perf_counter()
results = ib.run_seeds("ioi", cfg)
run_seconds = (time.perf_counter() - start) / len(results)  # this notebook's share of a seed, for the power lines
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
# (The reading below describes how the methods differ; the claim boxes that follow give the verdicts with their
# intervals, computed from this build.) Every curve sits above the exhaustive optimum (dashed), as it must. The
# methods split in two. Attribution and
# activation patching rank the heads by how much they move the *logit difference* under the ABC corruption: they
# tend to put the true circuit first (see the ROC-AUC bars) and reach 90% recovery with few heads. IBCircuit and
# greedy pruning instead optimise the *KL to the full model's whole answer distribution*, which also depends on
# heads that shape the probabilities of the other names; they tend to have the lowest KL and a small regret
# against the optimum, but may need more heads for 90% logit-difference recovery. Which circuit is "better"
# depends on the faithfulness measure. ACDC also prunes by KL, but edge by edge, with a corrupted prompt
# patched in and a threshold rather than a size, so its head ranking is a by-product of where its circuits cut.
# IBCircuit needs no corrupted prompt; greedy head pruning evaluates the very measure of the curves for every
# candidate, so it is a reference for how far a direct search on the measure gets, not a judge of the paper's
# claims (`faithful`, `minimal`). It does judge `near_optimal`, for the reasons given below the claim boxes.

# %% [markdown]
# ## Claim checks
#
# The controls `rankings_informative` and `acdc_beats_random` compare with the expected KL area of a random
# ranking (the dotted curve above: the mean KL over every subset of each size).

# %%
m = ib.claim_measurements(results, summary)
ms = mean_sd
verdicts = [
    check(ib.FAITHFUL, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          measured={k: m[k] for k in ("eap_minus_ib_area", "acdc_minus_ib_area", "greedy_minus_ib_area",
                                      "task_accuracy", "expected_random_minus_best_baseline_area",
                                      "expected_random_minus_acdc_area")},
          our_value=f"KL area: attribution patching − IBCircuit {ms(m['eap_minus_ib_area'])}, ACDC − IBCircuit "
                    f"{ms(m['acdc_minus_ib_area'])} nats (reference, greedy pruning − IBCircuit "
                    f"{ms(m['greedy_minus_ib_area'])})"),
    check(ib.MINIMAL, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          measured={k: m[k] for k in ("eap_minus_ib_size90", "acdc_minus_ib_size90", "greedy_minus_ib_size90",
                                      "task_accuracy", "expected_random_minus_best_baseline_area",
                                      "expected_random_minus_acdc_area")},
          our_value=f"heads for 90% recovery: attribution patching − IBCircuit {ms(m['eap_minus_ib_size90'])}, "
                    f"ACDC − IBCircuit {ms(m['acdc_minus_ib_size90'])} (reference, greedy pruning − IBCircuit "
                    f"{ms(m['greedy_minus_ib_size90'])})"),
    check(ib.NEAR_OPTIMAL, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          measured={k: m[k] for k in ("best_baseline_minus_ib_regret_share", "task_accuracy",
                                      "expected_random_minus_best_baseline_area")},
          our_value=f"(best baseline − IBCircuit) regret / random's regret: "
                    f"{ms(m['best_baseline_minus_ib_regret_share'])}"),
]
plot.show_verdicts(*verdicts)

# %% [markdown]
# ## Which methods judge `near_optimal`
#
# The plan for this chapter asked that every claim be judged against the baselines the paper names, with greedy
# head pruning shown as an oracle-like reference and never the judge. `faithful` and `minimal`, the paper's own
# claims, follow it. `near_optimal` departs from it deliberately. It is not a claim of the paper but this book's
# question of how close IBCircuit comes to the exhaustive optimum, and greedy pruning shows how close a plain search
# gets here. An earlier declaration left greedy out; an independent referee then re-decided the claim on fresh
# seeds and found greedy pruning ahead of IBCircuit on every one of them, so without greedy the claim only repeated
# `faithful`'s comparison with the named baselines under another name. The judgement was changed back to
# include greedy after that verdict was seen, and recorded in the chapter's ledger before the next verdict. The
# cell below gives, from this build, what each choice of judge says.

# %%
regret = {k: summary[k]["regret"].mean(1) for k in ib.METHODS}  # per seed, mean KL regret over the sizes
named_best = np.min([regret[k] for k in ib.BASELINES], axis=0)
named_share = (named_best - regret["IBCircuit"]) / regret["random"]
_, named_lo, named_hi = t_interval(named_share, 0.95)
near = verdicts[2].record["effects"][0]
near_interval = (f"[{near['ci_low']:+.3f}, {near['ci_high']:+.3f}]" if near["ci_low"] is not None
                 else "(no interval)")
greedy_ahead = int(np.sum(regret["greedy pruning"] < regret["IBCircuit"]))
greedy_best = int(np.sum(regret["greedy pruning"] < named_best))
display(Markdown(
    f"`near_optimal` as declared (the best method of each seed, greedy pruning included): regret share "
    f"{near['estimate']:+.3f} {near_interval}, **{verdicts[2].label}** against the "
    f"non-inferiority bar −{ib.NON_INFERIORITY:g}. Greedy pruning has a lower regret than IBCircuit on "
    f"{greedy_ahead} of {len(results)} seeds and is the best method other than IBCircuit on {greedy_best}. Judged "
    f"against the named baselines alone, the same share would be {np.mean(named_share):+.3f} "
    f"[{named_lo:+.3f}, {named_hi:+.3f}] (printed for comparison; it decides nothing)."))

# %% [markdown]
# ## What would decide `minimal`

# %%
display(Markdown(ib.power_note(verdicts[1], len(results), run_seconds + np.mean([r.ib.seconds for r in results]),
                               "IOI")))
