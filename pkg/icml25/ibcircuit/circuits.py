"""Circuits under mean ablation: the heads' batch statistics, the faithfulness of head subsets (KL from the full model,
recovered metric), the exhaustive ground truth over all $2^{12}$ subsets, and the measures of a head ranking."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .head_models import TinyTransformer
from .tasks import Prompts, metric


def head_stats(model: TinyTransformer, prompts: Prompts) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the mean and standard deviation over the prompts of each head's clean output, [T, H, d_head]."""
    if len(prompts) < 2:
        raise ValueError(f"batch statistics need at least 2 prompts, got {len(prompts)}")
    stats = []

    def record(layer, h):
        stats.append((h.mean(0), h.std(0)))
        return h

    with torch.no_grad():
        model(prompts.ids, record)
    return stats


def _check_heads(model: TinyTransformer, heads: Sequence[int]) -> None:
    bad = [h for h in heads if not 0 <= h < model.n_total_heads]
    if bad:
        raise ValueError(f"head index {bad} out of range; valid heads are 0..{model.n_total_heads - 1} "
                         f"(layer * {model.n_heads} + head)")


def masks_from_subsets(model: TinyTransformer, subsets: Sequence[Sequence[int]]) -> torch.Tensor:
    """[K, n_heads_total] float masks, 1 for the heads kept in each subset."""
    out = torch.zeros(len(subsets), model.n_total_heads)
    for i, s in enumerate(subsets):
        _check_heads(model, s)
        out[i, list(s)] = 1.0
    return out


def ablated_logits(model: TinyTransformer, prompts: Prompts, masks: torch.Tensor, stats,
                   chunk: int = 64) -> torch.Tensor:
    """Logits [K, P, vocab] with, for each of the K masks, the masked-out heads replaced by their mean output
    (mean ablation). Runs K x P forwards in chunks of `chunk` masks."""
    if len(prompts) == 0:
        raise ValueError("empty prompt set")
    P, H = len(prompts), model.n_heads
    out = []
    for block in masks.split(chunk):
        K = block.shape[0]

        def ablate(layer, h):
            m = block[:, layer * H:(layer + 1) * H].reshape(K, 1, 1, H, 1)
            h = h.view(K, P, *h.shape[1:])
            return (m * h + (1 - m) * stats[layer][0]).reshape(K * P, *h.shape[2:])

        with torch.no_grad():
            out.append(model(prompts.ids.repeat(K, 1), ablate).view(K, P, -1))
    return torch.cat(out)


def kl_from_full(full_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p_full || p) at the answer position, averaged over prompts; broadcasts over leading dims of `logits`."""
    lp_full = full_logits.log_softmax(-1)
    return (lp_full.exp() * (lp_full - logits.log_softmax(-1))).sum(-1).mean(-1)


@dataclass
class SubsetScores:
    """Faithfulness of head subsets: KL from the full model and recovered fraction of the metric."""

    masks: torch.Tensor  # [K, n_heads_total]
    kl: np.ndarray  # [K]
    recovery: np.ndarray  # [K]: (metric - metric_all_ablated) / (metric_full - metric_all_ablated)


def score_subsets(model, prompts: Prompts, masks: torch.Tensor, stats) -> SubsetScores:
    return _scores(model, prompts, masks, ablated_logits(model, prompts, masks, stats), stats)


def _scores(model, prompts: Prompts, masks: torch.Tensor, logits: torch.Tensor, stats) -> SubsetScores:
    with torch.no_grad():
        full = model(prompts.ids)
        none = ablated_logits(model, prompts, torch.zeros(1, model.n_total_heads), stats)[0]
    m_full, m_none = metric(full, prompts).mean(), metric(none, prompts).mean()
    m = torch.stack([metric(lg, prompts).mean() for lg in logits])
    return SubsetScores(masks, kl_from_full(full, logits).numpy(), ((m - m_none) / (m_full - m_none)).numpy())


def exhaustive(model, prompts: Prompts, stats) -> SubsetScores:
    """Every one of the 2^(heads) subsets, scored under mean ablation (the ground truth). The earlier layers run
    once per mask of their heads; the last layer's heads at the answer position are then combined with all of
    its 2^H masks at once (its heads do not depend on its own mask)."""
    if not isinstance(model, TinyTransformer):
        raise ValueError(f"exhaustive scoring of 2^{model.n_total_heads} head subsets needs the tiny transformer "
                         "(config model='tiny')")
    H, L = model.n_heads, model.n_layers
    last = torch.tensor(list(itertools.product([0.0, 1.0], repeat=H)))  # [2^H, H]
    early = torch.tensor(list(itertools.product([0.0, 1.0], repeat=H * (L - 1))))
    P = len(prompts)
    mu_last = stats[-1][0][-1]  # [H, d_head] at the answer position
    logits = []
    with torch.no_grad():
        for m_early in early:
            x = model.embed(prompts.ids) + model.pos[: prompts.ids.shape[1]]
            for layer in range(L - 1):
                m = m_early[layer * H:(layer + 1) * H].view(1, 1, H, 1)
                x = model.finish(layer, x, m * model.heads(layer, x) + (1 - m) * stats[layer][0])
            h = model.heads(L - 1, x)[:, -1]  # [P, H, d_head]
            m = last.view(-1, 1, H, 1)
            mixed = m * h + (1 - m) * mu_last  # [2^H, P, H, d_head]
            x_last = model.finish(L - 1, x[:, -1].expand(len(last), P, -1), mixed)
            logits.append(model.unembed(model.ln_f(x_last)))
    masks = torch.cat([torch.cat([m_early.expand(len(last), -1), last], 1) for m_early in early])
    return _scores(model, prompts, masks, torch.cat(logits), stats)


def optimum_by_size(scores: SubsetScores) -> np.ndarray:
    """The lowest KL over subsets of each size 0..n (the exhaustive optimum)."""
    sizes = scores.masks.sum(1).long().numpy()
    return np.array([scores.kl[sizes == k].min() for k in range(scores.masks.shape[1] + 1)])


def expected_random_kl(scores: SubsetScores) -> np.ndarray:
    """The expected KL of a random ranking's top-k circuit at each size k = 0..n: a random ranking's top k heads
    are a uniformly random k-subset, so this is the mean KL over all subsets of size k (exact, from the exhaustive
    scores; one random permutation is one draw from it)."""
    sizes = scores.masks.sum(1).long().numpy()
    return np.array([scores.kl[sizes == k].mean() for k in range(scores.masks.shape[1] + 1)])


def true_circuit(scores: SubsetScores, threshold: float) -> torch.Tensor:
    """The smallest subset recovering at least `threshold` of the metric (ties: lowest KL), as a 0/1 mask."""
    sizes = scores.masks.sum(1).numpy()
    ok = np.flatnonzero(scores.recovery >= threshold)
    best = min(ok, key=lambda i: (sizes[i], scores.kl[i]))
    return scores.masks[best]


def top_k_masks(scores: np.ndarray) -> torch.Tensor:
    """[n+1, n] masks keeping the k highest-scoring heads, k = 0..n (ties by index)."""
    order = np.argsort(-scores, kind="stable")
    masks = torch.zeros(len(scores) + 1, len(scores))
    for k in range(1, len(scores) + 1):
        masks[k, order[:k]] = 1.0
    return masks


def roc_auc(scores: np.ndarray, members: np.ndarray) -> float:
    """Probability that a random member of the true circuit outscores a random non-member (ties count half)."""
    members = np.asarray(members, bool)
    pos, neg = np.asarray(scores)[members], np.asarray(scores)[~members]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg)))


def circuit_size_at(recovery: np.ndarray, threshold: float) -> int:
    """The smallest k whose top-k circuit recovers at least `threshold` of the metric."""
    return int(np.flatnonzero(np.asarray(recovery) >= threshold)[0])


def area(kl: np.ndarray) -> float:
    """Area under KL against circuit size (mean over sizes 0..n): lower is more faithful."""
    return float(np.mean(kl))
