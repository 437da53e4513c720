"""The claims (fixed before any run) and the paired statistics they take: one value per seed; within a seed every
format starts from the same weights and sees the same token stream, so the differences are paired."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..core.claims import Claim, Effect, Precondition, at_least, share_at_least
from .experiment import LATE_SHARE, Run, checkpoints, find_run
from .fit import HeldOutFit, predict


# --------------------------------------------------------------------------------------------------------------
# Paired statistics (one value per seed)
# --------------------------------------------------------------------------------------------------------------


def penalty(runs: Sequence[Run], seeds, E, M, B) -> list[float]:
    """Per seed: late held-out loss (`Run.late`) of ExMy at block B minus that of full precision (same seed)."""
    return [find_run(runs, s, E, M, B).late - find_run(runs, s).late for s in seeds]


def block_slope(runs: Sequence[Run], seeds, E, M, b_small, b_large) -> list[float]:
    """Per seed: the rise of the late loss (`Run.late`) per doubling of the block size, (L(B_large) - L(B_small)) /
    (log2 B_large - log2 B_small), at format ExMy (the law makes it linear in log2 B)."""
    span = math.log2(b_large) - math.log2(b_small)
    return [(find_run(runs, s, E, M, b_large).late - find_run(runs, s, E, M, b_small).late) / span
            for s in seeds]


def late_slope(run: Run, from_share: float) -> float:
    """Least-squares slope of held-out loss against log2 D over the checkpoints with D >= `from_share` of the
    last: positive once more data raises the loss (past the critical data size)."""
    D, loss = np.array(run.D, float), np.array(run.loss)
    keep = D >= from_share * D[-1] - 1e-9
    return float(np.polyfit(np.log2(D[keep]), loss[keep], 1)[0])


def law_late_slope(fit: HeldOutFit, run: Run, from_share: float) -> float:
    """`late_slope` of the loss that the law fitted without `run` (`fit_held_out`) predicts for it at its
    checkpoints: positive only where the fitted D_crit lies early enough in the run for the law itself to predict
    a rising loss over that late window (at D_crit the law's loss is lowest, so up to it the law predicts a fall)."""
    E, M, B = (np.full(len(run.D), np.nan if v is None else v, float) for v in (run.spec.E, run.spec.M, run.spec.B))
    return late_slope(replace(run, loss=tuple(predict(fit.law, np.full(len(run.D), run.N), run.D, E, M, B))),
                      from_share)


def law_rise_steps(fit: HeldOutFit, run: Run, tokens_per_step: int, n_checkpoints: int,
                   from_share: float) -> int | None:
    """The fewest training steps after which `law_late_slope` is >= 0 for a run of `run`'s format trained that
    long (checkpoints as `checkpoints` places them): the training `law_predicts_rise` needs on this seed, were the
    fitted D_crit to stay where it is (None if the fitted law has none, or predicts no rise within 2^30 steps).
    The late slope grows with the steps (the late window moves past D_crit), so it is found by doubling, then
    bisection."""
    if not math.isfinite(fit.dcrit):
        return None

    def rises(steps: int) -> bool:
        D = tuple(s * tokens_per_step for s in checkpoints(steps, n_checkpoints))
        return law_late_slope(fit, replace(run, D=D, loss=(0.0,) * len(D)), from_share) >= 0

    low = high = max(1, run.D[-1] // tokens_per_step)
    while not rises(high):
        if high > 2 ** 30:
            return None
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if rises(middle) else (middle, high)
    return low if rises(low) else high


def steps_past_dcrit(fit: HeldOutFit, tokens_per_step: int) -> int | None:
    """The fewest training steps whose late half (the checkpoints from `LATE_SHARE` of the tokens on) lies wholly
    past the fitted D_crit: the length that tests the rise with room (None if the fitted law has none)."""
    return math.ceil(fit.dcrit / LATE_SHARE / tokens_per_step) if math.isfinite(fit.dcrit) else None


def steps_for_share(steps_per_seed: Sequence[int | None], share: float) -> int | None:
    """The fewest steps at which at least `share` of the seeds reach their own `steps_per_seed` (None counts as
    never); None if no length does."""
    need = math.ceil(share * len(steps_per_seed) - 1e-9)
    reached = sorted(s for s in steps_per_seed if s is not None)
    return reached[need - 1] if 0 < need <= len(reached) else None


def loss_minimum(run: Run) -> int:
    """D (tokens) of the checkpoint with the lowest held-out loss."""
    return int(run.D[int(np.argmin(run.loss))])


# --------------------------------------------------------------------------------------------------------------
# Claims (fixed before any run). Every effect takes one value per seed; within a seed every format starts
# from the same weights and sees the same token stream, so the differences are paired.
# --------------------------------------------------------------------------------------------------------------


def penalty_resolution(m) -> float:
    """The low-precision penalty's mean over seeds in units of its standard deviation over seeds."""
    p = np.asarray(m["penalty"], float)
    return float(p.mean() / p.std(ddof=1)) if len(p) > 1 and p.std(ddof=1) > 0 else 0.0


RESOLUTION_BAR = 3  # `penalty_resolved`: the penalty's mean over seeds in units of its sd must reach this
RESOLVED = Precondition("penalty_resolved",
                        "the low-precision penalty over full precision (paired per seed) is >= 3 times its sd "
                        "over seeds (mean / sd)", penalty_resolution, lambda v: v >= RESOLUTION_BAR)
FP_LEARNS = Precondition("fp_learns",
                         "full precision beats the unigram entropy by >= 0.1 nats on every seed (it uses the "
                         "previous token)", lambda m: float(np.min(m["fp_gain"])), lambda v: v >= 0.1)

BLOCKS_FILL_WEIGHTS = at_least("blocks_fill_weights", "weight_elements_over_block", 1.0,
                               "the smallest quantised weight matrix holds at least as many elements as the larger "
                               "block size (weight elements / B >= 1), so that B varies for W and W_bwd too, not only "
                               "for X_bwd")

_RESOLVED_OK = {"penalty": [0.04, 0.045, 0.05], "fp_gain": [0.3, 0.3, 0.3]}
_BLOCKS_OK = {**_RESOLVED_OK, "weight_elements_over_block": 2.0}

BLOCK_SIZE = Claim(
    chapter="fp_quant_scaling", id="block_size",
    paper_statement="At a fixed format the loss rises linearly with log2 of the block size B",
    paper_value="loss linear in log2 B with positive slope (Fig. 5)",
    criterion="At E2M1, the per-seed rise of the late held-out loss (mean over the second half's checkpoints) "
              "per doubling of B (from B = 16 to 1024) "
              "is above 0 (95% t interval)",
    effects=[Effect("loss_rise_per_doubling_of_B", "block_slope")],
    preconditions=[RESOLVED, FP_LEARNS, BLOCKS_FILL_WEIGHTS],
    examples=({**_BLOCKS_OK, "block_slope": [0.005, 0.006, 0.0055]},
              {**_BLOCKS_OK, "block_slope": [-0.002, 0.0, -0.001]}),
)

EXPONENT_BITS = Claim(
    chapter="fp_quant_scaling", id="exponent_bits",
    paper_statement="Exponent bits contribute slightly more to the loss than mantissa bits (delta > nu), so at "
                    "4 bits the best format is E2M1, not the mantissa-heavy E1M2",
    paper_value="delta = 3.19 > nu = 2.95; E2M1 best at 4 bits",
    criterion="At B = 1024, the per-seed late loss of E1M2 minus that of E2M1 is above 0 (95% t interval). "
              "In this convention E1M2's grid is uniform (0 to 3.5 in steps of 0.5, like INT4), so this is a "
              "float grid against an integer-like one",
    effects=[Effect("e1m2_minus_e2m1_loss", "e1m2_minus_e2m1")],
    preconditions=[RESOLVED, FP_LEARNS],
    examples=({**_RESOLVED_OK, "e1m2_minus_e2m1": [0.01, 0.012, 0.011]},
              {**_RESOLVED_OK, "e1m2_minus_e2m1": [-0.01, -0.012, -0.011]}),
)

FIT = Claim(
    chapter="fp_quant_scaling", id="fit",
    paper_statement="The unified law fits the runs and predicts runs it was not fitted on",
    paper_value="fits 41M-679M; validated at 1.2B, 7B, 70B",
    criterion="Per seed, each E2M1 run (B = 16, then B = 1024) is left out and the law (alpha, beta fixed) is "
              "fitted to every checkpoint of the seed's other three runs; R^2 of the predicted penalty of the "
              "left-out run over full precision at its checkpoints, averaged over the two, is above 0 (95% t "
              "interval; refuted below 0.5)",
    effects=[Effect("r2_on_held_out_runs", "r2_held_out", min_effect=0.5)],
    preconditions=[RESOLVED, FP_LEARNS],
    examples=({**_RESOLVED_OK, "r2_held_out": [0.8, 0.85, 0.9]},
              {**_RESOLVED_OK, "r2_held_out": [-1.0, -0.5, -0.8]}),
)

RISE_SHARE = 2 / 3  # `law_predicts_rise`: the share of seeds on which the fitted law must predict the rise

CRITICAL_DATA = Claim(
    chapter="fp_quant_scaling", id="critical_data",
    paper_statement="A low-precision run has a critical data size: past it, more training tokens raise the loss",
    paper_value="D_crit = [d gamma N^alpha (E+0.5)^delta (M+0.5)^nu / log2 B]^(1/(2 beta)); 0.4T tokens for "
                "a 1B model in E2M1 at B = 128",
    criterion="At E2M1, B = 1024, the per-seed slope of held-out loss against log2 D over the second half of "
              "training is above 0 (95% t interval), and above full precision's slope on the same seed. "
              "Judged only where the law fitted to the seed's other three runs (this one left out) puts D_crit "
              "early enough in the run that the law itself predicts a rising loss over that second half",
    effects=[Effect("late_loss_slope_low_precision", "late_slope_low"),
             Effect("late_slope_low_minus_fp", "late_slope_gap")],
    preconditions=[RESOLVED, FP_LEARNS,
                   share_at_least("law_predicts_rise", "law_late_slope_low", 0.0, RISE_SHARE,
                                  "the law fitted without this run predicts a late slope >= 0 for it (its D_crit lies "
                                  "early enough for the law itself to predict the rise) on >= 2/3 of seeds")],
    examples=({**_RESOLVED_OK, "law_late_slope_low": [0.01, 0.02, 0.01], "late_slope_low": [0.01, 0.012, 0.011],
               "late_slope_gap": [0.02, 0.021, 0.019]},
              {**_RESOLVED_OK, "law_late_slope_low": [0.01, 0.02, 0.01], "late_slope_low": [-0.02, -0.021, -0.019],
               "late_slope_gap": [0.0, 0.001, -0.001]}),
)

#: A no-stake referee's re-decision of every claim on fresh seeds 400-408 (after the ci verdicts on 300-308 were
#: recorded; nothing in the design changed after it), with only the seeds changed, at the chapter's `long_steps`
#: and at the next length of the calibration grid (815); transcribed from its report. Each effect is the paired 95%
#: t interval over the 9 seeds. On these seeds `penalty_resolved` fails, so every label is inconclusive, while the
#: effects point the way they did on 300-308. `law_true_r2`: the same pipeline (`fit_held_out`, the claim's R^2) on
#: synthetic runs where the law holds exactly (the paper's alpha and beta, E2M1 B = 1024's D_crit at a multiple of
#: the run, the measured checkpoint noise), keyed by D_crit over the tokens trained: where the law's penalty barely
#: varies over the run, a true law's R^2 falls short of `fit`'s bar 0.5.
REFEREE_400 = {
    "seeds": "400-408",
    "verdict_seeds": "300-308",
    "penalty_resolution_verdict_seeds": 5.89,
    "runs": {
        685: {"penalty_resolution": 2.477, "labels": {"critical_data": "inconclusive", "fit": "inconclusive",
                                                      "block_size": "inconclusive", "exponent_bits": "inconclusive"},
              "late_slope_low": (-0.0294, -0.0438, -0.0150), "late_slope_low_negative": 9,
              "late_slope_gap": (-0.0142, -0.0313, +0.0029), "law_predicts_rise": 9,
              "r2_held_out": (-18.20, -27.58, -8.83)},
        815: {"penalty_resolution": 2.785, "labels": {"critical_data": "inconclusive", "fit": "inconclusive",
                                                      "block_size": "inconclusive", "exponent_bits": "inconclusive"},
              "late_slope_low": (-0.0196, -0.0294, -0.0098), "late_slope_low_negative": 8,
              "late_slope_gap": (-0.0032, -0.0134, +0.0070), "law_predicts_rise": 8,
              "r2_held_out": (-28.91, -40.34, -17.48)},
    },
    "law_true_r2": {1.0: (0.45, 0.29, 0.62), 3.0: (0.05, -0.11, 0.21)},
}


def referee_sentence(record: dict, long_steps: int) -> str:
    """What `REFEREE_400` says of `critical_data` and `fit`, in words (markdown)."""
    rows = record["runs"]
    parts = []
    for steps, r in sorted(rows.items()):
        lo = r["late_slope_low"]
        parts.append(f"at {steps} steps{' (this chapter’s length)' if steps == long_steps else ''} "
                     f"`penalty_resolved` read {r['penalty_resolution']:.2f} against {RESOLUTION_BAR}, so "
                     f"critical_data was {r['labels']['critical_data']} and fit {r['labels']['fit']}; E2M1's "
                     f"late slope was {lo[0]:+.4f} [{lo[1]:+.4f}, {lo[2]:+.4f}] (negative on {r['late_slope_low_negative']} of 9 seeds, the law predicting "
                     f"the rise on {r['law_predicts_rise']}), and the held-out R² {r['r2_held_out'][0]:.2f} "
                     f"[{r['r2_held_out'][1]:.2f}, {r['r2_held_out'][2]:.2f}]")
    true_r2 = "; ".join(f"{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}] with D_crit at {k:g} times the run"
                        for k, r in sorted(record["law_true_r2"].items()))
    return (f"**A referee's re-decision on fresh seeds {record['seeds']}** (only the seeds changed; recorded after "
            f"the verdicts on {record['verdict_seeds']}, where `penalty_resolved` read "
            f"{record['penalty_resolution_verdict_seeds']:.2f}): " + "; ".join(parts) + ". So the labels above "
            "turn on the seeds drawn: the penalty's resolution sits near its bar, and on another nine seeds the "
            "shared precondition holds the claims back, while the direction of both effects repeats. The fit's "
            "bar is also strict for this regime: on synthetic runs where the law holds exactly, the same pipeline "
            f"gives R² {true_r2}, short of {FIT.effects[0].min_effect:g}, because the law's penalty barely "
            "varies over a run this short. The measured R² lies far below anything a true law gave there.")
