"""The parallel decoding baselines at equal FLOPs: best-of-N reranked by a PRM, and majority vote."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core import arithmetic, flops, zoo
from ..core.seeding import torch_generator
from .decoding import _ntok, decode_single, models_of


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


#: the chain scores a best-of-N reranker can read off a chain's step rewards r_1..r_T, the usual ones of the PRM
#: literature: the lowest step reward, their product, their mean and the last (the answer step's) reward
CHAIN_SCORES = {"min": np.min, "product": np.prod, "mean": np.mean, "last": lambda r: r[-1]}


def step_rewards(samples: Samples, problems: Sequence[arithmetic.Problem], prm) -> tuple[list[list[np.ndarray]],
                                                                                          np.ndarray]:
    """`prm`'s reward of every step of every sample (`[k][i]`: the steps of sample k of problem i; an empty
    solution is one empty step) and the PRM's FLOPs for each round of samples (one pass over each whole solution
    scores every step at its last token)."""
    tok = samples.model.tokenizer
    rewards, prm_flops = [], np.zeros(samples.n)
    for k, sols in enumerate(samples.texts):
        rows, owner = ([], [], []), []
        for i, (p, sol) in enumerate(zip(problems, sols)):
            parts = arithmetic.split_steps(sol) or [""]
            for j, part in enumerate(parts):
                rows[0].append(p), rows[1].append("".join(parts[:j])), rows[2].append(part), owner.append(i)
            prm_flops[k] += sum(flops.forward_flops(m.config, _ntok(tok, p.prompt + sol)) for m in models_of(prm.model))
        r, owner = np.asarray(prm.score(*rows), dtype=float), np.asarray(owner)
        rewards.append([r[owner == i] for i in range(len(problems))])
    return rewards, prm_flops


def best_of_n(samples: Samples, problems: Sequence[arithmetic.Problem], prm, chain: str = "min") -> dict:
    """Best-of-N reranked by `prm`: the sample whose chain score `chain` (a key of `CHAIN_SCORES`) is highest wins
    (ties: the earliest). Returns accuracy and total FLOPs (sampling + PRM) for every N' = 1..N (the first N'
    samples), and how well each chain score ranks one problem's samples over all N (`within_problem_auc`:
    `ranking_auc` for `chain`, `ranking_auc_by_chain` for every chain score)."""
    rewards, prm_flops = step_rewards(samples, problems, prm)
    scores = {name: np.array([[f(r) for r in row] for row in rewards]) for name, f in CHAIN_SCORES.items()}
    correct = np.array([[arithmetic.is_correct(p, sols[i]) for i, p in enumerate(problems)] for sols in samples.texts])
    acc, cost = [], []
    for m in range(1, samples.n + 1):
        pick = scores[chain][:m].argmax(0)
        acc.append(float(correct[pick, np.arange(len(problems))].mean()))
        cost.append(float(sum(samples.flops[:m]) + prm_flops[:m].sum()))
    by_chain = {name: within_problem_auc(s, correct) for name, s in scores.items()}
    return {"n": list(range(1, samples.n + 1)), "accuracy": acc, "flops": cost, "chain": chain,
            "ranking_auc": by_chain[chain], "ranking_auc_by_chain": by_chain}


def right_through_wrong_steps(samples: Samples, problems: Sequence[arithmetic.Problem]) -> dict:
    """What limits any process reranker's ranking of one problem's samples by their final answers: the share of
    problems with both right and wrong samples (the pairs `within_problem_auc` counts), and the share of right
    samples (right final answer) with a step the exact checker finds wrong, which a process verifier rightly scores
    low (answers are mod-10 digits, so a wrong chain lands on the right one about one time in ten)."""
    correct = np.array([[arithmetic.is_correct(p, sols[i]) for i, p in enumerate(problems)] for sols in samples.texts])
    flawed = np.array([[not all(arithmetic.step_labels(p, sols[i])) for i, p in enumerate(problems)]
                       for sols in samples.texts])
    return {"problems_with_both": float(np.mean(correct.any(0) & (~correct).any(0))),
            "right_with_wrong_step": float((correct & flawed).sum() / max(1, correct.sum()))}


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
