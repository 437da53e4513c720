"""Batched decoding with the KV cache, step-wise decoding, and prompt-masked sequence log-probabilities.

Prompts are left-padded so every row's next token sits in the last column; position ids follow the attention
mask, so a padded row computes exactly what it would compute alone. Every tensor, the KV cache included, lives on
the model's device.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: a batch is never compacted below this many rows: CPU matrix products switch to other kernels for a handful of
#: rows, whose rounding differs, and a row's tokens must not depend on when the other rows finished
MIN_ROWS = 8


@dataclass
class Generation:
    """Completions of a batch: token ids per row (the token that completed a stop string included), their text
    (cut just after the first stop string), and whether each row stopped on a stop string or the
    end-of-sequence token (rather than on `max_new_tokens`)."""

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


_TOKEN_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def token_texts(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Each token id's own text (special tokens as ""), computed once per tokenizer."""
    if tokenizer not in _TOKEN_TEXTS:
        _TOKEN_TEXTS[tokenizer] = tokenizer.batch_decode([[i] for i in range(len(tokenizer))],
                                                         skip_special_tokens=True)
    return _TOKEN_TEXTS[tokenizer]


@dataclass(frozen=True)
class StopStrings:
    """When a row's completion is done: on the end-of-sequence token or once its text contains a stop string.

    A token whose own text contains a stop string ends the row at once (`ids`); a stop string of more than one
    byte can also be spelt by several tokens, so for those the text of the last few tokens is checked (`spanning`,
    `window`: a string of n bytes that a new token completes lies within the last n tokens)."""

    strings: tuple[str, ...]
    ids: frozenset[int]
    spanning: tuple[str, ...]
    window: int

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str]) -> StopStrings:
        stop = tuple(dict.fromkeys(stop))
        if any(not s for s in stop):
            raise ValueError(f"stop strings must be non-empty, got {list(stop)}")
        texts = token_texts(tokenizer) if stop else []
        ids = {i for i, t in enumerate(texts) if any(s in t for s in stop)}
        if tokenizer.eos_token_id is not None:
            ids.add(tokenizer.eos_token_id)
        spanning = tuple(s for s in stop if len(s.encode()) > 1)
        return cls(stop, frozenset(ids), spanning, max((len(s.encode()) for s in spanning), default=0))

    def hit(self, tokenizer: PreTrainedTokenizerBase, row: list[int]) -> bool:
        """Whether the row's newest token ends it."""
        if row[-1] in self.ids:
            return True
        if not self.spanning:
            return False
        tail = tokenizer.decode(row[-self.window:], skip_special_tokens=True)
        return any(s in tail for s in self.spanning)

    def cut(self, text: str) -> str:
        """`text` up to and including its first stop string (all of it when it has none)."""
        ends = [text.find(s) + len(s) for s in self.strings if s in text]
        return text[:min(ends)] if ends else text


@torch.inference_mode()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
             max_new_tokens: int, stop: Sequence[str] = (), temperature: float = 0.0,
             generator: torch.Generator | None = None, use_cache: bool = True) -> Generation:
    """Decode a continuation of every prompt, greedily (`temperature=0`) or by sampling with `generator`.

    A row stops after emitting the end-of-sequence token or once its completion contains any string in `stop`
    (step-wise decoding passes the step delimiter here; a stop string may take several tokens). Finished rows
    leave the batch (and the KV cache) once at most half its rows are still decoding (see :data:`MIN_ROWS`);
    sampling still draws one token per prompt per step, so a row's sample does not depend on when the others
    finished. With `use_cache=False` every step re-reads the whole sequence, which is the plain reference the
    cached path must match token for token.
    """
    if temperature > 0 and generator is None:
        raise ValueError("sampling (temperature > 0) needs an explicit torch.Generator")
    stops = StopStrings.of(tokenizer, stop)
    device = model.device
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    ids, mask = (t.to(device) for t in left_pad(rows, tokenizer.pad_token_id))
    n_rows = len(rows)
    out: list[list[int]] = [[] for _ in range(n_rows)]
    stopped = [False] * n_rows
    live = list(range(n_rows))  # the prompt of each batch row
    cache, step_ids = None, ids
    for _ in range(max_new_tokens):
        if use_cache:
            res = model(input_ids=step_ids, attention_mask=mask, position_ids=_positions(mask)[:, -step_ids.shape[1]:],
                        cache=cache, use_cache=True)
            cache = res.cache
        else:
            res = model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), use_cache=False)
        logits = res.logits[:, -1]
        if temperature > 0 and len(live) < n_rows:  # one draw per prompt, finished or not (uniform for those)
            full = torch.zeros((n_rows, logits.shape[-1]), dtype=logits.dtype, device=device)
            full[torch.as_tensor(live, device=device)] = logits
            nxt = _next_token(full, temperature, generator)[torch.as_tensor(live, device=device)]
        else:
            nxt = _next_token(logits, temperature, generator)
        for i, tok in zip(live, nxt.tolist()):  # a finished row's next token is computed and ignored
            if not stopped[i]:
                out[i].append(tok)
                stopped[i] = stops.hit(tokenizer, out[i])
        ids = torch.cat([ids, nxt[:, None]], 1)
        mask = torch.cat([mask, torch.ones(len(live), 1, dtype=torch.long, device=device)], 1)
        step_ids = nxt[:, None]
        going = [k for k, i in enumerate(live) if not stopped[i]]
        if not going:
            break
        if len(going) <= len(live) // 2 and len(live) > MIN_ROWS:
            keep = sorted(going + [k for k, i in enumerate(live) if stopped[i]][:max(0, MIN_ROWS - len(going))])
            index = torch.as_tensor(keep, device=device)
            ids, mask, step_ids = ids[index], mask[index], step_ids[index]
            if use_cache:
                cache.batch_select_indices(index)
            live = [live[k] for k in keep]
    texts = [stops.cut(tokenizer.decode(o, skip_special_tokens=True)) for o in out]
    return Generation(out, texts, stopped)


def encode_completions(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], completions: Sequence[str],
                       add_eos: bool = False) -> dict[str, torch.Tensor]:
    """Prompt+completion rows, right-padded: `input_ids`, `attention_mask`, and `completion_mask` marking the
    completion tokens (the ones whose log-probability counts). `add_eos` appends the end-of-sequence token."""
    p_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    c_ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
    return pad_completions(tokenizer, list(zip(p_ids, c_ids, strict=True)), add_eos)


def pad_completions(tokenizer: PreTrainedTokenizerBase, rows: Sequence[tuple[list[int], list[int]]],
                    add_eos: bool = False) -> dict[str, torch.Tensor]:
    """:func:`encode_completions` of rows already tokenized as (prompt ids, completion ids)."""
    eos = [tokenizer.eos_token_id] if add_eos else []
    ids = [p + c + eos for p, c in rows]
    length = np.array([len(r) for r in ids])
    start = np.array([len(p) for p, _ in rows])  # where each completion begins
    input_ids = np.full((len(ids), int(length.max())), tokenizer.pad_token_id, dtype=np.int64)
    for i, r in enumerate(ids):
        input_ids[i, :len(r)] = r
    position = np.arange(input_ids.shape[1])[None, :]
    attention_mask = (position < length[:, None]).astype(np.int64)
    completion_mask = attention_mask * (position >= start[:, None])
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask),
            "completion_mask": torch.from_numpy(completion_mask)}


def select_rows(encoded: dict[str, torch.Tensor], idx) -> dict[str, torch.Tensor]:
    """Rows `idx` of a batch from :func:`encode_completions`, cut to the longest of them: the batch
    `encode_completions` gives for those rows alone, so data tokenized once can be drawn into many batches."""
    idx = torch.as_tensor(idx)
    width = int(encoded["attention_mask"][idx].sum(1).max())
    return {k: v[idx, :width] for k, v in encoded.items()}


def token_logprobs(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """log p(token_t | tokens_<t) for every position t ≥ 1 of `batch` (from :func:`encode_completions`),
    zeroed outside the completion: a [B, T-1] tensor aligned with `input_ids[:, 1:]`. Differentiable."""
    ids, mask, completion = (batch[k].to(model.device) for k in ("input_ids", "attention_mask", "completion_mask"))
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logp * completion[:, 1:]


def sequence_logprobs(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                      completions: Sequence[str], add_eos: bool = False) -> torch.Tensor:
    """Σ_t log p(y_t | x, y_<t) over each completion's tokens, the prompt masked: a [B] tensor."""
    return token_logprobs(model, encode_completions(tokenizer, prompts, completions, add_eos)).sum(-1)
