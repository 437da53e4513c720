"""The value step of ROME and MEMIT: the vector δ added to the MLP output at the edited token so that the model
answers the new object, found by the official objective (ROME's compute_v, MEMIT's compute_z)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..core import models
from .sites import _encode, _output, block, down_proj, down_weight


@dataclass(frozen=True)
class ValueObjective:
    """The official value objective (ROME's compute_v, MEMIT's compute_z), with the WikiBigEdit Llama-3-8B
    settings: −log p(o′) on the rewriting prompts + kl_factor · KL(p_δ ‖ p_0) on the essence prompts at the edited
    token + weight_decay · ‖δ‖ / ‖v₀‖², δ projected back into the ball ‖δ‖ ≤ clamp_norm_factor · ‖v₀‖ after
    every step, stopping once the loss is below stop_loss (v₀ is the unedited MLP output at the edited token)."""

    kl_factor: float = 0.0625
    weight_decay: float = 1e-3
    clamp_norm_factor: float = 4.0
    stop_loss: float = 5e-2


@dataclass(frozen=True)
class ValueRequest:
    """One edit's value step: its rewriting prompts and edited positions, the target token, and its essence
    prompts (for the KL term) with their positions."""

    prompts: Sequence[str]
    positions: Sequence[int]
    target: str
    essence: tuple[Sequence[str], Sequence[int]] = ((), ())


def _final_norm(model) -> nn.Module | None:
    """The norm between the last block and the unembedding (Llama/Qwen2 `norm`, GPT-2 `ln_f`), if found."""
    base = model.base_model
    return next((getattr(base, n) for n in ("norm", "ln_f", "final_layernorm") if hasattr(base, n)), None)


def optimise_values(model, tok, requests: Sequence[ValueRequest], layer: int, steps: int, lr: float,
                    objective: ValueObjective = ValueObjective()) -> tuple[torch.Tensor, list[list[float]]]:
    """The value step of every request at once: δ_i, added to the MLP output of `layer` at request i's edited
    token in each of its prompts (and essence prompts), trained by `objective` so that the next token after each
    prompt is its target. The requests are independent (each δ_i enters only its own loss, Adam is elementwise,
    the clamp is per δ_i, and a request that reaches the stopping loss is frozen there), so this equals one
    optimisation per request. ROME's value is v* = W k̄* + δ. Returns δ (one row per request) and each request's
    curve of −log p(target) per step.

    When `layer` is the last block, δ reaches the logits only through the final norm and the unembedding of the
    last position, so each step evaluates just those on the cached block outputs (the same numbers as a forward
    pass, without re-running the blocks)."""
    rw = [(i, p, c) for i, r in enumerate(requests) for p, c in zip(r.prompts, r.positions, strict=True)]
    es = [(i, p, c) for i, r in enumerate(requests) for p, c in zip(*r.essence, strict=True)]
    every = rw + es
    enc, rows, cols = _encode(tok, [p for _, p, _ in every], [c for _, _, c in every])
    owner = torch.tensor([i for i, _, _ in every])
    n, n_req = len(rw), len(requests)
    targets = torch.tensor(tok.convert_tokens_to_ids([requests[i].target for i, _, _ in rw]))
    is_rw = torch.zeros(len(every), n_req).index_put_((torch.arange(n), owner[:n]), torch.tensor(1.0))
    is_es = torch.zeros(len(every), n_req).index_put_((torch.arange(n, len(every)), owner[n:]), torch.tensor(1.0))
    n_rw, n_es = is_rw.sum(0), is_es.sum(0)
    down, last = down_proj(model, layer), layer == len(models.decoder_blocks(model)) - 1
    norm, unembed = _final_norm(model), model.get_output_embeddings()
    fast = last and norm is not None
    cached = {}

    def capture(m, a, o):
        cached["v0"] = o[rows, cols].detach().clone()

    def keep_block(m, a, o):
        cached["h"] = _output(o)[:, -1].detach().clone()

    with torch.no_grad():
        hooks = [down.register_forward_hook(capture)] + ([block(model, layer).register_forward_hook(keep_block)]
                                                          if fast else [])
        try:
            model(**enc)
        finally:
            for h in hooks:
                h.remove()
    first = torch.tensor([next(j for j, (i, _, _) in enumerate(every) if i == r) for r in range(n_req)])
    v0_norm = cached["v0"][first].norm(dim=-1)  # the unedited MLP output at the edited token of the first prompt
    at_last = (cols == enc["input_ids"].shape[1] - 1).float()[:, None]
    delta = torch.zeros(n_req, down_weight(model, layer).shape[0], requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)
    active = torch.ones(n_req, dtype=torch.bool)
    curves: list[list[float]] = [[] for _ in requests]

    def add_delta(m, a, out):
        out = out.clone()
        out[rows, cols] = out[rows, cols] + delta[owner]
        return out

    hook = None if fast else down.register_forward_hook(add_delta)
    p0 = None
    try:
        for _ in range(steps):
            if fast:
                logits = unembed(norm(cached["h"] + at_last * delta[owner]))
            else:
                logits = model(**enc).logits[:, -1]
            logp = torch.log_softmax(logits, -1)
            nll_rows = -logp[torch.arange(n), targets]
            nll = (nll_rows[:, None] * is_rw[:n]).sum(0) / n_rw
            loss = nll + objective.weight_decay * delta.norm(dim=-1) / v0_norm ** 2
            if es:
                p0 = logp[n:].detach() if p0 is None else p0
                kl = nn.functional.kl_div(p0, logp[n:], log_target=True, reduction="none").sum(-1)
                loss = loss + objective.kl_factor * (kl[:, None] * is_es[n:]).sum(0) / n_es.clamp(min=1)
            for i in torch.nonzero(active).flatten().tolist():
                curves[i].append(float(nll[i].detach()))
            active &= loss.detach() >= objective.stop_loss
            if not active.any():
                break
            opt.zero_grad()
            (loss * active).sum().backward()
            frozen = delta.detach().clone()
            opt.step()
            with torch.no_grad():
                delta[~active] = frozen[~active]
                max_norm = objective.clamp_norm_factor * v0_norm
                scale = torch.clamp(max_norm / delta.norm(dim=-1).clamp(min=1e-12), max=1.0)
                delta *= scale[:, None]
    finally:
        if hook is not None:
            hook.remove()
    return delta.detach(), curves


def optimise_value(model, tok, prompts: Sequence[str], positions: Sequence[int], target: str, layer: int,
                   steps: int, lr: float, essence: tuple[Sequence[str], Sequence[int]] = ((), ()),
                   objective: ValueObjective = ValueObjective()) -> tuple[torch.Tensor, list[float]]:
    """One request of :func:`optimise_values`: δ and its curve of −log p(target) per step."""
    delta, curves = optimise_values(model, tok, [ValueRequest(prompts, positions, target, essence)], layer, steps,
                                    lr, objective)
    return delta[0], curves[0]


def objective_of(cfg) -> ValueObjective:
    return ValueObjective(cfg.kl_factor, cfg.v_weight_decay, cfg.clamp_norm_factor, cfg.stop_loss)
