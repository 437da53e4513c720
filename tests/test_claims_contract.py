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
                                at_least, at_most, check, forget_notebook, load_results)

BETTER = Claim(chapter="demo", id="better", paper_statement="A beats B", paper_value="+3",
               criterion="A - B > 0 (paired t, 95%); refuted below +1",
               effects=[Effect("a_minus_b", "diff", min_effect=1.0)],
               preconditions=[at_least("b_learns", "b_acc", 0.8)],
               examples=({"diff": [3.0, 2.5, 3.5], "b_acc": 0.9}, {"diff": [0.1, -0.1, 0.0], "b_acc": 0.9}))

SAME = Claim(chapter="demo", id="same", paper_statement="A equals B", paper_value="no difference",
             criterion="TOST with margin 0.5", effects=[Equivalence("a_minus_b", "diff", margin=0.5)],
             preconditions=[at_most("loss_low", "loss", 1.0)],
             examples=({"diff": [0.01, -0.02, 0.0, 0.01], "loss": 0.5}, {"diff": [2.0, 2.2, 1.9], "loss": 0.5}))


def decide(claim, **m):
    return claim.decide(m)


def test_three_verdicts_of_a_directional_effect():
    assert decide(BETTER, diff=[3.0, 2.5, 3.5], b_acc=0.9)["verdict"] == REPRODUCED
    # wholly below the paper's smallest effect: refuted, whether on the wrong side or just short of it
    assert decide(BETTER, diff=[0.1, -0.1, 0.0], b_acc=0.9)["verdict"] == REFUTED
    assert decide(BETTER, diff=[-2.0, -2.5, -1.5], b_acc=0.9)["verdict"] == REFUTED
    # wide interval across zero and above min_effect: decides nothing
    got = decide(BETTER, diff=[4.0, -3.0, 1.0], b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "decides nothing" in got["reason"]


def test_interval_is_scipys_paired_t_interval():
    x = [0.3, 0.9, 0.4, 1.1]
    e = decide(BETTER, diff=x, b_acc=0.9)["effects"][0]
    lo, hi = stats.ttest_1samp(x, 0).confidence_interval(0.95)
    assert (e["estimate"], e["ci_low"], e["ci_high"], e["n"]) == pytest.approx((np.mean(x), lo, hi, 4))


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


def test_less_direction_and_null_value():
    c = Claim("demo", "cheaper", "s", "v", "ratio < 1", [Effect("ratio", "r", direction="less", null=1.0,
                                                               min_effect=0.8)],
              [at_least("ok", "acc", 0.5)], ({"r": [0.5, 0.6], "acc": 1}, {"r": [1.1, 1.2], "acc": 1}))
    assert decide(c, r=[0.5, 0.52, 0.55], acc=1)["verdict"] == REPRODUCED
    assert decide(c, r=[0.95, 0.97, 0.99], acc=1)["verdict"] == REFUTED
    assert decide(c, r=[0.5, 1.4, 0.9], acc=1)["verdict"] == INCONCLUSIVE
    with pytest.raises(ClaimError, match="min_effect"):
        Effect("bad", "r", direction="less", null=1.0, min_effect=1.2)


def test_failed_precondition_makes_any_result_inconclusive_and_is_named():
    got = decide(BETTER, diff=[3.0, 2.5, 3.5], b_acc=0.5)
    assert got["verdict"] == INCONCLUSIVE
    assert "b_learns" in got["reason"] and "0.5" in got["reason"]
    assert got["preconditions"] == [{"id": "b_learns", "holds": False, "detail": "b_acc >= 0.8; measured 0.5"}]
    # a per-seed list is judged by its worst unit
    assert decide(BETTER, diff=[3.0, 2.5, 3.5], b_acc=[0.9, 0.79])["verdict"] == INCONCLUSIVE


def test_equivalence_by_tost_with_declared_margin():
    assert decide(SAME, diff=[0.01, -0.02, 0.0, 0.01], loss=0.5)["verdict"] == REPRODUCED
    assert decide(SAME, diff=[2.0, 2.2, 1.9], loss=0.5)["verdict"] == REFUTED
    # more seeds do not turn a true equivalence into a failure (the old "interval contains zero" rule did)
    rng = np.random.default_rng(0)
    small, large = rng.normal(0, 0.1, 4), rng.normal(0, 0.1, 64)
    assert decide(SAME, diff=small.tolist(), loss=0.5)["verdict"] == REPRODUCED
    assert decide(SAME, diff=large.tolist(), loss=0.5)["verdict"] == REPRODUCED
    # noisy and centred: neither inside nor outside the margin
    assert decide(SAME, diff=[1.0, -1.0, 0.5, -0.4], loss=0.5)["verdict"] == INCONCLUSIVE
    from statsmodels.stats.weightstats import ttost_paired
    x = np.array([0.1, 0.3, -0.05, 0.2])
    p = ttost_paired(x, np.zeros(4), -0.5, 0.5)[0]
    assert (p < 0.05) == (decide(SAME, diff=x.tolist(), loss=0.5)["verdict"] == REPRODUCED)


def test_one_unit_is_inconclusive_not_an_error():
    got = decide(BETTER, diff=[3.0], b_acc=0.9)
    assert got["verdict"] == INCONCLUSIVE and "only 1 paired unit" in got["reason"]


def test_conjunction_of_effects():
    ok, bad, wide = [1.0, 1.1, 1.05], [-1.0, -1.2, -1.1], [-1.0, 3.0, 0.5]
    c = Claim("demo", "both", "s", "v", "both positive", [Effect("x", "x"), Effect("y", "y")],
              [at_least("ok", "acc", 0)], ({"x": ok, "y": ok, "acc": 1}, {"x": ok, "y": bad, "acc": 1}))
    assert c.decide({"x": ok, "y": ok, "acc": 1})["verdict"] == REPRODUCED
    assert c.decide({"x": ok, "y": bad, "acc": 1})["verdict"] == REFUTED
    assert c.decide({"x": ok, "y": wide, "acc": 1})["verdict"] == INCONCLUSIVE


NULLED = Claim("demo", "winner_weaker", "search finds it", "v", "rate above 0.25",
               [Effect("rate", "rate", null=0.25)], [at_least("ran", "runs", 10)],
               ({"rate": [0.6, 0.7, 0.65], "runs": 100}, {"rate": [0.2, 0.25, 0.3], "runs": 100}),
               needs_null=True, null_description="the same search on a noise utility")


def test_criterion_that_passes_on_its_null_is_inconclusive():
    v = check(NULLED, {"rate": [0.6, 0.7, 0.65], "runs": 100}, seeds=[0, 1, 2], scale="ci",
              null={"rate": [0.6, 0.66, 0.7], "runs": 100})
    assert v.label == INCONCLUSIVE and "null control" in v.record["reason"]
    assert v.record["null"]["verdict"] == REPRODUCED
    v = check(NULLED, {"rate": [0.6, 0.7, 0.65], "runs": 100}, seeds=[0, 1, 2], scale="ci",
              null={"rate": [0.2, 0.22, 0.26], "runs": 100})
    assert v.label == REPRODUCED
    with pytest.raises(ClaimError, match="null control"):
        check(NULLED, {"rate": [0.6, 0.7], "runs": 100}, seeds=[0], scale="ci")


def test_record_follows_the_schema_and_replaces_the_same_claim_and_scale():
    check(BETTER, {"diff": [3.0, 2.5, 3.5], "b_acc": 0.9}, seeds=[0, 1, 2], scale="ci")
    check(BETTER, {"diff": [0.1, -0.1, 0.0], "b_acc": 0.9}, seeds=[0, 1, 2], scale="ci")
    check(SAME, {"diff": np.array([0.01, -0.02, 0.0]), "loss": np.float32(0.5)}, seeds=[0, 1, 2], scale="smoke")
    data = load_results("demo")
    jsonschema.validate(data, claims.RESULTS_SCHEMA)
    assert [(r["claim_id"], r["verdict"]) for r in data["records"]] == [("better", REFUTED), ("same", REPRODUCED)]
    r = data["records"][1]
    assert r["margin"] == 0.5 and r["effect"]["method"].startswith("TOST")
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
    cannot_fail = Claim("demo", "always", "s", "v", "c", [Effect("e", lambda m: [1.0, 1.0])],
                        [at_least("p", "p", 0)], ({"p": 1}, {"p": 1}))
    with pytest.raises(ClaimError, match="non-reproducing example comes out reproduced"):
        claims.examples_behave(cannot_fail)
    fails_by_precondition = Claim("demo", "weak", "s", "v", "c", [Effect("e", "e")], [at_least("p", "p", 1)],
                                  ({"e": [1, 1.1], "p": 1}, {"e": [1, 1.1], "p": 0}))
    with pytest.raises(ClaimError, match="fails preconditions"):
        claims.examples_behave(fails_by_precondition)


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
    """Each chapter declares claims, and each comes out reproduced on its first example and not on its second,
    which meets every precondition: a claim whose check cannot fail is a defect."""
    mine = _claims_of(slug)
    assert mine, f"chapter {slug} declares no claim"
    for claim in mine:
        claims.examples_behave(claim)


def test_a_precondition_without_data_does_not_hold_and_no_units_is_inconclusive():
    got = decide(BETTER, diff=[], b_acc=[])
    assert got["verdict"] == INCONCLUSIVE and got["preconditions"][0]["holds"] is False
    assert got["effects"][0]["n"] == 0
    assert decide(BETTER, diff=[3.0, 2.5, 3.5], b_acc=[0.9, float("nan")])["verdict"] == INCONCLUSIVE
