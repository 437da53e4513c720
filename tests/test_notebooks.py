"""Every notebook under notebooks/ runs top to bottom at scale="smoke": a failing cell is a failing test,
and a chapter added later is tested without touching this file."""

import json
import os
from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest

from icml25.book.build import discover

TASKS = discover()


@pytest.mark.parametrize("task", TASKS, ids=[t.key for t in TASKS])
def test_notebook_runs_at_smoke_scale(task, tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_NOTEBOOK", task.name)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = jupytext.read(task.source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / f"{task.name}.ipynb"
    nbformat.write(nb, src)
    papermill.execute_notebook(str(src), str(tmp_path / "out.ipynb"), parameters={"scale": "smoke"},
                               kernel_name="python3", cwd=str(task.source.parent), progress_bar=False,
                               execution_timeout=300)
    # a chapter notebook that checks claims records them (the workbench and every chapter do)
    results = list(Path(os.environ["ICML25_RESULTS"]).glob("*.json"))
    for path in results:
        data = json.loads(path.read_text())
        assert all(r["scale"] == "smoke" for r in data["records"])


def test_every_notebook_has_a_parameters_cell_with_scale_and_seed():
    for task in TASKS:
        nb = jupytext.read(task.source)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and "parameters" in code[0].metadata.get("tags", []), f"{task.key}: first code cell untagged"
        assert 'scale = "ci"' in code[0].source, f"{task.key}: parameters lack scale = \"ci\""
        assert "seed" in code[0].source, f"{task.key}: parameters lack a seed"
