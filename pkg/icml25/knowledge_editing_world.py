"""The fact world of the knowledge-editing chapter and the base model trained on it (the zoo's ``ke-base``).

Kept apart from :mod:`icml25.knowledge_editing` (the editors and the benchmark) so that the zoo's content address of
the base model, which hashes the module that builds it, changes only when the world or its training does.

Triples (s, r) → o over word tokens, every entity with every relation (an object is itself a subject, so two-hop
chains exist), asked with training templates and probed with held-out rephrase and persona templates. The base
model is trained on the facts, on half the subjects' two-hop chains, answered in two tokens (the bridge, then the
answer), and on reading a context line: copying its object when the line states the asked fact, and answering from
its own memory when the line is irrelevant (about another subject, or the same subject's other relation), so that
retrieval has a reader that can ignore what its retriever got wrong.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .core import tinylm, zoo
from .core.facts import sample_facts
from .core.seeding import numpy_rng
from .core.train import train

# The base model's settings per scale (the chapter's config carries the same values). The reader's settings (steps,
# the context share of a batch, the irrelevant share of the context lines, AdamW's weight decay) were calibrated at
# ci on the preconditions alone (facts known, context copied, irrelevant context ignored on held-out combinations,
# two facts composed, ROME's first-window edits taking), never on a claim's verdict; the page lists what was tried.
BASE_PRESETS = {
    "smoke": {"n_entities": 20, "n_relations": 2, "base_steps": 150, "preset": "nano", "n_layers": 4,
              "context_rate": 0.5, "irrelevant_share": 0.6, "base_weight_decay": 0.1},
    "ci": {"n_entities": 160, "n_relations": 3, "base_steps": 4000, "preset": "nano", "n_layers": 4,
           "context_rate": 0.5, "irrelevant_share": 0.6, "base_weight_decay": 0.1},
    "full": {"n_entities": 1000, "n_relations": 6, "base_steps": 20000, "preset": "small", "n_layers": 6,
             "context_rate": 0.5, "irrelevant_share": 0.6, "base_weight_decay": 0.1},
}

TRAIN_TEMPLATES = ("{s} {r} ?", "what is {r} of {s} ?")
REPHRASE_TEMPLATES = ("tell me {r} for {s} ?",)
PERSONA_TEMPLATES = ("detective asks : {s} {r} ?",)
TWO_HOP_TEMPLATE = "{s} {r} {r2} ?"
ALL_TEMPLATES = TRAIN_TEMPLATES + REPHRASE_TEMPLATES + PERSONA_TEMPLATES
TEMPLATE_WORDS = sorted({w for t in ALL_TEMPLATES for w in t.split() if not w.startswith("{")} | {"ctx"})

@dataclass(frozen=True)
class Edit:
    subject: str
    relation: str
    old: str
    new: str



@dataclass
class FactWorld:
    """Triples (s, r) → o over entities e0…e{n−1} and relations r0…r{m−1}, editable; every entity has every
    relation, so an object is itself a subject and two-hop chains exist."""

    facts: dict[tuple[str, str], str]
    entities: list[str]
    relations: list[str]
    edited: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def sample(cls, n_entities: int, n_relations: int, seed: int) -> FactWorld:
        """The core's chained fact world, with entity and relation names as tokens."""
        world = sample_facts(n_entities, n_relations, seed)
        ents = [f"e{i}" for i in range(n_entities)]
        rels = [f"r{j}" for j in range(n_relations)]
        facts = {(ents[s], rels[r]): ents[o] for s, r, o in zip(world.subject, world.relation, world.object)}
        return cls(facts, ents, rels)

    def answer(self, s: str, r: str) -> str:
        if (s, r) not in self.facts:
            raise ValueError(f"unknown subject/relation {(s, r)!r}; subjects e0..e{len(self.entities) - 1}, "
                             f"relations {', '.join(self.relations)}")
        return self.facts[(s, r)]

    def two_hop(self, s: str, r1: str, r2: str) -> str:
        """(s, r₁) → o, (o, r₂) → o₂, read from the current (edited) facts."""
        return self.answer(self.answer(s, r1), r2)

    def apply(self, edit: Edit) -> None:
        if self.answer(edit.subject, edit.relation) == edit.new:
            raise ValueError(f"edit target {edit.new!r} equals the current object of {(edit.subject, edit.relation)}")
        self.facts[(edit.subject, edit.relation)] = edit.new
        self.edited.add((edit.subject, edit.relation))



def question(s: str, r: str, template: str) -> str:
    return template.format(s=s, r=r)


def tokenizer_for(world: FactWorld):
    return tinylm.word_tokenizer(world.entities + world.relations + TEMPLATE_WORDS)



def chain_split(world: FactWorld, seed: int) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """All two-hop chains (s, r₁, r₂), split by subject: half the subjects' chains are trained, the rest held out
    to measure whether the model composes two facts at all."""
    rng = numpy_rng(seed, "chains")
    train_subjects = set(rng.permutation(world.entities)[: len(world.entities) // 2].tolist())
    chains = [(s, r1, r2) for s in world.entities for r1 in world.relations for r2 in world.relations]
    return [c for c in chains if c[0] in train_subjects], [c for c in chains if c[0] not in train_subjects]


def two_hop_question(s: str, r1: str, r2: str) -> str:
    return TWO_HOP_TEMPLATE.format(s=s, r=r1, r2=r2)


def two_hop_steps(world: FactWorld, s: str, r1: str, r2: str) -> list[tuple[str, str]]:
    """A two-hop question answered in two tokens, the bridge o = (s, r₁) first, then o₂ = (o, r₂) after it:
    ("s r₁ r₂ ?", o) and ("s r₁ r₂ ? o", o₂). The answer is o₂; saying the bridge is the tiny model's chain of
    thought (it does not compose two facts within one forward pass, notebook 02)."""
    q, o = two_hop_question(s, r1, r2), world.answer(s, r1)
    return [(q, o), (f"{q} {o}", world.answer(o, r2))]



def with_context(line: tuple[str, str, str], prompt: str) -> str:
    """A retrieved line "s r o" prepended to the question."""
    return f"ctx {' '.join(line)} {prompt}"


HELD_OUT_CONTEXT = 5  # one (asked fact, irrelevant line) combination in this many is never trained on


def held_out_context(asked: tuple[str, str], line: tuple[str, str]) -> bool:
    """Whether the combination of an asked fact (s, r) and an irrelevant line's (s′, r′) is held out of training,
    so that ignoring irrelevant context is measured on combinations the model never saw: a fixed one in
    :data:`HELD_OUT_CONTEXT` of them, by a stable hash (the same on every machine and run)."""
    return zlib.crc32(" ".join(asked + line).encode()) % HELD_OUT_CONTEXT == 0


def irrelevant_line(world: FactWorld, s: str, r: str, rng: np.random.Generator,
                    held_out: bool = False) -> tuple[str, str, str]:
    """A context line (s′, r′, x) about another fact than (s, r), with a random object x: half the time the same
    subject with another relation, otherwise another subject with any relation (the same one included), as a
    retriever's wrong top hit would be. A combination held out of training (:func:`held_out_context`) is drawn
    again, or, with `held_out`, only such a combination is returned."""
    while True:
        x = world.entities[int(rng.integers(len(world.entities)))]
        if len(world.relations) > 1 and rng.random() < 0.5:
            others = [r2 for r2 in world.relations if r2 != r]
            s2, r2 = s, others[int(rng.integers(len(others)))]
        else:
            others = [e for e in world.entities if e != s]
            s2, r2 = others[int(rng.integers(len(others)))], world.relations[int(rng.integers(len(world.relations)))]
        if held_out_context((s, r), (s2, r2)) == held_out:
            return s2, r2, x


def context_example(world: FactWorld, rng: np.random.Generator, irrelevant_share: float = 0.5) -> tuple[str, str]:
    """A question under a training template after a context line. With probability 1 − `irrelevant_share` the
    line states the asked fact with a random object, which must be copied; otherwise it is an irrelevant line
    (:func:`irrelevant_line`), and the answer is the model's own fact, as if there were no context. Whether a
    retrieved line is relevant is then the reader's decision too, not only the retriever's."""
    (s, r) = list(world.facts)[int(rng.integers(len(world.facts)))]
    t = TRAIN_TEMPLATES[int(rng.integers(len(TRAIN_TEMPLATES)))]
    if rng.random() < irrelevant_share:
        return with_context(irrelevant_line(world, s, r, rng), question(s, r, t)), world.answer(s, r)
    x = world.entities[int(rng.integers(len(world.entities)))]
    return with_context((s, r, x), question(s, r, t)), x


def training_examples(world: FactWorld, chains: Sequence[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """Every fact under every training template, and both steps of the trained two-hop chains."""
    qs = [(question(s, r, t), o) for (s, r), o in world.facts.items() for t in TRAIN_TEMPLATES]
    return qs + [step for c in chains for step in two_hop_steps(world, *c)]


def _last_token_loss(m, b):
    """Cross-entropy of the token after each prompt (the answer)."""
    return nn.functional.cross_entropy(m(**b["enc"]).logits[:, -1], b["y"])


def train_base(world: FactWorld, seed: int, steps: int, batch_size: int = 64, lr: float = 1e-2,
               preset: str = "nano", n_layers: int = 4, context_rate: float = 0.5, irrelevant_share: float = 0.6,
               weight_decay: float = 0.1):
    """A tiny Llama trained on the facts (training templates), the trained two-hop chains and, in
    `context_rate` of each batch, on answering after a context line (:func:`context_example`): copying a relevant
    line's object, and in `irrelevant_share` of them ignoring an irrelevant line, so that retrieval augmentation has
    a model that reads its context and can tell whether it answers the question, as WikiBigEdit's
    instruction-tuned models must."""
    tok = tokenizer_for(world)
    model = tinylm.make_model(preset, tok, seed, max_len=24, num_hidden_layers=n_layers)
    qs = training_examples(world, chain_split(world, seed)[0])
    rng = numpy_rng(seed, "fact-batches")
    n_ctx = int(round(context_rate * batch_size))

    def batches():
        while True:
            pairs = [qs[i] for i in rng.integers(len(qs), size=batch_size - n_ctx)]
            pairs += [context_example(world, rng, irrelevant_share) for _ in range(n_ctx)]
            enc = tok([p for p, _ in pairs], return_tensors="pt", padding=True)
            yield {"enc": enc, "y": torch.tensor(tok.convert_tokens_to_ids([o for _, o in pairs]))}

    res = train(model, batches(), steps, lr=lr, weight_decay=weight_decay, loss_fn=_last_token_loss, desc="ke-base")
    return model, tok, res.losses





@zoo.register("ke-base", BASE_PRESETS)
def build_base(cfg, seed):
    world = FactWorld.sample(cfg.n_entities, cfg.n_relations, seed)
    model, tok, losses = train_base(world, seed, cfg.base_steps, preset=cfg.preset, n_layers=cfg.n_layers,
                                    context_rate=cfg.context_rate, irrelevant_share=cfg.irrelevant_share,
                                    weight_decay=cfg.base_weight_decay)
    return model, tok, {"losses": losses}


