"""Synthetic multi-step arithmetic with an exact step verifier.

A problem is a chain of single digits and operators evaluated left to right modulo 10. The prompt is the
expression followed by `|`; the solution performs one operation per step, each step ended by the delimiter `;`,
then gives the answer after `A`::

    3+4*2-5|3+4=7;7*2=4;4-5=9;A9

Because the steps are determined by the expression, a program checks every step exactly: it is the oracle
process reward model and the outcome verifier of the reasoning chapters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .seeding import numpy_rng

ALPHABET = "0123456789+-*=;|A"
OPS = "+-*"
STEP_DELIMITER = ";"
PROMPT_END = "|"
ANSWER_MARK = "A"


def apply(a: int, op: str, b: int) -> int:
    """One operation modulo 10."""
    if op == "+":
        return (a + b) % 10
    if op == "-":
        return (a - b) % 10
    if op == "*":
        return (a * b) % 10
    raise ValueError(f"unknown operator {op!r}; valid operators: {OPS}")


@dataclass(frozen=True)
class Problem:
    digits: tuple[int, ...]
    ops: tuple[str, ...]

    @property
    def prompt(self) -> str:
        expr = str(self.digits[0]) + "".join(op + str(d) for op, d in zip(self.ops, self.digits[1:]))
        return expr + PROMPT_END

    @property
    def n_steps(self) -> int:
        return len(self.ops)

    def values(self) -> list[int]:
        """The running value after each operation."""
        out, acc = [], self.digits[0]
        for op, d in zip(self.ops, self.digits[1:]):
            acc = apply(acc, op, d)
            out.append(acc)
        return out

    @property
    def answer(self) -> int:
        return self.values()[-1] if self.ops else self.digits[0]

    def steps(self) -> list[str]:
        """The correct solution as steps, each ending in its delimiter; the last is the answer step `A<d>`."""
        out, acc = [], self.digits[0]
        for op, d, v in zip(self.ops, self.digits[1:], self.values()):
            out.append(f"{acc}{op}{d}={v}{STEP_DELIMITER}")
            acc = v
        return out + [f"{ANSWER_MARK}{self.answer}"]

    @property
    def solution(self) -> str:
        return "".join(self.steps())


def parse_prompt(prompt: str) -> Problem:
    """The problem a prompt poses (the inverse of `Problem.prompt`)."""
    expr = prompt.removesuffix(PROMPT_END)
    if not expr or len(expr) % 2 == 0 or not all(c.isdigit() for c in expr[::2]) or not all(c in OPS for c in expr[1::2]):
        raise ValueError(f"not an arithmetic prompt: {prompt!r}")
    return Problem(tuple(int(c) for c in expr[::2]), tuple(expr[1::2]))


def sample_problems(n: int, seed: int, min_ops: int = 1, max_ops: int = 5, stream: str = "problems") -> list[Problem]:
    """`n` random problems with between `min_ops` and `max_ops` operations (uniform), reproducible from `seed`."""
    rng = numpy_rng(seed, stream)
    n_ops = rng.integers(min_ops, max_ops + 1, size=n)
    return [Problem(tuple(int(d) for d in rng.integers(0, 10, k + 1)), tuple(rng.choice(list(OPS), k)))
            for k in n_ops]


def split_steps(completion: str) -> list[str]:
    """A completion cut after each delimiter: `"3+4=7;A7"` → `["3+4=7;", "A7"]` (delimiters kept)."""
    parts, start = [], 0
    for i, ch in enumerate(completion):
        if ch == STEP_DELIMITER:
            parts.append(completion[start:i + 1])
            start = i + 1
    if start < len(completion):
        parts.append(completion[start:])
    return parts


def step_correct(problem: Problem, index: int, step: str) -> bool:
    """Whether `step` is exactly the `index`-th step of the correct solution (the oracle step verifier).

    Step k is judged on its own text against the true chain, so a step after an error counts as correct only
    if it gets back on the true chain exactly.
    """
    reference = problem.steps()
    return 0 <= index < len(reference) and step == reference[index]


def step_labels(problem: Problem, completion: str) -> list[bool]:
    """The oracle's verdict on every step of `completion`."""
    return [step_correct(problem, i, s) for i, s in enumerate(split_steps(completion))]


def final_answer(completion: str) -> int | None:
    """The answer digit of a completion, or None when it gives no well-formed answer."""
    last = split_steps(completion)[-1] if completion else ""
    if len(last) == 2 and last[0] == ANSWER_MARK and last[1].isdigit():
        return int(last[1])
    return None


def is_correct(problem: Problem, completion: str) -> bool:
    """Outcome verifier: the completion ends with the right answer."""
    return final_answer(completion) == problem.answer


def corrupt_step(problem: Problem, index: int, rng: np.random.Generator) -> str:
    """The `index`-th correct step with its result changed to a wrong digit (a minimal, detectable error)."""
    step = problem.steps()[index]
    if step.startswith(ANSWER_MARK):
        return ANSWER_MARK + str((problem.answer + int(rng.integers(1, 10))) % 10)
    lhs, rhs = step[:-1].split("=")
    return f"{lhs}={(int(rhs) + int(rng.integers(1, 10))) % 10}{STEP_DELIMITER}"
