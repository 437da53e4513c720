"""The evidence contract (icml25.core.claims): three verdicts computed from paired statistics, preconditions,
equivalence margins, null controls, and the falsifiability of every claim the book declares."""

import importlib
import json
import math

import jsonschema
import numpy as np
import pytest
from scipy import stats

from icml25 import catalog
from icml25.core import claims
from icml25.core.claims import (INCONCLUSIVE, REFUTED, REPRODUCED, Claim, ClaimError, Effect, Equivalence,
                                at_least, at_most, check, forget_notebook, load_results,
                                share_at_least)

BETTER = Claim(chapter="demo", id="better", paper_statement="A beats B", paper_value="+3",
               criterion="A - B > 0 (paired t, 95%); refuted below +1",
               effects=[Effect("a_minus_b", "diff", min_effect=1.0)],
               preconditions=[at_least("b_learns", "b_acc", 0.8)],
               examples=({"diff": [3.0, 2.5, 3.5], "b_acc": 0.9}, {"diff": [0.1, -0.1, 0.0], "b_acc": 0.9}))

SAME = Claim(chapter="demo", id="same", paper_statement="A equals B", paper_value="no difference",
             criterion="TOST with margin 0.5", effects=[Equivalence("a_minus_b", "diff", margin=0.5)],
             preconditions=[at_most("loss_low", "loss", 1.0)],
             examples=({"diff": [0.01, -0.02, 0.0, 0.01], "loss": 0.5}, {"diff": [2.0, 2.2, 1.9], "loss": 0.5}))

STRONG = [3.0, 2.5, 3.5, 2.8, 3.2, 2.9, 3.1, 3.3]  # eight units, well above the smallest effect
NONE = [0.1, -0.1, 0.0, 0.05, -0.05, 0.02, -0.02, 0.0]  # eight units around zero


def decide(claim, **m):
    return claim.decide(m)


def test_three_verdicts_of_a_directional_effect():
    assert decide(BETTER, diff=STRONG, b_acc=0.9)["verdict"] == REPRODUCED
    # wholly below the paper's smallest effect: refuted, whether on the wrong side or just short of it
    assert decide(BETTER, diff=NONE, b_acc=0.9)["verdict"] == REFUTED
    assert decide(BETTER, diff=[-x for x in STRONG], b_acc=0.9)["verdict"] == REFUTED
    # wide interval across zero and above min_effect: decides nothing
    got = decide(BETTER, diff=[4.0, -3.0, 1.0, 2.0, -1.0, 3.0, 0.0, 1.5], b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "decides nothing" in got["reason"]


def test_size_before_sign():
    """An interval that excludes "no effect" but lies wholly short of the paper's smallest effect is refuted on
    size (v1 called it reproduced); one that excludes it with an estimate below the smallest effect is undecided."""
    small = [0.3, 0.35, 0.4, 0.32, 0.38, 0.36, 0.34, 0.33]
    got = decide(BETTER, diff=small, b_acc=0.9)
    assert got["verdict"] == REFUTED and "the direction holds, the size is below the paper's" in got["reason"]
    short = [0.2, 1.6, 0.4, 1.2, 0.3, 1.5, 0.5, 1.0]  # mean 0.84 > 0, interval reaches 1
    got = decide(BETTER, diff=short, b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "size undecided" in got["reason"]
    # the same data against a claim that names no size: the direction is the claim
    bare = Claim("demo", "bare", "A beats B", "v", "A - B > 0", [Effect("d", "diff")], [at_least("ok", "b", 0)],
                 ({"diff": STRONG, "b": 1}, {"diff": NONE, "b": 1}))
    assert bare.decide({"diff": small, "b": 1})["verdict"] == REPRODUCED


def test_interval_is_scipys_paired_t_interval():
    x = [0.3, 0.9, 0.4, 1.1]
    e = decide(BETTER, diff=x, b_acc=0.9)["effects"][0]
    lo, hi = stats.ttest_1samp(x, 0).confidence_interval(0.95)
    assert (e["estimate"], e["ci_low"], e["ci_high"], e["n"]) == pytest.approx((np.mean(x), lo, hi, 4))


def test_no_zero_width_interval_from_a_t_formula():
    """Every unit giving the same value has no t interval: nothing is decided, and the record says why."""
    got = decide(BETTER, diff=[2.0] * 10, b_acc=0.9)
    e = got["effects"][0]
    assert got["verdict"] == INCONCLUSIVE and math.isnan(e["ci_low"]) and math.isnan(e["ci_high"])
    assert "no spread" in got["reason"]
    got = decide(SAME, diff=[0.0] * 10, loss=0.5)  # v1 called a constant zero difference equivalent
    assert got["verdict"] == INCONCLUSIVE and "no spread" in got["reason"]


def test_bootstrap_only_where_it_covers():
    boot = Claim("demo", "boot", "s", "v", "mean > 0 (percentile bootstrap)", [Effect("d", "d", method="bootstrap")],
                 [at_least("ok", "b", 0)], ({"d": STRONG * 3, "b": 1}, {"d": NONE * 3, "b": 1}))
    got = boot.decide({"d": STRONG, "b": 1})  # 8 units: the percentile interval under-covers
    assert got["verdict"] == INCONCLUSIVE and "under-covers" in got["reason"]
    assert claims.BOOTSTRAP_MIN_UNITS <= len(STRONG * 3)
    assert boot.decide({"d": STRONG * 3, "b": 1})["verdict"] == REPRODUCED


def test_fewer_than_eight_units_decide_only_with_a_calibration_power_calculation():
    five = STRONG[:5]
    got = decide(BETTER, diff=five, b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "only 5 paired units" in got["reason"]
    assert "it would be reproduced" in got["reason"]
    planned = Claim("demo", "planned", "A beats B", "+3", "c", [Effect("d", "diff", min_effect=1.0, design_sd=0.3)],
                    [at_least("ok", "b", 0)], ({"diff": STRONG, "b": 1}, {"diff": NONE, "b": 1}))
    # ((1.96 + 0.84) * 0.3 / 1)^2 = 0.7: two units would do, so five decide
    assert planned.effects[0].planned_units == claims.units_needed(0.3, 1.0) == 2
    assert planned.decide({"diff": five, "b": 1})["verdict"] == REPRODUCED
    noisy = Claim("demo", "noisy", "A beats B", "+3", "c", [Effect("d", "diff", min_effect=1.0, design_sd=1.5)],
                  [at_least("ok", "b", 0)], ({"diff": STRONG, "b": 1}, {"diff": NONE, "b": 1}))
    assert noisy.effects[0].planned_units == math.ceil(((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 1.5) ** 2)
    got = noisy.decide({"diff": five, "b": 1})
    assert got["verdict"] == INCONCLUSIVE and "calibration spread asks for 18" in got["reason"]
    with pytest.raises(ClaimError, match="design_sd"):
        Effect("d", "diff", design_sd=0.3)  # no smallest effect to plan for


def test_a_between_run_sd_widens_the_interval_and_no_units_within_a_run_narrow_it():
    """Eight blocks of one run at 0.861 +- 0.01 clear a bar of 0.85 by their own spread, but not once a between-run
    sd of 0.013 (identical runs' means differ that much) joins their standard error: t_7 sqrt(sd^2/8 + 0.013^2)."""
    x = [0.848, 0.870, 0.861, 0.855, 0.866, 0.859, 0.868, 0.861]
    alone = Claim("demo", "alone", "AoE keeps up", "97%", "c", [Effect("r", "ratio", null=0.85)],
                  [at_least("ok", "b", 0)], ({"ratio": [0.95] * 4 + [0.96] * 4, "b": 1}, {"ratio": [0.6] * 4 + [0.61] * 4, "b": 1}))
    assert alone.decide({"ratio": x, "b": 1})["verdict"] == REPRODUCED
    runs = Claim("demo", "runs", "AoE keeps up", "97%", "c", [Effect("r", "ratio", null=0.85, run_sd=0.013)],
                 [at_least("ok", "b", 0)], ({"ratio": [0.95] * 4 + [0.96] * 4, "b": 1}, {"ratio": [0.6] * 4 + [0.61] * 4, "b": 1}))
    got = runs.decide({"ratio": x, "b": 1})
    effect = got["effects"][0]
    half = stats.t.ppf(0.975, 7) * math.hypot(np.std(x, ddof=1) / math.sqrt(8), 0.013)
    assert effect["ci_low"] == pytest.approx(np.mean(x) - half) and effect["ci_high"] == pytest.approx(np.mean(x) + half)
    assert effect["run_sd"] == 0.013 and "between-run sd of 0.013" in effect["method"]
    assert got["verdict"] == INCONCLUSIVE and "no number of units within one run" in got["reason"]
    assert effect["units_needed"] is None
    with pytest.raises(ClaimError, match="run_sd"):
        Effect("r", "ratio", null=0.85, run_sd=0.013, method="bootstrap")


def test_an_inconclusive_record_states_its_power_line():
    """The interval straddles both 0 and the smallest effect 1 with the estimate between them: only a refutation
    can come, once the interval fits in the gap between the estimate and 1, so that gap sets the units."""
    x = [1.5, -0.8, 2.2, 0.1, 1.9, -0.9, 1.7, 0.2]
    got = decide(BETTER, diff=x, b_acc=0.9)
    sd, est = np.std(x, ddof=1), np.mean(x)
    need = math.ceil(((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * sd / (1.0 - est)) ** 2)
    assert got["verdict"] == INCONCLUSIVE and got["units_needed"] == need
    assert f"about {need} paired units would decide" in got["reason"]
    assert "units_needed" not in decide(BETTER, diff=x, b_acc=0.1)  # a failed precondition: no power line


def test_a_power_line_asks_for_more_units_than_left_the_effect_undecided():
    """An estimate past the smallest effect whose interval still reaches 0 can only come to be reproduced, once the
    interval clears 0: the estimate's distance from 0 sets the units, never fewer than one more than were run."""
    x = [2.9, -0.4, 2.6, -0.2, 2.8, -0.3, 2.7, 0.1]  # mean 1.275, past 1, interval reaching below 0
    got = decide(BETTER, diff=x, b_acc=0.9)
    sd, est = np.std(x, ddof=1), np.mean(x)
    normal = math.ceil(((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * sd / est) ** 2)
    assert got["verdict"] == INCONCLUSIVE and est > 1 and got["effects"][0]["ci_low"] < 0
    assert got["units_needed"] == max(normal, len(x) + 1) > len(x)



def test_a_size_undecided_power_line_asks_to_tell_the_estimate_from_the_smallest_effect():
    x = [1.6, 0.2, 1.3, 0.4, 1.1, 0.5, 1.4, 0.3, 0.9, 0.7]  # above 0, mean 0.84, short of the smallest effect 1
    got = decide(BETTER, diff=x, b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "size undecided" in got["reason"]
    sd, est = np.std(x, ddof=1), np.mean(x)
    need = math.ceil(((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * sd / (1.0 - est)) ** 2)
    assert got["units_needed"] == need and need > len(x)  # not the units to see 1 against 0, which 10 already pass


def test_an_estimate_on_the_smallest_effect_gets_no_power_line_but_says_why():
    """Mean a hair below 1, the smallest effect (at or above it the estimate reproduces): telling the two apart would
    take astronomically many units (the formula divides by their difference), so the record says the estimate sits
    on the bar instead of printing a number."""
    x = [1.6, 0.4, 1.3, 0.7, 1.1, 0.9, 1.5, 0.5, 1.2, 0.8]
    assert np.mean(x) == pytest.approx(1.0)
    got = decide(BETTER, diff=[v - 1e-6 for v in x], b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and got.get("units_needed") is None
    assert "sits on the paper's smallest effect" in got["reason"]
    near = decide(BETTER, diff=[v - 0.1 for v in x], b_acc=0.9)  # 0.9: a plan of some hundred units, printed
    assert near["verdict"] == INCONCLUSIVE and len(x) < near["units_needed"] <= claims.ON_THE_BAR * len(x)

SHARE = Claim(chapter="demo", id="share", paper_statement="some runs are B-like", paper_value="a share",
              criterion="share of B-like runs > 0 (exact binomial, 95%); refuted below 0.1",
              effects=[Effect("b_share", "is_b", min_effect=0.1, method="binomial")],
              preconditions=[at_least("learned", "acc", 0.8)],
              examples=({"is_b": [1.0] * 6, "acc": 0.9}, {"is_b": [0.0] * 40, "acc": 0.9}))


def test_a_share_of_runs_gets_an_exact_binomial_interval_not_a_point():
    from statsmodels.stats.proportion import proportion_confint

    e = decide(SHARE, is_b=[0.0] * 6, acc=0.9)  # a t interval over six zeros would be the point 0: refuted
    assert e["verdict"] == INCONCLUSIVE
    eff = e["effects"][0]
    assert (eff["estimate"], eff["ci_low"]) == (0.0, 0.0) and eff["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 6))
    assert decide(SHARE, is_b=[0.0] * 40, acc=0.9)["verdict"] == REFUTED  # 0 of 40: at most 0.088
    got = decide(SHARE, is_b=[1, 0, 1, 1, 0, 1], acc=0.9)["effects"][0]
    assert (got["ci_low"], got["ci_high"]) == pytest.approx(proportion_confint(4, 6, 0.05, method="beta"))
    with pytest.raises(ClaimError, match="0/1 outcomes"):
        decide(SHARE, is_b=[0.5, 1.0], acc=0.9)


def test_a_share_with_no_spread_gets_an_exact_power_line():
    """0 of 8 B-like runs has no sd for the normal formula; the exact line is the fewest runs at which the same share
    gets a Clopper-Pearson upper bound below the smallest effect 0.1 (0 of 35: 0.1000; 0 of 36: 0.0974)."""
    from statsmodels.stats.proportion import proportion_confint

    got = decide(SHARE, is_b=[0.0] * 8, acc=0.9)
    eff = got["effects"][0]
    assert eff["verdict"] == INCONCLUSIVE and eff["units_needed"] == 36
    assert "36 units would decide if the observed share held (exact)" in got["reason"]  # no spread, no power
    assert proportion_confint(0, 36, alpha=0.05, method="beta")[1] < 0.1 <= proportion_confint(0, 35, 0.05,
                                                                                              method="beta")[1]
    # 1 of 12 (0.083) is short of 0.1 by little: the exact line is a number past the units run, or "sits on the bar"
    near = decide(SHARE, is_b=[1] + [0] * 11, acc=0.9)["effects"][0]
    assert near["verdict"] == INCONCLUSIVE
    assert near["units_needed"] is None and "sits on the paper's smallest effect" in near["note"] or \
        near["units_needed"] > 12


def test_less_direction_and_null_value():
    c = Claim("demo", "cheaper", "s", "v", "ratio < 1", [Effect("ratio", "r", direction="less", null=1.0,
                                                               min_effect=0.8)],
              [at_least("ok", "acc", 0.5)], ({"r": [0.5, 0.6], "acc": 1}, {"r": [1.1, 1.2], "acc": 1}))
    assert decide(c, r=[0.5, 0.52, 0.55, 0.51, 0.53, 0.5, 0.54, 0.52], acc=1)["verdict"] == REPRODUCED
    assert decide(c, r=[0.95, 0.97, 0.99, 0.96, 0.98, 0.97, 0.95, 0.99], acc=1)["verdict"] == REFUTED
    assert decide(c, r=[0.5, 1.4, 0.9, 0.6, 1.3, 0.8, 1.1, 0.7], acc=1)["verdict"] == INCONCLUSIVE
    with pytest.raises(ClaimError, match="min_effect"):
        Effect("bad", "r", direction="less", null=1.0, min_effect=1.2)


def test_failed_precondition_makes_any_result_inconclusive_and_is_named():
    got = decide(BETTER, diff=STRONG, b_acc=0.5)
    assert got["verdict"] == INCONCLUSIVE
    assert "b_learns" in got["reason"] and "0.5" in got["reason"]
    assert got["preconditions"] == [{"id": "b_learns", "holds": False, "detail": "b_acc >= 0.8; measured 0.5"}]
    # a per-seed list is judged by its worst unit
    assert decide(BETTER, diff=STRONG, b_acc=[0.9, 0.79])["verdict"] == INCONCLUSIVE


def test_a_share_precondition_counts_units_and_does_not_tighten_as_units_are_added():
    converged = share_at_least("converges", "acc", 0.9, share=0.9)
    nine_of_ten = {"acc": [0.95] * 9 + [0.85]}
    assert converged.evaluate("c", nine_of_ten) == {"id": "converges", "holds": True,
                                                    "detail": "acc >= 0.9 on >= 90% of units; measured 0.9"}
    assert at_least("converges", "acc", 0.9).evaluate("c", nine_of_ten)["holds"] is False  # "on every seed"
    assert converged.evaluate("c", {"acc": [0.95] * 8 + [0.85] * 2})["holds"] is False  # 0.8 of units
    assert converged.evaluate("c", {"acc": [0.95] * 18 + [0.85] * 2})["holds"] is True  # the same rate, more units
    assert converged.evaluate("c", {"acc": [0.95] * 9 + [float("nan")]})["holds"] is True  # nan = not reached
    assert converged.evaluate("c", {"acc": [0.95] * 8 + [float("nan")] * 2})["holds"] is False
    assert converged.evaluate("c", {"acc": []})["holds"] is False  # no units never holds
    with pytest.raises(ValueError, match="share"):
        share_at_least("converges", "acc", 0.9, share=1.5)


def test_equivalence_by_tost_with_declared_margin():
    rng = np.random.default_rng(0)
    small, large = rng.normal(0, 0.1, 8), rng.normal(0, 0.1, 64)
    assert decide(SAME, diff=small.tolist(), loss=0.5)["verdict"] == REPRODUCED
    # more seeds do not turn a true equivalence into a failure (the old "interval contains zero" rule did)
    assert decide(SAME, diff=large.tolist(), loss=0.5)["verdict"] == REPRODUCED
    assert decide(SAME, diff=(2.0 + small).tolist(), loss=0.5)["verdict"] == REFUTED
    # noisy and centred: neither inside nor outside the margin
    assert decide(SAME, diff=[1.0, -1.0, 0.5, -0.4, 0.9, -0.8, 0.3, -0.6], loss=0.5)["verdict"] == INCONCLUSIVE
    # four units: TOST passes, but fewer than eight decide nothing without a calibration spread
    got = decide(SAME, diff=[0.01, -0.02, 0.0, 0.01], loss=0.5)
    assert got["verdict"] == INCONCLUSIVE and "only 4 paired units" in got["reason"]
    from statsmodels.stats.weightstats import ttost_paired
    x = np.array([0.1, 0.3, -0.05, 0.2, 0.15, 0.0, 0.25, 0.1])
    p = ttost_paired(x, np.zeros(8), -0.5, 0.5)[0]
    assert (p < 0.05) == (decide(SAME, diff=x.tolist(), loss=0.5)["verdict"] == REPRODUCED)


def test_one_unit_is_inconclusive_not_an_error():
    got = decide(BETTER, diff=[3.0], b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "only 1 paired unit" in got["reason"]


def test_conjunction_of_effects():
    ok = [1.0, 1.1, 1.05, 0.95, 1.02, 1.08, 0.98, 1.0]
    bad, wide = [-x for x in ok], [-1.0, 3.0, 0.5, -2.0, 2.5, 0.0, -1.5, 1.0]
    c = Claim("demo", "both", "s", "v", "both positive", [Effect("x", "x"), Effect("y", "y")],
              [at_least("ok", "acc", 0)], ({"x": ok, "y": ok, "acc": 1}, {"x": ok, "y": bad, "acc": 1}))
    assert c.decide({"x": ok, "y": ok, "acc": 1})["verdict"] == REPRODUCED
    assert c.decide({"x": ok, "y": bad, "acc": 1})["verdict"] == REFUTED
    assert c.decide({"x": ok, "y": wide, "acc": 1})["verdict"] == INCONCLUSIVE


NULLED = Claim("demo", "winner_weaker", "search finds it", "v", "rate above 0.25",
               [Effect("rate", "rate", null=0.25)], [at_least("ran", "runs", 10)],
               ({"rate": [0.6, 0.7, 0.65], "runs": 100}, {"rate": [0.2, 0.25, 0.3], "runs": 100}),
               needs_null=True, null_description="the same search on a noise utility")
REAL = [0.6, 0.7, 0.65, 0.62, 0.68, 0.66, 0.64, 0.69]


def test_the_real_statistic_must_beat_the_null_distribution():
    """The null runs the same pipeline at the same n; a one-sided permutation test decides whether the real units
    beat the null's. A criterion that also passes on its null no longer voids the claim by itself, and one that
    fails there does not save a real statistic no better than the null's."""
    same = [0.61, 0.69, 0.66, 0.63, 0.67, 0.65, 0.64, 0.7]  # the null passes too, and equals the real statistic
    v = check(NULLED, {"rate": REAL, "runs": 100}, seeds=range(8), scale="ci", null={"rate": same, "runs": 100})
    assert v.label == INCONCLUSIVE and "does not beat its null" in v.record["reason"]
    assert v.record["null"]["verdict"] == REPRODUCED and not v.record["null"]["comparisons"][0]["beats_null"]
    chance = [0.5, 0.45, 0.52, 0.48, 0.5, 0.47, 0.53, 0.49]  # the null passes the criterion, the real beats it
    v = check(NULLED, {"rate": REAL, "runs": 100}, seeds=range(8), scale="ci", null={"rate": chance, "runs": 100})
    assert v.label == REPRODUCED and v.record["null"]["verdict"] == REPRODUCED
    p = stats.permutation_test((REAL, chance), lambda a, b, axis: a.mean(axis) - b.mean(axis), vectorized=True,
                               permutation_type="independent", alternative="greater", n_resamples=9999,
                               rng=np.random.default_rng(0)).pvalue
    assert v.record["null"]["comparisons"][0]["p_value"] == pytest.approx(p) and p < 0.05
    # exact at small n: 5 against 5 has 252 splits, the real one the most extreme
    assert claims._permutation_p(np.array(REAL[:5]), np.array(chance[:5]), "greater") == pytest.approx(1 / 252)
    three = check(NULLED, {"rate": REAL[:3], "runs": 100}, seeds=range(3), scale="ci",
                  null={"rate": chance[:3], "runs": 100})  # 3 vs 3: no permutation p can fall below 1/20
    assert three.label == INCONCLUSIVE
    with pytest.raises(ClaimError, match="same n"):
        check(NULLED, {"rate": REAL, "runs": 100}, seeds=range(8), scale="ci", null={"rate": chance[:4], "runs": 1})
    with pytest.raises(ClaimError, match="null control"):
        check(NULLED, {"rate": [0.6, 0.7], "runs": 100}, seeds=[0], scale="ci")


RHO = Claim("demo", "rank_correlation", "x predicts y", "v", "mean rho above 0",
            [Effect("rho", "rho")], [at_least("ran", "runs", 10)],
            ({"rho": [0.8, 0.9, 0.7], "runs": 100}, {"rho": [-0.8, -0.9, -0.7], "runs": 100}),
            needs_null=True, null_description="y permuted within each unit, every order")


def test_a_null_given_as_each_units_distribution_is_drawn_from_not_averaged():
    """Where the null gives each unit its whole null distribution (here a sign: -1 or +1 with equal chance, as a
    unit's statistic over every order of two labels), the real mean is tested against the mean of one independent
    draw per unit: exact P(mean of n signs >= 1) = 2^-n, to Monte Carlo error (sd below 0.004 at 9999 draws), where
    the mean over each distribution (0 for every unit) would be a constant and say nothing beyond the interval."""
    signs = [[-1.0, 1.0]] * 3
    p3 = claims._distribution_p(np.ones(3), [np.array(r) for r in signs], "greater")
    assert p3 == pytest.approx(1 / 8, abs=0.015)
    p6 = claims._distribution_p(np.ones(6), [np.array([-1.0, 1.0])] * 6, "greater")
    assert p6 == pytest.approx(1 / 64, abs=0.006) and p6 < claims.NULL_ALPHA
    assert claims._distribution_p(-np.ones(6), [np.array([-1.0, 1.0])] * 6, "less") == pytest.approx(1 / 64, abs=0.006)
    # every order of five values: Spearman's rho over all 120, so each unit's null mean is 0 by symmetry
    orders = [[stats.spearmanr(range(5), o).statistic for o in __import__("itertools").permutations(range(5))]] * 8
    strong = [0.9, 0.8, 1.0, 0.7, 0.9, 0.6, 0.8, 1.0]
    v = check(RHO, {"rho": strong, "runs": 100}, seeds=range(8), scale="ci", null={"rho": orders, "runs": 100})
    c = v.record["null"]["comparisons"][0]
    assert v.label == REPRODUCED and c["beats_null"] and c["null_mean"] == pytest.approx(0, abs=1e-12)
    assert c["null_draws"] == claims.NULL_DRAWS and c["p_value"] == 1 / (1 + claims.NULL_DRAWS)
    # the null's own verdict is the criterion on one null data set: a draw from each unit's distribution
    drawn = v.record["null"]["effects"][0]
    assert drawn["n"] == 8 and drawn["estimate"] == pytest.approx(np.mean(claims.null_replicate(
        [np.array(o) for o in orders])))
    assert set(claims.null_replicate([np.array(o) for o in orders])) <= set(orders[0])
    weak = [0.2, -0.1, 0.3, 0.0, 0.1, -0.2, 0.3, 0.2]  # near the null: not beaten, with the comparison's power line
    r = check(RHO, {"rho": weak, "runs": 100}, seeds=range(8), scale="ci", null={"rho": orders, "runs": 100}).record
    assert not r["null"]["comparisons"][0]["beats_null"]
    with pytest.raises(ClaimError, match="finite"):
        check(RHO, {"rho": strong, "runs": 100}, seeds=range(8), scale="ci", null={"rho": [[]] * 8, "runs": 100})
    with pytest.raises(ClaimError, match="same n"):
        check(RHO, {"rho": strong, "runs": 100}, seeds=range(8), scale="ci", null={"rho": orders[:4], "runs": 100})


def test_power_line_against_null_distributions_by_hand():
    """n = ((z_{0.95} s0 + z_power s) / shift)^2, s0 the units' pooled null sd, s the real units' sd."""
    x, rows = np.array([0.2, 0.4, 0.3, 0.1]), [np.array([-1.0, 1.0])] * 4  # shift 0.25, s0 = 1
    z = stats.norm.ppf(0.95) * 1.0 + stats.norm.ppf(claims.POWER) * np.std(x, ddof=1)
    assert claims.distribution_units_needed(x, rows, "greater") == math.ceil((z / 0.25) ** 2)
    assert claims.distribution_units_needed(-x, rows, "greater") is None
    assert claims.distribution_units_needed(-x, rows, "less") == math.ceil((z / 0.25) ** 2)


def test_calibration_seeds_must_be_apart_from_verdict_seeds():
    v = check(BETTER, {"diff": STRONG, "b_acc": 0.9}, seeds=range(10, 18), calibration_seeds=[0, 1, 2], scale="ci")
    assert v.record["calibration_seeds"] == [0, 1, 2] and v.record["seeds"] == list(range(10, 18))
    assert v.record["contract"] == 2
    with pytest.raises(ClaimError, match=r"overlap the calibration seeds \[0, 1, 2\].*\[2\]"):
        check(BETTER, {"diff": STRONG, "b_acc": 0.9}, seeds=range(2, 10), calibration_seeds=[0, 1, 2], scale="ci")


def test_record_follows_the_schema_and_replaces_the_same_claim_and_scale():
    check(BETTER, {"diff": STRONG, "b_acc": 0.9}, seeds=range(8), calibration_seeds=[], scale="ci")
    check(BETTER, {"diff": NONE, "b_acc": 0.9}, seeds=range(8), calibration_seeds=[], scale="ci")
    check(SAME, {"diff": np.array([0.01, -0.02, 0.0]), "loss": np.float32(0.5)}, seeds=[0, 1, 2], scale="smoke")
    check(NULLED, {"rate": REAL, "runs": 100}, seeds=range(8), scale="full", null={"rate": REAL, "runs": 100})
    data = load_results("demo")
    jsonschema.validate(data, claims.RESULTS_SCHEMA)
    assert [(r["claim_id"], r["verdict"]) for r in data["records"]] == [
        ("better", REFUTED), ("same", INCONCLUSIVE), ("winner_weaker", INCONCLUSIVE)]
    r = data["records"][1]
    assert r["margin"] == 0.5 and r["effect"]["method"].startswith("TOST") and r["units_needed"] >= 2
    json.dumps(r)


def test_bad_input_is_a_clear_error_and_loses_nothing():
    check(SAME, {"diff": [0.0, 0.01], "loss": 0.1}, seeds=[0, 1], scale="ci")
    with pytest.raises(ClaimError, match=r"'better'.*needs measured value 'b_acc'"):
        check(BETTER, {"diff": [1.0, 2.0]}, seeds=[0], scale="ci")
    with pytest.raises(ClaimError, match="non-finite"):
        check(BETTER, {"diff": [1.0, math.nan], "b_acc": 1.0}, seeds=[0], scale="ci")
    with pytest.raises(ValueError, match="valid scales"):
        check(BETTER, {"diff": [1.0, 2.0], "b_acc": 1.0}, seeds=[0], scale="medium")
    assert [r["claim_id"] for r in load_results("demo")["records"]] == ["same"]


def test_a_claim_without_examples_preconditions_or_effects_is_refused():
    base = dict(chapter="demo", id="x", paper_statement="s", paper_value="v", criterion="c")
    with pytest.raises(ClaimError, match="no precondition"):
        Claim(**base, effects=[Effect("e", "e")], preconditions=[], examples=({}, {}))
    with pytest.raises(ClaimError, match="no effect"):
        Claim(**base, effects=[], preconditions=[at_least("p", "p", 0)], examples=({}, {}))
    with pytest.raises(ClaimError, match="examples"):
        Claim(**base, effects=[Effect("e", "e")], preconditions=[at_least("p", "p", 0)], examples=({},))
    with pytest.raises(ClaimError, match="null_description"):
        Claim(**base, effects=[Effect("e", "e")], preconditions=[at_least("p", "p", 0)], examples=({}, {}),
              needs_null=True)


def test_examples_behave_catches_a_claim_that_cannot_fail():
    cannot_fail = Claim("demo", "always", "s", "v", "c", [Effect("e", lambda m: [1.0, 1.1])],
                        [at_least("p", "p", 0)], ({"p": 1}, {"p": 1}, {"p": 1}))
    with pytest.raises(ClaimError, match="non-reproducing example comes out reproduced"):
        claims.examples_behave(cannot_fail)
    fails_by_precondition = Claim("demo", "weak", "s", "v", "c", [Effect("e", "e")], [at_least("p", "p", 1)],
                                  ({"e": [1, 1.1], "p": 1}, {"e": [1, 1.1], "p": 0}))
    with pytest.raises(ClaimError, match="fails preconditions"):
        claims.examples_behave(fails_by_precondition)


def test_a_statement_that_holds_for_any_data_is_caught():
    """An identity (here: the estimator's saving equals rho squared, measured on the same data it is computed from)
    comes out reproduced on data with no effect, so it is a unit test, not a claim."""
    identity = Claim("demo", "identity", "saving = rho^2", "v", "saving - rho^2 within 0.01",
                     [Equivalence("gap", lambda m: np.subtract(m["saving"], np.square(m["rho"])), margin=0.01)],
                     [at_least("n", "n", 10)],
                     ({"saving": [0.25, 0.36, 0.49], "rho": [0.5, 0.6, 0.7], "n": 100},
                      {"saving": [0.5, 0.6, 0.7], "rho": [0.5, 0.6, 0.7], "n": 100},
                      {"saving": [0.0, 0.01, 0.04], "rho": [0.0, 0.1, 0.2], "n": 100}))
    with pytest.raises(ClaimError, match="holds for any data"):
        claims.examples_behave(identity)
    with pytest.raises(ClaimError, match="third example"):
        claims.examples_behave(Claim("demo", "fn", "s", "v", "c", [Effect("e", lambda m: m["e"])],
                                     [at_least("p", "p", 0)], ({"e": [1, 1.1], "p": 1}, {"e": [-1, 1], "p": 1})))
    # derived where every effect reads a key: each effect's units spread around its null, an equivalence's margin
    derived = BETTER.no_effect_example()
    assert np.mean(derived["diff"]) == pytest.approx(0.0) and len(derived["diff"]) == 12
    assert np.mean(SAME.no_effect_example()["diff"]) == pytest.approx(0.5)
    assert SHARE.no_effect_example()["is_b"] == [0.0] * 12
    claims.examples_behave(BETTER)


def test_forget_notebook_drops_only_that_notebooks_records(monkeypatch):
    monkeypatch.setenv("ICML25_NOTEBOOK", "01_a")
    check(BETTER, {"diff": [3.0, 2.5], "b_acc": 0.9}, seeds=[0, 1], scale="ci")
    monkeypatch.setenv("ICML25_NOTEBOOK", "02_b")
    check(SAME, {"diff": [0.0, 0.01], "loss": 0.1}, seeds=[0, 1], scale="ci")
    forget_notebook("demo", "01_a", "ci")
    assert [r["claim_id"] for r in load_results("demo")["records"]] == ["same"]


def _claims_of(slug: str) -> list[Claim]:
    importlib.import_module(f"icml25.{slug}")
    return [c for (chapter, _), c in sorted(claims.REGISTRY.items()) if chapter == slug]


@pytest.mark.parametrize("slug", [c.slug for c in catalog.ALL])
def test_every_claim_of_every_chapter_is_falsifiable(slug):
    """Each paper's chapter declares claims (the front chapter, the workbench, shows the reasoners' calibration
    table instead), and each comes out reproduced on its first example and not on its second,
    which meets every precondition: a claim whose check cannot fail is a defect."""
    mine = _claims_of(slug)
    assert mine or slug == "workbench", f"chapter {slug} declares no claim"  # the front chapter calibrates only
    for claim in mine:
        claims.examples_behave(claim)


def test_a_precondition_without_data_does_not_hold_and_no_units_is_inconclusive():
    got = decide(BETTER, diff=[], b_acc=[])
    assert got["verdict"] == INCONCLUSIVE and got["preconditions"][0]["holds"] is False
    assert got["effects"][0]["n"] == 0
    assert decide(BETTER, diff=[3.0, 2.5, 3.5], b_acc=[0.9, float("nan")])["verdict"] == INCONCLUSIVE


def _notebooks_that_check(slug: str) -> list:
    from icml25.core.paths import PROJECT_ROOT

    return [p for p in sorted((PROJECT_ROOT / "notebooks" / slug).glob("*.py")) if "check(" in p.read_text()]


@pytest.mark.parametrize("slug", [c.slug for c in catalog.ALL])
def test_every_verdict_is_decided_on_seeds_apart_from_calibration(slug):
    """Contract v2: each notebook that checks a claim passes the chapter's calibration seeds to `check`, takes a
    `seeds` parameter (so a replication can re-decide it on other seeds), and at every scale the chapter's verdict
    seeds and calibration seeds do not overlap."""
    import re

    notebooks = _notebooks_that_check(slug)
    for nb in notebooks:
        text = nb.read_text()
        calls = re.findall(r"check\((?:[^()]|\([^()]*\))*\)", text, flags=re.S)
        missing = [c.split(",")[0] for c in calls if "calibration_seeds=" not in c]
        assert not missing, f"{nb.name}: check calls without calibration_seeds=: {missing}"
        if slug != "kernels":  # the appendix's units are timing rounds on one machine, not seeds
            assert re.search(r"^seeds\s*=", text, flags=re.M), f"{nb.name} has no `seeds` parameter"
    module = importlib.import_module(f"icml25.{slug}")
    if notebooks and hasattr(module, "config"):
        for scale in ("smoke", "ci", "full"):
            cfg = module.config(scale)
            assert "calibration_seeds" in cfg, f"{slug}.config({scale!r}) names no calibration_seeds"
            shared = set(cfg.seeds) & set(cfg.calibration_seeds)
            assert not shared, f"{slug} at {scale}: verdict seeds {cfg.seeds} overlap calibration seeds {shared}"


def test_a_verdict_held_back_by_the_unit_floor_asks_for_at_least_the_floor():
    got = decide(BETTER, diff=STRONG[:3], b_acc=0.9)  # a clear effect on three units: the spread alone asks for 2
    assert got["verdict"] == INCONCLUSIVE and got["units_needed"] == claims.MIN_UNITS


def test_the_between_run_sd_is_the_spread_of_run_means_beyond_what_their_units_explain():
    # runs whose means agree have no run effect, however their units spread
    assert claims.between_run_sd([0.1, 0.1, 0.1], [0.2, 0.3, 0.1], 12) == 0.0
    # means 0, 0.1, 0.2 (variance 0.01) with units of sd 0.1: sqrt((12 * 0.01 - 0.01) / 12)
    assert claims.between_run_sd([0.0, 0.1, 0.2], [0.1] * 3, 12) == pytest.approx(math.sqrt(0.11 / 12))


TWO_CASES = Claim(chapter="demo", id="two_cases", paper_statement="A beats B on every case", paper_value="+3",
                  criterion="every case's A - B > 0 (paired t, 95%); refuted when any lies below +1",
                  effects=[Effect("wide_margin", "first", min_effect=1.0),
                           Effect("narrow_margin", "second", min_effect=1.0)],
                  preconditions=[at_least("b_learns", "b_acc", 0.8)],
                  examples=({"first": STRONG, "second": STRONG, "b_acc": 0.9},
                            {"first": STRONG, "second": NONE, "b_acc": 0.9}))
claims.REGISTRY.pop(("demo", "two_cases"))  # a test claim, not one the book checks


def test_the_record_shows_the_effect_that_decides_not_the_first():
    """Reproduced: the case that clears its bar by the least; refuted: the case that refutes; undecided: the case
    left open; a failed precondition keeps the weakest case (the scorecard shows `record["effect"]`)."""
    weaker = [x - 1.5 for x in STRONG]  # above 0 but close: its lower end sits nearest the bar
    shown = lambda **m: check(TWO_CASES, dict(m), seeds=range(8), scale="ci").record  # noqa: E731
    r = shown(first=STRONG, second=weaker, b_acc=0.9)
    assert r["verdict"] == REPRODUCED and r["effect"]["name"] == "narrow_margin"
    r = shown(first=weaker, second=STRONG, b_acc=0.9)
    assert r["verdict"] == REPRODUCED and r["effect"]["name"] == "wide_margin"
    r = shown(first=STRONG, second=NONE, b_acc=0.9)
    assert r["verdict"] == REFUTED and r["effect"]["name"] == "narrow_margin"
    undecided = [3.0, -2.0, 4.0, -1.0, 5.0, 0.0, 2.0, -3.0]
    r = shown(first=undecided, second=STRONG, b_acc=0.9)
    assert r["verdict"] == INCONCLUSIVE and r["effect"]["name"] == "wide_margin"
    r = shown(first=STRONG, second=weaker, b_acc=0.5)
    assert r["verdict"] == INCONCLUSIVE and r["effect"]["name"] == "narrow_margin"
    # an equivalence's slack is the share of its margin left unused
    inside = {"ci_low": -0.1, "ci_high": 0.4, "direction": "equivalent", "margin": 0.5, "verdict": REPRODUCED}
    roomy = dict(inside, ci_low=-0.1, ci_high=0.1)
    assert claims.deciding_effect([roomy, inside], REPRODUCED) is inside


def test_a_null_not_beaten_gets_the_power_line_of_the_null_comparison():
    """Shares (units of 0 and 1): the fewest units at which Fisher's exact test, the permutation test of a
    difference in means on such units, would beat the null at the observed shares; continuous units: the two-sample
    normal formula with the pooled spread; none when the real mean is not beyond the null's."""
    one_of_eight, zeros = np.r_[1.0, np.zeros(7)], np.zeros(8)
    m = claims.null_units_needed(one_of_eight, zeros, "greater")

    def fisher(units: int) -> float:
        k = round(units / 8)
        return stats.fisher_exact([[k, units - k], [0, units]], alternative="greater").pvalue

    assert fisher(m) < claims.NULL_ALPHA <= max(fisher(u) for u in range(9, m))
    assert claims.null_units_needed(zeros, one_of_eight, "less") == m  # the same test seen from the other side
    assert claims.null_units_needed(zeros, one_of_eight, "greater") is None
    x, y = np.array([1.0, 2.0, 3.0, 2.0]), np.array([1.5, 1.0, 2.0, 1.5])  # shift 0.5, pooled sd sqrt(5/12)
    z = stats.norm.ppf(0.95) + stats.norm.ppf(claims.POWER)
    assert claims.null_units_needed(x, y, "greater") == 2 * math.ceil((z * math.sqrt(5 / 12) / 0.5) ** 2)
    near = [0.6, 0.68, 0.64, 0.61, 0.66, 0.64, 0.62, 0.68]  # below the real units, not far enough at n = 8
    r = check(NULLED, {"rate": REAL, "runs": 100}, seeds=range(8), scale="ci", null={"rate": near, "runs": 100}).record
    need = r["null"]["comparisons"][0]["units_needed"]
    assert r["verdict"] == INCONCLUSIVE and need > 8 and r["units_needed"] == need
    assert r["reason"].count("Power line") == 1 and f"about {need} units" in r["reason"]
    same = [0.61, 0.69, 0.66, 0.63, 0.67, 0.65, 0.64, 0.7]  # the null's mean is above the real one's
    r = check(NULLED, {"rate": REAL, "runs": 100}, seeds=range(8), scale="ci", null={"rate": same, "runs": 100}).record
    assert r["units_needed"] is None and "No feasible number of units beats the null" in r["reason"]


def test_sign_flip_interval_is_the_set_of_shifts_the_exact_test_accepts():
    """Against a plain enumeration of all 2^8 sign patterns on a grid of shifts: the interval is exactly the
    accepted set; with 5 units no pattern can reject at 5%, so there is no interval; an effect can use it."""
    x = np.array([0.41, 0.9, 0.1, 0.55, 0.3, 0.72, -0.1, 0.6])
    est, lo, hi = claims.sign_flip_interval(x, 0.95)
    signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * 8)).reshape(8, -1).T

    def p(mu):
        d = x - mu
        return np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12)

    grid = np.linspace(-0.5, 1.5, 2001)
    accepted = grid[[p(mu) > 0.05 for mu in grid]]
    assert est == pytest.approx(x.mean())
    assert lo == pytest.approx(accepted.min(), abs=1e-3) and hi == pytest.approx(accepted.max(), abs=1e-3)
    assert all(p(mu) > 0.05 for mu in np.linspace(lo + 1e-6, hi - 1e-6, 50))  # no hole inside
    assert np.isnan(claims.sign_flip_interval(x[:5], 0.95)[1])
    e = Effect("rho", "rho", method="sign_flip").decide("demo", {"rho": x[:5]}, unit_floor=False)
    assert e["verdict"] == INCONCLUSIVE and "sign-flip" in e["note"]
    e = Effect("rho", "rho", method="sign_flip").decide("demo", {"rho": x}, unit_floor=False)
    assert e["verdict"] == REPRODUCED and e["ci_low"] == pytest.approx(lo)
