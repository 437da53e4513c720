"""Reward-guided speculative decoding: the mixture and its optimality on toy categoricals, the decoder's limits
(δ above every reward = target only, δ = 0 = draft only), FLOP bookkeeping, speculative decoding's exactness,
and bad input."""

import numpy as np
import pytest

from icml25 import rsd
from icml25.core import arithmetic, flops, reasoners, tinylm, zoo
from icml25.core.seeding import derive_seed


@pytest.fixture(scope="module")
def pair():
    return zoo.get("arith-draft", "smoke", 0), zoo.get("arith-target", "smoke", 0)


@pytest.fixture(scope="module")
def problems():
    return reasoners.test_problems(16)


class GradedPRM:
    """A PRM with graded scores in [0, 1]: the oracle's verdict blurred by a fixed per-step jitter."""

    name, model = "graded", None

    def score(self, problems, prefixes, steps):
        exact = rsd.OraclePRM().score(problems, prefixes, steps)
        jitter = np.array([(derive_seed(0, p.prompt, x, s) % 1000) / 1000 for p, x, s in zip(problems, prefixes, steps)])
        return 0.6 * exact + 0.4 * jitter


def test_mixture_sums_to_one_and_matches_sampling():
    p_m, p_big = np.array([0.4, 0.25, 0.15, 0.1, 0.1]), np.array([0.05, 0.1, 0.2, 0.3, 0.35])
    r = np.array([0.9, 0.2, 0.75, 0.5, 0.1])
    mix = rsd.mixture(p_m, p_big, r, threshold=0.6)
    assert mix.sum() == pytest.approx(1.0)
    nu = p_m[r < 0.6].sum()
    assert mix[0] == pytest.approx(0.4 + nu * 0.05) and mix[1] == pytest.approx(nu * 0.1)
    draws = rsd.sample_rsd_categorical(p_m, p_big, r, 0.6, 100_000, seed=0)
    empirical = np.bincount(draws, minlength=5) / len(draws)
    assert 0.5 * np.abs(empirical - mix).sum() < 0.01


def test_mixture_limits():
    p_m, p_big, r = np.array([0.7, 0.3]), np.array([0.2, 0.8]), np.array([0.3, 0.9])
    np.testing.assert_allclose(rsd.mixture(p_m, p_big, r, 0.0), p_m)
    np.testing.assert_allclose(rsd.mixture(p_m, p_big, r, 1.01), p_big)


def test_threshold_set_is_optimal_among_sets_of_equal_draft_mass():
    p_m = np.array([1, 1, 2, 2, 2, 3, 2, 3]) / 16  # integer masses: many subsets share a mass
    p_big = np.full(8, 1 / 8)
    r = np.array([0.95, 0.1, 0.8, 0.55, 0.3, 0.7, 0.6, 0.2])
    n_compared = 0
    for delta in sorted(set(r)):
        s_delta = r >= delta
        mass = p_m[s_delta].sum()
        best, _ = rsd.brute_force_best(p_m, p_big, r, mass)
        assert rsd.expected_reward(p_m, p_big, r, s_delta) == pytest.approx(best)
        n_compared += sum(abs(p_m[s].sum() - mass) < 1e-9 for s in rsd.acceptance_sets(8))
    assert n_compared > 3 * len(set(r))  # the threshold sets really had competitors


def test_high_threshold_reproduces_target_only(pair, problems):
    draft, target = pair
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems, rsd.OraclePRM(),
                   rsd.threshold_rule(1.01))
    t = rsd.decode_single(target.model, target.tokenizer, problems, role="target")
    assert d.completions == t.completions
    assert d.tokens["draft_accepted"] == 0 and d.tokens["draft_discarded"] > 0
    assert d.tokens["target"] == t.tokens["target"]
    assert d.flops["target"] == t.flops["target"]  # the same tokens, read once each, cost the same
    assert d.acceptance_rate == 0.0


def test_zero_threshold_reproduces_draft_only(pair, problems):
    draft, target = pair
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems, rsd.OraclePRM(),
                   rsd.threshold_rule(0.0))
    b = rsd.decode_single(draft.model, draft.tokenizer, problems, role="draft")
    assert d.completions == b.completions
    assert d.target_calls == 0 and d.flops["target"] == 0 and d.tokens["target"] == 0
    assert d.flops["draft"] == b.flops["draft"]


def test_decisions_follow_the_threshold_and_flops_add_up(pair, problems):
    draft, target = pair
    prm = GradedPRM()
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems, prm,
                   rsd.threshold_rule(0.25))
    steps = [st for s in d.steps for st in s]
    assert any(st.accepted for st in steps) and any(not st.accepted for st in steps)
    assert all((st.reward >= 0.25) == st.accepted for st in steps)
    assert all(c == "".join(st.text for st in s) for c, s in zip(d.completions, d.steps))
    assert all(st.text == st.draft for st in steps if st.accepted)
    # token bookkeeping: every draft token is either kept or discarded
    assert d.tokens["draft_accepted"] == sum(st.draft_tokens for st in steps if st.accepted)
    assert d.tokens["draft_discarded"] == sum(st.draft_tokens for st in steps if not st.accepted)
    assert all(st.draft_tokens >= len(st.draft) for st in steps)
    assert d.total_flops == d.flops["draft"] + d.flops["target"] + d.flops["prm"]
    assert d.flops["prm"] == 0  # this PRM is a program, not a model
    assert d.target_calls == sum(not st.accepted for st in steps)


def test_accepted_set_shrinks_as_threshold_grows():
    rewards = np.random.default_rng(0).random(200)
    accepted = [rsd.threshold_rule(delta)(rewards) for delta in np.linspace(0, 1.01, 12)]
    for lo, hi in zip(accepted, accepted[1:]):
        assert not (hi & ~lo).any()
    assert accepted[0].all() and not accepted[-1].any()


def test_learned_prm_costs_flops(pair, problems):
    draft, target = pair
    prm = rsd.learned_prm("smoke", 0)
    r = prm.score(problems[:4], [""] * 4, [p.steps()[0] for p in problems[:4]])
    assert ((r >= 0) & (r <= 1)).all()
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems[:4], prm,
                   rsd.threshold_rule(0.5))
    assert d.flops["prm"] > 0


def test_meter_reads_each_token_once():
    cfg = tinylm.make_model("nano", tinylm.char_tokenizer(arithmetic.ALPHABET), 0).config
    m = rsd.Meter(cfg, [0])
    m.call(0, 10, 5)  # prompt of 10, 5 written and kept
    m.call(0, 15, 4, keep=False)  # a discarded step: paid for, rolled back
    m.call(0, 15, 3)
    assert m.flops == flops.forward_flops(cfg, 15) + flops.forward_flops(cfg, 4, past=15) + \
        flops.forward_flops(cfg, 3, past=15)
    assert m.cached == [18] and m.tokens_read == 10 and m.tokens_written == 12


def test_speculative_decoding_equals_target_greedy(pair, problems):
    draft, target = pair
    from icml25.core.generation import generate
    ids = generate(target.model, target.tokenizer, [p.prompt for p in problems], rsd.MAX_NEW_TOKENS).token_ids
    runs = [rsd.speculative_decode(draft.model, target.model, draft.tokenizer, p.prompt, gamma=3) for p in problems]
    assert [r["token_ids"] for r in runs] == ids
    cost = rsd.speculative_cost(draft.model, target.model, draft.tokenizer, problems, ids, gamma=3)
    assert cost["rounds"] == sum(r["rounds"] for r in runs)
    assert cost["accepted"] == sum(r["accepted"] for r in runs)


def test_best_of_n_is_monotone_in_compute(pair, problems):
    draft, _ = pair
    bon = rsd.best_of_n(draft, problems, rsd.OraclePRM(), 3, 1.0, seed=0)
    assert bon["n"] == [1, 2, 3]
    assert all(a <= b for a, b in zip(bon["flops"], bon["flops"][1:]))
    assert all(a <= b + 1e-12 for a, b in zip(bon["accuracy"], bon["accuracy"][1:]))  # the oracle never regresses


def test_bad_input(pair, problems):
    draft, target = pair
    words = tinylm.word_tokenizer(["a", "b"])
    with pytest.raises(ValueError, match="tokenizers differ"):
        rsd.decode(draft.model, draft.tokenizer, target.model, words, problems, rsd.OraclePRM(),
                   rsd.threshold_rule(0.5))
    with pytest.raises(ValueError, match="empty batch"):
        rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, [], rsd.OraclePRM(),
                   rsd.threshold_rule(0.5))
    with pytest.raises(ValueError, match="probability vector"):
        rsd.mixture([0.5, 0.6], [0.5, 0.5], [1, 0], 0.5)
    with pytest.raises(ValueError, match="one length"):
        rsd.mixture([0.5, 0.5], [1.0], [1, 0], 0.5)
    with pytest.raises(ValueError, match="epsilon"):
        rsd.NoisyOraclePRM(1.5, 0)
    with pytest.raises(ValueError, match="valid settings"):
        rsd.config("ci", threshold=0.5)


def test_noisy_oracle_flips_at_rate_epsilon():
    ps = arithmetic.sample_problems(400, 0)
    steps = [p.steps()[0] for p in ps]
    r = rsd.NoisyOraclePRM(0.2, seed=0).score(ps, [""] * len(ps), steps)
    assert 0.14 < (r == 0).mean() < 0.26  # every step is correct, so zeros are flips
    np.testing.assert_array_equal(r, rsd.NoisyOraclePRM(0.2, seed=0).score(ps, [""] * len(ps), steps))


def test_claims_decide_from_measurements():
    eff = {"rsd_accuracy": [0.5, 0.9], "rsd_flop_ratio": [0.5, 0.55], "target_accuracy": 0.91}
    assert rsd.EFFICIENCY.test(eff)
    assert not rsd.EFFICIENCY.test(eff | {"rsd_flop_ratio": [0.5, 0.8]})
    assert rsd.BEATS_PARALLEL.test({"rsd_accuracy": 0.8, "bon_accuracy": 0.8})
    assert not rsd.BEATS_PARALLEL.test({"rsd_accuracy": 0.7, "bon_accuracy": 0.8})
    assert not rsd.THRESHOLD_MATTERS.test({"threshold_accuracy": [0.9, 0.8], "random_accuracy": [0.7, 0.8]})
    assert rsd.THRESHOLD_MATTERS.test({"threshold_accuracy": [0.9, 0.8], "random_accuracy": [0.7, 0.7]})
