"""The two tasks, synthetic Indirect Object Identification and Greater-Than: prompts, metrics, corrupted prompts."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Prompts:
    """Fixed-length prompts with, per prompt, the correct answer token and the token set that counts against it
    (IOI: the subject name; Greater-Than: years <= YY), plus matched corrupted prompts for the patching
    baselines."""

    ids: torch.Tensor  # [P, T]
    corrupt: torch.Tensor  # [P, T]
    answer: torch.Tensor  # [P] the training target
    good: torch.Tensor  # [P, vocab] bool: tokens that count for the metric
    bad: torch.Tensor  # [P, vocab] bool: tokens that count against it

    def __len__(self) -> int:
        return self.ids.shape[0]


class IOITask:
    """`BOS A B f f S f END -> IO`: two names, fillers, the subject S (one of the two) again; the answer is the
    indirect object IO, the name that appeared once. Metric: logit(IO) - logit(S). Corruption (ABC): S is
    replaced by a third name, so the prompt no longer says which name to avoid."""

    name = "ioi"

    def __init__(self, n_names: int = 10, n_fillers: int = 6):
        self.n_names, self.n_fillers = n_names, n_fillers
        self.bos, self.end = 0, 1
        self.names = list(range(2, 2 + n_names))
        self.fillers = list(range(2 + n_names, 2 + n_names + n_fillers))
        self.vocab, self.seq_len = 2 + n_names + n_fillers, 8

    def sample(self, n: int, generator: torch.Generator) -> Prompts:
        if n < 1:
            raise ValueError(f"need at least one prompt, got n={n}")
        g = generator
        perm = torch.stack([torch.randperm(self.n_names, generator=g)[:3] for _ in range(n)]) + 2
        a, b, c = perm.unbind(1)
        s_is_a = torch.rand(n, generator=g) < 0.5
        s, io = torch.where(s_is_a, a, b), torch.where(s_is_a, b, a)
        f = torch.randint(self.n_fillers, (n, 3), generator=g) + self.names[-1] + 1
        row = lambda subj: torch.stack([torch.full((n,), self.bos), a, b, f[:, 0], f[:, 1], subj, f[:, 2],  # noqa: E731
                                        torch.full((n,), self.end)], 1)
        good = torch.zeros(n, self.vocab, dtype=torch.bool)
        bad = torch.zeros_like(good)
        good[torch.arange(n), io] = True
        bad[torch.arange(n), s] = True
        return Prompts(row(s), row(c), io, good, bad)


class GreaterThanTask:
    """`BOS noun from YY to -> ZZ` with ZZ uniform over the years after YY (years 02..98 are single tokens).
    Metric: P(year > YY) - P(year <= YY). Corruption: YY replaced by 01, as in Hanna et al."""

    name = "greater_than"

    def __init__(self, n_nouns: int = 5, n_years: int = 100):
        self.n_years = n_years
        self.bos, self.from_, self.to = 0, 1, 2
        self.year0 = 3
        self.nouns = list(range(self.year0 + n_years, self.year0 + n_years + n_nouns))
        self.vocab, self.seq_len = self.year0 + n_years + n_nouns, 5

    def sample(self, n: int, generator: torch.Generator) -> Prompts:
        if n < 1:
            raise ValueError(f"need at least one prompt, got n={n}")
        g = generator
        yy = torch.randint(2, self.n_years - 2, (n,), generator=g)
        zz = yy + 1 + (torch.rand(n, generator=g) * (self.n_years - 1 - yy)).long()
        noun = torch.tensor(self.nouns)[torch.randint(len(self.nouns), (n,), generator=g)]
        row = lambda y: torch.stack([torch.full((n,), self.bos), noun, torch.full((n,), self.from_),  # noqa: E731
                                     y + self.year0, torch.full((n,), self.to)], 1)
        years = torch.arange(self.vocab) - self.year0
        is_year = (years >= 0) & (years < self.n_years)
        good = is_year & (years[None] > yy[:, None])
        bad = is_year & (years[None] <= yy[:, None])
        return Prompts(row(yy), row(torch.ones_like(yy)), zz + self.year0, good, bad)


TASKS = {"ioi": IOITask, "greater_than": GreaterThanTask}


def metric(logits: torch.Tensor, prompts: Prompts) -> torch.Tensor:
    """Per prompt: IOI's logit difference (one good, one bad token) or Greater-Than's probability difference."""
    if int(prompts.good.sum(1).max()) == 1:
        return (logits * prompts.good).sum(1) - (logits * prompts.bad).sum(1)
    p = logits.softmax(-1)
    return (p * prompts.good).sum(1) - (p * prompts.bad).sum(1)
