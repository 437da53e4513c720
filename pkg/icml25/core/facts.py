"""The fact world two chapters share: n_subjects × n_relations facts (s, r) → o, every subject having every
relation, each object drawn uniformly at random. memory_layers asks a model to memorise them; knowledge_editing
trains a model on them and then edits them.

Objects come from a separate set of `n_objects` objects, or (``n_objects=None``) from the subjects themselves, so
that an object is again a subject and two-hop chains (s, r₁) → o, (o, r₂) → o₂ exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .seeding import numpy_rng


@dataclass(frozen=True)
class Facts:
    """Fact f = s · n_relations + r has subject `subject[f]`, relation `relation[f]` and object `object[f]`
    (an index into the objects, or into the subjects when `chained`)."""

    n_subjects: int
    n_relations: int
    n_objects: int
    subject: np.ndarray
    relation: np.ndarray
    object: np.ndarray
    chained: bool

    def __len__(self) -> int:
        return len(self.object)


def sample_facts(n_subjects: int, n_relations: int, seed: int, n_objects: int | None = None) -> Facts:
    """A random fact world; `n_objects=None` draws objects from the subjects (a chained world)."""
    if n_subjects <= 0 or n_relations <= 0 or (n_objects is not None and n_objects <= 0):
        raise ValueError(f"a fact world needs positive sizes, got n_subjects={n_subjects}, "
                         f"n_relations={n_relations}, n_objects={n_objects}")
    chained = n_objects is None
    n_objects = n_subjects if chained else n_objects
    rng = numpy_rng(seed, "facts", n_subjects, n_relations, n_objects, chained)
    s, r = np.divmod(np.arange(n_subjects * n_relations), n_relations)
    return Facts(n_subjects, n_relations, n_objects, s, r, rng.integers(0, n_objects, len(s)), chained)
