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
# # RSD on the arithmetic reasoners: accuracy against FLOPs
#
# The zoo's **draft** (`arith-draft`, ~27k parameters, a third to a half of the problems right) and **target**
# (`arith-target`, ~108k parameters, nearly all right) write step-by-step solutions such as `3+4=7;7*2=4;A4`.
# RSD lets the draft write each step (up to `;`), scores it with a PRM, and calls the target for that step only when
# the reward is below δ. Three PRMs:
#
# * **oracle** — the exact step verifier (a program: zero FLOPs; it says 0 or 1);
# * **noisy oracle** — the oracle with each verdict flipped with probability ε;
# * **learned PRM** — a ~15k-parameter LM trained on the draft's own sampled steps, labelled by the oracle; it
#   gives graded scores, and its FLOPs are counted.
#
# FLOPs are counted with `icml25.core.flops` as if each model kept a KV cache: a model pays for every token the
# first time it reads it (the prompt, and steps the *other* model wrote) and for every token it writes; a discarded
# draft step is paid for. Baselines on the same problems: draft only, target only, token-level speculative
# decoding (γ draft tokens checked by the target; its output equals the target's), draft best-of-N reranked by the
# PRM, and random acceptance at RSD's acceptance rate.
#
# `full` scale (documented, not run here): `n_test=500`, 5 seeds, 12 thresholds, best-of-8, a micro-sized PRM.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # not used directly: the training seeds of the draft/target pairs are `seeds`
seeds = None  # draft/target training seeds; None: the scale's value
n_test = None  # held-out problems; None: the scale's value
deltas = None  # thresholds swept for the graded PRM; None: the scale's value
delta = None  # the threshold of the claim checks (the official code's default is 0.7)
epsilon = None  # flip rate of the noisy oracle
gamma = None  # draft tokens per round of token-level speculative decoding
bon_n = None  # largest N of draft best-of-N

# %%
import numpy as np

from icml25 import rsd
from icml25.core import check, flops, plot, zoo

plot.use_style()
cfg = rsd.config(scale, seeds=seeds, n_test=n_test, deltas=deltas, delta=delta, epsilon=epsilon, gamma=gamma,
                 bon_n=bon_n)
cfg

# %% [markdown]
# ## The compute ceiling
#
# Savings are capped by how much cheaper the draft is: if every draft step were accepted, RSD would cost one
# draft pass. Our draft costs about a quarter of the target per token (printed below), so no δ can go below about
# 0.25× target FLOPs here (the paper's pairs are 1.5B/7B and 7B/72B, about 5-10× apart).

# %%
pairs = {s: (zoo.get("arith-draft", scale, s), zoo.get("arith-target", scale, s)) for s in cfg.seeds}
d0, t0 = pairs[cfg.seeds[0]]
ceiling = flops.forward_flops(d0.model.config, 30) / flops.forward_flops(t0.model.config, 30)
print(f"draft/target FLOPs per 30-token solution: {ceiling:.2f}  (linear weights: "
      f"{flops.linear_params(d0.model.config):,} vs {flops.linear_params(t0.model.config):,})")

# %% [markdown]
# ## Running everything
#
# `rsd.reasoning_experiment(cfg, seed)` runs, for one draft/target pair: RSD over δ for each PRM (for the 0/1 PRMs
# every δ in (0, 1] decides alike, so one δ; δ = 0 and δ > 1 are run once), the baselines, speculative decoding's
# cost (exact, from one teacher-forced draft pass), best-of-N, and random acceptance.

# %%
results = [rsd.reasoning_experiment(cfg, s) for s in cfg.seeds]
res0 = results[0]
for name, rows in res0["sweep"].items():
    for r in rows:
        print(f"seed {res0['seed']} {res0['prm_names'][name]:22s} δ={r['delta']:<5} acc={r['accuracy']:.3f} "
              f"FLOPs={r['flop_ratio']:.2f}x target  accept={r['acceptance_rate']:.2f}")


# %%
rsd.plot_accuracy_vs_flops(results, cfg);

# %% [markdown]
# **What we see.** With the oracle PRM, RSD is at least as accurate as the target alone: a draft step is kept only
# when it is right, so the only errors left are the target's own. But it is barely cheaper: the draft pays
# for every step, the target must read all the draft-written text before it can regenerate a step, and the
# draft reads the target's steps in turn. Even with the draft at a quarter of the target's cost, that reading eats
# most of the savings.
# Token-level speculative decoding is also more expensive than the target here, for the same reason (it only pays
# off when the draft is much cheaper). The noisy PRM lets wrong steps through and loses accuracy; the learned PRM
# traces a curve between the two models as δ moves.

# %%
rsd.plot_acceptance(results);

# %% [markdown]
# ## Threshold against random acceptance at the same rate
#
# The paper's theory says the *choice* of which steps to accept matters: at an equal budget of target calls, a
# threshold on the reward beats any other rule. Here the alternative keeps each draft step with probability equal
# to the oracle RSD's acceptance rate, whatever its reward.

# %%
m = rsd.claim_measurements(results, cfg.delta)
tm = m["threshold_matters"]
fig, ax = plot.subplots()
x = np.arange(len(cfg.seeds))
ax.bar(x - 0.2, tm["threshold_accuracy"], width=0.4, label=f"threshold δ={cfg.delta} (oracle PRM)")
ax.bar(x + 0.2, tm["random_accuracy"], width=0.4, label="random acceptance, same rate")
ax.set_xticks(x, [f"seed {s}\n{a:.0%} / {b:.0%} accepted" for s, a, b in
                  zip(cfg.seeds, tm["threshold_acceptance"], tm["random_acceptance"])])
ax.set(title="Which steps are accepted matters", ylabel="final-answer accuracy", ylim=(0, 1.05))
ax.legend(loc="lower right");

# %% [markdown]
# ## Throughput
#
# Wall-clock tokens per second of RSD (oracle, δ = 0.7) and of target-only decoding, both batched over all
# problems with the KV cache. At this size Python overhead dominates, so RSD's extra calls cost more than the
# FLOPs suggest; this is a property of tiny models, not of the method.

# %%
tput = {lab: [r[n_tok] / r[sec] for r in rows] for lab, rows, n_tok, sec in [
    ("target only", [res["baselines"]["target"] for res in results], "n_tokens", "seconds"),
    (f"RSD δ={cfg.delta}", [next(x for x in res["sweep"]["oracle"] if x["delta"] == cfg.delta) for res in results],
     "n_tokens", "seconds")]}
fig, ax = plot.subplots()
ax.bar(list(tput), [np.mean(v) for v in tput.values()], yerr=[np.std(v) for v in tput.values()], capsize=4,
       color=plot.PALETTE[:2])
ax.set(title="Decoding throughput on 2 CPU cores", ylabel="solution characters per second (mean ± sd)")
print({k: f"{np.mean(v):.0f} chars/s" for k, v in tput.items()})

# %% [markdown]
# ## Claim checks
#
# The criteria were declared in `icml25.rsd` before any of this ran.

# %%
e = m["efficiency"]
check(rsd.EFFICIENCY, measured=e, seeds=cfg.seeds, scale=scale,
      our_value="best oracle δ: " + ", ".join(f"δ={d}: acc {a:.3f} at {f:.2f}x" for d, a, f in
                                               zip(e["deltas"], e["rsd_accuracy"], e["rsd_flop_ratio"]))
                + f"; target {e['target_accuracy']:.3f}")

# %%
b = m["beats_parallel"]
check(rsd.BEATS_PARALLEL, measured=b, seeds=cfg.seeds, scale=scale,
      our_value=f"RSD {b['rsd_accuracy']:.3f} at {b['rsd_flop_ratio']:.2f}x vs best-of-{b['bon_n']} "
                f"{b['bon_accuracy']:.3f} at {b['bon_flop_ratio']:.2f}x")

# %%
check(rsd.THRESHOLD_MATTERS, measured=tm, seeds=cfg.seeds, scale=scale,
      our_value=f"threshold {np.mean(tm['threshold_accuracy']):.3f} ± {np.std(tm['threshold_accuracy']):.3f} vs "
                f"random {np.mean(tm['random_accuracy']):.3f} ± {np.std(tm['random_accuracy']):.3f}")
