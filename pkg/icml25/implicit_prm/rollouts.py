"""The data: arithmetic problems, the generator's outcome-labelled training rollouts, and the test candidates with
their step labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core import arithmetic
from ..core.generation import generate, sequence_logprobs
from ..core.implicit_reward import Rollouts


def train_problems(cfg, seed: int) -> list[arithmetic.Problem]:
    return arithmetic.sample_problems(cfg.n_prompts, seed, stream="implicit_prm/train")


def test_problems(cfg, seed: int) -> list[arithmetic.Problem]:
    """The held-out problems of the evaluation regime: at most `test_max_ops` operations."""
    return arithmetic.sample_problems(cfg.n_test, seed, max_ops=cfg.test_max_ops, stream="implicit_prm/test")


def sample_rollouts(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    problems: Sequence[arithmetic.Problem], n: int, temperature: float,
                    generator: torch.Generator, batch_size: int = 500) -> Rollouts:
    """`n` sampled solutions per problem, labelled only by final-answer correctness (the outcome verifier)."""
    index = [i for i in range(len(problems)) for _ in range(n)]
    texts: list[str] = []
    for s in range(0, len(index), batch_size):
        chunk = index[s:s + batch_size]
        texts += generate(model, tokenizer, [problems[i].prompt for i in chunk], max_new_tokens=48,
                          stop=(), temperature=temperature, generator=generator).texts
    labels = [arithmetic.is_correct(problems[i], t) for i, t in zip(index, texts)]
    return Rollouts(list(problems), index, texts, labels)


@dataclass
class Candidates:
    """N sampled solutions per test problem: texts, final answers (-1 when malformed), outcome and step labels."""

    problems: list[arithmetic.Problem]
    texts: list[list[str]]  # [P][N]
    answers: np.ndarray  # [P, N]
    correct: np.ndarray  # [P, N] bool
    step_labels: list[list[list[bool]]]  # [P][N][steps]
    ref_logprob: np.ndarray | None = None  # [P, N] log π_gen(y | x), the generator's (draft's) likelihood

    @property
    def flat(self) -> tuple[list[str], list[str]]:
        return ([p.prompt for p, row in zip(self.problems, self.texts) for _ in row],
                [t for row in self.texts for t in row])


def sample_candidates(model, tokenizer, problems: Sequence[arithmetic.Problem], n: int, temperature: float,
                      generator: torch.Generator) -> Candidates:
    r = sample_rollouts(model, tokenizer, problems, n, temperature, generator)
    texts = [r.completions[i * n:(i + 1) * n] for i in range(len(problems))]
    answers = np.array([[-1 if (a := arithmetic.final_answer(t)) is None else a for t in row] for row in texts])
    correct = np.array(r.labels).reshape(len(problems), n)
    labels = [[arithmetic.step_labels(p, t) for t in row] for p, row in zip(problems, texts)]
    with torch.no_grad():
        logp = torch.cat([sequence_logprobs(model, tokenizer, r.prompts[i:i + 500], r.completions[i:i + 500])
                          for i in range(0, len(r.completions), 500)])
    return Candidates(list(problems), texts, answers, correct, labels, logp.numpy().reshape(len(problems), n))


def pick_example(cands: Candidates) -> tuple[arithmetic.Problem, str, list[bool]]:
    """A candidate with at least two steps and a wrong step (the first such; else the first candidate), to draw."""
    for p, row, labels in zip(cands.problems, cands.texts, cands.step_labels):
        for text, lab in zip(row, labels):
            if len(lab) >= 2 and not all(lab) and len(lab) == len(arithmetic.split_steps(text)):
                return p, text, lab
    return cands.problems[0], cands.texts[0][0], cands.step_labels[0][0]
