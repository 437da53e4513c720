"""The experiment: the trained PRMs (arms) of a seed, and the whole run of one seed."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ..core import arithmetic, generation, implicit_reward, models, reasoners, zoo
from ..core.seeding import torch_generator
from .evaluation import (best_of_n, evaluate_prm, learning_metrics, position_rates, position_rewards, step_metrics,
                         verifier_scores)
from .objectives import PAIRED
from .reward import ReferenceCache
from .rollouts import sample_candidates, test_problems
from .scales import BASE, GENERATOR, PRM_NAME
from .training import main_prm, preference_pairs, reference, train_arm, training_rollouts


@dataclass(frozen=True)
class Arm:
    """One trained PRM: its name, objective, β, responses per instruction and the zoo model it starts from."""

    name: str
    objective: str
    beta: float
    responses: int
    base: str


def arms(cfg, seed: int) -> list[Arm]:
    """The trained PRMs of one seed: the main CE PRM and the CE PRM on one response per instruction at every seed;
    at `cfg.arm_seeds` the other objectives, the other β values, and the CE PRM started from the generator (the
    draft) instead of `cfg.model`, on the same responses (π_ref's rollouts, so not its own)."""
    n, b = cfg.responses_per_prompt, cfg.model
    out = [Arm("ce", "ce", cfg.beta, n, b), Arm("ce_n1", "ce", cfg.beta, 1, b)]
    if seed in cfg.arm_seeds:
        out += [Arm(obj, obj, cfg.beta, n, b) for obj in cfg.objectives if obj != "ce"]
        out += [Arm(f"ce_beta{x:g}", "ce", x, n, b) for x in cfg.betas if x != cfg.beta]
        other = GENERATOR if b != GENERATOR else BASE
        out.append(Arm(f"ce_from_{other.removeprefix('arith-')}", "ce", cfg.beta, n, other))
    return out


def run_seed(cfg, seed: int) -> dict:
    """The whole experiment for one seed: test candidates from the generator, training responses from π_ref
    (`cfg.model`); the position-only null and the two step verifiers of known quality; every arm of :func:`arms`,
    trained on the same instructions and evaluated on the same candidates, with its learning metrics on its
    training prompts (:func:`learning_metrics`). Each frozen π_ref scores the candidates and the training responses
    once (:class:`ReferenceCache`)."""
    gen = zoo.get(GENERATOR, cfg.scale, cfg.ref_seed)
    cands = sample_candidates(gen.model, gen.tokenizer, test_problems(cfg, seed), cfg.n_candidates,
                              cfg.candidate_temperature, torch_generator(seed, "implicit_prm", "candidates"))
    refs: dict[str, ReferenceCache] = {}  # one frozen π_ref per base model, its log-probs computed once

    def ref(name: str) -> ReferenceCache:
        if name not in refs:
            refs[name] = reference(cfg, name)
        return refs[name]

    data = training_rollouts(ref(cfg.model), cfg, seed)
    out = {"train_accuracy": float(np.mean(data.labels)), "arms": {}, "losses": {},
           "position": step_metrics(position_rewards(cands, position_rates(data)), cands),
           "verifiers": {str(n): best_of_n(cands, verifier_scores(cands, cfg.verifier_noise, seed), n)
                         for n in cfg.best_of}}
    for arm in arms(cfg, seed):
        subset = data.first(arm.responses)
        if arm.objective in PAIRED and not preference_pairs(subset):
            continue  # no prompt with both a right and a wrong response: nothing to pair
        if arm.name == "ce":
            prm, run = main_prm(cfg, seed, data, ref(arm.base))
        else:
            prm, run = train_arm(cfg, seed, subset, arm.objective, arm.beta, ref(arm.base))
        out["arms"][arm.name] = {**evaluate_prm(prm, cands, cfg.best_of),
                                 "train": learning_metrics(prm, data, arm.responses)}
        out["losses"][arm.name] = run.losses
    return out


def seed_results(cfg, seed: int) -> tuple[dict, bool]:
    """:func:`run_seed` as JSON (best-of-N results keyed by str(N)), and whether it was computed now. With the
    zoo's generator and base it is cached like a zoo model (`icml25.core.zoo.results`), addressed by every knob of
    `cfg` but the seed lists, the seed, the zoo addresses of the generator, the base and this seed's zoo PRM, and
    the chapter's code, so the book's builder computes it in its warm-up and notebook 02 reads it back. Any other
    `cfg.model` (a folder or a Hub id, whose weights no address sees) is computed in place, every time."""
    if cfg.model != BASE:
        return zoo.as_json(run_seed(cfg, seed)), True
    settings = {k: v for k, v in dict(cfg).items() if k not in ("seeds", "calibration_seeds")}
    settings.update(seed=seed, models={name: zoo.key(name, cfg.scale, s) for name, s in (
        (GENERATOR, cfg.ref_seed), (BASE, cfg.ref_seed), (PRM_NAME, seed))})
    sources = (*zoo.chapter_modules(sys.modules[__name__]), implicit_reward, arithmetic, generation, models,
               reasoners)
    return zoo.results("implicit-prm-runs", settings, lambda: run_seed(cfg, seed), sources=sources)


def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry): every verdict seed's
    :func:`seed_results`."""
    for s in cfg.seeds:
        seed_results(cfg, s)
