"""An operating-system sandbox for untrusted generated Python, and the three measurements EffiCoder selects on.

**Isolation** (:func:`sandbox_command`). Every run of a candidate is a fresh bubblewrap sandbox (Debian package
``bubblewrap``), started as an unprivileged user of its own (a uid no other process has, so the process limit
counts this sandbox alone): new user, PID, network, IPC, UTS and cgroup namespaces; a read-only view of ``/usr``
(the system interpreter and its libraries) and nothing else of the host; a private, size-limited tmpfs as the
only writable place; a private ``/proc`` that shows only the sandbox's processes; an empty environment; a new
session; ``--die-with-parent``; a seccomp filter (libseccomp, :data:`SECCOMP_DENIED`) that refuses the kernel
surfaces a program has no use for (tracing, keyrings, performance counters, BPF, io_uring, namespaces, mounts).
It needs root, to run each candidate as a user of its own. Resource limits bound CPU seconds, address space,
file size and processes (the
candidate cannot fork or spawn). On timeout the parent kills bubblewrap, its PID namespace's init dies with it,
and the kernel kills every process left in the namespace; every wait is bounded, so the caller is back within
``wall_s`` + 1 s whatever the candidate does. No bubblewrap, or user namespaces refused: :class:`SandboxUnavailable`
says how to install or enable it; there is no weaker fallback.

**Measurements the candidate cannot forge.** The runner (:mod:`.child`) never sees the expected outputs: it
reports the candidate's outputs over a pipe, and the parent compares them. One sandbox start serves one
candidate: after its outputs, the parent asks the same runner for *batches* (``prepare L``: decode up to `L`
fresh copies of the performance input, untimed; ``call L``: the entry `L` times on the prepared copies in turn)
and reads, from outside,
the runner's CPU time (``/proc/<pid>/schedstat``, nanoseconds) and resident high-water mark before and after each
batch, and its resident memory every `interval` seconds while a batch runs. So the sandbox's start-up is in no
measurement, and no clock the candidate could touch is in any. `L` grows from 1 until a batch costs at least
`min_time` of CPU. Standard output is never read.

- ET, execution time: minimum over `repeats` call batches / `L`, as measured: nothing is subtracted and there is
  no floor (decoding the input is outside the timed batch, so no subtraction is needed);
- MU, peak memory: the runner's resident high-water mark after the call batches (bytes: the whole process's
  peak, as the paper's ``mprof`` reports it);
- TMU, memory-time: the time-integral of the runner's resident memory during the call batch, per call.

A program that escaped the restricted builtins could end a batch early (write ``ok`` itself) and look fast, as
it could exit early under any scheme that lets it run the calls; what it can *reach* does not depend on this.

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
#: the most bytes the parent reads from a runner's result pipe; a runner that writes more is cut off (its report
#: is lost and the run fails), so a program that reaches the pipe cannot grow the parent's memory
RESULT_CAP = 1 << 20
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
    min_time: float = 0.02  # the calls of one timed batch cost at least this much CPU (s)
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


#: system calls the sandbox refuses (EPERM) by a seccomp filter, beside the namespaces: the kernel surfaces a
#: program has no use for and escapes have used (tracing, keyrings, performance counters, BPF, io_uring,
#: userfaultfd, namespaces and mounts, modules, kexec)
SECCOMP_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key",
                  "perf_event_open", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
                  "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "personality", "kexec_load",
                  "kexec_file_load", "init_module", "finit_module", "delete_module", "acct", "swapon", "swapoff",
                  "reboot", "syslog", "quotactl", "lookup_dcookie", "name_to_handle_at", "open_by_handle_at")


@cache
def seccomp_program() -> bytes:
    """The seccomp BPF program bubblewrap installs (``--seccomp``) before it runs the runner: allow every system
    call but those of `SECCOMP_DENIED`, which fail with EPERM. Compiled by libseccomp (through ctypes) for this
    machine's architecture."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        raise SandboxUnavailable("libseccomp is not installed: `apt-get install libseccomp2` (Debian/Ubuntu); the "
                                 "sandbox needs it for its system-call filter") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SCMP_ACT_ALLOW, SCMP_ACT_ERRNO(EPERM)
    ctx = lib.seccomp_init(allow)
    try:
        for call in SECCOMP_DENIED:
            number = lib.seccomp_syscall_resolve_name(call.encode())
            if number >= 0 and lib.seccomp_rule_add(ctx, deny, number, 0) != 0:
                raise SandboxUnavailable(f"libseccomp refused a rule for {call!r}")
        r, w = os.pipe()
        try:
            if lib.seccomp_export_bpf(ctx, w) != 0:
                raise SandboxUnavailable("libseccomp could not export the system-call filter")
            os.close(w)
            w = None
            out = b""
            while chunk := os.read(r, 65536):
                out += chunk
            return out
        finally:
            os.close(r)
            if w is not None:
                os.close(w)
    finally:
        lib.seccomp_release(ctx)


def _seccomp_fd() -> int:
    """A pipe's read end holding `seccomp_program()`, for bubblewrap's ``--seccomp`` (it reads it once)."""
    r, w = os.pipe()
    os.write(w, seccomp_program())  # a few hundred bytes: well within the pipe's buffer
    os.close(w)
    os.set_inheritable(r, True)
    return r


def sandbox_command(limits: Limits, info_fd: int, seccomp_fd: int | None = None) -> list[str]:
    """The bubblewrap command line that runs the runner under the system interpreter; bubblewrap writes the
    sandbox's pid to `info_fd` and installs the seccomp filter it reads from `seccomp_fd`."""
    filter_ = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    return ["bwrap", *filter_, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--clearenv", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64",
            "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.tmpfs_mb * 2**20), "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--as-pid-1", "--info-fd", str(info_fd), "--", PYTHON, "-I", "-S", "-c", RUNNER]


def launch_command(limits: Limits, uid: int, info_fd: int, seccomp_fd: int | None = None) -> list[str]:
    """The whole command: util-linux's ``setpriv`` becomes a user of our own (when we are root) and ``prlimit``
    sets the limits, each replacing itself by the next program, so no Python code runs between fork and exec and
    the parent can spawn without copying its address space (a fork of a parent holding torch cost 0.2 s a run)."""
    mem = limits.memory_mb * 2**20
    limit = ["prlimit", f"--as={mem}", f"--cpu={limits.cpu_s}", "--fsize=0", "--core=0", f"--nproc={NPROC}", "--"]
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] if os.getuid() == 0 else []
    return drop + limit + sandbox_command(limits, info_fd, seccomp_fd)


@dataclass(frozen=True)
class Batch:
    """One batch the runner served, measured from outside."""

    kind: str  # "prepare" or "call"
    calls: int
    cpu: float  # the runner's CPU seconds during the batch
    area: float  # byte·seconds of the runner's resident memory during the batch
    hwm: int  # the runner's resident high-water mark after the batch (bytes)


@dataclass(frozen=True)
class _Run:
    returncode: int | None  # None: killed at the wall-clock limit
    cpu: float  # user + system seconds of the whole sandbox
    peak: int  # bytes: the runner's resident high-water mark seen while batches ran
    report: dict | None  # the runner's JSON line on its result pipe
    pid: int | None = None  # the runner's pid (outside the sandbox's namespace)


def _memory(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a process in bytes: its resident memory now and at its peak since it started."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _cpu(pid: int) -> float | None:
    """The CPU seconds a process has run (the scheduler's nanosecond count), or None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) * 1e-9
    except (OSError, ValueError, IndexError):
        return None


def _read_pid(info_r: int, deadline: float) -> int | None:
    """The runner's pid, from the JSON bubblewrap writes on its info fd (None: bubblewrap ended first)."""
    raw = b""
    while not raw.rstrip().endswith(b"}") and time.perf_counter() < deadline:
        if select.select([info_r], [], [], max(0.0, deadline - time.perf_counter()))[0]:
            chunk = os.read(info_r, 4096)
            if not chunk:
                break
            raw += chunk
    try:
        return json.loads(raw)["child-pid"]
    except (ValueError, KeyError):
        return None


def _sample_memory(pid: int, interval: float, out: dict, busy: threading.Event, done: threading.Event) -> None:
    """While a batch runs (`busy` set), sample the runner's resident memory every `interval` s: the batch's list
    `out["phase"]` accumulates the time-integral of the resident set (byte·s), `out["peak"]` keeps the high-water
    mark. Ends with the runner or when `done` is set."""
    while not done.is_set():
        if not busy.wait(0.05):
            continue
        phase, last = out["phase"], time.perf_counter()
        while busy.is_set() and out["phase"] is phase and not done.is_set():
            time.sleep(interval)
            mem = _memory(pid)
            now = time.perf_counter()
            if mem is None:
                return
            phase[0] += mem[0] * (now - last)
            out["peak"] = max(out["peak"], mem[1])
            last = now


class _Lines:
    """Lines from the runner's result pipe (at most `RESULT_CAP` bytes in all), read with a deadline, while its
    stderr is drained (first 4 KiB kept)."""

    def __init__(self, res_r: int, err_r: int):
        self.fds, self.res_r, self.buf, self.err = [res_r, err_r], res_r, b"", b""
        self.read_total = 0

    def next(self, deadline: float) -> bytes | None:
        """The next line (without its newline); None at end of file or at the deadline."""
        while b"\n" not in self.buf:
            if self.res_r not in self.fds or not self._read(deadline):
                return None
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def drain(self, deadline: float) -> bool:
        """Read until both pipes close; False at the deadline."""
        while self.fds:
            if not self._read(deadline):
                return False
        return True

    def _read(self, deadline: float) -> bool:
        left = deadline - time.perf_counter()
        ready = select.select(self.fds, [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            return False
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                self.fds.remove(fd)
            elif fd == self.res_r:
                self.read_total += len(chunk)
                self.buf += chunk
                if self.read_total > RESULT_CAP:  # stop reading: the runner then blocks until it is killed
                    self.fds.remove(fd)
                    self.buf = b""
            else:
                self.err += chunk[:4096 - len(self.err)]
        return True


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


def sandboxed(job: dict, limits: Limits, driver=None) -> _Run:
    """One run of the runner on `job` in a fresh sandbox; never waits past `limits.wall_s` (+ a kill). Once the
    runner has reported its outputs, `driver(report, batch)` (when given) may ask it for batches:
    ``batch(kind, calls) -> Batch | None`` (None: the runner stopped, or the time is up)."""
    if shutil.which("bwrap") is None:
        raise SandboxUnavailable("bubblewrap is not installed: `apt-get install bubblewrap` (Debian/Ubuntu), then "
                                 "re-run; generated code is never run without it")
    if os.getuid() != 0:
        raise SandboxUnavailable("the sandbox runs each candidate as a user of its own (setpriv), so that its "
                                 "process limit counts that sandbox alone, which needs root: run the build as root "
                                 "(as CI does, in its container); as another user the limit would count all of "
                                 "your processes and the sandbox could not start")
    missing = [tool for tool in ("setpriv", "prlimit") if shutil.which(tool) is None]
    if missing:
        raise SandboxUnavailable(f"{' and '.join(missing)} (util-linux) not found: the sandbox sets its user and "
                                 "limits with them")
    for _ in range(8):  # a user of this run's own; another sandbox holding the same uid refuses the start
        try:
            return _sandboxed_as(60000 + (os.getpid() * 7919 + next(_UIDS)) % 5000, job, limits, driver)
        except _UidBusy:
            continue
    raise SandboxUnavailable("no free sandbox uid in 60000-64999 after 8 tries")


class _UidBusy(Exception):
    pass


def _send(proc: subprocess.Popen, text: str) -> bool:
    try:
        proc.stdin.write(text.encode())
        proc.stdin.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def _sandboxed_as(uid: int, job: dict, limits: Limits, driver) -> _Run:
    res_r, res_w = os.pipe()
    info_r, info_w = os.pipe()
    os.set_inheritable(res_w, True)
    os.set_inheritable(info_w, True)
    seccomp_r = _seccomp_fd()
    start = time.perf_counter()
    deadline = start + limits.wall_s
    proc = subprocess.Popen(launch_command(limits, uid, info_w, seccomp_r), stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"},
                            start_new_session=True, pass_fds=(res_w, info_w, seccomp_r))
    os.close(res_w)
    os.close(info_w)
    os.close(seccomp_r)
    samples, busy, done = {"peak": 0, "phase": None}, threading.Event(), threading.Event()
    pid = _read_pid(info_r, deadline)
    sampler = threading.Thread(target=_sample_memory, args=(pid, limits.interval, samples, busy, done), daemon=True)
    if pid is not None:
        sampler.start()
    _send(proc, json.dumps(dict(job, fd=res_w)) + "\n")
    lines = _Lines(res_r, proc.stderr.fileno())
    first = lines.next(deadline)
    try:
        report = json.loads(first) if first else None
    except ValueError:
        report = {"error": "unreadable report"}

    def batch(kind: str, calls: int) -> Batch | None:
        before = _cpu(pid) if pid is not None else None
        samples["phase"] = phase = [0.0]
        busy.set()
        if before is None or not _send(proc, f"{kind} {calls}\n"):
            busy.clear()
            return None
        line = lines.next(deadline)
        after, mem = _cpu(pid), _memory(pid)
        busy.clear()
        if line != b"ok" or after is None or mem is None:
            return None
        return Batch(kind, calls, after - before, phase[0], mem[1])

    if driver is not None and report is not None:
        driver(report, batch)
    try:
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    returncode = None
    if lines.drain(deadline):
        _, status, usage = os.wait4(proc.pid, 0)
        returncode = os.waitstatus_to_exitcode(status)
    else:  # the wall-clock limit: kill the sandbox, whatever holds its pipes
        _kill(proc, pid)
        _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    if pid is not None:
        sampler.join(timeout=1.0)
    os.close(res_r)
    os.close(info_r)
    proc.stderr.close()
    err = lines.err
    if b"bwrap:" in err and b"Resource temporarily unavailable" in err:
        raise _UidBusy
    if b"bwrap:" in err and returncode not in (0, None):
        raise SandboxUnavailable(f"bubblewrap could not start the sandbox ({err.decode(errors='replace').strip()}); "
                                 "user namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1, "
                                 "user.max_user_namespaces > 0)")
    return _Run(returncode, usage.ru_utime + usage.ru_stime, samples["peak"], report, pid)


@cache
def _probe() -> None:
    """Fail early, with the reason, when this machine cannot run the sandbox at all."""
    run = sandboxed({"source": "def f():\n    return 1\n", "entry": "f", "inputs": [[]], "perf": []}, Limits())
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
    """The next of 1, 2, 5, 10, 20, 50, ... at or above x."""
    k = 10 ** max(0, math.floor(math.log10(max(x, 1))))
    return next(int(m * k) for m in (1, 2, 5, 10) if m * k >= x)


def _timed(batch, limits: Limits) -> dict | None:
    """ET, MU and TMU from the batches of one runner (see the module docstring); None if the runner stopped."""
    def prepared(kind: str, n: int) -> Batch | None:
        """A timed batch of `n` calls, on copies of the input decoded just before, outside the batch."""
        return batch(kind, n) if batch("prepare", n) is not None else None

    calls = 1
    while True:  # more calls until a batch costs at least min_time of CPU
        run = prepared("call", calls)
        if run is None:
            return None
        if run.cpu >= limits.min_time or calls >= limits.max_calls:
            break
        calls = _round_up(min(limits.max_calls, calls * min(100.0, max(2.0, limits.min_time / max(run.cpu, 1e-6)))))
    runs = [run] + [prepared("call", calls) for _ in range(limits.repeats - 1)]
    if None in runs:
        return None
    return {"calls": calls, "time": min(r.cpu for r in runs) / calls, "peak": float(max(r.hwm for r in runs)),
            "area": min(r.area for r in runs) / calls}


def run_candidate(source: str, tests: list, perf: list, entry: str = "f", limits: Limits = Limits(),
                  static_check: bool = True) -> Execution:
    """Run `source` in one fresh sandbox: every `(args, expected)` in `tests` must give `expected` from
    `entry(*args)` (compared here, never inside); if all do, the same runner serves the timed batches and ET, MU
    and TMU of `entry(*perf)` are measured from outside, per call. Never raises on the candidate's account;
    raises :class:`SandboxUnavailable` when the machine cannot sandbox.

    `static_check=False` skips the allow-list, to test that the sandbox holds on its own."""
    try:
        reason = check_source(source) if static_check else None
    except SyntaxError as e:
        return Execution("FAIL", f"SyntaxError: {e.msg} (line {e.lineno})")
    if reason:
        return Execution("BLOCKED", reason)
    _probe()
    measured = {}

    def driver(report, batch):
        if _compare(report, tests) is None:
            measured["m"] = _timed(batch, limits)

    run = sandboxed({"source": source, "entry": entry, "inputs": [args for args, _ in tests], "perf": perf},
                    limits, driver)
    timed_out = _timeout(run, limits)
    if timed_out:
        return timed_out
    wrong = _compare(run.report, tests)
    if wrong:
        return Execution("MEMORY" if "MemoryError" in wrong else "FAIL", wrong)
    failed = _failure(run, limits)
    if failed:
        return failed
    m = measured.get("m")
    if m is None:
        return Execution("FAIL", "the runner stopped before its timed batches ended")
    return Execution("PASS", f"{m['calls']} calls per timed run", time=m["time"], peak=m["peak"], area=m["area"])
