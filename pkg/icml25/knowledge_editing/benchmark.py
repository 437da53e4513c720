"""The benchmark: the edit stream in time windows, the probes of every metric after a window (success, rephrase,
persona, locality, multi-hop, retention) and their scoring, what the base model can do before any edit, and the
inference cost of a question."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core import flops
from ..core.seeding import numpy_rng
from ..knowledge_editing_world import (ALL_TEMPLATES, PERSONA_TEMPLATES, REPHRASE_TEMPLATES, TRAIN_TEMPLATES, Edit,
                                       FactWorld, chain_split, held_out_context, question, two_hop_question,
                                       with_context)

METRICS = ("success", "rephrase", "persona", "locality", "multihop", "retention")


@dataclass
class Window:
    edits: list[Edit]
    locality: list[tuple[str, str]]  # hard neighbours: same subject or same relation, never edited


def edit_stream(world: FactWorld, n_windows: int, per_window: int, seed: int) -> list[Window]:
    """Time windows of edits (s, r) → o′ ≠ o on distinct (s, r), each with one hard neighbour per edit (same
    subject, other relation; else same relation, other subject) chosen among pairs that are never edited. At most
    two thirds of the facts are edited, so that a third stay unedited as locality probes."""
    rng = numpy_rng(seed, "edit-stream")
    pairs = list(world.facts)
    order = rng.permutation(len(pairs))
    n = n_windows * per_window
    if 3 * n > 2 * len(pairs):
        raise ValueError(f"{n} edits need at least {(3 * n + 1) // 2} facts (two thirds edited at most), the world "
                         f"has {len(pairs)}")
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
            if not cand:
                raise ValueError(f"no unedited neighbour of {(s, r)!r}: edit fewer facts")
            loc.append(cand[int(rng.integers(len(cand)))])
        windows.append(Window(edits, loc))
    return windows


@torch.no_grad()
def predict(model, tok, prompts: Sequence[str]) -> list[str]:
    """The greedy next token after each prompt."""
    enc = tok(list(prompts), return_tensors="pt", padding=True)
    return tok.convert_ids_to_tokens(model(**enc).logits[:, -1].argmax(-1).tolist())


def probes(world: FactWorld, windows: Sequence[Window], w: int) -> dict[str, list[tuple[str, str]]]:
    """The (question, expected answer) pairs of every metric after window `w`, from the current facts:
    success, rephrase and persona on window w's edits; locality on every window's hard neighbours (never
    edited); multi-hop through every edit so far, answers recomputed from the edited facts; retention on the
    edits of windows before w (empty for w = 0)."""
    now, past = windows[w].edits, [e for win in windows[:w] for e in win.edits]
    so_far = past + list(now)

    def asked(edits, templates):
        return [(question(e.subject, e.relation, t), e.new) for e in edits for t in templates]

    return {
        "success": asked(now, TRAIN_TEMPLATES),
        "rephrase": asked(now, REPHRASE_TEMPLATES),
        "persona": asked(now, PERSONA_TEMPLATES),
        "locality": [(question(s, r, t), world.answer(s, r)) for win in windows for s, r in win.locality
                     for t in TRAIN_TEMPLATES],
        "multihop": [(two_hop_question(e.subject, e.relation, r2), world.two_hop(e.subject, e.relation, r2))
                     for e in so_far for r2 in world.relations],
        "retention": asked(past, TRAIN_TEMPLATES),
    }


def locality(model, tok, world: FactWorld, windows: Sequence[Window]) -> float:
    """The model's accuracy on every window's hard neighbours (the "locality" metric of :func:`probes`)."""
    return score(lambda ps: predict(model, tok, ps), probes(world, windows, 0)["locality"])


def evaluate(answer, items: dict[str, Sequence[tuple[str, str]]]) -> dict[str, np.ndarray]:
    """Whether each (prompt, expected) pair of every metric is answered right, from one batch of questions (and a
    second for the answer token of the "multihop" metric's two-hop questions, :func:`answer_two_hop`)."""
    names = [m for m in items if m != "multihop"]
    prompts = [q for m in names for q, _ in items[m]]
    hops = [q for q, _ in items.get("multihop", [])]
    got = answer(prompts + hops)
    if hops:
        got = got[:len(prompts)] + answer([f"{q} {b}" for q, b in zip(hops, got[len(prompts):], strict=True)])
    right, i = {}, 0
    for m in names + (["multihop"] if "multihop" in items else []):
        right[m] = np.array([g == a for g, (_, a) in zip(got[i:i + len(items[m])], items[m], strict=True)], bool)
        i += len(items[m])
    return right


def score(answer, items: Sequence[tuple[str, str]]) -> float:
    """Exact-match accuracy of `answer(prompts)` on (prompt, expected) pairs; nan when there are none."""
    if not items:
        return float("nan")
    got = answer([q for q, _ in items])
    return float(np.mean([g == a for g, (_, a) in zip(got, items, strict=True)]))


def answer_two_hop(answer, questions: Sequence[str]) -> list[str]:
    """Greedy two-token answers to two-hop questions: the bridge, then the answer after it."""
    bridges = answer(list(questions))
    return answer([f"{q} {b}" for q, b in zip(questions, bridges, strict=True)])


def score_two_hop(answer, items: Sequence[tuple[str, str]]) -> float:
    """Exact-match accuracy of the final token of :func:`answer_two_hop` on (two-hop question, o₂) pairs."""
    return score(lambda qs: answer_two_hop(answer, qs), items)


def irrelevant_probes(world: FactWorld) -> list[tuple[tuple[str, str], tuple[str, str, str]]]:
    """Every fact (s, r) with the irrelevant context lines held out of the base model's training
    (:func:`held_out_context`) among the subject's other relations and the next subject's every relation, each
    line's object the entity after the fact's own object (never the answer)."""
    ents, probes_ = world.entities, []
    for i, ((s, r), o) in enumerate(world.facts.items()):
        x = ents[(ents.index(o) + 1) % len(ents)]
        nxt = ents[(ents.index(s) + 1) % len(ents)]
        lines = [(s, r2) for r2 in world.relations if r2 != r] + [(nxt, r2) for r2 in world.relations]
        probes_ += [((s, r), (s2, r2, x)) for s2, r2 in lines if held_out_context((s, r), (s2, r2))]
    return probes_


def base_report(model, tok, world: FactWorld, seed: int) -> dict[str, float]:
    """What the base model can do before any edit: answer each template, copy a context line's (counterfactual)
    object under each template, ignore an irrelevant line (:func:`irrelevant_probes`: combinations of fact and
    line never trained on) and answer its own fact, and answer trained and held-out two-hop chains (bridge, then
    answer: :func:`score_two_hop`)."""
    answer = lambda ps: predict(model, tok, ps)  # noqa: E731
    facts = list(world.facts.items())
    other = {s: world.entities[(i + 1) % len(world.entities)] for i, s in enumerate(world.entities)}
    report = {f"fact: {t}": score(answer, [(question(s, r, t), o) for (s, r), o in facts]) for t in ALL_TEMPLATES}
    report |= {f"copy context: {t}": score(answer, [(with_context((s, r, other[s]), question(s, r, t)), other[s])
                                                    for (s, r), _ in facts]) for t in ALL_TEMPLATES}
    irrelevant = irrelevant_probes(world)
    report |= {f"ignore irrelevant context: {t}": score(answer, [(with_context(line, question(s, r, t)),
                                                                  world.answer(s, r)) for (s, r), line in irrelevant])
               for t in ALL_TEMPLATES}
    trained, held_out = chain_split(world, seed)
    for name, chains in (("two-hop, trained chains", trained), ("two-hop, held-out chains", held_out)):
        report[name] = score_two_hop(answer, [(two_hop_question(*c), world.two_hop(*c)) for c in chains])
    return report


def edit_effect(model, tok, world: FactWorld, edit: Edit) -> dict:
    """p(o′) for the edited question under every template, and the accuracy on the subject's other relations
    (hard neighbours) and on every other subject's facts (training template 1, current answers)."""
    answer = lambda ps: predict(model, tok, ps)  # noqa: E731
    neighbours = [p for p in world.facts if p[0] == edit.subject and p[1] != edit.relation]
    others = [p for p in world.facts if p[0] != edit.subject]
    kept = {name: score(answer, [(question(s, r, TRAIN_TEMPLATES[0]), world.facts[(s, r)]) for s, r in pairs])
            for name, pairs in (("neighbours", neighbours), ("others", others))}
    prompts = [question(edit.subject, edit.relation, t) for t in ALL_TEMPLATES]
    return {"p_new": next_token_probs(model, tok, prompts, [edit.new] * len(prompts))} | kept


@torch.no_grad()
def next_token_probs(model, tok, prompts: Sequence[str], targets: Sequence[str]) -> np.ndarray:
    """p(target | prompt) for each pair."""
    enc = tok(list(prompts), return_tensors="pt", padding=True)
    p = torch.softmax(model(**enc).logits[:, -1], -1)
    return p[torch.arange(len(prompts)), torch.tensor(tok.convert_tokens_to_ids(list(targets)))].numpy()


def query_flops(model, tok, prompts: Sequence[str], encoder_params: int = 0) -> float:
    """Mean inference FLOPs per question: the LM's forward pass over the prompt (with any retrieved context),
    plus 2 × encoder parameters × tokens for a retriever's sentence encoder."""
    lengths = [len(p.split()) for p in prompts]
    return float(np.mean([flops.forward_flops(model.config, n) + 2 * encoder_params * (n + 2) for n in lengths]))
