"""The chapter's claims, declared before any experiment runs."""

from __future__ import annotations

import numpy as np

from ..core.claims import Claim, Effect, at_least, share_at_least
from .scales import CHAPTER


# The cells every claim is decided on: the paper's 3- and 5-model pools (its 11-model pool is not simulated).
CLAIM_POOL_SIZES = (3, 5)
#: the smallest gain of cascade routing over the better baseline in the paper's Table 1 among the 3/5-model,
#: low/medium-noise cells (3 models, medium noise: 76.6 vs 76.2), in AUC×100 points
PAPER_SMALLEST_GAIN = 0.4
#: non-inferiority margin for "at least as good", AUC×100 points, declared before any run
NON_INFERIORITY_MARGIN = 0.5
#: the share of seeds on which a per-seed precondition must hold (a rule "on every seed" fails on one unlucky seed
#: of thirty: the threshold cascade did on seeds 401 and 423)
PRECONDITION_SHARE = 0.9


def cell_key(n_models: int, noise: str) -> str:
    return f"{n_models}_{noise}"


_ROUTING_LEARNS = share_at_least(
    "routing_beats_interpolation", "routing_over_interpolation", 0.0, PRECONDITION_SHARE,
    "routing's AUC is at least that of mixing the cheapest and the largest model blindly (the estimators "
    f"carry information; worst low/medium cell of a seed, AUC×100) on at least {PRECONDITION_SHARE:.0%} of seeds")


def _cells_example(value: float, spread: float, keys) -> dict:
    return {f"gain_{k}": [value - spread, value, value + spread] for k in keys}


_LOW_MEDIUM = [cell_key(k, n) for k in CLAIM_POOL_SIZES for n in ("low", "medium")]
_ALL_NOISE = [cell_key(k, n) for k in CLAIM_POOL_SIZES for n in ("low", "medium", "high")]
_OK = {"routing_over_interpolation": [5.0, 6.0, 4.0],
       "threshold_over_interpolation": [5.0, 6.0, 4.0]}

BEATS_BOTH = Claim(
    chapter=CHAPTER, id="beats_both",
    paper_statement="Cascade routing beats both routing and the optimal cascade (RouterBench, 3/5/11 models, "
                    "low and medium noise)",
    paper_value="AUC×100, 5 models, low noise: 84.3 vs routing 81.2, optimal cascade 83.1",
    criterion="In every 3- and 5-model cell at low and medium noise, the per-seed gain (cascade routing's AUC − "
              "the larger of routing's and the optimal cascade's, same pool and estimators) has a 95% paired t "
              f"interval above 0; refuted where it lies wholly below {PAPER_SMALLEST_GAIN} (the paper's smallest "
              "gain in these cells)",
    effects=[Effect(f"gain_{k}", f"gain_{k}", min_effect=PAPER_SMALLEST_GAIN) for k in _LOW_MEDIUM],
    preconditions=[_ROUTING_LEARNS],
    examples=({**_OK, **_cells_example(1.2, 0.2, _LOW_MEDIUM)},
              {**_OK, **_cells_example(0.0, 0.05, _LOW_MEDIUM)}),
)
OPTIMAL_CASCADE = Claim(
    chapter=CHAPTER, id="optimal_cascade",
    paper_statement="The optimal cascade (expected-max supermodel rule) is at least as good as the threshold cascade",
    paper_value="AUC×100, 5 models: 83.1/75.2/70.2 vs 82.3/73.0/69.5 (low/medium/high noise)",
    criterion="Non-inferiority in every 3- and 5-model cell at every noise level: the 95% paired t interval of "
              "the per-seed difference (optimal cascade − threshold cascade, AUC×100) lies above "
              f"−{NON_INFERIORITY_MARGIN}; refuted where it lies wholly below 0",
    effects=[Effect(f"opt_minus_thr_{k}", f"opt_minus_thr_{k}", null=-NON_INFERIORITY_MARGIN, min_effect=0.0)
             for k in _ALL_NOISE],
    preconditions=[share_at_least("threshold_cascade_beats_interpolation", "threshold_over_interpolation", 0.0,
                                  PRECONDITION_SHARE,
                                  "the threshold cascade's AUC is at least that of blindly mixing the cheapest and "
                                  "the largest model (worst low/medium cell of a seed, AUC×100) on at least "
                                  f"{PRECONDITION_SHARE:.0%} of seeds")],
    examples=({**_OK, **{f"opt_minus_thr_{k}": [0.5, 0.8, 1.1] for k in _ALL_NOISE}},
              {**_OK, **{f"opt_minus_thr_{k}": [-1.5, -1.2, -1.8] for k in _ALL_NOISE}}),
)
ESTIMATORS_MATTER = Claim(
    chapter=CHAPTER, id="estimators_matter",
    paper_statement="Quality estimators are decisive: cascade routing's advantage shrinks as estimator noise grows",
    paper_value="gain over the best baseline, AUC×100, 3/5/11 models: 1.3/1.2/2.7 at low noise, 0.5/1.4/1.7 at high",
    criterion="Per seed, the gain of cascade routing over the better of routing and the optimal cascade at low "
              "noise minus that at high noise, averaged over the 3- and 5-model pools, has a 95% paired t interval "
              "above 0; refuted where it lies wholly below 0.25 (half the paper's mean difference over its pools)",
    effects=[Effect("low_minus_high", "low_minus_high", min_effect=0.25)],
    preconditions=[_ROUTING_LEARNS],
    examples=({**_OK, "low_minus_high": [0.8, 1.0, 1.2]}, {**_OK, "low_minus_high": [-0.1, 0.05, 0.0]}),
)
REAL_POOL_BEATS_BOTH = Claim(
    chapter=CHAPTER, id="real_pool_beats_both",
    paper_statement="Cascade routing beats both routing and the optimal cascade (the headline, here on actual models)",
    paper_value="AUC×100, RouterBench 5 models, low noise: 84.3 vs routing 81.2, optimal cascade 83.1",
    criterion="On the real pool (five 1-nearest-neighbour digit classifiers storing disjoint draws of 15, 30, 60, "
              "120 and 240 images from every seed, cost their FLOPs, learned quality estimators), the per-seed gain of cascade routing over the better of routing and the optimal cascade "
              f"has a 95% paired t interval above 0; refuted where it lies wholly below {PAPER_SMALLEST_GAIN}. "
              "Decidable only where the positive control shows that this pool can show the paper's gain at all",
    effects=[Effect("real_gain", "real_gain", min_effect=PAPER_SMALLEST_GAIN)],
    preconditions=[
        share_at_least("best_member_learns", "best_member_accuracy", 0.5, PRECONDITION_SHARE,
                       "the pool's best member is right on at least half the held-out problems, on at least "
                       f"{PRECONDITION_SHARE:.0%} of seeds"),
        share_at_least("pool_has_headroom", "pool_headroom", 0.02, PRECONDITION_SHARE,
                       "some member is right where the best one is wrong: accuracy of 'any member right' − best "
                       f"member's >= 0.02, on at least {PRECONDITION_SHARE:.0%} of seeds"),
        _ROUTING_LEARNS,
        at_least("positive_control_reaches", lambda m: float(np.mean(m["positive_control_gain"])),
                 PAPER_SMALLEST_GAIN,
                 "positive control: with the paper's own low-noise estimators on the same members' true "
                 f"correctness and costs, cascade routing's gain reaches the paper's smallest, {PAPER_SMALLEST_GAIN} "
                 "(seed mean): the pool can show the effect"),
    ],
    examples=({"real_gain": [1.0, 1.5, 0.8], "best_member_accuracy": [0.9, 0.9, 0.9],
               "pool_headroom": [0.05, 0.05, 0.05], "routing_over_interpolation": [3.0, 3.0, 3.0],
               "positive_control_gain": [1.0, 1.2, 0.9]},
              {"real_gain": [0.05, -0.1, 0.0], "best_member_accuracy": [0.9, 0.9, 0.9],
               "pool_headroom": [0.05, 0.05, 0.05], "routing_over_interpolation": [3.0, 3.0, 3.0],
               "positive_control_gain": [1.0, 1.2, 0.9]}),
)
CLAIMS = (BEATS_BOTH, OPTIMAL_CASCADE, ESTIMATORS_MATTER, REAL_POOL_BEATS_BOTH)
