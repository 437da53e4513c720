"""Continual fine-tuning of every weight on each window's edits, and LoRA (PEFT) fine-tuning merged into the running
model by Eq. (2):

    (2)  W_merged = (1 − α) W_prev + α W_ft
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from ..core.adapters import lora_model
from ..core.seeding import seeded
from ..core.train import train
from ..knowledge_editing_world import TRAIN_TEMPLATES, Edit, _last_token_loss, question


def merge(prev: dict[str, torch.Tensor], finetuned: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """Eq. (2), per tensor."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"merge alpha {alpha} must lie in [0, 1]")
    return {k: (1 - alpha) * prev[k] + alpha * finetuned[k] for k in prev}


def edit_batches(tok, edits: Sequence[Edit]):
    """Every edit under every training template, as one batch, forever."""
    enc = tok([question(e.subject, e.relation, t) for e in edits for t in TRAIN_TEMPLATES], return_tensors="pt",
              padding=True)
    y = torch.tensor(tok.convert_tokens_to_ids([e.new for e in edits for _ in TRAIN_TEMPLATES]))
    while True:
        yield {"enc": enc, "y": y}


def finetune_window(model, tok, edits: Sequence[Edit], steps: int, lr: float) -> None:
    """Continual fine-tuning: every weight trained on this window's edits only (no replay), in place."""
    model.requires_grad_(True)
    train(model, edit_batches(tok, edits), steps, lr=lr, loss_fn=_last_token_loss, desc="finetune", warmup=1)
    model.requires_grad_(False)


def lora_merge_window(model, tok, edits: Sequence[Edit], rank: int, steps: int, lr: float, alpha: float,
                      seed: int) -> None:
    """The paper's LoRA-merge baseline: a PEFT LoRA adapter (rank `rank`, on every attention and MLP
    projection) trained on this window's edits, folded into a copy of the weights (W_ft), then merged into
    the running model by Eq. (2), in place."""
    prev = {k: v.clone() for k, v in model.state_dict().items()}
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    with seeded(seed, "lora-init"):
        peft_model = lora_model(copy.deepcopy(model), targets, rank, 2 * rank)
    train(peft_model, edit_batches(tok, edits), steps, lr=lr, loss_fn=_last_token_loss, desc="lora", warmup=1)
    model.load_state_dict(merge(prev, peft_model.merge_and_unload().state_dict(), alpha))
