"""RSD's claims, declared before any experiment runs: one per PRM for efficiency and for parallel decoding, the
threshold against random acceptance for the PRMs whose threshold can be wrong, and the paper's optimality of the hard
threshold against soft weights at the same rate of target calls."""

from __future__ import annotations

from ..core import reasoners
from ..core.claims import Claim, Effect, at_least, at_most


# Declared before any experiment ran, one claim per PRM (the exact oracle, its noisy copy, the learned PRM), each
# at the official code's default threshold δ = 0.7: no δ is picked after the fact. One paired unit is one
# draft/target training seed. Every claim needs the reasoners' calibration (`reasoners.CALIBRATION`); the
# learned PRM's claims also need that PRM to have learned its task.

PRMS = ("oracle", "noisy", "learned")
GRADED = ("noisy", "learned")  # the PRMs whose threshold can be wrong: the oracle's keeps exactly the right steps
PRM_AUC_MIN = 0.8
ACCURACY_MARGIN = 0.02  # the non-inferiority margin of "at the target's accuracy", declared before any run
RATE_MATCH = 0.05  # random acceptance counts as "the same rate" when the two rates differ by at most this


def _pair_ok(**extra) -> dict:
    return {"cost_ratio": [0.1] * 3, "draft_step_accuracy": [0.85] * 3, "target_accuracy": [0.9] * 3,
            "prm_auc_noisy": [0.9] * 3, "prm_auc_learned": [0.9] * 3} | extra


def _preconditions(prm: str) -> list:
    pre = list(reasoners.CALIBRATION)
    if prm in GRADED:
        pre.append(at_least("prm_quality", f"prm_auc_{prm}", PRM_AUC_MIN,
                            f"the {prm} PRM separates right from wrong draft steps (ROC AUC >= {PRM_AUC_MIN} on "
                            "held-out draft rollouts, each seed): a PRM worse than that is not the paper's"))
    return pre


def _efficiency(prm: str) -> Claim:
    ok = _pair_ok()
    return Claim(
        chapter="rsd", id=f"efficiency_{prm}",
        paper_statement="RSD keeps the target model's accuracy with far fewer FLOPs than target-only decoding",
        paper_value="up to 4.4x fewer FLOPs, accuracy at or above the target's",
        criterion=f"With the {prm} PRM at δ = 0.7, per seed: total FLOPs of RSD / target-only below 1, both when "
                  "every token read and written is counted (prefill included) and when only written tokens are "
                  "(95% t intervals; refuted if wholly above 0.9), and RSD's accuracy minus the target's above "
                  f"-{ACCURACY_MARGIN:g} (non-inferiority, 95% t interval; refuted if wholly below)",
        effects=[Effect("flop_ratio", f"flop_ratio_{prm}", direction="less", null=1.0, min_effect=0.9),
                 Effect("generated_flop_ratio", f"generated_flop_ratio_{prm}", direction="less", null=1.0,
                        min_effect=0.9),
                 Effect("accuracy_gap", f"accuracy_gap_{prm}", null=-ACCURACY_MARGIN, min_effect=-ACCURACY_MARGIN)],
        preconditions=_preconditions(prm),
        examples=(ok | {f"flop_ratio_{prm}": [0.4, 0.45, 0.42], f"generated_flop_ratio_{prm}": [0.3, 0.32, 0.31],
                        f"accuracy_gap_{prm}": [0.01, 0.02, 0.015]},
                  ok | {f"flop_ratio_{prm}": [0.97, 0.99, 1.02], f"generated_flop_ratio_{prm}": [0.95, 0.96, 0.97],
                        f"accuracy_gap_{prm}": [0.01, 0.02, 0.015]}),
    )


def _beats_parallel(prm: str) -> Claim:
    ok = _pair_ok(**{f"bon_covers_{prm}": [0.2, 0.3, 0.1]})
    return Claim(
        chapter="rsd", id=f"beats_parallel_{prm}",
        paper_statement="At comparable compute, RSD is more accurate than parallel decoding (draft best-of-N "
                        "reranked by the PRM)",
        paper_value="up to +3.5 average accuracy",
        criterion=f"With the {prm} PRM at δ = 0.7, per seed: RSD's accuracy minus that of draft best-of-N reranked "
                  "by the same PRM (a chain's minimum step reward) at the smallest N whose FLOPs reach RSD's is "
                  "above 0 (95% t interval; refuted if wholly below)",
        effects=[Effect("rsd_minus_best_of_n", f"rsd_minus_bon_{prm}")],
        preconditions=[*_preconditions(prm),
                       at_least("best_of_n_reaches", f"bon_covers_{prm}", 0.0,
                                "the largest N of best-of-N costs at least RSD's FLOPs (each seed), so the match "
                                "is at equal or greater compute")],
        examples=(ok | {f"rsd_minus_bon_{prm}": [0.05, 0.04, 0.06]},
                  ok | {f"rsd_minus_bon_{prm}": [-0.05, -0.04, -0.06]}),
    )


def _threshold_matters(prm: str) -> Claim:
    ok = _pair_ok(**{f"rate_gap_{prm}": [0.01, 0.02, 0.0]})
    return Claim(
        chapter="rsd", id=f"threshold_matters_{prm}",
        paper_statement="Accepting draft steps by a reward threshold beats accepting them blindly at the same rate",
        paper_value="the threshold ω is optimal (theory)",
        criterion=f"With the {prm} PRM at δ = 0.7, per seed: RSD's accuracy minus that of random step acceptance "
                  "with probability equal to RSD's measured acceptance rate is above 0 (95% t interval; refuted "
                  "if wholly below)",
        effects=[Effect("threshold_minus_random", f"threshold_minus_random_{prm}")],
        preconditions=[*_preconditions(prm),
                       at_most("same_rate", f"rate_gap_{prm}", RATE_MATCH,
                               "random acceptance accepted the same share of draft steps as RSD, within 5 points "
                               "(each seed)")],
        examples=(ok | {f"threshold_minus_random_{prm}": [0.2, 0.25, 0.3]},
                  ok | {f"threshold_minus_random_{prm}": [-0.01, 0.0, -0.02]}),
    )


EFFICIENCY = {prm: _efficiency(prm) for prm in PRMS}
BEATS_PARALLEL = {prm: _beats_parallel(prm) for prm in PRMS}
THRESHOLD_MATTERS = {prm: _threshold_matters(prm) for prm in GRADED}

_HARD_OK = _pair_ok(soft_rate_bracketed=[1.0] * 3)
HARD_BEATS_SOFT = Claim(
    chapter="rsd", id="hard_beats_soft_learned",
    paper_statement="The hard threshold ω(r) = 1{r ≥ δ} is the optimal weighting under a budget on target calls: "
                    "at the same rate of target calls it is at least as accurate as other shapes of ω",
    paper_value="Eq. (2) optimal (theory); the ω-shape ablation",
    criterion="With the learned PRM, per seed: the accuracy of the hard threshold at the soft rule's acceptance "
              "rate (interpolated linearly in acceptance rate between the two thresholds of the δ sweep that "
              "bracket it) minus the accuracy of the soft rule ω(r) = r is above 0 (95% t interval; refuted if "
              "wholly below)",
    effects=[Effect("hard_minus_soft", "hard_minus_soft_learned")],
    preconditions=[*_preconditions("learned"),
                   at_least("sweep_brackets_soft", "soft_rate_bracketed", 1.0,
                            "the δ sweep's acceptance rates bracket the soft rule's (each seed): no extrapolation")],
    examples=(_HARD_OK | {"hard_minus_soft_learned": [0.03, 0.05, 0.04]},
              _HARD_OK | {"hard_minus_soft_learned": [-0.03, -0.05, -0.04]}),
)
