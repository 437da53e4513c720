"""RSD's own draft/target pair (zoo entries `rsd-draft` and `rsd-target`): both trained on the whole 1-5-operation
mix, so the draft is weaker by capacity (a smaller model), not by never having seen long chains.

Both models are made as strong as declared by a stop rule that does not hang on where the sudden jump of these
models lands: validation is teacher-forced exact match (the share of validation problems whose whole solution is
each token's argmax given the correct prefix: one forward pass), every `eval_every` steps while it is more than
`fine_margin` below `stop_at` and every `fine_every` steps once it is within that margin; training stops at the
first validation reaching `stop_at`, so a jump overshoots by `fine_every` optimiser steps at most (one, for the
target, whose band is narrow). The draft is the smaller model
(at most 1/8 of the target's FLOPs per token) stopped at a lower mark. The calibration that follows
(`CALIBRATION`) is declared here and checked per seed on the test mix."""

from __future__ import annotations

import torch

from ..core import arithmetic, reasoners, tinylm, zoo
from ..core.claims import at_most, share_at_least
from ..core.generation import encode_completions
from ..core.train import lm_batches, lm_loss, train

_COMMON = dict(min_ops=1, max_ops=5, batch_size=64, n_validation=300, eval_every=10, fine_margin=0.1, fine_every=1,
               arch={})
# The draft's band (30-80% on the test mix) is wide and it climbs slowly, so it is validated on fewer problems every
# 10 steps with no finer phase; the target's band (85-95%) is narrow and it jumps, so it is validated after every
# step once within 0.1 of its mark. (Until the verdicts on seeds 200-207 both validated on 300 problems every 5 steps
# and every step within 0.25 of the mark: half the pair's training time went to validation.)
_DRAFT = dict(n_validation=150, fine_every=10)
_TARGET_ARCH = dict(hidden_size=96, intermediate_size=288, num_attention_heads=4, num_key_value_heads=4)
DRAFT = {
    "smoke": dict(_COMMON, preset="nano", n_train=2000, steps=30, lr=1e-2, stop_at=0.45),
    "ci": dict(_COMMON, **_DRAFT, preset="tiny", n_train=20000, steps=1200, lr=1e-2, stop_at=0.45),
    "full": dict(_COMMON, **_DRAFT, preset="tiny", n_train=50000, steps=3000, lr=1e-2, stop_at=0.45),
}
TARGET = {
    "smoke": dict(_COMMON, preset="micro", n_train=2000, steps=40, lr=3e-3, stop_at=0.86),
    "ci": dict(_COMMON, preset="small", arch=_TARGET_ARCH, n_train=20000, steps=700, lr=3e-3, stop_at=0.86),
    "full": dict(_COMMON, preset="small", arch=_TARGET_ARCH, n_train=50000, steps=2000, lr=3e-3, stop_at=0.86),
}

#: the calibration RSD's claims rely on, as preconditions on `pair_calibration`'s measurements
COST_RATIO_MAX = 1 / 8
DRAFT_ACCURACY = (0.3, 0.8)
TARGET_ACCURACY = (0.85, 0.95)
SHARE = 0.75  # the share of seeds a per-seed calibration rule must hold on
CALIBRATION = (
    at_most("draft_cheap", "cost_ratio", COST_RATIO_MAX,
            "the draft's FLOPs per token are at most 1/8 of the target's (each seed)"),
    share_at_least("draft_between", "draft_in_band", 1.0, SHARE,
                   f"the draft is right on {DRAFT_ACCURACY[0]:.0%}-{DRAFT_ACCURACY[1]:.0%} of the test mix (on at "
                   f"least {SHARE:.0%} of seeds): it has accuracy to gain from the target and steps worth keeping"),
    share_at_least("target_between", "target_in_band", 1.0, SHARE,
                   f"the target is right on {TARGET_ACCURACY[0]:.0%}-{TARGET_ACCURACY[1]:.0%} of the test mix (on "
                   f"at least {SHARE:.0%} of seeds): strong, with accuracy left to lose"),
)


def exact_match(model, tokenizer, problems) -> float:
    """Teacher-forced exact match: the share of `problems` whose every solution token (and the end token) is the
    model's argmax after the correct prefix. A greedy decode then writes the correct solution, so this is a lower
    bound on greedy accuracy that one forward pass computes."""
    batch = encode_completions(tokenizer, [p.prompt for p in problems], [p.solution for p in problems], add_eos=True)
    with torch.inference_mode():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    hit = (logits.argmax(-1) == batch["input_ids"][:, 1:]) | (batch["completion_mask"][:, 1:] == 0)
    return float(hit.all(-1).float().mean())


class _Calibrated(Exception):
    """Raised by the validation hook when the model reaches its declared exact match: training stops there."""


def _build(cfg, seed: int):
    """Train a reasoner on `cfg.n_train` problems of 1-5 operations until the first validation whose teacher-forced
    exact match on `cfg.n_validation` validation problems reaches `cfg.stop_at` (or `cfg.steps`), validating every
    step once within `cfg.fine_margin` of it."""
    tokenizer = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model(cfg.preset, tokenizer, seed, **cfg.arch)
    problems = arithmetic.sample_problems(cfg.n_train, seed, cfg.min_ops, cfg.max_ops, stream="train")
    batches = lm_batches(tokenizer, [p.prompt for p in problems], [p.solution for p in problems],
                         cfg.batch_size, seed)
    validation = arithmetic.sample_problems(cfg.n_validation, seed, cfg.min_ops, cfg.max_ops, stream="validation")
    losses, evals = [], []

    def loss_fn(m, batch):
        loss = lm_loss(m, batch)
        losses.append(float(loss.detach()))
        return loss

    def validate(m):
        near = bool(evals) and evals[-1][1] >= cfg.stop_at - cfg.fine_margin
        if len(losses) % (cfg.fine_every if near else cfg.eval_every):
            return float("nan")
        em = exact_match(m, tokenizer, validation)
        evals.append((len(losses), em))
        if em >= cfg.stop_at:
            raise _Calibrated
        return em

    try:
        train(model, batches, cfg.steps, lr=cfg.lr, loss_fn=loss_fn, eval_every=1, eval_fn=validate,
              desc=f"{cfg.preset} (seed {seed})")
    except _Calibrated:
        model.eval()
    return model, tokenizer, {"losses": losses, "evals": evals, "stopped_at": len(losses)}


zoo.register("rsd-draft", DRAFT)(_build)
zoo.register("rsd-target", TARGET)(_build)


def pair_calibration(draft, target, problems) -> dict:
    """What `CALIBRATION` reads for a draft/target pair (zoo models or any checkpoints) on `problems` (the test mix):
    the cost ratio; each model's single-step accuracy after correct prefixes, its accuracy overall and by number of
    operations; and whether each model's accuracy lies inside its declared band."""
    out = {"cost_ratio": reasoners.cost_ratio(draft.model.config, target.model.config)}
    for name, z in (("draft", draft), ("target", target)):
        by_ops = reasoners.accuracy_by_ops(z.model, z.tokenizer, problems)
        counts = {k: sum(p.n_steps == k for p in problems) for k in by_ops}
        out[f"{name}_step_accuracy"] = reasoners.step_accuracy(z.model, z.tokenizer, problems)
        out[f"{name}_by_ops"] = by_ops
        out[f"{name}_accuracy"] = sum(by_ops[k] * counts[k] for k in by_ops) / len(problems)
    (d_lo, d_hi), (t_lo, t_hi) = DRAFT_ACCURACY, TARGET_ACCURACY
    return out | {"draft_in_band": float(d_lo <= out["draft_accuracy"] <= d_hi),
                  "target_in_band": float(t_lo <= out["target_accuracy"] <= t_hi)}
