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
# # The workbench: two tiny reasoners, end to end
#
# Every chapter of this book follows the same pattern, and this notebook shows it once on the book's shared
# models. The reasoning chapters (speculative decoding, process rewards, alignment) need a *draft* model that is
# cheap and often wrong and a *target* model that is expensive and usually right, plus a task whose every step
# can be checked exactly. Here we train both, look at how they learn, check their calibration (how their accuracy
# falls with the number of reasoning steps) and what each costs in FLOPs. The calibration table is the pair's
# declared design, which the chapters that mix the two models check as preconditions of their claims; it is not a
# claim itself.
#
# **Parameters.** The first code cell is tagged `parameters`: `scale` picks the preset (`smoke`, `ci`, `full`)
# and every other knob can be overridden by name; `None` means "the scale's value". `icml25.workbench.config`
# resolves them in one call and rejects unknown names with the list of valid ones.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # training seeds of the pairs shown (seed 0: the pair the other chapters start from); None: the scale's value
n_test = None  # test problems per evaluation; None: the scale's value

# %%
import numpy as np
from IPython.display import Markdown, display

from icml25 import workbench
from icml25.core import arithmetic, flops, plot, reasoners
from icml25.core.claims import mean_sd

plot.use_style()
cfg = workbench.config(scale, seeds=seeds, n_test=n_test)
cfg

# %% [markdown]
# ## The task: arithmetic you can check one step at a time
#
# A problem is a chain of digits and operators evaluated left to right modulo 10. The model sees the expression
# and `|`, then writes one operation per step, each ended by `;`, and finally the answer after `A`. A program
# knows every correct step, so it serves as an exact *process* verifier (is step $t$ right?) and *outcome*
# verifier (is the answer right?).

# %%
problems = arithmetic.sample_problems(3, seed, stream="demo")
for p in problems:
    print(f"{p.prompt:14s} {p.solution:40s} steps={p.n_steps}")
bad = problems[-1].steps()
bad[1] = arithmetic.corrupt_step(problems[-1], 1, np.random.default_rng(seed))
print("corrupted:", "".join(bad), "-> step verdicts", arithmetic.step_labels(problems[-1], "".join(bad)))

# %% [markdown]
# ## Training the draft and the target (the zoo)
#
# `zoo.get(name, scale, seed)` trains a named model once and caches it under `$ICML25_CACHE`, keyed by a hash of
# its settings, its seed and the code that trains it; a second call, from this notebook or any other chapter,
# loads it with `from_pretrained`. Both models are Hugging Face `LlamaForCausalLM`s with a character tokenizer.
#
# The pair is a declared design (`icml25.core.reasoners`): the **draft** is small and, at `ci`, only ever sees
# chains of up to three operations; the **target** is wider, sees every chain length, and stops training at the
# first validation (on problems from a stream neither training nor testing uses) that reaches a declared accuracy
# on the mix (printed below): these models learn the task in a sudden jump whose timing varies by seed, so a fixed
# number of steps would give anything from a useless to a perfect target. The jump can also overshoot the band
# between two validations, which the calibration table shows when it happens.

# %%
runs = workbench.train_reasoners(cfg)
print("the target stops at the first validation reaching", reasoners.TARGET[scale]["stop_at"])
for name in workbench.MODELS:
    for s, z in zip(cfg.seeds, runs[name]):
        print(f"{name:13s} seed {s}: {z.info['n_params']:>8,d} parameters, {len(z.info['losses'])} steps, "
              f"{z.info['train_seconds']:.0f} s ({'trained now' if z.trained_now else 'loaded from the zoo cache'})")

# %%
fig, axes = plot.subplots(1, 2, figsize=(10, 3.6))
for name, color in zip(workbench.MODELS, plot.PALETTE):
    for i, z in enumerate(runs[name]):
        label = f"{name}" if i == 0 else None
        axes[0].plot(workbench.smooth(z.info["losses"]), color=color, alpha=1.0 if i == 0 else 0.4, label=label)
        steps, acc = zip(*z.info["evals"])
        axes[1].plot(steps, acc, marker=".", color=color, alpha=1.0 if i == 0 else 0.4, label=label)
axes[0].set(title="Training loss (every seed)", xlabel="optimizer step", ylabel="loss (nats / token)", yscale="log")
axes[1].set(title="Validation accuracy during training", xlabel="optimizer step",
            ylabel="final-answer accuracy (validation mix)")
for ax in axes:
    ax.legend()

# %% [markdown]
# ## The calibration: accuracy as the chain gets longer
#
# An error in any step propagates to the answer, so accuracy falls with the number of operations. The chapters
# that mix the two models (speculative decoding, RSD) need the pair to meet four declared conditions, checked
# here on every seed and again by the claims that depend on them:

# %%
calib = workbench.evaluate(cfg)
display(Markdown("\n".join(
    ["| condition | rule | " + " | ".join(f"seed {s}" for s in cfg.seeds) + " |",
     "|---|---|" + "---|" * len(cfg.seeds)]
    + [f"| `{p.id}` | {p.rule} | " + " | ".join(
        ("✓ " if p.test(p.value(c)) else "✗ ") + f"{p.value(c):.3f}" for c in calib) + " |"
       for p in reasoners.CALIBRATION])))

# %%
fig, ax = plot.subplots()
for k, name in enumerate(("draft", "target")):
    steps, mean, sd = workbench.by_ops_table(calib, name)
    ax.errorbar(steps, mean, yerr=sd, marker="o", capsize=3, color=plot.PALETTE[k], label=f"arith-{name}")
ax.axvspan(0.5, reasoners.DRAFT[scale]["max_ops"] + 0.5, color="grey", alpha=0.1, label="the draft's training mix")
ax.set(title="Final-answer accuracy by number of operations", xlabel="operations in the problem",
       ylabel=f"accuracy (mean ± sd over {len(cfg.seeds)} seeds)", ylim=(0, 1.05))
ax.legend();

# %%
gaps = [c["target_minus_draft_seen"] for c in calib]
display(Markdown(
    f"**What we see.** Over {len(cfg.seeds)} seeds the target is right on "
    f"{mean_sd([c['target_accuracy'] for c in calib])} of the test mix and the draft on "
    f"{mean_sd([c['draft_accuracy'] for c in calib])}; after a correct prefix the draft writes the right next "
    f"step {mean_sd([c['draft_step_accuracy'] for c in calib])} of the time on chains of its training mix, and "
    f"the target {mean_sd([c['target_step_accuracy'] for c in calib])} on the whole mix. On the chain lengths "
    f"the draft was trained on, the target's accuracy minus the draft's is "
    + ", ".join(f"{gap:+.3f}" for gap in gaps) + " (seed by seed)."))

# %% [markdown]
# ## What each model costs
#
# A forward pass costs $2N$ FLOPs per token for the $N$ weights of the linear maps, plus $4 \cdot L \cdot d$
# per token per key attended (`icml25.core.flops`). Solving a five-step problem means reading the prompt and
# writing its solution with the KV cache (the lengths are printed below):

# %%
long = arithmetic.sample_problems(1, seed, 5, 5, stream="flops")[0]
cost = {name: flops.forward_flops(runs[name][0].model.config, len(long.prompt) + len(long.solution) + 1)
        for name in workbench.MODELS}
fig, ax = plot.subplots()
ax.bar(list(cost), [c / 1e6 for c in cost.values()], color=plot.PALETTE[:2])
ax.set(title="FLOPs to solve one five-step problem", ylabel="MFLOPs per solution")
print(f"prompt {len(long.prompt)} tokens, solution {len(long.solution)} tokens:",
      {k: f"{v / 1e6:.2f} MFLOPs" for k, v in cost.items()},
      f"draft / target {cost['arith-draft'] / cost['arith-target']:.3f}")

# %% [markdown]
# ## Why the calibration is not a claim
#
# Chapters declare their claims in their module before any experiment runs: the paper's statement, the effect
# that decides it (one value per paired unit, with a 95% interval), the preconditions that make it decidable, and
# example measurements; the notebook measures and calls `check`, which computes one of three verdicts and records
# it for the [scorecard](../scorecard.md) (see "How this book decides"). "The target is more accurate than the
# draft" is not such a statement: it is what this pair was built to be, and whether it holds on a seed depends on
# where the target's early stop lands. So it stays a table. The chapter that mixes a draft with a target in its
# claims (RSD) trains a pair of its own on the whole mix (`icml25.rsd.pair`) and carries that pair's calibration
# as preconditions: a seed whose pair misses them makes its verdicts inconclusive rather than refuted.
