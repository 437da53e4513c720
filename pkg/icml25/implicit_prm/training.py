"""Training an implicit PRM on outcome labels: π_ref's own rollouts, preference pairs and their batches, the
objectives' training loop, π_ref with its log-prob cache, and this chapter's zoo entry (the CE PRM). Labelled
batches and training π_θ from a copy of π_ref are :mod:`icml25.core.implicit_reward`'s."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from ..core import arithmetic, models, zoo
from ..core.generation import encode_completions, select_rows
from ..core.implicit_reward import (ImplicitPRM, ReferenceCache, Rollouts, labelled_batches, train_from_reference,
                                    with_reference)
from ..core.seeding import torch_generator
from .objectives import OBJECTIVES, PAIRED
from .rollouts import sample_rollouts, train_problems
from .scales import _PRM, PRM_KEYS, PRM_NAME, config


def preference_pairs(data: Rollouts) -> list[tuple[int, int]]:
    """Every (correct, incorrect) pair of responses to the same prompt (indices into `data`)."""
    by_prompt: dict[int, tuple[list[int], list[int]]] = {}
    for k, (i, ok) in enumerate(zip(data.prompt_index, data.labels)):
        by_prompt.setdefault(i, ([], []))[0 if ok else 1].append(k)
    return [pair for good, bad in by_prompt.values() for pair in itertools.product(good, bad)]


def pair_batches(tokenizer, data: Rollouts, batch_size: int, seed: int, ref_cache: ReferenceCache | None = None):
    """Endless DPO / NCA batches: chosen rows first, then their rejected partners. Needs at least one pair."""
    pairs = preference_pairs(data)
    if not pairs:
        raise ValueError("DPO and NCA need a prompt with both a correct and an incorrect response; with one response "
                         "per instruction there are no pairs (use the CE objective)")
    g = torch_generator(seed, "dpo_batches")
    prompts, encoded = data.prompts, encode_completions(tokenizer, data.prompts, data.completions)
    half = max(1, batch_size // 2)
    while True:
        chosen = [pairs[i] for i in torch.randint(len(pairs), (half,), generator=g).tolist()]
        rows = [w for w, _ in chosen] + [lo for _, lo in chosen]
        p, c = [prompts[k] for k in rows], [data.completions[k] for k in rows]
        yield with_reference(select_rows(encoded, rows), p, c, ref_cache)


@dataclass
class Training:
    """How a PRM trained: its loss at every optimizer step."""

    losses: list[float]


def train_implicit_prm(base: PreTrainedModel, tokenizer, data: Rollouts, objective: str, beta: float,
                       steps: int, batch_size: int, lr: float, seed: int,
                       ref_cache: ReferenceCache | None = None) -> tuple[ImplicitPRM, Training]:
    """Train π_θ from a copy of `base` (which stays frozen as π_ref) on outcome labels with one of
    :data:`OBJECTIVES`, for `steps` optimizer steps (a fixed budget, as the paper trains for a fixed number of
    epochs: no step label ever decides anything about training). π_ref's log-probs of the training responses are
    computed once (`ref_cache`, a new :class:`ReferenceCache` of `base` when not given) and the returned PRM keeps
    them."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    ref_cache = ReferenceCache(base, tokenizer) if ref_cache is None else ref_cache
    if ref_cache.reference is not base:
        raise ValueError("ref_cache holds another model's log-probs than the base π_θ starts from")
    if objective in PAIRED:
        batches = pair_batches(tokenizer, data, batch_size, seed, ref_cache)
    else:
        batches = labelled_batches(tokenizer, data, batch_size, seed, mismatched=objective == "kto",
                                   ref_cache=ref_cache)
    prm, losses = train_from_reference(ref_cache, batches, OBJECTIVES[objective], beta, steps, lr,
                                       desc=f"implicit PRM ({objective}, β={beta:g})")
    return prm, Training(losses)


def training_rollouts(ref: ReferenceCache, cfg, seed: int) -> Rollouts:
    """π_ref's own rollouts on the training prompts, `responses_per_prompt` each at `temperature`,
    outcome-labelled: as in the paper, whose PRMs start from Llama-3.1-8B-Instruct and learn from that model's
    rollouts to UltraInteract's instructions (the candidates they rerank come from other generators)."""
    return sample_rollouts(ref.reference, ref.tokenizer, train_problems(cfg, seed), cfg.responses_per_prompt,
                           cfg.temperature, torch_generator(seed, "implicit_prm", "train_rollouts"))


def reference(cfg, base: str) -> ReferenceCache:
    """The model `base` (a zoo name, or any causal LM's folder or Hub id, through
    :func:`icml25.core.models.get`) as a frozen π_ref, with the cache of its log-probs that every PRM from it
    shares."""
    b = models.get(base, cfg.scale, cfg.ref_seed, alphabet=arithmetic.ALPHABET)
    b.model.eval()
    return ReferenceCache(b.model, b.tokenizer)


def train_arm(cfg, seed: int, data: Rollouts, objective: str, beta: float, ref: ReferenceCache):
    """One trained PRM of the experiment: from `ref`'s model, `train_steps` steps whatever its data (the paper
    compares PRMs trained on fewer responses per instruction by their best-of-N; how many steps each of its runs
    took was not checked, so matching the budget is this chapter's choice, the one that lets a PRM on less data
    learn)."""
    return train_implicit_prm(ref.reference, ref.tokenizer, data, objective, beta, cfg.train_steps, cfg.batch_size,
                              cfg.lr, seed, ref_cache=ref)


@zoo.register(PRM_NAME, _PRM)
def _build_prm(cfg, seed: int):
    ref = reference(cfg, cfg.model)
    data = training_rollouts(ref, cfg, seed)
    prm, run = train_arm(cfg, seed, data, "ce", cfg.beta, ref)
    return prm.policy, prm.tokenizer, {"losses": run.losses, "beta": cfg.beta,
                                       "train_accuracy": float(np.mean(data.labels))}


def load_prm(scale: str = "ci", seed: int = 0) -> ImplicitPRM:
    """This chapter's CE implicit PRM at `scale` from the zoo (trained once), paired with its reference."""
    settings = config(scale)
    z = zoo.get(PRM_NAME, scale, seed)
    base = models.get(settings.model, scale, settings.ref_seed, alphabet=arithmetic.ALPHABET)
    return ImplicitPRM(z.model, base.model, base.tokenizer, settings.beta)


def main_prm(cfg, seed: int, data: Rollouts | None = None,
             ref: ReferenceCache | None = None) -> tuple[ImplicitPRM, Training]:
    """The CE PRM with all `responses_per_prompt`: from the zoo when `cfg` has the zoo's settings, else trained
    (on `data`, π_ref's training rollouts, sampled here when not given). `ref`: π_ref = `cfg.model` with its
    log-prob cache (made here when not given)."""
    ref = reference(cfg, cfg.model) if ref is None else ref
    if all(cfg[k] == _PRM[cfg.scale][k] for k in PRM_KEYS):
        z = zoo.get(PRM_NAME, cfg.scale, seed)
        z.model.eval()
        return (ImplicitPRM(z.model, ref.reference, ref.tokenizer, cfg.beta, ref_cache=ref),
                Training(z.info["losses"]))
    if data is None:
        data = training_rollouts(ref, cfg, seed)
    return train_arm(cfg, seed, data, "ce", cfg.beta, ref)
