"""Step-level RSD (Eq. 2's rule over a batch) and single-model decoding, with the FLOPs of every model counted
as if it kept a KV cache of the text it has read."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core import arithmetic, flops
from ..core.generation import generate
from ..core.seeding import numpy_rng
from .scales import DELIMITER, MAX_NEW_TOKENS, MAX_STEPS, PATIENCE


def models_of(model) -> tuple:
    """The models a role runs over the text it reads, each charged in full: none for a program (`None`), one model,
    or several (an implicit PRM runs its policy π_θ and its reference π_ref over every token it scores)."""
    return () if model is None else tuple(model) if isinstance(model, (tuple, list)) else (model,)


@dataclass
class Meter:
    """FLOPs of a role's models (none, one or several) over a batch, with a per-row KV cache of what the role has
    already read (each of its models keeps one)."""

    configs: tuple
    cached: list[int]
    flops: int = 0
    tokens_read: int = 0  # prefill of text the model had not seen
    tokens_written: int = 0

    @classmethod
    def of(cls, model, batch: int) -> "Meter":
        """The meter of `model`: `None`, a model or a tuple of models (:func:`models_of`)."""
        return cls(tuple(m.config for m in models_of(model)), [0] * batch)

    def call(self, row: int, prefix_len: int, n_new: int, keep: bool = True) -> int:
        """A call that reads `prefix_len` tokens and writes `n_new`: new tokens cost 2N + attention each, in each
        of the role's models. With `keep=False` (a discarded step) the cache rolls back to the prefix."""
        if not self.configs:
            return 0
        past = min(self.cached[row], prefix_len)
        cost = sum(flops.forward_flops(c, prefix_len - past + n_new, past=past) for c in self.configs)
        self.flops += cost
        self.tokens_read += prefix_len - past
        self.tokens_written += n_new
        self.cached[row] = prefix_len + n_new if keep else prefix_len
        return cost


# ------------------------------------------------------------------------------------------------- decoding


@dataclass
class Step:
    draft: str  # the draft's proposal
    reward: float
    accepted: bool
    text: str  # what went into the solution: the draft step, or the target's regeneration
    draft_tokens: int = 0  # tokens the draft wrote for this step (an end-of-sequence token included)


@dataclass
class Decoded:
    """Solutions of a batch, every step's reward and decision, and FLOPs split by model."""

    completions: list[str]
    steps: list[list[Step]]
    flops: dict[str, int]
    tokens: dict[str, int]  # draft_accepted, draft_discarded, target
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())

    @property
    def acceptance_rate(self) -> float:
        """Accepted draft steps / all draft steps."""
        n = sum(len(s) for s in self.steps)
        return sum(st.accepted for s in self.steps for st in s) / max(1, n)

    @property
    def token_acceptance_rate(self) -> float:
        """The official code's metric: accepted draft tokens / (accepted + discarded)."""
        a, d = self.tokens["draft_accepted"], self.tokens["draft_discarded"]
        return a / max(1, a + d)

    @property
    def target_calls(self) -> int:
        return sum(not st.accepted for s in self.steps for st in s)

    def accuracy(self, problems: Sequence[arithmetic.Problem]) -> float:
        return float(np.mean([arithmetic.is_correct(p, c) for p, c in zip(problems, self.completions, strict=True)]))


def threshold_rule(delta: float, floor_reject: float = 0.0, seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """Eq. (2): keep a draft step when its reward is at least δ (the official code's `>=`). With `floor_reject` > 0
    (`floor_share`: only when δ is the lowest reward of the calibration split, so that Eq. (2) alone would send no
    step to the target), a step scored exactly δ is also sent to the target with probability `floor_reject`."""
    rng = numpy_rng(seed, "floor-rejection")

    def rule(rewards: np.ndarray) -> np.ndarray:
        r = np.asarray(rewards, dtype=float)
        return (r >= delta) & ~((r == delta) & (rng.random(len(r)) < floor_reject))
    return rule


def delta_for_budget(rewards: Sequence[float], budget: float) -> float:
    """The paper's choice of δ under a budget on target calls: the largest threshold that sends at most a share
    `budget` of the steps scored `rewards` to the target, i.e. the smallest reward value r* with
    share(r <= r*) > `budget` (a step is rejected when r < δ). A 0/1 PRM whose zeros fit the budget gets δ = 1; one
    whose zeros do not gets δ = 0, the lowest reward, which alone accepts everything (see `floor_share`)."""
    r = np.sort(np.asarray(rewards, dtype=float))
    if not len(r):
        raise ValueError("delta_for_budget needs at least one reward")
    above = np.flatnonzero(np.arange(1, len(r) + 1) / len(r) > budget)  # the steps below r[above[0]] fit the budget
    return float(r[above[0]]) if len(above) else math.inf


def floor_share(rewards: Sequence[float], delta: float, budget: float) -> float:
    """The boundary case of `delta_for_budget`: when the lowest reward alone exceeds the budget (a 0/1 PRM whose
    zeros outnumber it), δ is that lowest reward and Eq. (2) sends no step to the target, so RSD would be the draft
    alone. The budget is then spent on the lowest-reward steps themselves: each is sent to the target with
    probability `budget` / share(r = δ), which calls the target on a share `budget` of the steps in expectation,
    the budget's full use that the paper's "largest δ meeting the budget" makes when rewards do not tie. 0 when
    some step lies below δ (Eq. 2 spends the budget) or δ is infinite."""
    r = np.asarray(rewards, dtype=float)
    if not math.isfinite(delta) or (r < delta).any():
        return 0.0
    return tie_share(r, delta, budget)


def tie_share(rewards: Sequence[float], delta: float, budget: float) -> float:
    """The probability with which a rule at δ also sends a step scored exactly δ to the target so that it calls
    the target on a share `budget` of the steps scored `rewards` in expectation: (budget − share(r < δ)) /
    share(r = δ), within [0, 1]; 0 when δ is infinite (every step already goes to the target) or no step is
    scored δ. For rewards with many ties (a router's few score levels) it spends the budget that Eq. (2) alone
    would leave unspent."""
    r = np.asarray(rewards, dtype=float)
    if not math.isfinite(delta) or not (r == delta).any():
        return 0.0
    return float(np.clip((budget - np.mean(r < delta)) / np.mean(r == delta), 0.0, 1.0))


def budget_rule(rewards: Sequence[float], budget: float, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """Eq. (2) at the δ of `budget` on the calibration `rewards` (`delta_for_budget`), with steps scored exactly δ
    also sent to the target at the rate that spends the budget (`tie_share`), so that a PRM with few score levels
    (a 0/1 PRM, a router) can spend a budget its lowest levels do not fill."""
    delta = delta_for_budget(rewards, budget)
    return threshold_rule(delta, tie_share(rewards, delta, budget), seed)


def keeps(accuracy: float, target_accuracy: float, margin: float) -> bool:
    """Whether RSD's `accuracy` keeps the target's: it is at least `target_accuracy` minus `margin`."""
    return accuracy >= target_accuracy - margin


def keeping_budget(budgets: Sequence[float], accuracy: Sequence[float], target_accuracy: float,
                   margin: float) -> float:
    """The smallest of `budgets` (ascending) at which RSD's `accuracy` keeps the target's (`keeps`); the largest
    when none does."""
    return next((b for b, a in zip(budgets, accuracy) if keeps(a, target_accuracy, margin)), budgets[-1])


def random_rule(p: float, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """The ablation: keep a draft step with probability p, whatever its reward."""
    rng = numpy_rng(seed, "random-acceptance")
    return lambda rewards: rng.random(len(rewards)) < p


def soft_rule(seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """The paper's ω-shape ablation, soft weights: keep a draft step with probability ω(r) = r (clipped to
    [0, 1]) instead of the hard step 1{r ≥ δ}. For a 0/1 PRM the two coincide."""
    rng = numpy_rng(seed, "soft-acceptance")
    return lambda rewards: rng.random(len(rewards)) < np.clip(np.asarray(rewards, dtype=float), 0.0, 1.0)


def check_pair(draft_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase) -> None:
    """Draft and target must share a vocabulary: the target continues text the draft wrote, token for token."""
    if draft_tok.get_vocab() != target_tok.get_vocab():
        raise ValueError("draft and target tokenizers differ (vocabularies of "
                         f"{len(draft_tok)} and {len(target_tok)} tokens); RSD needs one shared tokenizer")


def _ntok(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


def cut_step(text: str, delimiter: str = DELIMITER) -> str:
    """`text` up to and including its first `delimiter` (all of it when it has none)."""
    k = text.find(delimiter)
    return text if k < 0 else text[:k + len(delimiter)]


def _step(model, tokenizer, prefixes: Sequence[str], budget: Sequence[int],
          delimiter: str = DELIMITER) -> list[tuple[str, list[int]]]:
    """One reasoning step per prefix (up to the delimiter or end of sequence), each at most its row's budget of
    tokens: (text, token ids). The delimiter is a stop string of :func:`icml25.core.generation.generate`, so it
    may take several tokens; a token that runs past it (a BPE merge such as `";A"`) is paid for, but the step's
    text ends at the delimiter and the next step starts there."""
    out = generate(model, tokenizer, prefixes, max(budget), stop=(delimiter,))
    rows = [ids[:b] for ids, b in zip(out.token_ids, budget, strict=True)]
    return [(cut_step(tokenizer.decode(ids, skip_special_tokens=True), delimiter), ids) for ids in rows]


def decode(draft: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, target: PreTrainedModel,
           target_tokenizer: PreTrainedTokenizerBase, problems: Sequence[arithmetic.Problem], prm,
           rule: Callable[[np.ndarray], np.ndarray], max_steps: int = MAX_STEPS,
           patience: int | None = PATIENCE, delimiter: str = DELIMITER) -> Decoded:
    """Step-level RSD over a batch (greedy, as in the official code): each round the draft writes one step for
    every unfinished problem (text up to `delimiter`, any number of tokens: the official code's is a blank line),
    the PRM scores it, `rule` (Eq. 2 for RSD) decides; rejected steps are regenerated by the target from the same
    prefix, in one batched call. A problem finishes on a step without the delimiter (the answer step, end of
    sequence or the token budget) or after `max_steps` steps. The official code's batch-level patience: when
    `patience` rounds in a row finish no problem, the batch stops where it is."""
    check_pair(tokenizer, target_tokenizer)
    if not len(problems):
        raise ValueError("empty batch: decode needs at least one problem")
    start = time.perf_counter()
    n = len(problems)
    meters = {"draft": Meter.of(draft, n), "target": Meter.of(target, n), "prm": Meter.of(prm.model, n)}
    prompt_len = [_ntok(tokenizer, p.prompt) for p in problems]
    completions, steps = [""] * n, [[] for _ in range(n)]
    tokens = {"draft_accepted": 0, "draft_discarded": 0, "target": 0}
    written = [0] * n  # tokens of each solution so far: a row stops at MAX_NEW_TOKENS, like single-model decoding
    active = list(range(n))
    idle = 0  # rounds in a row that finished no problem
    for _ in range(max_steps):
        if not active or (patience is not None and idle >= patience):
            break
        budget = [MAX_NEW_TOKENS - written[i] for i in active]
        prefixes = [problems[i].prompt + completions[i] for i in active]
        prefix_len = [prompt_len[i] + written[i] for i in active]
        proposal = _step(draft, tokenizer, prefixes, budget, delimiter)
        rewards = np.asarray(prm.score([problems[i] for i in active], [completions[i] for i in active],
                                       [t for t, _ in proposal]), dtype=float)
        keep = np.asarray(rule(rewards), dtype=bool)
        rejected = [j for j in range(len(active)) if not keep[j]]
        regenerated = {}
        if rejected:
            out = _step(target, tokenizer, [prefixes[j] for j in rejected], [budget[j] for j in rejected], delimiter)
            regenerated = dict(zip(rejected, out))
        still = []
        for j, i in enumerate(active):
            draft_text, draft_ids = proposal[j]
            meters["draft"].call(i, prefix_len[j], len(draft_ids), keep=bool(keep[j]))
            meters["prm"].call(i, prefix_len[j] + len(draft_ids), 0)  # reads prefix and step, scores its last token
            meters["prm"].cached[i] = prefix_len[j] + (len(draft_ids) if keep[j] else 0)  # a discarded step is dropped
            if keep[j]:
                text, ids = draft_text, draft_ids
                tokens["draft_accepted"] += len(ids)
            else:
                text, ids = regenerated[j]
                meters["target"].call(i, prefix_len[j], len(ids))
                tokens["draft_discarded"] += len(draft_ids)
                tokens["target"] += len(ids)
            steps[i].append(Step(draft_text, float(rewards[j]), bool(keep[j]), text, len(draft_ids)))
            completions[i] += text
            written[i] += len(ids)
            if text.endswith(delimiter) and written[i] < MAX_NEW_TOKENS:
                still.append(i)
        idle = idle + 1 if len(still) == len(active) else 0
        active = still
    return Decoded(completions, steps, {k: m.flops for k, m in meters.items()}, tokens,
                   seconds=time.perf_counter() - start)


def decode_single(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: Sequence[arithmetic.Problem],
                  role: str = "target", temperature: float = 0.0, generator: torch.Generator | None = None) -> Decoded:
    """A baseline: one model writes the whole solution (greedy unless `temperature` > 0), with its FLOPs."""
    if not len(problems):
        raise ValueError("empty batch: decode_single needs at least one problem")
    start = time.perf_counter()
    out = generate(model, tokenizer, [p.prompt for p in problems], MAX_NEW_TOKENS, temperature=temperature,
                   generator=generator)
    meter = Meter.of(model, len(problems))
    for i, (p, ids) in enumerate(zip(problems, out.token_ids)):
        meter.call(i, _ntok(tokenizer, p.prompt), len(ids))
    flops_by = {"draft": 0, "target": 0, "prm": 0} | {role: meter.flops}
    n_tok = out.n_tokens
    tokens = {"draft_accepted": n_tok if role == "draft" else 0, "draft_discarded": 0,
              "target": n_tok if role == "target" else 0}
    return Decoded(out.texts, [[] for _ in problems], flops_by, tokens, seconds=time.perf_counter() - start)
