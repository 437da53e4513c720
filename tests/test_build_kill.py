"""A build killed while a notebook runs (SIGKILL as a crash would, SIGTERM, SIGINT as a terminal's Ctrl-C would)
leaves no process behind, and the book as it was: the page, its manifest entry and the records the scorecard shows
are those of the last completed run, all at one scale."""

import json
import multiprocessing
import os
import shutil
import signal
import time
import uuid

import psutil
import pytest
from filelock import FileLock

from icml25.book import build, scorecard

NOTEBOOK = '''# %% tags=["parameters"]
scale = "ci"
seed = 0
# %%
import json, os, pathlib, time

VERSION = {version}
# the record a claim check makes, written where the builder asks the kernel to stage it
record = {{"chapter": "kabb", "claim_id": "kill_demo", "paper_statement": "a demo", "paper_value": "x",
          "our_value": f"version {{VERSION}}", "verdict": "reproduced", "reason": "", "effect": None, "effects": [],
          "seeds": [0], "scale": scale, "notebook": os.environ["ICML25_NOTEBOOK"]}}
staged = pathlib.Path(os.environ["ICML25_RESULTS"]) / "kabb.json"
staged.parent.mkdir(parents=True, exist_ok=True)
staged.write_text(json.dumps({{"chapter": "kabb", "records": [record]}}))
# %%
if VERSION > 1:
    pathlib.Path(os.environ["KILL_TEST_MARKER"]).touch()
    time.sleep(300)
'''


def _use_project(mp, root):
    """Point the builder at a project of the test's own (a real build takes these paths from the checkout)."""
    from icml25 import ops

    mp.setattr(build, "NOTEBOOKS", root / "notebooks")
    mp.setattr(build, "BOOK", root / "book")
    mp.setattr(build, "LOCK", root / "requirements.lock")
    mp.setattr(build, "build_dir", lambda: root / "_build")
    mp.setattr(ops, "prepare", lambda: None)
    mp.setattr(build, "CHAPTER_RESULTS", {})  # the demo notebook reads nothing of kabb's warm-up: don't compute it
    mp.setenv("ICML25_RESULTS", str(root / "book" / "_results"))
    mp.setenv("OMP_NUM_THREADS", "1")


def _drive(root, tag):
    """The builder's process: a session of its own, as a build started from a terminal has."""
    os.setsid()
    mp = pytest.MonkeyPatch()
    _use_project(mp, root)
    mp.setenv("KILL_TEST_TAG", tag)
    mp.setenv("KILL_TEST_MARKER", str(root / "marker"))
    os._exit(build.build("ci", jobs=1, render_book=False))


def _tagged(tag: str) -> list[psutil.Process]:
    """The processes that inherited the build's tag in their environment (the kernels: started by exec)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("KILL_TEST_TAG") == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def _write(root, version):
    (root / "notebooks" / "kabb" / "01_slow.py").write_text(NOTEBOOK.format(version=version))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A project whose one notebook was built once (version 1)."""
    root = tmp_path_factory.mktemp("killed")
    (root / "notebooks" / "kabb").mkdir(parents=True)
    (root / "book" / "kabb").mkdir(parents=True)
    (root / "book" / "kabb" / "index.md").write_text("# KABB\n")
    (root / "requirements.lock").write_text("")
    _write(root, 1)
    with pytest.MonkeyPatch.context() as mp:
        _use_project(mp, root)
        manifest = build.execute(build.discover(), "ci", jobs=1, keep_going=False)
    assert manifest["notebooks"]["kabb/01_slow"]["status"] == "ok", manifest
    return root


def _book_state(root):
    out = build.Output("ci", root / "book", root / "book" / "_results", root)
    entry = build.load_manifest(out)["notebooks"]["kabb/01_slow"]
    task = build.Task("kabb", "01_slow")
    rows = [r for r in scorecard.rows(out) if r["slug"] == "kabb"]
    return out, task, entry, rows


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGINT"])
def test_a_killed_build_leaves_no_process_and_the_book_as_it_was(built, tmp_path, how):
    root = tmp_path / "project"
    shutil.copytree(built, root)
    out, task, entry, rows = _book_state(root)
    page = out.page(task).read_text()
    assert entry["status"] == "ok" and [r["ours"] for r in rows] == ["version 1"]
    _write(root, 2)  # the next run records a claim, then hangs
    tag = uuid.uuid4().hex
    proc = multiprocessing.get_context("fork").Process(target=_drive, args=(root, tag))
    proc.start()
    deadline = time.monotonic() + 120
    while not (root / "marker").exists():
        assert proc.is_alive() and time.monotonic() < deadline
        time.sleep(0.1)
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    kernels = _tagged(tag)
    assert len(tree) >= 3 and kernels and set(kernels) <= set(tree)  # the builder, its worker, the kernel
    if how == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
    else:
        os.kill(proc.pid, getattr(signal, how))
    proc.join(60)
    assert proc.exitcode == {"SIGKILL": -9, "SIGTERM": 128 + 15, "SIGINT": 128 + 2}[how]
    gone, alive = psutil.wait_procs(tree, timeout=20)
    left = alive + [p for p in _tagged(tag) if p not in alive]
    for p in left:  # a failing test leaves nothing running either
        p.kill()
    assert left == []
    # the book is as the last completed run left it, and consistent: page, manifest and scorecard at one scale
    out, task, after, rows = _book_state(root)
    assert after == entry and out.page(task).read_text() == page
    assert build.page_meta(out, task) == {"scale": "ci", "hash": entry["hash"], "status": "ok"}
    assert [(r["ours"], r["scale"], r["verdict"]) for r in rows] == [("version 1", "ci", "reproduced")]
    records = json.loads((out.results / "kabb.json").read_text())["records"]
    assert [(r["our_value"], r["scale"], r["notebook"]) for r in records] == [("version 1", "ci", "01_slow")]
    assert not [p for p in root.joinpath("book").rglob("*") if ".tmp" in p.name]
    with FileLock(str(out.manifest) + ".lock", timeout=1):  # no lock is left held
        pass
