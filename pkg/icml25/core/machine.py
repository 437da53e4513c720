"""Which machine a result was computed on.

Models trained in place are bitwise reproducible on one kind of machine, not across kinds. ATen picks its vector
kernels by the CPU's instruction set, and MKL picks a code branch by the CPU; either choice moves a tiny model's
trained weights in their last bits, and a claim whose interval sits near its bar can carry that into its label.
(Measured once, 2026-12-06, on an AVX512 machine: memory_layers' dense model, 60 steps, trained to four different
sets of weights by default, with `ATEN_CPU_CAPABILITY=avx2`, with `MKL_CBWR=AVX2`, and with both; oneDNN's
`ONEDNN_MAX_CPU_ISA` changed nothing there.) So every built page and every verdict the ledger records says which
machine made it (`signature`)."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

#: assumed when the operating system does not report the last-level cache
DEFAULT_LLC_BYTES = 32 * 2**20
CPU_INFO = Path("/proc/cpuinfo")
CPU_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache_bytes(cpu: Path = CPU_CACHE) -> int:
    """The size of the largest (last-level) cache of CPU 0 as the kernel reports it, or `DEFAULT_LLC_BYTES`."""
    sizes = []
    for index in cpu.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=DEFAULT_LLC_BYTES)


def cpu_model(cpuinfo: Path = CPU_INFO) -> str:
    """The CPU's model name as the kernel reports it (x86: "model name"; else the platform's processor or
    architecture)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe() -> dict:
    """The facts about this machine that decide a trained model's bits: the CPU, the instruction set ATen's
    kernels use, MKL's reproducibility branch where one is set, the last-level cache, the cores and torch."""
    import torch

    return {"cpu": cpu_model(), "isa": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": os.environ.get("MKL_CBWR"), "llc_mib": last_level_cache_bytes() // 2**20,
            "cores": os.cpu_count(), "torch": torch.__version__}


def signature(facts: dict | None = None) -> str:
    """One line naming the machine, e.g. "Intel(R) Xeon(R) Processor, AVX512, 480 MiB LLC, 2 cores, torch 2.13.0"
    (`facts` defaults to this machine's `describe()`)."""
    d = facts or _this_machine()
    parts = [d["cpu"], d["isa"] + (f" (MKL_CBWR={d['mkl_cbwr']})" if d.get("mkl_cbwr") else ""),
             f"{d['llc_mib']} MiB LLC", f"{d['cores']} cores", f"torch {d['torch']}"]
    return ", ".join(parts)


@functools.cache
def _this_machine() -> dict:
    return describe()
