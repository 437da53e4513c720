"""The workbench: its measurements give the claim one value per seed, and the target-minus-draft gap is taken
over the draft's training mix only."""

import pytest

from icml25 import workbench
from icml25.core import reasoners


def test_gap_is_over_the_drafts_training_mix():
    cfg = workbench.config("smoke", n_test=30)
    (c,) = workbench.evaluate(cfg)
    problems = reasoners.test_problems(30)
    seen = [p for p in problems if p.n_steps <= reasoners.DRAFT["smoke"]["max_ops"]]
    by = {k: sum(p.n_steps == k for p in seen) for k in {p.n_steps for p in seen}}
    expected = sum((c["target_by_ops"][k] - c["draft_by_ops"][k]) * n for k, n in by.items()) / len(seen)
    assert c["target_minus_draft_seen"] == pytest.approx(expected)
    m = workbench.claim_measurements([c])
    assert all(len(v) == 1 for v in m.values())
    assert workbench.LARGER_IS_BETTER.decide(m)["verdict"] == "inconclusive"  # one seed decides nothing


def test_by_ops_table_is_mean_and_sd_over_seeds():
    cals = [{"draft_by_ops": {1: 0.5, 2: 0.2}}, {"draft_by_ops": {1: 0.7, 2: 0.4}}]
    steps, mean, sd = workbench.by_ops_table(cals, "draft")
    assert steps == [1, 2] and mean.tolist() == pytest.approx([0.6, 0.3]) and sd.tolist() == pytest.approx([0.1, 0.1])
