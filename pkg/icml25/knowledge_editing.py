"""Lifelong knowledge editing at real-world scale (WikiBigEdit; Thede et al., ICML 2025), in miniature: the
building blocks of a lifelong editing benchmark and of the editors it compares.

A fact world of triples (s, r) → o over word tokens, questions asked with training templates and with held-out
rephrase and persona templates, edits (s, r) → o′ ≠ o arriving in time windows, locality probes on hard
neighbours (same subject or same relation, never edited) and two-hop chains (s, r₁) → o, (o, r₂) → o₂ whose
answers are recomputed after every edit.

Editors:

* ROME (Meng et al., 2022) on the down-projection W of one MLP, with key k* (the down-projection's input at the
  subject token), a value v* optimised so the model answers o′, and the key second moment C = E[k kᵀ]
  estimated from the model's own activations:

      (1)  W′ = W + (v* − W k*) (C⁻¹ k*)ᵀ / ((C⁻¹ k*)ᵀ k*)

  so W′ k* = v*, rank(W′ − W) = 1, and W′ k = W k for every k with kᵀ C⁻¹ k* = 0.
* Merging after a fine-tuning window (the paper's LoRA-merge baseline):

      (2)  W_merged = (1 − α) W_prev + α W_ft

* Retrieval augmentation: a memory with one line "s r o′" per edit; the question retrieves its best line, which
  is prepended to the prompt (the paper embeds with a sentence encoder; the offline sentence-embedding package
  named in the issue is not installed here, so this module has the lexical retriever only).

Not built in the time available: the MEMIT batched editor, the continual and LoRA fine-tuning loops, the
lifelong evaluation and its notebooks (see the chapter's issue).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .core import tinylm, zoo
from .core.claims import Claim
from .core.config import make_config
from .core.seeding import numpy_rng, torch_generator
from .core.train import train

config = make_config({
    "smoke": {"seeds": [0], "n_entities": 20, "n_relations": 2, "base_steps": 60, "preset": "nano",
              "n_windows": 2, "edits_per_window": 5, "merge_alpha": 0.25, "rome_layer": 0, "v_steps": 20,
              "v_lr": 0.5},
    "ci": {"seeds": [0, 1, 2], "n_entities": 60, "n_relations": 3, "base_steps": 300, "preset": "nano",
           "n_windows": 4, "edits_per_window": 10, "merge_alpha": 0.25, "rome_layer": 0, "v_steps": 25,
           "v_lr": 0.5},
    "full": {"seeds": [0, 1, 2, 3, 4], "n_entities": 2000, "n_relations": 8, "base_steps": 20000, "preset": "base",
             "n_windows": 8, "edits_per_window": 200, "merge_alpha": 0.25, "rome_layer": 0, "v_steps": 25,
             "v_lr": 0.5},
})

TRAIN_TEMPLATES = ("{s} {r} ?", "what is {r} of {s} ?")
REPHRASE_TEMPLATES = ("tell me {r} for {s} ?",)
PERSONA_TEMPLATES = ("detective asks : {s} {r} ?",)
TEMPLATE_WORDS = sorted({w for t in TRAIN_TEMPLATES + REPHRASE_TEMPLATES + PERSONA_TEMPLATES
                         for w in t.split() if not w.startswith("{")} | {"ctx"})

# --------------------------------------------------------------------------------------------------- claims
# Declared from the issue before any experiment; the experiment that would check them is not built yet.

EDITORS_DEGRADE = Claim(
    chapter="knowledge_editing", id="editors_degrade",
    paper_statement="Knowledge editors degrade sharply as edits accumulate at scale",
    paper_value="ROME/MEMIT collapse after thousands of sequential edits",
    criterion="ROME's locality or retention falls by ≥ 20 points from the first to the last window (mean over seeds)",
    test=lambda m: max(np.mean(m["locality_drop"]), np.mean(m["retention_drop"])) >= 0.20,
)
RETRIEVAL_BEST = Claim(
    chapter="knowledge_editing", id="retrieval_best",
    paper_statement="Retrieval augmentation gives the best edit accuracy and retention",
    paper_value="RAG best on edit accuracy and retention, at a higher inference cost",
    criterion="Retrieval's final edit success and retention (means over seeds) are the highest of all methods",
    test=lambda m: m["best_success"] == "retrieval" and m["best_retention"] == "retrieval",
)
MERGE = Claim(
    chapter="knowledge_editing", id="merge",
    paper_statement="Continual fine-tuning with merging is a strong, cheap option that forgets less",
    paper_value="LoRA + merging retains earlier windows better than plain fine-tuning",
    criterion="LoRA with merging retains more of the earlier windows than continual fine-tuning (mean over seeds)",
    test=lambda m: np.mean(m["retention_merge"]) > np.mean(m["retention_ft"]),
)
MULTIHOP = Claim(
    chapter="knowledge_editing", id="multihop",
    paper_statement="Multi-hop reasoning over edited facts stays poor for all methods",
    paper_value="low multi-hop accuracy for every method",
    criterion="Every method's multi-hop accuracy is below half its edit success (means over seeds)",
    test=lambda m: all(h < 0.5 * s for h, s in zip(m["multihop"], m["success"], strict=True)),
)


# ------------------------------------------------------------------------------------------- the benchmark
@dataclass(frozen=True)
class Edit:
    subject: str
    relation: str
    old: str
    new: str


@dataclass
class FactWorld:
    """Triples (s, r) → o over entities e0…e{n−1} and relations r0…r{m−1}; every entity has every relation, so
    an object is itself a subject and two-hop chains exist."""

    facts: dict[tuple[str, str], str]
    entities: list[str]
    relations: list[str]
    edited: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def sample(cls, n_entities: int, n_relations: int, seed: int) -> FactWorld:
        rng = numpy_rng(seed, "fact-world")
        ents = [f"e{i}" for i in range(n_entities)]
        rels = [f"r{j}" for j in range(n_relations)]
        facts = {(s, r): ents[int(rng.integers(n_entities))] for s in ents for r in rels}
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


@dataclass
class Window:
    edits: list[Edit]
    locality: list[tuple[str, str]]  # hard neighbours: same subject or same relation, never edited


def edit_stream(world: FactWorld, n_windows: int, per_window: int, seed: int) -> list[Window]:
    """Time windows of edits (s, r) → o′ ≠ o on distinct (s, r), each with one hard neighbour per edit (same
    subject, other relation; else same relation, other subject) chosen among pairs that are never edited."""
    rng = numpy_rng(seed, "edit-stream")
    pairs = list(world.facts)
    order = rng.permutation(len(pairs))
    n = n_windows * per_window
    if 2 * n > len(pairs):
        raise ValueError(f"{n} edits need at least {2 * n} facts, the world has {len(pairs)}")
    to_edit = [pairs[i] for i in order[:n]]
    edited = set(to_edit)
    windows = []
    for w in range(n_windows):
        edits, loc = [], []
        for s, r in to_edit[w * per_window:(w + 1) * per_window]:
            old = world.facts[(s, r)]
            new = world.entities[int(rng.integers(len(world.entities) - 1))]
            new = new if new != old else world.entities[-1]
            edits.append(Edit(s, r, old, new))
            same_s = [(s, r2) for r2 in world.relations if (s, r2) not in edited]
            same_r = [(s2, r) for s2 in world.entities if (s2, r) not in edited]
            cand = same_s or same_r
            loc.append(cand[int(rng.integers(len(cand)))])
        windows.append(Window(edits, loc))
    return windows


def question(s: str, r: str, template: str) -> str:
    return template.format(s=s, r=r)


def tokenizer_for(world: FactWorld):
    return tinylm.word_tokenizer(world.entities + world.relations + TEMPLATE_WORDS)


# ---------------------------------------------------------------------------------------------------- ROME
def mlp(model, layer: int):
    n = len(model.model.layers)
    if not 0 <= layer < n:
        raise ValueError(f"layer {layer} out of range; the model has layers 0..{n - 1}")
    return model.model.layers[layer].mlp


@torch.no_grad()
def keys_at(model, tok, prompts: Sequence[str], positions: Sequence[int], layer: int) -> torch.Tensor:
    """Inputs k of the down-projection of `layer` at one position per prompt (all prompts the same length)."""
    store = []
    h = mlp(model, layer).down_proj.register_forward_pre_hook(lambda m, a: store.append(a[0]))
    try:
        ids = tok(list(prompts), return_tensors="pt", padding=True)["input_ids"]
        model(input_ids=ids)
    finally:
        h.remove()
    return store[0][torch.arange(len(prompts)), torch.as_tensor(list(positions))]


def key_covariance(keys: torch.Tensor, ridge: float = 1e-4) -> torch.Tensor:
    """C = E[k kᵀ] over the model's own keys, plus a small ridge so C is invertible."""
    return keys.T @ keys / len(keys) + ridge * torch.eye(keys.shape[1])


def rome_update(W: torch.Tensor, C: torch.Tensor, k_star: torch.Tensor, v_star: torch.Tensor) -> torch.Tensor:
    """Eq. (1): the rank-one ΔW with (W + ΔW) k* = v* that leaves W k unchanged for k ⟂ C⁻¹k*.
    W has shape (d_out, d_in) (a `nn.Linear` weight)."""
    u = torch.linalg.solve(C, k_star)
    return torch.outer(v_star - W @ k_star, u) / (u @ k_star)


def optimise_value(model, tok, prompt: str, subject_pos: int, target: str, layer: int, steps: int,
                   lr: float) -> tuple[torch.Tensor, list[float]]:
    """v* = W k* + δ, with δ (added to the MLP output at the subject token) trained so the next token after
    `prompt` is `target`."""
    down = mlp(model, layer).down_proj
    ids = tok([prompt], return_tensors="pt")["input_ids"]
    target_id = tok.convert_tokens_to_ids(target)
    k_star = keys_at(model, tok, [prompt], [subject_pos], layer)[0]
    delta = torch.zeros(down.out_features, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=lr)

    def add_delta(m, a, out):
        out = out.clone()
        out[:, subject_pos] = out[:, subject_pos] + delta
        return out

    h = down.register_forward_hook(add_delta)
    losses = []
    try:
        for _ in range(steps):
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1], -1)
            loss = -logp[target_id] + 1e-3 * delta.pow(2).sum()
            losses.append(float(-logp[target_id].detach()))
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        h.remove()
    with torch.no_grad():
        return down.weight @ k_star + delta.detach(), losses


def rome_edit(model, tok, world: FactWorld, edit: Edit, C: torch.Tensor, layer: int, steps: int, lr: float,
              template: str = TRAIN_TEMPLATES[0]) -> dict:
    """Apply one ROME edit in place (and to `world`); returns k*, v*, ΔW and the value optimisation's loss
    curve (−log p(o′) per step)."""
    if world.answer(edit.subject, edit.relation) == edit.new:
        raise ValueError(f"edit target {edit.new!r} equals the current object")
    prompt = question(edit.subject, edit.relation, template)
    pos = prompt.split().index(edit.subject)
    v_star, losses = optimise_value(model, tok, prompt, pos, edit.new, layer, steps, lr)
    k_star = keys_at(model, tok, [prompt], [pos], layer)[0]
    down = mlp(model, layer).down_proj
    with torch.no_grad():
        delta = rome_update(down.weight, C, k_star, v_star)
        down.weight += delta
    world.apply(edit)
    return {"k_star": k_star, "v_star": v_star, "delta": delta, "losses": losses}


def subject_keys(model, tok, world: FactWorld, layer: int) -> torch.Tensor:
    """Keys at the subject token of every fact under every training template (the model's own activations)."""
    keys = []
    for t in TRAIN_TEMPLATES:
        prompts = [question(s, r, t) for s, r in world.facts]
        pos = [p.split().index(s) for p, (s, _) in zip(prompts, world.facts)]
        keys.append(keys_at(model, tok, prompts, pos, layer))
    return torch.cat(keys)


# --------------------------------------------------------------------------------------------------- merge
def merge(prev: dict[str, torch.Tensor], finetuned: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """Eq. (2), per tensor."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"merge alpha {alpha} must lie in [0, 1]")
    return {k: (1 - alpha) * prev[k] + alpha * finetuned[k] for k in prev}


# ----------------------------------------------------------------------------------------------- retrieval
class LexicalMemory:
    """One line "s r o′" per edit; a question retrieves the line sharing the most tokens with it (ties: the
    latest edit), and the line is prepended as "ctx s r o′ ?"-style context. Empty memory: the prompt
    is unchanged, so the model answers as the base model."""

    def __init__(self):
        self.lines: list[tuple[str, str, str]] = []

    def add(self, edit: Edit) -> None:
        self.lines.append((edit.subject, edit.relation, edit.new))

    def __len__(self) -> int:
        return len(self.lines)

    def retrieve(self, prompt: str) -> tuple[str, str, str] | None:
        if not self.lines:
            return None
        words = set(prompt.split())
        scores = [len(words & set(line[:2])) for line in self.lines]
        best = max(range(len(scores)), key=lambda i: (scores[i], i))
        return self.lines[best] if scores[best] > 0 else None

    def augment(self, prompt: str) -> str:
        hit = self.retrieve(prompt)
        return prompt if hit is None else f"ctx {' '.join(hit)} {prompt}"


# ------------------------------------------------------------------------------------------ the base model
def train_base(world: FactWorld, seed: int, steps: int, batch_size: int = 64, lr: float = 1e-2,
               preset: str = "small"):
    """A 2-layer tiny Llama (d = 64 for "small") trained to answer every fact with the training templates (next token after
    the question is the object)."""
    tok = tokenizer_for(world)
    model = tinylm.make_model(preset, tok, seed, max_len=16, num_hidden_layers=2)
    qs = [(question(s, r, t), o) for (s, r), o in world.facts.items() for t in TRAIN_TEMPLATES]
    g = torch_generator(seed, "fact-batches")

    def batches():
        while True:
            idx = torch.randint(len(qs), (batch_size,), generator=g).tolist()
            enc = tok([qs[i][0] for i in idx], return_tensors="pt", padding=True)
            yield {"enc": enc, "y": torch.tensor(tok.convert_tokens_to_ids([qs[i][1] for i in idx]))}

    def loss_fn(m, b):
        return nn.functional.cross_entropy(m(**b["enc"]).logits[:, -1], b["y"])

    res = train(model, batches(), steps, lr=lr, loss_fn=loss_fn, desc="ke-base")
    return model, tok, res.losses


@torch.no_grad()
def answer_accuracy(model, tok, pairs: Sequence[tuple[str, str]], answers: Sequence[str], template: str) -> float:
    """Fraction of questions whose greedy next token is the expected object."""
    enc = tok([question(s, r, template) for s, r in pairs], return_tensors="pt", padding=True)
    pred = model(**enc).logits[:, -1].argmax(-1)
    return float((pred == torch.tensor(tok.convert_tokens_to_ids(list(answers)))).float().mean())


BASE_PRESETS = {scale: {k: config(scale)[k] for k in ("n_entities", "n_relations", "base_steps", "preset")}
                for scale in ("smoke", "ci", "full")}


@zoo.register("ke-base", BASE_PRESETS)
def build_base(cfg, seed):
    world = FactWorld.sample(cfg.n_entities, cfg.n_relations, seed)
    model, tok, losses = train_base(world, seed, cfg.base_steps, preset=cfg.preset)
    return model, tok, {"losses": losses}


def base_model(cfg, seed: int) -> tuple[zoo.ZooModel, FactWorld]:
    """The zoo's fact model for `cfg`'s scale and `seed`, and its (fresh, unedited) fact world."""
    z = zoo.get("ke-base", cfg.scale, seed)
    z.model.requires_grad_(False)
    return z, FactWorld.sample(cfg.n_entities, cfg.n_relations, seed)


@torch.no_grad()
def next_token_probs(model, tok, prompts: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """p(target | prompt) for each pair."""
    enc = tok(list(prompts), return_tensors="pt", padding=True)
    p = torch.softmax(model(**enc).logits[:, -1], -1)
    return p[torch.arange(len(prompts)), torch.tensor(tok.convert_tokens_to_ids(list(targets)))].numpy()
