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
# # Why a zero factor slows LoRA down
#
# LoRA adds a low-rank update to a frozen weight, $h = Wx + \frac{\alpha}{r} BAx$ (Eq. 1). The standard
# initialisation, **Init[A]**, draws $A$ at random and sets $B = 0$ so fine-tuning starts exactly at the pretrained
# model. The gradients (Eq. 2)
#
# $$\frac{\partial L}{\partial A} = \frac{\alpha}{r} B^\top \frac{\partial L}{\partial h} x^\top, \qquad
#   \frac{\partial L}{\partial B} = \frac{\alpha}{r} \frac{\partial L}{\partial h} (Ax)^\top$$
#
# show the catch: with $B = 0$, $A$ gets no gradient at all at the first step, so early learning runs only through
# $\Delta B \cdot A_0$. **Init[AB]** draws both factors at random (adding the noise $\frac{\alpha}{r}B_0A_0$ to the
# function); **Init[AB+]** does the same and subtracts that noise from $W$, so it starts at the pretrained model.
#
# LoRA here is the PEFT library's: `lora_init.lora_model` applies a `LoraConfig` with `get_peft_model`, and
# `lora_init.init_lora` re-initialises PEFT's `lora_A`/`lora_B` factors in place for each of the three modes
# (Init[AB+] also edits the frozen base weight). Both factors are drawn from $U(\pm\sqrt{s/n_\text{in}})$, with
# $n_\text{in}$ the adapted layer's input dimension for $B$ as for $A$ and the scale $s$ multiplying the variance
# (the reference implementation's Kaiming-uniform rule). At $s = 1$ this is PEFT's own default for $A$; the draws
# come from a seeded stream, so all three modes share $A_0$ (and Init[AB], Init[AB+] share $B_0$).
#
# **Parameters.** At `full` scale: width 1024, 1000 fine-tuning steps, more seeds (`icml25.lora_init.config("full")`
# lists every knob).

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None
width = None  # hidden width of the MLP
rank = None  # LoRA rank r
alpha = None  # LoRA alpha: the update is scaled by alpha / r
pretrain_steps = None
finetune_steps = None
curve_lr = None  # the learning rate of the loss curves (below the optimum, where training still moves)

# %%
import numpy as np

from icml25 import lora_init
from icml25.core import plot

plot.use_style()
cfg = lora_init.config(scale, seeds=seeds, width=width, rank=rank, alpha=alpha, pretrain_steps=pretrain_steps,
                       finetune_steps=finetune_steps, curve_lr=curve_lr)
cfg

# %% [markdown]
# ## The toy
#
# A two-layer tanh MLP is pretrained to imitate a random teacher; the downstream task is a second teacher whose
# hidden weights moved by a rank-4 matrix and whose readout moved too. PEFT puts LoRA of rank $r$ on both of its
# `nn.Linear` layers (`fc1`, `fc2`): PEFT wraps any PyTorch module, not only Hugging Face models, so the toy and
# the tiny Llama of the next notebook use the same LoRA implementation.

# %%
figure_seeds = cfg.seeds[: cfg.figure_seeds]  # a descriptive figure: the first few of the verdict seeds
toys = [lora_init.mlp_toy(cfg, s) for s in figure_seeds]
grads = lora_init.step0_gradients(toys[0], cfg, seed)
for mode, g in grads.items():
    print(f"Init[{mode}]: ‖∂L/∂A‖ = {g['A']:.3g}, ‖∂L/∂B‖ = {g['B']:.3g} at step 0")

# %%
fig, ax = plot.subplots()
x = np.arange(len(lora_init.MODES))
ax.bar(x - 0.2, [grads[m]["A"] for m in lora_init.MODES], 0.4, label="‖∂L/∂A‖")
ax.bar(x + 0.2, [grads[m]["B"] for m in lora_init.MODES], 0.4, label="‖∂L/∂B‖")
ax.set_xticks(x, [f"Init[{m}]" for m in lora_init.MODES])
ax.set(title="Gradient norms at the first step", ylabel="Frobenius norm (both layers)")
ax.legend();

# %% [markdown]
# Under Init[A] the gradient of $A$ is exactly zero; under both non-zero inits it is the larger of the two.

# %% [markdown]
# ## Loss curves below the optimal learning rate
#
# Adam, learning rate decayed linearly to zero, mean ± sd over the first `figure_seeds` seeds.

# %%
curves = {m: np.array([lora_init.finetune_toy(t, cfg, m, cfg.curve_lr, 1.0, s)["losses"]
                       for t, s in zip(toys, figure_seeds)]) for m in lora_init.MODES}
fig, ax = plot.subplots()
for m, c in curves.items():
    ax.plot(c.mean(0), label=f"Init[{m}]")
    ax.fill_between(np.arange(c.shape[1]), c.mean(0) - c.std(0), c.mean(0) + c.std(0), alpha=0.25)
ax.set(title=f"Fine-tuning loss at learning rate {cfg.curve_lr:g}", xlabel="step",
       ylabel="training MSE (target units²)")
ax.legend();

# %% [markdown]
# ## What we see
#
# Init[AB] starts slightly above Init[AB+] (the noise $\frac{\alpha}{r}B_0A_0$ is present in one and removed in
# the other), and both descend faster than Init[A], whose $A$ factor must wait for $B$ to grow before it can
# learn. The next notebook asks how this depends on the learning rate and on the size of the initial noise.
