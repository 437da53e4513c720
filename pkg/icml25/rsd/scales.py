"""RSD's settings at each scale and the constants its decoding shares."""

from __future__ import annotations

from ..core import arithmetic, tinylm
from ..core.config import COUNT, FRACTION, POSITIVE, SEED, make_config, one_of


DELIMITER = arithmetic.STEP_DELIMITER
MAX_STEPS = 48  # a safety cap; every step writes at least one token, so MAX_NEW_TOKENS ends a row first
MAX_NEW_TOKENS = 48  # the same budget as reasoners.solve
PATIENCE = 5  # the official code's batch-level patience: rounds without a newly finished problem before it stops

DRAFT_MODEL, TARGET_MODEL = "rsd-draft", "rsd-target"  # the chapter's own pair (`pair`; smoke and ci)
#: the noisy oracle flips each verdict with this probability; with symmetric flips its ROC AUC is 1 − ε = 0.9,
#: above the PRM-quality bar every graded PRM must pass (`claims.PRM_AUC_MIN`)
NOISY_EPSILON = 0.1
#: the budget on target calls that sets each PRM's δ (the paper's: δ is the largest threshold meeting it): the target
#: may write at most this share of the steps, as measured on a held-out calibration split. It was 0.3 until the
#: verdicts on seeds 200-207, where the draft's wrong steps on the calibration split (a 0/1 PRM's zeros) outnumbered it
#: on some seeds, so δ = 0 and RSD was the draft alone; on calibration seeds 0-4 the draft's step error there is about
#: 0.25-0.3 (the noisy oracle's zeros about 0.3-0.34), so 0.4 holds them with room. On seeds 304 and 307 they
#: overflowed 0.4 too; the rule now spends the budget on a random share of those steps instead (`floor_share`).
TARGET_CALL_BUDGET = 0.4
#: the `prm_preset` of a learned PRM that starts from a copy of the draft's weights (so it is the draft's size)
FROM_DRAFT = "draft"
#: rollouts per optimiser step of the learned PRM (each labels all of its steps at once)
PRM_BATCH = 64

# The learned PRM's training (issue 50). On verdict seeds 1600-1607 the PRM of the design before (a query token after
# one step, one training example per step, 1500 rollouts, 300 steps at lr 3e-3) reached the quality bar (step ROC
# AUC >= 0.8 on held-out draft rollouts) on 3 of 8 seeds. Measured on calibration seeds 0-4 only, before any verdict
# seed of the new design ran (held-out AUC on the `rsd-prm-eval` rollouts the precondition reads; training-rollout
# AUC on 300 of the PRM's own training problems; one thread, several calibrations at once on a shared 2-core
# machine, so the seconds are rough; the old design's are its two timed runs on seed 2, below):
# * the old design's held-out AUC, read every 50 steps, is flat after about 100 steps on seeds 0, 2, 3 and 4 (seed 1
#   still rises, to 0.788), and its AUC on its own training rollouts is within 0.03 of it: it underfits what it
#   is shown. 59-68% of the draft's sampled training steps are wrong, most of them after an earlier error (where
#   the step's own arithmetic can be right although it is off the true chain);
# * labelling every step of a rollout in one pass (a value head at each step's last token, as the paper's PRM
#   scores a step, with a class-weighted loss) on the same 1500 rollouts: at lr 1e-3 it underfits the same way;
#   trained longer (600 steps) it fits its training rollouts (AUC 0.83-0.91) better than held-out ones
#   (0.78-0.84): it overfits 1500 rollouts;
# * on 6000 rollouts the training and held-out AUCs agree; lr was chosen from 1e-3, 3e-3 and 1e-2 at 600 steps by
#   the lowest seed; 400 steps on 4000 rollouts and 1000 steps on 6000 were the cheaper and the dearer neighbours.
# The setting kept is the cheapest whose lowest calibration seed is well above the bar: 6000 rollouts, 600 steps of
# 64 rollouts at lr 3e-3, the schedule's fixed length (warm-up, cosine decay), no stop at an evaluation; 1000 steps
# raised the lowest seed by 0.003 for about 1.8 times the seconds. Timed alternately on seed 2 (one thread, same
# load): the old design 34.6 and 25.6 s, this one 69.1 and 58.3 s, about 2.1 times as much. In the last build the
# old PRM took 15-34 s of a seed's warm-up and its pair about 200 s, so a seed's warm-up grows by roughly a tenth.
PRM_CALIBRATION = (
    {"design": "query token after one step (before)", "problems": 1500, "steps": 300, "lr": 0.003,
     "auc": {0: 0.817, 1: 0.788, 2: 0.818, 3: 0.84, 4: 0.839},
     "train_auc": {1: 0.803, 2: 0.848, 3: 0.854, 4: 0.861}, "seconds": 30.1},
    {"design": "value head at step ends, class-weighted", "problems": 1500, "steps": 300, "lr": 0.001,
     "auc": {0: 0.804},
     "train_auc": {0: 0.799}, "seconds": 27.0},
    {"design": "value head at step ends, class-weighted", "problems": 1500, "steps": 600, "lr": 0.003,
     "auc": {0: 0.783, 1: 0.831},
     "train_auc": {0: 0.876, 1: 0.907}, "seconds": 44.3},
    {"design": "value head at step ends, class-weighted", "problems": 1500, "steps": 600, "lr": 0.01,
     "auc": {0: 0.84, 1: 0.788},
     "train_auc": {0: 0.905, 1: 0.828}, "seconds": 44.5},
    {"design": "value head at step ends, class-weighted", "problems": 6000, "steps": 600, "lr": 0.001,
     "auc": {0: 0.819, 1: 0.785, 2: 0.839, 3: 0.854, 4: 0.859},
     "train_auc": {0: 0.803, 1: 0.797, 2: 0.822, 3: 0.854, 4: 0.851}, "seconds": 61.4},
    {"design": "value head at step ends, class-weighted", "problems": 6000, "steps": 600, "lr": 0.01,
     "auc": {0: 0.823, 1: 0.859, 3: 0.846, 4: 0.857},
     "train_auc": {0: 0.822, 1: 0.876, 3: 0.858, 4: 0.867}, "seconds": 50.5},
    {"design": "value head at step ends, class-weighted", "problems": 4000, "steps": 400, "lr": 0.003,
     "auc": {0: 0.825, 1: 0.829, 2: 0.822, 3: 0.869, 4: 0.859},
     "train_auc": {0: 0.824, 1: 0.873, 2: 0.873, 3: 0.845, 4: 0.845}, "seconds": 39.2},
    {"design": "value head at step ends, class-weighted", "problems": 6000, "steps": 600, "lr": 0.003,
     "auc": {0: 0.842, 1: 0.848, 2: 0.842, 3: 0.862, 4: 0.861},
     "train_auc": {0: 0.83, 1: 0.859, 2: 0.83, 3: 0.864, 4: 0.861}, "seconds": 52.8},
    {"design": "value head at step ends, class-weighted", "problems": 6000, "steps": 1000, "lr": 0.003,
     "auc": {0: 0.863, 1: 0.876, 2: 0.845, 3: 0.862, 4: 0.873},
     "train_auc": {0: 0.851, 1: 0.887, 2: 0.828, 3: 0.878, 4: 0.876}, "seconds": 94.4},
)

# `threshold_matters`' baseline (issue 50). After the verdicts on seeds 1700-1707, a referee's run on fresh seeds
# 1800-1807 found that a router that never reads a step (longest problems' later steps first) also beats random
# acceptance at RSD's rate, so "RSD beats random acceptance" does not show that the PRM's reward matters. Measured on
# calibration seeds 0-4 only, before any verdict seed of the new design ran: test accuracy (the seed's own 200 test
# problems) of each router that never reads a step, each calling the target on the share of the test's steps on
# which RSD with the noisy oracle or the learned PRM called it (its cut and tie split set on the test problems' own
# step positions: `routers.router_rule`), beside RSD and random acceptance at RSD's rate. The pairs are the ones the
# PRM design was calibrated on (trained by the current pair design, under an earlier zoo address), the learned PRM
# trained with the ci settings; random ties are drawn from other streams than the package's. Routers, with k the
# problem's number of operations and j the step's index: `position` (`routers.PositionRouter`), `length`
# (`routers.LengthRouter`), `ops_then_index` (r = −(10k + j), the referee's), `ops_then_early` (−(10k − j)), `ops`
# (−k, ties split per step), `index_then_ops` (−(10j + k)) and `index` (−j). The position router is the most
# accurate at both rates (mean 0.704 and 0.705 against at most 0.637 for the label-free ones) and is the declared
# baseline; the length router, the best label-free one, is reported beside it. The largest gap between a router's
# and RSD's rate of accepted steps on the test was `largest_rate_gap`.
ROUTERS = {"position": "position router (right-step share at (k, j) on the calibration split)",
           "length": "length router (whole problems, longest first)",
           "ops_then_index": "longest problems' later steps first (the referee's)",
           "ops_then_early": "longest problems' earlier steps first", "ops": "longest problems first",
           "index_then_ops": "later steps first, then longer problems", "index": "later steps first"}
ROUTER_CALIBRATION = {
    "seeds": [0, 1, 2, 3, 4],
    "rsd": {"noisy": [0.855, 0.825, 0.855, 0.825, 0.865], "learned": [0.725, 0.65, 0.605, 0.73, 0.69]},
    "random": {"noisy": [0.63, 0.59, 0.555, 0.6, 0.605], "learned": [0.615, 0.545, 0.535, 0.6, 0.62]},
    "accuracy": {
        "position": {"noisy": [0.69, 0.71, 0.665, 0.74, 0.715], "learned": [0.67, 0.715, 0.67, 0.745, 0.725]},
        "length": {"noisy": [0.695, 0.585, 0.58, 0.625, 0.66], "learned": [0.695, 0.585, 0.58, 0.65, 0.675]},
        "ops_then_index": {"noisy": [0.67, 0.56, 0.565, 0.625, 0.655], "learned": [0.66, 0.545, 0.565, 0.665, 0.66]},
        "ops_then_early": {"noisy": [0.69, 0.565, 0.585, 0.61, 0.655], "learned": [0.68, 0.575, 0.575, 0.655, 0.66]},
        "ops": {"noisy": [0.68, 0.56, 0.59, 0.615, 0.655], "learned": [0.685, 0.545, 0.585, 0.675, 0.67]},
        "index_then_ops": {"noisy": [0.63, 0.505, 0.505, 0.615, 0.635],
                           "learned": [0.605, 0.505, 0.495, 0.66, 0.635]},
        "index": {"noisy": [0.6, 0.48, 0.52, 0.575, 0.59], "learned": [0.605, 0.5, 0.49, 0.645, 0.575]},
    },
    # the oracle's threshold minus random acceptance at the oracle's rate, per seed: `claims.ROUTER_MIN_EFFECT`
    "oracle_minus_random": [0.31, 0.345, 0.385, 0.35, 0.35],
    "largest_rate_gap": 0.023,
}

# best-of-N's chain score and the efficiency claims' budget (issue 50). After the verdicts on seeds 2100-2107 (and a
# referee's run on 2600-2607), where beats_parallel_noisy and _learned were inconclusive on their ranking
# precondition and both efficiency claims were decided at a budget that lost the target's accuracy, measured on
# calibration seeds 0-4 only (the pairs and learned PRMs trained by the chapter's current recipe; the 16 draft samples
# of each seed's 200 test problems; the calibration problems of each seed), before any verdict seed of the new
# design ran. `BON_CALIBRATION`: the within-problem ranking AUC of each chain score (`baselines.CHAIN_SCORES`)
# against the samples' final answers ("outcome") and against every step being right ("process"); the share of
# problems with both right and wrong samples; the share of right samples with a wrong step; the learned PRM's step
# AUC on the samples over all steps, among the steps at one (problem, step index), and there for a step after a
# right prefix; best-of-16's accuracy with each chain score. `KEEP_CALIBRATION`: RSD's accuracy and FLOPs / target-only
# on the calibration problems at each budget of `KEEP_BUDGETS` (`decoding.budget_rule`), beside the target's
# accuracy there; `seconds` is the mean time per seed of those runs and of the same grid on the test problems (one
# thread, a shared machine).
BON_CALIBRATION = {
    "seeds": [0, 1, 2, 3, 4],
    "n": 16,
    "outcome": {
        "oracle": {
            "min": [0.764, 0.753, 0.766, 0.772, 0.796],
            "product": [0.764, 0.753, 0.766, 0.772, 0.796],
            "mean": [0.957, 0.954, 0.965, 0.934, 0.954],
            "last": [0.997, 0.996, 1.0, 0.997, 0.996],
        },
        "noisy": {
            "min": [0.689, 0.689, 0.726, 0.707, 0.724],
            "product": [0.689, 0.689, 0.726, 0.707, 0.724],
            "mean": [0.916, 0.906, 0.931, 0.885, 0.923],
            "last": [0.889, 0.901, 0.924, 0.911, 0.906],
        },
        "learned": {
            "min": [0.553, 0.619, 0.607, 0.491, 0.513],
            "product": [0.559, 0.627, 0.616, 0.515, 0.526],
            "mean": [0.568, 0.629, 0.611, 0.519, 0.532],
            "last": [0.512, 0.602, 0.605, 0.588, 0.531],
        },
    },
    "process": {
        "oracle": {
            "min": [1.0, 1.0, 1.0, 1.0, 1.0],
            "product": [1.0, 1.0, 1.0, 1.0, 1.0],
            "mean": [1.0, 1.0, 1.0, 1.0, 1.0],
            "last": [0.881, 0.928, 0.941, 0.934, 0.925],
        },
        "noisy": {
            "min": [0.832, 0.869, 0.903, 0.87, 0.867],
            "product": [0.832, 0.869, 0.903, 0.87, 0.867],
            "mean": [0.955, 0.974, 0.982, 0.984, 0.974],
            "last": [0.786, 0.843, 0.88, 0.874, 0.844],
        },
        "learned": {
            "min": [0.663, 0.755, 0.654, 0.523, 0.556],
            "product": [0.686, 0.765, 0.665, 0.548, 0.573],
            "mean": [0.698, 0.768, 0.658, 0.55, 0.576],
            "last": [0.513, 0.648, 0.634, 0.59, 0.571],
        },
    },
    "problems_with_both": [0.9, 0.9, 0.82, 0.875, 0.815],
    "right_with_wrong_step": [0.352, 0.363, 0.245, 0.285, 0.245],
    "learned_step_auc": [0.833, 0.854, 0.857, 0.845, 0.855],
    "learned_step_auc_within_position": [0.613, 0.668, 0.63, 0.551, 0.551],
    "learned_first_error_auc_within_position": [0.714, 0.739, 0.612, 0.55, 0.562],
    "best_of_16": {
        "oracle": {
            "min": [0.75, 0.675, 0.735, 0.66, 0.71],
            "product": [0.75, 0.675, 0.735, 0.66, 0.71],
            "mean": [0.87, 0.84, 0.925, 0.805, 0.835],
            "last": [0.945, 0.92, 0.965, 0.93, 0.905],
        },
        "noisy": {
            "min": [0.645, 0.595, 0.66, 0.61, 0.655],
            "product": [0.645, 0.595, 0.66, 0.61, 0.655],
            "mean": [0.865, 0.78, 0.855, 0.73, 0.8],
            "last": [0.805, 0.72, 0.79, 0.76, 0.77],
        },
        "learned": {
            "min": [0.345, 0.35, 0.44, 0.27, 0.36],
            "product": [0.34, 0.325, 0.44, 0.29, 0.365],
            "mean": [0.345, 0.34, 0.455, 0.3, 0.355],
            "last": [0.335, 0.305, 0.42, 0.32, 0.38],
        },
    },
}
#: each PRM's chain score for best-of-N: the one with the highest mean within-problem AUC against the final answers
#: on the calibration seeds (the strongest best-of-N baseline that PRM gives; the paper's own could not be checked)
BON_CHAIN = {prm: max(chains, key=lambda c: sum(chains[c]) / len(chains[c]))
             for prm, chains in BON_CALIBRATION["outcome"].items()}
# The implicit PRM (Yuan et al.; `implicit`), calibration only (issue 50): it decides no claim and runs in no warm-up.
# Measured once on 2026-12-05, on calibration seeds 0-4 only (the zoo's draft of each seed at ci; no verdict seed), by
# `implicit.calibrate_implicit`; recorded here, not re-measured by the build. Each record is one training setting (β,
# lr, optimiser steps of 64 rollouts, on the learned PRM's 6000 rollouts of the draft, labelled by final answer only)
# read one way (`implicit.READINGS`), with per seed: the held-out step ROC AUC against the oracle's labels (`auc`, as
# `prm_quality` reads it), the within-problem ranking AUC of every chain score against the final answers on the
# draft's 16 samples of the seed's test problems (`rank`, as `BON_CALIBRATION` and `prm_ranks` read it), and the
# training seconds (one thread, the rollouts' sampling included; one job at a time on a shared 2-core machine). The
# grid ran in two stages. First β 0.05 and 0.5 × lr 3e-4, 1e-3, 3e-3 × 300 and 600 steps (and lr 1e-4 at β 0.05,
# 600 steps) on seeds 0 and 1, single reading only: its step AUC was 0.59-0.68, far under the bar, while its best
# ranking AUC was 0.82 on seed 0 and 0.72 on seed 1. Then, after that was seen, the accumulative reading was added
# (the same trained PRMs read the other way, as the official step-error script reads them) and five settings ran on
# seeds 0-4 with both readings: the three with the best mean ranking AUC on seeds 0-1 and two past the grid's edge
# (lr 1e-2; 1200 steps). Every run repeated on a seed gave the same numbers (training is deterministic on one
# thread). `implicit.kept_setting`'s rule was written after the first run on seed 0 and extended to the readings
# after the first stage; it reads the same seeds it chooses on, so what the kept record meets here is optimistic for
# fresh seeds.
IMPLICIT_PRM_CALIBRATION = (
    {"beta": 0.05, "lr": 0.0001, "steps": 600, "reading": "single",
     "auc": {0: 0.6, 1: 0.665},
     "rank": {"min": {0: 0.595, 1: 0.621},
              "product": {0: 0.612, 1: 0.624},
              "mean": {0: 0.632, 1: 0.62},
              "last": {0: 0.426, 1: 0.483}},
     "seconds": {0: 18.3, 1: 20.9}},
    {"beta": 0.05, "lr": 0.0003, "steps": 300, "reading": "single",
     "auc": {0: 0.618, 1: 0.664},
     "rank": {"min": {0: 0.588, 1: 0.633},
              "product": {0: 0.638, 1: 0.627},
              "mean": {0: 0.651, 1: 0.623},
              "last": {0: 0.404, 1: 0.505}},
     "seconds": {0: 11.1, 1: 12.5}},
    {"beta": 0.05, "lr": 0.0003, "steps": 600, "reading": "single",
     "auc": {0: 0.617, 1: 0.651},
     "rank": {"min": {0: 0.635, 1: 0.664},
              "product": {0: 0.645, 1: 0.666},
              "mean": {0: 0.67, 1: 0.662},
              "last": {0: 0.416, 1: 0.5}},
     "seconds": {0: 19.6, 1: 21.2}},
    {"beta": 0.05, "lr": 0.001, "steps": 300, "reading": "single",
     "auc": {0: 0.607, 1: 0.609},
     "rank": {"min": {0: 0.654, 1: 0.65},
              "product": {0: 0.673, 1: 0.674},
              "mean": {0: 0.68, 1: 0.677},
              "last": {0: 0.432, 1: 0.534}},
     "seconds": {0: 12.5, 1: 12.9}},
    {"beta": 0.05, "lr": 0.001, "steps": 600, "reading": "single",
     "auc": {0: 0.645, 1: 0.611},
     "rank": {"min": {0: 0.698, 1: 0.683},
              "product": {0: 0.7, 1: 0.689},
              "mean": {0: 0.717, 1: 0.687},
              "last": {0: 0.445, 1: 0.507}},
     "seconds": {0: 20.4, 1: 20.7}},
    {"beta": 0.05, "lr": 0.003, "steps": 300, "reading": "single",
     "auc": {0: 0.67, 1: 0.637},
     "rank": {"min": {0: 0.669, 1: 0.627},
              "product": {0: 0.677, 1: 0.676},
              "mean": {0: 0.697, 1: 0.675},
              "last": {0: 0.48, 1: 0.549}},
     "seconds": {0: 12.3, 1: 13.5}},
    {"beta": 0.05, "lr": 0.003, "steps": 600, "reading": "single",
     "auc": {0: 0.659, 1: 0.679, 2: 0.729, 3: 0.617, 4: 0.633},
     "rank": {"min": {0: 0.768, 1: 0.687, 2: 0.589, 3: 0.559, 4: 0.547},
              "product": {0: 0.786, 1: 0.7, 2: 0.624, 3: 0.558, 4: 0.54},
              "mean": {0: 0.805, 1: 0.698, 2: 0.63, 3: 0.562, 4: 0.543},
              "last": {0: 0.498, 1: 0.627, 2: 0.52, 3: 0.529, 4: 0.528}},
     "seconds": {0: 20.7, 1: 20.2, 2: 20.8, 3: 20.4, 4: 20.7}},
    {"beta": 0.05, "lr": 0.003, "steps": 600, "reading": "accumulative",
     "auc": {0: 0.824, 1: 0.827, 2: 0.829, 3: 0.752, 4: 0.694},
     "rank": {"min": {0: 0.801, 1: 0.699, 2: 0.625, 3: 0.561, 4: 0.543},
              "product": {0: 0.797, 1: 0.693, 2: 0.625, 3: 0.559, 4: 0.54},
              "mean": {0: 0.803, 1: 0.692, 2: 0.624, 3: 0.562, 4: 0.533},
              "last": {0: 0.803, 1: 0.7, 2: 0.625, 3: 0.561, 4: 0.543}},
     "seconds": {0: 20.7, 1: 20.2, 2: 20.8, 3: 20.4, 4: 20.7}},
    {"beta": 0.5, "lr": 0.0003, "steps": 300, "reading": "single",
     "auc": {0: 0.614, 1: 0.586},
     "rank": {"min": {0: 0.708, 1: 0.698},
              "product": {0: 0.716, 1: 0.692},
              "mean": {0: 0.729, 1: 0.693},
              "last": {0: 0.433, 1: 0.524}},
     "seconds": {0: 12.5, 1: 13.3}},
    {"beta": 0.5, "lr": 0.0003, "steps": 600, "reading": "single",
     "auc": {0: 0.61, 1: 0.607},
     "rank": {"min": {0: 0.759, 1: 0.705},
              "product": {0: 0.743, 1: 0.697},
              "mean": {0: 0.771, 1: 0.696},
              "last": {0: 0.445, 1: 0.529}},
     "seconds": {0: 20.7, 1: 21.1}},
    {"beta": 0.5, "lr": 0.001, "steps": 300, "reading": "single",
     "auc": {0: 0.596, 1: 0.617},
     "rank": {"min": {0: 0.756, 1: 0.708},
              "product": {0: 0.779, 1: 0.687},
              "mean": {0: 0.8, 1: 0.69},
              "last": {0: 0.366, 1: 0.55}},
     "seconds": {0: 12.8, 1: 13.0}},
    {"beta": 0.5, "lr": 0.001, "steps": 600, "reading": "single",
     "auc": {0: 0.632, 1: 0.632, 2: 0.682, 3: 0.654, 4: 0.553},
     "rank": {"min": {0: 0.769, 1: 0.72, 2: 0.641, 3: 0.657, 4: 0.603},
              "product": {0: 0.784, 1: 0.723, 2: 0.654, 3: 0.65, 4: 0.581},
              "mean": {0: 0.797, 1: 0.719, 2: 0.658, 3: 0.647, 4: 0.577},
              "last": {0: 0.448, 1: 0.538, 2: 0.546, 3: 0.458, 4: 0.52}},
     "seconds": {0: 20.2, 1: 21.5, 2: 20.5, 3: 21.3, 4: 20.6}},
    {"beta": 0.5, "lr": 0.001, "steps": 600, "reading": "accumulative",
     "auc": {0: 0.752, 1: 0.768, 2: 0.755, 3: 0.755, 4: 0.697},
     "rank": {"min": {0: 0.797, 1: 0.716, 2: 0.655, 3: 0.657, 4: 0.573},
              "product": {0: 0.788, 1: 0.714, 2: 0.648, 3: 0.644, 4: 0.566},
              "mean": {0: 0.797, 1: 0.715, 2: 0.645, 3: 0.649, 4: 0.568},
              "last": {0: 0.794, 1: 0.719, 2: 0.654, 3: 0.648, 4: 0.579}},
     "seconds": {0: 20.2, 1: 21.5, 2: 20.5, 3: 21.3, 4: 20.6}},
    {"beta": 0.5, "lr": 0.003, "steps": 300, "reading": "single",
     "auc": {0: 0.645, 1: 0.588},
     "rank": {"min": {0: 0.769, 1: 0.705},
              "product": {0: 0.773, 1: 0.697},
              "mean": {0: 0.787, 1: 0.692},
              "last": {0: 0.469, 1: 0.519}},
     "seconds": {0: 12.9, 1: 12.8}},
    {"beta": 0.5, "lr": 0.003, "steps": 600, "reading": "single",
     "auc": {0: 0.66, 1: 0.627, 2: 0.664, 3: 0.612, 4: 0.543},
     "rank": {"min": {0: 0.813, 1: 0.719, 2: 0.606, 3: 0.654, 4: 0.575},
              "product": {0: 0.804, 1: 0.71, 2: 0.622, 3: 0.649, 4: 0.572},
              "mean": {0: 0.818, 1: 0.708, 2: 0.611, 3: 0.637, 4: 0.575},
              "last": {0: 0.413, 1: 0.56, 2: 0.495, 3: 0.473, 4: 0.512}},
     "seconds": {0: 20.1, 1: 21.3, 2: 20.1, 3: 20.5, 4: 20.3}},
    {"beta": 0.5, "lr": 0.003, "steps": 600, "reading": "accumulative",
     "auc": {0: 0.778, 1: 0.783, 2: 0.759, 3: 0.745, 4: 0.634},
     "rank": {"min": {0: 0.828, 1: 0.719, 2: 0.621, 3: 0.646, 4: 0.566},
              "product": {0: 0.799, 1: 0.716, 2: 0.619, 3: 0.641, 4: 0.555},
              "mean": {0: 0.809, 1: 0.714, 2: 0.614, 3: 0.636, 4: 0.55},
              "last": {0: 0.821, 1: 0.713, 2: 0.62, 3: 0.642, 4: 0.572}},
     "seconds": {0: 20.1, 1: 21.3, 2: 20.1, 3: 20.5, 4: 20.3}},
    {"beta": 0.5, "lr": 0.003, "steps": 1200, "reading": "single",
     "auc": {0: 0.668, 1: 0.637, 2: 0.671, 3: 0.631, 4: 0.583},
     "rank": {"min": {0: 0.81, 1: 0.718, 2: 0.646, 3: 0.715, 4: 0.609},
              "product": {0: 0.805, 1: 0.719, 2: 0.643, 3: 0.693, 4: 0.628},
              "mean": {0: 0.82, 1: 0.724, 2: 0.641, 3: 0.688, 4: 0.624},
              "last": {0: 0.471, 1: 0.525, 2: 0.519, 3: 0.495, 4: 0.508}},
     "seconds": {0: 37.6, 1: 38.2, 2: 36.8, 3: 37.9, 4: 37.4}},
    {"beta": 0.5, "lr": 0.003, "steps": 1200, "reading": "accumulative",
     "auc": {0: 0.779, 1: 0.81, 2: 0.78, 3: 0.821, 4: 0.666},
     "rank": {"min": {0: 0.819, 1: 0.727, 2: 0.644, 3: 0.696, 4: 0.641},
              "product": {0: 0.807, 1: 0.72, 2: 0.646, 3: 0.695, 4: 0.621},
              "mean": {0: 0.816, 1: 0.722, 2: 0.642, 3: 0.694, 4: 0.628},
              "last": {0: 0.818, 1: 0.724, 2: 0.644, 3: 0.692, 4: 0.627}},
     "seconds": {0: 37.6, 1: 38.2, 2: 36.8, 3: 37.9, 4: 37.4}},
    {"beta": 0.5, "lr": 0.01, "steps": 600, "reading": "single",
     "auc": {0: 0.71, 1: 0.586, 2: 0.658, 3: 0.571, 4: 0.52},
     "rank": {"min": {0: 0.77, 1: 0.685, 2: 0.579, 3: 0.512, 4: 0.541},
              "product": {0: 0.776, 1: 0.701, 2: 0.591, 3: 0.517, 4: 0.551},
              "mean": {0: 0.785, 1: 0.701, 2: 0.59, 3: 0.521, 4: 0.551},
              "last": {0: 0.453, 1: 0.548, 2: 0.496, 3: 0.458, 4: 0.497}},
     "seconds": {0: 21.0, 1: 20.9, 2: 20.9, 3: 20.7, 4: 20.8}},
    {"beta": 0.5, "lr": 0.01, "steps": 600, "reading": "accumulative",
     "auc": {0: 0.798, 1: 0.782, 2: 0.752, 3: 0.732, 4: 0.607},
     "rank": {"min": {0: 0.791, 1: 0.704, 2: 0.589, 3: 0.517, 4: 0.538},
              "product": {0: 0.766, 1: 0.705, 2: 0.587, 3: 0.506, 4: 0.531},
              "mean": {0: 0.772, 1: 0.705, 2: 0.586, 3: 0.5, 4: 0.533},
              "last": {0: 0.788, 1: 0.7, 2: 0.587, 3: 0.517, 4: 0.55}},
     "seconds": {0: 21.0, 1: 20.9, 2: 20.9, 3: 20.7, 4: 20.8}},
)
#: A no-stake referee's probe of the kept setting trained longer (after the record above was committed; nothing in
#: the grid or the rule changed after it): β 0.05, lr 3e-3, accumulative reading, 2400 steps, on the same calibration
#: seeds, transcribed from its report. It chose 2400 steps after seeing seed 4's training loss still falling at 600
#: and 1200, on the seeds it reports on, so it is optimistic for fresh seeds. Its ranking AUC is the "mean" chain's
#: (the only one it read). It also re-ran the kept record on seeds 0 and 4 and got the recorded numbers.
IMPLICIT_REFEREE_2400 = {"beta": 0.05, "lr": 0.003, "steps": 2400, "reading": "accumulative",
                         "auc": {0: 0.888, 1: 0.851, 2: 0.805, 3: 0.761, 4: 0.819},
                         "rank": {"mean": {0: 0.83, 1: 0.743, 2: 0.699, 3: 0.657, 4: 0.657}},
                         "seconds_range": (65, 71)}

#: the target-call budgets among which the efficiency claims' budget is chosen per seed and PRM
KEEP_BUDGETS = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
KEEP_CALIBRATION = {
    "seeds": [0, 1, 2, 3, 4],
    "budgets": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "target_accuracy": [0.85, 0.857, 0.9, 0.917, 0.887],
    "accuracy": {
        "noisy": [
            [0.653, 0.777, 0.833, 0.837, 0.84, 0.84, 0.847, 0.843],
            [0.69, 0.833, 0.847, 0.85, 0.86, 0.86, 0.863, 0.86],
            [0.657, 0.8, 0.843, 0.843, 0.86, 0.857, 0.88, 0.883],
            [0.663, 0.823, 0.86, 0.877, 0.877, 0.88, 0.9, 0.897],
            [0.703, 0.883, 0.887, 0.89, 0.89, 0.877, 0.873, 0.877],
        ],
        "learned": [
            [0.533, 0.607, 0.663, 0.68, 0.73, 0.79, 0.83, 0.853],
            [0.52, 0.58, 0.66, 0.727, 0.783, 0.817, 0.84, 0.857],
            [0.48, 0.533, 0.607, 0.67, 0.743, 0.823, 0.877, 0.9],
            [0.62, 0.67, 0.7, 0.743, 0.813, 0.88, 0.917, 0.917],
            [0.58, 0.607, 0.67, 0.727, 0.773, 0.86, 0.893, 0.89],
        ],
    },
    "flop_ratio": {
        "noisy": [
            [0.795, 0.844, 0.911, 0.997, 1.054, 1.102, 1.143, 1.171],
            [0.763, 0.821, 0.913, 0.99, 1.049, 1.102, 1.142, 1.173],
            [0.815, 0.856, 0.945, 1.019, 1.072, 1.112, 1.148, 1.174],
            [0.786, 0.842, 0.916, 0.996, 1.068, 1.119, 1.15, 1.172],
            [0.773, 0.822, 0.902, 0.987, 1.041, 1.097, 1.133, 1.164],
        ],
        "learned": [
            [0.777, 0.9, 0.989, 1.047, 1.109, 1.199, 1.269, 1.338],
            [0.705, 0.848, 0.955, 1.061, 1.135, 1.24, 1.308, 1.352],
            [0.687, 0.832, 0.938, 1.046, 1.143, 1.215, 1.276, 1.335],
            [0.783, 0.922, 1.016, 1.086, 1.169, 1.221, 1.274, 1.329],
            [0.739, 0.824, 0.919, 1.036, 1.131, 1.209, 1.289, 1.336],
        ],
    },
    "seconds": 17.697,
}

# Why efficiency_noisy's label turned on the seeds drawn (issue 50). Seen before: its FLOP ratio, charged as a
# draft-sized PRM, was 1.052 [0.910, 1.195] on seeds 3900-3907, 0.978 [0.895, 1.061] on 4900-4907 (a referee's
# re-analysis) and 1.095 [0.966, 1.223] on 5900-5907 (refuted), an estimate about one half-width from the bar 0.9.
# Measured on those 24 seeds' pairs (the chapter's runs repeated outside the build, same problems, the noisy oracle
# charged as in the claim): RSD with the noisy oracle at every budget of `KEEP_BUDGETS`, on the seed's 300
# calibration problems (which problems it and the target get right) and on its 200 test problems (each problem's
# FLOPs), so that `experiment.keep_spread` reads, per seed, the budget kept, the test's FLOP ratio at every budget
# (`ratios`), and the sd of the ratio at the kept budget over 2000 resamples of the test problems (`test_sd`) and
# over 2000 resamples of the calibration problems, each read at the budget it keeps (`calibration_sd`; the share of
# resamples keeping the seed's own budget: `same_budget`). Every seed reproduces the claim's per-seed ratio.
KEEP_SPREAD = {
    "budgets": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "n_calibration": 300,
    "n_test": 200,
    "resamples": 2000,
    "sets": {
        "3900-3907": {
            3900: {"budget": 0.3, "ratios": [0.852, 0.951, 1.075, 1.174, 1.220, 1.269, 1.323, 1.357],
                   "test_sd": 0.0334, "calibration_sd": 0.0981, "same_budget": 0.73},
            3901: {"budget": 0.4, "ratios": [0.904, 0.962, 1.054, 1.147, 1.226, 1.280, 1.321, 1.356],
                   "test_sd": 0.0250, "calibration_sd": 0.1361, "same_budget": 0.21},
            3902: {"budget": 0.3, "ratios": [0.729, 0.906, 1.037, 1.173, 1.245, 1.298, 1.330, 1.360],
                   "test_sd": 0.0306, "calibration_sd": 0.0756, "same_budget": 0.92},
            3903: {"budget": 0.3, "ratios": [0.905, 0.953, 1.065, 1.139, 1.217, 1.290, 1.326, 1.356],
                   "test_sd": 0.0287, "calibration_sd": 0.0441, "same_budget": 0.92},
            3904: {"budget": 0.3, "ratios": [0.927, 0.957, 1.072, 1.155, 1.210, 1.275, 1.333, 1.354],
                   "test_sd": 0.0275, "calibration_sd": 0.0372, "same_budget": 0.97},
            3905: {"budget": 0.3, "ratios": [0.892, 0.956, 1.049, 1.156, 1.223, 1.284, 1.333, 1.368],
                   "test_sd": 0.0278, "calibration_sd": 0.1409, "same_budget": 0.78},
            3906: {"budget": 0.8, "ratios": [0.867, 0.966, 1.103, 1.159, 1.212, 1.284, 1.320, 1.357],
                   "test_sd": 0.0071, "calibration_sd": 0.0509, "same_budget": 0.59},
            3907: {"budget": 0.8, "ratios": [0.905, 0.968, 1.086, 1.167, 1.246, 1.288, 1.322, 1.364],
                   "test_sd": 0.0081, "calibration_sd": 0.1342, "same_budget": 0.50},
        },
        "4900-4907": {
            4900: {"budget": 0.4, "ratios": [0.922, 0.962, 1.055, 1.159, 1.233, 1.269, 1.326, 1.357],
                   "test_sd": 0.0238, "calibration_sd": 0.1043, "same_budget": 0.28},
            4901: {"budget": 0.4, "ratios": [0.955, 1.012, 1.122, 1.193, 1.252, 1.302, 1.326, 1.364],
                   "test_sd": 0.0198, "calibration_sd": 0.1272, "same_budget": 0.30},
            4902: {"budget": 0.3, "ratios": [0.785, 0.918, 1.032, 1.126, 1.215, 1.282, 1.325, 1.360],
                   "test_sd": 0.0312, "calibration_sd": 0.2052, "same_budget": 0.56},
            4903: {"budget": 0.2, "ratios": [0.860, 0.980, 1.073, 1.161, 1.257, 1.309, 1.340, 1.366],
                   "test_sd": 0.0325, "calibration_sd": 0.0936, "same_budget": 0.64},
            4904: {"budget": 0.2, "ratios": [0.866, 0.978, 1.087, 1.147, 1.227, 1.284, 1.326, 1.359],
                   "test_sd": 0.0308, "calibration_sd": 0.0495, "same_budget": 0.74},
            4905: {"budget": 0.3, "ratios": [0.867, 0.955, 1.093, 1.163, 1.236, 1.302, 1.339, 1.363],
                   "test_sd": 0.0292, "calibration_sd": 0.0680, "same_budget": 0.89},
            4906: {"budget": 0.3, "ratios": [0.877, 0.964, 1.056, 1.165, 1.242, 1.289, 1.325, 1.364],
                   "test_sd": 0.0278, "calibration_sd": 0.0354, "same_budget": 0.87},
            4907: {"budget": 0.4, "ratios": [0.900, 0.968, 1.084, 1.166, 1.249, 1.293, 1.339, 1.366],
                   "test_sd": 0.0240, "calibration_sd": 0.1097, "same_budget": 0.26},
        },
        "5900-5907": {
            5900: {"budget": 0.3, "ratios": [0.864, 0.967, 1.083, 1.160, 1.225, 1.274, 1.318, 1.357],
                   "test_sd": 0.0294, "calibration_sd": 0.0438, "same_budget": 0.85},
            5901: {"budget": 0.3, "ratios": [0.833, 0.948, 1.078, 1.176, 1.242, 1.289, 1.327, 1.360],
                   "test_sd": 0.0292, "calibration_sd": 0.0666, "same_budget": 0.90},
            5902: {"budget": 0.6, "ratios": [0.881, 0.946, 1.037, 1.136, 1.225, 1.291, 1.332, 1.363],
                   "test_sd": 0.0149, "calibration_sd": 0.1540, "same_budget": 0.18},
            5903: {"budget": 0.3, "ratios": [0.910, 1.000, 1.103, 1.173, 1.229, 1.277, 1.322, 1.357],
                   "test_sd": 0.0254, "calibration_sd": 0.0876, "same_budget": 0.79},
            5904: {"budget": 0.7, "ratios": [0.853, 0.921, 1.024, 1.132, 1.226, 1.281, 1.325, 1.358],
                   "test_sd": 0.0111, "calibration_sd": 0.0972, "same_budget": 0.24},
            5905: {"budget": 0.3, "ratios": [0.908, 1.007, 1.118, 1.193, 1.259, 1.301, 1.342, 1.369],
                   "test_sd": 0.0256, "calibration_sd": 0.1177, "same_budget": 0.61},
            5906: {"budget": 0.3, "ratios": [0.901, 1.007, 1.077, 1.156, 1.232, 1.291, 1.330, 1.361],
                   "test_sd": 0.0264, "calibration_sd": 0.0881, "same_budget": 0.65},
            5907: {"budget": 0.8, "ratios": [0.827, 0.915, 1.020, 1.131, 1.199, 1.270, 1.320, 1.362],
                   "test_sd": 0.0074, "calibration_sd": 0.0463, "same_budget": 0.64},
        },
    },
}

# The pair's design (`pair`) and these settings were chosen on calibration seeds 0-4, the pair's stop rules also on
# calibration seeds 10-19 (`pair.PAIR_CALIBRATION`). Verdict seeds 6900-6907 are fresh; 5900-5907 decided the round
# before efficiency_noisy carried its power line (`KEEP_SPREAD`); 3900-3907 decided the
# round before the noisy oracle was charged as a draft-sized PRM, after which a referee ran 4900-4907; 2800-2807 the
# round before the pair's stop rules changed (every claim inconclusive on the draft's band); 2100-2107 the round before
# best-of-N's chain score and the efficiency claims' budget changed (`BON_CALIBRATION`, `KEEP_CALIBRATION`), after
# which a referee ran 2600-2607; 1700-1707 decided the round before `threshold_matters`' baseline became the position
# router (`ROUTER_CALIBRATION`), after a referee's run on 1800-1807; 1600-1607 the round before the learned PRM's
# training changed (`PRM_CALIBRATION`). Until seeds 1300-1307 every seed was tested on the same problems; now each
# seed draws its own. Seeds 100-102 decided the earlier rounds on the shared pair, seeds 200-207 the round before the
# budget, the learned PRM and the pair's validation schedule changed, seeds 300-307 the round before the budget's
# boundary case (`decoding.floor_share`); 400-403, 700-707 and 2300-2307 were run by referees (all were seen).
_CALIBRATION_SEEDS = [0, 1, 2, 3, 4, *range(10, 20)]
config = make_config({
    "smoke": {"draft_model": DRAFT_MODEL, "target_model": TARGET_MODEL, "seeds": [6900], "calibration_seeds": [0],
              "n_test": 24, "n_calibration": 30, "budget": TARGET_CALL_BUDGET, "deltas": [0.5, 0.7],
              "epsilon": NOISY_EPSILON, "gamma": 4, "bon_n": 3, "target_bon_n": 1, "bon_temperature": 1.0,
              "patience": PATIENCE, "prm_preset": FROM_DRAFT, "prm_problems": 100, "prm_steps": 20, "prm_lr": 3e-3,
              "prm_eval_problems": 30, "keep_budgets": [0.4, 0.8], "toy_samples": 20000, "toy_delta": 0.7},
    "ci": {"draft_model": DRAFT_MODEL, "target_model": TARGET_MODEL, "seeds": list(range(6900, 6908)),
           "calibration_seeds": _CALIBRATION_SEEDS, "n_test": 200, "n_calibration": 300, "budget": TARGET_CALL_BUDGET,
           "deltas": [0.3, 0.5, 0.7, 0.9, 0.97], "epsilon": NOISY_EPSILON, "gamma": 4, "bon_n": 16,
           "target_bon_n": 2, "bon_temperature": 1.0, "patience": PATIENCE, "prm_preset": FROM_DRAFT,
           "prm_problems": 6000, "prm_steps": 600, "prm_lr": 3e-3, "prm_eval_problems": 200,
           "keep_budgets": KEEP_BUDGETS, "toy_samples": 100000, "toy_delta": 0.7},
    "full": {"draft_model": "Qwen/Qwen2.5-Math-1.5B-Instruct", "target_model": "Qwen/Qwen2.5-Math-7B-Instruct",
             "seeds": list(range(6900, 6908)), "calibration_seeds": _CALIBRATION_SEEDS, "n_test": 500,
             "n_calibration": 500, "budget": TARGET_CALL_BUDGET,
             "deltas": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95], "epsilon": NOISY_EPSILON, "gamma": 4,
             "bon_n": 16, "target_bon_n": 4, "bon_temperature": 1.0, "patience": PATIENCE, "prm_preset": FROM_DRAFT,
             "prm_problems": 20000, "prm_steps": 2000, "prm_lr": 3e-3,
             "prm_eval_problems": 500, "keep_budgets": KEEP_BUDGETS, "toy_samples": 1000000, "toy_delta": 0.7},
},
    seeds=SEED, calibration_seeds=SEED, n_test=COUNT, n_calibration=COUNT, budget=FRACTION, deltas=FRACTION,
    epsilon=FRACTION, gamma=COUNT, bon_n=COUNT, target_bon_n=COUNT, bon_temperature=POSITIVE, patience=COUNT,
    prm_preset=one_of(FROM_DRAFT, *tinylm.PRESETS), prm_problems=COUNT, prm_steps=COUNT, prm_lr=POSITIVE,
    prm_eval_problems=COUNT, keep_budgets=FRACTION,
    toy_samples=COUNT, toy_delta=FRACTION)
