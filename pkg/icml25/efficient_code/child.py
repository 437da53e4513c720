"""The sandboxed side of :mod:`icml25.efficient_code.sandbox`: run with ``python -I -S child.py`` inside a fresh
temporary directory, an empty environment, its own process group and resource limits. It reads one JSON job
from stdin, runs the candidate against its unit tests and, if all pass, measures the performance input; it writes
one JSON result line to stdout. Only the standard library is imported, all of it before the candidate runs."""

import builtins
import json
import sys
import threading
import time
import tracemalloc

ALLOWED_MODULES = ("math", "heapq", "itertools", "collections", "bisect", "functools")
SAFE_BUILTINS = ("abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "frozenset", "int",
                 "isinstance", "len", "list", "map", "max", "min", "pow", "range", "reversed", "round", "set",
                 "sorted", "str", "sum", "tuple", "zip", "bytearray", "bytes", "chr", "ord", "iter",
                 "next", "slice", "True", "False", "None", "ValueError", "IndexError",
                 "KeyError", "ZeroDivisionError", "StopIteration", "Exception", "MemoryError", "RecursionError")


def _guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level != 0 or name.split(".")[0] not in ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} is not allowed")
    return __import__(name, globals, locals, fromlist, level)


def _disable_escape_hatches():
    """Defence in depth behind the AST allow-list: no process, file-system or network calls reachable."""
    import os
    for name in ("system", "fork", "forkpty", "execv", "execve", "spawnv", "popen", "kill", "killpg", "remove",
                 "unlink", "rmdir", "rename", "chdir", "putenv", "open"):
        if hasattr(os, name):
            setattr(os, name, None)
    for name in ("socket", "subprocess", "ctypes", "shutil", "multiprocessing"):
        sys.modules[name] = None  # `import socket` now raises ImportError


def _call(fn, args):
    return fn(*json.loads(args))


def _time_per_call(fn, args, repeats, min_time):
    """Minimum over `repeats` of the mean time per call, each repeat looping until it lasts `min_time` s."""
    best = float("inf")
    for _ in range(repeats):
        number, elapsed = 0, 0.0
        while number == 0 or elapsed < min_time:
            fresh = json.loads(args)
            t0 = time.perf_counter()
            fn(*fresh)
            elapsed += time.perf_counter() - t0
            number += 1
        best = min(best, elapsed / number)
    return best


def _memory_profile(fn, args, interval):
    """Peak traced memory (bytes) of one call and its time-integral (byte·s), sampled every `interval` s."""
    fresh = json.loads(args)
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append((time.perf_counter(), tracemalloc.get_traced_memory()[0] - base))
            time.sleep(interval)

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    thread = threading.Thread(target=sampler)
    thread.start()
    fn(*fresh)
    stop.set()
    thread.join()
    samples.append((time.perf_counter(), tracemalloc.get_traced_memory()[0] - base))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    area = sum((t1 - t0) * (m0 + m1) / 2 for (t0, m0), (t1, m1) in zip(samples, samples[1:]))
    return max(peak, 0), max(area, 0.0)


def main():
    job = json.loads(sys.stdin.read())
    out = sys.stdout
    sys.stdout = sys.stderr = open("/dev/null", "w")
    sys.setswitchinterval(job["interval"] / 4)
    _disable_escape_hatches()
    safe = {k: getattr(builtins, k) for k in SAFE_BUILTINS}
    safe["__import__"] = _guarded_import
    safe["print"] = lambda *a, **k: None
    env = {"__builtins__": safe, "__name__": "candidate"}
    result = {"status": "FAIL", "detail": "", "time": None, "peak": None, "area": None}
    try:
        exec(compile(job["source"], "<candidate>", "exec"), env)
        fn = env[job["entry"]]
        for args, expected in job["tests"]:
            got = _call(fn, json.dumps(args))
            if got != expected:
                result["detail"] = f"wrong answer on {json.dumps(args)[:60]}: got {got!r:.40}, expected {expected!r:.40}"
                break
        else:
            perf = json.dumps(job["perf"])
            result["time"] = _time_per_call(fn, perf, job["repeats"], job["min_time"])
            result["peak"], result["area"] = _memory_profile(fn, perf, job["interval"])
            result["status"] = "PASS"
    except MemoryError:
        result = dict(result, status="MEMORY", detail="MemoryError")
    except BaseException as e:  # the candidate's failure, reported, never raised past the sandbox
        result["detail"] = f"{type(e).__name__}: {str(e)[:120]}"
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
