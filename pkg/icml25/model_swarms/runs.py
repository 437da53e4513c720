"""Notebook 02's runs, as one JSON result: computed by the book's builder in its warm-up (`CHAPTER_RESULTS`) and read
back by the notebook with the same settings, as knowledge_editing's lifelong stream is."""

from __future__ import annotations

import sys

import numpy as np

from ..core import arithmetic, generation, models, zoo
from . import baselines, experiment, lora, scales, scoring, search, tasks
from .experiment import (UTILITIES, low_data_run, make_setup, null_run, run_seed, test_accuracy, test_utility, tune,
                         weak_to_strong_indicators)
from .search import SwarmResult

#: the ablations of the search (single-task), as overrides of the tuned hyperparameters
ABLATIONS = {"no repel": {"repel": 0.0}, "deterministic weights": {"weight_randomness": False},
             "no restarts": {"restart_patience": None}}


def search_record(res: SwarmResult) -> dict:
    """What the notebook reads of one search: the particles' utilities and the global best and worst per round, the
    restarts and utility calls, and the final global best's particle and its initial rank (the particles' positions,
    D numbers each per round, are left out)."""
    return {"utilities": res.utilities, "g_history": res.g_history, "g_worst_history": res.g_worst_history,
            "g_particle": res.g_particle, "initial_rank": res.initial_rank, "n_iterations": res.n_iterations,
            "n_evaluations": res.n_evaluations, "restarts": res.restarts}


def adaptation_runs(cfg) -> dict:
    """Everything notebook 02 computes, in its order: the setup's checks (each expert against the base model on its
    own domain, the base model and each expert on the target's test set), the hyperparameters tuned on dev, every
    utility's search on every seed (single-task against every baseline and the oracle), the weak-to-strong
    indicators of those searches and of the null control's, the ablations and the low-data runs."""
    setup = make_setup(cfg)
    out = {"own_domain": setup.own_domain, "expert_gain_own_domain": setup.expert_gain_own_domain,
           "base_test": test_utility(setup, "single-task", np.zeros((1, setup.experts.shape[1])))[0],
           "expert_test": test_accuracy(setup, "single-task", np.eye(len(setup.experts)))}
    hyper, out["scored"] = tune(setup, cfg)
    out["hyper"] = hyper
    runs = {kind: [run_seed(setup, cfg, kind, s, hyper, baselines=kind == "single-task") for s in cfg.seeds]
            for kind in UTILITIES}
    searches = [r.pop("swarm") for kind in UTILITIES for r in runs[kind]]
    for r, res in zip([r for kind in UTILITIES for r in runs[kind]], searches, strict=True):
        r["search"] = search_record(res)
    null_runs = [null_run(setup, cfg, s, hyper, kind) for kind in UTILITIES for s in cfg.seeds]
    out |= {"runs": runs, "weak_to_strong": weak_to_strong_indicators(searches),
            "null_weak_to_strong": weak_to_strong_indicators(null_runs),
            "null_initial_ranks": [r.initial_rank for r in null_runs]}
    full_search = {s: r["test"]["swarm"] for s, r in zip(cfg.seeds, runs["single-task"])}
    ablation = {"Model Swarms": [full_search[s] if s in full_search else
                                 run_seed(setup, cfg, "single-task", s, hyper, baselines=False)["test"]["swarm"]
                                 for s in cfg.ablation_seeds]}
    ablation |= {name: [run_seed(setup, cfg, "single-task", s, hyper, baselines=False, **kw)["test"]["swarm"]
                        for s in cfg.ablation_seeds] for name, kw in ABLATIONS.items()}
    out["ablation"] = ablation
    out["low"] = [low_data_run(setup, cfg, s, cfg.low_n_dev, hyper) for s in cfg.seeds]
    return zoo.as_json(out)


def _sources() -> tuple:
    """The code :func:`adaptation_runs` runs, which addresses its cache: this module, every other part of the
    package but the claims and the 2-D toy, and the core modules it calls (the zoo's cache adds the rest of the
    core)."""
    return (sys.modules[__name__], experiment, scales, search, baselines, tasks, lora, scoring, arithmetic, models,
            generation)


def warm_up_runs(cfg) -> tuple[dict, bool]:
    """:func:`adaptation_runs` and whether it was computed now. With the zoo's base model it is cached
    (`icml25.core.zoo.results`), addressed by every knob of `cfg`, the base model's own zoo address and the code
    that computes it, so the book's builder runs it in its warm-up and notebook 02 reads it back; any other
    `cfg.model` (a folder or a Hub id, whose weights the address could not see) is computed in place, every time."""
    if cfg.model not in zoo.names():
        return adaptation_runs(cfg), True
    settings = dict(cfg) | {"base_model": zoo.key(cfg.model, cfg.scale, 0)}
    return zoo.results("swarm-runs", settings, lambda: adaptation_runs(cfg), sources=_sources())
