"""Training objectives on outcome labels: cross-entropy (Eq. 5, with the implicit reward itself in
:mod:`icml25.core.implicit_reward`), DPO, NCA and KTO, all on the implicit reward."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from ..core.implicit_reward import ce_loss, implicit_reward


def dpo_loss(policy: PreTrainedModel, reference: PreTrainedModel, batch: dict, beta: float) -> torch.Tensor:
    """DPO on (correct, incorrect) pairs: −log σ(r_θ(y_w) − r_θ(y_l)). Rows [0, B/2) are the chosen responses,
    rows [B/2, B) the rejected ones, in matching order."""
    reward = implicit_reward(policy, reference, batch, beta)
    half = reward.shape[0] // 2
    return -F.logsigmoid(reward[:half] - reward[half:]).mean()


def nca_loss(policy: PreTrainedModel, reference: PreTrainedModel, batch: dict, beta: float) -> torch.Tensor:
    """NCA (Chen et al., 2024) on (correct, incorrect) pairs, rows as in :func:`dpo_loss`:
    −log σ(r_θ(y_w)) − ½·log σ(−r_θ(y_w)) − ½·log σ(−r_θ(y_l)). Unlike DPO it pins the rewards' absolute level
    (the chosen reward is pushed up, both are pulled towards zero), not only their difference."""
    reward = implicit_reward(policy, reference, batch, beta)
    half = reward.shape[0] // 2
    w, lo = reward[:half], reward[half:]
    return (-F.logsigmoid(w) - 0.5 * F.logsigmoid(-w) - 0.5 * F.logsigmoid(-lo)).mean()


def kto_loss(policy: PreTrainedModel, reference: PreTrainedModel, batch: dict, beta: float) -> torch.Tensor:
    """KTO on unpaired outcome labels, as the official trainer (OpenRLHF's KTOLoss) computes it:
    1 − σ(r_θ(y) − z) for desirable (right) responses and 1 − σ(z − r_θ(y)) for undesirable ones, where the
    reference point z = β·max(0, mean KL estimate) comes from mismatched (prompt, other row's completion) pairs in
    `batch["kl"]` and carries no gradient. Desirable and undesirable weights are 1."""
    reward = implicit_reward(policy, reference, batch, beta)
    with torch.no_grad():
        z = implicit_reward(policy, reference, batch["kl"], beta).mean().clamp(min=0)
    label = batch["labels"].bool()
    return torch.where(label, 1 - torch.sigmoid(reward - z), 1 - torch.sigmoid(z - reward)).mean()


OBJECTIVES = {"ce": ce_loss, "dpo": dpo_loss, "kto": kto_loss, "nca": nca_loss}
PAIRED = ("dpo", "nca")  # the objectives that need a (right, wrong) pair of responses to the same prompt
