"""Retrieval augmentation: a memory with one line "s r o′" per edit; a question retrieves a line (by keyword match,
or by sentence-embedding similarity with all-MiniLM-L6-v2), which is prepended to the prompt."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core import sentence
from ..knowledge_editing_world import TRAIN_TEMPLATES, Edit, question, with_context


class LexicalMemory:
    """One line "s r o′" per edit; a question retrieves the latest line whose subject and relation both occur in
    it (keyword matching), and the line is prepended as context ("ctx s r o′ question"). Empty memory, or no
    matching line: the prompt is unchanged, so the model answers as the base model."""

    def __init__(self):
        self.lines: list[tuple[str, str, str]] = []

    def add(self, edit: Edit) -> None:
        self.lines.append((edit.subject, edit.relation, edit.new))

    def __len__(self) -> int:
        return len(self.lines)

    def retrieve(self, prompt: str) -> tuple[str, str, str] | None:
        words = set(prompt.split())
        hits = [line for line in self.lines if set(line[:2]) <= words]
        return hits[-1] if hits else None

    def augment(self, prompt: str) -> str:
        hit = self.retrieve(prompt)
        return prompt if hit is None else f"ctx {' '.join(hit)} {prompt}"

    def augment_all(self, prompts: Sequence[str]) -> list[str]:
        return [self.augment(p) for p in prompts]


class DenseMemory(LexicalMemory):
    """Retrieval as in the paper: each edit stored under its question, embedded with a real sentence encoder
    (all-MiniLM-L6-v2); a question retrieves the line whose stored question is most cosine-similar (top-1,
    always, like the paper's top-k prepending)."""

    def _keys(self) -> np.ndarray:
        return sentence.embed([question(s, r, TRAIN_TEMPLATES[1]) for s, r, _ in self.lines])

    def retrieve(self, prompt: str) -> tuple[str, str, str] | None:
        if not self.lines:
            return None
        return self.lines[int(np.argmax(self._keys() @ sentence.embed([prompt])[0]))]

    def augment_all(self, prompts: Sequence[str]) -> list[str]:
        """:meth:`augment` of every prompt, as one batch through the encoder and one similarity matrix."""
        if not self.lines or not prompts:
            return list(prompts)
        best = np.argmax(sentence.embed(list(prompts)) @ self._keys().T, axis=1)
        return [with_context(self.lines[int(i)], p) for i, p in zip(best, prompts, strict=True)]
