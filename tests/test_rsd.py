"""Reward-guided speculative decoding: the mixture and its optimality on toy categoricals, the decoder's limits
(δ above every reward = target only, δ = 0 = draft only), FLOP bookkeeping, speculative decoding's exactness,
and bad input."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from icml25 import rsd
from icml25.core import arithmetic, flops, models, reasoners, tinylm, zoo
from icml25.core.seeding import derive_seed, numpy_rng


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


def test_noisy_oracle_is_charged_as_a_prm_of_its_cost_model(pair, problems):
    """Charging the noisy oracle at the draft's size changes its cost, not its rewards: the same completions and
    target calls as the free one, the draft's and target's FLOPs unchanged, and the PRM's FLOPs, positive, added
    to the total."""
    draft, target = pair
    free, charged = (rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems,
                                rsd.NoisyOraclePRM(0.1, 0, cost_model=m), rsd.threshold_rule(0.5))
                     for m in (None, draft.model))
    assert free.completions == charged.completions and free.target_calls == charged.target_calls
    assert free.flops["prm"] == 0 and charged.flops["prm"] > 0
    assert charged.flops["draft"] == free.flops["draft"] and charged.flops["target"] == free.flops["target"]
    assert charged.total_flops == free.total_flops + charged.flops["prm"]


def test_learned_prm_costs_flops(pair, problems):
    draft, target = pair
    prm = rsd.learned_prm(rsd.config("smoke"), 0)
    r = prm.score(problems[:4], [""] * 4, [p.steps()[0] for p in problems[:4]])
    assert ((r >= 0) & (r <= 1)).all()
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems[:4], prm,
                   rsd.threshold_rule(0.5))
    assert d.flops["prm"] > 0


def test_meter_reads_each_token_once():
    cfg = tinylm.make_model("nano", tinylm.char_tokenizer(arithmetic.ALPHABET), 0).config
    m = rsd.Meter((cfg,), [0])
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


def test_speculative_decoding_stops_at_the_token_budget(pair, problems):
    """With a budget shorter than the solutions, the output is the target's greedy output cut at the budget and
    no accepted token lies beyond it; the exact cost computation counts the same rounds and accepted tokens."""
    draft, target = pair
    from icml25.core.generation import generate
    budget = 7
    ids = generate(target.model, target.tokenizer, [p.prompt for p in problems], budget).token_ids
    assert any(len(y) == budget and y[-1] != target.tokenizer.eos_token_id for y in ids)  # the budget binds
    runs = [rsd.speculative_decode(draft.model, target.model, draft.tokenizer, p.prompt, gamma=4,
                                   max_new_tokens=budget) for p in problems]
    assert [r["token_ids"] for r in runs] == ids
    assert all(len(r["token_ids"]) <= budget and r["accepted"] <= len(r["token_ids"]) for r in runs)
    cost = rsd.speculative_cost(draft.model, target.model, draft.tokenizer, problems, ids, gamma=4,
                                max_new_tokens=budget)
    assert cost["rounds"] == sum(r["rounds"] for r in runs)
    assert cost["accepted"] == sum(r["accepted"] for r in runs)


def _samples(texts):
    return rsd.Samples(texts, [10.0] * len(texts), zoo.get("arith-draft", "smoke", 0))


def test_best_of_n_and_majority_vote_on_an_exact_case():
    ps = [arithmetic.Problem((3, 4), ("+",)), arithmetic.Problem((2, 5), ("*",))]  # answers 7 and 0
    right, wrong = [p.solution for p in ps], ["3+4=8;A8", "2*5=1;A1"]
    texts = [[wrong[0], right[1]], [right[0], wrong[1]], [right[0], wrong[1]]]
    bon = rsd.best_of_n(_samples(texts), ps, rsd.OraclePRM())
    assert bon["n"] == [1, 2, 3] and bon["accuracy"] == [0.5, 1.0, 1.0]
    assert bon["flops"] == [10.0, 20.0, 30.0]  # the oracle costs nothing
    vote = rsd.majority_vote(_samples(texts), ps)
    # N=1: sample 0; N=2: each tie goes to the answer seen first; N=3: 7 wins problem 0, the wrong 1 problem 1
    assert vote["accuracy"] == [0.5, 0.5, 0.5]
    assert rsd.at_flops({"n": [1, 2, 3], "accuracy": [0.1, 0.2, 0.3], "flop_ratio": [0.2, 0.4, 0.6]}, 0.3) == \
        {"n": 2, "accuracy": 0.2, "flop_ratio": 0.4, "covers": pytest.approx(0.3)}
    assert rsd.at_flops({"n": [1, 2], "accuracy": [0.1, 0.2], "flop_ratio": [0.2, 0.4]}, 0.5)["covers"] < 0


def test_chain_scores_on_an_exact_case():
    r = np.array([0.9, 0.5, 0.8])
    assert {name: f(r) for name, f in rsd.CHAIN_SCORES.items()} == pytest.approx(
        {"min": 0.5, "product": 0.36, "mean": 2.2 / 3, "last": 0.8})


def test_best_of_n_reads_its_chain_score_and_reports_every_chain_scores_ranking():
    ps = [arithmetic.Problem((3, 4), ("+",)), arithmetic.Problem((2, 5), ("*",))]  # answers 7 and 0
    # problem 0: a wrong answer first, then the right answer through a wrong step (the checker's min is 0 for both)
    texts = [["3+4=8;A8", ps[1].solution], ["3+4=8;A7", ps[1].solution]]
    by_min = rsd.best_of_n(_samples(texts), ps, rsd.OraclePRM(), "min")
    by_last = rsd.best_of_n(_samples(texts), ps, rsd.OraclePRM(), "last")
    assert by_min["accuracy"] == [0.5, 0.5]  # the tie goes to the earliest sample, the wrong answer
    assert by_last["accuracy"] == [0.5, 1.0] and by_last["chain"] == "last"  # the answer step's reward tells them apart
    assert by_min["ranking_auc_by_chain"] == by_last["ranking_auc_by_chain"] == pytest.approx(
        {"min": 0.5, "product": 0.5, "mean": 1.0, "last": 1.0})  # only problem 0 has a right and a wrong sample
    assert by_min["ranking_auc"] == 0.5 and by_last["ranking_auc"] == 1.0
    # half the problems have both; of the three right samples, one reaches its answer through a wrong step
    assert rsd.right_through_wrong_steps(_samples(texts), ps) == pytest.approx(
        {"problems_with_both": 0.5, "right_with_wrong_step": 1 / 3})


def test_each_prms_chain_score_is_the_best_ranking_one_on_the_calibration_seeds():
    for prm, chains in rsd.BON_CALIBRATION["outcome"].items():
        assert set(chains) == set(rsd.CHAIN_SCORES)
        assert rsd.BON_CHAIN[prm] == max(chains, key=lambda c: np.mean(chains[c]))


def test_the_keeping_budget_is_the_smallest_that_keeps_the_targets_accuracy():
    assert rsd.keeping_budget([0.2, 0.4, 0.6], [0.7, 0.84, 0.86], 0.86, 0.02) == 0.4
    assert rsd.keeping_budget([0.2, 0.4, 0.6], [0.5, 0.6, 0.7], 0.86, 0.02) == 0.6  # none keeps it: the largest
    assert rsd.keeps(0.84, 0.86, 0.02) and not rsd.keeps(0.83, 0.86, 0.02)


def test_keep_spread_reads_the_ratio_at_the_kept_budget_and_what_resampling_the_problems_moves():
    budgets = [0.2, 0.5]
    # every calibration problem agrees and every test problem costs alike: nothing moves under resampling
    out = rsd.keep_spread([1, 1, 1, 1], [[1, 1, 1, 1], [1, 1, 1, 1]], [2.0, 2.0, 2.0], [[1.0, 1.0, 1.0],
                                                                                        [3.0, 3.0, 3.0]], budgets)
    assert out["budget"] == 0.2 and out["ratios"] == pytest.approx([0.5, 1.5])
    assert out["test_sd"] == 0 and out["calibration_sd"] == 0 and out["same_budget"] == 1
    # budget 0.2 loses one problem of four (0.75 < 1 - margin), so 0.5 is kept; a resample that misses that problem
    # keeps 0.2 instead, with probability (3/4)^4, and reads the ratio there
    out = rsd.keep_spread([1, 1, 1, 1], [[1, 1, 1, 0], [1, 1, 1, 1]], [1.0, 1.0], [[0.5, 0.5], [2.0, 2.0]], budgets,
                          n_resamples=4000)
    assert out["budget"] == 0.5 and out["test_sd"] == 0
    assert out["same_budget"] == pytest.approx(1 - 0.75 ** 4, abs=0.03)
    p = 0.75 ** 4
    assert out["calibration_sd"] == pytest.approx(1.5 * np.sqrt(p * (1 - p)), abs=0.03)
    # test problems that cost differently spread the ratio over resamples of the test
    assert rsd.keep_spread([1, 1], [[1, 1]], [1.0, 1.0], [[0.5, 1.5]], [0.3])["test_sd"] > 0


def test_spread_components_split_the_variance_over_seeds_where_the_budget_lands_and_about_it():
    seeds = [{"budget": 0.2, "ratios": [0.8, 1.2], "test_sd": 0.01, "calibration_sd": 0.1},
             {"budget": 0.5, "ratios": [0.9, 1.3], "test_sd": 0.03, "calibration_sd": 0.2}]
    c = rsd.spread_components(seeds, [0.2, 0.5])
    assert c["total"] == pytest.approx(np.var([0.8, 1.3], ddof=1))  # each seed's ratio at its own budget
    assert c["landing"] == pytest.approx(np.var([0.85, 1.25], ddof=1))  # the mean curve at each kept budget
    assert c["at_budget"] == pytest.approx(np.var([-0.05, 0.05], ddof=1))
    assert c["test_problems"] == pytest.approx((0.01 ** 2 + 0.03 ** 2) / 2)
    assert c["calibration_problems"] == pytest.approx((0.1 ** 2 + 0.2 ** 2) / 2)
    assert c["pairs"] == pytest.approx(c["total"] - c["test_problems"] - c["calibration_problems"])
    noisy = [s | {"calibration_sd": 1.0} for s in seeds]
    assert rsd.spread_components(noisy, [0.2, 0.5])["pairs"] == 0  # never below 0


def test_the_keeping_budget_search_stops_at_the_first_budget_that_keeps_the_targets_accuracy(pair, problems):
    draft, target = pair
    target_only = rsd.decode_single(target.model, target.tokenizer, problems)
    # a budget of every step sends each one to the target, which then writes its own greedy solution
    out = rsd.accuracy_keeping_budget(draft, target, rsd.OraclePRM(), [0.0, 1.0], problems, target_only, [1.0, 0.5],
                                      seed=0)
    assert out["budgets"] == [1.0] and out["budget"] == 1.0
    assert out["accuracy"] == [out["target_accuracy"]] == [target_only.accuracy(problems)]
    assert out["flop_ratio"][0] > 1  # the draft's discarded steps are paid for
    # a first budget that does not keep the target's accuracy is passed over: a PRM that scores every step 1 ties
    # every reward at δ = 1, and a budget of 0 sends none of them to the target, so RSD is the draft alone there
    class Approves(rsd.OraclePRM):
        def score(self, problems, prefixes, steps):
            return np.ones(len(steps))

    draft_only = rsd.decode_single(draft.model, draft.tokenizer, problems, role="draft").accuracy(problems)
    out = rsd.accuracy_keeping_budget(draft, target, Approves(), [1.0, 1.0], problems, target_only, [0.0, 1.0],
                                      seed=0)
    assert out["accuracy"][0] == draft_only
    if rsd.keeps(draft_only, out["target_accuracy"], rsd.ACCURACY_MARGIN):
        assert out["budgets"] == [0.0] and out["budget"] == 0.0
    else:
        assert out["budgets"] == [0.0, 1.0] and out["budget"] == 1.0
        assert out["accuracy"][1] == out["target_accuracy"]


def test_the_budget_rule_spends_a_budget_above_a_01_prms_zeros():
    r = np.array([0.0] * 3000 + [1.0] * 7000)
    keep = rsd.budget_rule(r, 0.5, seed=0)(r)
    assert not keep[r == 0].any()  # every zero goes to the target
    assert abs((~keep).mean() - 0.5) < 0.02  # and ones at random, at the rate that spends the budget
    assert (rsd.budget_rule(r, 0.2, seed=0)(r) == rsd.threshold_rule(0.0, 0.2 / 0.3, 0)(r)).all()


def test_best_of_n_is_monotone_in_compute(pair, problems):
    draft, _ = pair
    bon = rsd.best_of_n(rsd.sample(draft, problems, 3, 1.0, seed=0), problems, rsd.OraclePRM())
    assert bon["n"] == [1, 2, 3]
    assert all(a <= b for a, b in zip(bon["flops"], bon["flops"][1:]))
    assert all(a <= b + 1e-12 for a, b in zip(bon["accuracy"], bon["accuracy"][1:]))  # the oracle never regresses


def test_soft_rule_accepts_with_probability_r():
    r = np.array([0.0, 1.0, 0.3] * 20000)
    keep = rsd.soft_rule(0)(r)
    assert not keep[r == 0].any() and keep[r == 1].all()
    assert abs(keep[r == 0.3].mean() - 0.3) < 0.01


def test_patience_stops_a_batch_that_finishes_nothing(pair):
    draft, target = pair
    long = arithmetic.sample_problems(8, 0, 3, 5, stream="patience")  # no solution ends in its first step
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, long, rsd.OraclePRM(),
                   rsd.threshold_rule(0.7), patience=1)
    assert all(len(s) == 1 for s in d.steps)  # one round, which finished nothing, then the batch stopped
    full = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, long, rsd.OraclePRM(),
                      rsd.threshold_rule(0.7), patience=None)
    assert max(len(s) for s in full.steps) > 1


def test_generated_flops_count_written_and_scored_tokens(pair, problems):
    draft, target = pair
    prm = rsd.learned_prm(rsd.config("smoke"), 0)
    d = rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems[:6], prm,
                   rsd.threshold_rule(0.5))
    n_d, n_t, n_p = (flops.linear_params(m.config) for m in (draft.model, target.model, prm.model))
    t = d.tokens
    drafted = t["draft_accepted"] + t["draft_discarded"]
    assert rsd.generated_flops(d, draft.model, target.model, prm.model) == 2 * ((n_d + n_p) * drafted + n_t * t["target"])
    assert rsd.generated_flops(d, draft.model, target.model) == 2 * (n_d * drafted + n_t * t["target"])


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


def test_claims_read_the_experiments_measurements():
    """claim_measurements gives every claim one value per seed for each effect and precondition it declares."""
    def run(seed, acc):
        rsd_row = {"accuracy": acc, "flop_ratio": 0.4, "generated_flop_ratio": 0.3, "acceptance_rate": 0.8}
        curve = {"n": [1, 2], "accuracy": [0.5, 0.6], "flop_ratio": [0.2, 0.5]}
        curve = curve | {"ranking_auc": 0.75}
        return {"calibration": {"cost_ratio": 0.1, "draft_in_band": 1.0, "target_in_band": 1.0},
                "calibration_routed": {"oracle": 0.2, "noisy": 0.0 if seed else 0.28, "learned": 0.3},
                "prm_auc": {"noisy": 0.9, "learned": 0.85}, "baselines": {"target": {"accuracy": 0.9}},
                "rsd": {p: rsd_row for p in rsd.PRMS}, "random": {p: rsd_row | {"accuracy": 0.5} for p in rsd.PRMS},
                "router": {p: rsd_row | {"accuracy": 0.6, "acceptance_rate": 0.8 - seed / 10} for p in rsd.PRMS},
                "length_router": {p: rsd_row | {"accuracy": 0.55} for p in rsd.GRADED},
                "parallel": {f"best-of-N, {p}": curve for p in rsd.PRMS},
                "soft": {"acceptance_rate": 0.5, "accuracy": 0.8},
                "hard_at_soft_rate": {"acceptance_rate": 0.5 + seed / 10, "accuracy": 0.85},
                "keep": {p: {"budget": 0.5 + seed / 10} for p in rsd.GRADED},
                "rsd_keep": {p: rsd_row | {"accuracy": 0.89, "flop_ratio": 0.8} for p in rsd.GRADED}}
    m = rsd.claim_measurements([run(0, 0.92), run(1, 0.91)])
    for prm in rsd.PRMS:
        e = m["efficiency"][prm]
        if prm in rsd.GRADED:  # RSD at the budget that kept the target's accuracy on the calibration problems
            assert e[f"accuracy_gap_{prm}"] == pytest.approx([-0.01, -0.01]) and e[f"flop_ratio_{prm}"] == [0.8, 0.8]
            assert e[f"keep_budget_{prm}"] == pytest.approx([0.5, 0.6])
        else:  # the oracle's check: RSD at the chapter's budget
            assert e[f"accuracy_gap_{prm}"] == pytest.approx([0.02, 0.01])
        assert e["prm_auc_learned"] == [0.85, 0.85] and e["prm_auc_noisy"] == [0.9, 0.9]
        assert e["routed_noisy"] == [0.28, 0.0] and e["routed_oracle"] == [0.2, 0.2]
        assert m["beats_parallel"][prm][f"rsd_minus_bon_{prm}"] == pytest.approx([0.32, 0.31])  # N=2 reaches 0.4
        assert m["beats_parallel"][prm][f"bon_covers_{prm}"] == pytest.approx([0.1, 0.1])
        # the target-access control: random acceptance at RSD's rate (0.5) minus the same best-of-N (0.6)
        assert m["beats_parallel"][prm][f"random_minus_bon_{prm}"] == pytest.approx([-0.1, -0.1])
        assert m["beats_parallel"][prm][f"prm_rank_{prm}"] == [0.75, 0.75]
        claims = [(rsd.BEATS_PARALLEL[prm], m["beats_parallel"][prm])]
        if prm in rsd.GRADED:
            claims.append((rsd.EFFICIENCY[prm], e))
            t = m["threshold_matters"][prm]
            # the baseline is the length router at RSD's rate; random acceptance is reported beside it
            assert t[f"threshold_minus_router_{prm}"] == pytest.approx([0.32, 0.31])
            assert t[f"router_rate_gap_{prm}"] == pytest.approx([0.0, 0.1])
            assert t[f"threshold_minus_random_{prm}"] == pytest.approx([0.42, 0.41])
            assert t[f"router_minus_random_{prm}"] == pytest.approx([0.1, 0.1])
            assert t[f"threshold_minus_length_router_{prm}"] == pytest.approx([0.37, 0.36])
            claims.append((rsd.THRESHOLD_MATTERS[prm], m["threshold_matters"][prm]))
        for claim, measured in claims:
            decided = claim.decide(measured)
            assert decided["verdict"] in ("reproduced", "refuted", "inconclusive")
            # the noisy PRM's rule sends no calibration step to the target on seed 1 (RSD would be the draft
            # alone), so on half the seeds it is no threshold: every noisy claim is inconclusive on that precondition
            if prm == "noisy":
                assert decided["verdict"] == "inconclusive"
    assert "oracle" not in rsd.THRESHOLD_MATTERS  # true by construction with a 0/1 oracle: not a claim
    assert "oracle" not in rsd.EFFICIENCY  # RSD with a 0/1 oracle cannot lose a problem the target solves
    # the hard rule at the soft rule's calibrated rate, minus the soft rule; rates 0.5 vs 0.5, then 0.6 vs 0.5
    assert m["hard_beats_soft"]["hard_minus_soft_learned"] == pytest.approx([0.05, 0.05])
    assert m["hard_beats_soft"]["rate_match_soft"] == [1.0, 0.0]


def test_delta_for_budget_is_the_largest_threshold_within_the_budget():
    # a 0/1 PRM: its zeros fit a 30% budget (δ = 1 rejects exactly them) or they do not (δ = 0 accepts everything)
    assert rsd.delta_for_budget([0, 1, 1, 1, 1], 0.3) == 1.0
    assert rsd.delta_for_budget([0, 0, 1, 1], 0.3) == 0.0
    assert rsd.delta_for_budget(np.arange(1, 11) / 10, 0.3) == pytest.approx(0.4)  # rejects 0.1-0.3: 30%
    r = numpy_rng(0, "budget").random(1001)
    for budget in (0.0, 0.1, 0.5, 0.9):
        d = rsd.delta_for_budget(r, budget)
        assert np.mean(r < d) <= budget < np.mean(r <= d)  # within the budget, and any larger δ is over it
    assert rsd.delta_for_budget([0.2, 0.5], 1.0) == np.inf  # a budget of every step: the target writes them all


def test_within_problem_auc_on_an_exact_case():
    scores = np.array([[0.9, 0.1, 0.5], [0.2, 0.3, 0.5], [0.9, 0.8, 0.5]])  # samples x problems
    correct = np.array([[1, 0, 1], [0, 1, 1], [0, 0, 1]], dtype=bool)  # problem 2 has no wrong sample
    # problem 0: right 0.9 vs wrong 0.2 (win) and 0.9 (tie); problem 1: right 0.3 vs 0.1 (win) and 0.8 (loss)
    assert rsd.within_problem_auc(scores, correct) == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert np.isnan(rsd.within_problem_auc(scores[:, 2:], correct[:, 2:]))


def test_exact_match_is_one_on_a_model_that_copies_the_solution():
    """Teacher-forced exact match counts a problem only when every solution token is the argmax: a model whose
    logits put all mass on the true next token scores 1, one shifted by a token scores 0."""
    from icml25.rsd import pair

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    ps = arithmetic.sample_problems(5, 0)

    class Oracle(torch.nn.Module):
        def __init__(self, shift):
            super().__init__()
            self.shift = shift

        def forward(self, input_ids, attention_mask):
            nxt = torch.roll(input_ids, -1 - self.shift, dims=1)
            return type("Out", (), {"logits": torch.nn.functional.one_hot(nxt, len(tok)).float()})

    assert pair.exact_match(Oracle(0), tok, ps) == 1.0
    assert pair.exact_match(Oracle(1), tok, ps) == 0.0


def test_the_pair_stops_at_its_exact_match_mark():
    """The draft/target builder validates every `eval_every` steps while far from `stop_at`, every step once within
    `fine_margin` of it, and stops at the first validation reaching it."""
    from icml25.core.config import make_config
    from icml25.rsd import pair

    presets = {s: dict(pair.TARGET["smoke"], steps=80, stop_at=0.05, fine_margin=0.04, eval_every=5)
               for s in ("smoke", "ci", "full")}
    _, _, info = pair._build(make_config(presets)("smoke"), 0)
    steps, ems = zip(*info["evals"])
    assert all(em < 0.05 for em in ems[:-1]) and info["stopped_at"] == steps[-1]
    assert ems[-1] >= 0.05 or steps[-1] == 80
    for k, s in enumerate(steps):
        assert s % 5 == 0 or s == 80 or ems[k - 1] >= 0.01  # off the coarse grid only once near the mark


def test_a_pair_model_with_a_coarse_fine_phase_stays_on_its_grid():
    """With `fine_every` > 1 (the draft: a wide band, a slow climb) validation near the mark runs every
    `fine_every` steps, never after every step, and training still stops at the first validation at the mark."""
    from icml25.core.config import make_config
    from icml25.rsd import pair

    presets = {s: dict(pair.DRAFT["smoke"], steps=60, stop_at=0.05, fine_margin=0.05, eval_every=10, fine_every=4)
               for s in ("smoke", "ci", "full")}
    _, _, info = pair._build(make_config(presets)("smoke"), 0)
    steps, ems = zip(*info["evals"])
    # the first validation is on the coarse grid; every later one is near a 0.05 mark, so on the grid of 4
    assert steps[0] == 10 and all(s % 4 == 0 for s in steps[1:])
    assert all(b - a == 4 for a, b in zip(steps[1:], steps[2:]))
    assert info["stopped_at"] == steps[-1] and all(em < 0.05 for em in ems[:-1])
    assert pair.DRAFT["ci"]["fine_every"] > 1 and pair.TARGET["ci"]["fine_every"] == 1


@pytest.mark.parametrize("fine_every,window,script,evals", [
    # every step once within 0.1 of the mark, stops at the first validation reaching it
    (1, 1, [0.1, 0.2, 0.36, 0.4, 0.46], [(10, 0.1), (20, 0.2), (30, 0.36), (31, 0.4), (32, 0.46)]),
    # the target's rule: the mean of the last three must reach the mark, so one lucky 0.5 at step 21 does not stop
    # it (mean 0.367), nor 0.44 at 22 (0.447); 0.46 at 23 does (0.467)
    (1, 3, [0.2, 0.4, 0.5, 0.44, 0.46], [(10, 0.2), (20, 0.4), (21, 0.5), (22, 0.44), (23, 0.46)]),
    # the draft's: on the grid of 10 near the mark too; a dip below the margin changes nothing, 0.45 itself stops
    (10, 1, [0.1, 0.44, 0.3, 0.45], [(10, 0.1), (20, 0.44), (30, 0.3), (40, 0.45)]),
    # the cap binds: the mark is never reached, so training runs its 60 steps and the last validation is at 60
    (10, 1, [0.1, 0.2, 0.3, 0.4, 0.3, 0.44], [(10, 0.1), (20, 0.2), (30, 0.3), (40, 0.4), (50, 0.3), (60, 0.44)]),
])
def test_the_pair_stop_rule_on_scripted_validations(monkeypatch, fine_every, window, script, evals):
    """The stop rule exactly, on scripted validation scores (mark 0.45, validation every 10 steps, `fine_every` once
    the last is within 0.1 of the mark, a cap of 60 steps): where it validates, where the mean of the last `window`
    validations first reaches the mark, and that the cap ends training when it never does."""
    from icml25.core.config import make_config
    from icml25.rsd import pair

    scores = iter(script)
    monkeypatch.setattr(pair, "exact_match", lambda model, tokenizer, problems: next(scores))
    presets = {s: dict(pair.DRAFT["smoke"], steps=60, stop_at=0.45, eval_every=10, fine_margin=0.1,
                       fine_every=fine_every, window=window) for s in ("smoke", "ci", "full")}
    _, _, info = pair._build(make_config(presets)("smoke"), 0)
    assert info["evals"] == evals and info["stopped_at"] == evals[-1][0] and len(info["losses"]) == evals[-1][0]


def test_the_pair_calibration_records_the_rules_ci_trains():
    """`PAIR_CALIBRATION` holds exactly one row per model with the `ci` scale's cap, lr and stop rule, on the same
    calibration seeds (declared in the config), and each of its runs stops before the cap."""
    from icml25.rsd import figures, pair

    kept = [r for r in pair.PAIR_CALIBRATION if figures._pair_kept(r)]
    assert sorted(r["model"] for r in kept) == ["draft", "target"]
    assert set(kept[0]["runs"]) == set(kept[1]["runs"]) <= set(rsd.config("ci").calibration_seeds)
    assert all(stop < r["steps"] for r in kept for stop, *_ in r["runs"].values())
    assert rsd.pair_calibration_table().count("(ci)**") == 2


def test_reasoning_results_are_cached_for_the_zoo_pair_and_computed_for_other_checkpoints(tmp_path, monkeypatch):
    from icml25.rsd import experiment

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(experiment, "reasoning_experiment",
                        lambda cfg, seed: calls.append(seed) or {"seed": seed, "pair": (1, 2)})
    cfg = rsd.config("smoke")
    assert rsd.reasoning_results(cfg, 7) == ({"seed": 7, "pair": [1, 2]}, True)  # as JSON, computed now
    assert rsd.reasoning_results(cfg, 7) == ({"seed": 7, "pair": [1, 2]}, False) and calls == [7]  # read back
    assert rsd.reasoning_results(rsd.config("smoke", seeds=[3]), 7)[1] is False  # the seed list: same address
    assert rsd.reasoning_results(rsd.config("smoke", budget=0.5), 7)[1] is True  # a knob it reads: another
    other = rsd.config("smoke", draft_model="some/checkpoint")
    assert rsd.reasoning_results(other, 7)[1] and rsd.reasoning_results(other, 7)[1]  # never cached


def test_a_learned_prm_from_the_draft_starts_at_the_drafts_weights_and_leaves_the_draft_alone(pair):
    """`prm_preset = "draft"` (the paper's PRM shares its draft's base model): the PRM is a trained copy of the
    draft, the draft's size, and training it does not move the draft."""
    draft = pair[0]
    before = {k: v.clone() for k, v in draft.model.state_dict().items()}
    untrained, tok, _ = rsd.train_prm(draft, rsd.FROM_DRAFT, 20, 0, seed=0)
    assert tok is draft.tokenizer
    assert all(torch.equal(v, untrained.state_dict()[k]) for k, v in before.items())
    trained, _, info = rsd.train_prm(draft, rsd.FROM_DRAFT, 20, 5, seed=0)
    # the draft's size: the same FLOPs per token; its value head is an output layer of its own (not tied to the
    # input embeddings), one vocabulary x hidden matrix more to store
    assert flops.linear_params(trained.config) == flops.linear_params(draft.model.config) and len(info["losses"]) == 5
    d = draft.model.config
    assert tinylm.n_params(trained) == tinylm.n_params(draft.model) + d.vocab_size * d.hidden_size
    assert any(not torch.equal(v, trained.state_dict()[k]) for k, v in before.items())
    assert all(torch.equal(v, draft.model.state_dict()[k]) for k, v in before.items())
    assert rsd.config("ci").prm_preset == rsd.FROM_DRAFT


def test_floor_share_spends_the_budget_when_the_lowest_reward_alone_exceeds_it():
    # a 0/1 PRM whose zeros (half the steps) overflow a 30% budget: δ is the lowest reward, Eq. (2) alone would
    # route nothing, so each zero goes to the target with probability 0.3 / 0.5 = 0.6
    r = [0, 0, 1, 1]
    delta = rsd.delta_for_budget(r, 0.3)
    assert delta == 0.0 and rsd.floor_share(r, delta, 0.3) == pytest.approx(0.6)
    rule = rsd.threshold_rule(delta, rsd.floor_share(r, delta, 0.3), seed=0)
    keep = np.concatenate([rule(np.array(r * 1000, dtype=float)) for _ in range(20)])
    assert keep.reshape(-1, 2)[1::2].all()  # a step scored 1 is always kept
    assert 1 - keep.mean() == pytest.approx(0.3, abs=0.01)  # the budget, spent on zeros only
    # Eq. (2) spends the budget itself (some step lies below δ), or the budget is every step: no floor
    assert rsd.floor_share([0, 1, 1, 1, 1], 1.0, 0.3) == 0.0
    assert rsd.floor_share(np.arange(1, 11) / 10, 0.4, 0.3) == 0.0
    assert rsd.floor_share([0.2, 0.5], np.inf, 1.0) == 0.0
    # a budget larger than the lowest reward's share cannot be the floor case, but the probability stays <= 1
    assert rsd.floor_share([0.0, 0.0], 0.0, 1.0) == 1.0
    # without a floor share the rule is Eq. (2)
    rewards = numpy_rng(1, "floor").random(50)
    np.testing.assert_array_equal(rsd.threshold_rule(0.5)(rewards), rewards >= 0.5)


# --- the learned PRM's training: the checker's labels at each step's last token, class balance, its own head ---


def test_step_labels_are_the_checkers_at_each_steps_last_token():
    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    p = arithmetic.parse_prompt("3+4*2|")  # 3+4=7;7*2=4;A4
    wrong = "3+4=7;7*2=5;5*1=5;A5"  # the second step is wrong, so every later step is off the true chain
    data = rsd.step_labels(tok, [p, p], [p.solution, wrong])
    assert data.labels == [[1, 1, 1], [1, 0, 0, 0]]
    assert data.labels[1] == [int(ok) for ok in arithmetic.step_labels(p, wrong)]
    assert data.ends == [[11, 17, 19], [11, 17, 23, 25]]  # the positions of "3+4*2|3+4=7;", "...;7*2=4;", "...A4"
    assert [tok.decode([data.ids[1][e]]) for e in data.ends[1]] == [";", ";", ";", "5"]
    # the PRM reads a step where it is trained: its score of prefix + step is the head at that step's last token
    model = rsd.own_value_head(tinylm.make_model("nano", tok, 0)).eval()
    steps = arithmetic.split_steps(wrong)
    scored = rsd.LearnedPRM(model, tok).score([p] * 4, ["".join(steps[:k]) for k in range(4)], steps)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([data.ids[1]])).logits[0, data.ends[1]]
    good, bad = tok.convert_tokens_to_ids([rsd.PRM_GOOD, rsd.PRM_BAD])
    np.testing.assert_allclose(scored, torch.sigmoid(logits[:, good] - logits[:, bad]).numpy(), rtol=1e-5)


def test_the_prms_loss_weighs_right_and_wrong_steps_half_each():
    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    p = arithmetic.parse_prompt("3+4*2|")
    data = rsd.step_labels(tok, [p, p], [p.solution, "3+4=7;7*2=5;5*1=5;A5"])  # 4 right steps, 3 wrong
    w = data.class_weights()
    assert w == {0: pytest.approx(7 / 6), 1: pytest.approx(7 / 8)} and 3 * w[0] == pytest.approx(4 * w[1])
    batch = next(rsd.step_batches(data, tok.pad_token_id, 5, seed=0))
    assert len(batch["labels"]) == len(batch["rows"]) == len(batch["cols"]) == len(batch["weights"])
    assert batch["weights"].tolist() == [pytest.approx(w[int(y)]) for y in batch["labels"]]
    model = rsd.own_value_head(tinylm.make_model("nano", tok, 0))
    good, bad = tok.convert_tokens_to_ids([rsd.PRM_GOOD, rsd.PRM_BAD])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = float(rsd.value_loss(model, batch, good, bad))
    z = (logits[batch["rows"], batch["cols"], good] - logits[batch["rows"], batch["cols"], bad]).double()
    y, wy = batch["labels"].double(), batch["weights"].double()
    by_hand = (wy * -(y * torch.log(torch.sigmoid(z)) + (1 - y) * torch.log(1 - torch.sigmoid(z)))).mean()
    assert loss == pytest.approx(float(by_hand), rel=1e-5)


def test_the_value_head_is_the_prms_own_and_survives_saving(tmp_path):
    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model("nano", tok, 0)
    embeddings = model.get_input_embeddings().weight.detach().clone()
    rsd.own_value_head(model)
    with torch.no_grad():
        model.get_output_embeddings().weight[tok.convert_tokens_to_ids(rsd.PRM_GOOD)] += 1.0
    assert torch.equal(model.get_input_embeddings().weight, embeddings)  # reading "+" is unchanged
    tinylm.save(model, tok, tmp_path)
    loaded, _ = models.load(tmp_path)
    assert torch.equal(loaded.get_output_embeddings().weight, model.get_output_embeddings().weight)
    assert torch.equal(loaded.get_input_embeddings().weight, embeddings)


def test_training_the_prm_lowers_its_class_weighted_loss(pair):
    _, _, info = rsd.train_prm(pair[0], rsd.FROM_DRAFT, 60, 30, seed=0, lr=3e-3)
    assert info["n_steps"] > info["n_rollouts"] > 0 and 0 <= info["frac_correct"] <= 1  # (an empty rollout has no step)
    assert np.mean(info["losses"][-5:]) < np.mean(info["losses"][:5])


def test_the_configs_prm_settings_train_the_learned_prm(monkeypatch):
    """The zoo's cached PRM stands for the scale's own `prm_*` settings only: an override (a notebook parameter) is
    trained with, instead of being silently replaced by the zoo's PRM of the default settings."""
    trained, zoo_reads = [], []
    monkeypatch.setattr(rsd.prms, "train_prm", lambda draft, seed, **settings: (
        trained.append((draft, seed, settings)) or (torch.nn.Linear(1, 1), "tok", {})))
    monkeypatch.setattr(rsd.prms.zoo, "get", lambda name, scale, seed: zoo_reads.append(name) or
                        SimpleNamespace(model="zoo model", tokenizer="zoo tok"))
    monkeypatch.setattr(rsd.prms.models, "get", lambda name, scale, seed: f"{name} draft")
    monkeypatch.setattr(rsd.prms, "LearnedPRM", lambda model, tokenizer: SimpleNamespace(model=model))
    assert rsd.learned_prm(rsd.config("smoke"), 3).model == "zoo model" and zoo_reads == ["rsd-prm"] and not trained
    cfg = rsd.config("smoke", prm_steps=7, prm_lr=1e-2)
    rsd.learned_prm(cfg, 3)
    assert trained == [(f"{rsd.DRAFT_MODEL} draft", 3, {**rsd.prm_settings(rsd.config("smoke")), "steps": 7,
                                                         "lr": 1e-2})]


# --- the content-blind baseline of threshold_matters: the length router ---


_TWO = [arithmetic.Problem((1, 2), ("+",)), arithmetic.Problem((1, 2, 3, 4), ("+", "*", "-"))]  # 2 and 4 positions


def test_the_position_router_scores_the_right_step_share_of_a_position_and_never_reads_a_step():
    problems, prefixes, _ = rsd.step_positions(_TWO)
    assert prefixes == ["", "1+2=3;", "", "1+2=3;", "1+2=3;3*3=9;", "1+2=3;3*3=9;9-4=5;"]
    # a labelled split: (1 op, step 0) right twice; (3 ops, step 2) right once in two; (3 ops, step 3) wrong
    split_p = [_TWO[0], _TWO[0], _TWO[1], _TWO[1], _TWO[1]]
    split_x = ["", "", "1+2=3;3*3=9;", "1+2=3;3*3=9;", "1+2=3;3*3=9;9-4=5;"]
    router = rsd.PositionRouter.fit(split_p, split_x, [1, 1, 1, 0, 0])
    r = router.score(problems, prefixes, ["garbage"] * len(problems))
    np.testing.assert_allclose(r, [1.0, 0.6, 0.6, 0.6, 0.5, 0.0])  # positions the split lacks: its overall 3/5
    np.testing.assert_array_equal(r, router.score(problems, prefixes, [p.solution for p in problems]))


def test_the_length_router_routes_whole_problems_longest_first():
    r = rsd.LengthRouter(seed=0).score(*rsd.step_positions(_TWO))
    assert len(set(r[:2])) == 1 and len(set(r[2:])) == 1  # one score per problem, whatever the step
    assert -2 < r[0] <= -1 and -4 < r[2] <= -3  # −(operations + a draw in [0, 1))


def test_the_router_rule_calls_the_target_on_the_share_it_is_given():
    router = rsd.PositionRouter.fit(*rsd.step_positions(_TWO)[:2], [1, 1, 1, 0.75, 0.5, 0.25])
    scores = router.score(*rsd.step_positions(_TWO))
    # half the six positions: the 3-operation problem's last three steps, exactly (no tie at the cut)
    keep = rsd.router_rule(router, _TWO, 0.5, seed=0)(scores)
    np.testing.assert_array_equal(keep, [True, True, True, False, False, False])
    # 7/12 of them: those three, and a step scored 1 (the cut's tie: three steps) with probability 1/6
    assert rsd.tie_share(scores, 1.0, 7 / 12) == pytest.approx(1 / 6)
    rule = rsd.router_rule(router, _TWO, 7 / 12, seed=0)
    kept = np.array([rule(scores) for _ in range(4000)])
    assert not kept[:, 3:].any()
    assert 1 - kept[:, :3].mean() == pytest.approx(1 / 6, abs=0.02)
    # the tie share spends what Eq. (2) leaves of the budget, and is 0 where nothing ties or δ is infinite
    assert rsd.tie_share([0.0, 1.0, 1.0, 1.0], 1.0, 0.5) == pytest.approx(1 / 3)
    assert rsd.tie_share([0.0, 1.0], 0.5, 0.5) == 0.0 and rsd.tie_share([0.0, 1.0], np.inf, 1.0) == 0.0
