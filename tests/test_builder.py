"""The builder: discovery, one-line errors for bad input, keep-going with a failing notebook, incremental
skips, the manifest, the generated table of contents and the 19-row scorecard."""

import json
import subprocess
import sys

import pytest

from icml25 import catalog
from icml25.book import build, cli, scorecard, toc

GOOD = '''# %% tags=["parameters"]
scale = "ci"
seed = 0
# %%
import matplotlib.pyplot as plt
plt.plot([0, 1], [seed, 1]); plt.title(f"demo at {scale}")
'''
BAD = GOOD + '# %%\nraise RuntimeError("deliberate failure")\n'


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A throw-away notebooks/ and book/ with one good and one failing notebook in the workbench chapter."""
    nbs, book = tmp_path / "notebooks", tmp_path / "book"
    (nbs / "workbench").mkdir(parents=True)
    (nbs / "workbench" / "01_good.py").write_text(GOOD)
    (nbs / "workbench" / "02_bad.py").write_text(BAD)
    (book / "workbench").mkdir(parents=True)
    (book / "workbench" / "index.md").write_text("# Workbench\n")
    monkeypatch.setattr(build, "NOTEBOOKS", nbs)
    monkeypatch.setattr(build, "BOOK", book)
    monkeypatch.setattr(toc, "BOOK", book)
    monkeypatch.setattr(scorecard, "BOOK", book)
    monkeypatch.setattr(build, "build_dir", lambda: tmp_path / "_build")
    monkeypatch.setattr(build, "code_hash", lambda: "pkg-unchanged")  # others may edit pkg/ meanwhile
    return tmp_path


def test_failing_notebook_does_not_stop_the_others_and_keeps_its_traceback(project):
    tasks = build.discover()
    assert [t.key for t in tasks] == ["workbench/01_good", "workbench/02_bad"]
    manifest = build.execute(tasks, "smoke", jobs=2, keep_going=True)
    good, bad = (manifest["notebooks"][t.key] for t in tasks)
    assert good["status"] == "ok" and good["scale"] == "smoke" and good["duration_s"] > 0
    assert bad["status"] == "failed" and "deliberate failure" in bad["error"]
    assert tasks[0].output.exists()
    rendered = tasks[1].output.read_text()
    assert "RuntimeError" in rendered and "deliberate failure" in rendered
    # the injected-parameters cell is hidden from the rendered page
    cells = json.loads(tasks[0].output.read_text())["cells"]
    injected = [c for c in cells if "injected-parameters" in c["metadata"].get("tags", [])]
    assert injected and "remove-cell" in injected[0]["metadata"]["tags"]
    # a second run skips the unchanged good notebook and retries the failed one
    again = build.execute(tasks, "smoke", jobs=1, keep_going=True)
    assert again["notebooks"]["workbench/01_good"]["finished_at"] == good["finished_at"]
    assert again["notebooks"]["workbench/02_bad"]["finished_at"] >= bad["finished_at"]
    # a different scale is a different input
    assert build.input_hash(tasks[0], "ci", "x") != build.input_hash(tasks[0], "smoke", "x")


def test_toc_lists_built_pages_and_scorecard_lists_all_nineteen_papers(project):
    (build.BOOK / "workbench" / "01_good.ipynb").write_text("{}")
    text = toc.render()
    assert "workbench/01_good" in text and "file: scorecard" in text and "rsd" not in text
    rows = scorecard.rows()
    assert len(rows) == 19 and all(r["verdict"] == "not yet checked" for r in rows)
    assert [r["chapter"] for r in rows] == [c.title for c in catalog.CHAPTERS]


@pytest.mark.parametrize("args, message", [
    (["build", "--only", "nosuchchapter"], "unknown chapter 'nosuchchapter'; valid chapters: workbench, rsd"),
    (["build", "--scale", "bogus"], "invalid scale 'bogus'; valid scales: smoke, ci, full"),
])
def test_bad_arguments_get_a_one_line_error_listing_valid_values(args, message):
    res = subprocess.run([sys.executable, "-m", "icml25.book.cli", *args], capture_output=True, text=True)
    assert res.returncode == 2 and message in res.stderr
    assert "Traceback" not in res.stderr


def test_list_shows_every_chapter(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(c.slug in out for c in catalog.ALL)


def test_shared_zoo_models_are_those_of_the_selected_chapters():
    tasks = build.discover(["workbench", "kabb"])
    from icml25 import workbench

    seeds = workbench.config("ci").seeds
    assert build.shared_models(tasks, "ci") == [(n, s) for s in seeds for n in build.SHARED_ZOO]
    assert build.shared_models(build.discover(["kabb"]), "ci") == []  # nothing to train for a chapter without them
    assert build.shared_models(build.discover(["mpo"]), "ci") == [(n, 0) for n in build.SHARED_ZOO]


def test_zoo_warmup_is_recorded_beside_the_notebooks(project, monkeypatch):
    trained = []
    monkeypatch.setattr(build, "shared_models", lambda tasks, scale: [("arith-draft", 0)])
    monkeypatch.setattr(build, "ProcessPoolExecutor", _InlinePool)
    monkeypatch.setattr(build, "_train_shared", lambda name, scale, seed: trained.append((name, scale, seed)))
    build.warm_zoo(build.discover(), "smoke", jobs=2)
    manifest = build.load_manifest()
    assert trained == [("arith-draft", "smoke", 0)]
    assert manifest["zoo_warmup"]["models"] == ["arith-draft seed 0"] and manifest["notebooks"] == {}


class _InlinePool:
    def __init__(self, max_workers):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, *iterables):
        return map(fn, *iterables)


def test_scorecard_shows_three_verdicts_with_reasons_and_never_mixes_scales(project, monkeypatch):
    from icml25.core import claims
    from icml25.core.claims import Claim, Effect, at_least, check

    claim = Claim("rsd", "demo_effect", "RSD is cheaper", "4.4x", "ratio below 1",
                  [Effect("ratio", "r", direction="less", null=1.0, min_effect=0.9)], [at_least("learns", "acc", 0.8)],
                  ({"r": [0.5, 0.6, 0.55], "acc": 1}, {"r": [1.0, 1.1, 1.05], "acc": 1}))
    claims.REGISTRY.pop(("rsd", "demo_effect"))  # a test claim, not one of the rsd chapter's
    monkeypatch.setenv("ICML25_NOTEBOOK", "01_x")
    check(claim, {"r": [0.95, 0.97, 0.99], "acc": 0.9}, seeds=[0, 1, 2], scale="ci")
    check(claim, {"r": [0.5, 0.52, 0.55], "acc": 0.9}, seeds=[0], scale="smoke")
    build._record("rsd/01_x", {"status": "ok", "duration_s": 3.0, "scale": "ci", "error": None})
    table = [r for r in scorecard.rows() if r["slug"] == "rsd"]
    assert [(r["verdict"], r["seeds"]) for r in table] == [("refuted", "0, 1, 2 (ci)")]  # the smoke record is not shown
    assert "excludes the paper's effect" in table[0]["reason"] and "ratio = 0.97" in table[0]["effect"]
    text = scorecard.render(with_figure=False)
    assert "0 reproduced, 1 refuted, 0 inconclusive** of 1 claims" in text
    assert "| Reproduced | Refuted | Inconclusive |" in text
    est, lo, hi = scorecard.standardised(table[0]["effects"][0])
    assert lo < est < hi < 1  # wholly short of the paper's smallest effect (1 on this axis)
    scorecard.write()
    assert (project / "book" / scorecard.FIGURE).stat().st_size > 1000


def test_standardised_effect_whose_smallest_effect_is_the_null_uses_the_interval_half_width():
    e = {"direction": "less", "null": 0.01, "min_effect": 0.01, "estimate": 0.004, "ci_low": 0.002, "ci_high": 0.006}
    assert scorecard.standardised(e) == pytest.approx((3.0, 2.0, 4.0))  # (0.01 - x) / 0.002, the paper's side positive
