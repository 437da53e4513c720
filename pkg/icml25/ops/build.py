"""Building the compiled kernels of `kernels/` once, and falling back to the references when that fails.

The extension is built by `torch.utils.cpp_extension.load` into `_build/kernels/`. Two hazards are handled here:

- Parallel notebooks that import the kernels would race for torch's own lock, so every build or load goes
  through a `filelock.FileLock` of ours, and the book builder calls :func:`prepare` once before fanning out.
- torch's lock is a plain file (`_build/kernels/lock`); a build killed half-way leaves it behind and every later
  `load` waits on it forever. Under our lock no other build can be running, so a `lock` file found there is
  stale and is removed before `load` is called.
- torch runs the first `ninja` on the PATH. Two versions (a system one and the pinned pip one in the venv) read
  each other's build log as too old or too new and start over, recompiling every source: a process whose PATH
  finds the other one (a notebook kernel, a test subprocess) would rebuild for minutes. Every build therefore runs
  the pinned ninja.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings

import torch
from filelock import FileLock

from ..core.paths import PROJECT_ROOT, build_dir

SOURCE_DIR = PROJECT_ROOT / "kernels"
SOURCES = ("bindings.cpp", "fp_quant.cpp", "embedding_bag.cpp", "expert_ffn.cpp")
CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]
NAME = "icml25_kernels"
KERNEL_DTYPES = (torch.float32, torch.float64)  # what the C++ kernels dispatch on


class KernelFallbackWarning(RuntimeWarning):
    """The compiled kernels are unavailable, so icml25.ops runs its pure-PyTorch references."""


class KernelDeviceWarning(RuntimeWarning):
    """Tensors on a device other than the CPU (a GPU): icml25.ops runs its pure-PyTorch references there."""


def build_directory():
    return build_dir() / "kernels"


@functools.cache
def compiled():
    """The compiled extension module, built on first use; ``None`` (with one warning) when it cannot be built."""
    if os.environ.get("ICML25_NO_KERNELS"):
        return _fall_back("ICML25_NO_KERNELS is set")
    try:
        return _load()
    except Exception as err:  # any build failure (no compiler, no ninja, a compile error) means: use the references
        lines = str(err).strip().splitlines() or [""]
        first_error = next((line for line in lines if "error" in line), lines[-1])
        return _fall_back(f"{type(err).__name__}: {first_error.strip()}")


def _load():
    from torch.utils import cpp_extension

    out = build_directory()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MAX_JOBS", "2")
    with FileLock(out.parent / "kernels.lock"), _pinned_ninja():
        (out / "lock").unlink(missing_ok=True)  # stale: no build of ours can hold it while we hold our lock
        return cpp_extension.load(NAME, [str(SOURCE_DIR / s) for s in SOURCES], extra_cflags=CFLAGS,
                                  extra_ldflags=["-fopenmp"], build_directory=str(out), verbose=False)


@contextlib.contextmanager
def _pinned_ninja():
    """The pinned ninja (the `ninja` package of requirements.lock) first on the PATH while torch builds."""
    import ninja

    path = os.environ.get("PATH", "")
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + path
    try:
        yield
    finally:
        os.environ["PATH"] = path


def _fall_back(reason: str):
    warnings.warn(f"icml25.ops: compiled kernels unavailable ({reason}); using the pure-PyTorch references",
                  KernelFallbackWarning, stacklevel=3)
    return None


def kernels_for(*tensors: torch.Tensor):
    """The compiled module when every tensor is on the CPU (the only device the kernels are built for), else
    ``None`` so that the caller runs its PyTorch reference; the first tensor on another device says so once."""
    device = next((t.device for t in tensors if t.device.type != "cpu"), None)
    if device is not None:
        _off_cpu(device.type)
        return None
    return compiled()


@functools.cache
def _off_cpu(device_type: str) -> None:
    warnings.warn(f"icml25.ops: tensors on {device_type}; the compiled kernels are CPU-only, so the pure-PyTorch "
                  "references run there", KernelDeviceWarning, stacklevel=4)


def source_digest() -> str:
    """A digest of the kernels' C++ sources and of the path this process takes (compiled or reference), for caches
    of results computed through the kernels."""
    import hashlib

    text = "".join((SOURCE_DIR / s).read_text() for s in SOURCES) + backend()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def backend() -> str:
    """``"compiled"`` or ``"reference"``: the path the dispatchers of icml25.ops take in this process."""
    return "compiled" if compiled() is not None else "reference"


def prepare() -> None:
    """Build (or load) the kernels now, so notebooks that run next in parallel only load the finished build."""
    start = time.perf_counter()
    path = backend()
    print(f"icml25.ops: {path} kernels ready in {time.perf_counter() - start:.1f} s")
