"""Reward-Guided Speculative Decoding (RSD; Liao et al., ICML 2025), at the scale of the zoo's arithmetic reasoners.

A cheap *draft* model proposes each reasoning step (text up to the step delimiter ``;``); a process reward model
(PRM) scores it; the step is kept when its reward reaches a threshold δ, otherwise the *target* model regenerates
that step from the same prefix. Equations are numbered as in this chapter (the paper's Section 3 states them):

    (1)  P_RSD(y | z) = ω(r(y | z)) · P_draft(y | z) + ν(z) · P_target(y | z),   ν(z) = Σ_y (1 − ω(r(y | z))) P_draft(y | z)
    (2)  ω(r) = 1{r ≥ δ}                                             (the binary step the official code implements)
    (3)  E_{P_RSD}[r] = Σ_{y ∈ S} P_draft(y) r(y) + P_draft(S^c) · E_{P_target}[r],    S = {y : ω(r(y)) = 1}

Among acceptance sets S of equal draft mass P_draft(S) (so equal target-call rate ν), (3) is largest for the
threshold set S_δ = {r ≥ δ}: that is the paper's optimality argument for (2), checked here by brute force.

Compute is counted in FLOPs with :mod:`icml25.core.flops`, as if every model kept a KV cache of the text it has
read (prefix caching): a model pays for each token the first time it reads it (prompt, steps written by the other
model) and for each token it writes; a discarded draft step is paid for and rolled back. The exact oracle PRM is a
program and costs nothing; a learned PRM is a model and its tokens are counted.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .core import arithmetic, flops, reasoners, tinylm, zoo
from .core.claims import Claim
from .core.config import make_config
from .core.generation import generate, left_pad
from .core.seeding import derive_seed, numpy_rng, torch_generator
from .core.train import lm_batches, train

DELIMITER = arithmetic.STEP_DELIMITER
MAX_STEPS = 48  # a safety cap; every step writes at least one token, so MAX_NEW_TOKENS ends a row first
MAX_NEW_TOKENS = 48  # the same budget as reasoners.solve

config = make_config({
    "smoke": {"seeds": [0], "n_test": 24, "deltas": [0.0, 0.5, 1.01], "delta": 0.7, "epsilon": 0.2,
              "gamma": 4, "bon_n": 3, "bon_temperature": 1.0, "prm_preset": "nano", "prm_problems": 100,
              "prm_steps": 20, "toy_samples": 20000},
    "ci": {"seeds": [0, 1, 2], "n_test": 200, "deltas": [0.0, 0.3, 0.6, 0.9, 1.01], "delta": 0.7,
           "epsilon": 0.2, "gamma": 4, "bon_n": 4, "bon_temperature": 1.0, "prm_preset": "nano",
           "prm_problems": 1500, "prm_steps": 300, "toy_samples": 100000},
    "full": {"seeds": [0, 1, 2, 3, 4], "n_test": 500, "deltas": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8,
                                                                   0.9, 0.95, 1.01],
             "delta": 0.7, "epsilon": 0.2, "gamma": 4, "bon_n": 8, "bon_temperature": 1.0, "prm_preset": "micro",
             "prm_problems": 5000, "prm_steps": 1000, "toy_samples": 1000000},
})

# --------------------------------------------------------------------------------------------------- claims
# Declared before any experiment ran; the criteria are those of the chapter's issue and are not tuned afterwards.

EFFICIENCY = Claim(
    chapter="rsd", id="efficiency",
    paper_statement="RSD reaches the target model's accuracy with far fewer FLOPs than target-only decoding",
    paper_value="up to 4.4x fewer FLOPs (1.5B or 7B draft, 7B or 72B target; ours: ~4x FLOP ratio)",
    criterion="With the oracle PRM, some δ of the sweep has mean accuracy (over seeds) at least target-only mean "
              "accuracy minus 2 points, at mean total FLOPs <= 0.6x target-only",
    test=lambda m: any(a >= m["target_accuracy"] - 0.02 and f <= 0.6
                       for a, f in zip(m["rsd_accuracy"], m["rsd_flop_ratio"], strict=True)),
)

BEATS_PARALLEL = Claim(
    chapter="rsd", id="beats_parallel",
    paper_statement="At comparable compute, RSD is more accurate than parallel decoding (draft best-of-N reranked "
                    "by the PRM)",
    paper_value="up to +3.5 average accuracy",
    criterion="With the oracle PRM at δ = 0.7, RSD's mean accuracy is at least that of draft best-of-N (same PRM, "
              "min step reward) at the smallest N whose FLOPs reach RSD's",
    test=lambda m: m["rsd_accuracy"] >= m["bon_accuracy"],
)

THRESHOLD_MATTERS = Claim(
    chapter="rsd", id="threshold_matters",
    paper_statement="Accepting draft steps by a reward threshold is better than accepting them blindly at the same "
                    "rate (the threshold rule is optimal under a budget on target calls)",
    paper_value="threshold ω optimal (theory); ablation over ω shapes",
    criterion="On every seed, RSD with the oracle PRM at δ = 0.7 is more accurate than random step acceptance "
              "with probability equal to RSD's measured acceptance rate",
    test=lambda m: all(t > r for t, r in zip(m["threshold_accuracy"], m["random_accuracy"], strict=True)),
)


# -------------------------------------------------------------------------------------- the one-step mixture


def _check_categorical(p_draft, p_target, reward) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p_m, p_big, r = (np.asarray(x, dtype=float) for x in (p_draft, p_target, reward))
    if not (p_m.shape == p_big.shape == r.shape and p_m.ndim == 1 and len(p_m)):
        raise ValueError(f"p_draft, p_target and reward must be 1-d of one length, got {p_m.shape}, "
                         f"{p_big.shape}, {r.shape}")
    for name, p in (("p_draft", p_m), ("p_target", p_big)):
        if (p < 0).any() or not np.isclose(p.sum(), 1.0):
            raise ValueError(f"{name} must be a probability vector (non-negative, sums to 1); got {p}")
    return p_m, p_big, r


def mixture(p_draft, p_target, reward, threshold: float) -> np.ndarray:
    """P_RSD of a one-step categorical, Eqs. (1)-(2): 1{r ≥ δ}·P_draft + P_draft(r < δ)·P_target."""
    p_m, p_big, r = _check_categorical(p_draft, p_target, reward)
    omega = (r >= threshold).astype(float)  # Eq. (2)
    nu = float(((1 - omega) * p_m).sum())  # ν: the draft mass that is rejected, i.e. the rate of target calls
    return omega * p_m + nu * p_big  # Eq. (1)


def sample_rsd_categorical(p_draft, p_target, reward, threshold: float, n: int, seed: int) -> np.ndarray:
    """`n` outcomes drawn the way RSD draws them: y ~ P_draft; keep it if r(y) ≥ δ, else draw y ~ P_target."""
    p_m, p_big, r = _check_categorical(p_draft, p_target, reward)
    rng = numpy_rng(seed, "rsd-toy")
    proposal = rng.choice(len(p_m), size=n, p=p_m)
    fallback = rng.choice(len(p_big), size=n, p=p_big)
    return np.where(r[proposal] >= threshold, proposal, fallback)


def expected_reward(p_draft, p_target, reward, accept: Sequence[bool]) -> float:
    """Eq. (3): the expected reward of RSD that keeps the draft outcomes in the acceptance set `accept`."""
    p_m, p_big, r = _check_categorical(p_draft, p_target, reward)
    s = np.asarray(accept, dtype=bool)
    return float((p_m * r)[s].sum() + p_m[~s].sum() * (p_big * r).sum())


def acceptance_sets(n: int):
    """Every subset of n outcomes, as boolean masks (2^n of them: fine for the toy's n = 8)."""
    for bits in itertools.product((False, True), repeat=n):
        yield np.array(bits)


def brute_force_best(p_draft, p_target, reward, draft_mass: float, tol: float = 1e-9) -> tuple[float, np.ndarray]:
    """The largest Eq. (3) over all acceptance sets S with P_draft(S) = `draft_mass`, and a set achieving it."""
    p_m = np.asarray(p_draft, dtype=float)
    best, best_set = -np.inf, None
    for s in acceptance_sets(len(p_m)):
        if abs(p_m[s].sum() - draft_mass) <= tol:
            v = expected_reward(p_draft, p_target, reward, s)
            if v > best + tol:
                best, best_set = v, s
    if best_set is None:
        raise ValueError(f"no acceptance set has draft mass {draft_mass}")
    return best, best_set


# --------------------------------------------------------------------------------------------- process rewards


def _step_index(prefix: str) -> int:
    return len(arithmetic.split_steps(prefix))


class OraclePRM:
    """The exact step verifier as a PRM: r = 1 when the step is the correct next step of the true chain, else 0.
    A program, not a model: it costs no FLOPs."""

    name = "oracle"
    model = None

    def score(self, problems: Sequence[arithmetic.Problem], prefixes: Sequence[str], steps: Sequence[str]):
        return np.array([float(arithmetic.step_correct(p, _step_index(x), s))
                         for p, x, s in zip(problems, prefixes, steps, strict=True)])


class NoisyOraclePRM(OraclePRM):
    """The oracle with each verdict flipped with probability ε. The flip is a fixed function of (seed, problem,
    prefix, step), so the same step always gets the same reward, whichever δ is being run. Costs no FLOPs."""

    def __init__(self, epsilon: float, seed: int):
        if not 0 <= epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon, self.seed, self.name = epsilon, seed, f"noisy oracle (ε={epsilon:g})"

    def score(self, problems, prefixes, steps):
        exact = super().score(problems, prefixes, steps)
        u = np.array([numpy_rng(derive_seed(self.seed, "flip"), p.prompt, x, s).random()
                      for p, x, s in zip(problems, prefixes, steps)])
        return np.where(u < self.epsilon, 1.0 - exact, exact)


PRM_QUERY, PRM_GOOD, PRM_BAD = arithmetic.PROMPT_END, "+", "-"


class LearnedPRM:
    """A tiny LM trained to answer, after `prompt + prefix + step + "|"`, the token "+" (step correct) or "-".
    r = p("+") / (p("+") + p("-")), a score in [0, 1]. It is a model, so its tokens are counted in FLOPs."""

    name = "learned PRM"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        self.model, self.tokenizer = model, tokenizer
        self.good, self.bad = tokenizer.convert_tokens_to_ids([PRM_GOOD, PRM_BAD])

    def texts(self, problems, prefixes, steps) -> list[str]:
        return [p.prompt + x + s + PRM_QUERY for p, x, s in zip(problems, prefixes, steps, strict=True)]

    @torch.inference_mode()
    def score(self, problems, prefixes, steps):
        rows = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in self.texts(problems, prefixes, steps)]
        ids, mask = left_pad(rows, self.tokenizer.pad_token_id)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        two = torch.log_softmax(logits[:, [self.good, self.bad]].float(), -1)
        return two[:, 0].exp().numpy()


def prm_training_data(draft: zoo.ZooModel, n_problems: int, seed: int) -> tuple[list[str], list[str]]:
    """(text, label) pairs for the learned PRM: the draft's sampled solutions (temperature 1) to training-stream
    problems, one example per step, labelled by the oracle."""
    problems = arithmetic.sample_problems(n_problems, seed, 1, 5, stream="rsd-prm")
    sols = reasoners.solve(draft.model, draft.tokenizer, problems, temperature=1.0,
                           generator=torch_generator(seed, "rsd-prm-rollouts"))
    texts, labels = [], []
    for p, sol in zip(problems, sols):
        steps = arithmetic.split_steps(sol)
        for k, (s, ok) in enumerate(zip(steps, arithmetic.step_labels(p, sol))):
            texts.append(p.prompt + "".join(steps[:k]) + s + PRM_QUERY)
            labels.append(PRM_GOOD if ok else PRM_BAD)
    return texts, labels


def _prm_cfg(scale):
    c = config(scale)
    return {"preset": c.prm_preset, "n_problems": c.prm_problems, "steps": c.prm_steps, "batch_size": 64, "lr": 3e-3}


PRM_ZOO = {s: _prm_cfg(s) for s in ("smoke", "ci", "full")}


@zoo.register("rsd-prm", PRM_ZOO)
def _build_prm(cfg, seed: int):
    draft = zoo.get("arith-draft", cfg.scale, seed)
    texts, labels = prm_training_data(draft, cfg.n_problems, seed)
    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model(cfg.preset, tok, derive_seed(seed, "rsd-prm"))
    result = train(model, lm_batches(tok, texts, labels, cfg.batch_size, seed, add_eos=False), cfg.steps,
                   lr=cfg.lr, desc=f"rsd-prm (seed {seed})")
    return model, tok, {"losses": result.losses, "n_examples": len(texts),
                        "frac_correct": labels.count(PRM_GOOD) / len(labels)}


def learned_prm(scale: str, seed: int) -> LearnedPRM:
    """The learned PRM of `seed` (trained once on draft rollouts of the same seed, then cached in the zoo)."""
    z = zoo.get("rsd-prm", scale, seed)
    return LearnedPRM(z.model, z.tokenizer)


# -------------------------------------------------------------------------------------------- FLOP bookkeeping


@dataclass
class Meter:
    """FLOPs of one model over a batch, with a per-row KV cache of what the model has already read."""

    config: object
    cached: list[int]
    flops: int = 0
    tokens_read: int = 0  # prefill of text the model had not seen
    tokens_written: int = 0

    @classmethod
    def of(cls, model, batch: int) -> "Meter":
        return cls(model.config if model is not None else None, [0] * batch)

    def call(self, row: int, prefix_len: int, n_new: int, keep: bool = True) -> int:
        """A call that reads `prefix_len` tokens and writes `n_new`: new tokens cost 2N + attention each.
        With `keep=False` (a discarded step) the cache rolls back to the prefix."""
        if self.config is None:
            return 0
        past = min(self.cached[row], prefix_len)
        cost = flops.forward_flops(self.config, prefix_len - past + n_new, past=past)
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


def threshold_rule(delta: float) -> Callable[[np.ndarray], np.ndarray]:
    """Eq. (2): keep a draft step when its reward is at least δ (the official code's `>=`)."""
    return lambda rewards: np.asarray(rewards) >= delta


def random_rule(p: float, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """The ablation: keep a draft step with probability p, whatever its reward."""
    rng = numpy_rng(seed, "random-acceptance")
    return lambda rewards: rng.random(len(rewards)) < p


def check_pair(draft_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase) -> None:
    """Draft and target must share a vocabulary: the target continues text the draft wrote, token for token."""
    if draft_tok.get_vocab() != target_tok.get_vocab():
        raise ValueError("draft and target tokenizers differ (vocabularies of "
                         f"{len(draft_tok)} and {len(target_tok)} tokens); RSD needs one shared tokenizer")


def _ntok(tok, text: str) -> int:
    return len(tok(text, add_special_tokens=False)["input_ids"])


def _ends_solution(step_ids: Sequence[int], tokenizer) -> bool:
    return not step_ids or step_ids[-1] == tokenizer.eos_token_id


def _step(model, tokenizer, prefixes: Sequence[str], budget: Sequence[int]) -> list[tuple[str, list[int]]]:
    """One reasoning step per prefix (up to the delimiter or end of sequence), each at most its row's budget of
    tokens: (text, token ids)."""
    out = generate(model, tokenizer, prefixes, max(budget), stop=(DELIMITER,))
    rows = [ids[:b] for ids, b in zip(out.token_ids, budget, strict=True)]
    return [(tokenizer.decode(ids, skip_special_tokens=True), ids) for ids in rows]


def decode(draft: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, target: PreTrainedModel,
           target_tokenizer: PreTrainedTokenizerBase, problems: Sequence[arithmetic.Problem], prm,
           rule: Callable[[np.ndarray], np.ndarray], max_steps: int = MAX_STEPS) -> Decoded:
    """Step-level RSD over a batch (greedy, as in the official code): each round the draft writes one step for
    every unfinished problem, the PRM scores it, `rule` (Eq. 2 for RSD) decides; rejected steps are regenerated by
    the target from the same prefix, in one batched call. A problem finishes on a step without the delimiter
    (the answer step, end of sequence or the step-length cap) or after `max_steps` steps."""
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
    for _ in range(max_steps):
        if not active:
            break
        budget = [MAX_NEW_TOKENS - written[i] for i in active]
        prefixes = [problems[i].prompt + completions[i] for i in active]
        prefix_len = [prompt_len[i] + written[i] for i in active]
        proposal = _step(draft, tokenizer, prefixes, budget)
        rewards = np.asarray(prm.score([problems[i] for i in active], [completions[i] for i in active],
                                       [t for t, _ in proposal]), dtype=float)
        keep = np.asarray(rule(rewards), dtype=bool)
        rejected = [j for j in range(len(active)) if not keep[j]]
        regenerated = {}
        if rejected:
            out = _step(target, tokenizer, [prefixes[j] for j in rejected], [budget[j] for j in rejected])
            regenerated = dict(zip(rejected, out))
        still = []
        for j, i in enumerate(active):
            draft_text, draft_ids = proposal[j]
            meters["draft"].call(i, prefix_len[j], len(draft_ids), keep=bool(keep[j]))
            meters["prm"].call(i, prefix_len[j] + len(draft_ids) + 1, 0)  # reads prefix, step and a query token
            meters["prm"].cached[i] = prefix_len[j] + (len(draft_ids) if keep[j] else 0)  # the query is not kept
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
            if not _ends_solution(ids, tokenizer) and written[i] < MAX_NEW_TOKENS:
                still.append(i)
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


# ------------------------------------------------------------------------------------- parallel decoding baseline


def best_of_n(draft: zoo.ZooModel, problems: Sequence[arithmetic.Problem], prm, n: int, temperature: float,
              seed: int) -> dict:
    """Draft best-of-N: N sampled solutions per problem, the one with the highest minimum step reward wins.
    Returns accuracy and total FLOPs (draft + PRM) for every N' = 1..n (the first N' samples)."""
    samples, sample_flops = [], []
    for k in range(n):
        d = decode_single(draft.model, draft.tokenizer, problems, role="draft", temperature=temperature,
                          generator=torch_generator(seed, "best-of-n", k))
        samples.append(d.completions)
        sample_flops.append(d.total_flops)
    scores = np.zeros((n, len(problems)))
    prm_flops = np.zeros(n)
    for k in range(n):
        rows, owner = ([], [], []), []
        for i, (p, sol) in enumerate(zip(problems, samples[k])):
            parts = arithmetic.split_steps(sol) or [""]
            for j, part in enumerate(parts):
                rows[0].append(p), rows[1].append("".join(parts[:j])), rows[2].append(part), owner.append(i)
            if prm.model is not None:  # one pass over the whole solution plus a query token after each step
                prm_flops[k] += flops.forward_flops(prm.model.config,
                                                    _ntok(draft.tokenizer, p.prompt + sol) + len(parts))
        r = np.asarray(prm.score(*rows), dtype=float)
        scores[k] = [r[np.asarray(owner) == i].min() for i in range(len(problems))]  # a chain's min step reward
    acc, cost = [], []
    for m in range(1, n + 1):
        pick = scores[:m].argmax(0)  # ties go to the earliest sample
        acc.append(float(np.mean([arithmetic.is_correct(p, samples[pick[i]][i]) for i, p in enumerate(problems)])))
        cost.append(float(sum(sample_flops[:m]) + prm_flops[:m].sum()))
    return {"n": list(range(1, n + 1)), "accuracy": acc, "flops": cost}


# ------------------------------------------------------------------------------ token-level speculative decoding


@torch.inference_mode()
def speculative_decode(draft: PreTrainedModel, target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                       prompt: str, gamma: int, max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """Classic speculative decoding under greedy decoding, one prompt (the plain reference): the draft proposes
    γ tokens, the target scores them in one pass, the longest prefix agreeing with the target's argmax is kept
    and the target adds its own next token. The output equals target-only greedy decoding token for token."""
    if gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma}")
    eos = tokenizer.eos_token_id
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out: list[int] = []
    rounds, accepted = 0, 0
    while len(out) < max_new_tokens and (not out or out[-1] != eos):
        ctx = torch.tensor([ids + out])
        prop: list[int] = []
        for _ in range(gamma):
            nxt = int(draft(input_ids=torch.tensor([ids + out + prop])).logits[0, -1].argmax())
            prop.append(nxt)
            if nxt == eos:
                break
        logits = target(input_ids=torch.cat([ctx, torch.tensor([prop])], 1)).logits[0, ctx.shape[1] - 1:]
        greedy = logits.argmax(-1).tolist()  # the target's choice after each proposed prefix
        a = 0
        while a < len(prop) and prop[a] == greedy[a]:
            a += 1
            if prop[a - 1] == eos:
                break
        out += prop[:a]
        if out[-1:] != [eos]:
            out.append(greedy[a])  # the target's own token: a correction, or a bonus after γ accepted
        rounds += 1
        accepted += a
    out = out[:max_new_tokens]
    return {"token_ids": out, "text": tokenizer.decode(out, skip_special_tokens=True), "rounds": rounds,
            "accepted": accepted}


@torch.inference_mode()
def speculative_cost(draft: PreTrainedModel, target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     problems: Sequence[arithmetic.Problem], target_ids: Sequence[Sequence[int]], gamma: int) -> dict:
    """The rounds and FLOPs of :func:`speculative_decode` for a whole batch, computed exactly without running it:
    under greedy decoding the output is the target's (`target_ids`), and a round accepts the run of positions
    where the draft's greedy choice on the target's own prefix equals the target's token (one teacher-forced
    draft pass gives them all). Each round costs γ draft tokens and a target pass over the γ proposals."""
    meters = {"draft": Meter.of(draft, len(problems)), "target": Meter.of(target, len(problems))}
    rounds = accepted = 0
    for i, (p, y) in enumerate(zip(problems, target_ids)):
        x = tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
        seq = torch.tensor([x + list(y)])
        guess = draft(input_ids=seq).logits[0, len(x) - 1:-1].argmax(-1).tolist()  # draft's pick for each y_j
        pos = 0
        while pos < len(y):
            a = 0
            while a < gamma and pos + a < len(y) and guess[pos + a] == y[pos + a]:
                a += 1
                if y[pos + a - 1] == tokenizer.eos_token_id:
                    break
            meters["draft"].call(i, len(x) + pos, gamma, keep=False)
            meters["draft"].cached[i] = len(x) + pos + a
            meters["target"].call(i, len(x) + pos, gamma, keep=False)
            meters["target"].cached[i] = len(x) + pos + a
            pos += a + (1 if pos + a < len(y) else 0)
            rounds += 1
            accepted += a
    return {"rounds": rounds, "accepted": accepted, "flops": {k: m.flops for k, m in meters.items()},
            "total_flops": sum(m.flops for m in meters.values())}


# --------------------------------------------------------------------------------------------- the experiment


def is_binary(prm) -> bool:
    """The oracle and its noisy copy only say 0 or 1: every δ in (0, 1] gives the same decisions."""
    return isinstance(prm, OraclePRM)


def sweep_deltas(prm, deltas: Sequence[float], delta: float, endpoints: bool = True) -> list[float]:
    """The thresholds worth running for `prm`: all of `deltas` for a graded PRM; for a 0/1 PRM only `delta`
    (every δ in (0, 1] decides alike). With `endpoints`, also δ <= 0 (accept all: draft-only) and δ > 1 (accept
    none); they decide the same for every PRM, so the experiment runs them once, with the oracle."""
    inner = [delta] if is_binary(prm) else [d for d in deltas if 0 < d <= 1]
    ends = [d for d in deltas if d <= 0 or d > 1] if endpoints else []
    return sorted(set(inner) | set(ends))


def generated_flops(d: Decoded, draft: PreTrainedModel, target: PreTrainedModel) -> float:
    """A coarser count some papers use: 2N per *written* token only (draft tokens kept or discarded, target
    tokens), ignoring the prefill of text the other model wrote and attention; PRM excluded."""
    n_d, n_t = flops.linear_params(draft.config), flops.linear_params(target.config)
    t = d.tokens
    return 2.0 * (n_d * (t["draft_accepted"] + t["draft_discarded"]) + n_t * t["target"])


def _summary(d: Decoded, problems, target_flops: float, models=None, target_generated=None) -> dict:
    extra = {}
    if models is not None:
        extra["generated_flop_ratio"] = generated_flops(d, *models) / target_generated
    return extra | {"accuracy": d.accuracy(problems), "flop_ratio": d.total_flops / target_flops,
            "flops": dict(d.flops), "acceptance_rate": d.acceptance_rate,
            "token_acceptance_rate": d.token_acceptance_rate, "target_calls": d.target_calls,
            "seconds": d.seconds, "n_tokens": sum(len(c) for c in d.completions)}


def reasoning_experiment(cfg, seed: int) -> dict:
    """Everything notebook 02 plots, for the draft/target pair of training seed `seed` on `cfg.n_test` held-out
    problems: RSD's δ sweep for each PRM, the single-model baselines, token-level speculative decoding, draft
    best-of-N, and random acceptance at the oracle RSD's acceptance rate. FLOPs are also given as a ratio to
    target-only decoding."""
    draft, target = zoo.get("arith-draft", cfg.scale, seed), zoo.get("arith-target", cfg.scale, seed)
    problems = reasoners.test_problems(cfg.n_test)
    base = {"draft": decode_single(draft.model, draft.tokenizer, problems, role="draft"),
            "target": decode_single(target.model, target.tokenizer, problems, role="target")}
    t_flops = base["target"].total_flops
    pair = (draft.model, target.model)
    t_gen = generated_flops(base["target"], *pair)
    summary = lambda d: _summary(d, problems, t_flops, pair, t_gen)  # noqa: E731
    out = {"seed": seed, "baselines": {k: summary(v) for k, v in base.items()}}
    target_ids = generate(target.model, target.tokenizer, [p.prompt for p in problems], MAX_NEW_TOKENS).token_ids
    sd = speculative_cost(draft.model, target.model, draft.tokenizer, problems, target_ids, cfg.gamma)
    out["baselines"]["speculative"] = {"accuracy": out["baselines"]["target"]["accuracy"],
                                       "flop_ratio": sd["total_flops"] / t_flops,
                                       "token_acceptance_rate": sd["accepted"] / max(1, sum(map(len, target_ids)))}
    prms = {"oracle": OraclePRM(), "noisy": NoisyOraclePRM(cfg.epsilon, seed),
            "learned": learned_prm(cfg.scale, seed)}
    out["prm_names"] = {k: p.name for k, p in prms.items()}
    out["sweep"] = {}
    for name, prm in prms.items():
        rows = []
        for delta in sweep_deltas(prm, cfg.deltas, cfg.delta, endpoints=name == "oracle"):
            d = decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems, prm,
                       threshold_rule(delta))
            rows.append({"delta": delta} | summary(d))
        out["sweep"][name] = rows
    oracle = next(r for r in out["sweep"]["oracle"] if r["delta"] == cfg.delta)
    rnd = decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems, prms["oracle"],
                 random_rule(oracle["acceptance_rate"], seed))
    out["random"] = summary(rnd)
    bon = best_of_n(draft, problems, prms["oracle"], cfg.bon_n, cfg.bon_temperature, seed)
    bon["flop_ratio"] = [f / t_flops for f in bon["flops"]]
    out["best_of_n"] = bon
    return out


def matched_best_of_n(bon: dict, flop_ratio: float) -> dict:
    """Best-of-N at the smallest N whose FLOPs reach `flop_ratio` (the largest N when none does)."""
    k = next((i for i, f in enumerate(bon["flop_ratio"]) if f >= flop_ratio), len(bon["n"]) - 1)
    return {"n": bon["n"][k], "accuracy": bon["accuracy"][k], "flop_ratio": bon["flop_ratio"][k],
            "reaches": bon["flop_ratio"][k] >= flop_ratio}


def claim_measurements(results: Sequence[dict], delta: float) -> dict[str, dict]:
    """The measured values each claim's test reads, aggregated over seeds (means; per-seed lists alongside)."""
    mean = lambda xs: float(np.mean(xs))  # noqa: E731
    oracle_deltas = [r["delta"] for r in results[0]["sweep"]["oracle"]]
    rsd_acc = [mean([res["sweep"]["oracle"][k]["accuracy"] for res in results]) for k in range(len(oracle_deltas))]
    rsd_flop = [mean([res["sweep"]["oracle"][k]["flop_ratio"] for res in results]) for k in range(len(oracle_deltas))]
    at = [next(r for r in res["sweep"]["oracle"] if r["delta"] == delta) for res in results]
    bon = [matched_best_of_n(res["best_of_n"], a["flop_ratio"]) for res, a in zip(results, at)]
    return {
        "efficiency": {"deltas": oracle_deltas, "rsd_accuracy": rsd_acc, "rsd_flop_ratio": rsd_flop,
                       "target_accuracy": mean([res["baselines"]["target"]["accuracy"] for res in results]),
                       "draft_accuracy": mean([res["baselines"]["draft"]["accuracy"] for res in results])},
        "beats_parallel": {"rsd_accuracy": mean([a["accuracy"] for a in at]),
                           "rsd_flop_ratio": mean([a["flop_ratio"] for a in at]),
                           "bon_accuracy": mean([b["accuracy"] for b in bon]), "bon_n": [b["n"] for b in bon],
                           "bon_flop_ratio": mean([b["flop_ratio"] for b in bon]),
                           "bon_reaches_rsd_flops": all(b["reaches"] for b in bon)},
        "threshold_matters": {"threshold_accuracy": [a["accuracy"] for a in at],
                              "random_accuracy": [res["random"]["accuracy"] for res in results],
                              "threshold_acceptance": [a["acceptance_rate"] for a in at],
                              "random_acceptance": [res["random"]["acceptance_rate"] for res in results],
                              "threshold_target_calls": [a["target_calls"] for a in at],
                              "random_target_calls": [res["random"]["target_calls"] for res in results]},
    }


# --- figures of the reasoning notebook -------------------------------------------------------------------------

PRM_MARKERS = {"oracle": "o", "noisy": "s", "learned": "^"}


def mean_sd(results: list[dict], get) -> tuple[float, float]:
    """Mean and standard deviation over seeds of one measurement `get(result)`."""
    v = np.array([get(r) for r in results], dtype=float)
    return float(v.mean()), float(v.std())


def _errorbar(ax, results, points, **kw):
    """Plot points given as (x getter, y getter) pairs with ± sd error bars over seeds on both axes."""
    xs = [mean_sd(results, gx) for gx, _ in points]
    ys = [mean_sd(results, gy) for _, gy in points]
    ax.errorbar([x[0] for x in xs], [y[0] for y in ys], xerr=[x[1] for x in xs], yerr=[y[1] for y in ys],
                capsize=3, **kw)


def plot_accuracy_vs_flops(results: list[dict], cfg):
    """Final-answer accuracy against total FLOPs (relative to target-only) for RSD with every PRM over δ, the
    single-model baselines, speculative decoding and draft best-of-N (mean ± sd over seeds)."""
    from .core import plot

    fig, ax = plot.subplots()
    sweep = results[0]["sweep"]
    for k, name in enumerate(sweep):
        points = [(lambda r, i=i: r["sweep"][name][i]["flop_ratio"], lambda r, i=i: r["sweep"][name][i]["accuracy"])
                  for i in range(len(sweep[name]))]
        _errorbar(ax, results, points, marker=PRM_MARKERS[name], color=plot.PALETTE[k],
                  label=f"RSD, {results[0]['prm_names'][name]}")
    for k, (base, label) in enumerate([("draft", "draft only"), ("target", "target only"),
                                       ("speculative", f"speculative decoding (γ={cfg.gamma})")]):
        _errorbar(ax, results, [(lambda r: r["baselines"][base]["flop_ratio"],
                                 lambda r: r["baselines"][base]["accuracy"])],
                  marker="D", ls="none", color=plot.PALETTE[3 + k], label=label)
    best_of_n = [(lambda r, i=i: r["best_of_n"]["flop_ratio"][i], lambda r, i=i: r["best_of_n"]["accuracy"][i])
                 for i in range(cfg.bon_n)]
    _errorbar(ax, results, best_of_n,
              marker="x", ls=":", color=plot.PALETTE[6], label=f"draft best-of-N (N=1..{cfg.bon_n}), oracle PRM")
    ax.axvline(0.6, color="grey", lw=0.8, ls="--")
    ax.set(title="Accuracy against compute", xlabel="total FLOPs / target-only FLOPs",
           ylabel=f"final-answer accuracy (mean ± sd, {len(results)} seeds)")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def plot_acceptance(results: list[dict]):
    """The share of draft steps accepted against the threshold δ, for every PRM (mean ± sd over seeds)."""
    from .core import plot

    fig, ax = plot.subplots()
    sweep = results[0]["sweep"]
    for k, name in enumerate(sweep):
        rate = [mean_sd(results, lambda r, i=i: r["sweep"][name][i]["acceptance_rate"])
                for i in range(len(sweep[name]))]
        ax.errorbar([r["delta"] for r in sweep[name]], [a[0] for a in rate], yerr=[a[1] for a in rate],
                    marker=PRM_MARKERS[name], capsize=3, color=plot.PALETTE[k], label=results[0]["prm_names"][name])
    ax.set(title="Draft steps accepted as the threshold rises", xlabel="threshold δ",
           ylabel="accepted draft steps / all draft steps")
    ax.legend()
    return fig
