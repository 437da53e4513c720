"""The lifelong edit stream as a cached chapter result: computed by the builder's warm-up, read back by notebook 02
with the same settings, recomputed when a knob it reads changes; and its figure."""

import math
import pkgutil

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from icml25 import knowledge_editing as ke  # noqa: E402
from icml25.book import build  # noqa: E402

_FAKE = {"setup": {"site": (1, "last"), "alpha": 0.5, "alpha_scores": {0.5: 1.0}, "base": {}},
         "rome": [{"locality": [1.0, 0.5], "retention": [float("nan"), 0.25]}]}


def test_lifelong_is_computed_in_the_warm_up_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    assert build.CHAPTER_RESULTS["knowledge_editing"] == ("ke-lifelong", "warm_up_lifelong")
    assert ("ke-lifelong", None) in build.shared_models(build.discover(["knowledge_editing"]), "smoke")
    calls = []
    monkeypatch.setattr(ke.experiment, "lifelong", lambda cfg: calls.append(cfg) or _FAKE)
    build._train_shared("ke-lifelong", "smoke", None)  # what the warm-up runs
    assert len(calls) == 1 and dict(calls[0]) == dict(ke.config("smoke"))
    res, now = ke.lifelong_results(ke.config("smoke"))  # what the notebook runs
    assert not now and len(calls) == 1  # read back, not recomputed
    assert res["setup"]["site"] == [1, "last"] and res["setup"]["alpha_scores"] == {"0.5": 1.0}  # as JSON
    assert res["rome"][0]["locality"] == [1.0, 0.5] and math.isnan(res["rome"][0]["retention"][0])


def test_every_knob_the_stream_reads_and_the_base_model_address_the_result(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(ke.experiment, "lifelong", lambda cfg: calls.append(cfg) or _FAKE)
    assert ke.lifelong_results(ke.config("smoke"))[1] and len(calls) == 1
    for knob in ({"seeds": [5]}, {"base_seed": 1}, {"n_windows": 3}, {"edits_per_window": 2}, {"v_steps": 3},
                 {"kl_factor": 0.5}, {"memit_lambda": 2.0}, {"c_texts": 10}, {"ft_steps": 2}, {"lora_rank": 2},
                 {"merge_alphas": (0.5, 1.0)}, {"tune_windows": 1}):
        res, now = ke.lifelong_results(ke.config("smoke", **knob))
        assert now, knob
    assert ke.lifelong_results(ke.config("ci"))[1]  # the scale too
    n = len(calls)
    monkeypatch.setattr(ke.zoo, "key", lambda *a: "a-retrained-base-model")
    assert ke.lifelong_results(ke.config("smoke"))[1] and len(calls) == n + 1


def test_a_model_outside_the_zoo_is_computed_every_time(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(ke.experiment, "lifelong", lambda cfg: calls.append(cfg) or _FAKE)
    for _ in range(2):
        res, now = ke.lifelong_results(ke.config("smoke", model="some/checkpoint"))
        assert now and res["setup"]["site"] == [1, "last"]  # the same JSON form as the cached path
    assert len(calls) == 2 and not (tmp_path / "results").exists()
    ke.warm_up_lifelong(ke.config("smoke", model="some/checkpoint"))  # the warm-up leaves it to the notebook
    assert len(calls) == 2


def test_the_cache_is_addressed_by_every_part_of_the_package_that_computes_it():
    parts = {name for _, name, _ in pkgutil.iter_modules(ke.__path__)}
    addressed = {m.__name__.rsplit(".", 1)[-1] for m in ke.experiment._sources()}
    assert parts - addressed == {"figures"}  # a figure's code cannot change the runs
    assert "knowledge_editing_world" in addressed  # the world the streams are drawn from

def test_the_figure_has_every_metric_against_the_edits_so_far():
    run = {m: [0.5, 0.25, 0.0] for m in ke.METRICS} | {"retention_learned": [float("nan"), 1.0, 0.5]}
    run["retention"] = [float("nan"), 0.5, 0.5]
    fig, axes = plt.subplots(2, 4)
    ke.plot_lifelong({"rome": [run, run], "retrieval": [run, run]}, axes, edits_per_window=40)
    titles = [ax.get_title() for ax in axes.flat[:7]]
    assert titles == [m.replace("_", " ") for m in ke.METRICS + ("retention_learned",)]
    line = axes.flat[0].get_lines()[0]
    assert np.array_equal(line.get_xdata(), [40, 80, 120]) and np.allclose(line.get_ydata(), [0.5, 0.25, 0.0])
    assert np.array_equal(axes.flat[5].get_lines()[0].get_xdata(), [80, 120])  # retention: from the second window
    assert axes.flat[7].get_legend() is not None and not axes.flat[7].axison
    plt.close(fig)
    rome = dict(run, locality_before=1.0, locality_early=[0.9, 0.8, 0.7, 0.6, 0.55])
    fig, axes = plt.subplots(2, 4)
    ke.plot_lifelong({"rome": [rome, rome], "retrieval": [dict(run, locality_before=1.0)] * 2}, axes, 40)
    rome_line, retrieval_line = axes.flat[3].get_lines()  # locality: from the unedited model, ROME's inside window 1
    assert np.array_equal(rome_line.get_xdata(), [0, 1, 2, 5, 10, 20, 40, 80, 120])
    assert np.allclose(rome_line.get_ydata(), [1.0, 0.9, 0.8, 0.7, 0.6, 0.55, 0.5, 0.25, 0.0])
    assert np.array_equal(retrieval_line.get_xdata(), [0, 40, 80, 120])
    plt.close(fig)


def test_the_real_stream_round_trips_through_the_cache_with_every_metric_per_window(tmp_path, monkeypatch):
    import json

    from icml25.core.seeding import one_thread

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    cfg = ke.config("smoke")
    res, now = ke.lifelong_results(cfg)
    again, now_again = ke.lifelong_results(cfg)
    assert now and not now_again and json.dumps(again) == json.dumps(res)
    with one_thread():  # the cache computes on one thread: the same numbers as computing it here
        direct = json.loads(json.dumps(ke.lifelong(cfg)))
    assert json.dumps(direct) == json.dumps(res)
    for m in ke.METHODS + ke.BASELINES:
        assert len(res[m]) == len(cfg.seeds)
        for run in res[m]:
            assert all(len(run[k]) == cfg.n_windows for k in ke.METRICS + ("retention_learned",))
    measured = ke.claim_measurements(res)
    assert len(measured["locality_drop"]) == len(cfg.seeds)
