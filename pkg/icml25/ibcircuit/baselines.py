"""The node-level baselines: attribution patching, single-head activation patching, greedy head pruning by KL, and
a random ranking (ACDC, the edge-level one, is in `edge_pruning`)."""

from __future__ import annotations

import numpy as np
import torch

from ..core.seeding import numpy_rng
from .circuits import masks_from_subsets, score_subsets
from .tasks import Prompts, metric


def attribution_patching(model, prompts: Prompts) -> np.ndarray:
    """Node-level attribution patching: |Σ (h_clean - h_corrupt) · ∂metric/∂h| per head, a first-order
    estimate of patching the corrupted output in, averaged over prompts."""
    corrupt_h, clean_h = [], []

    def keep(store):
        def fn(layer, h):
            if store is clean_h:
                h = h.detach().requires_grad_(True)
            store.append(h)
            return h
        return fn

    with torch.no_grad():
        model(prompts.corrupt, keep(corrupt_h))
    with torch.enable_grad():
        m = metric(model(prompts.ids, keep(clean_h)), prompts).sum()
        grads = torch.autograd.grad(m, clean_h)
    scores = [((c.detach() - k) * gr).sum(-1).sum(1) for c, k, gr in zip(clean_h, corrupt_h, grads)]  # [P, H]
    return torch.cat(scores, 1).mean(0).abs().numpy()


def activation_patching(model, prompts: Prompts) -> np.ndarray:
    """Single-head activation patching: the drop of the mean metric when one head's output is taken from the
    corrupted prompt."""
    corrupt_h = []
    with torch.no_grad():
        model(prompts.corrupt, lambda layer, h: corrupt_h.append(h) or h)
        base = metric(model(prompts.ids), prompts).mean()
        out = []
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                def patch(lyr, h, layer=layer, head=head):
                    if lyr == layer:
                        h = h.clone()
                        h[:, :, head] = corrupt_h[layer][:, :, head]
                    return h
                out.append(float(base - metric(model(prompts.ids, patch), prompts).mean()))
    return np.abs(np.array(out))


def greedy_pruning(model, prompts: Prompts, stats) -> np.ndarray:
    """Greedy head pruning under mean ablation (a node-level, threshold-free relative of ACDC): repeatedly remove
    the head whose removal raises the KL least. Score = the step at which a head was removed (kept longest = most
    important)."""
    n = model.n_total_heads
    kept, score = list(range(n)), np.zeros(n)
    for step in range(n):
        trials = [[h for h in kept if h != drop] for drop in kept]
        kl = score_subsets(model, prompts, masks_from_subsets(model, trials), stats).kl
        drop = kept[int(np.argmin(kl))]
        score[drop] = step
        kept.remove(drop)
    return score


def random_ranking(n: int, seed: int) -> np.ndarray:
    return numpy_rng(seed, "random-ranking").permutation(n).astype(float)
