"""Test-wide settings: a zoo cache and a results folder of the test run's own, one torch thread per worker."""

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ICML25_CACHE", str(ROOT / "_build" / "test-cache"))
os.environ.setdefault("TQDM_DISABLE", "1")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path, monkeypatch):
    """Claims checked by tests land in a temporary folder, never in book/_results."""
    monkeypatch.setenv("ICML25_RESULTS", str(tmp_path / "_results"))
