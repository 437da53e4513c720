"""The shared reasoners: the calibration's cost condition holds by design, the early stop stops where it says,
single-step accuracy equals a one-prefix-at-a-time reference, and calibration agrees with plain accuracy."""

import pytest

from icml25.core import arithmetic, flops, reasoners, tinylm, zoo
from icml25.core.config import Config
from icml25.core.generation import generate


def _config(table, scale):
    return Config(scale, table[scale])


@pytest.mark.parametrize("scale", ["ci", "full"])
def test_draft_costs_at_most_an_eighth_of_the_target_per_token(scale):
    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    d, t = (_config(table, scale) for table in (reasoners.DRAFT, reasoners.TARGET))
    draft = tinylm.make_model(d.preset, tok, 0, **d.arch).config
    target = tinylm.make_model(t.preset, tok, 0, **t.arch).config
    ratio = reasoners.cost_ratio(draft, target)
    assert ratio == flops.forward_flops(draft, 48) / flops.forward_flops(target, 48)
    assert ratio <= reasoners.COST_RATIO_MAX


def test_training_stops_at_the_first_validation_that_reaches_stop_at():
    cfg = Config("smoke", dict(reasoners.TARGET["smoke"], steps=40, eval_every=10, stop_at=0.0, n_validation=10))
    _, _, info = reasoners._build(cfg, 0)
    assert info["stopped_at"] == 10 and len(info["losses"]) == 10 and len(info["evals"]) == 1
    cfg = Config("smoke", dict(reasoners.TARGET["smoke"], steps=20, eval_every=10, stop_at=None, n_validation=10))
    _, _, info = reasoners._build(cfg, 0)
    assert info["stopped_at"] == 20 and [s for s, _ in info["evals"]] == [10, 20]


def test_step_accuracy_equals_one_prefix_at_a_time():
    z = zoo.get("arith-target", "smoke", 0)
    problems = reasoners.test_problems(6)
    hits = []
    for p in problems:
        steps = p.steps()
        for k, s in enumerate(steps):
            out = generate(z.model, z.tokenizer, [p.prompt + "".join(steps[:k])], 12,
                           stop=(arithmetic.STEP_DELIMITER,)).texts[0]
            hits.append(out == s)
    assert reasoners.step_accuracy(z.model, z.tokenizer, problems) == pytest.approx(sum(hits) / len(hits))


def test_calibration_agrees_with_plain_accuracy():
    problems = reasoners.test_problems(30)
    c = reasoners.calibration("smoke", 0, problems)
    for name in ("draft", "target"):
        z = zoo.get(f"arith-{name}", "smoke", 0)
        assert c[f"{name}_accuracy"] == pytest.approx(reasoners.accuracy(z.model, z.tokenizer, problems))
        assert set(c[f"{name}_by_ops"]) == {p.n_steps for p in problems}
    assert 0 < c["cost_ratio"] < 1
    measured = {k: c[k] for k in ("cost_ratio", "draft_step_accuracy", "target_accuracy")}
    assert len([p.evaluate("demo", measured) for p in reasoners.CALIBRATION]) == 4
