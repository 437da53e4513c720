"""An operating-system sandbox for untrusted generated Python, and the three measurements EffiCoder selects on.

**Isolation** (:func:`sandbox_command`). Every run of a candidate is a fresh bubblewrap sandbox (Debian package
``bubblewrap``), started as an unprivileged user of its own (a uid no other process has, so the process limit
counts this sandbox alone): new user, PID, network, IPC, UTS and cgroup namespaces; a read-only view of ``/usr``
(the system interpreter and its libraries) and nothing else of the host; a private, size-limited tmpfs as the
only writable place; a private ``/proc`` that shows only the sandbox's processes; an empty environment; a new
session; ``--die-with-parent``. Resource limits bound CPU seconds, address space, file size and processes (the
candidate cannot fork or spawn). On timeout the parent kills bubblewrap, its PID namespace's init dies with it,
and the kernel kills every process left in the namespace; every wait is bounded, so the caller is back within
``wall_s`` + 1 s whatever the candidate does. No bubblewrap, or user namespaces refused: :class:`SandboxUnavailable`
says how to install or enable it; there is no weaker fallback.

**Measurements the candidate cannot forge.** The runner (:mod:`.child`) never sees the expected outputs: it
reports the candidate's outputs over a pipe, and the parent compares them. Time and memory are taken by the
parent from outside: CPU time (user + system) and peak resident memory of the whole sandbox from ``wait4``, and
memory-time by sampling the runner's resident memory in ``/proc`` every `interval` seconds. Each measurement is
the difference between a run that calls the entry `L` times on the performance input and a run of the same
program that only decodes the input `L` times (same interpreter start-up, same module-level code), divided by
`L`; `L` is chosen by the parent from a first run so that the calls take about `min_time`. Standard output is
never read.

- ET, execution time: the minimum over `repeats` of that CPU-time difference per call;
- MU, peak memory: the peak resident set of the calling run above the decoding run's (bytes; the paper's
  ``mprof`` also reads the resident set);
- TMU, memory-time: the time-integral of the runner's resident memory, calling run minus decoding run, per call.

The static allow-list (:func:`check_source`) stays as defence in depth: a program it refuses is ``BLOCKED``
without running. Nothing above depends on it.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ALLOWED_MODULES = frozenset({"math", "heapq", "itertools", "collections", "bisect", "functools"})
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "getattr", "setattr", "delattr", "hasattr", "globals",
    "locals", "vars", "dir", "type", "object", "super", "memoryview", "help", "exit", "quit", "format",
    "format_map", "mro", "gi_frame", "gi_code", "cr_frame", "ag_frame", "f_globals", "f_locals", "f_builtins",
    "f_back", "tb_frame", "tb_next", "co_code", "os", "sys", "builtins", "socket", "subprocess",
})
STATUSES = ("PASS", "FAIL", "TIMEOUT", "MEMORY", "BLOCKED")
RUNNER = Path(__file__).with_name("child.py").read_text()
EXIT_MEMORY, EXIT_RAISED = 3, 4  # the runner's exit codes (child.py)
PYTHON = os.environ.get("ICML25_SANDBOX_PYTHON", "/usr/bin/python3")
#: processes the sandbox's user may have: bubblewrap and the runner (PID 1 of its namespace); a fork is refused
NPROC = 2
_UIDS = itertools.count()


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create the namespaces it needs."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # wall-clock limit of each sandboxed run; then the whole sandbox is killed
    cpu_s: int = 5  # RLIMIT_CPU of each run
    memory_mb: int = 512  # RLIMIT_AS
    tmpfs_mb: int = 8  # size of the private writable tmpfs
    repeats: int = 3  # ET = min over repeats
    min_time: float = 0.05  # the calls of one timed run cost at least this much CPU beyond the baseline (s)
    max_calls: int = 100_000
    interval: float = 0.001  # memory sampling period (s)


@dataclass(frozen=True)
class Execution:
    status: str  # one of STATUSES
    detail: str = ""
    time: float | None = None  # ET, CPU seconds per call on the performance input
    peak: float | None = None  # MU, bytes
    area: float | None = None  # TMU, byte·seconds per call

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


def _identifier(node: ast.AST) -> list[str]:
    """The names a node binds or reads, including the attribute names of `match` class patterns."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.asname or node.name]
    if isinstance(node, ast.MatchClass):
        return list(node.kwd_attrs)
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    return []


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
        for ident in _identifier(node):
            if ident.startswith("_") or ident in FORBIDDEN_NAMES:
                return f"name {ident!r} is not allowed"
        if isinstance(node, ast.Global | ast.Nonlocal):
            return "global/nonlocal statements are not allowed"
    return None


# ----------------------------------------------------------------------------------------------- the sandbox


def sandbox_command(limits: Limits, info_fd: int) -> list[str]:
    """The bubblewrap command line that runs the runner under the system interpreter; bubblewrap writes the
    sandbox's pid to `info_fd`."""
    return ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--clearenv", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64",
            "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.tmpfs_mb * 2**20), "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--as-pid-1", "--info-fd", str(info_fd), "--", PYTHON, "-I", "-S", "-c", RUNNER]


def launch_command(limits: Limits, uid: int, info_fd: int) -> list[str]:
    """The whole command: util-linux's ``setpriv`` becomes a user of our own (when we are root) and ``prlimit``
    sets the limits, each replacing itself by the next program, so no Python code runs between fork and exec and
    the parent can spawn without copying its address space (a fork of a parent holding torch cost 0.2 s a run)."""
    mem = limits.memory_mb * 2**20
    limit = ["prlimit", f"--as={mem}", f"--cpu={limits.cpu_s}", "--fsize=0", "--core=0", f"--nproc={NPROC}", "--"]
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] if os.getuid() == 0 else []
    return drop + limit + sandbox_command(limits, info_fd)


@dataclass(frozen=True)
class _Run:
    returncode: int | None  # None: killed at the wall-clock limit
    cpu: float  # user + system seconds of the whole sandbox
    peak: int  # bytes: the runner's resident high-water mark
    area: float  # byte·seconds of the runner's resident memory
    report: dict | None  # the runner's JSON line on its result pipe
    pid: int | None = None  # the runner's pid (outside the sandbox's namespace)


def _memory(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a process in bytes: its resident memory now and at its peak since it started."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _sample_memory(info_r: int, interval: float, out: dict, done: threading.Event) -> None:
    """Read the runner's pid from bubblewrap's info fd, then sample its resident memory every `interval` s until it
    ends: `out["area"]` is the time-integral of the resident set (byte·s), `out["peak"]` its high-water mark."""
    try:
        raw = b""
        while not done.is_set() and not raw.rstrip().endswith(b"}"):
            if select.select([info_r], [], [], 0.05)[0]:
                chunk = os.read(info_r, 4096)
                if not chunk:
                    break
                raw += chunk
        pid = out["pid"] = json.loads(raw)["child-pid"]
        last = time.perf_counter()
        while not done.is_set():
            mem = _memory(pid)
            now = time.perf_counter()
            if mem is None:
                break
            out["area"] += mem[0] * (now - last)
            out["peak"] = max(out["peak"], mem[1])
            last = now
            time.sleep(interval)
    except (OSError, ValueError, KeyError):
        pass


def _kill(proc: subprocess.Popen, runner: int | None) -> None:
    """Kill bubblewrap and the runner, PID 1 of the sandbox's namespace, whose death kills every process left
    in it; return once the runner is gone (at most half a second)."""
    for kill, pid in ((os.killpg, proc.pid), (os.kill, runner)):
        if pid is not None:
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.perf_counter() + 0.5
    while runner is not None and time.perf_counter() < deadline:
        try:
            if Path(f"/proc/{runner}/stat").read_text().split(") ")[-1][0] in "ZX":
                break
        except OSError:
            break
        time.sleep(0.005)


def sandboxed(job: dict, limits: Limits) -> _Run:
    """One run of the runner on `job` in a fresh sandbox; never waits past `limits.wall_s` (+ a kill)."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bubblewrap is not installed: `apt-get install bubblewrap` (Debian/Ubuntu), then "
                                 "re-run; generated code is never run without it")
    missing = [tool for tool in ("setpriv", "prlimit") if shutil.which(tool) is None]
    if missing:
        raise SandboxUnavailable(f"{' and '.join(missing)} (util-linux) not found: the sandbox sets its user and "
                                 "limits with them")
    for _ in range(8):  # a user of this run's own; another sandbox holding the same uid refuses the start
        try:
            return _sandboxed_as(60000 + (os.getpid() * 7919 + next(_UIDS)) % 5000, job, limits)
        except _UidBusy:
            continue
    raise SandboxUnavailable("no free sandbox uid in 60000-64999 after 8 tries")


class _UidBusy(Exception):
    pass


def _sandboxed_as(uid: int, job: dict, limits: Limits) -> _Run:
    res_r, res_w = os.pipe()
    info_r, info_w = os.pipe()
    os.set_inheritable(res_w, True)
    os.set_inheritable(info_w, True)
    start = time.perf_counter()
    proc = subprocess.Popen(launch_command(limits, uid, info_w), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"}, start_new_session=True,
                            pass_fds=(res_w, info_w))
    os.close(res_w)
    os.close(info_w)
    samples, done = {"area": 0.0, "peak": 0, "pid": None}, threading.Event()
    sampler = threading.Thread(target=_sample_memory, args=(info_r, limits.interval, samples, done), daemon=True)
    sampler.start()
    report, buf, err = None, b"", b""
    try:
        proc.stdin.write(json.dumps(dict(job, fd=res_w)).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    deadline = start + limits.wall_s
    fds = [res_r, proc.stderr.fileno()]
    while fds and time.perf_counter() < deadline:
        ready = select.select(fds, [], [], max(0.0, deadline - time.perf_counter()))[0]
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                fds.remove(fd)
            elif fd == res_r:
                buf += chunk
            else:
                err += chunk[:4096]
    returncode = None
    if fds:  # the wall-clock limit: kill the sandbox, whatever holds its pipes
        _kill(proc, samples["pid"])
    _, status, usage = os.wait4(proc.pid, 0)
    if not fds:
        returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join(timeout=1.0)
    os.close(res_r)
    os.close(info_r)
    proc.stderr.close()
    if b"bwrap:" in err and b"Resource temporarily unavailable" in err:
        raise _UidBusy
    if b"bwrap:" in err and returncode not in (0, None):
        raise SandboxUnavailable(f"bubblewrap could not start the sandbox ({err.decode(errors='replace').strip()}); "
                                 "user namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1, "
                                 "user.max_user_namespaces > 0)")
    try:
        report = json.loads(buf.decode().splitlines()[0]) if buf else None
    except (ValueError, IndexError):
        report = {"error": "unreadable report"}
    return _Run(returncode, usage.ru_utime + usage.ru_stime, samples["peak"], samples["area"], report,
                samples["pid"])


@cache
def _probe() -> None:
    """Fail early, with the reason, when this machine cannot run the sandbox at all."""
    run = sandboxed({"source": "def f():\n    return 1\n", "entry": "f", "inputs": [[]], "perf": [], "calls": 0,
                     "mode": "run"}, Limits())
    if run.report != {"outputs": [{"value": 1}]}:
        raise SandboxUnavailable(f"the sandbox runs but its runner did not report (exit {run.returncode}); is "
                                 f"{PYTHON} a working Python 3?")


# ---------------------------------------------------------------------------------------------- measurement


def _timeout(run: _Run, limits: Limits) -> Execution | None:
    """TIMEOUT for a run stopped at the wall-clock or CPU limit, else None."""
    if run.returncode is None:
        return Execution("TIMEOUT", f"wall-clock limit of {limits.wall_s} s")
    # killed by the CPU limit: the signal itself, or bubblewrap's 128 + signal for its child
    killed = {-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL}
    if run.returncode in killed or run.cpu >= 0.95 * limits.cpu_s:
        return Execution("TIMEOUT", f"CPU limit of {limits.cpu_s} s")
    return None


def _failure(run: _Run, limits: Limits) -> Execution | None:
    """The Execution for a run that did not finish normally, or None."""
    timed_out = _timeout(run, limits)
    if timed_out:
        return timed_out
    if run.report and "MemoryError" in str(run.report.get("error", "")):
        return Execution("MEMORY", "MemoryError")
    if run.returncode == EXIT_MEMORY:
        return Execution("MEMORY", "MemoryError on the performance input")
    if run.returncode == EXIT_RAISED:
        return Execution("FAIL", "raised on the performance input")
    if run.returncode != 0:
        return Execution("MEMORY" if run.returncode == -signal.SIGSEGV else "FAIL",
                         f"the sandbox exited with code {run.returncode}")
    return None


def _compare(report: dict | None, tests: list) -> str | None:
    """Why the candidate's reported outputs do not match the expected ones (None: they all do)."""
    if not report or "outputs" not in report:
        return (report or {}).get("error", "no result")
    outputs = report["outputs"]
    if len(outputs) != len(tests):
        return f"{len(outputs)} outputs for {len(tests)} tests"
    for (args, expected), out in zip(tests, outputs):
        if "error" in out:
            return f"{out['error']} on {json.dumps(args)[:60]}"
        if out.get("value") != expected:
            return f"wrong answer on {json.dumps(args)[:60]}: got {out.get('value')!r:.40}, expected {expected!r:.40}"
    return None


def _round_up(x: float) -> int:
    """The next of 1, 2, 5, 10, 20, 50, ... at or above x (few distinct call counts: baselines are shared)."""
    k = 10 ** max(0, math.floor(math.log10(max(x, 1))))
    return next(int(m * k) for m in (1, 2, 5, 10) if m * k >= x)


@cache
def _baseline(perf_json: str, calls: int, limits: Limits) -> _Run:
    """The cost of the sandbox without the candidate: start-up and decoding the performance input `calls` times
    (the minimum CPU, memory-time and peak over `limits.repeats` runs), shared by every candidate on that input."""
    job = {"source": "", "entry": "", "inputs": [], "perf": json.loads(perf_json), "calls": calls, "mode": "base"}
    runs = [sandboxed(job, limits) for _ in range(limits.repeats)]
    return _Run(0, min(r.cpu for r in runs), min(r.peak for r in runs), min(r.area for r in runs), None)


def run_candidate(source: str, tests: list, perf: list, entry: str = "f", limits: Limits = Limits(),
                  static_check: bool = True) -> Execution:
    """Run `source` in the sandbox: every `(args, expected)` in `tests` must give `expected` from `entry(*args)`
    (compared here, never inside); if all do, measure ET, MU and TMU of `entry(*perf)` from outside, as the
    candidate's run minus the sandbox's baseline (start-up and decoding the input), per call. Never raises on the
    candidate's account; raises :class:`SandboxUnavailable` when the machine cannot sandbox.

    `static_check=False` skips the allow-list, to test that the sandbox holds on its own."""
    try:
        reason = check_source(source) if static_check else None
    except SyntaxError as e:
        return Execution("FAIL", f"SyntaxError: {e.msg} (line {e.lineno})")
    if reason:
        return Execution("BLOCKED", reason)
    _probe()
    job = {"source": source, "entry": entry, "inputs": [args for args, _ in tests], "perf": perf, "mode": "run"}
    perf_json = json.dumps(perf)
    run = sandboxed(dict(job, calls=1), limits)
    timed_out = _timeout(run, limits)
    if timed_out:
        return timed_out
    wrong = _compare(run.report, tests)
    if wrong:
        return Execution("MEMORY" if "MemoryError" in wrong else "FAIL", wrong)
    # how many calls to time is chosen against the bare sandbox's start-up, one measurement shared by every task;
    # what is subtracted from the timed runs is still the baseline of this input at the chosen call count
    calls, startup = 1, _baseline("[]", 0, limits).cpu
    def growth(spent: float, cpu: float) -> float:
        """How much to multiply the calls by: towards min_time, but keeping a timed run well inside the CPU limit
        (decoding a large input may cost more than the call itself)."""
        return min(100.0, max(2.0, limits.min_time / max(spent, 1e-4)), 0.25 * limits.cpu_s / max(cpu, 1e-3))

    while True:  # more calls until they cost at least min_time of CPU beyond the sandbox's start-up
        failed = _failure(run, limits)
        if failed:
            return failed
        spent = run.cpu - startup
        if spent >= limits.min_time or calls >= limits.max_calls or growth(spent, run.cpu) < 2:
            runs = [run]
            for _ in range(limits.repeats - 1):
                runs.append(sandboxed(dict(job, calls=calls), limits))
                failed = _failure(runs[-1], limits)
                if failed:
                    return failed
            base = _baseline(perf_json, calls, limits)
            spent = min(r.cpu for r in runs) - base.cpu  # start-up jitter only ever adds CPU: the minimum
            if spent >= limits.min_time / 2 or calls >= limits.max_calls or growth(spent, run.cpu) < 2:
                break
        calls = _round_up(min(limits.max_calls, calls * growth(spent, run.cpu)))
        run = sandboxed(dict(job, calls=calls), limits)
    return Execution("PASS", f"{calls} calls per timed run",
                     time=max((min(r.cpu for r in runs) - base.cpu) / calls, 1e-9),
                     peak=float(max(max(r.peak for r in runs) - base.peak, 0)),
                     area=max((min(r.area for r in runs) - base.area) / calls, 0.0))
