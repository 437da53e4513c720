"""RSD's own draft/target pair (zoo entries `rsd-draft` and `rsd-target`): both trained on the whole 1-5-operation
mix, so the draft is weaker by capacity (a smaller model), not by never having seen long chains.

Both models are made as strong as declared by a stop rule that does not hang on where the sudden jump of these
models lands: validation is teacher-forced exact match (the share of validation problems whose whole solution is
each token's argmax given the correct prefix: one forward pass), every `eval_every` steps while it is more than
`fine_margin` below `stop_at` and every `fine_every` steps once it is within that margin; training stops at the
first validation at which the mean of the last `window` validations reaches `stop_at` (or at the cap `steps`), so
a jump overshoots by `fine_every` optimiser steps at most (one, for the target, whose band is narrow), and one lucky
validation alone does not stop the target. The draft is the smaller model (at most 1/8 of the target's FLOPs per
token) stopped at a lower mark. The calibration that follows (`CALIBRATION`) is declared here and checked per seed
on the test mix; how the stop rules were chosen is `PAIR_CALIBRATION`."""

from __future__ import annotations

import torch

from ..core import arithmetic, reasoners, tinylm, zoo
from ..core.claims import at_most, share_at_least
from ..core.generation import encode_completions
from ..core.train import lm_batches, lm_loss, train

_COMMON = dict(min_ops=1, max_ops=5, batch_size=64, n_validation=300, eval_every=10, fine_margin=0.1, fine_every=1,
               window=1, arch={})
# The draft's band (30-80% on the test mix) is wide and it climbs slowly, so it is validated on fewer problems every
# 10 steps with no finer phase; the target's band (85-95%) is narrow and it jumps, so it is validated after every
# step once within 0.1 of its mark. (Until the verdicts on seeds 200-207 both validated on 300 problems every 5 steps
# and every step within 0.25 of the mark: half the pair's training time went to validation.)
_DRAFT = dict(n_validation=150, fine_every=10)
# The target stops when the mean of its last three validations reaches 0.87 (one validation reaching 0.86 until the
# verdicts on seeds 2800-2807; `PAIR_CALIBRATION`).
_TARGET = dict(stop_at=0.87, window=3)
_TARGET_ARCH = dict(hidden_size=96, intermediate_size=288, num_attention_heads=4, num_key_value_heads=4)
DRAFT = {
    "smoke": dict(_COMMON, preset="nano", n_train=2000, steps=30, lr=1e-2, stop_at=0.45),
    "ci": dict(_COMMON, **_DRAFT, preset="tiny", n_train=20000, steps=2400, lr=1e-2, stop_at=0.45),
    "full": dict(_COMMON, **_DRAFT, preset="tiny", n_train=50000, steps=6000, lr=1e-2, stop_at=0.45),
}
TARGET = {
    "smoke": dict(_COMMON, preset="micro", n_train=2000, steps=40, lr=3e-3, stop_at=0.86),
    "ci": dict(_COMMON, **_TARGET, preset="small", arch=_TARGET_ARCH, n_train=20000, steps=700, lr=3e-3),
    "full": dict(_COMMON, **_TARGET, preset="small", arch=_TARGET_ARCH, n_train=50000, steps=2000, lr=3e-3),
}

# How the stop rules were chosen (issue 50). On verdict seeds 2800-2807 every claim was inconclusive because the draft
# was inside its band on 5 of 8 seeds: it ran into its step cap (1200 steps) on 4 of them, the last validation's
# exact match 0.03-0.34, three of the four below the band; the target, inside its band on 7, had stopped on one
# validation at 0.877 and was right on 0.81 of the test. Measured on calibration seeds only (0-4, the chapter's, and
# 10-19, which no verdict has used), before any verdict seed of the new rules ran, training each model once per
# (cap, lr, seed) and reading each stop rule on the same run (training does not depend on when it is validated): per
# seed, the step where the rule stopped (the cap when the mark was never reached), the last validation's exact match
# there, greedy accuracy on the seed's 200 test problems (what the band reads) and the training seconds to that step
# (one thread, two runs at once on a shared 2-core machine: rough, and slower than a run alone). The old draft ran
# into its cap on 3 of 5 seeds; with the cap doubled (the cosine schedule stretched with it) it reaches its mark on
# all 15, where lr 0.02 ran into the cap on one of four. Every draft rule tried on those runs landed all 15 seeds
# in the band with at least 0.1 to spare, so the old rule is kept. The target's old rule landed 4 of 15 seeds below
# its band; its rule was chosen by the most seeds in the band, then the mean landing closest to the band's centre,
# then the fewest seconds. Each entry: `before` (the rule until the verdicts on 2800-2807) and runs[seed] =
# (stopped_at, exact match, test accuracy, seconds).
PAIR_CALIBRATION = (
    {"model": "draft", "before": True, "steps": 1200, "lr": 0.01, "stop_at": 0.45, "window": 1, "n_validation": 150,
     "runs": {0: (1200, 0.4, 0.565, 38.6), 1: (1200, 0.4, 0.465, 38.1), 2: (1200, 0.267, 0.45, 38.2),
              3: (720, 0.46, 0.515, 23.0), 4: (840, 0.453, 0.535, 25.7)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.02, "stop_at": 0.45, "window": 1, "n_validation": 150,
     "runs": {0: (1160, 0.453, 0.805, 53.0), 1: (1700, 0.46, 0.56, 66.3), 2: (1890, 0.46, 0.6, 73.6),
              3: (2400, 0.307, 0.415, 95.8)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.01, "stop_at": 0.45, "window": 1, "n_validation": 150,
     "runs": {0: (1140, 0.467, 0.635, 51.8), 1: (1620, 0.48, 0.52, 62.8), 2: (1280, 0.52, 0.555, 48.9),
              3: (920, 0.507, 0.46, 40.0), 4: (1020, 0.453, 0.58, 41.2), 10: (720, 0.453, 0.525, 28.1),
              11: (460, 0.52, 0.485, 17.7), 12: (1140, 0.493, 0.57, 44.8), 13: (590, 0.533, 0.6, 25.6),
              14: (780, 0.473, 0.53, 29.2), 15: (1040, 0.453, 0.585, 50.4), 16: (1030, 0.507, 0.545, 43.9),
              17: (630, 0.473, 0.62, 24.8), 18: (730, 0.487, 0.565, 28.7), 19: (730, 0.487, 0.57, 28.6)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.01, "stop_at": 0.45, "window": 3, "n_validation": 150,
     "runs": {0: (1190, 0.533, 0.7, 53.8), 1: (1630, 0.467, 0.51, 63.1), 2: (1290, 0.46, 0.58, 49.3),
              3: (970, 0.5, 0.565, 41.9), 4: (1040, 0.447, 0.575, 41.9), 10: (740, 0.52, 0.575, 28.9),
              11: (470, 0.56, 0.56, 18.1), 12: (1150, 0.46, 0.585, 45.1), 13: (610, 0.467, 0.57, 26.3),
              14: (790, 0.48, 0.58, 29.5), 15: (1120, 0.493, 0.555, 53.1), 16: (1040, 0.507, 0.545, 44.3),
              17: (650, 0.547, 0.63, 25.6), 18: (730, 0.487, 0.565, 28.7), 19: (740, 0.493, 0.615, 29.0)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.01, "stop_at": 0.45, "window": 1, "n_validation": 300,
     "runs": {0: (1180, 0.52, 0.7, 53.5), 1: (1620, 0.477, 0.52, 62.8), 2: (1280, 0.46, 0.555, 49.0),
              3: (950, 0.477, 0.48, 41.2), 4: (1030, 0.457, 0.58, 41.6), 10: (720, 0.487, 0.525, 28.1),
              11: (460, 0.467, 0.485, 17.8), 12: (1090, 0.48, 0.555, 43.1), 13: (590, 0.493, 0.6, 25.7),
              14: (780, 0.47, 0.53, 29.2), 15: (970, 0.453, 0.52, 47.8), 16: (1040, 0.513, 0.545, 44.3),
              17: (630, 0.473, 0.62, 24.9), 18: (710, 0.507, 0.57, 28.1), 19: (720, 0.467, 0.545, 28.3)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.01, "stop_at": 0.4, "window": 1, "n_validation": 300,
     "runs": {0: (1130, 0.43, 0.575, 51.4), 1: (1470, 0.417, 0.465, 57.3), 2: (1240, 0.41, 0.495, 47.4),
              3: (910, 0.4, 0.485, 39.7), 4: (1020, 0.413, 0.58, 41.3), 10: (720, 0.487, 0.525, 28.1),
              11: (460, 0.467, 0.485, 17.8), 12: (1020, 0.407, 0.52, 40.5), 13: (570, 0.43, 0.525, 24.8),
              14: (710, 0.417, 0.51, 26.7), 15: (930, 0.42, 0.575, 46.3), 16: (1030, 0.443, 0.545, 44.0),
              17: (580, 0.407, 0.55, 22.9), 18: (680, 0.443, 0.485, 26.9), 19: (720, 0.467, 0.545, 28.3)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.01, "stop_at": 0.5, "window": 1, "n_validation": 150,
     "runs": {0: (1180, 0.507, 0.7, 53.5), 1: (1710, 0.52, 0.605, 65.8), 2: (1280, 0.52, 0.555, 49.0),
              3: (920, 0.507, 0.46, 40.1), 4: (1110, 0.527, 0.65, 44.5), 10: (740, 0.52, 0.575, 28.9),
              11: (460, 0.52, 0.485, 17.8), 12: (1170, 0.507, 0.6, 45.7), 13: (590, 0.533, 0.6, 25.7),
              14: (840, 0.513, 0.585, 31.0), 15: (1150, 0.5, 0.54, 54.0), 16: (1030, 0.507, 0.545, 44.0),
              17: (650, 0.547, 0.63, 25.6), 18: (750, 0.567, 0.695, 29.4), 19: (750, 0.547, 0.63, 29.3)}},
    {"model": "draft", "before": False, "steps": 2400, "lr": 0.01, "stop_at": 0.45, "window": 3, "n_validation": 300,
     "runs": {0: (1190, 0.523, 0.7, 53.9), 1: (1630, 0.44, 0.51, 63.2), 2: (1300, 0.473, 0.555, 49.7),
              3: (960, 0.55, 0.58, 41.6), 4: (1090, 0.497, 0.605, 43.9), 10: (740, 0.53, 0.575, 29.0),
              11: (470, 0.537, 0.56, 18.2), 12: (1110, 0.47, 0.53, 43.9), 13: (610, 0.54, 0.57, 26.4),
              14: (790, 0.473, 0.58, 29.6), 15: (1050, 0.457, 0.57, 50.8), 16: (1040, 0.513, 0.545, 44.3),
              17: (650, 0.52, 0.63, 25.7), 18: (720, 0.503, 0.56, 28.4), 19: (740, 0.5, 0.615, 29.0)}},
    {"model": "target", "before": True, "steps": 700, "lr": 0.003, "stop_at": 0.86, "window": 1, "n_validation": 300,
     "runs": {0: (375, 0.877, 0.875, 76.1), 1: (392, 0.863, 0.835, 83.7), 2: (406, 0.86, 0.91, 74.2),
              3: (369, 0.88, 0.86, 66.1), 4: (300, 0.883, 0.865, 51.4), 10: (384, 0.88, 0.835, 62.2),
              11: (390, 0.917, 0.94, 69.3), 12: (389, 0.86, 0.9, 68.2), 13: (450, 0.873, 0.895, 82.8),
              14: (432, 0.867, 0.845, 69.9), 15: (427, 0.87, 0.865, 81.6), 16: (362, 0.87, 0.84, 66.4),
              17: (375, 0.863, 0.87, 64.1), 18: (355, 0.873, 0.885, 58.9), 19: (402, 0.883, 0.865, 71.7)}},
    {"model": "target", "before": False, "steps": 700, "lr": 0.003, "stop_at": 0.88, "window": 1, "n_validation": 300,
     "runs": {0: (385, 0.89, 0.92, 80.0), 1: (399, 0.9, 0.925, 89.2), 2: (412, 0.89, 0.935, 76.5),
              3: (370, 0.893, 0.88, 66.4), 4: (300, 0.883, 0.865, 51.4), 10: (389, 0.883, 0.845, 63.8),
              11: (390, 0.917, 0.94, 69.3), 12: (395, 0.91, 0.95, 70.0), 13: (451, 0.883, 0.89, 83.5),
              14: (440, 0.9, 0.885, 76.2), 15: (451, 0.89, 0.93, 88.6), 16: (366, 0.897, 0.845, 69.3),
              17: (381, 0.883, 0.855, 69.0), 18: (356, 0.887, 0.89, 59.2), 19: (402, 0.883, 0.865, 71.7)}},
    {"model": "target", "before": False, "steps": 700, "lr": 0.003, "stop_at": 0.86, "window": 3, "n_validation": 300,
     "runs": {0: (386, 0.91, 0.94, 80.4), 1: (398, 0.88, 0.91, 88.4), 2: (411, 0.873, 0.915, 76.2),
              3: (370, 0.893, 0.88, 66.4), 4: (311, 0.923, 0.915, 55.4), 10: (386, 0.85, 0.78, 62.9),
              11: (392, 0.843, 0.915, 70.3), 12: (390, 0.87, 0.9, 68.5), 13: (451, 0.883, 0.89, 83.5),
              14: (434, 0.847, 0.855, 71.4), 15: (445, 0.873, 0.91, 86.9), 16: (364, 0.86, 0.825, 67.9),
              17: (376, 0.877, 0.895, 65.0), 18: (356, 0.887, 0.89, 59.2), 19: (404, 0.897, 0.885, 73.2)}},
    {"model": "target", "before": False, "steps": 700, "lr": 0.003, "stop_at": 0.87, "window": 3, "n_validation": 300,
     "runs": {0: (386, 0.91, 0.94, 80.4), 1: (398, 0.88, 0.91, 88.4), 2: (412, 0.89, 0.935, 76.5),
              3: (370, 0.893, 0.88, 66.4), 4: (312, 0.897, 0.91, 55.7), 10: (390, 0.9, 0.89, 64.2),
              11: (392, 0.843, 0.915, 70.3), 12: (395, 0.91, 0.95, 70.0), 13: (452, 0.867, 0.885, 83.8),
              14: (439, 0.88, 0.88, 75.9), 15: (451, 0.89, 0.93, 88.6), 16: (366, 0.897, 0.845, 69.3),
              17: (377, 0.88, 0.885, 65.8), 18: (356, 0.887, 0.89, 59.2), 19: (404, 0.897, 0.885, 73.2)}},
    {"model": "target", "before": False, "steps": 700, "lr": 0.003, "stop_at": 0.86, "window": 1, "n_validation": 600,
     "runs": {0: (370, 0.86, 0.86, 74.2), 1: (398, 0.872, 0.91, 88.9), 2: (406, 0.868, 0.91, 74.7),
              3: (365, 0.86, 0.845, 64.9), 4: (300, 0.877, 0.865, 51.9), 10: (390, 0.868, 0.89, 64.9),
              11: (390, 0.927, 0.94, 69.7), 12: (388, 0.867, 0.915, 67.9), 13: (450, 0.873, 0.895, 83.2),
              14: (438, 0.867, 0.875, 75.6), 15: (424, 0.87, 0.88, 80.7), 16: (369, 0.877, 0.83, 72.9),
              17: (385, 0.88, 0.92, 72.3), 18: (353, 0.862, 0.875, 58.3), 19: (403, 0.875, 0.89, 72.9)}},
    {"model": "target", "before": False, "steps": 700, "lr": 0.003, "stop_at": 0.88, "window": 2, "n_validation": 300,
     "runs": {0: (386, 0.91, 0.94, 80.4), 1: (399, 0.9, 0.925, 89.2), 2: (412, 0.89, 0.935, 76.5),
              3: (370, 0.893, 0.88, 66.4), 4: (311, 0.923, 0.915, 55.4), 10: (390, 0.9, 0.89, 64.9),
              11: (391, 0.897, 0.935, 70.0), 12: (395, 0.91, 0.95, 70.0), 13: (456, 0.9, 0.885, 84.9),
              14: (440, 0.9, 0.885, 76.2), 15: (451, 0.89, 0.93, 88.6), 16: (366, 0.897, 0.845, 70.1),
              17: (385, 0.9, 0.92, 72.6), 18: (357, 0.887, 0.915, 59.5), 19: (403, 0.887, 0.89, 72.9)}},
)

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
    """Train a reasoner on `cfg.n_train` problems of 1-5 operations until the mean teacher-forced exact match of the
    last `cfg.window` validations (each on the same `cfg.n_validation` validation problems) reaches `cfg.stop_at`,
    or for `cfg.steps` steps; validating every `cfg.eval_every` steps, every `cfg.fine_every` once the last
    validation is within `cfg.fine_margin` of the mark."""
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
        if len(evals) >= cfg.window and sum(e for _, e in evals[-cfg.window:]) / cfg.window >= cfg.stop_at:
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
