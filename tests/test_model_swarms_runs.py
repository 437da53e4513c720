"""Notebook 02's runs as a cached chapter result: what the builder's warm-up computes is what computing them here
gives, it is read back on the next call, and its address covers the code that computes it."""

import json
import pkgutil

from icml25 import model_swarms as ms
from icml25.core.seeding import one_thread


def test_the_cached_runs_equal_the_direct_ones_and_are_read_back():
    cfg = ms.config("smoke", seeds=[200])
    res, _ = ms.warm_up_runs(cfg)
    again, now_again = ms.warm_up_runs(cfg)
    assert not now_again and json.dumps(again) == json.dumps(res)
    with one_thread():  # the cache computes on one thread: the same numbers as computing it here
        direct = ms.adaptation_runs(cfg)
    assert json.dumps(direct) == json.dumps(res)
    single = res["runs"]["single-task"][0]
    assert set(single["test"]) == {"swarm", "initial best", "oracle", *ms.BASELINES}
    assert set(res["runs"]) == set(ms.UTILITIES) and set(res["ablation"]) == {"Model Swarms", *ms.ABLATIONS}
    n_runs = len(ms.UTILITIES) * len(cfg.seeds)
    assert len(res["weak_to_strong"]["not_initial_best"]) == len(res["null_initial_ranks"]) == n_runs
    assert len(single["search"]["utilities"]) == single["search"]["n_iterations"] + 1


def test_a_model_outside_the_zoo_is_computed_every_time(monkeypatch):
    calls = []
    monkeypatch.setattr(ms.runs, "adaptation_runs", lambda cfg: calls.append(cfg) or {"runs": {}})
    for _ in range(2):
        assert ms.warm_up_runs(ms.config("smoke", model="some/checkpoint")) == ({"runs": {}}, True)
    assert len(calls) == 2


def test_the_cache_is_addressed_by_every_part_of_the_package_that_computes_it():
    parts = {name for _, name, _ in pkgutil.iter_modules(ms.__path__)}
    addressed = {m.__name__.rsplit(".", 1)[-1] for m in ms.runs._sources()}
    assert parts - addressed == {"claims", "toy"}  # the claims' declarations and the 2-D toy do not run here
