"""The implicit reward of Yuan et al. ("Free Process Rewards without Process Labels", ICML 2025), shared by the
chapters that use it (implicit_prm, which studies it, and rsd, which decodes with it).

An outcome reward parameterised as a log-likelihood ratio between a trained model π_θ and a frozen reference π_ref
(the paper's Eq. 1)::

    r_θ(y) = β · log π_θ(y) / π_ref(y)

trained on response-level labels l ∈ {0, 1} only, e.g. with the cross-entropy of Eq. 5::

    L_CE = −[l · log σ(r_θ(y)) + (1 − l) · log(1 − σ(r_θ(y)))]

The Proposition makes the partial sums of the token log-ratios a process reward for free::

    q_θ^t = Σ_{i ≤ t} β · log π_θ(y_i | y_<i) / π_ref(y_i | y_<i)  =  β · log E_{π_ref(y | y_≤t)} exp(r_θ(y) / β)

so step t's reward is r_t = q^t − q^{t−1}, read at the step boundaries (the arithmetic task's `;`), and the step
rewards telescope to the outcome reward: Σ_t r_t = r_θ(y).

Here: the token log-ratios, π_ref's log-prob cache, step boundaries and step rewards, the `ImplicitPRM`, the
outcome reward and the CE objective, outcome-labelled rollouts, their batches, and training π_θ from a copy of π_ref.
Everything takes Hugging Face causal LMs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from . import arithmetic
from .generation import encode_completions, select_rows, token_logprobs
from .seeding import torch_generator
from .train import train


def check_pair(policy: PreTrainedModel, reference: PreTrainedModel) -> None:
    """The two models must share a vocabulary: the log-ratio compares probabilities of the same tokens."""
    vp, vr = policy.get_output_embeddings().weight.shape[0], reference.get_output_embeddings().weight.shape[0]
    if vp != vr:
        raise ValueError(f"policy and reference have different vocabularies ({vp} vs {vr} tokens); the implicit "
                         "reward β·log π_θ/π_ref needs one tokenizer for both")


def token_log_ratios(policy: PreTrainedModel, reference: PreTrainedModel, batch: dict) -> torch.Tensor:
    """β-free per-token log-ratios log π_θ(y_i|y_<i) − log π_ref(y_i|y_<i), [B, T-1], zero outside the completion.

    The reference needs no gradient; the policy's term is differentiable (what the training losses use). A batch
    that carries `ref_logprobs` (π_ref's token log-probs, from a :class:`ReferenceCache`) skips π_ref's forward."""
    check_pair(policy, reference)
    ref = batch.get("ref_logprobs")
    if ref is None:
        with torch.no_grad():
            ref = token_logprobs(reference, batch)
    return token_logprobs(policy, batch) - ref


class ReferenceCache:
    """π_ref's token log-probs of (prompt, completion) rows, computed once: π_ref is frozen, so every PRM trained
    from it, every training step and every evaluation of the same responses reuses them.

    A row's log-probs depend only on its own tokens (causal model, right padding), so one cached row fits any
    batch it is padded into. Only valid while `reference`'s weights do not change."""

    def __init__(self, reference: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 512):
        self.reference, self.tokenizer, self.batch_size = reference, tokenizer, batch_size
        self._rows: dict[tuple[str, str], torch.Tensor] = {}

    @torch.no_grad()
    def rows(self, prompts: Sequence[str], completions: Sequence[str]) -> list[torch.Tensor]:
        """Each row's [len − 1] token log-probs under π_ref (zero outside the completion)."""
        keys = list(zip(prompts, completions, strict=True))
        missing = list(dict.fromkeys(k for k in keys if k not in self._rows))
        for i in range(0, len(missing), self.batch_size):
            chunk = missing[i:i + self.batch_size]
            batch = encode_completions(self.tokenizer, [p for p, _ in chunk], [c for _, c in chunk])
            logp, lengths = token_logprobs(self.reference, batch), batch["attention_mask"].sum(1).tolist()
            self._rows.update((k, logp[j, :n - 1].clone()) for j, (k, n) in enumerate(zip(chunk, lengths)))
        return [self._rows[k] for k in keys]

    def batch(self, prompts: Sequence[str], completions: Sequence[str], width: int) -> torch.Tensor:
        """The rows padded with zeros to `width` (the [B, T-1] coordinates of their encoded batch)."""
        out = torch.zeros(len(prompts), width)
        for j, r in enumerate(self.rows(prompts, completions)):
            out[j, :len(r)] = r
        return out


def step_ends(tokenizer: PreTrainedTokenizerBase, batch: dict, on_missing: str = "raise") -> list[list[int]]:
    """For each row, the index (in the [B, T-1] log-prob coordinates) of the last token of every step.

    A step ends at a delimiter token (`;`) or at the completion's last token. A completion without any delimiter
    raises ValueError (`on_missing="raise"`) or counts as a single step (`on_missing="whole"`)."""
    if on_missing not in ("raise", "whole"):
        raise ValueError(f"on_missing={on_missing!r}; valid: 'raise', 'whole'")
    delim = tokenizer.convert_tokens_to_ids(arithmetic.STEP_DELIMITER)
    ids, cmask = batch["input_ids"][:, 1:], batch["completion_mask"][:, 1:]
    out = []
    for row, m in zip(ids.tolist(), cmask.tolist()):
        pos = [j for j, keep in enumerate(m) if keep]
        if not pos:
            if on_missing == "raise":
                raise ValueError("empty completion: there is no step to reward")
            out.append([])
            continue
        ends = [j for j in pos if row[j] == delim]
        if not ends and on_missing == "raise":
            text = tokenizer.decode([row[j] for j in pos])
            raise ValueError(f"completion {text!r} has no step delimiter {arithmetic.STEP_DELIMITER!r}")
        if not ends or ends[-1] != pos[-1]:
            ends.append(pos[-1])
        out.append(ends)
    return out


def process_rewards(token_rewards: torch.Tensor, ends: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Step rewards from token rewards (Proposition): q^t = cumulative sum up to step t's last token,
    r_t = q^t − q^{t−1} (q^0 = 0). Returns one [n_steps] tensor per row."""
    q = token_rewards.cumsum(-1)
    out = []
    for i, e in enumerate(ends):
        qt = q[i, list(e)]
        out.append(torch.diff(qt, prepend=qt.new_zeros(1)) if len(e) else qt)
    return out


def process_rewards_by_segments(token_rewards: torch.Tensor, ends: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Plain reference of :func:`process_rewards`: each step's reward is the sum of its own tokens' rewards."""
    out = []
    for i, e in enumerate(ends):
        starts = [0] + [j + 1 for j in e[:-1]]
        out.append(torch.stack([token_rewards[i, s:j + 1].sum() for s, j in zip(starts, e)]))
    return out


@dataclass
class ImplicitPRM:
    """An implicit PRM: a trained `policy` π_θ and its frozen `reference` π_ref (same tokenizer) with `beta`.

    `step_rewards(prompts, completions)` gives r_t for every step; `outcome_rewards` gives r_θ(y) = Σ_t r_t;
    `score` aggregates steps (min, sum, last) as best-of-N needs; `last_step_rewards` scores the newest step of
    partial solutions (the step-scorer interface of reward-guided decoding)."""

    policy: PreTrainedModel
    reference: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    beta: float
    batch_size: int = 512
    ref_cache: ReferenceCache | None = None  # π_ref's log-probs, shared by PRMs of the same frozen reference

    def __post_init__(self):
        check_pair(self.policy, self.reference)
        if not self.beta > 0:
            raise ValueError(f"beta must be positive, got {self.beta}")
        if self.ref_cache is not None and self.ref_cache.reference is not self.reference:
            raise ValueError("ref_cache holds another model's log-probs than this PRM's reference")

    @torch.no_grad()
    def step_rewards(self, prompts: Sequence[str], completions: Sequence[str],
                     on_missing: str = "raise") -> list[np.ndarray]:
        """r_t = β·Σ_{tokens of step t} log π_θ/π_ref, for every step of every completion.

        With `on_missing="whole"` a completion without a delimiter is one step, and an empty completion gets the
        single reward −inf (it has no step to reward, and best-of-N should never pick it)."""
        out = []
        for i in range(0, len(prompts), self.batch_size):
            p, c = prompts[i:i + self.batch_size], completions[i:i + self.batch_size]
            batch = encode_completions(self.tokenizer, p, c)
            if self.ref_cache is not None:
                batch["ref_logprobs"] = self.ref_cache.batch(p, c, batch["input_ids"].shape[1] - 1)
            ends = step_ends(self.tokenizer, batch, on_missing)
            rewards = self.beta * token_log_ratios(self.policy, self.reference, batch)
            out += [r.numpy() if len(r) else np.array([-np.inf]) for r in process_rewards(rewards, ends)]
        return out

    def outcome_rewards(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """r_θ(y) = β·log π_θ(y)/π_ref(y) (Eq. 1): the telescoped sum of the step rewards."""
        return np.array([r.sum() for r in self.step_rewards(prompts, completions, on_missing="whole")])

    def score(self, prompts: Sequence[str], completions: Sequence[str], aggregate: str = "min") -> np.ndarray:
        return np.array([aggregate_steps(r, aggregate)
                         for r in self.step_rewards(prompts, completions, on_missing="whole")])

    def last_step_rewards(self, prompts: Sequence[str], partial_completions: Sequence[str]) -> np.ndarray:
        return np.array([r[-1] for r in self.step_rewards(prompts, partial_completions, on_missing="whole")])


def aggregate_steps(step_rewards: np.ndarray, how: str = "min") -> float:
    """A response's score from its step rewards: the worst step (`min`, the official evaluation's "single"
    reward with min), all of them (`sum` = outcome reward), the final step (`last`), or the worst partial sum
    q^t (`min_q`, the official "accumulative" reward with min)."""
    if how == "min":
        return float(np.min(step_rewards))
    if how == "sum":
        return float(np.sum(step_rewards))
    if how == "last":
        return float(step_rewards[-1])
    if how == "min_q":
        return float(np.min(np.cumsum(step_rewards)))
    raise ValueError(f"unknown aggregation {how!r}; valid: min, sum, last, min_q")


# ------------------------------------------------------------------------------------------------ the objective


def implicit_reward(policy: PreTrainedModel, reference: PreTrainedModel, batch: dict, beta: float) -> torch.Tensor:
    """r_θ(y) = β·Σ_tokens log π_θ/π_ref for every row of `batch` ([B], differentiable in π_θ) (Eq. 1)."""
    return beta * token_log_ratios(policy, reference, batch).sum(-1)


def ce_loss(policy: PreTrainedModel, reference: PreTrainedModel, batch: dict, beta: float) -> torch.Tensor:
    """Cross-entropy on outcome labels l ∈ {0, 1} (Eq. 5): −[l·log σ(r_θ(y)) + (1−l)·log(1 − σ(r_θ(y)))],
    with r_θ(y) = β·Σ_tokens log π_θ/π_ref. Works with one response per instruction."""
    return F.binary_cross_entropy_with_logits(implicit_reward(policy, reference, batch, beta),
                                              batch["labels"].float())


# ------------------------------------------------------------------------------------------------ training


@dataclass
class Rollouts:
    """Sampled responses with outcome labels: `prompt_index[k]` says which prompt response k answers."""

    problems: list[arithmetic.Problem]
    prompt_index: list[int]
    completions: list[str]
    labels: list[bool]

    def first_indices(self, n: int) -> list[int]:
        """Which responses are the first `n` of their prompt."""
        seen: dict[int, int] = {}
        keep = []
        for k, i in enumerate(self.prompt_index):
            seen[i] = seen.get(i, 0) + 1
            if seen[i] <= n:
                keep.append(k)
        return keep

    def first(self, n: int) -> Rollouts:
        """The first `n` responses of every prompt (n responses per instruction, same instructions)."""
        keep = self.first_indices(n)
        return Rollouts(self.problems, [self.prompt_index[k] for k in keep], [self.completions[k] for k in keep],
                        [self.labels[k] for k in keep])

    @property
    def prompts(self) -> list[str]:
        return [self.problems[i].prompt for i in self.prompt_index]


def with_reference(batch: dict, prompts: list[str], completions: list[str], ref_cache: ReferenceCache | None):
    """`batch` carrying π_ref's cached token log-probs of its rows (`ref_logprobs`), when there is a cache."""
    if ref_cache is not None:
        batch["ref_logprobs"] = ref_cache.batch(prompts, completions, batch["input_ids"].shape[1] - 1)
    return batch


def labelled_batches(tokenizer, data: Rollouts, batch_size: int, seed: int, mismatched: bool = False,
                     ref_cache: ReferenceCache | None = None):
    """Endless batches of labelled responses drawn with replacement (CE, KTO). With `mismatched`, each batch also
    carries `kl`: every prompt paired with the next row's completion, KTO's reference-point sample. With
    `ref_cache`, batches carry π_ref's cached log-probs of their rows."""
    g = torch_generator(seed, "ce_batches")
    prompts, encoded = data.prompts, encode_completions(tokenizer, data.prompts, data.completions)
    while True:
        idx = torch.randint(len(prompts), (batch_size,), generator=g).tolist()
        p, c = [prompts[i] for i in idx], [data.completions[i] for i in idx]
        batch = with_reference(select_rows(encoded, idx), p, c, ref_cache)
        batch["labels"] = torch.tensor([data.labels[i] for i in idx])
        if mismatched:
            batch["kl"] = encode_completions(tokenizer, p, c[1:] + c[:1])
        yield batch


Objective = Callable[[PreTrainedModel, PreTrainedModel, dict, float], torch.Tensor]


def train_from_reference(ref_cache: ReferenceCache, batches: Iterator[dict], loss: Objective, beta: float,
                         steps: int, lr: float, desc: str) -> tuple[ImplicitPRM, list[float]]:
    """Train π_θ from a copy of π_ref (`ref_cache.reference`, which stays frozen) by minimising `loss` (on the
    implicit reward with `beta`) over `steps` of `batches`, a fixed budget: the PRM (keeping the cache of π_ref's
    log-probs) and its loss at every optimiser step."""
    base = ref_cache.reference
    policy = copy.deepcopy(base)
    base.eval()
    run = train(policy, batches, steps, lr=lr, loss_fn=lambda m, b: loss(m, base, b, beta), desc=desc)
    policy.eval()
    return ImplicitPRM(policy, base, ref_cache.tokenizer, beta, ref_cache=ref_cache), run.losses
