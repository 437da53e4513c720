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
# can be checked exactly. Here we train both, look at how they learn, how their accuracy falls with the number of
# reasoning steps and what each costs in FLOPs, and end with a claim check.
#
# **Parameters.** The first code cell is tagged `parameters`: `scale` picks the preset (`smoke`, `ci`, `full`)
# and every other knob can be overridden by name; `None` means "the scale's value". `icml25.workbench.config`
# resolves them in one call and rejects unknown names with the list of valid ones.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # training seeds for the claim check; None: the scale's value
n_test = None  # test problems per evaluation; None: the scale's value

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import workbench
from icml25.core import arithmetic, check, flops, plot, zoo

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

# %%
runs = workbench.train_reasoners(cfg)
for name in workbench.MODELS:
    z = runs[name][0]
    print(f"{name:13s} {z.info['n_params']:>8,d} parameters; seed-0 training took {z.info['train_seconds']:.0f} s"
          f" ({'trained now' if z.trained_now else 'loaded from the zoo cache'})")

# %%
fig, ax = plot.subplots()
for name, color in zip(workbench.MODELS, plot.PALETTE):
    for i, z in enumerate(runs[name]):
        ax.plot(workbench.smooth(z.info["losses"]), color=color, alpha=1.0 if i == 0 else 0.35,
                label=f"{name} (seed {cfg.seeds[i]})" if i == 0 else None)
ax.set(title="Training loss of the two reasoners", xlabel="optimizer step", ylabel="loss (nats / token)",
       yscale="log")
ax.legend();

# %% [markdown]
# ## Accuracy as the chain gets longer
#
# An error in any step propagates to the answer, so accuracy falls with the number of operations; the gap
# between the two models is what speculative decoding and reward-guided methods exploit.

# %%
evals = workbench.evaluate(runs, cfg)
fig, ax = plot.subplots()
for name in workbench.MODELS:
    steps, mean, sd = evals[name]["by_steps"]
    ax.errorbar(steps, mean, yerr=sd, marker="o", capsize=3, label=name)
ax.set(title="Final-answer accuracy by number of operations", xlabel="operations in the problem",
       ylabel=f"accuracy (mean ± sd over {len(cfg.seeds)} seeds)", ylim=(0, 1.05))
ax.legend();

# %% [markdown]
# ## What each model costs
#
# A forward pass costs $2N$ FLOPs per token for the $N$ weights of the linear maps, plus $4 \cdot L \cdot d$
# per token per key attended (`icml25.core.flops`). Solving a five-step problem means reading the prompt and
# writing about 30 tokens with the KV cache:

# %%
long = [p for p in arithmetic.sample_problems(200, seed, 5, 5, stream="flops")][0]
cost = {name: flops.forward_flops(runs[name][0].model.config, len(long.prompt) + len(long.solution) + 1)
        for name in workbench.MODELS}
fig, ax = plot.subplots()
ax.bar(list(cost), [c / 1e6 for c in cost.values()], color=plot.PALETTE[:2])
ax.set(title="FLOPs to solve one five-step problem", ylabel="MFLOPs per solution")
print({k: f"{v / 1e6:.2f} MFLOPs" for k, v in cost.items()}, f"ratio {cost['arith-target'] / cost['arith-draft']:.1f}x")

# %% [markdown]
# ## The claim check
#
# Chapters declare their claims in their module, before any experiment runs: the paper's statement, the paper's
# value, a criterion in words and the same criterion as code. The notebook only measures and calls `check`,
# which computes the verdict and records it for the [scorecard](../scorecard.md). The workbench's own claim is
# the premise of the reasoning chapters: the larger model is clearly more accurate, on every training seed.

# %%
workbench.LARGER_IS_BETTER

# %%
acc = {name: evals[name]["accuracy"] for name in workbench.MODELS}
check(workbench.LARGER_IS_BETTER, seeds=cfg.seeds, scale=scale,
      measured={"draft_accuracy": acc["arith-draft"], "target_accuracy": acc["arith-target"]},
      our_value=f"draft {np.mean(acc['arith-draft']):.2f} ± {np.std(acc['arith-draft']):.2f}, "
                f"target {np.mean(acc['arith-target']):.2f} ± {np.std(acc['arith-target']):.2f}")
