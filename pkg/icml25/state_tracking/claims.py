"""The chapter's claims: steering toward PAA, two mechanisms, and AA's length generalisation. The label is the
declared rule's (:func:`classify` over the :data:`VOTING` signatures, chosen from the rule's positive control on the
calibration seeds); the steering intervention is layer-wise parity supervision; the ledger records each change."""

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


STEERABLE = Claim(
    chapter="state_tracking", id="steerable",
    paper_statement="Training that encourages the parity heuristic steers models toward PAA (parity decodable "
                    "before the state)",
    paper_value="qualitative (parity supervision yields PAA)",
    criterion="Paired by seed (parity_aux minus plain run of the same seed; parity_aux adds layer-wise parity "
              "supervision after block 1), the probe signature rises (95% t interval above 0; refuted "
              "below +0.10); it is scaled so that 0 is AA's prediction and 1 PAA's",
    effects=[Effect("probe_signature_rise", _rise("probes"), min_effect=0.10)],
    preconditions=[_ALL_LEARNED, at_least("paired_seeds", "n_pairs", 3, "at least 3 seeds with both runs learned")],
    examples=({"steer_probes_diff": [0.4, 0.5, 0.35, 0.45], "n_not_learned": 0, "n_pairs": 4},
              {"steer_probes_diff": [0.02, -0.01, 0.03, 0.0], "n_not_learned": 0, "n_pairs": 4},
              {"steer_probes_diff": [0.05, -0.04, 0.02, -0.03, 0.01, -0.01], "n_not_learned": 0, "n_pairs": 6}),
)

TWO_MECHANISMS = Claim(
    chapter="state_tracking", id="two_mechanisms",
    paper_statement="Models learn one of two mechanisms, AA or PAA, rather than a continuum",
    paper_value="two discrete signatures across runs",
    criterion="Over the plain (unsteered) runs that learned the task, the share labelled AA-like and the share "
              "labelled PAA-like by the declared rule are both above 0 (95% exact binomial interval over runs; "
              "refuted when either lies wholly below 0.10)",
    effects=[Effect("aa_share", "is_aa", min_effect=0.10, method="binomial"),
             Effect("paa_share", "is_paa", min_effect=0.10, method="binomial")],
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

AA_GENERALISES = Claim(
    chapter="state_tracking", id="aa_generalises",
    paper_statement="AA models generalise to longer sequences better than PAA models",
    paper_value="AA keeps accuracy to longer lengths than PAA",
    criterion="Over the seeds whose two runs got different labels, the AA-like run's mean state accuracy beyond "
              "the training length (T < t <= 2T) minus the PAA-like run's is above 0 (95% t interval; refuted "
              "below +0.05)",
    effects=[Effect("aa_minus_paa_long_accuracy", "aa_minus_paa_long_accuracy", min_effect=0.05)],
    preconditions=[_ALL_LEARNED, _READABLE, _POSITIVE_CONTROL, at_least("mixed_seeds", "n_mixed_seeds", 3,
                                                     "at least 3 seeds with one AA-like and one PAA-like run")],
    examples=({"aa_minus_paa_long_accuracy": [0.2, 0.15, 0.25], "n_not_learned": 0, "n_mixed_seeds": 3,
               "n_signatures_read": [1] * 6, "forced_is_paa": [1, 1, 1]},
              {"aa_minus_paa_long_accuracy": [-0.01, 0.0, 0.01], "n_not_learned": 0, "n_mixed_seeds": 3,
               "n_signatures_read": [1] * 6, "forced_is_paa": [1, 1, 1]}),
)

CLAIMS = (STEERABLE, TWO_MECHANISMS, AA_GENERALISES)
