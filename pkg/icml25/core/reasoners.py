"""The zoo's two arithmetic reasoners: a small "draft" and a larger "target" model, trained on the same
synthetic arithmetic (see `arithmetic`) with clearly different final-answer accuracy. The reasoning,
decoding and alignment chapters share them."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import arithmetic, tinylm, zoo
from .config import Config
from .generation import generate
from .train import lm_batches, train

N_TEST = 500
TEST_STREAM = "test"  # test problems come from a stream the training data never uses

_COMMON = dict(min_ops=1, max_ops=5, batch_size=64, lr=3e-3)
# The draft costs about a quarter of the target's FLOPs per token (the paper's Qwen2.5-Math 1.5B draft and 7B
# target differ by 4.7x). It is weaker the way small models are: it only ever saw chains of up to three
# operations, so it is reliable on short problems and fails on the four- and five-step ones the target has seen.
# (Limiting training steps instead is fragile: these models learn the task in a sudden jump whose timing varies.)
DRAFT = {
    "smoke": dict(_COMMON, preset="nano", n_train=2000, steps=30),
    "ci": dict(_COMMON, preset="tiny", max_ops=3, n_train=20000, steps=800, lr=1e-2),
    "full": dict(_COMMON, preset="tiny", max_ops=3, n_train=50000, steps=2000, lr=1e-2),
}
TARGET = {
    "smoke": dict(_COMMON, preset="micro", n_train=2000, steps=40),
    "ci": dict(_COMMON, preset="small", n_train=20000, steps=900),
    "full": dict(_COMMON, preset="base", n_train=50000, steps=3000),
}


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


def test_problems(n: int = N_TEST, seed: int = 0) -> list[arithmetic.Problem]:
    return arithmetic.sample_problems(n, seed, _COMMON["min_ops"], _COMMON["max_ops"], stream=TEST_STREAM)


def _build(cfg: Config, seed: int):
    tokenizer = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model(cfg.preset, tokenizer, seed)
    problems = arithmetic.sample_problems(cfg.n_train, seed, cfg.min_ops, cfg.max_ops, stream="train")
    batches = lm_batches(tokenizer, [p.prompt for p in problems], [p.solution for p in problems],
                         cfg.batch_size, seed)
    eval_set = test_problems(100, seed)
    result = train(model, batches, cfg.steps, lr=cfg.lr, eval_every=max(1, cfg.steps // 5),
                   eval_fn=lambda m: accuracy(m, tokenizer, eval_set), desc=f"{cfg.preset} (seed {seed})")
    return model, tokenizer, {"losses": result.losses, "evals": result.evals}


zoo.register("arith-draft", DRAFT)(_build)
zoo.register("arith-target", TARGET)(_build)
