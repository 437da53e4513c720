"""The builder: discovery, one-line errors for bad input, keep-going with a failing notebook, incremental
skips by what each notebook imports, a book of its own per scale, the manifest, the table of contents and the
19-row scorecard."""

import json
import os
import subprocess
import sys
import time

import pytest

from icml25 import catalog
from icml25.book import build, cli, scorecard, toc
from icml25.core import machine

GOOD = '''# %% tags=["parameters"]
scale = "ci"
seed = 0
# %%
import matplotlib.pyplot as plt
plt.plot([0, 1], [seed, 1]); plt.title(f"demo at {scale}")
'''
BAD = GOOD + '# %%\nraise RuntimeError("deliberate failure")\n'


def injected_source(page) -> str:
    """The parameters papermill injected into an executed page."""
    cells = json.loads(page.read_text())["cells"]
    return "".join(*[c["source"] for c in cells if "injected-parameters" in c["metadata"].get("tags", [])])


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A throw-away notebooks/ and book/ with one good and one failing notebook in the kabb chapter, which warms
    nothing up here (no `CHAPTER_RESULTS` entry), and a package of its own for the import analysis."""
    nbs, book = tmp_path / "notebooks", tmp_path / "book"
    (nbs / "kabb").mkdir(parents=True)
    (nbs / "kabb" / "01_good.py").write_text(GOOD)
    (nbs / "kabb" / "02_bad.py").write_text(BAD)
    (book / "kabb").mkdir(parents=True)
    (book / "kabb" / "index.md").write_text("# KABB\n")
    (book / "intro.md").write_text("# Intro\n")
    (tmp_path / "requirements.lock").write_text("numpy==2.0\n")
    monkeypatch.setattr(build, "NOTEBOOKS", nbs)
    monkeypatch.setattr(build, "BOOK", book)
    monkeypatch.setattr(build, "build_dir", lambda: tmp_path / "_build")
    monkeypatch.setattr(build, "PACKAGE", tmp_path / "pkg" / "icml25")  # others may edit pkg/ meanwhile
    monkeypatch.setattr(build, "KERNELS", tmp_path / "kernels")
    monkeypatch.setattr(build, "LOCK", tmp_path / "requirements.lock")
    monkeypatch.setattr(build, "CHAPTER_RESULTS", {})
    return tmp_path


def test_failing_notebook_does_not_stop_the_others_and_keeps_its_traceback(project):
    tasks = build.discover()
    assert [t.key for t in tasks] == ["kabb/01_good", "kabb/02_bad"]
    out = build.output("ci")
    manifest = build.execute(tasks, "ci", jobs=2, keep_going=True)
    good, bad = (manifest["notebooks"][t.key] for t in tasks)
    assert good["status"] == "ok" and good["scale"] == "ci" and good["duration_s"] > 0
    assert bad["status"] == "failed" and "deliberate failure" in bad["error"]
    assert good["machine"] == bad["machine"] == machine.signature()  # where the pages were computed
    assert out.page(tasks[0]).exists()
    rendered = out.page(tasks[1]).read_text()
    assert "RuntimeError" in rendered and "deliberate failure" in rendered
    # each page carries the scale and the input hash of its manifest entry
    for t, entry in zip(tasks, (good, bad)):
        assert build.page_meta(out, t) == {"scale": "ci", "hash": entry["hash"], "status": entry["status"]}
    # the injected-parameters cell is hidden from the rendered page
    cells = json.loads(out.page(tasks[0]).read_text())["cells"]
    injected = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and "remove-cell" in injected[0]["metadata"]["tags"]
    assert 'scale = "ci"' in injected_source(out.page(tasks[0]))
    # a second run skips the unchanged good notebook and retries the failed one
    again = build.execute(tasks, "ci", jobs=1, keep_going=True)
    assert again["notebooks"]["kabb/01_good"]["finished_at"] == good["finished_at"]
    assert again["notebooks"]["kabb/02_bad"]["finished_at"] >= bad["finished_at"]
    # a different scale is a different input
    assert build.input_hash(tasks[0], "ci") != build.input_hash(tasks[0], "smoke")


def test_a_notebook_that_times_the_machine_runs_alone_after_the_others(project):
    (project / "notebooks" / "kernels").mkdir()
    threads = '# %%\nimport os\nprint("threads", os.environ["OMP_NUM_THREADS"])\n'
    (project / "notebooks" / "kernels" / "01_timed.py").write_text(GOOD + threads)
    tasks = build.discover()
    timed = next(t for t in tasks if t.slug == "kernels")
    todo = [(timed, "h0")] + [(t, "h") for t in tasks if t is not timed]  # the timed one listed first
    together, alone = build.run_order(todo)
    assert [t.key for t, _ in together] == ["kabb/01_good", "kabb/02_bad"] and alone == [(timed, "h0")]
    assert build.run_order([(timed, "h0")]) == ([], [(timed, "h0")])
    # the timed notebook gets every core; notebooks sharing the machine one each, or all of it when alone
    cores = os.cpu_count()
    assert [build.notebook_threads(t, jobs=2) for t in (together[0][0], timed)] == [1, cores]
    assert build.notebook_threads(together[0][0], jobs=1) == cores
    manifest = build.execute(tasks, "ci", jobs=2, keep_going=True)
    entries = manifest["notebooks"]
    assert entries["kernels/01_timed"]["status"] == "ok"
    assert f"threads {cores}" in json.dumps(json.loads(build.output("ci").page(timed).read_text())["cells"])
    assert entries["kernels/01_timed"]["finished_at"] >= max(entries[k]["finished_at"] for k in ("kabb/01_good",
                                                                                                "kabb/02_bad"))
    # without --keep-going a failure among the others stops the build before the timed notebook starts
    (project / "notebooks" / "kernels" / "01_timed.py").write_text(GOOD + "# %%\nx = 1\n")
    manifest = build.execute(tasks, "ci", jobs=2, keep_going=False)
    assert manifest["notebooks"]["kernels/01_timed"]["hash"] == entries["kernels/01_timed"]["hash"]  # not re-run


def test_a_build_at_another_scale_goes_to_a_book_of_its_own(project):
    tasks = build.discover()[:1]
    ci, smoke = build.output("ci"), build.output("smoke")
    assert ci.book == build.BOOK and smoke.book == project / "_build" / "smoke" / "book"
    assert smoke.results == smoke.book / "_results" and smoke.html == project / "_build" / "smoke" / "_build" / "html"
    first = build.execute(tasks, "ci", jobs=1, keep_going=True)["notebooks"]["kabb/01_good"]
    page = ci.page(tasks[0]).read_text()
    build.sync_sources(smoke)
    assert (smoke.book / "kabb" / "index.md").exists() and (smoke.book / "intro.md").exists()
    other = build.execute(tasks, "smoke", jobs=1, keep_going=True)["notebooks"]["kabb/01_good"]
    assert other["scale"] == "smoke" and build.page_meta(smoke, tasks[0])["scale"] == "smoke"
    assert 'scale = "smoke"' in injected_source(smoke.page(tasks[0]))
    # the ci book is untouched: same page, same manifest
    assert ci.page(tasks[0]).read_text() == page and build.load_manifest(ci)["notebooks"]["kabb/01_good"] == first
    assert {e["scale"] for e in build.load_manifest(smoke)["notebooks"].values()} == {"smoke"}
    assert "kabb/01_good" in toc.render(smoke) and "kabb/02_bad" not in toc.render(smoke)
    assert {r["scale"] for r in scorecard.rows(smoke) if r["slug"] == "kabb"} == {"smoke"}
    assert {r["scale"] for r in scorecard.rows(ci) if r["slug"] == "kabb"} == {"ci"}


FAKE_PACKAGE = {
    "__init__.py": "",
    "core/__init__.py": "",
    "core/common.py": "VALUE = 1\n",
    "core/unused.py": "VALUE = 2\n",
    "kabb.py": "from .core import common\n",
    "perf_prediction.py": "from icml25.core.common import VALUE\n",
    "ops/__init__.py": "from . import build\n",
    "ops/build.py": "SOURCES = 'kernels'\n",
    "kernels.py": "from .ops import build\n",
}
IMPORTING = {"kabb/01_a": "import icml25.kabb", "perf_prediction/01_b": "from icml25 import perf_prediction",
             "kernels/01_c": "from icml25 import kernels as k"}


def test_a_notebook_reruns_when_what_it_imports_changes_and_only_then(project, monkeypatch):
    pkg = project / "pkg" / "icml25"
    for rel, text in FAKE_PACKAGE.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    (project / "kernels").mkdir()
    (project / "kernels" / "k.cpp").write_text("int k();\n")
    for key, line in IMPORTING.items():
        (build.NOTEBOOKS / key).parent.mkdir(parents=True, exist_ok=True)
        (build.NOTEBOOKS / f"{key}.py").write_text(GOOD + f"# %%\n{line}\n")
    for p in (build.NOTEBOOKS / "kabb").glob("0[2-9]*.py"):
        p.unlink()
    (build.NOTEBOOKS / "kabb" / "01_good.py").unlink()
    monkeypatch.setenv("PYTHONPATH", str(project / "pkg"))  # the kernels import the fake package
    tasks = build.discover()
    assert [t.key for t in tasks] == ["kabb/01_a", "perf_prediction/01_b", "kernels/01_c"]
    names = lambda t: sorted(str(p.relative_to(project)) for p in build.dependencies(t.source.read_text()))  # noqa
    assert names(tasks[0]) == ["pkg/icml25/__init__.py", "pkg/icml25/core/__init__.py", "pkg/icml25/core/common.py",
                               "pkg/icml25/kabb.py"]
    assert "pkg/icml25/core/unused.py" not in names(tasks[1]) and "kernels/k.cpp" in names(tasks[2])

    def finished():
        return {k: v["finished_at"] + v["hash"] for k, v in build.load_manifest()["notebooks"].items()}

    build.execute(tasks, "ci", jobs=2, keep_going=False)
    before = finished()
    assert len(before) == 3 and all(e["status"] == "ok" for e in build.load_manifest()["notebooks"].values())
    (pkg / "perf_prediction.py").write_text("from icml25.core.common import VALUE\nSPEED = 2\n")
    build.execute(tasks, "ci", jobs=2, keep_going=False)
    after = finished()
    assert [k for k in before if before[k] != after[k]] == ["perf_prediction/01_b"]  # only the edited chapter
    # what each notebook's key depends on: the shared core module, the kernel sources, an unused module
    hashes = lambda: [build.input_hash(t, "ci") for t in tasks]  # noqa: E731
    h0 = hashes()
    (pkg / "core" / "unused.py").write_text("VALUE = 3\n")
    assert hashes() == h0
    (project / "kernels" / "k.cpp").write_text("int k(int);\n")
    h1 = hashes()
    assert [a != b for a, b in zip(h0, h1)] == [False, False, True]
    (pkg / "core" / "common.py").write_text("VALUE = 4\n")
    h2 = hashes()
    assert [a != b for a, b in zip(h1, h2)] == [True, True, False]
    (project / "requirements.lock").write_text("numpy==2.1\n")
    assert all(a != b for a, b in zip(h2, hashes()))


def test_toc_lists_built_pages_and_scorecard_lists_all_nineteen_papers(project):
    (build.BOOK / "kabb" / "01_good.ipynb").write_text("{}")
    text = toc.render()
    assert "kabb/01_good" in text and "file: scorecard" in text and "rsd" not in text
    rows = scorecard.rows()
    assert len(rows) == 19 and all(r["verdict"] == "not yet checked" for r in rows)
    assert [r["chapter"] for r in rows] == [f"[{c.title}](kabb/index.md)" if c.slug == "kabb" else c.title
                                            for c in catalog.CHAPTERS]


@pytest.mark.parametrize("args, message", [
    (["build", "--only", "nosuchchapter"], "unknown chapter 'nosuchchapter'; valid chapters: workbench, rsd"),
    (["build", "--scale", "bogus"], "invalid scale 'bogus'; valid scales: smoke, ci, full"),
])
def test_bad_arguments_get_a_one_line_error_listing_valid_values(args, message):
    res = subprocess.run([sys.executable, "-m", "icml25.book.cli", *args], capture_output=True, text=True)
    assert res.returncode == 2 and message in res.stderr
    assert "Traceback" not in res.stderr


def test_an_address_needs_the_ray_executor(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["build", "--address", "10.0.0.1:6379"])
    assert exit_.value.code == 2 and "--address needs --executor ray" in capsys.readouterr().err


def test_list_shows_every_chapter(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(c.slug in out for c in catalog.ALL)


def test_shared_zoo_models_are_those_of_the_selected_chapters():
    tasks = build.discover(["workbench", "perf_prediction"])
    from icml25 import workbench

    seeds = workbench.config("ci").seeds
    assert build.shared_models(tasks, "ci") == [(n, s) for s in seeds for n in build.SHARED_ZOO]
    # nothing to train for a chapter without them
    assert build.shared_models(build.discover(["perf_prediction"]), "ci") == []
    # a chapter that starts from the shared models at seed 0, and caches its own runs too
    assert build.shared_models(build.discover(["mpo"]), "ci") == [(n, 0) for n in build.SHARED_ZOO] + [
        ("mpo-lm-runs", None)]


def test_a_chapter_s_own_base_model_is_warmed_only_when_its_model_knob_names_it():
    from icml25 import knowledge_editing

    seed = knowledge_editing.config("ci").base_seed
    # the chapter's cached edit stream (CHAPTER_RESULTS) is warmed at every scale: its function computes nothing
    # for a real checkpoint, which notebook 02 runs itself
    assert build.shared_models(build.discover(["knowledge_editing"]), "ci") == [("ke-base", seed),
                                                                                ("ke-lifelong", None)]
    assert build.shared_models(build.discover(["knowledge_editing"]), "full") == [("ke-lifelong", None)]
    from icml25 import dist_interventions  # no base_seed: one base model per seed of the experiment

    seeds = dist_interventions.config("ci").seeds
    assert build.shared_models(build.discover(["dist_interventions"]), "ci") == (
        [("dist-base", s) for s in seeds] + [("dist-runs", None)])  # then its runs, computed once in the warm-up
    assert build.shared_models(build.discover(["dist_interventions"]), "full") == [("dist-runs", None)]


def test_a_chapter_s_cached_preparation_is_warmed_and_then_read_back(tmp_path, monkeypatch):
    from icml25 import memory_layers

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    assert build.shared_models(build.discover(["memory_layers"]), "smoke") == [("memory-runs", None)]
    calls, trained = [], []
    monkeypatch.setattr(memory_layers.experiment, "tune_learning_rates",  # where the search calls it
                        lambda cfg: calls.append(cfg) or [{"arch": "dense", "lr": 0.1, "loss": 1.0}])
    monkeypatch.setattr(memory_layers.experiment, "scaling_experiment",
                        lambda cfg, lrs: trained.append(lrs) or [{"arch": "dense", "accuracy": 0.5}])
    build._train_shared("memory-runs", "smoke", None)  # what the warm-up runs: the search, then the runs
    assert len(calls) == 1 and dict(calls[0]) == dict(memory_layers.config("smoke"))
    assert trained == [{"dense": 0.1}]  # at the rate the search chose
    assert memory_layers.scaling_results(memory_layers.config("smoke"), {"dense": 0.1}) == (
        [{"arch": "dense", "accuracy": 0.5}], False)  # read back by the notebook
    assert memory_layers.scaling_results(memory_layers.config("smoke"), {"dense": 0.2})[1]  # other rates: computed
    runs, now = memory_layers.learning_rate_search(memory_layers.config("smoke"))
    assert (runs, now, len(calls)) == ([{"arch": "dense", "lr": 0.1, "loss": 1.0}], False, 1)  # the notebook reads the warm-up's result
    runs, now = memory_layers.learning_rate_search(memory_layers.config("smoke", seeds=[5], control_steps=3))
    assert not now and len(calls) == 1  # knobs the search does not read address the same result
    runs, now = memory_layers.learning_rate_search(memory_layers.config("smoke", steps=3))
    assert now and len(calls) == 2  # one it reads does not


def test_notebooks_run_beside_the_warm_up_and_each_waits_for_the_entries_it_needs(project, monkeypatch):
    """The warm-up entry below finishes only once a notebook that needs nothing has run beside it; the notebook
    that needs the entry reads what it wrote. The manifest records the entry's own time."""
    trained, free_ran = project / "trained", project / "free-ran"
    (project / "notebooks" / "kabb" / "02_bad.py").unlink()
    (project / "notebooks" / "kabb" / "01_good.py").write_text(GOOD + f"# %%\nassert open({str(trained)!r}).read()\n")
    (project / "notebooks" / "perf_prediction").mkdir()
    (project / "notebooks" / "perf_prediction" / "01_free.py").write_text(
        GOOD + f"# %%\nopen({str(free_ran)!r}, 'w').write('ran')\n")
    monkeypatch.setattr(build, "shared_models",
                        lambda tasks, scale: [("arith-draft", 0)] if any(t.slug == "kabb" for t in tasks) else [])

    def train(name, scale, seed):
        deadline = time.time() + 240
        while not free_ran.exists():
            if time.time() > deadline:
                raise TimeoutError("no notebook ran beside the warm-up")
            time.sleep(0.2)
        trained.write_text(f"{name} {scale} {seed}")

    monkeypatch.setattr(build, "_train_shared", train)  # the pool's workers are forked: they see this one
    manifest = build.execute(build.discover(), "ci", jobs=2, keep_going=True)
    assert {k: e["status"] for k, e in manifest["notebooks"].items()} == {"kabb/01_good": "ok",
                                                                         "perf_prediction/01_free": "ok"}
    assert trained.read_text() == "arith-draft ci 0"
    assert manifest["zoo_warmup"]["models"] == ["arith-draft seed 0"]
    assert manifest["zoo_warmup"]["duration_s_per_model"]["arith-draft seed 0"] <= manifest["zoo_warmup"]["duration_s"]


def test_the_longest_warm_up_entries_start_first_and_a_seeded_one_is_one_entry_per_seed():
    from icml25 import rsd

    seeds = rsd.config("ci").seeds
    assert build.shared_models(build.discover(["rsd"]), "ci") == [("rsd-runs", s) for s in seeds]
    models = build.shared_models(build.discover(["kabb", "aoe", "mpo"]), "ci")
    assert models == [(n, 0) for n in build.SHARED_ZOO] + [("aoe-runs", None), ("kabb-runs", None),
                                                            ("mpo-lm-runs", None)]
    first = [m for m in models if m[0] in build.WARMUP_FIRST]
    assert build.WARMUP_FIRST.index("aoe-runs") < build.WARMUP_FIRST.index("mpo-lm-runs")
    assert build.warmup_order(models) == first + [m for m in models if m not in first]  # the others keep their order


def test_scorecard_shows_three_verdicts_with_reasons_and_never_mixes_scales(project, monkeypatch):
    from icml25.core import claims
    from icml25.core.claims import Claim, Effect, at_least, check

    claim = Claim("rsd", "demo_effect", "RSD is cheaper", "4.4x", "ratio below 1",
                  [Effect("ratio", "r", direction="less", null=1.0, min_effect=0.9)], [at_least("learns", "acc", 0.8)],
                  ({"r": [0.5, 0.6, 0.55], "acc": 1}, {"r": [1.0, 1.1, 1.05], "acc": 1}))
    claims.REGISTRY.pop(("rsd", "demo_effect"))  # a test claim, not one of the rsd chapter's
    monkeypatch.setenv("ICML25_NOTEBOOK", "01_x")
    # eight paired units: contract v2's floor for a decisive verdict
    check(claim, {"r": [0.95, 0.97, 0.99, 0.96, 0.98, 0.97, 0.95, 0.99], "acc": 0.9}, seeds=range(8), scale="ci")
    check(claim, {"r": [0.5, 0.52, 0.55], "acc": 0.9}, seeds=[0], scale="smoke")
    monkeypatch.setenv("ICML25_NOTEBOOK", "interactive")
    other = Claim("rsd", "demo_other", "x", "y", "z", claim.effects, claim.preconditions, claim.examples)
    claims.REGISTRY.pop(("rsd", "demo_other"))
    check(other, {"r": [0.5, 0.52, 0.55], "acc": 0.9}, seeds=[0, 1, 2], scale="ci")  # not from a built notebook
    build._record(build.output("ci"), "rsd/01_x", {"status": "ok", "duration_s": 3.0, "scale": "ci", "error": None,
                                                   "machine": "Demo CPU, AVX2, 8 MiB LLC"})
    build._record(build.output("ci"), "rsd/02_y", {"status": "ok", "duration_s": 1.0, "scale": "smoke",
                                                   "error": None, "machine": "Other CPU, AVX512"})
    table = [r for r in scorecard.rows() if r["slug"] == "rsd"]
    # neither the smoke record nor the record of a notebook the book does not show is on the scorecard
    assert [(r["verdict"], r["seeds"]) for r in table] == [("refuted", "0, 1, 2, 3, 4, 5, 6, 7 (ci)")]
    assert "the size is below the paper's" in table[0]["reason"] and "ratio = 0.97" in table[0]["effect"]
    text = scorecard.render(with_figure=False)
    assert "0 reproduced, 1 refuted, 0 inconclusive** of 1 claims" in text
    assert "| Reproduced | Refuted | Inconclusive |" in text
    assert "Built on Demo CPU, AVX2, 8 MiB LLC." in text and "Other CPU" not in text  # the book's scale only
    est, lo, hi = scorecard.standardised(table[0]["effects"][0])
    assert lo < est < hi < 1  # wholly short of the paper's smallest effect (1 on this axis)
    scorecard.write()
    assert (project / "book" / scorecard.FIGURE).stat().st_size > 1000


def test_standardised_effect_whose_smallest_effect_is_the_null_uses_the_interval_half_width():
    e = {"direction": "less", "null": 0.01, "min_effect": 0.01, "estimate": 0.004, "ci_low": 0.002, "ci_high": 0.006}
    assert scorecard.standardised(e) == pytest.approx((3.0, 2.0, 4.0))  # (0.01 - x) / 0.002, the paper's side positive


def test_rsd_s_pairs_prms_and_runs_are_computed_in_the_warm_up():
    """rsd trains no shared reasoner: its own pairs, learned PRMs and runs are computed before the notebooks, by
    one warm-up entry per verdict seed."""
    assert build.CHAPTER_RESULTS["rsd"] == ("rsd-runs", "warm_up_seed") and "rsd" in build.SEEDED_RESULTS


def test_efficient_code_s_pipeline_runs_in_the_warm_up():
    """efficient_code's whole pipeline (sandbox runs, fine-tuning, evaluation) is computed before the notebooks."""
    assert build.shared_models(build.discover(["efficient_code"]), "ci") == [("ec-runs", None)]
    assert build.CHAPTER_RESULTS["efficient_code"] == ("ec-runs", "warm_up")


def test_hybrid_winrate_s_fine_tuned_judges_are_computed_in_the_warm_up():
    """hybrid_winrate's calibration and zoo judges (Bradley-Terry fine-tuning of every weight) are one cached result,
    computed by the warm-up after the shared reasoners it scores and started among the longest entries."""
    assert build.CHAPTER_RESULTS["hybrid_winrate"] == ("hybrid-winrate-runs", "warm_up")
    models = build.shared_models(build.discover(["hybrid_winrate"]), "ci")
    assert models == [(n, 0) for n in build.SHARED_ZOO] + [("hybrid-winrate-runs", None)]
    assert build.warmup_order(models)[0] == ("hybrid-winrate-runs", None)
