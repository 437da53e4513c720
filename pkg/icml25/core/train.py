"""The training loop every chapter shares: AdamW, linear warmup then cosine decay, gradient clipping,
a `tqdm.auto` progress bar when interactive (one line per model in a log), periodic evaluation, and explicit seeding through the batches it is given."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from .generation import pad_completions, token_logprobs
from .seeding import torch_generator


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)  # one per step
    evals: list[tuple[int, float]] = field(default_factory=list)  # (step, eval_fn value)


def lm_batches(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], completions: Sequence[str],
               batch_size: int, seed: int, add_eos: bool = True) -> Iterator[dict[str, torch.Tensor]]:
    """An endless stream of batches sampled (with replacement) from prompt/completion pairs, from `seed`. Each pair
    is tokenized once, when first drawn (a training run draws most pairs many times)."""
    g = torch_generator(seed, "lm_batches")
    tokenized: dict[int, tuple[list[int], list[int]]] = {}
    while True:
        idx = torch.randint(len(prompts), (batch_size,), generator=g).tolist()
        new = sorted(set(idx) - tokenized.keys())
        if new:
            encode = lambda texts: tokenizer(texts, add_special_tokens=False)["input_ids"]  # noqa: E731
            tokenized.update(zip(new, zip(encode([prompts[i] for i in new]), encode([completions[i] for i in new]))))
        yield pad_completions(tokenizer, [tokenized[i] for i in idx], add_eos)


def lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean negative log-likelihood of the completion tokens (the prompt is context only)."""
    logp = token_logprobs(model, batch)
    return -logp.sum() / batch["completion_mask"][:, 1:].sum().clamp(min=1)


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warmup over `warmup` steps, then cosine decay to 10% of `lr` at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _interactive() -> bool:
    """A terminal or a running notebook kernel: somewhere a redrawn progress bar is read, not logged."""
    if sys.stderr.isatty():
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def train(model: torch.nn.Module, batches: Iterator[dict], steps: int, lr: float = 3e-3, warmup: int | None = None,
          weight_decay: float = 0.01, clip: float = 1.0,
          loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor] = lm_loss,
          eval_fn: Callable[[torch.nn.Module], float] | None = None, eval_every: int = 0,
          desc: str = "train", params: Sequence[torch.nn.Parameter] | None = None) -> TrainResult:
    """Optimise `loss_fn` over `steps` batches; returns the per-step loss curve and periodic evaluations.

    `params` restricts the optimiser to some parameters (adapters, a reward head); by default all of them.
    """
    params = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95), foreach=True)
    warmup = max(1, steps // 20) if warmup is None else warmup
    result = TrainResult()
    model.train()
    interactive = _interactive()
    bar = tqdm(range(steps), desc=desc, leave=False, disable=not interactive or bool(os.environ.get("TQDM_DISABLE")) or None)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        loss = loss_fn(model, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        opt.step()
        result.losses.append(float(loss.detach()))
        if eval_fn is not None and eval_every and ((step + 1) % eval_every == 0 or step + 1 == steps):
            model.eval()
            result.evals.append((step + 1, float(eval_fn(model))))
            model.train()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{result.losses[-1]:.3f}")
    model.eval()
    if not interactive and not os.environ.get("TQDM_DISABLE"):  # a log gets one line per model, not a bar
        print(f"{desc}: {steps} steps, final loss {result.losses[-1]:.4f}" if steps else f"{desc}: 0 steps",
              file=sys.stderr, flush=True)
    return result
