"""The chapter's claims: steering toward PAA, two mechanisms, and AA's length generalisation. The label is the
declared rule's (:func:`classify` over the :data:`VOTING` signatures, chosen from the rule's positive control on the
calibration seeds); the steering intervention is layer-wise parity supervision, and steering is judged by the mean
ablation of the parity direction (:func:`~icml25.state_tracking.measurements.parity_ablation_drops`), which that
supervision does not train; the ledger records each change."""

from __future__ import annotations

import math

from ..core.claims import Claim, Effect, at_least, at_most, share_at_least
from .signatures import LEARNED_ACCURACY, VOTING

_ALL_LEARNED = at_most("all_learned", "n_not_learned", 0,
                       f"every run learned the task: the number of runs below {LEARNED_ACCURACY} accuracy at the "
                       "training length is 0")
_READABLE = at_least("signatures_read", "n_signatures_read", len(VOTING),
                     "every learned run has its voting signature readable (probes: a layer that has not resolved "
                     "the state), so the rule can label it")


POSITIVE_CONTROL_SHARE = 0.5
"""The declared positive control of the labelling rule: at least this share of the learned runs forced to compute
the parity after block 1 (the `parity_aux` runs, whose parity is supervised there) are labelled PAA-like."""
_POSITIVE_CONTROL = share_at_least(
    "rule_sees_forced_parity", "forced_is_paa", 1, POSITIVE_CONTROL_SHARE,
    f"positive control: the rule labels at least {POSITIVE_CONTROL_SHARE:.0%} of the learned runs forced to compute "
    "the parity after block 1 (parity_aux) PAA-like; a rule that cannot label a planted parity-first run PAA-like "
    "cannot count PAA-like runs")


def _finite(xs) -> list[float]:
    return [float(x) for x in xs if x is not None and not math.isnan(x)]


def _rise(name: str):
    return lambda m: _finite(m[f"steer_{name}_diff"])


ABLATION_MIN_EFFECT = 0.05
"""steerable's smallest effect: the parity_aux run loses at least 5 points more state accuracy at the trained
positions than its plain pair when the parity direction is ablated. Chosen as the chapter's smallest accuracy
difference worth a claim (the same 0.05 that `aa_generalises` declares for accuracy beyond T), not from any
ablation's value."""

STEERABLE = Claim(
    chapter="state_tracking", id="steerable",
    paper_statement="Training that encourages the parity heuristic steers models toward PAA (the state computed "
                    "through an early parity)",
    paper_value="qualitative (parity supervision yields PAA)",
    criterion="Paired by seed (parity_aux minus plain run of the same seed; parity_aux adds layer-wise parity "
              "supervision after block parity_layer), the accuracy the state computation loses at t <= T when the "
              "parity probe's direction after block parity_layer is mean-ablated rises (95% t interval above 0; "
              f"refuted below +{ABLATION_MIN_EFFECT:g}). The parity loss asks the parity to be readable there, not "
              "the state to depend on it, so this is not guaranteed by the loss; the probe signature, which the "
              "loss does guarantee (a logit lens for the parity is a linear probe), is reported, not decisive",
    effects=[Effect("ablation_drop_rise", _rise("ablation"), min_effect=ABLATION_MIN_EFFECT)],
    preconditions=[_ALL_LEARNED, at_least("paired_seeds", "n_pairs", 3, "at least 3 seeds with both runs learned")],
    examples=({"steer_ablation_diff": [0.15, 0.2, 0.1, 0.3, 0.12, 0.18, 0.25, 0.09], "n_not_learned": 0,
               "n_pairs": 8},
              {"steer_ablation_diff": [0.01, -0.01, 0.0, 0.02, 0.0, 0.01, -0.005, 0.0], "n_not_learned": 0,
               "n_pairs": 8},
              {"steer_ablation_diff": [0.02, -0.02, 0.01, -0.01, 0.0, 0.015, -0.015, 0.0], "n_not_learned": 0,
               "n_pairs": 8}),
)

TWO_MECHANISMS = Claim(
    chapter="state_tracking", id="two_mechanisms",
    paper_statement="Models learn one of two mechanisms, AA or PAA, rather than a continuum",
    paper_value="two discrete signatures across runs",
    criterion="Over the plain (unsteered) runs that learned the task, the share labelled PAA-like by the declared "
              "rule is above 0 (95% exact binomial interval over runs; refuted when it lies wholly below 0.10) and "
              "beats its share on the null. AA-like means only 'no parity surplus' here (it has no positive "
              "definition), and the null labels every run so, so the AA-like share is described, not decisive",
    effects=[Effect("paa_share", "is_paa", min_effect=0.10, method="binomial")],
    preconditions=[_ALL_LEARNED, _READABLE, _POSITIVE_CONTROL],
    needs_null=True,
    null_description="the same pipeline on the same learned plain runs with the parity replaced by a fixed random "
                     "balanced 2-colouring of the states that is not a homomorphism (shuffled parity labels): "
                     "no run can be parity-first there, so a PAA-like share found there is the rule labelling noise",
    examples=({"is_aa": [1, 0, 1, 0, 1, 0, 1, 0], "is_paa": [0, 1, 0, 1, 0, 1, 0, 1], "n_not_learned": 0,
               "n_signatures_read": [1] * 8, "forced_is_paa": [1, 1, 1, 0]},
              {"is_aa": [1] * 8, "is_paa": [0] * 8, "n_not_learned": 0, "n_signatures_read": [1] * 8,
               "forced_is_paa": [1, 1, 0, 1]}),
)

GENERALISATION_MIN_EFFECT = 0.05
"""aa_generalises's smallest effect, and the margin over chance its precondition off_the_floor asks for."""

AA_GENERALISES = Claim(
    chapter="state_tracking", id="aa_generalises",
    paper_statement="AA models generalise to longer sequences better than PAA models",
    paper_value="AA keeps accuracy to longer lengths than PAA",
    criterion="Over the seeds whose two runs got different labels, the AA-like run's mean state accuracy beyond "
              "the training length (T < t <= 2T) minus the PAA-like run's is above 0 (95% t interval; refuted "
              f"below +{GENERALISATION_MIN_EFFECT:g}). Such a seed's runs are its plain and its parity_aux run, so "
              "the comparison confounds the mechanism with the extra loss",
    effects=[Effect("aa_minus_paa_long_accuracy", "aa_minus_paa_long_accuracy", min_effect=GENERALISATION_MIN_EFFECT)],
    preconditions=[_ALL_LEARNED, _READABLE, _POSITIVE_CONTROL,
                   at_least("mixed_seeds", "n_mixed_seeds", 3, "at least 3 seeds with one AA-like and one PAA-like "
                            "run"),
                   at_least("off_the_floor", "far_above_chance", GENERALISATION_MIN_EFFECT,
                            "the experiment can see generalisation beyond one step past T: over those seeds, the "
                            "AA-like runs' or the PAA-like runs' mean state accuracy over T + 2 <= t <= 2T is above "
                            f"chance (1/|S_n|) by at least {GENERALISATION_MIN_EFFECT:g} (the claim's smallest "
                            "effect); when both labels are at chance there, only t = T + 1 can differ")],
    examples=({"aa_minus_paa_long_accuracy": [0.2, 0.15, 0.25], "n_not_learned": 0, "n_mixed_seeds": 3,
               "n_signatures_read": [1] * 6, "forced_is_paa": [1, 1, 1], "far_above_chance": 0.3},
              {"aa_minus_paa_long_accuracy": [-0.01, 0.0, 0.01], "n_not_learned": 0, "n_mixed_seeds": 3,
               "n_signatures_read": [1] * 6, "forced_is_paa": [1, 1, 1], "far_above_chance": 0.3}),
)

CLAIMS = (STEERABLE, TWO_MECHANISMS, AA_GENERALISES)
