r"""IBCircuit, the method: the noise injection $Z = \lambda H + (1-\lambda)\mu + (1-\lambda)\sigma\varepsilon$, the
closed-form compression KL, and the masks' optimisation of faithfulness + β · compression (the package's loss)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.seeding import torch_generator
from .circuits import kl_from_full
from .head_models import HeadModel, TinyTransformer
from .tasks import Prompts


def compression_kl(lam: torch.Tensor, h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    r"""Elementwise $\mathrm{KL}(\mathcal N(\lambda h + (1-\lambda)\mu, (1-\lambda)^2\sigma^2)\,\|\,
    \mathcal N(\mu, \sigma^2)) = \tfrac12[(1-\lambda)^2 + \lambda^2 (h-\mu)^2/\sigma^2 - 1] - \log(1-\lambda)$."""
    var_ratio = (1 - lam) ** 2
    return 0.5 * (var_ratio + lam**2 * (h - mu) ** 2 / sigma**2 - 1 - torch.log(var_ratio))


def noisy_heads(lam: torch.Tensor, h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor,
                eps: torch.Tensor) -> torch.Tensor:
    """Z = λh + (1-λ)μ + (1-λ)σε over head outputs `h` [B, T, H, d_head]; the official code draws one ε shaped
    like μ [T, H, d_head], shared by the prompts. `lam` broadcasts against `h`: [H] (one mask per head) or
    [B, 1, H, 1] (one per prompt and head)."""
    lam = lam.view(1, 1, -1, 1) if lam.dim() == 1 else lam
    return lam * h + (1 - lam) * mu + (1 - lam) * sigma * eps


LAMBDA_GUARD = 1e-6


@dataclass
class IBResult:
    lam: np.ndarray  # [n_heads_total] final masks averaged over the prompts: the head scores
    losses: list[float]
    seconds: float = math.nan  # the seed's share of the wall seconds that trained its model and optimised the masks


def _bottleneck(lam: torch.Tensor, h: torch.Tensor, eps: torch.Tensor, sigma_floor: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer of the IB pass: the noisy heads Z (`noisy_heads`) with μ, σ the batch statistics of `h` itself,
    and the mean compression KL of that layer."""
    sd, mu = torch.std_mean(h, dim=0)
    sd = sd.clamp(min=sigma_floor)
    return noisy_heads(lam, h, mu, sd, eps), compression_kl(lam, h, mu, sd).mean()


def _ib_loss(forward: Callable, ids: torch.Tensor, full: torch.Tensor, w: torch.Tensor, eps: torch.Tensor,
             n_heads: int, beta: float, sigma_floor: float) -> torch.Tensor:
    """Faithfulness KL(full ‖ noisy) + β · compression KL (averaged over layers) of one model under mask logits `w`
    [B, n_heads_total] and noise `eps` [layers, T, H, d_head]; `forward(ids, head_fn)` runs the model."""
    lam = torch.sigmoid(w).clamp(max=1 - LAMBDA_GUARD)  # keeps log(1 - λ) finite
    comp = []

    def inject(layer, h):
        z, kl = _bottleneck(lam[:, layer * n_heads:(layer + 1) * n_heads].view(len(ids), 1, n_heads, 1), h,
                            eps[layer], sigma_floor)
        comp.append(kl)
        return z

    logits = forward(ids, inject)
    return kl_from_full(full, logits) + beta * torch.stack(comp).mean()


def _noise(model, prompts: Prompts, generator: torch.Generator) -> torch.Tensor:
    """One step's noise ε per layer, [layers, T, H, d_head]: one draw shaped like μ per layer, shared by the
    prompts, as the official code draws it."""
    return torch.stack([torch.randn((prompts.ids.shape[1], model.n_heads, model.d_head), generator=generator)
                        for _ in range(model.n_layers)])


def ib_circuit(model: TinyTransformer | HeadModel, prompts: Prompts, beta: float, steps: int, lr: float, seed: int,
               init: float = 5.0, sigma_floor: float = 1e-4) -> IBResult:
    """IBCircuit as the official code optimises it: one mask logit per prompt and head (λ = sigmoid(w), w
    initialised at `init` so every head starts kept); in every forward pass each layer's noise takes its mean μ
    and spread σ over the batch of that layer's head outputs *in the noisy pass itself* (the upstream heads
    already noised, gradients flowing through μ and σ), with one noise draw shared by the prompts; the loss is the
    faithfulness KL(full ‖ noisy) + β · the compression KL averaged over elements and layers (Adam on the masks,
    the model's weights frozen, full batch). The head scores are the masks averaged over the prompts. For several
    tiny transformers at once, :func:`ib_circuits` gives the same result in one batched run."""
    return ib_circuits([model], [prompts], beta, steps, lr, [seed], init, sigma_floor)[0]


def ib_circuits(models: Sequence[TinyTransformer | HeadModel], prompts: Sequence[Prompts],
                beta: float | Sequence[float], steps: int, lr: float, seeds: Sequence[int], init: float = 5.0,
                sigma_floor: float = 1e-4) -> list[IBResult]:
    """:func:`ib_circuit` for each (model, prompts, seed, and β when `beta` is a list), all in one batched run when the models are tiny
    transformers of one shape: their weights are stacked and the IB loss is vmapped over them, each with its own
    masks, prompts and noise generator (Adam acts elementwise, so each is the run a separate call would make, up
    to float rounding). A Hugging Face model runs on its own."""
    from torch.func import functional_call, stack_module_state, vmap

    if any(len(p) < 2 for p in prompts):
        raise ValueError(f"IBCircuit needs at least 2 prompts for batch statistics, got {[len(p) for p in prompts]}")
    if not all(isinstance(m, TinyTransformer) for m in models) and len(models) > 1:
        betas = list(beta) if isinstance(beta, Sequence) else [beta] * len(models)
        return [ib_circuit(m, p, b, steps, lr, s, init, sigma_floor)
                for m, p, b, s in zip(models, prompts, betas, seeds)]
    ids = torch.stack([p.ids for p in prompts])
    with torch.no_grad():
        full = torch.stack([m(p.ids) for m, p in zip(models, prompts)])
    w = torch.full((len(models), ids.shape[1], models[0].n_total_heads), float(init), requires_grad=True)
    opt = torch.optim.Adam([w], lr=lr)
    gens = [torch_generator(seed, "ib-noise") for seed in seeds]
    H = models[0].n_heads
    betas = torch.as_tensor(beta, dtype=torch.float32).expand(len(models))
    if isinstance(models[0], TinyTransformer):
        params, buffers = stack_module_state(models)
        params = {k: v.detach() for k, v in params.items()}
        shape = copy.deepcopy(models[0]).to("meta")
        loss_fn = vmap(lambda p, b, i, f, w_, e, bt: _ib_loss(
            lambda x, fn: functional_call(shape, (p, b), (x, fn)), i, f, w_, e, H, bt, sigma_floor))
        batch_loss = lambda eps: loss_fn(params, buffers, ids, full, w, eps, betas)  # noqa: E731
    else:
        batch_loss = lambda eps: _ib_loss(models[0], ids[0], full[0], w[0], eps[0], H, betas[0],  # noqa: E731
                                          sigma_floor)[None]
    losses = []
    for _ in range(steps):
        loss = batch_loss(torch.stack([_noise(m, p, g) for m, p, g in zip(models, prompts, gens)]))
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # each model's gradient is that of its own loss
        opt.step()
        losses.append(loss.detach())
    curves = torch.stack(losses, 1).tolist() if losses else [[] for _ in models]
    lam = torch.sigmoid(w).detach().mean(1).numpy()
    return [IBResult(lam[i], curves[i]) for i in range(len(models))]
