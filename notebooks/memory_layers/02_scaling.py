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
# # Memory against dense models at equal and at higher FLOPs
#
# The paper's headline: a memory layer adds *capacity* (millions of values) while each token reads only $k$ of
# them, so at the same FLOPs per token a memory-augmented model beats a dense one, beats dense models with more
# than twice its compute, and gains most on *factual* tasks. We test it on a synthetic fact world — $F$ random
# facts $(s, r) \to o$, each the sequence `s r o`, scored on whether the model's greedy next token after `s r` is
# `o` — where capacity is the bottleneck, and on a control task (the core's modular arithmetic, scored on every
# digit after `=`) where a small rule suffices.
#
# Four two-layer Llamas with $d$ = `d_model`, all trained with the same steps, batch and learning rate:
#
# - **dense**: SwiGLU FFN of width $4d$ in both layers;
# - **memory**: the second FFN replaced by Memory+ ($N$ = `n_keys`² values, `heads` heads, `knn` values per head,
#   values trained at `value_lr_mult` × the learning rate) — slightly *fewer* FLOPs per token than dense;
# - **dense 2x / 4x**: FFNs widened until the model costs 2× and 4× the memory model's FLOPs per token.
#
# The control task uses the same models and steps with a smaller batch (its sequences are longer).
#
# At `full` scale: d = 128, N = 256² values, worlds of 4k and 16k facts, 5000 steps (hours on a CPU).

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # training seeds (each draws its own fact world)
n_facts = None  # sizes of the fact worlds
steps = None  # optimizer steps per model
batch_size = None
lr = None  # base learning rate (AdamW, warmup then cosine)
value_lr_mult = None  # the memory values' learning rate multiple (the paper: 10x)
n_keys = None  # sqrt(N): sub-keys per half
knn = None  # values read per head
dense_flop_multiples = None  # FLOPs of the wider dense models, in multiples of the memory model's

# %%
import numpy as np

from icml25 import memory_layers as ml
from icml25.core import check, plot

plot.use_style()
cfg = ml.config(scale, seeds=seeds, n_facts=n_facts, steps=steps, batch_size=batch_size, lr=lr,
                value_lr_mult=value_lr_mult, n_keys=n_keys, knn=knn, dense_flop_multiples=dense_flop_multiples)
cfg

# %% [markdown]
# ## The models and what they cost
#
# FLOPs per token follow the core's accounting (2 per weight a token passes through, plus attention), with the
# memory layer's query projection, $2\sqrt N$ sub-key scores per head, the $Hk$-value weighted sum and $W_1, W_2$
# in place of the FFN it replaces. The memory model has by far the most parameters but not the most FLOPs.

# %%
world = ml.fact_world(max(cfg.n_facts), seed, cfg.n_relations, cfg.n_objects)
task = ml.fact_task(world)
for arch in ml.architectures(cfg, task.vocab_size, task.inputs.shape[1]):
    model, _ = ml.build(arch, task.vocab_size, cfg, seed, task.inputs.shape[1])
    print(f"{arch.name:8s} FFN width {arch.d_ff:5d}  {ml.flops_per_token(model, 3) / 1e3:7.1f} kFLOPs/token  "
          f"{sum(p.numel() for p in model.parameters()):>9,d} parameters")

# %% [markdown]
# ## Training every model
#
# For each seed: every architecture on each fact world, the memory model with query normalisation on the larger
# world, and dense and memory on the control task. The loss is the cross-entropy of the scored tokens only.

# %%
runs = ml.scaling_experiment(cfg)
print(f"{len(runs)} runs, {sum(r['seconds'] for r in runs):.0f} s of training")

# %%
fig, ax = plot.subplots()
for (name, style), color in zip((("dense", "-"), ("memory", "-"), ("dense 2x", "--")), plot.PALETTE):
    for i, r in enumerate([r for r in runs if r["arch"] == name and r["n_facts"] == max(cfg.n_facts)]):
        ax.plot(np.convolve(r["losses"], np.ones(10) / 10, mode="valid"), style, color=color,
                alpha=1 if i == 0 else 0.35, label=name if i == 0 else None)
ax.set(title=f"Training loss on {max(cfg.n_facts)} facts", xlabel="optimizer step",
       ylabel="cross-entropy on the object (nats)")
ax.legend();

# %% [markdown]
# ## Fact accuracy against FLOPs and against parameters
#
# Each point is the mean over seeds with one standard deviation; the x-axes are log-scaled. The wider dense
# models are trained on the larger world only (the smaller one is learnt completely by the smallest models).

# %%
all_names = [a.name for a in ml.architectures(cfg, task.vocab_size, 3)]
fig, axes = plot.subplots(1, 2)
for ax, key, xlabel in ((axes[0], "flops_per_token", "forward FLOPs per token"),
                        (axes[1], "params", "parameters (memory values included)")):
    for n, color in zip(cfg.n_facts, plot.PALETTE):
        names = [a for a in all_names if ml.select(runs, arch=a, n_facts=n)]
        xs = [np.mean(ml.select(runs, key, arch=a, n_facts=n)) for a in names]
        acc = [ml.select(runs, arch=a, n_facts=n) for a in names]
        ax.errorbar(xs, [np.mean(a) for a in acc], yerr=[np.std(a) for a in acc], fmt="o-", color=color,
                    capsize=3, label=f"{n} facts")
        for x, a, name in zip(xs, acc, names):
            ax.annotate(name, (x, np.mean(a)), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set(xscale="log", xlabel=xlabel, ylabel=f"fact accuracy (mean ± sd, {len(cfg.seeds)} seeds)", ylim=(0, 1.05))
    ax.legend()
axes[0].set_title("Fact recall against compute")
axes[1].set_title("Fact recall against parameters");

# %% [markdown]
# ## Facts against the control, and how much of the memory is used
#
# Left: each model's accuracy on the larger fact world and on the control task. Right: the fraction of the $N$
# values that at least one training fact selects, without and with normalising the query halves (a collapsed
# memory reads few values; the paper adds normalisation where training is unstable, Lample et al. used a query
# BatchNorm to raise usage).

# %%
big = max(cfg.n_facts)
control = {a: ml.select(runs, arch=a, n_facts=None) for a in ("dense", "memory")}
facts = {a: ml.select(runs, arch=a, n_facts=big) for a in ("dense", "memory")}
usage = {a: ml.select(runs, "usage", arch=a, n_facts=big) for a in ("memory", "memory + query norm")}
fig, axes = plot.subplots(1, 2)
pos = np.arange(2)
for j, (name, color) in enumerate(zip(("dense", "memory"), plot.PALETTE)):
    means = [np.mean(facts[name]), np.mean(control[name])]
    sds = [np.std(facts[name]), np.std(control[name])]
    axes[0].bar(pos + 0.38 * j, means, 0.38, yerr=sds, capsize=3, color=color, label=name)
axes[0].set_xticks(pos + 0.19, [f"{big} facts", "control (arithmetic)"])
axes[0].set(title="Where memory helps", ylabel="accuracy (mean ± sd over seeds)", ylim=(0, 1.05))
axes[0].legend()
axes[1].bar(list(usage), [np.mean(u) for u in usage.values()], yerr=[np.std(u) for u in usage.values()],
            capsize=3, color=plot.PALETTE[1:3])
axes[1].set(title="Memory usage", ylabel="fraction of values ever selected", ylim=(0, 1.05))
print({k: f"{np.mean(v):.3f} ± {np.std(v):.3f}" for k, v in usage.items()},
      "accuracy with query norm:", f"{np.mean(ml.select(runs, arch='memory + query norm')):.3f}")

# %% [markdown]
# ## The claim checks
#
# The criteria were fixed in `icml25.memory_layers` before these runs. All three compare means over the seeds on
# the larger fact world.

# %%
def flops_of(name):
    return np.mean(ml.select(runs, "flops_per_token", arch=name, n_facts=big))


mem, dense, dense2 = facts["memory"], facts["dense"], ml.select(runs, arch="dense 2x", n_facts=big)
fmt = lambda v: f"{np.mean(v):.3f} ± {np.std(v):.3f}"
check(ml.ISO_FLOP, seeds=cfg.seeds, scale=scale,
      measured={"memory_acc": mem, "dense_acc": dense, "flop_ratio": flops_of("memory") / flops_of("dense")},
      our_value=f"memory {fmt(mem)} vs dense {fmt(dense)} at {flops_of('memory') / flops_of('dense'):.2f}x FLOPs")

# %%
check(ml.BEATS_2X, seeds=cfg.seeds, scale=scale,
      measured={"memory_acc": mem, "dense2x_acc": dense2,
                "dense_flop_ratio": flops_of("dense 2x") / flops_of("memory")},
      our_value=f"memory {fmt(mem)} vs dense 2x {fmt(dense2)}")

# %%
gap = lambda d: np.mean(d["memory"]) - np.mean(d["dense"])
check(ml.FACTUAL, seeds=cfg.seeds, scale=scale,
      measured={"fact_memory": facts["memory"], "fact_dense": facts["dense"],
                "control_memory": control["memory"], "control_dense": control["dense"]},
      our_value=f"advantage on facts {gap(facts):+.3f}, on the control {gap(control):+.3f}")

# %% [markdown]
# **What we see.** The verdicts above are computed from this run's numbers. In the book's `ci` run the memory
# model did not beat the dense model at this size: it recalled *fewer* of the larger world's facts than the dense
# FFN-4d model at about 0.85× its FLOPs, and fewer than the 2× dense model, while the two were
# close on the control. Two things stand out. First, the memory is barely used: only a small fraction of its
# values is ever selected (the right panel), so most of the added capacity is idle — the collapse that query
# normalisation (and, in Lample et al., query BatchNorm) is meant to fight, and which our simple RMS-normalisation
# does not fix here. Second, our dense models are not short of capacity: a 40k-parameter FFN network can hold a
# thousand facts, and after 200 steps recall is limited by learning speed, not storage. The paper's regime — a
# trillion tokens, dense models saturated, memories of a million values per layer — is the one where extra
# capacity at no extra FLOPs pays; this chapter shows the mechanism and its cost exactly, and reports that the
# benefit does not appear in a few hundred steps at d = 32. Scaling the experiment (`scale="full"`) is the way to
# probe where it starts.
