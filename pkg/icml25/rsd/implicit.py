"""The implicit PRM (Yuan et al., "Free Process Rewards without Process Labels", ICML 2025) as RSD's step scorer,
trained as that paper trains one: π_θ starts as a copy of the draft, π_ref is the frozen draft, and π_θ learns from
the outcome labels alone (final answer right or wrong) of the draft's own rollouts, the learned PRM's rollouts
(`prms.draft_rollouts`), with the cross-entropy of Eq. 5 on the outcome reward r_θ(y) = β · log π_θ(y)/π_ref(y).

A step is read two ways, the two of the official evaluation (which computes both and scores a response by the min
or the sum; which one the paper's tables use could not be verified):

* "single" (RSD's declared reading): the step's own reward, the Proposition's difference of partial sums
  r_t = q^t − q^{t−1} = β · Σ_{tokens of step t} log π_θ/π_ref, read at the step ends of
  `core.implicit_reward.step_ends` (the `;` that `arithmetic.split_steps` cuts after);
* "accumulative": the partial sum q^t = Σ_{i ≤ t} r_i of the prefix and the step, the reading the official
  step-error script thresholds (σ of its partial sums at each step end).

RSD reads a step's score σ(k · x) ∈ [0, 1], x the reading, with k = `SCORE_SCALE` = 1, the scale the CE loss trains:
σ(r_θ(y)) = σ(Σ_t r_t) is the model's probability that the answer is right, and σ(r_t) reads one step's share of that
log-odds in the same units. δ is set per PRM by a budget, so k moves only the soft rule and the mean and product chain
scores; the official evaluation instead scales the β-free log-ratio by a fixed `coef` (0.001 for best-of-N, 0.005
in its step-error script).

Both models run over every token the PRM reads, so the FLOP meter charges the policy and the reference
(`decoding.models_of`): twice the draft's FLOPs for the same tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from scipy.special import expit

from ..core import arithmetic, reasoners, zoo
from ..core.generation import encode_completions
from ..core.implicit_reward import (ImplicitPRM, ReferenceCache, Rollouts, ce_loss, labelled_batches, step_ends,
                                    train_from_reference)
from ..core.seeding import one_thread
from .baselines import best_of_n, sample
from .claims import PRM_AUC_MIN, PRM_RANK_MIN, SHARE
from .experiment import prm_auc
from .prms import draft_rollouts
from .scales import DRAFT_MODEL, PRM_BATCH, config

#: k in σ(k · r_t): 1, the units of the CE loss's σ(r_θ(y)) (see the module's docstring)
SCORE_SCALE = 1.0


READINGS = ("single", "accumulative")


class ImplicitStepPRM:
    """An implicit PRM (`core.implicit_reward.ImplicitPRM`) behind RSD's PRM interface: `score(problems, prefixes,
    steps)` is σ(k · x) of each step after its prefix, x its `reading` (r_t, or q^t for "accumulative"). An empty
    step has no token to reward and scores 0 (the `ImplicitPRM`'s −inf for a completion with no step). `model` is
    the pair the FLOP meter charges."""

    name = "implicit PRM"

    def __init__(self, prm: ImplicitPRM, scale: float = SCORE_SCALE, reading: str = "single"):
        if reading not in READINGS:
            raise ValueError(f"unknown reading {reading!r}; valid: {', '.join(READINGS)}")
        self.prm, self.scale, self.reading = prm, scale, reading
        self.model = (prm.policy, prm.reference)

    def rewards(self, problems: Sequence[arithmetic.Problem], prefixes: Sequence[str],
                steps: Sequence[str]) -> np.ndarray:
        """r_t = β · Σ_{tokens of the step} log π_θ/π_ref of each step after its prefix, or q^t = Σ_{i ≤ t} r_i with
        the "accumulative" reading (−inf for an empty step)."""
        prompts, texts = [p.prompt for p in problems], [x + s for x, s in zip(prefixes, steps, strict=True)]
        read = self.prm.last_step_rewards if self.reading == "single" else self.prm.outcome_rewards
        return np.where([s == "" for s in steps], -np.inf, read(prompts, texts))

    def score(self, problems, prefixes, steps) -> np.ndarray:
        return expit(self.scale * self.rewards(problems, prefixes, steps))

    def read_as(self, reading: str) -> ImplicitStepPRM:
        """The same trained PRM read the other way."""
        return ImplicitStepPRM(self.prm, self.scale, reading)


def outcome_rollouts(draft: zoo.ZooModel, n_problems: int, seed: int) -> Rollouts:
    """The learned PRM's training rollouts (the draft's samples of `n_problems` problems of the `rsd-prm` stream),
    each labelled only by whether its final answer is right."""
    problems, sols = draft_rollouts(draft, n_problems, seed, "rsd-prm", "rsd-prm-rollouts")
    return Rollouts(problems, list(range(len(problems))), sols,
                    [arithmetic.is_correct(p, s) for p, s in zip(problems, sols)])


def train_implicit(draft: zoo.ZooModel, n_problems: int, seed: int, beta: float, lr: float, steps: int,
                   batch_size: int = PRM_BATCH) -> tuple[ImplicitStepPRM, dict]:
    """The implicit PRM of `draft`: π_θ from a copy of the draft (π_ref, frozen), trained with the CE loss (Eq. 5) at
    `beta` for `steps` optimiser steps of `batch_size` rollouts at `lr` on :func:`outcome_rollouts`. The PRM and
    what its training reported (loss curve, rollouts, share of right answers)."""
    data = outcome_rollouts(draft, n_problems, seed)
    ref = ReferenceCache(draft.model, draft.tokenizer)
    prm, losses = train_from_reference(ref, labelled_batches(draft.tokenizer, data, batch_size, seed, ref_cache=ref),
                                       ce_loss, beta, steps, lr, desc=f"rsd implicit PRM (seed {seed}, β={beta:g})")
    return ImplicitStepPRM(prm), {"losses": losses, "n_rollouts": len(data.completions),
                                  "frac_correct": float(np.mean(data.labels))}


def boundary_mismatches(tokenizer, problems: Sequence[arithmetic.Problem], solutions: Sequence[str]) -> int:
    """How many solutions' step ends, as the implicit reward finds them (`step_ends`: each `;` token and the last
    token), differ from the last tokens of the steps `arithmetic.split_steps` cuts (0: the implicit PRM rewards
    exactly rsd's steps)."""
    batch = encode_completions(tokenizer, [p.prompt for p in problems], solutions)
    found = step_ends(tokenizer, batch, on_missing="whole")
    n_tok = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    # step k's last token sits at (prompt tokens + solution tokens up to it − 1) in `input_ids`, one less in the
    # [B, T−1] coordinates of `step_ends`; prompt and solution are tokenized apart, as the PRM encodes them
    return sum(ends != [n_tok(p.prompt) + n_tok("".join(steps[:k + 1])) - 2 for k in range(len(steps))]
               for p, sol, ends in zip(problems, solutions, found, strict=True)
               for steps in [arithmetic.split_steps(sol)])


def calibrate_implicit(seed: int, settings: Sequence[dict], scale: str = "ci") -> list[dict]:
    """The implicit PRM on calibration seed `seed` (the zoo's draft of that seed at `scale`), trained with each of
    `settings` (dicts of `beta`, `lr`, `steps`) and read each way of :data:`READINGS`, measured as the learned PRM
    is: the held-out step ROC AUC against the oracle's labels (`experiment.prm_auc`, the `prm_quality`
    precondition's reading), the within-problem ranking AUC of every chain score against the final answers on the
    draft's `bon_n` samples of the seed's test problems (what `scales.BON_CALIBRATION` read for the other PRMs;
    `prm_ranks`' reading), and the training seconds on one thread (the rollouts' sampling included). One record
    per setting and reading; each also says how many held-out rollouts' step ends disagree with rsd's steps
    (:func:`boundary_mismatches`)."""
    cfg = config(scale)
    draft = zoo.get(DRAFT_MODEL, scale, seed)
    problems = reasoners.test_problems(cfg.n_test, seed)
    drafts = sample(draft, problems, cfg.bon_n, cfg.bon_temperature, seed)
    mismatches = boundary_mismatches(draft.tokenizer, *draft_rollouts(draft, cfg.prm_eval_problems, seed,
                                                                       "rsd-prm-eval", "rsd-prm-eval"))
    out = []
    for s in settings:
        with one_thread():
            start = time.perf_counter()
            prm, info = train_implicit(draft, cfg.prm_problems, seed, s["beta"], s["lr"], s["steps"])
            seconds = time.perf_counter() - start
        for reading in READINGS:
            read = prm.read_as(reading)
            out.append(dict(s, reading=reading, seed=seed, seconds=seconds,
                            auc=prm_auc({"implicit": read}, draft, cfg.prm_eval_problems, seed)["implicit"],
                            rank=best_of_n(drafts, problems, read)["ranking_auc_by_chain"],
                            final_loss=float(np.mean(info["losses"][-20:])), frac_correct=info["frac_correct"],
                            boundary_mismatches=mismatches))
    return out


def learns(record: dict) -> dict:
    """Whether the implicit PRM of `record` (one setting of `scales.IMPLICIT_PRM_CALIBRATION`: `auc` and `rank`
    per chain score, each per seed) meets each bar on at least a share `SHARE` of its seeds: the step AUC >=
    `PRM_AUC_MIN` (`step`), the within-problem ranking AUC of its best chain score (the highest mean over the
    seeds, as `scales.BON_CHAIN` picks) >= `PRM_RANK_MIN` (`rank`), both on the same seed (`both`), with the share of
    seeds of each and the chain."""
    seeds = sorted(record["auc"])
    chain = max(record["rank"], key=lambda c: np.mean([record["rank"][c][s] for s in seeds]))
    step = [record["auc"][s] >= PRM_AUC_MIN for s in seeds]
    rank = [record["rank"][chain][s] >= PRM_RANK_MIN for s in seeds]
    shares = {"step": float(np.mean(step)), "rank": float(np.mean(rank)),
              "both": float(np.mean([a and b for a, b in zip(step, rank)]))}
    return {"chain": chain, "shares": shares, **{k: v >= SHARE for k, v in shares.items()}}


def kept_setting(records: Sequence[dict]) -> dict:
    """The setting and reading of `records` (`scales.IMPLICIT_PRM_CALIBRATION`) a warm-up would use, by a rule
    declared before the grid on every calibration seed ran: among the records measured on every calibration seed,
    the one meeting both bars on the most seeds (:func:`learns`), then with the highest mean ranking AUC of its best
    chain score, then the fewest steps."""
    seeds = set().union(*(r["auc"] for r in records))
    full = [r for r in records if set(r["auc"]) == seeds]

    def merit(r):
        got = learns(r)
        return got["shares"]["both"], np.mean(list(r["rank"][got["chain"]].values())), -r["steps"]
    return max(full, key=merit)
