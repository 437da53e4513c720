"""LoRA adapters through the PEFT library, for the chapters that fine-tune a model with them (lora_init,
knowledge_editing)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn


def lora_model(model: nn.Module, targets: Sequence[str], rank: int, alpha: float,
               task_type: str | None = None) -> PeftModel:
    """h = W x + (α/r) B A x on every `nn.Linear` of `model` named in `targets`, by PEFT (`LoraConfig` +
    `get_peft_model`): the model is frozen and wrapped in place, and each target becomes a PEFT `LoraLayer` with
    factors `lora_A["default"]`, `lora_B["default"]` and `scaling["default"]` = α/r. PEFT rejects a rank ≤ 0 and
    a target that names no module with a `ValueError`. PEFT draws its initial A from torch's global RNG: call
    under `seeding.seeded` (or re-initialise) for a reproducible start."""
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0,
                        task_type=task_type)
    with warnings.catch_warnings():  # PEFT 0.21 reads a transformers-5 attribute that now warns it is renamed
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return get_peft_model(model, config)
