"""Every particle scored in one batched pass: the frozen model runs once per problem set (`features`), the N
adapters act on the cached residual stream (`top_logits`), and exact-solution and correct-step accuracy follow
from the teacher-forced argmax (`scores`); an expert is trained on the same cached features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core import arithmetic
from ..core.generation import encode_completions
from ..core.seeding import torch_generator
from .lora import final_norm, initial_adapter, mlp_site, unflatten
from .scales import CHAPTER


@dataclass
class Features:
    """A problem set seen by the frozen part of the model: at every position that predicts a solution token,
    the residual stream entering the last layer's MLP (`h`), the token to predict, which problem and which
    step it belongs to."""

    h: torch.Tensor  # [P, d]
    target: torch.Tensor  # [P]
    row: torch.Tensor  # [P] problem index
    step: torch.Tensor  # [P] global step index (problem-major)
    n_rows: int
    n_steps: int


@torch.inference_mode()
def features(model, tokenizer, problems: Sequence[arithmetic.Problem], batch_size: int = 500) -> Features:
    """Run the frozen model once over prompt+solution+EOS and keep the residual stream entering the last block's
    MLP (the input of the norm in front of it), on the model's device."""
    site = mlp_site(model)
    hs, targets, rows, steps, step_offset = [], [], [], [], 0
    captured = {}
    hook = site.norm.register_forward_pre_hook(lambda mod, args: captured.update(h=args[0]))
    try:
        for start in range(0, len(problems), batch_size):
            chunk = problems[start:start + batch_size]
            batch = encode_completions(tokenizer, [p.prompt for p in chunk], [p.solution for p in chunk], True)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            sel = batch["completion_mask"][:, 1:].bool()  # position t predicts token t+1
            hs.append(captured["h"][:, :-1][sel])
            targets.append(batch["input_ids"][:, 1:][sel])
            rows.append((torch.arange(len(chunk), device=sel.device)[:, None] + start).expand_as(sel)[sel])
            # step index: each `;` closes a step; the answer and EOS belong to the last step
            step_ids = []
            for p in chunk:
                s = 0
                for ch in p.solution:
                    step_ids.append(step_offset + s)
                    s += ch == arithmetic.STEP_DELIMITER
                step_ids.append(step_offset + s)  # EOS
                step_offset += s + 1
            steps.append(torch.tensor(step_ids, device=sel.device))
    finally:
        hook.remove()
    return Features(torch.cat(hs), torch.cat(targets), torch.cat(rows), torch.cat(steps), len(problems), step_offset)


def top_logits(model, feats: Features, lora: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Logits [N, P, V] of N adapted models at every cached position: the last block's MLP with W + B_n A_n in
    place of its output projection W (LoRA, scale 1), then the final norm and the head. Only the output projection
    is adapted, so the MLP's hidden activations (its input) are the same for every model: one pass of the MLP,
    the N low-rank terms added to its output."""
    site = mlp_site(model)
    captured = {}
    hook = getattr(site.mlp, site.projection).register_forward_pre_hook(lambda m, a: captured.update(x=a[0]))
    try:
        out = site.mlp(site.norm(feats.h))  # [P, d]
    finally:
        hook.remove()
    if site.projection in lora:
        a, b = lora[site.projection]
        out = out + (captured["x"] @ a.transpose(1, 2)) @ b.transpose(1, 2)  # [N, P, d]
    if site.post is not None:
        out = site.post(out)
    logits = model.get_output_embeddings()(final_norm(model)(feats.h + out))
    cap = getattr(model.config, "final_logit_softcapping", None)
    return logits if cap is None else cap * torch.tanh(logits / cap)


def scores(model, feats: Features, lora: dict) -> dict[str, torch.Tensor]:
    """Per adapted model ([N]): `exact` — share of problems whose greedy solution is exactly the reference
    (greedy decoding reproduces it iff every argmax under teacher forcing is the reference token);
    `steps` — share of steps written correctly given the correct prefix (an oracle process reward)."""
    with torch.no_grad():
        ok = (top_logits(model, feats, lora).argmax(-1) == feats.target).float()  # [N, P]
    n = ok.shape[0]
    per_row = torch.ones(n, feats.n_rows, device=ok.device).scatter_reduce(1, feats.row.expand(n, -1), ok, "amin")
    per_step = torch.ones(n, feats.n_steps, device=ok.device).scatter_reduce(1, feats.step.expand(n, -1), ok, "amin")
    return {"exact": per_row.mean(1).cpu(), "steps": per_step.mean(1).cpu()}


def train_expert(model, feats: Features, rank: int, steps: int, seed: int, lr: float = 1e-2,
                 batch: int = 1024) -> np.ndarray:
    """One LoRA expert: from `initial_adapter` (shared A₀, B = 0), Adam on the cross-entropy of the solution
    tokens of `feats`, minibatches drawn under `seed`. Returns its flat parameter vector."""
    g = torch_generator(seed, CHAPTER, "expert")
    flat = torch.as_tensor(initial_adapter(model, rank), dtype=torch.float32)[None].requires_grad_(True)
    opt = torch.optim.Adam([flat], lr=lr)
    for _ in range(steps):
        idx = torch.randint(len(feats.target), (batch,), generator=g).to(feats.h.device)
        sub = Features(feats.h[idx], feats.target[idx], feats.row[idx], feats.step[idx], feats.n_rows, feats.n_steps)
        logits = top_logits(model, sub, unflatten(model, flat, rank))[0]
        loss = torch.nn.functional.cross_entropy(logits, sub.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return flat.detach()[0].double().numpy()
