"""Token-level speculative decoding under greedy decoding: the plain reference and its exact batch cost."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core import arithmetic
from .decoding import Meter
from .scales import MAX_NEW_TOKENS


@torch.inference_mode()
def speculative_decode(draft: PreTrainedModel, target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                       prompt: str, gamma: int, max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """Classic speculative decoding under greedy decoding, one prompt (the plain reference): the draft proposes
    γ tokens, the target scores them in one pass, the longest prefix agreeing with the target's argmax is kept
    and the target adds its own next token. The output equals target-only greedy decoding token for token."""
    if gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma}")
    eos = tokenizer.eos_token_id
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out: list[int] = []
    rounds, accepted = 0, 0
    while len(out) < max_new_tokens and (not out or out[-1] != eos):
        ctx = torch.tensor([ids + out], device=target.device)
        prop: list[int] = []
        for _ in range(min(gamma, max_new_tokens - len(out))):  # never propose past the token budget
            nxt = int(draft(input_ids=torch.tensor([ids + out + prop], device=draft.device)).logits[0, -1].argmax())
            prop.append(nxt)
            if nxt == eos:
                break
        proposed = torch.tensor([prop], device=ctx.device)
        logits = target(input_ids=torch.cat([ctx, proposed], 1)).logits[0, ctx.shape[1] - 1:]
        greedy = logits.argmax(-1).tolist()  # the target's choice after each proposed prefix
        a = 0
        while a < len(prop) and prop[a] == greedy[a]:
            a += 1
            if prop[a - 1] == eos:
                break
        out += prop[:a]
        if out[-1:] != [eos] and len(out) < max_new_tokens:
            out.append(greedy[a])  # the target's own token: a correction, or a bonus after γ accepted
        rounds += 1
        accepted += a
    return {"token_ids": out, "text": tokenizer.decode(out, skip_special_tokens=True), "rounds": rounds,
            "accepted": accepted}


@torch.inference_mode()
def speculative_cost(draft: PreTrainedModel, target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     problems: Sequence[arithmetic.Problem], target_ids: Sequence[Sequence[int]], gamma: int,
                     max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """The rounds and FLOPs of :func:`speculative_decode` for a whole batch, computed exactly without running it:
    under greedy decoding the output is the target's (`target_ids`), and a round accepts the run of positions
    where the draft's greedy choice on the target's own prefix equals the target's token (one teacher-forced
    draft pass gives them all). Each round costs γ draft tokens (fewer where the token budget `max_new_tokens`
    ends first) and a target pass over the proposals."""
    meters = {"draft": Meter.of(draft, len(problems)), "target": Meter.of(target, len(problems))}
    rounds = accepted = 0
    for i, (p, y) in enumerate(zip(problems, target_ids)):
        x = tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
        seq = torch.tensor([x + list(y)], device=draft.device)
        guess = draft(input_ids=seq).logits[0, len(x) - 1:-1].argmax(-1).tolist()  # draft's pick for each y_j
        pos = 0
        while pos < len(y):
            g = min(gamma, max_new_tokens - pos)
            a = 0
            while a < g and pos + a < len(y) and guess[pos + a] == y[pos + a]:
                a += 1
                if y[pos + a - 1] == tokenizer.eos_token_id:
                    break
            meters["draft"].call(i, len(x) + pos, g, keep=False)
            meters["draft"].cached[i] = len(x) + pos + a
            meters["target"].call(i, len(x) + pos, g, keep=False)
            meters["target"].cached[i] = len(x) + pos + a
            pos += a + (1 if pos + a < len(y) else 0)
            rounds += 1
            accepted += a
    return {"rounds": rounds, "accepted": accepted, "flops": {k: m.flops for k, m in meters.items()},
            "total_flops": sum(m.flops for m in meters.values())}
