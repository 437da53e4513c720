"""Task families with solutions of different cost, parametrised instances, and candidate generators.

A *family* is a function specification with a constant `c` (the instance parameter) and several equivalent
*variants* (a quadratic loop against a set, a recomputation against prefix sums, a list against a generator …),
ordered from the most to the least expensive, with the canonical efficient one named. Programs are written with
space-separated tokens, so that the constant is a word of its own (:func:`to_tokens`, :func:`from_tokens`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True)
class Family:
    name: str
    variants: dict[str, str]  # variant name -> program with the placeholder C, most to least expensive
    canonical: str  # the efficient reference solution's variant
    reference: Callable  # trusted plain-Python solution f(c, *args)
    make_inputs: Callable  # (c, rng, perf_size) -> (list of test args, perf args)


@dataclass(frozen=True)
class Task:
    family: str
    c: int

    @property
    def prompt(self) -> str:
        return f"{self.family} {self.c}"


def _lines(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def _rand_list(rng, n, hi):
    return [int(v) for v in rng.integers(0, hi, n)]


def _sum_mult_inputs(c, rng, size):
    return [[0], [1], [c], [int(rng.integers(2, 60))], [int(rng.integers(60, 400))]], [size * 30000]


def _pair_diff_inputs(c, rng, size):
    tests = [[_rand_list(rng, k, 3 * c)] for k in (1, 3, 6, 10)] + [[[0, c]], [[c, 0]]]
    no_pair = [(2 * c + 1) * int(k) for k in rng.permutation(size * 40)]  # worst case: no pair differs by c
    return tests, [no_pair]


def _member_inputs(c, rng, size):
    tests = [[_rand_list(rng, k, 8), _rand_list(rng, 12, 8 * c)] for k in (0, 3, 8)]
    return tests, [_rand_list(rng, size * 40, 2000), _rand_list(rng, size * 100, 2000 * c)]


def _recur_inputs(c, rng, size):
    return [[k] for k in (0, 1, 2, 5, 9)], [size + 12]


def _max_sub_inputs(c, rng, size):
    return [[_rand_list(rng, k, 3 * c)] for k in (1, 2, 7, 15)], [_rand_list(rng, size * 25, 3 * c)]


def _range_sum_inputs(c, rng, size):
    def make(n, q):
        xs = _rand_list(rng, n, 50)
        qs = [sorted(int(v) for v in rng.integers(0, n + 1, 2)) for _ in range(q)]
        return [xs, qs]
    return [make(k, 4) for k in (1, 5, 12)], make(size * 200, size * 30)


def _top_k_inputs(c, rng, size):
    return [[_rand_list(rng, k, 100)] for k in (1, c, 2 * c + 3)], [_rand_list(rng, size * 3000, 10**6)]


def _gen_sum_inputs(c, rng, size):
    return [[0], [1], [int(rng.integers(2, 50))], [int(rng.integers(50, 500))]], [size * 20000]


def _max_sub_reference(c, xs):
    return max(sum(x - c for x in xs[i:j]) for i in range(len(xs)) for j in range(i + 1, len(xs) + 1))


def _recur_reference(c, n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (b + c * a) % 1000
    return a


FAMILIES = {f.name: f for f in [
    Family("sum_mult", {
        "loop": _lines("def f ( n ) :", "    s = 0", "    for i in range ( n ) :", "        if i % C == 0 :",
                       "            s = s + i", "    return s"),
        "range": _lines("def f ( n ) :", "    return sum ( range ( 0 , n , C ) )"),
        "closed_form": _lines("def f ( n ) :", "    m = ( n - 1 ) // C", "    return C * m * ( m + 1 ) // 2"),
    }, "closed_form", lambda c, n: sum(range(0, n, c)), _sum_mult_inputs),
    Family("pair_diff", {
        "quadratic": _lines("def f ( xs ) :", "    for x in xs :", "        for y in xs :",
                            "            if y - x == C :", "                return True", "    return False"),
        "list_member": _lines("def f ( xs ) :", "    for x in xs :", "        if x + C in xs :",
                              "            return True", "    return False"),
        "set_member": _lines("def f ( xs ) :", "    s = set ( xs )", "    for x in xs :", "        if x + C in s :",
                             "            return True", "    return False"),
    }, "set_member", lambda c, xs: any(x + c in set(xs) for x in xs), _pair_diff_inputs),
    Family("member", {
        "list": _lines("def f ( xs , ys ) :", "    return sum ( 1 for x in xs if x * C in ys )"),
        "set": _lines("def f ( xs , ys ) :", "    s = set ( ys )", "    return sum ( 1 for x in xs if x * C in s )"),
    }, "set", lambda c, xs, ys: sum(1 for x in xs if x * c in set(ys)), _member_inputs),
    Family("recur", {
        "recursive": _lines("def f ( n ) :", "    if n < 2 :", "        return n",
                            "    return ( f ( n - 1 ) + C * f ( n - 2 ) ) % 1000"),
        "iterative": _lines("def f ( n ) :", "    a = 0", "    b = 1", "    for i in range ( n ) :",
                            "        a , b = b , ( b + C * a ) % 1000", "    return a"),
    }, "iterative", _recur_reference, _recur_inputs),
    Family("max_sub", {
        "quadratic": _lines("def f ( xs ) :", "    best = xs [ 0 ] - C", "    for i in range ( len ( xs ) ) :",
                            "        s = 0", "        for j in range ( i , len ( xs ) ) :",
                            "            s = s + xs [ j ] - C", "            best = max ( best , s )",
                            "    return best"),
        "kadane": _lines("def f ( xs ) :", "    best = xs [ 0 ] - C", "    s = 0", "    for x in xs :",
                         "        s = max ( x - C , s + x - C )", "        best = max ( best , s )", "    return best"),
    }, "kadane", _max_sub_reference, _max_sub_inputs),
    Family("range_sum", {
        "loop": _lines("def f ( xs , qs ) :", "    t = 0", "    for i , j in qs :", "        s = 0",
                       "        for k in range ( i , j ) :", "            s = s + xs [ k ]", "        t = t + s % C",
                       "    return t"),
        "slice": _lines("def f ( xs , qs ) :", "    t = 0", "    for i , j in qs :",
                        "        t = t + sum ( xs [ i : j ] ) % C", "    return t"),
        "prefix": _lines("def f ( xs , qs ) :", "    p = [ 0 ]", "    for x in xs :", "        p . append ( p [ - 1 ] + x )",
                         "    t = 0", "    for i , j in qs :", "        t = t + ( p [ j ] - p [ i ] ) % C",
                         "    return t"),
    }, "prefix", lambda c, xs, qs: sum(sum(xs[i:j]) % c for i, j in qs), _range_sum_inputs),
    Family("top_k", {
        "repeated_max": _lines("def f ( xs ) :", "    ys = list ( xs )", "    t = 0", "    for k in range ( C ) :",
                               "        if ys :", "            m = max ( ys )", "            ys . remove ( m )",
                               "            t = t + m", "    return t"),
        "sort": _lines("def f ( xs ) :", "    return sum ( sorted ( xs ) [ - C : ] )"),
        "heap": _lines("import heapq", "def f ( xs ) :", "    return sum ( heapq . nlargest ( C , xs ) )"),
    }, "heap", lambda c, xs: sum(heapq.nlargest(c, xs)), _top_k_inputs),
    Family("gen_sum", {
        "loop": _lines("def f ( n ) :", "    t = 0", "    for x in range ( n ) :", "        t = t + x * x % C",
                       "    return t"),
        "list": _lines("def f ( n ) :", "    return sum ( [ x * x % C for x in range ( n ) ] )"),
        "generator": _lines("def f ( n ) :", "    return sum ( x * x % C for x in range ( n ) )"),
    }, "generator", lambda c, n: sum(x * x % c for x in range(n)), _gen_sum_inputs),
]}


def program(family: str, variant: str, c: int) -> str:
    """The source of `variant` of `family` for constant `c`."""
    return FAMILIES[family].variants[variant].replace(" C ", f" {c} ").replace(" C\n", f" {c}\n")


def unit_tests(task: Task, perf_size: int, seed: int = 0) -> tuple[list, list]:
    """`(tests, perf)`: unit tests `[[args, expected], ...]` with expected values from the trusted reference, and
    the arguments of the large performance input (scaled by `perf_size`). Deterministic in (task, seed)."""
    fam = FAMILIES[task.family]
    rng = np.random.default_rng([seed, task.c, sum(map(ord, task.family))])
    tests, perf = fam.make_inputs(task.c, rng, perf_size)
    return [[args, fam.reference(task.c, *args)] for args in tests], perf


def all_tasks(families, constants) -> list[Task]:
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown task families {unknown}; valid families: {', '.join(FAMILIES)}")
    return [Task(f, c) for f in families for c in constants]


def split_tasks(tasks: list[Task], n_test: int, seed: int) -> tuple[list[Task], list[Task]]:
    """Hold out `n_test` (family, c) pairs at random; each held-out c still appears with other families."""
    order = np.random.default_rng([seed, 7]).permutation(len(tasks))
    test = [tasks[i] for i in order[:n_test]]
    return [t for t in tasks if t not in test], test


# --- tokens --------------------------------------------------------------------------------------------------
# A program is read line by line: each line, with the instance constant replaced by C and spaces by "·", is one
# token, followed by the constant's token when the line uses it. Programs are 3-9 lines, so a tiny LM learns them
# in a few hundred steps, and copying the constant from the prompt is part of the job.

SPACE = "·"


def to_tokens(source: str, c: int) -> list[str]:
    """Program text -> line tokens (constant `c` abstracted to C and emitted after the line)."""
    out = []
    for line in source.rstrip("\n").split("\n"):
        words = line.split(" ")
        has_c = str(c) in words
        out.append(SPACE.join("C" if w == str(c) else w for w in words))
        if has_c:
            out.append(str(c))
    return out


def from_tokens(tokens: list[str]) -> str:
    """The inverse of :func:`to_tokens`: a line token containing C takes the constant token that follows it
    (or stays broken, and will not parse, if none follows)."""
    lines = []
    for tok in tokens:
        if tok.isdigit() and lines and " C " in f" {lines[-1]} ":
            lines[-1] = " ".join(tok if w == "C" else w for w in lines[-1].split(" "))
        elif not tok.isdigit():
            lines.append(tok.replace(SPACE, " "))
    return "\n".join(lines) + "\n"


def vocabulary(constants: range) -> list[str]:
    words = {str(c) for c in constants} | {str(c + 1) for c in constants} | set(FAMILIES)
    for fam in FAMILIES.values():
        for v in fam.variants:
            words |= set(to_tokens(program(fam.name, v, 97), 97)) - {"97"}
    return sorted(words)


# --- candidate generators ------------------------------------------------------------------------------------


def mutate(source: str, c: int, rng: np.random.Generator) -> str:
    """A plausible bug that stays inside the vocabulary: a wrong constant, a dropped line, or two adjacent lines
    swapped."""
    lines = source.rstrip("\n").split("\n")
    kind = rng.integers(3)
    if kind == 0 and f" {c} " in source + " ":
        return program_with(source, c, c + 1)
    i = 1 + rng.integers(len(lines) - 1)
    if kind == 1 or i + 1 >= len(lines):
        del lines[i]
    else:
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines) + "\n"


def program_with(source: str, c: int, wrong: int) -> str:
    return from_tokens([str(wrong) if t == str(c) else t for t in to_tokens(source, c)])


@dataclass(frozen=True)
class TemplateGenerator:
    """A templated 'LLM': picks a variant with probability ∝ `slow_bias` ** (rank from the fast end) and
    introduces a bug with probability `bug_rate`."""

    name: str
    slow_bias: float
    bug_rate: float

    def __call__(self, task: Task, rng: np.random.Generator) -> str:
        names = list(FAMILIES[task.family].variants)
        weights = np.array([self.slow_bias ** (len(names) - 1 - i) for i in range(len(names))], dtype=float)
        variant = names[rng.choice(len(names), p=weights / weights.sum())]
        src = program(task.family, variant, task.c)
        return mutate(src, task.c, rng) if rng.random() < self.bug_rate else src


TEMPLATE_GENERATORS = (
    TemplateGenerator("naive-biased", slow_bias=3.0, bug_rate=0.1),
    TemplateGenerator("uniform", slow_bias=1.0, bug_rate=0.1),
    TemplateGenerator("bug-prone", slow_bias=1.0, bug_rate=0.5),
)
