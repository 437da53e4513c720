"""Batched training: every run of a design in one optimisation, each from its own initialisation on its own batches.

A model this small costs mostly fixed per-operation overhead on a CPU (and Hugging Face's forward adds Python
work per module), so training the runs one after another pays that overhead once per run and step. Here the runs'
tiny Llamas are stacked weight by weight ([runs, ...]) and one plain-PyTorch forward computes all of them with
batched matrix products: the same equations as `LlamaForCausalLM` (RMSNorm, rotary attention, SwiGLU, tied
embeddings), the same loss per run (:func:`state_loss`), AdamW with the same schedule, and gradient clipping per
run, so each trained model is the one :func:`train_tracker` gives, up to float rounding (tested)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..core import train
from .group import _check_n
from .task import parity_of_states, state_sequence
from .training import CONDITIONS, TINY_MODEL, _batches, initial_model, make_tokenizer, token_ids

_STACKED = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
            "norm_attn": "input_layernorm", "norm_mlp": "post_attention_layernorm"}


def stack_trackers(trackers: Sequence) -> dict[str, torch.Tensor]:
    """The parameters of tiny Llamas of one shape, stacked run by run: name -> [runs, ...] (leaf tensors)."""
    sds = [m.state_dict() for m in trackers]
    out = {"embed": torch.stack([sd["model.embed_tokens.weight"] for sd in sds]),
           "norm": torch.stack([sd["model.norm.weight"] for sd in sds])}
    for layer in range(trackers[0].config.num_hidden_layers):
        for short, long in _STACKED.items():
            out[f"{layer}.{short}"] = torch.stack([sd[f"model.layers.{layer}.{long}.weight"] for sd in sds])
    return {k: v.clone().requires_grad_(True) for k, v in out.items()}


def unstack_into(params: dict[str, torch.Tensor], trackers: Sequence) -> None:
    """Write run i's slice of the stacked `params` back into `trackers[i]` (the tied head follows the embedding)."""
    for i, model in enumerate(trackers):
        sd = {"model.embed_tokens.weight": params["embed"][i], "model.norm.weight": params["norm"][i]}
        for layer in range(model.config.num_hidden_layers):
            for short, long in _STACKED.items():
                sd[f"model.layers.{layer}.{long}.weight"] = params[f"{layer}.{short}"][i]
        model.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
        model.eval()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight[:, None, None] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def stacked_logits(params: dict[str, torch.Tensor], input_ids: torch.Tensor, config, rotary,
                   vocab_ids: torch.Tensor, lens_layer: int | None = None, lens_ids: torch.Tensor | None = None):
    """The logits of every run at every position, restricted to the words `vocab_ids`: [runs, batch, S, len(ids)],
    for `input_ids` [runs, batch, S]. `config` is the runs' shared LlamaConfig, `rotary` one run's rotary embedding
    module (it holds no parameters). With `lens_layer`, also the logit lens after that block (final norm and
    output head on the residual stream there) over the words `lens_ids`: (logits, lens logits)."""
    runs, batch, length = input_ids.shape
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    eps = config.rms_norm_eps
    x = params["embed"][torch.arange(runs)[:, None, None], input_ids]  # [R, B, S, d]
    cos, sin = rotary(x[0], torch.arange(length)[None])  # [1, S, head_dim]
    cos, sin = cos[:, None], sin[:, None]  # broadcast over (R·B, heads)
    causal = torch.full((length, length), float("-inf")).triu(1)

    def head(x, ids):
        return torch.einsum("rbsd,rvd->rbsv", _rms_norm(x, params["norm"], eps), params["embed"][:, ids])

    lens = head(x, lens_ids) if lens_layer == 0 else None
    for layer in range(config.num_hidden_layers):
        p = {k: params[f"{layer}.{k}"] for k in _STACKED}
        h = _rms_norm(x, p["norm_attn"], eps).reshape(runs, batch * length, -1)
        qkv = torch.bmm(h, torch.cat([p["q"], p["k"], p["v"]], 1).transpose(1, 2))
        q, k, v = qkv.view(runs * batch, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(-1, -2)) * head_dim ** -0.5 + causal  # tiny S: plain matmuls beat SDPA
        att = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(runs, batch * length, -1)
        x = x + torch.bmm(att, p["o"].transpose(1, 2)).view(runs, batch, length, -1)
        h = _rms_norm(x, p["norm_mlp"], eps).reshape(runs, batch * length, -1)
        gate, up = torch.bmm(h, torch.cat([p["gate"], p["up"]], 1).transpose(1, 2)).chunk(2, -1)
        x = x + torch.bmm(F.silu(gate) * up, p["down"].transpose(1, 2)).view(runs, batch, length, -1)
        if lens_layer == layer + 1:
            lens = head(x, lens_ids)
    logits = head(x, vocab_ids)
    return logits if lens_layer is None else (logits, lens)


def train_trackers(cfg, runs: Sequence[tuple[int, str]]) -> list[tuple[object, object, dict]]:
    """Train the tiny Llamas of `runs` ((seed, condition) pairs) in one batched optimisation: run (s, c) from the
    initialisation and on the batches :func:`train_tracker` would give it (the stories of seed s, the loss of
    condition c), with AdamW, the shared schedule (:func:`icml25.core.train.lr_at`) and gradient clipping per run.
    Returns what :func:`train_tracker` returns, run by run."""
    for _, condition in runs:
        if condition not in CONDITIONS:
            raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    if cfg.model != TINY_MODEL:
        raise ValueError(f"batched training needs the in-place tiny Llama (model={TINY_MODEL!r}), got {cfg.model!r}")
    n = _check_n(cfg.group_n)
    tok = make_tokenizer(n)
    trackers = [initial_model(cfg, seed, tok) for seed, _ in runs]
    params = stack_trackers(trackers)
    perm_ids, par_ids = token_ids(tok, n)
    weights = torch.tensor([cfg.parity_weight if c == "parity_aux" else 0.0 for _, c in runs])
    seeds = list(dict.fromkeys(seed for seed, _ in runs))
    streams = {seed: _batches(cfg, seed) for seed in seeds}
    which = torch.tensor([seeds.index(seed) for seed, _ in runs])
    leaves = list(params.values())
    opt = torch.optim.AdamW(leaves, lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95), foreach=True)
    warmup = max(1, cfg.steps // 20)  # train.train's default
    config, rotary = trackers[0].config, trackers[0].model.rotary_emb
    losses = []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = train.lr_at(step, cfg.steps, cfg.lr, warmup)
        actions = torch.stack([next(streams[seed]) for seed in seeds])[which]  # [R, B, T]
        states = torch.stack([state_sequence(a, n) for a in actions])
        ids = torch.cat([torch.full((*actions.shape[:2], 1), tok.bos_token_id), perm_ids[actions]], dim=2)
        logits, lens = stacked_logits(params, ids, config, rotary, perm_ids, cfg.parity_layer, par_ids)
        r, b, t = states.shape
        state_ce = F.cross_entropy(logits[:, :, 1:].reshape(-1, len(perm_ids)), states.flatten(),
                                   reduction="none").view(r, -1).mean(1)
        parity_ce = F.cross_entropy(lens[:, :, 1:].reshape(-1, 2), parity_of_states(states, n).flatten(),
                                    reduction="none").view(r, -1).mean(1)
        loss = state_ce + weights * parity_ce  # each run's own loss; their sum has each run's gradient
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        # clip each run's gradient to norm 1 over all its parameters (clip_grad_norm_ per model)
        norms = torch.stack([g.grad.flatten(1).pow(2).sum(1) for g in leaves]).sum(0).sqrt()
        coef = (1.0 / (norms + 1e-6)).clamp(max=1.0)
        for g in leaves:
            g.grad.mul_(coef.view(-1, *[1] * (g.dim() - 1)))
        opt.step()
        losses.append(loss.detach())
    losses = torch.stack(losses).T.tolist() if losses else [[] for _ in runs]
    unstack_into(params, trackers)
    return [(model, tok, {"condition": c, "parity_weight": float(w), "losses": curve, "trained_with": len(runs)})
            for model, (_, c), w, curve in zip(trackers, runs, weights, losses)]
