"""The experiment: the frozen base model with its trained experts (`Setup`), the utilities, the swarm's
hyperparameters tuned on dev, one seed's search against every baseline, the low-data comparison and the
weak-to-strong null control."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core import arithmetic, models
from ..core.seeding import numpy_rng
from .baselines import (best_expert, greedy_soup, hill_climbing, lorahub, merge_search, random_search,
                        task_vectors, uniform_soup)
from .lora import initial_adapter, segments, unflatten
from .scales import CHAPTER
from .scoring import Features, features, scores, top_logits, train_expert
from .search import SwarmResult, sample_hyperparameters, swarm_search
from .tasks import DOMAINS, domain_problems, target_problems

UTILITIES = ("single-task", "multi-task", "reward")


@dataclass
class Setup:
    """The frozen base model, the trained experts, their own-domain check and the test sets, shared by every seed."""

    model: object
    tokenizer: object
    rank: int
    experts: np.ndarray  # [K, D]
    origin: np.ndarray  # [D], the adapter every expert started from (shared A₀, B = 0)
    test: dict[str, Features]  # per utility
    own_domain: dict[str, dict[str, float]]  # per domain: base and expert exact-solution accuracy on its test set

    @property
    def expert_gain_own_domain(self) -> list[float]:
        return [d["expert"] - d["base"] for d in self.own_domain.values()]


def make_setup(cfg) -> Setup:
    """Load the base model `cfg.model` (a zoo name, a checkpoint folder or a Hub id), freeze it, fine-tune one
    LoRA expert per domain on its cached features, and score base and expert on a held-out test set of each
    expert's own domain."""
    base = models.get(cfg.model, cfg.scale, 0, alphabet=arithmetic.ALPHABET)
    model, tok = base.model, base.tokenizer
    model.requires_grad_(False)
    experts, own = [], {}
    for i, (name, ops) in enumerate(DOMAINS.items()):
        feats = features(model, tok, domain_problems(ops, 2, 4, cfg.n_train, 0, "train"))
        experts.append(train_expert(model, feats, cfg.rank, cfg.expert_steps, seed=i))
        held_out = features(model, tok, domain_problems(ops, 2, 4, cfg.n_own_test, 0, "own-test"))
        acc = exact_accuracy(model, held_out, cfg.rank, np.stack([np.zeros_like(experts[-1]), experts[-1]]))
        own[name] = {"base": float(acc[0]), "expert": float(acc[1])}
    test = {kind: features(model, tok, target_problems(kind, cfg.n_test, 0, "test")) for kind in ("single-task",
                                                                                                  "multi-task")}
    test["reward"] = test["single-task"]
    return Setup(model, tok, cfg.rank, np.array(experts), initial_adapter(model, cfg.rank), test, own)


def exact_accuracy(model, feats: Features, rank: int, x: np.ndarray) -> np.ndarray:
    """Exact-solution accuracy [N] of the adapters x [N, D] (zeros: the base model) on `feats`."""
    return scores(model, feats, unflatten(model, torch.as_tensor(x, dtype=torch.float32), rank))["exact"].double().numpy()


def utility_fn(setup: Setup, feats: Features, kind: str) -> Callable[[np.ndarray], np.ndarray]:
    """f: parameter rows [N, D] → utility [N]: exact-solution accuracy (single- and multi-task) or the share
    of correct steps (reward)."""
    metric = "steps" if kind == "reward" else "exact"

    def f(x: np.ndarray) -> np.ndarray:
        lora = unflatten(setup.model, torch.as_tensor(np.atleast_2d(x), dtype=torch.float32), setup.rank)
        return scores(setup.model, feats, lora)[metric].double().numpy()

    return f


def loss_fn(setup: Setup, feats: Features) -> Callable[[np.ndarray], np.ndarray]:
    """Parameter rows [N, D] → mean cross-entropy [N] of the solution tokens of `feats` (LoraHub's objective)."""

    def f(x: np.ndarray) -> np.ndarray:
        lora = unflatten(setup.model, torch.as_tensor(np.atleast_2d(x), dtype=torch.float32), setup.rank)
        with torch.no_grad():
            logits = top_logits(setup.model, feats, lora)  # [N, P, V]
            ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), feats.target.expand(len(logits), -1),
                                                   reduction="none")
        return ce.mean(1).double().cpu().numpy()

    return f


def noise_utility(seed: int, *stream) -> Callable[[np.ndarray], np.ndarray]:
    """The null control's utility: seeded Gaussian noise, one value per particle, unrelated to the parameters."""
    rng = numpy_rng(seed, CHAPTER, "noise-utility", *stream)
    return lambda x: rng.normal(size=len(np.atleast_2d(x)))


def test_utility(setup: Setup, kind: str, x: np.ndarray) -> np.ndarray:
    """Test utility of adapters x [M, D] on the target of `kind`."""
    return utility_fn(setup, setup.test[kind], kind)(np.atleast_2d(x))


def test_accuracy(setup: Setup, kind: str, coefficients: np.ndarray) -> np.ndarray:
    """Test utility of combinations of the experts ([M, K] coefficients) on the target of `kind`."""
    return test_utility(setup, kind, np.atleast_2d(coefficients) @ setup.experts)


def dev_features(setup: Setup, cfg, kind: str, seed: int, stream: str = "dev") -> Features:
    """A fresh dev set of `cfg.n_dev` problems of the target of `kind`, drawn under `seed`."""
    return features(setup.model, setup.tokenizer, target_problems(kind, cfg.n_dev, seed, stream))


def tune(setup: Setup, cfg) -> tuple[dict, list[tuple[dict, float]]]:
    """The swarm's hyperparameters chosen on dev: `cfg.tune_configs` draws from the official sweep, each searched on
    a dev set of every tuning seed (seeds apart from the evaluation seeds) and scored by its global best on a
    second, held-out dev set of the same size; the draw with the best mean wins. The test set is never seen."""
    draws = sample_hyperparameters(cfg.tune_configs, 0)
    scored = []
    for h in draws:
        gains = []
        for s in cfg.tune_seeds:
            f = utility_fn(setup, dev_features(setup, cfg, "single-task", s), "single-task")
            check_f = utility_fn(setup, dev_features(setup, cfg, "single-task", s, "dev-check"), "single-task")
            res = swarm_search(setup.experts, f, s, cfg.n_particles, cfg.max_iteration, cfg.patience, **h)
            gains.append(float(check_f(res.global_best[None])[0]))
        scored.append((h, float(np.mean(gains))))
    return max(scored, key=lambda t: t[1])[0], scored


def run_seed(setup: Setup, cfg, kind: str, seed: int, hyper: dict | None = None, baselines: bool = True,
             **swarm_overrides) -> dict:
    """One search on a fresh dev set of `cfg.n_dev` problems: the swarm (hyperparameters `hyper`, then
    `swarm_overrides`, e.g. the ablations) and, with `baselines`, every composition baseline at the swarm's budget
    of utility calls on the same dev set, and the oracle (a LoRA fine-tuned on the dev set itself)."""
    dev = dev_features(setup, cfg, kind, seed)
    f = utility_fn(setup, dev, kind)
    res = swarm_search(setup.experts, f, seed, cfg.n_particles, cfg.max_iteration, cfg.patience,
                       **{**(hyper or {}), **swarm_overrides})
    init_best = res.coefficients[0][int(np.argmax(res.initial_utilities))]
    out = {"swarm": res, "dev": {"swarm": res.g, "initial best": float(res.initial_utilities.max())},
           "test": dict(zip(("swarm", "initial best"),
                            test_accuracy(setup, kind, np.stack([res.global_best_coefficients, init_best]))))}
    if not baselines:
        return out
    k, budget = len(setup.experts), res.n_evaluations

    def fc(c):
        return f(np.atleast_2d(c) @ setup.experts)

    expert_dev = fc(np.eye(k))
    comps = {"best expert": best_expert(expert_dev), "uniform soup": uniform_soup(k, fc),
             "greedy soup": greedy_soup(expert_dev, fc),
             "random search": random_search(k, fc, budget, cfg.n_particles, seed)}
    comps["hill climbing"] = hill_climbing(comps["best expert"], fc, budget - k, cfg.n_particles, seed)
    params = {name: c.coefficients @ setup.experts for name, c in comps.items()}
    dev_u = {name: c.dev for name, c in comps.items()}
    calls = {name: c.n_evaluations for name, c in comps.items()}
    tau, segs = task_vectors(setup.experts, setup.origin), segments(setup.model, setup.rank)
    for name, method in (("task arithmetic", "task_arithmetic"), ("TIES", "ties"), ("DARE", "dare")):
        params[name], dev_u[name], calls[name] = merge_search(method, tau, setup.origin, f, budget, segs, seed)
    w, calls["LoraHub"] = lorahub(setup.experts, loss_fn(setup, dev), budget)
    params["LoraHub"] = w @ setup.experts
    dev_u["LoraHub"] = float(f(params["LoraHub"][None])[0])
    params["oracle"] = train_expert(setup.model, dev, setup.rank, cfg.expert_steps, seed=1000 + seed)
    dev_u["oracle"], calls["oracle"] = float(f(params["oracle"][None])[0]), 0
    names = list(params)
    out["dev"] |= dev_u
    out["test"] |= dict(zip(names, test_utility(setup, kind, np.stack([params[n] for n in names]))))
    out["calls"] = {"swarm": budget, **calls}
    out["expert_dev"] = expert_dev
    return out


def low_data_run(setup: Setup, cfg, seed: int, n_dev: int, hyper: dict | None = None) -> dict[str, float]:
    """The swarm and the oracle (a LoRA fine-tuned on the dev set) on a single-task dev set of `n_dev` problems
    drawn under `seed`: their test accuracies."""
    dev = features(setup.model, setup.tokenizer, target_problems("single-task", n_dev, seed, "dev"))
    res = swarm_search(setup.experts, utility_fn(setup, dev, "single-task"), seed, cfg.n_particles,
                       cfg.max_iteration, cfg.patience, **(hyper or {}))
    oracle = train_expert(setup.model, dev, setup.rank, cfg.expert_steps, seed=1000 + seed)
    swarm, oracle = test_utility(setup, "single-task", np.stack([res.global_best, oracle]))
    return {"swarm": float(swarm), "oracle": float(oracle)}


def null_run(setup: Setup, cfg, seed: int, hyper: dict | None = None, utility: str = "") -> SwarmResult:
    """The weak-to-strong null control: the same search (seed, particles, budget) as the real run of `utility` on
    `seed`, on `noise_utility` (a noise stream of its own per utility)."""
    return swarm_search(setup.experts, noise_utility(seed, utility), seed, cfg.n_particles, cfg.max_iteration, cfg.patience,
                        **(hyper or {}))


def weak_to_strong_indicators(runs: Sequence[SwarmResult]) -> dict[str, list[int]]:
    """Per run: 1 if the final global best's particle was not the initial best / started in the weaker half."""
    n = [len(r.initial_utilities) for r in runs]
    return {"not_initial_best": [int(r.initial_rank > 0) for r in runs],
            "from_weaker_half": [int(r.initial_rank >= k / 2) for r, k in zip(runs, n)]}
