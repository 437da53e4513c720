"""EffiCoder: Enhancing Code Generation in Large Language Models through Efficiency-Aware Fine-tuning
(Huang et al., ICML 2025), in miniature.

- :mod:`.sandbox` — a sandboxed executor for untrusted generated Python and the ET / MU / TMU measurements;
- :mod:`.tasks` — task families with solutions of different cost, instances, and candidate generators;
- :mod:`.pipeline` — selection of the fastest correct candidate, the three SFT datasets, a tiny code LM
  fine-tuned on each, and evaluation by pass@1 and normalised time, memory and memory-time.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..core.claims import POWER, Claim, Effect, at_least, at_most, units_needed
from ..core.config import COUNT, FRACTION, POSITIVE, SEED, make_config, one_of
from . import pipeline, sandbox, tasks
from .pipeline import (Measurer, build_datasets, candidate_pool, evaluate, experiment, finetune, run_seed,
                       select_fastest)
from .sandbox import Execution, Limits, run_candidate

__all__ = ["pipeline", "sandbox", "tasks", "Measurer", "build_datasets", "candidate_pool", "evaluate", "experiment",
           "finetune", "run_seed", "warm_up",
           "select_fastest", "Execution", "Limits", "run_candidate", "config", "FASTER", "CORRELATION",
           "paired_log_et_ratios", "spearman_per_seed"]

CALIBRATION_SEEDS = [0, 1, 2, 20, 21, 22, 23, 24, 25]
"""The seeds the chapter's regime (training length, shares, limits) was developed and first decided on (0-2), and
those the selection rule's tolerance and the verdict seeds' number were planned on (20-25, issue 54); contract v2
decides on fresh seeds from 100."""

# The `ci` regime (issue 54): 600 fine-tuning steps instead of 150, since with 150 one initialisation in eight of the
# same training set learned nothing (pass@1 0.06-0.69 over eight; at 600 steps every one >= 0.50, referee audit),
# and five fastest-correct shares instead of three, so a seed's Spearman ρ is not confined to ±0.5 and ±1. On the
# calibration seeds 0-2 every one of the 24 models reached pass@1 >= 0.31 (judged by the `models_learn`
# precondition alone, before any verdict of this regime). The whole pipeline runs in the book builder's warm-up
# (`warm_up`); five seeds took about 250 s of CPU (fine-tuning and sandboxes together). ci decides on eight fresh
# seeds, the contract's fewest for a decisive verdict: on five (200-204, seen) both claims could only be
# inconclusive, and a referee ran 300-304. On 400-407 correlation was reproduced, but a referee's fresh 500-507 and
# 510-517 left it inconclusive: its training_sets_differ precondition read the spread of the mean NET, which one
# training task with a slow-only solution (NET 20,000+, the same in every training set) can make up 50-90% of, so
# it failed on seeds whose training sets differ in a dozen tasks (geometric-mean spread 2.4-2.7). It now reads the
# geometric-mean NET, changed after those verdicts were seen, and ci decided on fresh seeds 600-607. After those
# verdicts (correlation inconclusive, size undecided), correlation's interval became an exact sign-flip permutation
# interval (per-seed rank correlations are bounded and skewed, so a t interval's normality is doubtful there), and
# ci decides both claims on fresh seeds 900-907. A referee's fresh 1000-1007 (`REFEREE_1000`) showed that faster's
# label does not replicate, and that two builds of the same seeds differ; after the diagnosis on calibration seeds
# (`CALIBRATION_54`) the selection ties times within `pipeline.TIE_TOLERANCE` and selects contenders on the medians
# of `pipeline.SELECTION_RUNS` runs, and ci decides both claims on eleven fresh seeds 1100-1110 (`VERDICT_SEEDS`),
# as many as the warm-up's time allows.
VERDICT_SEEDS = list(range(1100, 1111))
config = make_config({
    "smoke": {"seeds": [100], "calibration_seeds": CALIBRATION_SEEDS, "families": ["sum_mult", "member", "gen_sum"], "constants": [3, 4, 5, 6],
              "n_test": 4, "perf_size": 1, "noise_runs": 3, "model": "nano", "steps": 40, "generator_steps": 10,
              "batch_size": 16, "lr": 1e-2, "max_tokens": 16, "mix_shares": [0.0, 0.5, 1.0], "workers": 2},
    "ci": {"seeds": VERDICT_SEEDS, "calibration_seeds": CALIBRATION_SEEDS, "families": list(tasks.FAMILIES), "constants": [3, 4, 5, 6, 7, 8, 9, 10],
           "n_test": 16, "perf_size": 4, "noise_runs": 3, "model": "nano", "steps": 600, "generator_steps": 40,
           "batch_size": 24, "lr": 1e-2, "max_tokens": 16, "mix_shares": [0.0, 0.25, 0.5, 0.75, 1.0], "workers": 2},
    "full": {"seeds": [100, 101, 102, 103, 104], "calibration_seeds": CALIBRATION_SEEDS, "families": list(tasks.FAMILIES), "constants": list(range(3, 23)),
             "n_test": 40, "perf_size": 20, "noise_runs": 30, "model": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "steps": 1500,
             "generator_steps": 500, "batch_size": 64, "lr": 1e-5, "max_tokens": 256,
             "mix_shares": [0.0, 0.25, 0.5, 0.75, 1.0], "workers": 4},
},
    seeds=SEED, calibration_seeds=SEED, families=one_of(*tasks.FAMILIES), constants=COUNT, n_test=COUNT, perf_size=COUNT, noise_runs=COUNT,
    steps=COUNT, generator_steps=COUNT, batch_size=COUNT, lr=POSITIVE,
    max_tokens=COUNT, mix_shares=FRACTION, workers=COUNT)

def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry): the whole pipeline of every
    seed (:func:`pipeline.experiment`), cached, so the fine-tuning notebook only reads it back."""
    experiment(cfg)


LEARNS = 0.2
"""The declared precondition: on every seed, each compared model solves at least this share of the held-out
tasks (a model that writes no correct code has no efficiency to compare)."""


NOISE_FLOOR = -math.log(0.9)
"""The declared noise precondition: the median |log| change of ET between two measurements of the same program
stays below the smallest effect `FASTER` counts (10%)."""


def paired_log_et_ratios(runs: dict, seeds, arm: str, baseline: str) -> list[float]:
    """Per seed, the mean over the held-out tasks both `arm` and `baseline` solve of log(ET_arm / ET_baseline)
    (:func:`pipeline.paired_log_et_ratio`), over the seeds where they solve one in common."""
    out = [pipeline.paired_log_et_ratio(runs[s][arm].evaluation, runs[s][baseline].evaluation) for s in seeds]
    return [v for v in out if math.isfinite(v)]


def _ranked_pairs(x, y):
    """Per seed (rows), the log NETs of the shares (columns) where both are finite, for the seeds with at least three
    such pairs that vary on both sides (the seeds a rank correlation can be computed on)."""
    for xs, ys in zip(np.asarray(x, dtype=float), np.asarray(y, dtype=float)):
        ok = np.isfinite(xs) & np.isfinite(ys)
        if ok.sum() >= 3 and np.ptp(xs[ok]) > 0 and np.ptp(ys[ok]) > 0:
            yield np.log(xs[ok]), np.log(ys[ok])


def spearman_per_seed(x, y) -> list[float]:
    """Per seed (rows), Spearman's rank correlation of log training-set NET with log generated NET across the
    fastest-correct shares (columns), over the finite pairs; a seed with fewer than three is left out."""
    from scipy import stats

    return [float(stats.spearmanr(lx, ly).statistic) for lx, ly in _ranked_pairs(x, y)]


def spearman_null_per_seed(x, y) -> list[list[float]]:
    """The null control's units, for the seeds `spearman_per_seed` keeps: per seed, Spearman's rho under every order
    of the generated NETs among the shares (the exact permutation distribution: 120 orders at five shares), which
    the contract draws from (`icml25.core.claims.null_distributions`). Its mean, the control before, is 0 by
    symmetry on every seed, so it added nothing to the interval above 0; one random order per seed, the control
    before that, made whether the real units beat it a coin toss of its own."""
    from scipy import stats

    return [[float(stats.spearmanr(lx, ly[list(order)]).statistic)
             for order in itertools.permutations(range(len(ly)))]
            for lx, ly in _ranked_pairs(x, y)]


PASS_MARGIN = -0.05
"""The non-inferiority margin of `FASTER`'s pass@1 change (fastest-correct minus random-correct)."""


FASTER = Claim(
    chapter="efficient_code", id="faster",
    paper_statement="Fine-tuning on the fastest correct solutions makes the generated code faster without hurting "
                    "correctness (Qwen2.5-Coder-7B-Instruct on EffiBench: ET -48.4%, pass@1 44.8% -> 57.7%)",
    paper_value="ET 0.52x of the base model, pass@1 +12.9 points",
    criterion="Paired by seed and, within a seed, by held-out task: the mean over the tasks both models solve of "
              "log(ET of the fastest-correct model's program / ET of the random-correct model's) below 0 (95% t "
              "interval over seeds; refuted when it lies wholly above log 0.9, i.e. less than 10% faster), AND "
              "the change in pass@1 above -0.05 (non-inferiority)",
    effects=[Effect("log_et_ratio", "log_et_ratio", direction="less", min_effect=math.log(0.9)),
             Effect("pass_at_1_change", "pass_at_1_change", null=PASS_MARGIN)],
    preconditions=[at_least("fastest_learns", "pass_fastest_per_seed", LEARNS,
                            f"the fastest-correct model solves >= {LEARNS:.0%} of held-out tasks on every seed"),
                   at_least("random_correct_learns", "pass_random_correct_per_seed", LEARNS,
                            f"the random-correct model solves >= {LEARNS:.0%} of held-out tasks on every seed"),
                   at_least("paired_seeds", lambda m: len(m["log_et_ratio"]), 3,
                            "at least 3 seeds where both models solve a task in common"),
                   at_most("et_noise_floor", "et_noise", NOISE_FLOOR,
                           f"re-measuring the canonical solutions in fresh sandboxes moves ET by a median factor "
                           f"below exp({NOISE_FLOOR:.3f}), the smallest effect the criterion counts")],
    examples=({"log_et_ratio": [-0.7, -0.6, -0.65], "pass_at_1_change": [0.0, 0.02, 0.01],
               "pass_fastest_per_seed": [0.5] * 3, "pass_random_correct_per_seed": [0.5] * 3, "et_noise": 0.03},
              {"log_et_ratio": [0.0, -0.02, 0.01], "pass_at_1_change": [0.0, 0.05, 0.0],
               "pass_fastest_per_seed": [0.5] * 3, "pass_random_correct_per_seed": [0.5] * 3, "et_noise": 0.03}),
)

# No calibration spread is declared for the per-seed Spearman ρ: on the calibration seeds 0-2 it was 0.68, 0.60,
# 0.70 (sd 0.054), but on a referee's fresh seeds 300-304 it was 0.2, 0.7, -0.9, 0.9, 0.0 (sd 0.70), so three
# calibration seeds understate its spread and cannot plan fewer than the contract's eight seeds.

CORRELATION = Claim(
    chapter="efficient_code", id="correlation",
    paper_statement="The efficiency of the training data correlates strongly with the efficiency of the generated "
                    "code",
    paper_value="Pearson r = 0.972 (ET), 0.950 (MU), 0.986 (TMU) [from the research notes, unverified]",
    criterion="Per seed, Spearman's rank correlation of log training-set NET with log generated-code NET across "
              "the fastest-correct shares; its mean over seeds above 0 (95% exact sign-flip permutation interval "
              "of the mean: the shifts the two-sided sign-flip test does not reject; refuted when wholly below "
              "0.5), and beyond its null control: the same statistic with the generated NETs permuted among the shares "
              "within each seed, the real mean above the mean of one draw per seed from that seed's exact "
              "permutation distribution (one-sided Monte Carlo p < 0.05)",
    effects=[Effect("spearman_rho", "spearman_rho", min_effect=0.5, method="sign_flip")],
    preconditions=[at_least("models_learn", "min_pass_at_1", LEARNS,
                            f"every model of the share sweep solves >= {LEARNS:.0%} of held-out tasks"),
                   at_least("training_sets_differ", "train_net_spread", 1.2,
                            "on every seed the training sets' typical program (geometric-mean NET) spans at least "
                            "a factor 1.2 across the shares"),
                   at_least("seeds_ranked", lambda m: len(m["spearman_rho"]), 3,
                            "at least 3 seeds with three or more models that solve a task")],
    examples=({"spearman_rho": [1.0, 0.5, 1.0, 1.0, 0.9, 0.7, 1.0, 0.8], "min_pass_at_1": 0.4,
               "train_net_spread": [2.0, 1.8, 2.2]},  # a sign-flip interval needs 6 units to reject at 95%
              {"spearman_rho": [-0.5, 0.5, 0.0, 0.1, -0.3, 0.2, 0.0, -0.1], "min_pass_at_1": 0.4,
               "train_net_spread": [2.0, 1.8, 2.2]}),
    needs_null=True, null_description="the generated NETs permuted among the shares within each seed: per seed, rho "
                     "under every order (the exact permutation distribution), one draw per seed",
)

#: A referee with no stake re-decided both claims on fresh seeds 1000-1007 (n = 8) after the verdicts on 900-907 were
#: recorded, with the chapter's code and only its seeds changed, in two builds of the same seeds; nothing was changed
#: after it. Recorded as measured (95% intervals; per-seed pass@1 changes of the first build).
REFEREE_1000 = {
    "seeds": "1000-1007",
    "faster": ("inconclusive", "inconclusive"),
    "log_et_ratio": ((-1.365, -2.198, -0.532), (-1.430, -2.423, -0.437)),
    "pass_at_1_change": ((-0.102, -0.206, 0.003), (-0.008, -0.149, 0.133)),
    "correlation": ("inconclusive", "inconclusive"),
    "spearman_rho": ((0.425, -0.100, 0.833), (0.238, -0.350, 0.750)),
    "p_reproduce_faster": 0.17,
    "same_seed_pass_change_sd": 0.094,
}
"""What the referee found: faster's reproduced label on 900-907 did not replicate; with the spread pooled over the
seed sets seen, eight seeds put the pass@1 change's lower bound above the -0.05 margin with probability about
`p_reproduce_faster`. Two builds of the same seeds differ: `select_fastest` keeps the candidate with the lowest
measured CPU time, so near-ties resolve differently from build to build, the fastest-correct training set and model
change, and one seed's pass@1 change moves by about `same_seed_pass_change_sd` between builds: a between-build
component the claim's interval did not carry. Arms whose training set does not depend on that choice were
identical in both builds. Acted on in issue 54: `CALIBRATION_54`, `BUILDS_1100`."""


#: The issue-54 diagnosis of `FASTER`'s pass@1 change, on calibration seeds 0-2 and 20-25 (no verdict seed), before
#: any verdict under the new selection: per seed, the same candidates measured twice in fresh sandboxes, and the
#: random-correct and fastest-correct models fine-tuned from three initialisations each, evaluated on the seed's
#: `held_out` tasks. Recorded as measured.
CALIBRATION_54 = {
    "seeds": "0-2, 20-25",
    "n_seeds": 9,
    "choice_changed_old": 4,
    "choice_changed_new": 0,
    "pass_after_change": (0.1875, 0.3125, 0.0, -0.0625),
    "held_out": 16,
    "pass_change_mean": 0.007,
    "pass_change_sd": 0.134,
    "task_sd": 0.141,
    "init_sd": 0.156,
    "three_init_sd": 0.126,
}
"""`choice_changed_old`: seeds (of `n_seeds`) on which a second measurement of the same candidates chose another
program for one training task under the lowest time alone; the fastest-correct model's pass@1 then moved by
`pass_after_change` (a different training set, a different model); `choice_changed_new`: the same under
`pipeline.TIE_TOLERANCE` and the contenders' medians. The pass@1 change (one model per arm and seed) had mean
`pass_change_mean` and sd `pass_change_sd` over seeds; within one model pair, the held-out tasks' differences
give its mean an sd of `task_sd` (evaluation on 16 tasks); within one seed, three initialisations of the same two
training sets differ by `init_sd`, as much as seeds do; with each arm's pass@1 the mean of three initialisations
(three times the fine-tuning) the spread over seeds was still `three_init_sd`, so the design spends the warm-up's
time on seeds."""


def planned_seeds(design: dict = CALIBRATION_54) -> int | None:
    """Seeds the calibration spread asks for to put the pass@1 change's interval above `PASS_MARGIN` at the
    calibration mean, with the contract's power (:func:`icml25.core.claims.units_needed`)."""
    return units_needed(design["pass_change_sd"], design["pass_change_mean"] - PASS_MARGIN)


def detectable_change(n: int, design: dict = CALIBRATION_54) -> float:
    """The true pass@1 change that `n` seeds put above `PASS_MARGIN` with the contract's power at the calibration
    spread (the inverse of :func:`planned_seeds`' formula)."""
    from scipy import stats

    return PASS_MARGIN + (stats.norm.ppf(0.975) + stats.norm.ppf(POWER)) * design["pass_change_sd"] / math.sqrt(n)


#: The verdicts under the issue-54 design on fresh seeds 1100-1110 (n = 11), ledgered before they ran, in two builds
#: of the same seeds (the second with the warm-up's cache deleted, so every measurement and fine-tuning ran again);
#: nothing was changed after them. Recorded as measured (95% intervals).
BUILDS_1100 = {
    "seeds": "1100-1110",
    "faster": ("inconclusive", "inconclusive"),
    "log_et_ratio": ((-1.464, -2.003, -0.925), (-1.435, -1.926, -0.944)),
    "pass_at_1_change": ((-0.017, -0.179, 0.145), (-0.040, -0.195, 0.115)),
    "pass_change_sd": (0.241, 0.231),
    "same_pass_change_seeds": 10,
    "correlation": ("inconclusive", "inconclusive"),
    "spearman_rho": ((0.364, 0.12, 0.60), (0.373, 0.10, 0.65)),
    "correlation_why": ("size undecided", "models_learn 0.1875 < 0.2"),
}
"""Both builds gave faster the same label; 10 of the 11 seeds gave the same pass@1 change (one seed's
fastest-correct model changed, 0.1875 -> -0.0625), so the interval moved by about 0.03 where the referee's moved by
0.09. The pass@1 change's spread over these seeds (`pass_change_sd`) is nearly twice the calibration's, and its
estimate lies near the margin, so the power line asks for hundreds of seeds or more."""


#: A referee with no stake re-decided both claims on fresh seeds 1200-1210 (n = 11) after `BUILDS_1100` was
#: recorded, with the chapter's code and only its seeds changed, and once more with `pipeline.TIE_TOLERANCE` 0.45 on
#: the same seeds; nothing was changed after it except the page's wording it flagged. Recorded as measured (95%
#: intervals).
REFEREE_1200 = {
    "seeds": "1200-1210",
    "faster": ("inconclusive", "inconclusive"),
    "tolerance": (0.35, 0.45),
    "log_et_ratio": ((-1.694, -2.376, -1.011), (-1.538, -2.229, -0.847)),
    "pass_at_1_change": ((-0.057, -0.182, 0.068), (-0.045, -0.170, 0.079)),
    "pass_change_sd": (0.186, None),
    "correlation": ("inconclusive", "inconclusive"),
    "spearman_rho": ((0.436, 0.20, 0.66), (0.409, 0.217, 0.62)),
}
"""Both labels repeated on fresh seeds and at the nearby tolerance. The referee found no bug that moves a verdict,
and two weaknesses the page states: correlation's null control was degenerate (the mean of Spearman's rho over
every order of one seed's values is 0 by symmetry, so "not also on the null" added nothing to the interval above
0; replaced after it by each seed's whole permutation distribution, `spearman_null_per_seed`), and at gen_sum's
variants every criterion ties within the tolerance, so the program text decides there and memory hardly acts.
Every pass@1 change seen under this design lies below 0."""
