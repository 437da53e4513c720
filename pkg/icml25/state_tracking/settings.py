"""The settings per scale, with the record of how the `ci` regime was calibrated (from the precondition alone), and
the S5 run's."""

from __future__ import annotations

from ..core import tinylm
from ..core.config import COUNT, FRACTION, INDEX, NONNEGATIVE, POSITIVE, SEED, make_config, one_of
from .group import SUPPORTED_N
from .training import CONDITIONS, TINY_MODEL

# ci calibration (1 CPU thread on a shared, heavily loaded machine, seed 0 unless said; accuracy of s_T at t = T on
# 1000 held-out stories; recorded before any claim was checked). Budget: about 4000 optimiser steps in all at
# ~25 ms each. With a curriculum from 2 actions over the first half of 800 steps, T = 6 reached only 0.48 (0.43
# with the parity objective; lr 1e-2: 0.38), although t <= 3 were right every time and t = 4 0.94. At T = 4, 500
# steps with a half-length ramp gave 0.83 (0.77 with the parity objective, weight 1), 600 steps with a quarter ramp
# 0.89 (0.80). The old design without a curriculum reached 0.93-0.96 at T = 4 in 600-1000 steps. Hence T = 4, a
# short ramp (the first 10% of the steps at 2 and 3 actions), 700 steps, and a parity weight of 0.5; longer
# stories are out of this budget.
# Re-calibrated (a later session, from the precondition alone, before any verdict of the new regime was read):
# that design took 191 s of the chapter's 150 s budget and one run in six missed the precondition (parity_aux
# seed 2 at 0.884). For parity_aux seed 2 alone at T = 4: 400 steps at lr 6e-3 0.73; 2 blocks, 600 steps at lr
# 4e-3 0.79; the wider `small` preset 0.84 at 350 and at 450 steps (0.75 at lr 5e-3), none learned within
# ~20 s of CPU. At T = 3, 450 steps at lr 3e-3 reached 1.00 in 14 s. Hence T = 3 (stories of 6 actions at
# evaluation) and 450 steps; the shorter training length is the price of a chapter in budget whose every run learns.
# Re-calibrated again (issue 36, to pay for the S5 run below; from the precondition alone, no verdict of the new
# setting read): T = 4 with batch 256 for 200 steps (17 s, as much CPU as 450 steps of batch 64) left parity_aux
# seed 2 at 0.74, so T stays 3. At 350 steps, accuracy at t = 3 was 0.95 (parity_aux seed 2, the slowest run),
# 1.00 (parity_aux seeds 0 and 1, plain seed 0), at 11 s of CPU each instead of 16 s. Hence 350 steps.
# Issue "a longer training length" (a later session; the verdicts of this T = 3 regime were known, all three
# inconclusive, before it started; nothing below was chosen from a verdict). Training got cheaper: a profile showed
# the runs bound by per-operation overhead at batch 64 and by the matrix products beyond, so the six runs are now
# trained together (:func:`train_trackers`: stacked weights, one forward of plain batched products, each run on its
# own initialisation, batches, loss and clipping; equal to separate training up to float rounding, tested), at
# 7.4 ms per run and step instead of 13 ms at T = 3 (9.2 ms at T = 4, 11 ms at T = 6). Whether T = 6 fits was then
# measured from the precondition alone (accuracy of s_6 at t = 6 of all six runs, 500 held-out stories; one
# thread on the loaded machine): curriculum from 2 actions over the first 30% of the steps, batch 64, lr 3e-3:
# 1200 steps (75 s for the six runs) 0.65-0.81; the same at lr 8e-3 and 800 steps 0.47-0.87; 4 blocks, 800 steps
# (60 s) 0.45-0.71; batch 32, 1600 steps (85 s) 0.62-0.90; no curriculum, 800 steps (80 s) 0.50-0.73. Every
# setting spent two to three times the chapter's whole training time (about 35 s) and left most runs below 0.9
# (t <= 3 were right every time; accuracy fell from t = 4 on). So T = 6 is out of this budget and T stays 3; the
# batched training only makes the same design cheaper (its models differ from separately trained ones by float
# rounding, which moved one run's label between "mixed" and "AA-like"; no verdict changed).
# Issue 36, the length curriculum (a later session; the three verdicts of the T = 3 regime were known, all
# inconclusive, before it started; nothing below was chosen from, or after reading, a verdict of the new setting).
# The chapter's models are now trained in the book builder's warm-up (:func:`train_design`), whose time is not the
# chapter's: about 300 s of one thread for the S3 design and the S5 run. T = 6 was calibrated again in that budget,
# from the precondition alone (accuracy of s_6 at t = 6 of all six runs, 1000 held-out stories of the "eval"
# stream; one thread, two calibrations at a time on the shared 2-core machine, so the seconds are upper bounds);
# curriculum from 2 actions over the first 30% of the steps; :data:`LENGTH_CALIBRATION` holds every setting tried,
# with each run's accuracy and the seconds. Batch 64, lr 3e-3: 3000 steps 0.83-0.98 (one run below 0.9), 4000
# steps 0.92-1.00 (317 s); batch 128, 2000 steps 0.90-0.98 (two runs just below); lr 5e-3: 3000 steps 0.91-0.98
# (251 s), 3500 steps 0.90-1.00 (310 s); lr 7e-3, 3000 steps 0.88-0.98 (two below). The accuracy of one run moves
# by a few points between settings with no trend, so the setting chosen is the one whose slowest run has the
# widest margin over the precondition, not the cheapest that passed once: hence T = 6 with 4000 steps of batch 64
# at lr 3e-3 (slowest run 0.921; 317 s beside another calibration, 233 s for the whole warm-up, the S5 run
# included, in a chapter build). The S5 run keeps its own learning rate (3e-3) and its settings.
# Issue 54, more units (a later session; the verdicts on seeds 100-102 were known: steerable held back by its 3
# paired units, the label claims by the positive control). Eight seed pairs cannot be trained at T = 6 within the
# warm-up's ~300 s (16 runs of 4000 steps: ~700 s), so T = 4 was calibrated on the calibration seeds 0-7 (16 runs),
# from the precondition alone: 1500 steps of batch 64 at lr 3e-3 brought every run to at least 0.998 at t = T in
# 183 s of one thread (beside another calibration). Hence T = 4, 1500 steps, and verdicts on eight fresh seeds.
TRAIN_PRESETS = {
    "smoke": {"group_n": 3, "preset": "nano", "n_layers": 2, "train_length": 4, "start_length": 2, "ramp": 0.5,
              "batch_size": 32, "steps": 20, "lr": 3e-3, "parity_weight": 1.0, "parity_layer": 1},
    "ci": {"group_n": 3, "preset": "micro", "n_layers": 3, "train_length": 4, "start_length": 2, "ramp": 0.3,
           "batch_size": 64, "steps": 1500, "lr": 3e-3, "parity_weight": 0.5, "parity_layer": 1},
    "full": {"group_n": 3, "preset": "base", "n_layers": 6, "train_length": 16, "start_length": 2, "ramp": 0.5,
             "batch_size": 128, "steps": 20000, "lr": 1e-3, "parity_weight": 1.0, "parity_layer": 1},
}
TRAIN_KEYS = tuple(TRAIN_PRESETS["ci"])
EARLIER_TRAIN_LENGTH = 3
"""The `ci` training length before the length curriculum's calibration (its verdicts: all three inconclusive)."""
LENGTH_CALIBRATION = [
    # (train_length, steps, batch_size, lr, ramp, seeds) -> accuracy at t = T of each run (plain then parity_aux,
    # seed by seed), seconds
    dict(zip(("train_length", "steps", "batch_size", "lr", "ramp", "seeds", "accuracy_at_T", "seconds"), row))
    for row in (
        (6, 3000, 64, 3e-3, 0.3, 3, (0.909, 0.965, 0.965, 0.827, 0.903, 0.979), 438),
        (6, 2000, 128, 3e-3, 0.3, 3, (0.957, 0.920, 0.964, 0.899, 0.976, 0.898), 494),
        (6, 4000, 64, 3e-3, 0.3, 3, (0.921, 0.967, 1.000, 1.000, 0.949, 0.979), 317),
        (6, 3000, 64, 5e-3, 0.3, 3, (0.946, 0.979, 0.946, 0.950, 0.908, 0.953), 251),
        (6, 3500, 64, 5e-3, 0.3, 3, (0.973, 0.977, 0.998, 0.975, 0.952, 0.902), 310),
        (6, 3000, 64, 7e-3, 0.3, 3, (0.878, 0.909, 0.950, 0.979, 0.974, 0.886), 282),
        (4, 1500, 64, 3e-3, 0.3, 8, (1.000, 0.9995, 1.000, 1.000, 1.000, 1.000, 1.000, 0.9985,
                                     1.000, 1.000, 1.000, 1.000, 1.000, 1.000, 1.000, 1.000), 183),
    )]
"""The `ci` calibration of the training length (issues 36 and 54), judged by the precondition alone: each setting
tried, on how many calibration seeds (from 0), each run's held-out accuracy of s_T at t = T and the seconds of one
thread that the runs' batched training took (measured beside another calibration on the shared machine). Recorded
when measured, not re-measured by the notebook, which prints it."""

# S5 (120 states) at ci: one plain run, a cheap check that the whole pipeline (training, probes, patching,
# signatures, the precondition) runs on S5, not a claim. Calibration (1 CPU thread, seed 0, before any S5 run was
# labelled): 300 steps on 2-action stories (curriculum from 1) took 11 s and were right at t = 1 (a copy) and at
# chance (0.01) at t = 2: composing two S5 actions is learning a 120 x 120 table, far beyond ci's budget, so the run
# is expected to miss the precondition, and the notebook says so from its measured accuracy.
S5_TRAIN = {"smoke": {"group_n": 5, "train_length": 2, "start_length": 2, "steps": 20},
            "ci": {"group_n": 5, "n_layers": 2, "train_length": 2, "start_length": 2, "steps": 200, "lr": 3e-3},
            "full": {"group_n": 5}}
S5_PRESETS = {scale: dict(train, **S5_TRAIN[scale]) for scale, train in TRAIN_PRESETS.items()}

CALIBRATION_SEEDS = tuple(range(8))
"""The seeds of the training-length calibration (:data:`LENGTH_CALIBRATION`), of the rule's positive control
(:data:`~icml25.state_tracking.signatures.POSITIVE_CONTROL`) and of every verdict before contract v2; verdicts are
decided on fresh seeds (100-102, 1600-1607, 2700-2707, 2900-2907, 3100-3107, 3300-3307 and 3400-3407 were seen, and
referees re-ran the chapter on 2600-2607, 2800-2807, 3000-3007 and 3200-3207, so `ci` decides on 3500-3509: ten seeds,
so that steerable keeps at least eight units after its per-seed rule,
:data:`~icml25.state_tracking.claims.MATCHED_SEED_SHARE`)."""

ABLATION_CALIBRATION_SEEDS = (2950, 2951, 2952, 2953)
"""The seeds on which steerable's variance-matched ablation control (:data:`ABLATION_CALIBRATION`) and then its
parity erasure (:data:`ERASURE_CALIBRATION`) were tried before their verdicts; no verdict was ever decided on them."""

# steerable's variance-matched control, calibrated on ABLATION_CALIBRATION_SEEDS (the ci design trained on those
# four seed pairs; one thread on the loaded shared machine) before any run on the verdict seeds 2900-2907. First
# design: each control a single direction orthogonal to the parity direction and to the parity classes' mean
# difference, tilted to the parity direction's variance. In every parity_aux run no such direction carried that
# much (the parity direction carried 17-29% of the residual variance after block 1, the class-mean difference
# with it about 60%), so each control stopped at the top principal direction of the complement, 71%, 12%, 18% and
# 22% short of the variance (the tolerance is 10%): the precondition variance_matched would fail on every run,
# so that design could not decide. Hence each control is a subspace of the fewest dimensions that carry the
# variance (:func:`~icml25.state_tracking.measurements.variance_matched_controls`); with it the controls matched
# to within 1e-7 in every run (1 dimension in the plain runs, 2 or 11 in the parity_aux runs). The drops of both
# designs were seen on these seeds (listed in ABLATION_CALIBRATION, the second design's); the statistic (the
# parity direction's drop minus its controls'), its smallest effect (0.05) and the tolerance were declared before
# them, and only what a control is changed after them.
ABLATION_CALIBRATION = [
    dict(zip(("condition", "seed", "parity_drop", "matched_drop", "parity_variance_share", "control_dimensions",
              "single_direction_miss"), row))
    for row in (
        ("plain", 2950, 0.000, 0.000, 0.001, 1, 0.000),
        ("plain", 2951, 0.000, 0.000, 0.002, 1, 0.000),
        ("plain", 2952, 0.000, 0.000, 0.001, 1, 0.000),
        ("plain", 2953, 0.000, 0.000, 0.001, 1, 0.000),
        ("parity_aux", 2950, 0.335, 0.645, 0.289, 11, 0.708),
        ("parity_aux", 2951, 0.234, 0.241, 0.204, 2, 0.115),
        ("parity_aux", 2952, 0.082, 0.401, 0.172, 2, 0.180),
        ("parity_aux", 2953, 0.082, 0.317, 0.177, 2, 0.224),
    )]
"""steerable's calibration on :data:`ABLATION_CALIBRATION_SEEDS`: each run's accuracy at t <= T lost when the parity
direction after block 1 is mean-ablated and the mean over its 8 variance-matched controls, the parity direction's
share of the residual variance there, each control's dimensions, and how far the first design's single-direction
controls fell short of the variance. Recorded when measured, not re-measured by the notebook, which prints it."""

# steerable's parity erasure (issue 54, a later session), calibrated on ABLATION_CALIBRATION_SEEDS (the ci design
# trained again on those four seed pairs; one thread on the loaded shared machine) before any run on its verdict
# seeds 3100-3107. A third referee (seeds 3000-3007) had replicated the variance-matched ablation's refutation on
# 2900-2907 (seen: -0.341 [-0.443, -0.238]) and found that after the probe's direction is ablated the parity stays
# readable (a probe fitted again reads it at 0.945-0.98), so that verdict is about the direction, not the parity.
# Declared before this calibration: the statistic (the drop when LEACE erases the parity after block 1, minus the
# mean drop of 8 controls that change the stream as much and carry no parity signal), its smallest effect (0.05,
# unchanged), the tolerance of the controls' match (10%, unchanged) and the precondition parity_erased (a probe
# fitted again on held-out stories reads the parity at most 0.6). The calibration read only the preconditions: the
# script printed no drop, so neither the drops nor the statistic's sign on these seeds were seen. Each held at the
# first try, so nothing was changed after it: the erasure took the parity probe from 1.000 to 0.506-0.523 in every
# parity_aux run (plain runs: from 0.69-0.82 to 0.47-0.53); its mean squared change was 31-38% of the residual
# stream's variance after block 1 in the parity_aux runs (3-4% in the plain runs); the controls matched it within
# 4e-8, as subspaces of 2 to 12 dimensions in every parity_aux run (one direction in the plain runs), and left the
# parity readable (0.98-1.00 in the parity_aux runs).
ERASURE_CALIBRATION = [
    dict(zip(("condition", "seed", "parity_before", "parity_after", "parity_after_controls_min", "change_share",
              "control_dimensions"), row))
    for row in (
        ("plain", 2950, 0.824, 0.498, 0.792, 0.036, 1),
        ("plain", 2951, 0.802, 0.533, 0.790, 0.039, 1),
        ("plain", 2952, 0.728, 0.468, 0.651, 0.028, 1),
        ("plain", 2953, 0.693, 0.522, 0.645, 0.043, 1),
        ("parity_aux", 2950, 1.000, 0.523, 0.979, 0.375, 12),
        ("parity_aux", 2951, 1.000, 0.521, 0.993, 0.322, 4),
        ("parity_aux", 2952, 1.000, 0.506, 0.984, 0.315, 3),
        ("parity_aux", 2953, 1.000, 0.506, 0.998, 0.308, 2),
    )]
"""steerable's erasure on :data:`ABLATION_CALIBRATION_SEEDS`, its preconditions alone: each run's held-out parity
probe after block 1 before the erasure (on the "probe" stories) and after it (fitted again on the "erasure check"
stories), the lowest such probe after a control, the erasure's mean squared change over the residual variance
there, and each control's dimensions. Recorded when measured, not re-measured by the notebook, which prints it."""

# Why steerable's controls could not match the erasure (issue 54, a later session; the verdict on 3400-3407 was
# known: inconclusive, because in the parity_aux run of seed 3401 the controls reached 0.81 of the erasure's change,
# variance_matched asking within 10%). Diagnosed on the calibration seeds alone (the ci design trained again on
# CALIBRATION_SEEDS and on ABLATION_CALIBRATION_SEEDS; one thread), reading the edits' geometry and the controls'
# match, no flip, drop or statistic. Not a defect of the controls' construction or measurement: the erasure's
# target and every control's change are read on the same rows (the "probe" stories), in float64; wherever a match
# exists the bisection finds it within 5e-8 (every plain run, 11 of the 12 parity_aux runs). A mean ablation
# orthogonal to the parity classes' mean difference delta removes at most what that whole complement carries,
# tr(Sigma) - Var along delta, while LEACE moves the rows along delta by at most the variance there (its mean
# squared change is |delta|^2 / delta' Sigma^+ delta <= delta' Sigma delta / |delta|^2, Cauchy-Schwarz). The parity
# supervision puts 35-65% of the stream's variance after block 1 along delta in the parity_aux runs (18-35% in the
# plain runs), and the erasure changes it by 59-73% of that; where delta carries near two thirds (2950: 65%) the
# erasure changes the stream by more than everything else in it carries: no edit of its size that keeps the
# parity's mean difference exists there, and the nearest control (the whole complement, all 47 dimensions) misses.
# So it happened in 1 of the 12 calibration parity_aux runs (2950: the complement carries 0.83 of the erasure's
# change, as 3401's 0.81) and two more lie within 10% above the ceiling. Runs this close to it cross it between
# trainings of the same code and seeds: the 2950 pair trained for ERASURE_CALIBRATION had 12-dimensional controls
# there at a change share of 0.375 (0.417 now), and a second ci build of 3400-3407 met the precondition. Removing
# parity-free content of the erasure's size is impossible in such a run by the design's own terms, so the
# precondition stays and the claim is inconclusive there; a control that always exists would have to add to the
# stream (noise, an overshoot past the mean), a different edit from the erasure's removal, not declared. Also
# found, not a cause of the miss: the match is checked on the stories the controls were solved on, where it holds
# by construction; on the "eval" stories, where the edits act, a control matched there differs from the erasure by
# up to 12% (the plain runs' one-direction controls).
# After this diagnosis (and the rebuild of 3400-3407, which matched), the chapter's lead made it a declared per-run
# rule instead: a seed whose runs cannot have controls of the erasure's size is left out of steerable's statistic,
# decided by this geometry alone, and variance_matched asks it of a share of the seeds (claims.MATCHED_SEED_SHARE),
# so the seeds grew from 8 to 10 (3500-3509) for the contract's 8 units to survive it.
CONTROL_CEILING = [
    dict(zip(("condition", "seed", "change_share", "delta_variance_share", "complement_over_change",
              "control_dimensions", "miss", "miss_on_eval"), row))
    for row in (
        ("parity_aux", 0, 0.345, 0.554, 1.292, 5, 1.7e-8, 0.063),
        ("parity_aux", 1, 0.339, 0.527, 1.396, 4, 1.6e-8, 0.006),
        ("parity_aux", 2, 0.331, 0.458, 1.638, 3, 1.9e-8, 0.054),
        ("parity_aux", 3, 0.350, 0.564, 1.246, 5, 1.6e-8, 0.028),
        ("parity_aux", 4, 0.326, 0.549, 1.383, 3, 2.1e-8, 0.081),
        ("parity_aux", 5, 0.257, 0.351, 2.526, 1, 4.6e-8, 0.061),
        ("parity_aux", 6, 0.341, 0.504, 1.452, 3, 1.4e-8, 0.027),
        ("parity_aux", 7, 0.372, 0.611, 1.046, 11, 9.0e-9, 0.007),
        ("parity_aux", 2950, 0.417, 0.654, 0.830, 47, 0.170, 0.180),
        ("parity_aux", 2951, 0.378, 0.585, 1.098, 8, 1.6e-8, 0.019),
        ("parity_aux", 2952, 0.314, 0.449, 1.754, 3, 1.9e-8, 0.049),
        ("parity_aux", 2953, 0.343, 0.549, 1.315, 4, 1.6e-8, 0.019),
        ("plain", 0, 0.050, 0.204, 16.005, 1, 2.5e-8, 0.050),
        ("plain", 1, 0.050, 0.231, 15.300, 1, 3.0e-8, 0.120),
        ("plain", 2, 0.146, 0.257, 5.107, 1, 2.4e-8, 0.052),
        ("plain", 3, 0.066, 0.225, 11.828, 1, 1.7e-8, 0.100),
        ("plain", 4, 0.042, 0.253, 17.624, 1, 2.1e-8, 0.042),
        ("plain", 5, 0.084, 0.192, 9.666, 1, 2.7e-8, 0.074),
        ("plain", 6, 0.063, 0.184, 12.954, 1, 3.5e-8, 0.068),
        ("plain", 7, 0.046, 0.337, 14.559, 1, 2.3e-8, 0.053),
        ("plain", 2950, 0.044, 0.232, 17.402, 1, 2.6e-8, 0.062),
        ("plain", 2951, 0.055, 0.347, 11.954, 1, 2.5e-8, 0.110),
        ("plain", 2952, 0.046, 0.298, 15.293, 1, 2.0e-8, 0.110),
        ("plain", 2953, 0.067, 0.178, 12.213, 1, 3.3e-8, 0.080),
    )]
"""Why steerable's controls miss, on the calibration seeds (:data:`CALIBRATION_SEEDS` and
:data:`ABLATION_CALIBRATION_SEEDS`, both conditions), read after the verdict on 3400-3407 was seen: the erasure's
mean squared change after block 1 over the stream's variance there, the share of that variance along the parity
classes' mean difference δ, what the whole complement of δ carries over the erasure's change (below 1: no control
exists), each run's largest control dimensions, the largest relative miss of a control's change on the stories the
controls were solved on (what `variance_matched` reads) and on the "eval" stories where the edits act. Recorded when
measured, not re-measured by the notebook, which prints it; nothing in steerable's declaration changed after it."""

config = make_config({
    scale: dict(train, model=model, seeds=seeds,
                calibration_seeds=[*CALIBRATION_SEEDS, *ABLATION_CALIBRATION_SEEDS], length_factor=2, n_eval=n_eval,
                n_probe=n_probe, early_layer=1, min_errors=30, n_patch=n_patch, n_ablation_controls=n_controls)
    for (scale, train), model, seeds, n_eval, n_probe, n_patch, n_controls in zip(
        TRAIN_PRESETS.items(), (TINY_MODEL, TINY_MODEL, "openai-community/gpt2"),
        ([100], list(range(3500, 3510)), list(range(100, 110))),
        (200, 2000, 4000), (100, 500, 2000), (20, 200, 400), (4, 8, 16))
},
    group_n=one_of(*SUPPORTED_N), preset=one_of(*tinylm.PRESETS), n_layers=COUNT, train_length=COUNT,
    start_length=COUNT, ramp=FRACTION, batch_size=COUNT, steps=COUNT, lr=POSITIVE, parity_weight=POSITIVE,
    parity_layer=INDEX, seeds=SEED, calibration_seeds=SEED, length_factor=COUNT, n_eval=COUNT, n_probe=COUNT, early_layer=INDEX, min_errors=NONNEGATIVE,
    n_patch=COUNT, n_ablation_controls=COUNT)


PRESETS_BY_GROUP = {3: TRAIN_PRESETS, 5: S5_PRESETS}


def s5_config(scale: str, **overrides):
    """The settings of the S5 run at `scale`: the scale's, with :data:`S5_TRAIN` over them (then `overrides`)."""
    return config(scale, **(S5_TRAIN[scale] | {k: v for k, v in overrides.items() if v is not None}))


def eval_length(cfg) -> int:
    return cfg.length_factor * cfg.train_length
