"""The experts' and the target's tasks: the core's arithmetic problems evaluated modulo 7, one operator "domain" per
expert and held-out mixes of all three operators as the targets."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import arithmetic
from ..core.seeding import numpy_rng
from .scales import CHAPTER

MODULUS = 7  # the experts' and the target's arithmetic: modulo 7 on digits 0-6 (the base model knows modulo 10)
# Expert domains: the operators their training problems use (2-4 operations each).
DOMAINS = {"add": "+", "sub": "-", "mul": "*", "add-sub": "+-", "add-mul": "+*", "sub-mul": "-*"}
# Targets: held-out mixes of all three operators.
TARGET = ("+-*", 3, 3)  # single task: three operations, all operators
MULTITASK = (("+-*", 1, 2), ("+-*", 3, 3), ("+-*", 4, 5))  # short, medium and long chains


@dataclass(frozen=True)
class ModProblem(arithmetic.Problem):
    """A problem of the core's arithmetic format evaluated modulo `MODULUS` (digits 0..MODULUS−1)."""

    def values(self) -> list[int]:
        out, acc = [], self.digits[0]
        for op, d in zip(self.ops, self.digits[1:]):
            acc = {"+": acc + d, "-": acc - d, "*": acc * d}[op] % MODULUS
            out.append(acc)
        return out


def domain_problems(ops: str, min_ops: int, max_ops: int, n: int, seed: int, stream: str) -> list[ModProblem]:
    """`n` problems modulo 7 whose operators all come from `ops`."""
    if not ops or any(o not in arithmetic.OPS for o in ops):
        raise ValueError(f"operators {ops!r} must be a non-empty subset of {arithmetic.OPS!r}")
    rng = numpy_rng(seed, CHAPTER, stream, ops, min_ops, max_ops)
    sizes = rng.integers(min_ops, max_ops + 1, n)
    return [ModProblem(tuple(int(d) for d in rng.integers(0, MODULUS, s + 1)), tuple(rng.choice(list(ops), s)))
            for s in sizes]


def target_problems(kind: str, n: int, seed: int, stream: str) -> list[ModProblem]:
    """Problems of a utility's target: the held-out mix (single task, reward) or three mixes (multi-task)."""
    if kind == "multi-task":
        sizes = [n // 3 + (i < n % 3) for i in range(3)]
        return [p for (ops, lo, hi), m in zip(MULTITASK, sizes) for p in domain_problems(ops, lo, hi, m, seed, stream)]
    return domain_problems(*TARGET, n, seed, stream)
