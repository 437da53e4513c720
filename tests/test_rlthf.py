import numpy as np
import pytest
import torch

from icml25 import rlthf

CFG = rlthf.config("smoke", n_train=400, n_test=400, epochs=40)


@pytest.fixture(scope="module")
def world():
    return rlthf.worlds(CFG, 0)


def test_bt_loss_is_log2_at_zero_margin():
    assert float(rlthf.bt_loss(torch.zeros(5))) == pytest.approx(np.log(2))
    assert float(rlthf.bt_loss(torch.zeros(3), torch.tensor([1.0, 2.0, 3.0]))) == pytest.approx(np.log(2))


def test_swapping_chosen_and_rejected_turns_accuracy_into_its_complement(world):
    train, test = world
    rm = rlthf.train_reward_model(train.a, train.b, train.ai, None, CFG, 0)
    acc = rlthf.preference_accuracy(rm.margin(test.a, test.b, test.true))
    swapped = rlthf.preference_accuracy(rm.margin(test.b, test.a, test.true))
    assert swapped == pytest.approx(1 - acc)


def test_world_labellers_have_the_requested_accuracy():
    train, _ = rlthf.worlds(rlthf.config("smoke", n_train=20000), 1)
    assert np.mean(train.ai == train.true) == pytest.approx(0.75, abs=0.02)
    assert np.mean(train.human == train.true) == pytest.approx(0.97, abs=0.01)


def test_ai_errors_are_concentrated_on_hard_pairs():
    cfg = rlthf.config("smoke", n_train=20000)
    train, _ = rlthf.worlds(cfg, 2)
    w, u = rlthf.world_weights(2, cfg.n_features)
    gap = np.abs(rlthf.true_reward(train.a, w, u) - rlthf.true_reward(train.b, w, u))
    hard = gap < np.quantile(gap, 0.25)
    easy = gap > np.quantile(gap, 0.75)
    wrong = train.ai != train.true
    assert wrong[hard].mean() > 3 * wrong[easy].mean()
    # systematic: the same pairs asked again get the same labels
    again, _ = rlthf.worlds(cfg, 2)
    assert np.array_equal(again.ai, train.ai)


def test_band_error_rates_split_the_pairs():
    ai, true = np.array([1, -1, 1, 1, -1, 1]), np.array([1, 1, -1, 1, -1, -1])
    order = np.array([5, 4, 3, 2, 1, 0])  # ranks: pair 5 first
    inside, outside = rlthf.band_error_rates(ai, true, order, rlthf.CurvePoints(0, 2, 4))
    # band = ranks 2, 3 = pairs 3, 2: wrong are {2}; outside = pairs 5, 4, 1, 0: wrong are {5, 1}
    assert inside == pytest.approx(50.0) and outside == pytest.approx(50.0)
    inside, outside = rlthf.band_error_rates(ai, true, order, rlthf.CurvePoints(0, 0, 6))
    assert inside == pytest.approx(50.0) and np.isnan(outside)


def test_random_queries_use_the_budget_and_reach_outside_the_band(world):
    train, test = world
    band = rlthf.rlthf_loop(train, test, CFG, 0, 0.1)
    rand = rlthf.rlthf_loop(train, test, CFG, 0, 0.1, select="random")
    per_iter = int(round(0.1 * len(train) / CFG.n_iterations))
    assert all(len(a) == per_iter for a in rand.asked)
    assert not np.array_equal(np.concatenate(band.asked), np.concatenate(rand.asked))
    with pytest.raises(ValueError, match="select"):
        rlthf.rlthf_loop(train, test, CFG, 0, 0.1, select="best")


def test_sorted_margins_never_increase():
    curve, order = rlthf.sorted_margins(np.random.default_rng(0).normal(size=500))
    assert np.all(np.diff(curve) <= 0) and sorted(order) == list(range(500))


def test_detector_finds_planted_points():
    n, e, k = 1000, 150, 700
    curve = np.concatenate([np.linspace(10, 1, e, endpoint=False), np.linspace(1, 0.4, k - e, endpoint=False),
                            np.linspace(0.4, -12, n - k)])
    p = rlthf.curve_points(curve)
    planted_r = k + int(np.argmax(curve[k:] <= -curve[e]))
    assert p.elbow < p.knee < p.reflection
    for got, want in ((p.elbow, e), (p.knee, k), (p.reflection, planted_r)):
        assert abs(got - want) <= 0.02 * n


def test_each_iteration_respects_the_budget_and_never_asks_twice(world):
    train, test = world
    budget = 0.1
    state = rlthf.rlthf_loop(train, test, CFG, 0, budget)
    per_iter = int(round(budget * len(train) / CFG.n_iterations))
    asked = np.concatenate(state.asked)
    assert all(len(a) <= per_iter for a in state.asked)
    assert len(asked) == len(set(asked.tolist()))
    assert np.array_equal(state.labels[asked], train.human[asked])  # human labels are never flipped
    assert state.is_human.sum() == len(asked)


def test_human_labels_are_never_dropped():
    state = rlthf.LoopState(np.array([1, -1, 1, 1, -1, 1]), np.array([True, False, False, False, False, True]))
    order = np.arange(6)
    use, weights = rlthf.training_set(state, order, rlthf.CurvePoints(1, 2, 6), beta=0.9, alpha=3.0)
    assert {0, 5} <= set(use.tolist()) and np.all(weights[np.isin(use, [0, 5])] == 3.0)
    # more back-off never covers more pairs
    sizes = [len(rlthf.training_set(state, order, rlthf.CurvePoints(1, 4, 6), b, 1.0)[0]) for b in (0, .3, .6, .9)]
    assert np.all(np.diff(sizes) <= 0)


def test_perfect_ai_labeller_matches_full_human(world):
    train, test = world
    perfect = rlthf.World(train.a, train.b, train.true, train.human, train.human.copy())
    full = rlthf.test_accuracy(rlthf.train_reward_model(train.a, train.b, train.human, None, CFG, 0), test)
    loop = rlthf.rlthf_loop(perfect, test, CFG, 0, 0.06, amplify=False)
    assert abs(loop.accuracy[-1] - full) <= 1.0


def test_fixed_seed_gives_identical_selections(world):
    train, test = world
    s1, s2 = (rlthf.rlthf_loop(train, test, CFG, 3, 0.1) for _ in range(2))
    assert all(np.array_equal(a, b) for a, b in zip(s1.asked, s2.asked)) and s1.accuracy == s2.accuracy


@pytest.mark.parametrize("budget", [-0.1, 1.5])
def test_bad_budget_raises(world, budget):
    train, test = world
    with pytest.raises(ValueError, match="budget"):
        rlthf.rlthf_loop(train, test, CFG, 0, budget)
    with pytest.raises(ValueError, match="budget"):
        rlthf.random_annotation(train, test, CFG, 0, budget)


def test_empty_data_raises():
    with pytest.raises(ValueError, match="empty"):
        rlthf.train_reward_model(np.zeros((0, 4)), np.zeros((0, 4)), np.zeros(0), None, CFG, 0)
    with pytest.raises(ValueError, match="at least one pair"):
        rlthf.make_world(0, 0, 16, 3, 0.75, 0.03, 0.0)
    with pytest.raises(ValueError, match="at least 4"):
        rlthf.curve_points(np.array([1.0, 0.0]))


def test_dpo_loss_is_the_bradley_terry_loss_of_the_scaled_log_ratio_difference():
    chosen, rejected = torch.tensor([0.3, -1.0, 2.0]), torch.tensor([0.1, 0.5, 2.0])
    assert float(rlthf.dpo_loss(chosen, rejected, 0.1)) == pytest.approx(float(rlthf.bt_loss(0.1 * (chosen - rejected))))
    assert float(rlthf.dpo_loss(chosen, chosen, 0.1)) == pytest.approx(np.log(2))


class _Linear(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.as_tensor(w, dtype=torch.float32)

    def forward(self, x):
        return x @ self.w


def test_win_rate_is_half_for_the_reference_and_exact_for_the_argmax_policy():
    d, c = CFG.n_features, 6
    cand = np.random.default_rng(0).normal(size=(50, c, d))
    w, u = rlthf.world_weights(0, d)
    assert rlthf.win_rate_vs_reference(_Linear(np.zeros(d)), cand, w, u) == pytest.approx(50.0)
    # h = a huge multiple of a linear true reward: π_θ puts all its mass on the best candidate, which beats the
    # c − 1 others and ties itself
    best = rlthf.win_rate_vs_reference(_Linear(1e4 * w), cand, w, np.zeros(d))
    assert best == pytest.approx(100 * (c - 0.5) / c, abs=1e-6)
    worst = rlthf.win_rate_vs_reference(_Linear(-1e4 * w), cand, w, np.zeros(d))
    assert worst == pytest.approx(100 * 0.5 / c, abs=1e-6)


def test_dpo_on_true_labels_beats_dpo_on_reversed_labels(world):
    train, _ = world
    w, u = rlthf.world_weights(0, CFG.n_features)
    cand = rlthf.dpo_candidates(CFG, 0)
    right = rlthf.win_rate_vs_reference(rlthf.train_dpo_policy(train.a, train.b, train.true, CFG, 0), cand, w, u)
    wrong = rlthf.win_rate_vs_reference(rlthf.train_dpo_policy(train.a, train.b, -train.true, CFG, 0), cand, w, u)
    assert right > 60 > 40 > wrong


def test_loop_curates_every_pair_with_its_final_reward_model(world):
    train, test = world
    state = rlthf.rlthf_loop(train, test, CFG, 0, 0.06)
    assert state.final_labels.shape == train.true.shape and set(np.unique(state.final_labels)) <= {-1, 1}


def test_the_lapsing_labeller_changes_only_the_ai_labels():
    """needs_humans is decided on two labellers of one world: the lapsing one shares the pairs and the human labels,
    and is set to the same accuracy."""
    cfg = rlthf.config("smoke", n_train=20000)
    (plain, _), (lapsing, _) = rlthf.worlds(cfg, 3), rlthf.worlds(cfg, 3, ai_slip=cfg.lapse_slip)
    assert np.array_equal(plain.a, lapsing.a) and np.array_equal(plain.human, lapsing.human)
    assert not np.array_equal(plain.ai, lapsing.ai)
    for w in (plain, lapsing):
        assert abs(np.mean(w.ai == w.true) - cfg.ai_accuracy) < 0.02


def test_targeting_pools_the_verdict_and_the_targeting_seeds():
    def run(rl, rq, band, out):
        arms = {arm: {0.06: [80.0]} for arm in rlthf.ARMS}
        arms["rlthf"][0.06], arms["random_queries"][0.06] = [rl], [rq]
        return arms | {"band_error": {0.06: [band]}, "outside_error": {0.06: [out]},
                       "dpo": {0.06: {arm: 70.0 for arm in rlthf.DPO_ARMS}}}

    extra = [{"rlthf": 83.0, "random_queries": 80.0, "ai_only": 70.0, "full_human": 90.0, "band_error": 50.0,
              "outside_error": 20.0}]
    lap = [{"ai_only": 70.0, "self_improve": 75.0, "full_human": 90.0}] * 2
    m = rlthf.claim_measurements([run(82.0, 81.0, 40.0, 25.0), run(79.0, 80.0, 45.0, 20.0)], 0.06, lap, extra)
    assert m["rlthf_minus_random_queries"] == [1.0, -1.0, 3.0]
    assert m["band_enrichment"] == [15.0, 25.0, 30.0]
    assert m["lapses_self_improve_minus_ai"] == [5.0, 5.0] and m["lapses_headroom"] == [20.0, 20.0]
    assert len(m["full_minus_rlthf"]) == 2
    with pytest.raises(ValueError, match="claim budget"):
        rlthf.claim_measurements([run(82.0, 81.0, 40.0, 25.0)], 0.1)


def test_a_targeting_seed_reports_what_it_cost():
    cfg = rlthf.config("smoke", n_train=300, n_test=200)
    run = rlthf.targeting_run(cfg, 3)
    assert run["seconds"] > 0
    assert set(run) == {"rlthf", "random_queries", "ai_only", "full_human", "band_error", "outside_error", "seconds"}
