"""The runner inside the sandbox of :mod:`icml25.efficient_code.sandbox`. It runs as an unprivileged user in a
bubblewrap sandbox (no network, no view of the host's processes or files, a read-only root), from the source
text ``python -I -S -c`` is given, so nothing of it lies on a file the candidate could reach.

It reads one JSON job as the first line of stdin: the candidate's ``source`` and ``entry``, the unit-test
``inputs`` (never their expected outputs: the parent compares) and the performance input ``perf``. It writes the
candidate's outputs on the unit-test inputs as one JSON line to the job's file descriptor ``fd`` (a pipe to the
parent). Then it serves *batches*, one command line of stdin each: ``prepare N`` decodes fresh copies of
``perf`` (untimed; N of them, or as many as `PREPARED_BYTES` of input text allow), ``call N`` calls the entry N
times, on the prepared copies in turn, so a timed batch holds the calls and nothing else (where copies are reused,
a program that changes its input sees its own change; the unit tests decide correctness before any timing); after each it writes ``ok`` on the pipe and waits for the next command (the parent reads the runner's CPU time and memory from ``/proc`` before and after, from
outside, so no clock the candidate could touch enters a measurement). End of stdin ends the runner. The
restricted builtins and import hook below are defence in depth only; nothing depends on them."""

import builtins
import json
import os
import sys

EXIT_MEMORY, EXIT_RAISED = 3, 4  # the performance input ran out of memory / raised
PREPARED_BYTES = 16 << 20  # the prepared copies of the performance input hold at most this much JSON text
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


def _output(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return {"unserialisable": repr(value)[:80]}


def main():
    commands = sys.stdin
    job = json.loads(commands.readline())
    results = os.fdopen(job["fd"], "w")
    sys.stdout = sys.stderr = open(os.devnull, "w")
    safe = {k: getattr(builtins, k) for k in SAFE_BUILTINS}
    safe["__import__"] = _guarded_import
    safe["print"] = lambda *a, **k: None
    env = {"__builtins__": safe, "__name__": "candidate"}
    perf = json.dumps(job["perf"])
    try:
        exec(compile(job["source"], "<candidate>", "exec"), env)
        fn = env[job["entry"]]
    except MemoryError:
        results.write(json.dumps({"error": "MemoryError"}) + "\n")
        return
    except BaseException as e:
        results.write(json.dumps({"error": f"{type(e).__name__}: {str(e)[:120]}"}) + "\n")
        return
    outputs = []
    for args in job["inputs"]:
        try:
            outputs.append({"value": _output(fn(*json.loads(json.dumps(args))))})
        except MemoryError:
            outputs.append({"error": "MemoryError"})
        except BaseException as e:
            outputs.append({"error": f"{type(e).__name__}: {str(e)[:120]}"})
    results.write(json.dumps({"outputs": outputs}) + "\n")
    results.flush()
    prepared = []
    for line in commands:
        kind, n = line.split()
        try:
            if kind == "prepare":
                prepared = [json.loads(perf) for _ in range(max(1, min(int(n), PREPARED_BYTES // len(perf))))]
            else:
                for i in range(int(n)):
                    fn(*prepared[i % len(prepared)])
        except MemoryError:
            os._exit(EXIT_MEMORY)
        except BaseException:
            os._exit(EXIT_RAISED)
        results.write("ok\n")
        results.flush()


if __name__ == "__main__":
    main()
