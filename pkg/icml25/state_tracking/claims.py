"""The chapter's claims: steering toward PAA, two mechanisms, and AA's length generalisation. The label is the
declared rule's (:func:`classify` over the :data:`VOTING` signatures, chosen from the rule's positive control on the
calibration seeds); the steering intervention is layer-wise parity supervision, and steering is judged by the
concept erasure of the parity (LEACE) against edits of the same size that carry no parity signal
(:func:`~icml25.state_tracking.measurements.parity_erasure_drops`): how many predictions the erasure sends to the
other parity beyond those edits, in a seed's parity_aux run against the same seed's unsteered (plain) run, over the
seeds whose two runs both have controls of the erasure's size
(:func:`~icml25.state_tracking.experiment.controls_match`); the ledger records each change."""

from __future__ import annotations

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


ABLATION_MIN_EFFECT = 0.05
"""The smallest effect steerable declared for its earlier accuracy comparisons (the erasure's drop minus its
controls', now reported): the chapter's smallest accuracy difference worth a claim, the same 0.05 that
`aa_generalises` declares for accuracy beyond T."""

WRONG_PARITY_MIN_EFFECT = 0.2
"""The smallest effect of steerable's declaration of b6f70a6 (the wrong-parity share of the errors after the erasure
minus after its controls, decided on 3300-3307: reproduced, now reported), and of its present one (issue 54, declared
before its verdict seeds 3400-3407 were run; kept, with the per-seed rule of :data:`MATCHED_SEED_SHARE`, for
3500-3509): per seed, the parity flips the erasure causes beyond its controls, as a
rate over all predictions at t <= T, at least 0.2 higher in the parity_aux run than in the plain run. A round effect
size (a fifth), not derived from the data; it was proposed by a referee after that referee had seen the wrong-parity
shares on seeds 3200-3207 (:data:`STEERABLE_REFEREE`), and it was kept for the present statistic after the verdict on
3300-3307 (:data:`STEERABLE_ERROR_SHARE_VERDICT`) had been seen, so it is not blind to those samples."""

MIN_EDIT_ERRORS = 50
"""The precondition enough_errors of steerable's declaration of b6f70a6 (at least this many wrong predictions at
t <= T after the erasure, and as many after its controls pooled, in every learned parity_aux run), dropped with the
present declaration: a rate over all predictions is defined however few errors an edit causes, and its denominator,
the n_eval stories × T positions of each run, is fixed by the design. Still printed beside the reported shares."""

STEERABLE_ERROR_SHARE_VERDICT = {
    "seeds": "3300-3307",
    "wrong_parity_contrast": (0.744, 0.621, 0.867),
    "plain_wrong_parity_contrast": (0.59, 0.18),
    "plain_erasure_drop": 0.05,
    "parity_aux_erasure_drop": 0.51,
}
"""steerable's verdict under the declaration of b6f70a6 on fresh seeds 3300-3307 (commit c9ec427), seen before the
present declaration: the wrong-parity share of the parity_aux runs' errors after the erasure minus after its controls,
mean [95% t interval], n = 8, reproduced; and, outside that criterion, the same difference in the plain runs (mean,
sd), though the erasure cost them about 0.05 of accuracy against about 0.51 in the parity_aux runs. The unsteered
runs passed the statistic nearly as well: it showed that later blocks read whatever parity signal is there, not that
the supervision steers. Recorded as seen, printed by notebook 2, never re-measured; no verdict rests on it."""

STEERABLE_FLIP_VERDICT = {
    "seeds": "3400-3407",
    "flip_excess_aux_minus_plain": (0.325, 0.222, 0.429),
    "change_mismatch": 0.190,
    "missed_run": ("parity_aux", 3401),
    "controls_reach": 0.81,
    "rebuild_change_mismatch": 9.3e-5,
    "rebuild_flip_excess_aux_minus_plain": (0.307, 0.239, 0.375),
}
"""steerable's verdict under the present declaration on its verdict seeds 3400-3407 (commit 7de4fd6): inconclusive,
since the precondition variance_matched failed (the largest relative miss of a control's mean squared change, 0.190
against the 10% tolerance) in one run, whose controls (the whole complement of the parity classes' mean difference)
reached 0.81 of the erasure's change; its statistic (per seed, parity flips beyond the controls, parity_aux minus
plain, mean [95% t interval], n = 8) decided nothing. Why the controls missed was diagnosed afterwards on the
calibration seeds (:data:`~icml25.state_tracking.settings.CONTROL_CEILING`); nothing in the declaration changed
after it. A second ci build of the same seeds under the same declaration (the diagnosis's session, after the
diagnosis), whose runs differ from the first build's though code and seeds are the same (numbers repeat only on
the same machine), met variance_matched (largest miss 9.3e-5) and its statistic read the same way (mean [95% t
interval]); it re-measured seeds already decided, so the first build's verdict stands (the builder recorded it as
reproduced). Recorded as seen, printed by notebook 2. After both builds were seen, variance_matched became the
per-seed rule of :data:`MATCHED_SEED_SHARE`, decided on fresh seeds 3500-3509."""

STEERABLE_REFEREE = {
    "seeds": "3200-3207",
    "accuracy_statistic": (-0.020, -0.134, 0.094),
    "accuracy_statistic_parity_weight_1": 0.008,
    "accuracy_statistic_lr_4e-3": 0.054,
    "dose_spearman": -0.78,
    "erased_wrong_parity": (0.923, 0.898, 0.947),
    "matched_wrong_parity": (0.084, 0.056, 0.111),
    "wrong_parity_contrast": (0.839, 0.802, 0.876),
    "wrong_parity_contrast_parity_weight_1": 0.83,
    "wrong_parity_contrast_lr_4e-3": 0.77,
    "plain_parity_readable": (0.64, 0.86),
    "plain_erasure_drop": 0.050,
}
"""What a referee with no stake found on fresh seeds 3200-3207 (the chapter's functions, its own scripts), before
steerable was re-declared on the wrong-parity contrast: the accuracy statistic then declared (erasure minus
controls, mean [95% interval]) did not replicate the refutation on 3100-3107, nor at parity_weight 1.0 or lr 4e-3
(means); across runs it fell as the controls needed more dimensions (Spearman rank correlation); the wrong-parity
share of the errors after the erasure, after the controls, and their paired difference (mean [95% t interval]), the
difference also at parity_weight 1.0 and lr 4e-3; and in the plain runs, the parity probe's range after block 1 and
the mean erasure drop. Recorded as reported, printed by notebook 2, never re-measured; no verdict rests on it."""

PARITY_ERASED = 0.6
"""steerable's precondition parity_erased: in every learned parity_aux run, a logistic probe fitted again after the
erasure, on held-out stories, reads the parity with accuracy at most this (chance, 0.5, plus 0.1), so the erasure
removed the parity's linear signal. Declared before the erasure was run on any seed."""

VARIANCE_TOLERANCE = 0.1
"""steerable's per-run rule (:func:`~icml25.state_tracking.experiment.controls_match`): a run's controls match when
every control's mean squared change of the residual stream is the erasure's to within this relative miss (10%), so
that the control changes the stream as much as the erasure does; a seed's unit counts only when both its runs'
controls match (:data:`MATCHED_SEED_SHARE`).
The controls are solved to match (:func:`~icml25.state_tracking.measurements.variance_matched_controls`: a direction,
or a subspace of the fewest dimensions that carry that change); they miss only when the whole complement of the
parity's mean difference carries less (or, never met in these runs, when every direction there carries more), and
then there is no control: where the parity classes' mean difference
carries most of the stream's variance, the erasure, which moves the rows along it by up to that variance, changes
the stream by more than everything else there carries (diagnosed after the verdict on 3400-3407:
:data:`STEERABLE_FLIP_VERDICT`, :data:`~icml25.state_tracking.settings.CONTROL_CEILING`)."""

MATCHED_SEED_SHARE = 0.75
"""steerable's precondition variance_matched, a share since the verdicts on 3400-3407 (inconclusive in the first
build, whose parity_aux run of seed 3401 had controls reaching 0.81 of the erasure's change; reproduced in a rebuild
whose runs all matched): at least this share of the seeds whose two runs both learned have controls that match the
erasure in both runs (:data:`VARIANCE_TOLERANCE`), and only those seeds' units enter the statistic. Whether a run's
controls can match is decided by the edits' geometry alone, before any flip is read; that geometry is not
independent of the outcome, though (a referee found the erasure's share of the variance and its flips rank-correlated
across parity_aux runs, :data:`REFEREE_3700`), so leaving a seed out could bias the statistic, and the page says how
many were left out; about one parity_aux run in twelve lies beyond the ceiling
(:data:`~icml25.state_tracking.settings.CONTROL_CEILING`), where no control of the erasure's size exists, and under
an every-run rule one such run voided the claim. A share still blocks it when the controls fail systematically.
Declared by the chapter's lead, not tuned on any verdict; decided on fresh seeds 3500-3509, ten so that at least eight
units remain after the rule."""

PARITY_READABLE = LEARNED_ACCURACY
"""steerable's precondition parity_readable: in every learned parity_aux run the parity probe after block
parity_layer reads ε(s_t) on held-out rows with at least this accuracy (the bar a run meets to count as having
learned the state), so there is a parity to erase."""

STEERABLE = Claim(
    chapter="state_tracking", id="steerable",
    paper_statement="Training that encourages the parity heuristic steers models toward PAA (the state computed "
                    "through an early parity)",
    paper_value="qualitative (parity supervision yields PAA)",
    criterion="In every learned run of both conditions, the parity is erased from the residual stream after block "
              "parity_layer (LEACE, least-squares concept erasure, fitted on stories apart from the evaluation's and "
              "applied at every action's position), and, apart, each of n_ablation_controls controls is applied "
              "there: the mean ablation of a random subspace orthogonal to the parity classes' mean difference (no "
              "linear parity signal) of the fewest dimensions that change the stream by the erasure's mean squared "
              "change. A run's parity flips beyond an edit of the erasure's size are the rate, over all predictions "
              "at t <= T, of predicted states with the other parity than the true state after the erasure, minus "
              "the same rate after the controls (pooled over the controls). The statistic, per seed, is that "
              "quantity in the seed's parity_aux run (layer-wise parity supervision after block parity_layer) minus "
              "the same in the seed's plain run (same initialisation and data order): it is above 0 (95% paired t "
              f"interval over the kept seeds; refuted when wholly below +{WRONG_PARITY_MIN_EFFECT:g}). A seed is "
              "kept only when the controls of both its runs match the erasure's mean squared change within "
              f"{VARIANCE_TOLERANCE:.0%}; where the whole complement of the parity classes' mean difference carries "
              "less than the erasure's change no such control exists, and the seed is left out. That is read from "
              "the edits' geometry alone, before any flip (declared after the verdicts on seeds 3400-3407, where "
              "one such run voided the claim under a rule asked of every run). Why the contrast: the unsteered "
              "runs are the claim's null. The wrong-parity share of the errors, which decided before, was met "
              "nearly as well by the plain runs (their later blocks also read what parity signal there is), and a "
              "share ignores how many errors the erasure causes; a rate over all predictions counts them, so it "
              "asks whether the parity supervision makes the state computation go through the parity more than "
              "training without it does. The wrong-parity shares and the erasure's accuracy drop minus its "
              "controls' are reported, not decisive; the probe signature's rise is guaranteed by the parity loss "
              "(reported, not decisive)",
    effects=[Effect("flip_excess_aux_minus_plain", "flip_excess_aux_minus_plain",
                    min_effect=WRONG_PARITY_MIN_EFFECT)],
    preconditions=[_ALL_LEARNED,
                   at_least("paired_seeds", "n_kept_pairs", 3, "at least 3 kept seeds: seeds whose plain and "
                            "parity_aux runs both learned and both have controls of the erasure's size"),
                   at_least("parity_readable", "parity_probe_min", PARITY_READABLE,
                            f"in every learned parity_aux run the parity probe after block parity_layer reads the "
                            f"parity on held-out rows with accuracy at least {PARITY_READABLE}: there is a parity "
                            "to erase (not asked of the plain runs: where their parity is only partly readable, "
                            "erasing it changes little by nature, which is the contrast's point)"),
                   at_most("parity_erased", "parity_after_erasure_both", PARITY_ERASED,
                           f"in every learned run of both conditions a logistic probe fitted again after the "
                           f"erasure reads the parity on held-out stories with accuracy at most {PARITY_ERASED:g} "
                           "(chance 0.5): the erasure removed the parity's linear signal"),
                   share_at_least("variance_matched", "seed_matched", 1, MATCHED_SEED_SHARE,
                                  f"of the seeds whose two runs both learned, at least {MATCHED_SEED_SHARE:.0%} are "
                                  "kept: in both runs every control's mean squared change of the residual stream is "
                                  f"the erasure's within {VARIANCE_TOLERANCE:.0%}, so the control changes the stream "
                                  "as much as the erasure does; controls that fail to match on more seeds block the "
                                  "claim")],
    examples=({"flip_excess_aux_minus_plain": [0.35, 0.4, 0.3, 0.45, 0.38, 0.33, 0.42, 0.36], "n_not_learned": 0,
               "n_kept_pairs": 8, "seed_matched": [1, 1, 1, 1, 0, 1, 1, 1, 1, 1], "parity_probe_min": 0.99,
               "parity_after_erasure_both": 0.54},
              {"flip_excess_aux_minus_plain": [0.05, 0.1, 0.0, 0.08, 0.02, 0.06, 0.04, 0.07], "n_not_learned": 0,
               "n_kept_pairs": 8, "seed_matched": [1] * 8, "parity_probe_min": 0.99,
               "parity_after_erasure_both": 0.54},
              {"flip_excess_aux_minus_plain": [0.1, -0.1, 0.05, -0.05, 0.0, 0.08, -0.08, 0.0], "n_not_learned": 0,
               "n_kept_pairs": 8, "seed_matched": [1] * 8, "parity_probe_min": 0.99,
               "parity_after_erasure_both": 0.54}),
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


#: A referee with no stake re-decided steerable on fresh seeds 3700-3709 (n = 10) after the verdict on 3500-3509 was
#: recorded, with the chapter's code and only its ci seeds changed; nothing was changed after it but wording it
#: flagged. Recorded as measured (95% paired t interval; Spearman's rho across parity_aux runs of the erasure's share
#: of the residual variance and the flips it causes; the largest shortfall of the controls' mean squared change
#: against the erasure's on the evaluation stories, and the flips that shortfall explains at the controls' measured
#: flips-per-size slope, largest over runs).
REFEREE_3700 = {
    "seeds": "3700-3709",
    "steerable": "reproduced",
    "flip_excess_aux_minus_plain": (0.329, 0.289, 0.369),
    "kept": (10, 10),
    "share_flip_rho": {"3500-3509": 0.48, "3700-3709": 0.05},
    "eval_shortfall_aux": 0.068,
    "flips_from_shortfall": 0.0037,
}
"""The label repeated. A mismatch of the edits' sizes where they act explains at most 0.004 of a run's flip rate
against a contrast of 0.33, so the contrast is not an artefact of size. What the label means is narrower than the
paper's sentence: the supervision makes the state computation go through a parity that is linearly present after
block 1 (the controls, orthogonal to it, cost the parity_aux runs as much accuracy as the erasure but flip few
parities); it does not show that these runs resolve the state within its parity class, as PAA does, and
two_mechanisms finds no PAA-like run."""
