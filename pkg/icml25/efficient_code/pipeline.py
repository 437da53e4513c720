"""The EffiCoder pipeline at toy scale: generate candidates, execute them, select the fastest correct one,
fine-tune a tiny LM on each dataset and evaluate what it writes.

Selection rule (the paper's abstract says "lowest execution time and memory consumption" without saying how the
two combine; this is our reading): among candidates that pass every unit test, the lowest ET, ties broken by
TMU, then MU, then the program text, so the choice is deterministic. Two measured times count as tied when they
are within `TIE_TOLERANCE` of each other, and the contenders' times are medians of `SELECTION_RUNS` sandbox runs,
so the choice does not depend on the timing noise of one build (:func:`select_fastest`). A task with no correct
candidate is dropped.
"""

from __future__ import annotations

import math
import sys
from collections import Counter

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy import stats

from ..core import generation, models, tinylm, train, zoo
from ..core.seeding import numpy_rng, torch_generator
from . import tasks as T
from .sandbox import Execution, Limits, run_candidate


TIE_TOLERANCE = 0.35
"""Measured ETs (then TMUs, then MUs) within this relative distance of the lowest count as tied. Declared on the
calibration seeds 0-2 and 20-25 (issue 54), before any verdict under it: there, the same program re-measured in a
fresh sandbox moved ET by a median |log| of 0.017 and a 99th percentile of 0.20 (at most 0.50, a loaded machine),
and the ratio of a distinct correct candidate's ET to its task's fastest lay either in 1.00-1.30 (programs of
about equal cost: gen_sum's three variants, top_k's sort and heap at c = 10) or from 1.42 up, so a tolerance of
35% sits in that gap. With no tolerance, 4 of 9 calibration seeds chose a different program for one task in a
second measurement of the same candidates."""

SELECTION_RUNS = 3
"""A contender (`CONTENDER`) is measured this many times in fresh sandboxes and selected on its medians, so one
outlier run cannot carry it across the tolerance."""

CONTENDER = 2.0
"""A correct candidate whose first ET is within this factor of its task's fastest is a contender: re-measured
(`SELECTION_RUNS`), since one noisy run could put it on either side of the tolerance."""


class Measurer:
    """Runs (task, program) pairs in the sandbox, `workers` at a time, and remembers every result: a program
    that several generators (or models) write for the same task is executed once."""

    def __init__(self, perf_size: int, limits: Limits = Limits(), workers: int = 2):
        self.perf_size, self.limits, self.workers = perf_size, limits, workers
        self.cache: dict[tuple[T.Task, str], Execution] = {}

    def __call__(self, pairs: Sequence[tuple[T.Task, str]]) -> list[Execution]:
        todo = list(dict.fromkeys(p for p in pairs if p not in self.cache))
        with ThreadPoolExecutor(self.workers) as pool:
            for pair, res in zip(todo, pool.map(self._run, todo)):
                self.cache[pair] = res
        return [self.cache[p] for p in pairs]

    def _run(self, pair: tuple[T.Task, str]) -> Execution:
        task, source = pair
        tests, perf = T.unit_tests(task, self.perf_size)
        return run_candidate(source, tests, perf, limits=self.limits)

    def contenders(self, task: T.Task, candidates: Sequence[tuple[str, Execution]],
                   runs: int = SELECTION_RUNS) -> list[tuple[str, Execution]]:
        """`candidates` `(program, Execution)` of `task` as :func:`select_fastest` reads them: when more than one
        correct candidate is within `CONTENDER` times the fastest ET, each of those is run `runs` - 1 more times in
        fresh sandboxes and stands for the median of its runs (:func:`median_execution`)."""
        fastest = min((e.time for _, e in candidates if e.passed), default=math.inf)
        near = {src for src, e in candidates if e.passed and e.time <= CONTENDER * fastest}
        if len(near) < 2:
            return list(candidates)
        jobs = [(task, src) for src in sorted(near) for _ in range(runs - 1)]
        with ThreadPoolExecutor(self.workers) as pool:
            fresh = list(pool.map(self._run, jobs))
        again = {src: [e for (_, s), e in zip(jobs, fresh) if s == src] for src in near}
        return [(src, median_execution([e, *again[src]]) if src in near else e) for src, e in candidates]

    def canonical(self, tasks: Sequence[T.Task]) -> dict[T.Task, Execution]:
        """The canonical efficient solution of each task, measured: the denominator of NET, NMU, NTMU."""
        progs = [(t, T.program(t.family, T.FAMILIES[t.family].canonical, t.c)) for t in tasks]
        out = dict(zip(tasks, self(progs)))
        for (t, src), e in zip(progs, out.values()):
            if not e.passed:  # a reference that cannot be measured (a wall-clock limit on a loaded machine)
                self.cache.pop((t, src))
                out[t] = self([(t, src)])[0]
                if not out[t].passed:
                    raise RuntimeError(f"the canonical solution of {t} failed twice in the sandbox: "
                                       f"{out[t].status} {out[t].detail}")
        return out


def select_fastest(candidates: Sequence[tuple[str, Execution]], tolerance: float = TIE_TOLERANCE) -> str | None:
    """The selected program: the correct candidate with the lowest execution time (the paper's rule), where times
    within `tolerance` of the lowest count as tied; among tied candidates the lowest TMU, then the lowest MU, with
    the same tolerance, then the first program text. None when no candidate is correct."""
    tied = [(src, e) for src, e in candidates if e.passed]
    for cost in (lambda e: e.time, lambda e: e.area, lambda e: e.peak):
        lowest = min((cost(e) for _, e in tied), default=0.0)
        tied = [(src, e) for src, e in tied if cost(e) <= lowest * (1 + tolerance)]
    return min((src for src, _ in tied), default=None)


def median_execution(runs: Sequence[Execution]) -> Execution:
    """One program's ET, MU and TMU as the medians over its passing runs."""
    ok = [e for e in runs if e.passed]
    return Execution("PASS", f"median of {len(ok)} runs", time=float(np.median([e.time for e in ok])),
                     peak=float(np.median([e.peak for e in ok])), area=float(np.median([e.area for e in ok])))


def normalised(e: Execution, canonical: Execution) -> tuple[float, float, float]:
    """(NET, NMU, NTMU) of one passing execution: its ET, MU and TMU divided by the canonical solution's."""
    return e.time / canonical.time, e.peak / canonical.peak, e.area / max(canonical.area, 1e-12)


# --- candidates and datasets ---------------------------------------------------------------------------------


def sample_programs(model, tok, tasks: Sequence[T.Task], max_tokens: int, temperature: float = 0.0,
                    generator: torch.Generator | None = None) -> list[str]:
    """Programs the LM writes for each task's prompt (greedy at temperature 0)."""
    out = generation.generate(model, tok, [t.prompt for t in tasks], max_new_tokens=max_tokens,
                              temperature=temperature, generator=generator)
    return [T.from_tokens(text.split()) for text in out.texts]


def candidate_pool(tasks: Sequence[T.Task], seed: int, lm_sampler=None) -> dict[T.Task, list[tuple[str, str]]]:
    """Per task, one candidate `(generator name, program)` from each templated generator, plus one from
    `lm_sampler(tasks) -> programs` when given (the small LM sampling programs)."""
    rng = numpy_rng(seed, "candidates")
    pool = {t: [(g.name, g(t, rng)) for g in T.TEMPLATE_GENERATORS] for t in tasks}
    if lm_sampler is not None:
        for t, src in zip(tasks, lm_sampler(tasks)):
            pool[t].append(("small-LM", src))
    return pool


@dataclass(frozen=True)
class Datasets:
    random: list[tuple[T.Task, str]]  # (A) a random candidate, unverified
    random_correct: list[tuple[T.Task, str]]  # (B) a random correct candidate
    fastest_correct: list[tuple[T.Task, str]]  # (C) the selected candidate (EffiCoder)


def build_datasets(pool: dict, measure: Measurer, seed: int) -> Datasets:
    rng = numpy_rng(seed, "datasets")
    a, b, c = [], [], []
    for task, cands in pool.items():
        srcs = [s for _, s in cands]
        execs = measure([(task, s) for s in srcs])
        a.append((task, srcs[rng.integers(len(srcs))]))
        correct = [s for s, e in zip(srcs, execs) if e.passed]
        if correct:
            b.append((task, correct[rng.integers(len(correct))]))
            c.append((task, select_fastest(measure.contenders(task, list(zip(srcs, execs))))))
    return Datasets(a, b, c)


def mix(slow: Sequence, fast: Sequence, share: float, seed: int) -> list:
    """Per task, the `fast` dataset's program with probability `share`, else the `slow` one's (same tasks)."""
    rng = numpy_rng(seed, "mix", share)
    fast_by_task = dict(fast)
    return [(t, fast_by_task[t] if rng.random() < share else s) for t, s in slow]


def dataset_efficiency(data: Sequence[tuple[T.Task, str]], measure: Measurer) -> tuple[float, float]:
    """Mean NET of a training set's correct programs (the x-axis of the paper's correlation figure), and their
    geometric mean: the typical program's NET, which one task with a slow-only solution thousands of times its
    canonical's cannot dominate as it does the mean."""
    canon = measure.canonical(sorted({t for t, _ in data}, key=lambda t: (t.family, t.c)))
    nets = [normalised(e, canon[t])[0] for (t, _), e in zip(data, measure(list(data))) if e.passed]
    return (float(np.mean(nets)), float(stats.gmean(nets))) if nets else (float("nan"), float("nan"))


# --- the tiny code LM ----------------------------------------------------------------------------------------


def code_tokenizer(model: str, constants: Sequence[int]):
    """The code LM's tokenizer: one token per program line and per constant for a fresh tiny model (`model` a
    :data:`icml25.core.tinylm.PRESETS` name), else the checkpoint's own (a line token is then a few of its tokens)."""
    if model in tinylm.PRESETS:
        return tinylm.word_tokenizer(T.vocabulary(constants))
    return models.load(model, device="cpu")[1]


def code_model(model: str, tok, seed: int, max_len: int):
    """The code LM before fine-tuning: a tiny Llama of preset `model` initialised from `seed` (trained from
    scratch, as at smoke and ci), or any causal-LM checkpoint (a save_pretrained folder or a Hub id, loaded with
    :func:`icml25.core.models.load`; `tok` must be its tokenizer)."""
    if model in tinylm.PRESETS:
        return tinylm.make_model(model, tok, seed, max_len=max_len)
    return models.load(model)[0]


def finetune(data: Sequence[tuple[T.Task, str]], tok, cfg, seed: int, steps: int | None = None):
    """The code LM (:func:`code_model`) fine-tuned on prompt -> program-token pairs (the SFT step, Section 3.3)."""
    model = code_model(cfg.model, tok, seed, max_len=cfg.max_tokens + 4)
    prompts = [t.prompt for t, _ in data]
    completions = [" ".join(T.to_tokens(s, t.c)) for t, s in data]
    batches = train.lm_batches(tok, prompts, completions, cfg.batch_size, seed)
    result = train.train(model, batches, steps or cfg.steps, lr=cfg.lr, desc="sft")
    return model, result.losses


@dataclass(frozen=True)
class Evaluation:
    pass_at_1: float
    net: float  # mean over passing tasks of ET / ET(canonical)
    nmu: float
    ntmu: float
    programs: list[str]
    log_et: list[float]  # per held-out task (in order), log ET of the program written; NaN where it fails


def paired_log_et_ratio(a: Evaluation, b: Evaluation) -> float:
    """Mean over the held-out tasks both models solve of log(ET_a / ET_b): each task's canonical denominator cancels,
    and both models are compared on the same tasks (NaN when they solve none in common)."""
    both = np.isfinite(a.log_et) & np.isfinite(b.log_et)
    return float(np.mean(np.subtract(a.log_et, b.log_et)[both])) if both.any() else float("nan")


def evaluate(model, tok, tasks: Sequence[T.Task], measure: Measurer, max_tokens: int) -> Evaluation:
    """Greedy pass@1 on held-out tasks, and NET / NMU / NTMU averaged over the tasks it solves."""
    progs = sample_programs(model, tok, tasks, max_tokens)
    execs = measure(list(zip(tasks, progs)))
    canon = measure.canonical(tasks)
    ratios = np.array([normalised(e, canon[t]) for t, e in zip(tasks, execs) if e.passed]).reshape(-1, 3)
    means = ratios.mean(0) if len(ratios) else np.full(3, np.nan)
    log_et = [math.log(e.time) if e.passed else math.nan for e in execs]
    return Evaluation(float(np.mean([e.passed for e in execs])), *map(float, means), progs, log_et)


def lm_sampler(pool_tasks: Sequence[T.Task], tok, cfg, seed: int):
    """The 'small LM' generator: a tiny LM briefly trained on the uniform generator's unverified programs, then
    sampled at temperature 1."""
    rng = numpy_rng(seed, "lm-generator")
    uniform = T.TEMPLATE_GENERATORS[1]
    model, _ = finetune([(t, uniform(t, rng)) for t in pool_tasks], tok, cfg, seed, steps=cfg.generator_steps)
    g = torch_generator(seed, "lm-sampling")
    return lambda tasks: sample_programs(model, tok, tasks, cfg.max_tokens, temperature=1.0, generator=g)


# --- the experiment ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    """One fine-tuned model: its training set's efficiency (mean and geometric-mean NET, `dataset_efficiency`) and
    what it generates on held-out tasks."""

    name: str
    train_net: float
    train_net_geo: float
    losses: list[float]
    evaluation: Evaluation


def run_seed(cfg, seed: int, measure: Measurer) -> dict[str, Arm]:
    """One seed of the whole pipeline: split tasks, generate and execute candidates (three templated generators
    and a small LM), build datasets A/B/C and the B→C mixtures of `cfg.mix_shares`, fine-tune one tiny LM per
    distinct dataset, and evaluate each on the held-out tasks. Keys: "random", "random_correct",
    "fastest_correct", and "mix=<share>" for every share."""
    tasks_all = T.all_tasks(cfg.families, cfg.constants)
    train_tasks, test_tasks = T.split_tasks(tasks_all, cfg.n_test, seed)
    tok = code_tokenizer(cfg.model, cfg.constants)
    pool = candidate_pool(train_tasks, seed, lm_sampler(train_tasks, tok, cfg, seed))
    data = build_datasets(pool, measure, seed)
    sets = {"random": data.random, "random_correct": data.random_correct, "fastest_correct": data.fastest_correct}
    sets |= {f"mix={p:g}": mix(data.random_correct, data.fastest_correct, p, seed) for p in cfg.mix_shares}
    trained: dict[tuple, Arm] = {}
    arms = {}
    for name, ds in sets.items():
        key = tuple(ds)
        if key not in trained:
            model, losses = finetune(ds, tok, cfg, seed)
            trained[key] = Arm(name, *dataset_efficiency(ds, measure), losses,
                               evaluate(model, tok, test_tasks, measure, cfg.max_tokens))
        arms[name] = trained[key]
    return arms


def et_noise(tasks: Sequence[T.Task], measure: Measurer) -> float:
    """The noise floor of ET: the median over `tasks` of |log(ET of a fresh measurement / ET of the cached one)|
    of the canonical solutions (the denominators of NET), each re-run in a fresh sandbox."""
    canon = measure.canonical(tasks)
    fresh = Measurer(measure.perf_size, measure.limits, measure.workers).canonical(tasks)
    return float(np.median([abs(np.log(fresh[t].time / canon[t].time)) for t in tasks]))


def variant_noise(families: Sequence[str], c: int, perf_size: int, runs: int, limits: Limits = Limits(),
                  workers: int = 2) -> dict[tuple[str, str], np.ndarray]:
    """Every variant of every family at constant `c`, executed `runs` times in fresh sandboxes (no cache):
    {(family, variant): array [runs, 3] of (ET s, MU bytes, TMU byte·s)}, to show the measurement noise."""
    jobs = [(f, v) for f in families for v in T.FAMILIES[f].variants for _ in range(runs)]

    def one(job):
        task = T.Task(job[0], c)
        tests, perf = T.unit_tests(task, perf_size)
        return run_candidate(T.program(job[0], job[1], c), tests, perf, limits=limits)

    with ThreadPoolExecutor(workers) as pool:
        execs = list(pool.map(one, jobs))
    out: dict[tuple[str, str], list] = {}
    for job, e in zip(jobs, execs):
        if not e.passed:
            raise RuntimeError(f"canonical template {job} failed in the sandbox: {e.status} {e.detail}")
        out.setdefault(job, []).append((e.time, e.peak, e.area))
    return {k: np.array(v) for k, v in out.items()}


# --- the whole experiment, cached for the book's warm-up -----------------------------------------------------

RESULT_NAME = "ec-runs"
"""The name under which the book's builder runs :func:`run_experiment` in its warm-up (`CHAPTER_RESULTS`)."""


def run_experiment(cfg) -> dict:
    """:func:`run_seed` for every seed of `cfg` with one shared :class:`Measurer`, and the ET noise floor
    (:func:`et_noise`) on the first seed's held-out tasks, as JSON: {"runs": {seed: {arm: Arm as a dict}},
    "et_noise", "statuses" (sandbox verdicts of the distinct executions)}."""
    measure = Measurer(cfg.perf_size, workers=cfg.workers)
    runs = {str(s): {name: asdict(arm) for name, arm in run_seed(cfg, s, measure).items()} for s in cfg.seeds}
    held_out = T.split_tasks(T.all_tasks(cfg.families, cfg.constants), cfg.n_test, cfg.seeds[0])[1]
    statuses = Counter(e.status for e in measure.cache.values())
    return {"runs": runs, "et_noise": et_noise(held_out, measure), "statuses": dict(statuses)}


def experiment(cfg) -> tuple[dict[int, dict[str, Arm]], float, dict[str, int]]:
    """:func:`run_experiment`, cached like a zoo model (`icml25.core.zoo.results`, addressed by every knob of `cfg`
    and every part of this package), so the book's builder runs it once in its warm-up and the notebook reads it
    back. Returns (runs {seed: {arm: Arm}}, ET noise floor, sandbox verdict counts)."""
    stored, _ = zoo.results(RESULT_NAME, dict(cfg), lambda: run_experiment(cfg),
                            sources=zoo.chapter_modules(sys.modules[__name__]))
    runs = {int(s): {name: Arm(a["name"], a["train_net"], a["train_net_geo"], a["losses"],
                               Evaluation(**a["evaluation"]))
                     for name, a in arms.items()} for s, arms in stored["runs"].items()}
    return runs, stored["et_noise"], stored["statuses"]
