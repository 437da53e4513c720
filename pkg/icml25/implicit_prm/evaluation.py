"""Evaluation: step-level AUC, first-error localisation, best-of-N (argmax and σ-weighted votes), and the step
verifiers of known quality."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata, sem
from sklearn.metrics import roc_auc_score

from ..core import arithmetic
from ..core.seeding import numpy_rng
from .reward import ImplicitPRM, aggregate_steps
from .rollouts import Candidates, Rollouts
from .scales import CHAPTER, VOTE_COEF


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a positive > score of a negative), ties counting one half (Mann–Whitney); NaN when one class is
    missing. It depends only on the scores' order, so it reads their ranks: a response without tokens, scored −∞
    (:meth:`ImplicitPRM.step_rewards`), ranks last."""
    y = np.asarray(labels, bool)
    return float(roc_auc_score(y, rankdata(scores))) if y.any() and not y.all() else float("nan")


def steps_to_first_error(labels: Sequence[bool]) -> int:
    """How many steps count for step-level evaluation: up to and including the first wrong one."""
    for t, ok in enumerate(labels):
        if not ok:
            return t + 1
    return len(labels)


def step_rewards_grid(prm: ImplicitPRM, cands: Candidates) -> list[list[np.ndarray]]:
    prompts, texts = cands.flat
    flat = prm.step_rewards(prompts, texts, on_missing="whole")
    n = cands.correct.shape[1]
    return [flat[i * n:(i + 1) * n] for i in range(len(cands.problems))]


def step_metrics(rewards: list[list[np.ndarray]], cands: Candidates) -> dict[str, float]:
    """Step AUC (steps up to the first error, and all steps) pooled over problems, the mean step AUC within each
    problem (its candidates' steps up to the first error: :func:`within_prompt_step_auc`), and first-error
    localisation: among solutions with a wrong step, how often argmin_t r_t is the first wrong step, against
    picking a step at random."""
    s_first, y_first, s_all, y_all, hits, chance = [], [], [], [], [], []
    for r_row, l_row in zip(rewards, cands.step_labels):
        for r, lab in zip(r_row, l_row):
            if len(r) != len(lab):  # a malformed completion scored as one step; no step labels to compare
                continue
            k = steps_to_first_error(lab)
            s_first += list(r[:k]); y_first += lab[:k]
            s_all += list(r); y_all += lab
            if not all(lab):
                hits.append(int(np.argmin(r)) == k - 1)
                chance.append(1 / len(lab))
    n = cands.correct.shape[1]
    within = within_prompt_step_auc([r for row in rewards for r in row], [lab for row in cands.step_labels for lab in row],
                                    [p for p in range(len(rewards)) for _ in range(n)])
    return {"step_auc": roc_auc(s_first, y_first), "step_auc_within_problem": within,
            "step_auc_all": roc_auc(s_all, y_all),
            "first_error_hit": float(np.mean(hits)) if hits else float("nan"),
            "first_error_chance": float(np.mean(chance)) if chance else float("nan")}


def majority_pick(answers: np.ndarray, correct: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Expected accuracy of (weighted) majority voting over one group: the answer with the most (weighted) votes;
    ties split evenly. Malformed answers (-1) get no vote unless nothing else does."""
    w = np.ones(len(answers)) if weights is None else np.asarray(weights, float)
    valid = answers >= 0
    if not valid.any():
        return float(correct.mean())
    votes = {a: w[(answers == a)].sum() for a in set(answers[valid].tolist())}
    best = max(votes.values())
    winners = [a for a, v in votes.items() if np.isclose(v, best)]
    return float(np.mean([correct[answers == a][0] for a in winners]))


def argmax_pick(scores: np.ndarray, correct: np.ndarray) -> float:
    """Accuracy of picking the highest-scoring candidate (ties split evenly)."""
    top = np.isclose(scores, scores.max())
    return float(correct[top].mean())


def best_of_n(cands: Candidates, scores: dict[str, np.ndarray], n: int,
              voted: Sequence[str] = ()) -> dict[str, float]:
    """Best-of-`n` accuracy of every selector, averaged over the disjoint groups of `n` among the candidates.

    Selectors: `random` (expected accuracy), `majority`, the argmax of each score in `scores` (e.g. `prm_min`,
    `prm_outcome`, or `ref_likelihood`, the generator's own log-likelihood of the candidate), `<score>_vote` for the scores named in
    `voted` (majority voting with each vote weighted by σ(score), the official evaluation's weighting of an implicit
    PRM's votes), and `oracle` (any correct). A score may not take a selector's name: it would be averaged with it."""
    clash = set(scores) & {"random", "majority", "oracle"} | set(scores) & {f"{v}_vote" for v in voted}
    if clash:
        raise ValueError(f"scores named {sorted(clash)} clash with best_of_n's own selectors; rename them")
    total = cands.correct.shape[1]
    if n > total or n < 1:
        raise ValueError(f"best-of-{n} needs 1 <= n <= {total} candidates")
    acc: dict[str, list[float]] = {}
    for p in range(len(cands.problems)):
        for g in range(total // n):
            sl = slice(g * n, (g + 1) * n)
            ans, ok = cands.answers[p, sl], cands.correct[p, sl]
            acc.setdefault("random", []).append(float(ok.mean()))
            acc.setdefault("majority", []).append(majority_pick(ans, ok))
            for name, s in scores.items():
                acc.setdefault(name, []).append(argmax_pick(s[p, sl], ok))
                if name in voted:
                    acc.setdefault(f"{name}_vote", []).append(
                        majority_pick(ans, ok, 0.5 * (1 + np.tanh(s[p, sl] / 2))))  # σ(s) without overflow
            acc.setdefault("oracle", []).append(float(ok.any()))
    return {k: float(np.mean(v)) for k, v in acc.items()}


SCORES = {"prm_min": "min", "prm_min_q": "min_q", "prm_outcome": "sum"}


def prm_scores(rewards: list[list[np.ndarray]], beta: float) -> dict[str, np.ndarray]:
    """The response scores of the official evaluation: min single-step reward r_t, min partial sum q^t, and the
    outcome reward (sum of the steps), in its units: the log-ratios times `VOTE_COEF` (the step rewards given here
    carry β, which is divided out). A positive scale changes no argmax; it sets how far σ(score) is from ½."""
    scale = VOTE_COEF / beta
    return {name: scale * np.array([[aggregate_steps(r, how) for r in row] for row in rewards])
            for name, how in SCORES.items()}


def within_problem_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two [P, N] score grids after removing each problem's mean (finite entries only):
    does one score rank a problem's candidates like the other, ignoring how hard the problem is?"""
    xs, ys = [], []
    for ra, rb in zip(a, b):
        ok = np.isfinite(ra) & np.isfinite(rb)
        if ok.sum() >= 2:
            xs.append(ra[ok] - ra[ok].mean())
            ys.append(rb[ok] - rb[ok].mean())
    x, y = np.concatenate(xs), np.concatenate(ys)
    return float((x @ y) / np.sqrt((x @ x) * (y @ y)))


def evaluate_prm(prm: ImplicitPRM, cands: Candidates, best_of: Sequence[int]) -> dict:
    """Step metrics and best-of-N for every N in `best_of` (keyed by str(N), as JSON keeps them)."""
    rewards = step_rewards_grid(prm, cands)
    scores = prm_scores(rewards, prm.beta)
    extra = {}
    if cands.ref_logprob is not None:
        extra["corr_within_problem"] = within_problem_correlation(scores["prm_outcome"], cands.ref_logprob)
        scores["ref_likelihood"] = cands.ref_logprob
    return {**step_metrics(rewards, cands), **extra,
            "best_of": {str(n): best_of_n(cands, scores, n, voted=tuple(SCORES)) for n in best_of}}


def within_prompt_step_aucs(rewards: Sequence[np.ndarray], labels: Sequence[Sequence[bool]],
                            prompt_index: Sequence[int]) -> np.ndarray:
    """The step AUC within each prompt (its responses' steps up to and including the first error), for every
    prompt that has both a right and a wrong step."""
    by_prompt: dict[int, tuple[list[float], list[bool]]] = {}
    for r, lab, i in zip(rewards, labels, prompt_index):
        if len(r) == len(lab):
            k = steps_to_first_error(lab)
            s, y = by_prompt.setdefault(i, ([], []))
            s += list(r[:k]); y += list(lab[:k])
    return np.array([roc_auc(s, y) for s, y in by_prompt.values() if any(y) and not all(y)])


def within_prompt_step_auc(rewards: Sequence[np.ndarray], labels: Sequence[Sequence[bool]],
                           prompt_index: Sequence[int]) -> float:
    """:func:`within_prompt_step_aucs` averaged over the prompts: does the PRM rank a prompt's steps, not the
    prompts?"""
    aucs = within_prompt_step_aucs(rewards, labels, prompt_index)
    return float(np.mean(aucs)) if len(aucs) else float("nan")


def learning_metrics(prm: ImplicitPRM, data: Rollouts, responses: int | None = None) -> dict[str, float]:
    """How well the PRM learned its training prompts, given all sampled responses to them (`data`) of which it
    was trained on the first `responses` per prompt (all when None): the AUC of the outcome reward r_θ(y) against
    the outcome labels of the responses it was trained on, and the mean within-prompt step AUC (the PRM never saw
    step labels) with its standard error over those prompts and their number, and the pooled step AUC beside it
    (pooled over prompts it also ranks their difficulty). A PRM trained on every response (`responses` None, or at
    least every prompt's number of responses, as the main PRM's `responses_per_prompt` is) is read on them; one
    trained on fewer is read on the other responses to its prompts whose text differs from every response it was
    trained on. Within its own single response the only wrong step
    counted is the last, and fitting that response's outcome label lowers its right steps with it; and at T = 1
    π_ref repeats most responses word for word, so copies of a trained response would read its memory, not its
    step rewards."""
    rewards = prm.step_rewards(data.prompts, data.completions, on_missing="whole")
    labels = [arithmetic.step_labels(data.problems[i], c) for i, c in zip(data.prompt_index, data.completions)]
    seen = data.first_indices(responses) if responses else list(range(len(rewards)))
    every = len(seen) == len(rewards)  # trained on every response (`responses` at least each prompt's count)
    trained = set() if every else {(data.prompt_index[k], data.completions[k]) for k in seen}
    read = range(len(rewards)) if every else \
        [k for k in range(len(rewards)) if (data.prompt_index[k], data.completions[k]) not in trained]
    s, y = [], []
    for r, lab in zip(rewards, labels):
        if len(r) == len(lab):
            k = steps_to_first_error(lab)
            s += list(r[:k]); y += lab[:k]
    within = within_prompt_step_aucs([rewards[k] for k in read], [labels[k] for k in read],
                                     [data.prompt_index[k] for k in read])
    return {"outcome_auc": roc_auc([rewards[k].sum() for k in seen], [data.labels[k] for k in seen]),
            "step_auc": float(np.mean(within)) if len(within) else float("nan"),
            "step_auc_se": float(sem(within)) if len(within) > 1 else float("nan"),
            "step_auc_prompts": len(within), "step_auc_pooled": roc_auc(s, y)}


def position_rates(data: Rollouts) -> np.ndarray:
    """The share of right steps at each position t = 1, 2, … among the training responses' steps up to and
    including the first error: what a step's position alone says about it, learned from the training set."""
    right: dict[int, list[bool]] = {}
    for i, c in zip(data.prompt_index, data.completions):
        lab = arithmetic.step_labels(data.problems[i], c)
        for t, ok in enumerate(lab[:steps_to_first_error(lab)]):
            right.setdefault(t, []).append(ok)
    return np.array([np.mean(right[t]) for t in range(len(right))]) if right else np.array([0.5])


def position_rewards(cands: Candidates, rates: np.ndarray) -> list[list[np.ndarray]]:
    """The null scorer of `step_signal`: each step's reward is the training responses' rate of right steps at its
    position (:func:`position_rates`; positions past the last seen take the last rate), no model at all."""
    last = len(rates) - 1
    return [[np.asarray(rates)[np.minimum(np.arange(len(lab)), last)] for lab in row] for row in cands.step_labels]


def verifier_scores(cands: Candidates, noise: float, seed: int) -> dict[str, np.ndarray]:
    """Response scores of two step verifiers of known quality: `exact`, 1 when every step is right (the exact
    verifier, min over its step labels), and `noisy`, the same with each step label flipped with probability
    `noise`. A response without steps scores 0."""
    rng = numpy_rng(seed, CHAPTER, "noisy-verifier")

    def score(labels, flip):
        lab = np.asarray(labels, bool)
        if flip:
            lab = lab ^ (rng.random(len(lab)) < noise)
        return float(lab.min()) if len(lab) else 0.0

    return {name: np.array([[score(lab, flip) for lab in row] for row in cands.step_labels])
            for name, flip in (("exact", False), ("noisy", True))}
