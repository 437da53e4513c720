"""Batched decoding with the KV cache, step-wise decoding, and prompt-masked sequence log-probabilities.

Prompts are left-padded so every row's next token sits in the last column; position ids follow the attention
mask, so a padded row computes exactly what it would compute alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Generation:
    """Completions of a batch: token ids per row (stop token included when it was hit), their text, and
    whether each row stopped on a stop token (rather than on `max_new_tokens`)."""

    token_ids: list[list[int]]
    texts: list[str]
    stopped: list[bool]

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id rows as a left-padded [B, T] tensor and its attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, width - len(r):] = torch.as_tensor(list(r), dtype=torch.long)
            mask[i, width - len(r):] = 1
    return ids, mask


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(-1) - 1).clamp(min=0)


def _next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.inference_mode()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             max_new_tokens: int, stop: Sequence[str] = (), temperature: float = 0.0,
             generator: torch.Generator | None = None, use_cache: bool = True) -> Generation:
    """Decode a continuation of every prompt, greedily (`temperature=0`) or by sampling with `generator`.

    A row stops after emitting the end-of-sequence token or any token whose text is in `stop` (step-wise
    decoding passes the step delimiter here). With `use_cache=False` every step re-reads the whole sequence,
    which is the plain reference the cached path must match token for token.
    """
    if temperature > 0 and generator is None:
        raise ValueError("sampling (temperature > 0) needs an explicit torch.Generator")
    stop_ids = {tokenizer.eos_token_id} | {tokenizer.convert_tokens_to_ids(s) for s in stop}
    if tokenizer.unk_token_id in stop_ids - {tokenizer.eos_token_id}:
        raise ValueError(f"stop strings {list(stop)} must each be one token of the vocabulary")
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    ids, mask = left_pad(rows, tokenizer.pad_token_id)
    batch = len(rows)
    out = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool)
    stopped = [False] * batch
    cache, step_ids = None, ids
    for _ in range(max_new_tokens):
        if use_cache:
            res = model(input_ids=step_ids, attention_mask=mask, position_ids=_positions(mask)[:, -step_ids.shape[1]:],
                        cache=cache, use_cache=True)
            cache = res.cache
        else:
            res = model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False)
        nxt = _next_token(res.logits[:, -1], temperature, generator)
        nxt = torch.where(done, torch.full_like(nxt, tokenizer.pad_token_id), nxt)
        for i in torch.nonzero(~done).flatten().tolist():
            tok = int(nxt[i])
            out[i].append(tok)
            if tok in stop_ids:
                done[i] = True
                stopped[i] = True
        ids = torch.cat([ids, nxt[:, None]], 1)
        mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], 1)
        step_ids = nxt[:, None]
        if bool(done.all()):
            break
    texts = [tokenizer.decode(o, skip_special_tokens=True) for o in out]
    return Generation(out, texts, stopped)


def encode_completions(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], completions: Sequence[str],
                       add_eos: bool = False) -> dict[str, torch.Tensor]:
    """Prompt+completion rows, right-padded: `input_ids`, `attention_mask`, and `completion_mask` marking the
    completion tokens (the ones whose log-probability counts). `add_eos` appends the end-of-sequence token."""
    rows, masks = [], []
    for p, c in zip(prompts, completions, strict=True):
        p_ids = tokenizer(p, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(c, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if add_eos else [])
        rows.append(p_ids + c_ids)
        masks.append([0] * len(p_ids) + [1] * len(c_ids))
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    completion_mask = torch.zeros_like(input_ids)
    for i, (r, m) in enumerate(zip(rows, masks)):
        input_ids[i, :len(r)] = torch.tensor(r)
        attention_mask[i, :len(r)] = 1
        completion_mask[i, :len(r)] = torch.tensor(m)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask}


def token_logprobs(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """log p(token_t | tokens_<t) for every position t ≥ 1 of `batch` (from :func:`encode_completions`),
    zeroed outside the completion: a [B, T-1] tensor aligned with `input_ids[:, 1:]`. Differentiable."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["input_ids"][:, 1:]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)
    return logp * batch["completion_mask"][:, 1:]


def sequence_logprobs(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                      completions: Sequence[str], add_eos: bool = False) -> torch.Tensor:
    """Σ_t log p(y_t | x, y_<t) over each completion's tokens, the prompt masked: a [B] tensor."""
    return token_logprobs(model, encode_completions(tokenizer, prompts, completions, add_eos)).sum(-1)
