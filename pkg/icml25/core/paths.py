"""Where the book keeps generated results and the zoo keeps trained models."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def results_dir() -> Path:
    """`$ICML25_RESULTS` if set, else `book/_results` of the project this package was imported from."""
    env = os.environ.get("ICML25_RESULTS")
    return Path(env) if env else PROJECT_ROOT / "book" / "_results"


def cache_dir() -> Path:
    """The zoo's model cache: `$ICML25_CACHE`, default `~/.cache/icml25`."""
    env = os.environ.get("ICML25_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "icml25"


def build_dir() -> Path:
    """Build products that are not part of the book (compiled kernels, converted notebooks)."""
    return PROJECT_ROOT / "_build"
