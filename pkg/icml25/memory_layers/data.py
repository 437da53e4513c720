"""The data: the fact world (a fact is the sequence BOS s r, scored on o) and the control task."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core import arithmetic
from ..core.facts import Facts, sample_facts

# --- data: the fact world and the control task --------------------------------------------------------------

@dataclass(frozen=True)
class FactWorld(Facts):
    """The core's fact world (separate objects) as token ids: 0 is padding/BOS, then subjects, relations,
    objects. A fact is the sequence [BOS, s, r] whose next token must be o."""

    @property
    def vocab_size(self) -> int:
        return 1 + self.n_subjects + self.n_relations + self.n_objects

    def object_token(self, o) -> np.ndarray:
        return 1 + self.n_subjects + self.n_relations + np.asarray(o)

    def inputs(self) -> torch.Tensor:
        """[F, 3] token ids: BOS, subject, relation."""
        s = 1 + self.subject
        r = 1 + self.n_subjects + self.relation
        return torch.as_tensor(np.stack([np.zeros_like(s), s, r], axis=1), dtype=torch.long)

    def targets(self) -> torch.Tensor:
        return torch.as_tensor(self.object_token(self.object), dtype=torch.long)


def fact_world(n_facts: int, seed: int, n_relations: int = 16, n_objects: int = 256) -> FactWorld:
    """`n_facts` distinct (subject, relation) pairs (n_facts/n_relations subjects, every subject with every
    relation), each with a uniformly random object from the core's fact world."""
    if n_facts < n_relations or n_facts % n_relations:
        raise ValueError(f"n_facts={n_facts} must be a positive multiple of n_relations={n_relations}")
    return FactWorld(**vars(sample_facts(n_facts // n_relations, n_relations, seed, n_objects)))


@dataclass(frozen=True)
class Task:
    """Next-token prediction with a mask: `inputs` [M, T] token ids, `targets` [M, T] with -100 where unscored."""

    name: str
    inputs: torch.Tensor
    targets: torch.Tensor
    vocab_size: int


def fact_task(world: FactWorld) -> Task:
    inputs = world.inputs()
    targets = torch.full_like(inputs, -100)
    targets[:, -1] = world.targets()
    return Task(f"facts ({len(inputs)})", inputs, targets, world.vocab_size)


def control_task(n_problems: int, seed: int) -> Task:
    """The core's modular arithmetic (1-2 operations), scored on every digit after '=' (each is one operation
    on the two digits before it: a rule, not a fact to memorise). Characters map to ids 1.., 0 is padding."""
    return _arithmetic_task(arithmetic.sample_problems(n_problems, seed, 1, 2, stream="memory_control"),
                            "control: modular arithmetic")


def control_tasks(n_train: int, n_heldout: int, seed: int) -> tuple[Task, Task]:
    """The control task to train on (`control_task`) and `n_heldout` problems to score it on, drawn from a stream
    of their own with every problem the training set holds left out: the score measures the rule, not recall."""
    train = control_task(n_train, seed)
    seen = {p.prompt for p in arithmetic.sample_problems(n_train, seed, 1, 2, stream="memory_control")}
    fresh = [p for p in arithmetic.sample_problems(2 * n_heldout, seed, 1, 2, stream="memory_control_heldout")
             if p.prompt not in seen][:n_heldout]
    if len(fresh) < n_heldout:
        raise ValueError(f"only {len(fresh)} of {n_heldout} held-out problems are new to the training set")
    return train, _arithmetic_task(fresh, "control: held-out problems")


def _arithmetic_task(problems, name: str) -> Task:
    texts = [p.prompt + p.solution for p in problems]
    vocab = {ch: i + 1 for i, ch in enumerate(arithmetic.ALPHABET)}
    T = max(map(len, texts))
    ids = torch.zeros(len(texts), T, dtype=torch.long)
    targets = torch.full((len(texts), T), -100, dtype=torch.long)
    for row, text in enumerate(texts):
        ids[row, :len(text)] = torch.tensor([vocab[c] for c in text])
        for pos, ch in enumerate(text[:-1]):
            if ch == "=":
                targets[row, pos] = vocab[text[pos + 1]]
    return Task(name, ids, targets, len(vocab) + 1)
