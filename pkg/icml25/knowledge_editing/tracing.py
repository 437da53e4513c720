"""Causal tracing (Meng et al., 2022, Sec. 2.1): which (layer, token) MLP output carries a fact, so that the
chapter edits where ROME would on this model."""

from __future__ import annotations

import numpy as np
import torch

from ..core import models
from ..knowledge_editing_world import TRAIN_TEMPLATES, FactWorld, question


@torch.no_grad()
def causal_trace(model, tok, world: FactWorld, template: str, noise_scale: float = 3.0, seed: int = 0) -> np.ndarray:
    """ROME's causal tracing (Meng et al., 2022, Sec. 2.1) of every fact asked with `template`: the subject's
    input embedding is corrupted with Gaussian noise (sd = `noise_scale` × the embeddings' sd), then the clean MLP
    output of one layer at one token is restored; the indirect effect of (layer, token) is p(o) with that
    restoration minus p(o) corrupted, averaged over the facts. Returns an array (layers, tokens of the template)."""
    facts = list(world.facts.items())
    prompts = [question(s, r, template) for (s, r), _ in facts]
    words = template.split()
    subj = words.index("{s}")
    enc = tok(prompts, return_tensors="pt", padding=True)
    pad = enc["input_ids"].shape[1] - len(words)  # every prompt of one template has the same length
    target = torch.tensor(tok.convert_tokens_to_ids([o for _, o in facts]))
    rows = torch.arange(len(prompts))
    emb = model.get_input_embeddings()
    sd = noise_scale * float(emb.weight.std())
    noise = torch.randn(len(prompts), emb.embedding_dim, generator=torch.Generator().manual_seed(seed)) * sd
    layers = models.decoder_blocks(model)
    clean = {}
    hooks = [layers[l].mlp.register_forward_hook(lambda m, a, o, l=l: clean.__setitem__(l, o.clone()))
             for l in range(len(layers))]
    try:
        model(**enc)
    finally:
        for h in hooks:
            h.remove()

    def p_target(restore: tuple[int, int] | None) -> float:
        def corrupt(m, a, o):
            o = o.clone()
            o[:, pad + subj] += noise
            return o

        def put_back(m, a, o):
            o = o.clone()
            o[:, pad + restore[1]] = clean[restore[0]][:, pad + restore[1]]
            return o

        hs = [emb.register_forward_hook(corrupt)]
        if restore is not None:
            hs.append(layers[restore[0]].mlp.register_forward_hook(put_back))
        try:
            p = torch.softmax(model(**enc).logits[:, -1], -1)[rows, target]
        finally:
            for h in hs:
                h.remove()
        return float(p.mean())

    base = p_target(None)
    return np.array([[p_target((l, i)) - base for i in range(len(words))] for l in range(len(layers))])


def traced_site(model, tok, world: FactWorld, seed: int = 0,
                heats: dict[str, np.ndarray] | None = None) -> tuple[int, str]:
    """The edit site (layer, token) with the largest MLP indirect effect, token "subject" or "last", averaged over
    the training templates: where ROME would edit this model. `heats` are :func:`causal_trace`'s maps per training
    template if already computed."""
    effect = {}
    for t in TRAIN_TEMPLATES:
        heat = causal_trace(model, tok, world, t, seed=seed) if heats is None else heats[t]
        words = t.split()
        for l in range(heat.shape[0]):
            for token, i in (("subject", words.index("{s}")), ("last", len(words) - 1)):
                effect[(l, token)] = effect.get((l, token), 0.0) + heat[l, i] / len(TRAIN_TEMPLATES)
    return max(effect, key=effect.get)
