"""A sandboxed executor for untrusted generated Python, and the three measurements EffiCoder selects on.

Two layers, each sufficient for the cases tested:

1. **Static allow-list** (:func:`check_source`): the AST may import only `ALLOWED_MODULES`, never touch a name or
   attribute that starts with ``_`` (the road to ``__class__.__subclasses__``), and never name a builtin or
   attribute on `FORBIDDEN_NAMES` (``eval``, ``open``, ``getattr``, frame attributes, ``format`` …). A violation is
   ``BLOCKED`` without running anything.
2. **Process isolation** (:func:`run_candidate`): a fresh ``python -I -S`` process (isolated mode: no user site,
   no ``PYTHON*`` variables) in its own session / process group, a fresh temporary directory as working
   directory, an *empty* environment, and rlimits: address space (``MEMORY``), CPU seconds (``TIMEOUT``), file
   size 0 (no writes), core 0, no new processes. Inside, the candidate sees only a whitelist of builtins, an
   import hook with the same allow-list, and ``os``/``socket``/``subprocess`` disabled. The parent enforces a
   wall-clock timeout and kills the whole process group.

The measurements, as in the paper's Section 3 (there: ``mprof`` sampling RSS every 1 ms):

- ET, execution time: the minimum over `repeats` of the mean time per call on the performance input;
- MU, peak memory: the ``tracemalloc`` peak of one call (bytes allocated by Python, not RSS);
- TMU, memory-time: the trapezoid integral ∫ m(t) dt of traced memory sampled every `interval` seconds.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ALLOWED_MODULES = frozenset({"math", "heapq", "itertools", "collections", "bisect", "functools"})
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "getattr", "setattr", "delattr", "hasattr", "globals",
    "locals", "vars", "dir", "type", "object", "super", "memoryview", "help", "exit", "quit", "format",
    "format_map", "mro", "gi_frame", "gi_code", "cr_frame", "ag_frame", "f_globals", "f_locals", "f_builtins",
    "f_back", "tb_frame", "tb_next", "co_code", "os", "sys", "builtins", "socket", "subprocess",
})
STATUSES = ("PASS", "FAIL", "TIMEOUT", "MEMORY", "BLOCKED")
CHILD = Path(__file__).with_name("child.py")


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # wall-clock timeout of the whole child, then killpg
    cpu_s: int = 5  # RLIMIT_CPU
    memory_mb: int = 512  # RLIMIT_AS
    repeats: int = 3  # ET = min over repeats
    min_time: float = 0.002  # each repeat loops the call until it lasts this long (s)
    interval: float = 0.001  # memory sampling period (s)


@dataclass(frozen=True)
class Execution:
    status: str  # one of STATUSES
    detail: str = ""
    time: float | None = None  # ET, seconds per call on the performance input
    peak: float | None = None  # MU, bytes
    area: float | None = None  # TMU, byte·seconds

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


def check_source(source: str) -> str | None:
    """The reason `source` is refused by the static allow-list, or None if it may run. Raises SyntaxError."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else ["(relative import)"]
        else:
            names = []
        for name in names:
            if name.split(".")[0] not in ALLOWED_MODULES:
                return f"import of {name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_MODULES))})"
        ident = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                 else node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else None)
        if isinstance(node, ast.alias):
            ident = node.asname or node.name
        if ident is not None and (ident.startswith("_") or ident in FORBIDDEN_NAMES):
            return f"name {ident!r} is not allowed"
        if isinstance(node, ast.Global | ast.Nonlocal):
            return "global/nonlocal statements are not allowed"
    return None


def _limit(limits: Limits):
    def apply():
        os.setsid()
        mem = limits.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write then fails with EFBIG instead of killing
    return apply


def run_candidate(source: str, tests: list, perf: list, entry: str = "f", limits: Limits = Limits(),
                  static_check: bool = True) -> Execution:
    """Run `source` in the sandbox: every `(args, expected)` in `tests` must give `expected` from
    `entry(*args)`; if all do, measure ET, MU and TMU of `entry(*perf)`. Never raises on the candidate's account.

    `static_check=False` skips layer 1, to test that layer 2 holds on its own.
    """
    try:
        reason = check_source(source) if static_check else None
    except SyntaxError as e:
        return Execution("FAIL", f"SyntaxError: {e.msg} (line {e.lineno})")
    if reason:
        return Execution("BLOCKED", reason)
    job = json.dumps({"source": source, "entry": entry, "tests": tests, "perf": perf, "repeats": limits.repeats,
                      "min_time": limits.min_time, "interval": limits.interval})
    with tempfile.TemporaryDirectory(prefix="sandbox-") as workdir:
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(CHILD)], cwd=workdir, env={},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                preexec_fn=_limit(limits), close_fds=True)
        try:
            out, _ = proc.communicate(job.encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return Execution("TIMEOUT", f"wall-clock limit of {limits.wall_s} s")
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return Execution("TIMEOUT", f"CPU limit of {limits.cpu_s} s")
    try:
        return Execution(**json.loads(out.decode().strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return Execution("MEMORY" if proc.returncode != 0 else "FAIL",
                         f"the sandbox died (exit code {proc.returncode}) without a result")
