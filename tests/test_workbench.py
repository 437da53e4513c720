"""The workbench: its calibration gives one row per seed, and the target-minus-draft gap is taken over the draft's
training mix only. The chapter declares no claim: that the target beats the draft is the pair's design."""

import pytest

from icml25 import workbench
from icml25.core import claims, reasoners


def test_gap_is_over_the_drafts_training_mix():
    cfg = workbench.config("smoke", n_test=30)
    (c,) = workbench.evaluate(cfg)
    problems = reasoners.test_problems(30)
    seen = [p for p in problems if p.n_steps <= reasoners.DRAFT["smoke"]["max_ops"]]
    by = {k: sum(p.n_steps == k for p in seen) for k in {p.n_steps for p in seen}}
    expected = sum((c["target_by_ops"][k] - c["draft_by_ops"][k]) * n for k, n in by.items()) / len(seen)
    assert c["target_minus_draft_seen"] == pytest.approx(expected)
    assert sum(c["draft_by_ops"][k] * n for k, n in by.items()) / len(seen) <= 1


def test_the_workbench_declares_no_claim():
    assert not [key for key in claims.REGISTRY if key[0] == "workbench"]


def test_by_ops_table_is_mean_and_sd_over_seeds():
    cals = [{"draft_by_ops": {1: 0.5, 2: 0.2}}, {"draft_by_ops": {1: 0.7, 2: 0.4}}]
    steps, mean, sd = workbench.by_ops_table(cals, "draft")
    assert steps == [1, 2] and mean.tolist() == pytest.approx([0.6, 0.3]) and sd.tolist() == pytest.approx([0.1, 0.1])
