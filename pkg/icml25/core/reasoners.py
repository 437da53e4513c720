"""The zoo's two arithmetic reasoners: a small "draft" and a larger "target" model, trained on the same
synthetic arithmetic (see `arithmetic`) with clearly different final-answer accuracy. The reasoning,
decoding and alignment chapters share them.

Their calibration is a declared design with preconditions (`CALIBRATION`), which the workbench chapter shows and
the chapters that need it (rsd) check: the draft costs at most 1/8 of the target's FLOPs per token and is right
on most single steps of the problems it was trained on; the target is strong but not perfect on the test mix, so
that a method mixing the two has both compute to save and accuracy to lose.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from . import arithmetic, flops, tinylm, zoo
from .claims import at_least, at_most
from .config import Config
from .generation import generate
from .train import lm_batches, lm_loss, train

N_TEST = 500
TEST_STREAM = "test"  # test problems come from a stream the training data never uses

_COMMON = dict(min_ops=1, max_ops=5, batch_size=64, lr=3e-3, arch={}, n_validation=200, eval_every=5, stop_at=None)
# The draft costs at most 1/8 of the target's FLOPs per token (the paper's Qwen2.5-Math 1.5B draft and 7B target
# differ by 4.7x, its 7B draft and 72B target by 10x). It is weaker the way small models are: it only ever saw
# chains of up to three operations, and is reliable on most steps of those. The target (96 wide, MLP 288) sees
# every chain length and stops training at the first validation that finds it right on 87% of the mix.
_TARGET_ARCH = dict(hidden_size=96, intermediate_size=288, num_attention_heads=4, num_key_value_heads=4)
DRAFT = {
    "smoke": dict(_COMMON, preset="nano", n_train=2000, steps=30, eval_every=10),
    "ci": dict(_COMMON, preset="tiny", max_ops=3, n_train=20000, steps=800, lr=1e-2, eval_every=160),
    "full": dict(_COMMON, preset="tiny", max_ops=3, n_train=50000, steps=2000, lr=1e-2, eval_every=400),
}
TARGET = {
    "smoke": dict(_COMMON, preset="micro", n_train=2000, steps=40),
    "ci": dict(_COMMON, preset="small", arch=_TARGET_ARCH, n_train=20000, steps=700, stop_at=0.87),
    "full": dict(_COMMON, preset="small", arch=_TARGET_ARCH, n_train=50000, steps=2000, stop_at=0.87),
}

#: the calibration the reasoning chapters rely on, as preconditions on `calibration(...)`'s measurements
COST_RATIO_MAX = 1 / 8
DRAFT_STEP_MIN = 0.7
TARGET_ACCURACY = (0.85, 0.95)
DRAFT_CHEAP = at_most("draft_cheap", "cost_ratio", COST_RATIO_MAX,
                      "the draft's FLOPs per token are at most 1/8 of the target's (each seed)")
DRAFT_STEPS = at_least("draft_steps", "draft_step_accuracy", DRAFT_STEP_MIN,
                       "the draft writes the right next step after a correct prefix on >= 70% of the steps of "
                       "held-out problems from its training mix (each seed)")
TARGET_STRONG = at_least("target_strong", "target_accuracy", TARGET_ACCURACY[0],
                         "the target is right on >= 85% of the test mix (each seed)")
TARGET_IMPERFECT = at_most("target_imperfect", "target_accuracy", TARGET_ACCURACY[1],
                           "the target is right on <= 95% of the test mix: there is accuracy to lose (each seed)")
CALIBRATION = (DRAFT_CHEAP, DRAFT_STEPS, TARGET_STRONG, TARGET_IMPERFECT)


def solve(model, tokenizer, problems: Sequence[arithmetic.Problem], temperature: float = 0.0,
          generator: torch.Generator | None = None, batch_size: int = 250) -> list[str]:
    """Each problem's full solution as the model writes it (greedy unless `temperature` > 0)."""
    out = []
    for i in range(0, len(problems), batch_size):
        chunk = problems[i:i + batch_size]
        out += generate(model, tokenizer, [p.prompt for p in chunk], max_new_tokens=48,
                        temperature=temperature, generator=generator).texts
    return out


def accuracy(model, tokenizer, problems: Sequence[arithmetic.Problem]) -> float:
    """Fraction of problems whose greedy solution ends in the right answer."""
    solutions = solve(model, tokenizer, problems)
    return sum(arithmetic.is_correct(p, s) for p, s in zip(problems, solutions)) / len(problems)


def step_accuracy(model, tokenizer, problems: Sequence[arithmetic.Problem]) -> float:
    """Single-step accuracy: over every step k of every problem, how often the model's greedy next step after
    the correct prefix (prompt + the first k correct steps) is exactly the correct step k."""
    prefixes, reference = [], []
    for p in problems:
        steps = p.steps()
        for k, s in enumerate(steps):
            prefixes.append(p.prompt + "".join(steps[:k]))
            reference.append(s)
    texts = generate(model, tokenizer, prefixes, max(map(len, reference)) + 1,
                     stop=(arithmetic.STEP_DELIMITER,)).texts
    return float(np.mean([t == r for t, r in zip(texts, reference, strict=True)]))


def cost_ratio(draft_config, target_config, n_tokens: int = 48) -> float:
    """The draft's FLOPs per token over the target's, for a sequence of `n_tokens` (a long solution)."""
    return flops.forward_flops(draft_config, n_tokens) / flops.forward_flops(target_config, n_tokens)


def accuracy_by_ops(model, tokenizer, problems: Sequence[arithmetic.Problem]) -> dict[int, float]:
    """Greedy final-answer accuracy by number of operations."""
    solutions = solve(model, tokenizer, problems)
    out = {}
    for k in sorted({p.n_steps for p in problems}):
        hits = [arithmetic.is_correct(p, s) for p, s in zip(problems, solutions) if p.n_steps == k]
        out[k] = sum(hits) / len(hits)
    return out


def calibration(scale: str, seed: int, problems: Sequence[arithmetic.Problem]) -> dict:
    """:func:`pair_calibration` of the zoo's draft/target pair of `seed`."""
    return pair_calibration(zoo.get("arith-draft", scale, seed), zoo.get("arith-target", scale, seed), scale,
                            problems)


def pair_calibration(draft, target, scale: str, problems: Sequence[arithmetic.Problem]) -> dict:
    """The measurements `CALIBRATION` reads for any draft/target pair (zoo models or not), on `problems` (the test
    mix): the cost ratio, the draft's single-step accuracy on the problems within the zoo draft's training mix (at
    most `DRAFT[scale]["max_ops"]` operations), both models' accuracy overall and by number of operations."""
    seen = [p for p in problems if p.n_steps <= DRAFT[scale]["max_ops"]]
    out = {"cost_ratio": cost_ratio(draft.model.config, target.model.config),
           "draft_step_accuracy": step_accuracy(draft.model, draft.tokenizer, seen),
           "target_step_accuracy": step_accuracy(target.model, target.tokenizer, problems)}
    for name, z in (("draft", draft), ("target", target)):
        by_ops = accuracy_by_ops(z.model, z.tokenizer, problems)
        counts = {k: sum(p.n_steps == k for p in problems) for k in by_ops}
        out[f"{name}_by_ops"] = by_ops
        out[f"{name}_accuracy"] = sum(by_ops[k] * counts[k] for k in by_ops) / len(problems)
    return out


def test_problems(n: int = N_TEST, seed: int = 0) -> list[arithmetic.Problem]:
    return arithmetic.sample_problems(n, seed, _COMMON["min_ops"], _COMMON["max_ops"], stream=TEST_STREAM)


class _Calibrated(Exception):
    """Raised by the validation hook when the model has reached its declared accuracy: training stops there."""


def _build(cfg: Config, seed: int):
    """Train a reasoner on `cfg.n_train` problems of `cfg.min_ops`..`cfg.max_ops` operations. With `cfg.stop_at`,
    training stops at the first validation (every `cfg.eval_every` steps, on problems of a stream neither training
    nor the test uses) whose accuracy reaches it: the declared way the target is made strong but not perfect
    (these models learn the task in a sudden jump whose timing varies by seed, so a fixed step count cannot)."""
    tokenizer = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model(cfg.preset, tokenizer, seed, **cfg.arch)
    problems = arithmetic.sample_problems(cfg.n_train, seed, cfg.min_ops, cfg.max_ops, stream="train")
    batches = lm_batches(tokenizer, [p.prompt for p in problems], [p.solution for p in problems],
                         cfg.batch_size, seed)
    validation = arithmetic.sample_problems(cfg.n_validation, seed, _COMMON["min_ops"], _COMMON["max_ops"],
                                            stream="validation")
    losses, evals = [], []

    def loss_fn(m, batch):
        loss = lm_loss(m, batch)
        losses.append(float(loss.detach()))
        return loss

    def validate(m):
        acc = accuracy(m, tokenizer, validation)
        evals.append((len(losses), acc))
        if cfg.stop_at is not None and acc >= cfg.stop_at:
            raise _Calibrated
        return acc

    try:
        train(model, batches, cfg.steps, lr=cfg.lr, loss_fn=loss_fn, eval_every=cfg.eval_every, eval_fn=validate,
              desc=f"{cfg.preset} (seed {seed})")
    except _Calibrated:
        model.eval()
    return model, tokenizer, {"losses": losses, "evals": evals, "stopped_at": len(losses)}


zoo.register("arith-draft", DRAFT)(_build)
zoo.register("arith-target", TARGET)(_build)
