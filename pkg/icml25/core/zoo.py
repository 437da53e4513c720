"""The model zoo: named models trained once and cached, content-addressed, under `$ICML25_CACHE`.

An entry is a build function registered with its per-scale training settings::

    @zoo.register("arith-target", PRESETS)
    def build(cfg, seed): ... return model, tokenizer, info

`zoo.get("arith-target", scale, seed)` hashes the entry's name, settings, seed and the source code that builds it;
if a model with that hash is cached it is loaded with `from_pretrained`, otherwise it is trained, written to a
temporary folder and renamed into place (a half-written entry is never loaded). A file lock per entry keeps
two processes from training the same model at once.

`zoo.results(name, settings, compute, sources)` caches what a chapter computes before its experiment (a
learning-rate search, say) the same way: a JSON file addressed by the name, the settings and the source code of the
modules that compute it, written once under a lock and renamed into place.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import pkgutil
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from . import generation, seeding, tinylm, train
from .config import Config, make_config
from .paths import cache_dir
from .seeding import one_thread

Builder = Callable[[Config, int], tuple[PreTrainedModel, PreTrainedTokenizerFast, dict]]


@dataclass(frozen=True)
class Entry:
    name: str
    config: Callable[..., Config]
    build: Builder


@dataclass
class ZooModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    info: dict  # what the build reported: loss curve, accuracy, training seconds, ...
    path: Path
    trained_now: bool


_REGISTRY: dict[str, Entry] = {}
_CORE_SOURCES = (tinylm, train, generation, seeding)


def register(name: str, presets: Mapping[str, Mapping[str, Any]]) -> Callable[[Builder], Builder]:
    def deco(build: Builder) -> Builder:
        _REGISTRY[name] = Entry(name, make_config(presets), build)
        return build

    return deco


def names() -> list[str]:
    return sorted(_REGISTRY)


def _entry(name: str) -> Entry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown zoo model {name!r}; registered models: {', '.join(names()) or 'none'}")
    return _REGISTRY[name]


def code_digest(sources: Sequence[ModuleType]) -> str:
    """The SHA-256 of the source code of `sources` (each module once, in order): what a cache entry was made by."""
    code = "".join(inspect.getsource(m) for m in dict.fromkeys(sources))
    return hashlib.sha256(code.encode()).hexdigest()


def chapter_modules(module: ModuleType) -> list[ModuleType]:
    """`module`, or, when it is part of a chapter's package (`icml25.<slug>.<part>`), every part of that package in
    name order: a chapter split by idea trains its models with code from several parts."""
    package = module.__name__.rpartition(".")[0]
    if package.count(".") != 1 or package.split(".")[1] in ("core", "ops", "book"):
        return [module]
    parts = sorted(p.name for p in pkgutil.iter_modules(sys.modules[package].__path__))
    return [sys.modules[package]] + [importlib.import_module(f"{package}.{p}") for p in parts]


def key(name: str, scale: str, seed: int) -> str:
    """The content address: entry name, its settings at `scale`, the seed, and the code that trains it — the
    registering module (every part of its chapter's package, for a chapter split by idea) and the core, including
    the shared pieces chapter entries start from or train with (the reasoners, so a retrained reasoner also
    retrains what was built on it; the implicit reward, which implicit_prm's PRM trains with), and this module
    (which sets how models are trained)."""
    from . import arithmetic, facts, implicit_reward, reasoners

    entry = _entry(name)
    sources = (*chapter_modules(inspect.getmodule(entry.build)), *_CORE_SOURCES, arithmetic, facts, reasoners,
               implicit_reward, inspect.getmodule(key))
    blob = json.dumps({"name": name, "config": dict(entry.config(scale)), "seed": seed,
                       "code": code_digest(sources)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def path(name: str, scale: str = "ci", seed: int = 0) -> Path:
    return cache_dir() / f"{name}-{scale}-s{seed}-{key(name, scale, seed)}"


def ensure(name: str, scale: str = "ci", seed: int = 0) -> tuple[Path, bool]:
    """The folder of the trained model `name` at `scale` from `seed`, trained and cached first if it is not
    there yet; and whether it was trained now."""
    entry, final = _entry(name), path(name, scale, seed)
    final.parent.mkdir(parents=True, exist_ok=True)
    trained_now = False
    with FileLock(str(final) + ".lock"):
        if not (final / "info.json").exists():
            start = time.perf_counter()
            with one_thread():  # a matmul's sum order depends on the thread count: same model whoever trains it
                model, tokenizer, info = entry.build(entry.config(scale), seed)
            info = dict(info, train_seconds=time.perf_counter() - start, n_params=tinylm.n_params(model))
            tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tinylm.save(model, tokenizer, tmp)
            (tmp / "info.json").write_text(json.dumps(info))
            tmp.rename(final)
            trained_now = True
    return final, trained_now


def get(name: str, scale: str = "ci", seed: int = 0) -> ZooModel:
    """The trained model `name` at `scale` from `seed`: loaded from the cache, or trained once and cached. It is
    read back with :func:`icml25.core.models.load`, the loader of every checkpoint, on the CPU it was trained on."""
    from . import models

    final, trained_now = ensure(name, scale, seed)
    model, tokenizer = models.load(final, device="cpu", dtype=torch.float32)
    return ZooModel(model, tokenizer, json.loads((final / "info.json").read_text()), final, trained_now)


def results_path(name: str, settings: Mapping[str, Any], sources: Sequence[ModuleType]) -> Path:
    """Where `results` keeps `name` computed with `settings` by the code of `sources` (and the core's)."""
    code = code_digest((*sources, *_CORE_SOURCES, inspect.getmodule(key)))
    blob = json.dumps({"name": name, "settings": dict(settings), "code": code},
                      sort_keys=True, default=str)
    return cache_dir() / "results" / f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json"


def _numpy(x):
    if isinstance(x, (np.ndarray, np.generic)):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def _dumps(value) -> str:
    """`value` as JSON text, numpy arrays and numbers included (as lists and numbers)."""
    return json.dumps(value, default=_numpy)


def as_json(value):
    """`value` as `results` gives it back: numpy arrays and numbers become lists and numbers, tuples lists, dict
    keys strings (for results computed in place, so both paths hand a notebook the same types)."""
    return json.loads(_dumps(value))


def results(name: str, settings: Mapping[str, Any], compute: Callable[[], Any],
            sources: Sequence[ModuleType]) -> tuple[Any, bool]:
    """`compute()` (JSON-serialisable, numpy arrays and numbers included), cached under `$ICML25_CACHE` by `name`, `settings` and the source code of
    `sources`: computed on one thread and written once (under a file lock, to a temporary name, then renamed), read
    back after that. Returns the result and whether it was computed now."""
    final = results_path(name, settings, sources)
    final.parent.mkdir(parents=True, exist_ok=True)
    computed_now = False
    with FileLock(str(final) + ".lock"):
        if not final.exists():
            with one_thread():
                value = compute()
            tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
            tmp.write_text(_dumps(value))
            tmp.rename(final)
            computed_now = True
    return json.loads(final.read_text()), computed_now
