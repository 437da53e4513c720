"""Test-wide settings: a zoo cache and a results folder of the test run's own, one torch thread per worker, and the
compiled kernels built once before any test runs."""

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ICML25_CACHE", str(ROOT / "_build" / "test-cache"))
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)


def pytest_configure(config):
    config.addinivalue_line("markers", "rerun: a notebook's nbval re-run, compared cell by cell with its first run "
                                       "(`make test-all` and CI run these; `make test` leaves them out)")


@pytest.hookimpl(tryfirst=True)  # before xdist starts its workers (its own hook runs last)
def pytest_sessionstart(session):
    """Build (or load) the compiled kernels once, in the main process, before any test or worker starts: a test,
    and above all a notebook cell with its timeout, then only loads the finished build and never waits on a
    2-5 minute compile on a loaded machine. Workers (which have `workerinput`) skip it."""
    if hasattr(session.config, "workerinput"):
        return
    from icml25 import ops

    ops.prepare()


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path, monkeypatch):
    """Claims checked by tests land in a temporary folder, never in book/_results."""
    monkeypatch.setenv("ICML25_RESULTS", str(tmp_path / "_results"))


ARCHITECTURE_FAMILIES = ("gpt2", "llama", "qwen2")  # the families every any-causal-LM method is tested on


@pytest.fixture(scope="module")
def family_checkpoints(tmp_path_factory):
    """`make(tokenizer, **config)`: {family: folder} of tiny random GPT-2, Llama and Qwen2 checkpoints written with
    `save_pretrained` (model and tokenizer), to load back through `icml25.core.models.load` / `models.get`."""
    from icml25.core import tinylm

    def make(tokenizer, seed: int = 0, **config) -> dict[str, Path]:
        out = {}
        for family in ARCHITECTURE_FAMILIES:
            path = tmp_path_factory.mktemp(family)
            tinylm.save(tinylm.random_model(family, tokenizer, seed, **config), tokenizer, path)
            out[family] = path
        return out

    return make
