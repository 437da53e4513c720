"""The parallel decoding baselines at equal FLOPs: best-of-N reranked by a PRM, and majority vote."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core import arithmetic, flops, zoo
from ..core.seeding import torch_generator
from .decoding import _ntok, decode_single


@dataclass
class Samples:
    """N sampled solutions per problem from one model (`texts[k][i]`: sample k of problem i) and the FLOPs of each
    round of N' = k + 1 samples."""

    texts: list[list[str]]
    flops: list[float]
    model: zoo.ZooModel

    @property
    def n(self) -> int:
        return len(self.texts)


def sample(z: zoo.ZooModel, problems: Sequence[arithmetic.Problem], n: int, temperature: float, seed: int,
           stream: str = "best-of-n") -> Samples:
    """`n` independent solutions per problem from the zoo model `z` at `temperature` (the parallel baselines)."""
    texts, cost = [], []
    for k in range(n):
        d = decode_single(z.model, z.tokenizer, problems, role="draft", temperature=temperature,
                          generator=torch_generator(seed, stream, k))
        texts.append(d.completions)
        cost.append(float(d.total_flops))
    return Samples(texts, cost, z)


def best_of_n(samples: Samples, problems: Sequence[arithmetic.Problem], prm) -> dict:
    """Best-of-N reranked by `prm`: the sample whose minimum step reward is highest wins (ties: the earliest).
    Returns accuracy and total FLOPs (sampling + PRM) for every N' = 1..N (the first N' samples), and how well the
    chain score ranks one problem's samples (`within_problem_auc` over all N)."""
    tok = samples.model.tokenizer
    scores, prm_flops = np.zeros((samples.n, len(problems))), np.zeros(samples.n)
    for k, sols in enumerate(samples.texts):
        rows, owner = ([], [], []), []
        for i, (p, sol) in enumerate(zip(problems, sols)):
            parts = arithmetic.split_steps(sol) or [""]
            for j, part in enumerate(parts):
                rows[0].append(p), rows[1].append("".join(parts[:j])), rows[2].append(part), owner.append(i)
            if prm.model is not None:  # one pass over the whole solution scores each step at its last token
                prm_flops[k] += flops.forward_flops(prm.model.config, _ntok(tok, p.prompt + sol))
        r = np.asarray(prm.score(*rows), dtype=float)
        owner = np.asarray(owner)
        scores[k] = [r[owner == i].min() for i in range(len(problems))]  # a chain's minimum step reward
    correct = np.array([[arithmetic.is_correct(p, sols[i]) for i, p in enumerate(problems)] for sols in samples.texts])
    acc, cost = [], []
    for m in range(1, samples.n + 1):
        pick = scores[:m].argmax(0)
        acc.append(float(correct[pick, np.arange(len(problems))].mean()))
        cost.append(float(sum(samples.flops[:m]) + prm_flops[:m].sum()))
    return {"n": list(range(1, samples.n + 1)), "accuracy": acc, "flops": cost,
            "ranking_auc": within_problem_auc(scores, correct)}


def within_problem_auc(scores: np.ndarray, correct: np.ndarray) -> float:
    """ROC AUC of chain scores (`scores[k, i]`: sample k of problem i) for telling a problem's right samples from
    its wrong ones: the share of (right, wrong) pairs of the same problem whose right sample scores higher (ties
    count half), pooled over the problems that have both. A reranker needs this, not a step-level AUC. NaN when no
    problem has both."""
    wins = pairs = 0.0
    for s, c in zip(scores.T, correct.T.astype(bool)):
        d = s[c][:, None] - s[~c][None, :]
        wins += (d > 0).sum() + 0.5 * (d == 0).sum()
        pairs += d.size
    return float(wins / pairs) if pairs else float("nan")


def majority_vote(samples: Samples, problems: Sequence[arithmetic.Problem]) -> dict:
    """Self-consistency: the most frequent final answer among the first N' samples wins (ties: the answer seen
    first; no PRM, so no PRM FLOPs). Accuracy and FLOPs for every N' = 1..N."""
    acc = []
    for m in range(1, samples.n + 1):
        hits = []
        for i, p in enumerate(problems):
            answers = [arithmetic.final_answer(samples.texts[k][i]) for k in range(m)]
            counts = {a: answers.count(a) for a in answers if a is not None}
            hits.append(bool(counts) and max(counts, key=counts.get) == p.answer)
        acc.append(float(np.mean(hits)))
    return {"n": list(range(1, samples.n + 1)), "accuracy": acc,
            "flops": [float(sum(samples.flops[:m])) for m in range(1, samples.n + 1)]}


def at_flops(curve: dict, flop_ratio: float) -> dict:
    """A parallel baseline at the smallest N whose FLOPs (as a ratio to target-only) reach `flop_ratio` (its
    largest N when none does; `covers` says by how much its largest N exceeds `flop_ratio`)."""
    k = next((i for i, f in enumerate(curve["flop_ratio"]) if f >= flop_ratio), len(curve["n"]) - 1)
    return {"n": curve["n"][k], "accuracy": curve["accuracy"][k], "flop_ratio": curve["flop_ratio"][k],
            "covers": curve["flop_ratio"][-1] - flop_ratio}
