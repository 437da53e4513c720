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
# # What an intervention does to a hidden state
#
# Representation fine-tuning (ReFT) leaves every weight of a language model frozen and instead edits hidden
# states at a few positions of a few layers. The pointwise edit of LoReFT moves a hidden state $h \in \mathbb{R}^d$
# only inside the span of the $r$ orthonormal rows of $R$:
#
# $$\Phi_{\text{LoReFT}}(h) = h + R^\top (W h + b - R h), \qquad R R^\top = I_r \tag{1}$$
#
# The distribution-wise edit of D-ReFT (Deng, Chang & Chen, ICML 2025) replaces the point $Wh + b$ by a sample:
#
# $$\mu(h) = W_\mu h + b_\mu,\quad \log\sigma^2(h) = W_\sigma h + b_\sigma,\quad
#   z = \mu(h) + \sigma(h) \odot \varepsilon,\quad \Phi_{\text{D-ReFT}}(h) = h + R^\top (z - R h) \tag{2–4}$$
#
# so it learns a *region* around each edited point, with $\sigma$ clamped to $[0.001, 0.2]$. This notebook trains
# one of each on a frozen tiny Llama and draws what they do inside their subspace.
#
# **Parameters.** `scale` picks the preset; every knob is overridden by name (None: the scale's value).
# At `scale="full"` the same code runs with rounds of 600 training steps (see `dist_interventions.config`).

# %% tags=["parameters"]
scale = "ci"
seed = 100  # the base model and intervention seed (one of the verdict seeds, so its base model is warmed up)
model = None  # a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
rank = None  # subspace rank r
steps = None  # optimiser steps for the intervention
n_samples = 30  # D-ReFT draws shown per hidden state

# %%
import matplotlib.pyplot as plt
import numpy as np

from icml25 import dist_interventions as di
from icml25.core import plot

plot.use_style()
cfg = di.config(scale, model=model, rank=rank, steps=steps, seeds=[seed])
cfg

# %% [markdown]
# ## The frozen base model and the steering task
#
# At smoke and ci the base (parameter `model`; Llama-3.2-1B-Instruct at full scale) is a 4-layer tiny Llama
# (hidden size 32) pretrained on **rule A**: read four digits and `=`, answer the first digit. We steer it with 256 examples of **rule B**: answer the first digit's *successor* (mod 10). Only the
# intervention's parameters are trained; it acts on the output of layer 0 at the first two and last two prompt
# positions (the paper's "first $k$ + last $k$" positions with shared weights).

# %%
z = di.base_model(cfg.model, scale, seed)
print(f"base model: {z.info['n_params']:,} parameters, rule-A accuracy {z.info['accuracy_A']:.3f}, "
      f"rule-B accuracy before steering {z.info['accuracy_B']:.3f}")
n_digits = z.info["n_digits"]
positions = di.edge_positions(n_digits + 1, cfg.n_edge)
train_x = di.sample_digits(cfg.n_train, n_digits, seed, "reft-train")
test_x = di.sample_digits(cfg.n_test, n_digits, seed, "reft-test")
noise_scale = di.representation_scale(z.model, z.tokenizer, train_x, 0, positions)  # D-ReFT's σ is in these units
fitted = {}
for method in ("loreft", "dreft"):
    phi = di.make_intervention(method, z.model.config.hidden_size, cfg.rank, seed).to(z.model.device)
    phi.noise_scale = noise_scale
    steered = di.Steered(z.model, z.tokenizer, {0: phi}, positions)
    losses = di.fit(steered, train_x, di.rule_answer(train_x, "B"), cfg, seed)
    acc = di.evaluate(steered, test_x, di.rule_answer(test_x, "B"), cfg, seed, mode="mean")["noise 0"]
    fitted[method] = (phi, losses)
    print(f"{method}: rule-B test accuracy {acc:.3f}")

# %% [markdown]
# ## Inside the subspace
#
# Position 0 at layer 0 sees only its own token, so its hidden state takes one of ten values, one per digit. We
# draw the first two of the $r$ subspace coordinates $Rh$: the grey point is where the digit sits before the edit,
# LoReFT moves it to one point $Wh+b$, and D-ReFT moves it to a cloud of samples around $\mu(h)$.

# %%
digits = np.repeat(np.arange(10)[:, None], n_digits, axis=1)
h = di.layer_states(z.model, z.tokenizer, digits, 0, [0])
fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
for ax, method in zip(axes, fitted):
    view = di.subspace_view(fitted[method][0], h, n_samples)
    for k in range(10):
        c = plot.PALETTE[k % len(plot.PALETTE)]
        if "samples" in view:
            ax.scatter(view["samples"][:, k, 0], view["samples"][:, k, 1], s=6, alpha=0.3, color=c)
        ax.annotate("", view["after"][k, :2], view["before"][k, :2], arrowprops=dict(arrowstyle="->", color=c))
        ax.scatter(*view["before"][k, :2], color="grey", s=20)
        ax.text(*view["after"][k, :2], str(k), color=c, fontsize=10)
    ax.set(title=f"{method}: digit k moved inside the subspace", xlabel="subspace coordinate 1 (R h)₁",
           ylabel="subspace coordinate 2 (R h)₂")
    print(f"{method}: largest change outside the subspace ‖(I − RᵀR)(Φ(h) − h)‖ = {view['off_subspace']:.2e}")
axes[0].scatter([], [], color="grey", label="before the edit")
axes[1].scatter([], [], color=plot.PALETTE[0], alpha=0.4, s=6, label="D-ReFT samples")
axes[0].legend(); axes[1].legend();

# %% [markdown]
# ## Training curves and the learned spread
#
# Both interventions are trained with the same learning rate and batches, in rounds of `steps` steps (each a warmup
# and cosine cycle) until they fit their training set, so a curve may span more than one round. D-ReFT trains
# through its own noise (and, as in the official code, keeps sampling at inference).

# %%
view = di.subspace_view(fitted["dreft"][0], h, 0)
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for method, (phi, losses) in fitted.items():
    axes[0].plot(losses, label=method, alpha=0.8)
axes[0].set(title="Training loss of the interventions", xlabel="optimiser step", ylabel="cross-entropy (nats)",
            yscale="log")
axes[0].legend()
axes[1].bar(np.arange(10), view["sigma"].mean(1), color=plot.PALETTE[1], label="mean σ over the subspace")
axes[1].axhline(di.SIGMA_CLAMP[1], color="k", ls="--", label="upper clamp 0.2")
axes[1].axhline(di.SIGMA_INIT, color="grey", ls=":", label=f"initial σ₀ = {di.SIGMA_INIT:.3f}")
axes[1].set(title="D-ReFT's learned σ at position 0", xlabel="first digit",
            ylabel="σ (× the layer's RMS, the noise's unit)")
axes[1].legend();

# %% [markdown]
# **What we see.** Both edits move the ten digit states to new places inside the subspace and leave everything
# outside it unchanged to float precision (the printed off-subspace norms). D-ReFT's learned σ is the spread of
# the cloud; the next notebook asks whether that spread buys robustness, layer by layer.
