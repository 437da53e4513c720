"""Explicit seeding: every random draw comes from a generator made here from a seed, never from global state."""

from __future__ import annotations

import contextlib
import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *names: object) -> int:
    """A stable 63-bit seed for a named sub-stream of `seed` (e.g. `derive_seed(0, "data", "train")`)."""
    h = hashlib.sha256(repr((int(seed), *names)).encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1


def torch_generator(seed: int, *names: object) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(seed, *names))


def numpy_rng(seed: int, *names: object) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, *names))


@contextlib.contextmanager
def seeded(seed: int, *names: object):
    """Run a block (typically a module constructor that draws from torch's global RNG) under a fixed seed,
    restoring the global RNG state afterwards so nothing outside the block depends on it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, *names))
        yield


@contextlib.contextmanager
def one_thread():
    """Run a block on one torch thread, restoring the caller's setting after. A matmul's summation order depends
    on the thread count, so the last bits of a trained model do too; and tiny GEMMs gain nothing from a second
    thread, whose OpenMP team stalls on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
