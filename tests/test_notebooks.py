"""Every notebook under notebooks/ runs top to bottom at scale="smoke" (papermill injects the parameters), and a
second run of that executed notebook under nbval, in strict mode, prints the same outputs cell by cell: same code,
same seed, same numbers and claim boxes. A chapter added later is tested without touching this file.

The two tests of a notebook share one papermill run per worker (`make test-all` keeps them on one worker with
`--dist loadgroup`); what legitimately differs between two runs is listed, with reasons, in nbval_sanitize.cfg.
The re-runs double the notebooks' share of the suite, so they carry the `rerun` marker: `make test` leaves them out,
`make test-all` and CI (.ci/run) run them."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest

from icml25.book.build import _train_shared, discover, shared_models

TASKS = discover()
PARAMS = [pytest.param(t, id=t.key, marks=pytest.mark.xdist_group(t.key)) for t in TASKS]
HERE = Path(__file__).parent
SANITIZE = HERE / "nbval_sanitize.cfg"
#: seconds a cell (or a kernel's start) may take: a smoke cell takes at most a few seconds on a quiet machine, so this
#: is room for a machine many times more loaded; the kernels are compiled before any test (tests/conftest.py)
CELL_TIMEOUT_S = 300
_executed: dict[str, Path | Exception] = {}  # task key -> the executed notebook (or why it failed), per worker
# Cells whose outputs are wall-clock measurements, or computed from them: nbval runs them (they must not raise)
# but does not compare their outputs. Each cell is found by a piece of its source, which must still be there.
TIMED_CELLS = {
    # the timing blocks with the throughput claim, and the cell that quotes their ratios
    "aoe/02_pretraining": ["aoe.throughput_blocks(cfg, cfg.seeds)", "pooled = t_interval("],
    # the fine-tuning data are the fastest correct programs, so what the models write, and every NET, follow timings
    "efficient_code/01_measure": ["et = {key: v[:, 0].mean()"],  # the closing summary quotes measured ETs and CVs
    "efficient_code/02_finetune": ["E.experiment(cfg)", "E.FASTER", "E.CORRELATION"],
    "kernels/01_benchmarks": ["bench.run(cfg, seed)", "kernels.FASTER_THAN_REFERENCE"],  # the speed-ups, their claim
    "memory_layers/01_lookup": ["ml.lookup_cost("],  # timed key searches: brute force against product keys
}


def _smoke_env(task, results: Path) -> dict[str, str]:
    """What the builder sets for a notebook: its name for the claim records, one thread, no progress bars."""
    return {"ICML25_NOTEBOOK": task.name, "ICML25_RESULTS": str(results), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "TQDM_DISABLE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def _warm_up(task) -> None:
    """What the builder computes before a notebook runs (its warm-up: the shared zoo models and the chapter's cached
    preparations), so that the first run reads them back as the re-run does, and as the book's build does."""
    for name, seed in shared_models([task], "smoke"):
        _train_shared(name, "smoke", seed)


def _execute(task, tmp_path_factory, monkeypatch) -> Path:
    """The notebook executed once at smoke scale by papermill, with its injected parameters cell, after the
    builder's warm-up."""
    if task.key not in _executed:
        work = tmp_path_factory.mktemp(task.name)
        for key, value in _smoke_env(task, work / "_results").items():
            monkeypatch.setenv(key, value)
        _warm_up(task)
        nb = jupytext.read(task.source)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        src, out = work / "source.ipynb", work / f"{task.name}.ipynb"
        nbformat.write(nb, src)
        try:
            papermill.execute_notebook(str(src), str(out), parameters={"scale": "smoke"}, kernel_name="python3",
                                       cwd=str(task.source.parent), progress_bar=False,
                                       execution_timeout=CELL_TIMEOUT_S, start_timeout=CELL_TIMEOUT_S)
            _executed[task.key] = out
        except Exception as exc:
            _executed[task.key] = exc
    result = _executed[task.key]
    if isinstance(result, Exception):
        raise result
    return result


@pytest.mark.parametrize("task", PARAMS)
def test_notebook_runs_at_smoke_scale(task, tmp_path_factory, monkeypatch):
    out = _execute(task, tmp_path_factory, monkeypatch)
    # a chapter notebook that checks claims records them (the workbench and every chapter do)
    for path in (out.parent / "_results").glob("*.json"):
        data = json.loads(path.read_text())
        assert all(r["scale"] == "smoke" for r in data["records"])


@pytest.mark.rerun
@pytest.mark.parametrize("task", PARAMS)
def test_a_second_run_prints_the_same_outputs(task, tmp_path_factory, monkeypatch, tmp_path):
    """nbval re-runs the executed notebook (smoke parameters included) in a fresh kernel and compares every
    code cell's outputs with the first run's, after nbval_sanitize.cfg; a failure names the cell that differs."""
    try:
        out = _execute(task, tmp_path_factory, monkeypatch)
    except Exception as exc:
        pytest.fail(f"the first run failed, so there is nothing to compare: {type(exc).__name__}")
    nb = nbformat.read(out, as_version=4)
    for piece in TIMED_CELLS.get(task.key, []):
        timed = [c for c in nb.cells if c.cell_type == "code" and piece in c.source]
        assert timed, f"{task.key}: no cell contains {piece!r} (TIMED_CELLS is out of date)"
        for cell in timed:
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "nbval-ignore-output"]
    nbformat.write(nb, tmp_path / out.name)
    env = os.environ | _smoke_env(task, tmp_path / "_results") | {"PYTHONPATH": str(HERE)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "nbval_plugin", "-q",
                           "--nbval", "--nbval-current-env", f"--nbval-sanitize-with={SANITIZE}",
                           f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
                           f"--nbval-kernel-startup-timeout={CELL_TIMEOUT_S}", out.name],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    report = proc.stdout[-8000:]
    assert proc.returncode == 0, f"{task.key}: a second run differs from the first (nbval):\n{report}"


def test_the_sanitize_file_hides_what_varies_and_no_seeded_number():
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns(SANITIZE.read_text())

    def sanitize(text):
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    assert sanitize("<Legend at 0x7f3a2c1d9e50>") == sanitize("<Legend at 0x7f11aa0b3c10>")
    assert sanitize("12 cells in 3.4 s") == sanitize("12 cells in 10.0 s")
    assert sanitize("ipykernel_8818/35891.py:7: RuntimeWarning") == sanitize("ipykernel_72/35891.py:7: RuntimeWarning")
    assert sanitize('<table id="T_050c8">') == sanitize('<table id="T_e4236">')
    assert (sanitize("3 edit streams x 6 methods, computed now")
            == sanitize("3 edit streams x 6 methods, loaded from the cache (computed in the warm-up)"))
    assert sanitize("6 runs (trained now)") == sanitize("6 runs (loaded from the zoo cache)")
    for seeded in ("| gain | 1.126 | [0.8452, 1.408] | 3 | paired t, 95% | inconclusive |", "3 seeds, 40 steps",
                   "α = 0.5, loss 2.31 nats", "throughput 97% of the MoE's"):
        assert sanitize(seeded) == seeded


def test_every_notebook_has_a_parameters_cell_with_scale_and_seed():
    for task in TASKS:
        nb = jupytext.read(task.source)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and "parameters" in code[0].metadata.get("tags", []), f"{task.key}: first code cell untagged"
        assert 'scale = "ci"' in code[0].source, f"{task.key}: parameters lack scale = \"ci\""
        assert "seed" in code[0].source, f"{task.key}: parameters lack a seed"
