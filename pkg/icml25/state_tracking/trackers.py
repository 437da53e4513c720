"""The trained trackers: a design's runs trained together, registered in the zoo (`st-s3-…`, `st-s5-…`), fetched by
the notebooks, and trained ahead in the builder's warm-up."""

from __future__ import annotations

from ..core import zoo
from .batched import train_trackers
from .group import SUPPORTED_N, _check_n
from .settings import PRESETS_BY_GROUP, TRAIN_KEYS, config
from .training import CONDITIONS, TINY_MODEL, train_tracker

def design_runs(cfg, seed: int, condition: str) -> list[tuple[int, str]]:
    """The runs trained together with (`seed`, `condition`): every condition of each of `cfg.seeds` when `seed` is
    one of them, else that run alone. Fixed by the settings, not by which run is asked for first, so a run's model
    does not depend on the order in which the notebook fetches them."""
    if "seeds" in cfg and seed in cfg.seeds:
        return [(s, c) for s in cfg.seeds for c in CONDITIONS]
    return [(seed, condition)]


_TRAINED: dict[str, dict[tuple[int, str], tuple]] = {}  # the last design trained in one go: run -> trained run


def trained_run(cfg, seed: int, condition: str) -> tuple[object, object, dict]:
    """Run (`seed`, `condition`) trained as :func:`train_tracker` would train it. With the in-place tiny Llama, the
    whole design (:func:`design_runs`) is trained at once by :func:`train_trackers` the first time one of its runs
    is asked for, and kept (the last design only) for the others (the zoo asks for them one by one)."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    if cfg.model != TINY_MODEL:
        return train_tracker(cfg, seed, condition)
    runs = design_runs(cfg, seed, condition)
    design = repr((sorted((k, str(v)) for k, v in cfg.items() if k != "condition"), runs))
    if design not in _TRAINED:
        _TRAINED.clear()
        _TRAINED[design] = dict(zip(runs, train_trackers(cfg, runs)))
    return _TRAINED[design][seed, condition]


def _register(n: int, condition: str) -> None:
    # S3: the scale's seeds are one design, trained together (`seeds` enters the zoo key); S5: one run alone
    @zoo.register(f"st-s{n}-{condition}", {s: dict(v, condition=condition, model=TINY_MODEL,
                                                   **({"seeds": list(config(s).seeds)} if n == 3 else {}))
                                            for s, v in PRESETS_BY_GROUP[n].items()})
    def build(cfg, seed):
        return trained_run(cfg, seed, condition)


for _n in SUPPORTED_N:
    for _condition in CONDITIONS:
        _register(_n, _condition)


def get_tracker(cfg, seed: int, condition: str) -> zoo.ZooModel:
    """The trained tracker of `condition` for `seed`: from the zoo (`st-s3-…` or `st-s5-…`) when `cfg`'s training
    settings are the scale's defaults for its group (:data:`TRAIN_PRESETS`, :data:`S5_PRESETS`) and the model is
    the tiny in-place one, trained here (not cached) when a notebook overrode
    them or named a checkpoint (`model`)."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    presets = PRESETS_BY_GROUP[_check_n(cfg.group_n)][cfg.scale]
    if cfg.model == TINY_MODEL and all(cfg[k] == presets[k] for k in TRAIN_KEYS):
        return zoo.get(f"st-s{cfg.group_n}-{condition}", cfg.scale, seed)
    model, tok, info = trained_run(cfg, seed, condition)
    return zoo.ZooModel(model, tok, info, path=None, trained_now=True)


WARM_UP = "st-trackers"
"""The name under which the book's builder trains this chapter's models in its warm-up (`CHAPTER_RESULTS`)."""


def train_design(cfg, s5_seed: int | None = None) -> list[str]:
    """Train and cache (or find cached) every zoo model the mechanisms notebook fetches at `cfg`'s scale with its
    default settings: the S3 design (every seed of `cfg.seeds`, both conditions, trained together) and the one S5
    run (plain, seed `s5_seed`, by default the first of `cfg.seeds`, as the notebook's default `seed`). The book's builder runs this in its warm-up, before
    the notebooks fan out, so the notebooks only load the trained runs and their runtime is the measurement's.
    Nothing is trained when the scale's `model` is a checkpoint (not cached in the zoo). Returns the zoo folders."""
    if cfg.model != TINY_MODEL:
        return []
    s5_seed = cfg.seeds[0] if s5_seed is None else s5_seed
    wanted = [(f"st-s3-{c}", s) for s in cfg.seeds for c in CONDITIONS] + [("st-s5-plain", s5_seed)]
    return [zoo.ensure(name, cfg.scale, seed)[0].name for name, seed in wanted]
