"""The sandbox is security-critical: every escape route the chapter knows of is tried here, with the static
allow-list on and, where it matters, off (so the process isolation is tested on its own)."""

import os
import time

import pytest

from icml25 import efficient_code as E
from icml25.efficient_code import pipeline as P
from icml25.efficient_code import tasks as T
from icml25.efficient_code.sandbox import Execution, Limits, check_source, run_candidate

TESTS, PERF = [[[3], 3]], [3]
FAST = Limits(wall_s=3.0, cpu_s=2, repeats=1, min_time=0.0)


def run(body: str, static_check: bool = True, limits: Limits = FAST) -> Execution:
    return run_candidate(body, TESTS, PERF, limits=limits, static_check=static_check)


def test_plain_program_passes_and_is_measured():
    r = run("def f(n):\n    return n\n")
    assert r.status == "PASS" and r.time > 0 and r.peak >= 0 and r.area >= 0


def test_wrong_answer_fails():
    assert run("def f(n):\n    return n + 1\n").status == "FAIL"


def test_syntax_error_is_fail_not_exception():
    r = run("def f(n)\n    return n\n")
    assert r.status == "FAIL" and "SyntaxError" in r.detail


@pytest.mark.parametrize("static_check", [True, False])
def test_infinite_loop_times_out_within_limit(static_check):
    t0 = time.perf_counter()
    r = run("def f(n):\n    while True:\n        pass\n", static_check)
    assert r.status == "TIMEOUT"
    assert time.perf_counter() - t0 < FAST.wall_s + 1.0


def test_huge_allocation_is_memory():
    assert run("def f(n):\n    return len([0] * 2 ** 31)\n").status == "MEMORY"
    assert run("def f(n):\n    return len(bytearray(2 ** 31))\n").status == "MEMORY"


ESCAPES = {
    "write": "def f(n):\n    open('pwned.txt', 'w').write('x')\n    return n\n",
    "socket": "import socket\ndef f(n):\n    socket.socket().connect(('127.0.0.1', 80))\n    return n\n",
    "os.system": "import os\ndef f(n):\n    os.system('touch pwned.txt')\n    return n\n",
    "subprocess": "import subprocess\ndef f(n):\n    subprocess.run(['touch', 'pwned.txt'])\n    return n\n",
    "fork": "import os\ndef f(n):\n    os.fork()\n    return n\n",
    "environ": "import os\ndef f(n):\n    return n if os.environ.get('HOME') is None else -1\n",
    "off-list import": "import pickle\ndef f(n):\n    return n\n",
    "dunder": "def f(n):\n    return ().__class__.__base__.__subclasses__() and n\n",
    "dunder import": "def f(n):\n    return __import__('os').getpid() and n\n",
    "eval": "def f(n):\n    return eval('n')\n",
    "getattr": "def f(n):\n    return getattr((), '__class__') and n\n",
    "format trick": "def f(n):\n    return '{0.__class__}'.format(()) and n\n",
    "frame": "def f(n):\n    g = (x for x in [1])\n    return g.gi_frame.f_globals and n\n",
    "from import": "from os import system\ndef f(n):\n    system('true')\n    return n\n",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_is_blocked_statically(name):
    assert check_source(ESCAPES[name]) is not None
    assert run(ESCAPES[name]).status == "BLOCKED"


INTROSPECTION = ("dunder", "format trick", "frame")  # harmless on their own; layer 1 alone stops them


@pytest.mark.parametrize("name", sorted(set(ESCAPES) - set(INTROSPECTION)))
def test_escape_fails_at_runtime_without_static_check(name, tmp_path, monkeypatch):
    """Layer 2 alone: the program runs, but nothing it tries succeeds, so it never returns the right answer
    (each escape returns n only after the escape succeeded) and leaves no trace outside its directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("data")
    before = sorted(os.listdir(tmp_path))
    r = run(ESCAPES[name], static_check=False)
    assert r.status in ("FAIL", "MEMORY", "TIMEOUT"), r
    assert os.getcwd() == str(tmp_path)
    assert sorted(os.listdir(tmp_path)) == before and (tmp_path / "keep.txt").read_text() == "data"


def test_dunder_chain_to_os_system_fails_at_runtime(tmp_path):
    """The classic escape reaches os.system through object.__subclasses__(); inside the sandbox it is disabled."""
    target = tmp_path / "pwned"
    src = ("def f(n):\n    w = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]\n"
           f"    w.__init__.__globals__['system']('touch {target}')\n    return n\n")
    assert run(src).status == "BLOCKED"
    assert run(src, static_check=False).status == "FAIL"
    assert not target.exists()


def test_environment_is_empty_at_runtime(monkeypatch):
    """With a secret in the parent's environment, the child's program cannot even import `os` to look."""
    monkeypatch.setenv("SECRET_TOKEN", "s3cret")
    r = run("import os\ndef f(n):\n    return n if 'SECRET_TOKEN' not in os.environ else -1\n", static_check=False)
    assert r.status == "FAIL" and "ImportError" in r.detail  # os is not importable at all


def test_static_check_allows_the_allow_list():
    assert check_source("import heapq\nfrom collections import Counter\ndef f(x):\n    return x\n") is None


def _exec(t, a=0.0, p=0.0, status="PASS"):
    return Execution(status, time=t, area=a, peak=p)


def test_selection_picks_lowest_time_among_correct():
    cands = [("a", _exec(0.5)), ("b", _exec(0.1, status="FAIL")), ("c", _exec(0.2)), ("d", _exec(0.3))]
    assert P.select_fastest(cands) == "c"
    assert P.select_fastest([("x", Execution("FAIL")), ("y", Execution("TIMEOUT"))]) is None


def test_selection_ties_break_deterministically():
    cands = [("z", _exec(0.1, 2.0)), ("y", _exec(0.1, 1.0, 5.0)), ("x", _exec(0.1, 1.0, 5.0))]
    assert P.select_fastest(cands) == "x"
    assert P.select_fastest(cands[::-1]) == "x"


def test_selected_candidate_passes_and_is_fastest_on_real_programs():
    task = T.Task("pair_diff", 3)
    measure = P.Measurer(perf_size=2, limits=Limits(repeats=3, min_time=0.002))
    srcs = [T.program(task.family, v, task.c) for v in T.FAMILIES[task.family].variants]
    srcs.append(srcs[0].replace(" 3 ", " 4 "))  # a wrong constant: fails
    execs = measure([(task, s) for s in srcs])
    chosen = P.select_fastest(list(zip(srcs, execs)))
    e = execs[srcs.index(chosen)]
    assert e.passed and all(e.time <= o.time for o in execs if o.passed)
    assert not execs[-1].passed


def test_canonical_normalised_against_itself_is_exactly_one():
    """Normalisation is a ratio to the canonical solution's own measurement (timing noise is the benchmark's
    business, not a unit test's: the same measurement is compared with itself)."""
    task = T.Task("range_sum", 5)
    src = T.program(task.family, "prefix", task.c)
    tests, perf = T.unit_tests(task, 2)
    a = run_candidate(src, tests, perf, limits=Limits(repeats=3, min_time=0.003))
    assert a.passed
    assert all(v == 1 for v in P.normalised(a, a))


@pytest.mark.parametrize("family", sorted(T.FAMILIES))
def test_every_variant_is_correct_and_round_trips_through_tokens(family):
    task = T.Task(family, 4)
    tests, _ = T.unit_tests(task, 1)
    for v in T.FAMILIES[family].variants:
        src = T.program(family, v, task.c)
        assert T.from_tokens(T.to_tokens(src, task.c)) == src
        env = {}
        exec(src, env)  # trusted templates only
        for args, expected in tests:
            assert env["f"](*args) == expected, (v, args)


def test_mix_shares_and_config_errors():
    slow = [(T.Task("gen_sum", c), "slow") for c in range(2, 12)]
    fast = [(t, "fast") for t, _ in slow]
    assert {s for _, s in P.mix(slow, fast, 0.0, 0)} == {"slow"}
    assert {s for _, s in P.mix(slow, fast, 1.0, 0)} == {"fast"}
    with pytest.raises(ValueError, match="valid settings"):
        E.config("ci", nonsense=1)
