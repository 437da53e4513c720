"""PMF by Gibbs sampling: splits, normalisation, the Gaussian conditional, recovery, determinism, bad input."""

import json

import numpy as np
import pytest

from icml25 import perf_prediction as pp
from icml25.core.seeding import numpy_rng


def test_split_masks_are_disjoint_and_cover_the_observed_cells():
    observed = numpy_rng(0, "obs").random((30, 40)) < 0.8
    train, test = pp.split_cells(observed, 0.3, seed=1)
    assert not (train & test).any()
    assert ((train | test) == observed).all()
    assert abs(test.sum() / observed.sum() - 0.3) < 0.02
    assert train.any(1)[observed.sum(1) > 1].all()
    tr2, te2 = pp.split_models(observed, 0.2, seed=1)
    assert not (tr2 & te2).any() and ((tr2 | te2) == observed).all()
    held = te2.any(1)
    assert held.sum() == 6 and not tr2[held].any()


def test_normalisation_uses_training_statistics_and_round_trips():
    rng = numpy_rng(0, "norm")
    scores = rng.random((20, 8))
    train = rng.random((20, 8)) < 0.7
    train[:, 0] = False
    train[:3, 0] = True  # fewer than 5 training cells: global statistics
    norm = pp.ColumnNormaliser.fit(scores, train)
    np.testing.assert_allclose(norm.inverse(norm.transform(scores)), scores, atol=1e-12)
    np.testing.assert_allclose(norm.mean[1], scores[train[:, 1], 1].mean())
    np.testing.assert_allclose(norm.mean[0], scores[train].mean())
    np.testing.assert_allclose(norm.std[0], scores[train].std())


def test_gibbs_conditional_is_the_closed_form_ridge_posterior():
    rng = numpy_rng(0, "cond")
    v = rng.normal(size=(12, 3))
    r = rng.normal(size=(1, 12))
    obs = rng.random((1, 12)) < 0.7
    alpha = 2.0
    mean, precision = pp.factor_conditional(r, obs, v, alpha, np.zeros((1, 3)), np.eye(3))
    vo = v[obs[0]]
    ridge = np.linalg.solve(np.eye(3) / alpha + vo.T @ vo, vo.T @ r[0, obs[0]])
    np.testing.assert_allclose(mean[0], ridge, atol=1e-10)
    np.testing.assert_allclose(precision[0], np.eye(3) + alpha * vo.T @ vo, atol=1e-10)
    # repeated draws have covariance Λ⁻¹
    draws = pp.draw_gaussian(np.repeat(mean, 20000, 0), np.repeat(precision, 20000, 0), numpy_rng(1, "draws"))
    cov = np.linalg.inv(precision[0])
    np.testing.assert_allclose(draws.mean(0), mean[0], atol=4 * np.sqrt(cov.diagonal().max() / 20000))
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.05 * np.abs(cov).max())


def test_side_weights_posterior_mean_is_ridge_regression():
    rng = numpy_rng(0, "side")
    x, f = rng.normal(size=(50, 4)), rng.normal(size=(50, 2))
    draws = np.array([pp.sample_side_weights(f, x, numpy_rng(s, "w"), tau=1.0) for s in range(400)])
    ridge = np.linalg.solve(np.eye(4) + x.T @ x, x.T @ f)
    np.testing.assert_allclose(draws.mean(0), ridge, atol=0.03)


def _planted(seed=0, m=40, n=50, rank=3, noise=0.05):
    rng = numpy_rng(seed, "planted")
    truth = rng.normal(size=(m, rank)) @ rng.normal(size=(rank, n))
    return truth, truth + noise * rng.normal(size=truth.shape)


def test_pmf_recovers_a_planted_rank_3_matrix():
    truth, noisy = _planted()
    train, test = pp.split_cells(np.ones(truth.shape, bool), 0.3, seed=0)
    post = pp.pmf_gibbs(np.where(train, noisy, 0.0), train, rank=5, alpha=50.0, n_burn=60, n_samples=40, seed=0)
    err = np.sqrt(np.mean((post.mean - truth)[test] ** 2))
    assert err < 0.15 * truth.std(), err
    # the posterior is tighter on observed cells than on held-out ones
    assert post.std[train].mean() < post.std[test].mean()


def test_posterior_sd_is_larger_for_sparse_rows():
    truth, noisy = _planted(1)
    train = np.ones(truth.shape, bool)
    train[:10, 5:] = False  # ten rows keep only 5 cells
    post = pp.pmf_gibbs(np.where(train, noisy, 0.0), train, rank=3, alpha=20.0, n_burn=40, n_samples=40, seed=0)
    assert post.std[:10, 5:].mean() > 2 * post.std[10:, 5:].mean()


def test_sampler_is_deterministic_under_a_seed_and_every_variant_runs():
    matrix, xm, xd = pp.synthetic_low_rank(20, 25, seed=3)
    train, _ = pp.split_cells(matrix.observed, 0.5, seed=0)
    cfg = pp.config("smoke", n_burn=5, n_samples=5)
    for variant in ("pmf", "bpmf", "profile"):
        a = pp.fit_predict(matrix, train, cfg, 7, variant, (xm, xd))
        b = pp.fit_predict(matrix, train, cfg, 7, variant, (xm, xd))
        np.testing.assert_array_equal(a[0], b[0])
        assert np.isfinite(a[0]).all() and (a[1] >= 0).all()
    c = pp.fit_predict(matrix, train, cfg, 8)
    assert not np.array_equal(a[0], c[0])


def test_baselines_on_a_hand_made_matrix():
    scores = np.array([[0.2, 0.4], [0.6, 1.0]])
    train = np.array([[True, True], [True, False]])
    b = pp.baselines(scores, train)
    np.testing.assert_allclose(b["global mean"], 0.4)
    np.testing.assert_allclose(b["column mean"][1], [0.4, 0.4])
    # the official mean of means on column z-scores (fewer than 5 training cells: the global mean 0.4 and sd)
    sd = np.std([0.2, 0.4, 0.6])
    z = (np.array([[0.2, 0.4], [0.6, np.nan]]) - 0.4) / sd
    g, row1, col1 = np.nanmean(z), np.nanmean(z[1]), np.nanmean(z[:, 1])
    np.testing.assert_allclose(b["mean of means"][1, 1], 0.4 + sd * (g + row1 + col1) / 3)


def test_mean_of_means_leaves_out_a_missing_row_mean():
    scores = numpy_rng(0, "mom").random((6, 8))
    train = np.ones(scores.shape, bool)
    train[0] = False  # a model with no training cell: the average of the global and the column mean
    b = pp.baselines(scores, train)
    norm = pp.ColumnNormaliser.fit(scores, train)
    z = np.where(train, norm.transform(scores), np.nan)
    expected = norm.inverse((np.nanmean(z) + np.nanmean(z, 0)) / 2)
    np.testing.assert_allclose(b["mean of means"][0], expected, atol=1e-12)


def test_active_evaluation_follows_the_official_schedule():
    matrix, _, _ = pp.synthetic_low_rank(20, 30, seed=1)
    cfg = pp.config("smoke", n_burn=4, n_samples=4, active_rounds=3)
    curves = pp.active_evaluation(matrix, cfg, 0)
    np.testing.assert_allclose(curves["observed share"], [0.2, 0.25, 0.3, 0.4])
    assert curves["active"][0] == curves["random"][0]  # one common start
    assert len(curves["active"]) == len(curves["random"]) == 4
    # revealed cells count as known, so revealing every test cell leaves no error
    everything = pp.config("smoke", n_burn=2, n_samples=2, active_rounds=len(pp.ACTIVE_SCHEDULE))
    assert pp.active_evaluation(matrix, everything, 0)["random"][-1] == 0
    assert sum(pp.ACTIVE_SCHEDULE) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="active_rounds"):
        pp.active_evaluation(matrix, pp.config("smoke", active_rounds=0), 0)


def test_shuffled_sd_is_a_null_for_the_spearman_statistic():
    rng = numpy_rng(0, "calib")
    sd = rng.random(4000)
    calibration = [(sd, sd + 0.1 * rng.random(4000))]
    assert pp.sd_error_spearman(calibration)[0] > 0.9
    assert abs(pp.sd_error_spearman(calibration, shuffle_seed=0)[0]) < 0.05


def test_loader_reads_the_official_schema(tmp_path):
    raw = {"model-a": {"Task (X)": 0.5, "Caption (Whole dataset)": -3.0},
           "model-b": {"Task (X)": 0.7, "Caption (Whole dataset)": None}}
    path = tmp_path / "result_summary.json"
    path.write_text(json.dumps(raw))
    everything = pp.load_result_summary(path, accuracy_only=False)
    assert everything.models == ("model-a", "model-b")
    assert everything.datasets == ("Task (X)", "Caption (Whole dataset)")
    assert np.isnan(everything.scores[1, 1])
    acc = pp.load_result_summary(tmp_path)  # a folder works too
    np.testing.assert_array_equal(acc.scores, [[0.5], [0.7]])


def test_bad_input_is_rejected_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="mapping"):
        pp.parse_result_summary([1, 2])
    with pytest.raises(ValueError, match="number or null"):
        pp.parse_result_summary({"m": {"d": "high"}})
    with pytest.raises(ValueError, match="no observed score"):
        pp.parse_result_summary({"m": {"d": 0.5}, "empty": {"d": None}})
    for share in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"\(0, 1\)"):
            pp.split_cells(np.ones((3, 3), bool), share, 0)
    with pytest.raises(FileNotFoundError, match="CrossPred-LVLM data not found"):
        pp.load_result_summary(tmp_path / "nowhere.json")
    with pytest.raises(ValueError, match="valid variants"):
        pp.pmf_gibbs(np.zeros((2, 2)), np.ones((2, 2), bool), variant="nuts")
    with pytest.raises(ValueError, match="valid settings"):
        pp.config("ci", n_chains=4)


def test_the_real_fixture_loads_when_present():
    path = pp.default_data_dir() / "result_summary.json"
    if not path.exists():  # the fixture lives outside the project; its absence must be a clear error
        with pytest.raises(FileNotFoundError, match="ICML25_CROSSPRED_DATA"):
            pp.load_result_summary()
        return
    matrix = pp.load_result_summary()
    assert matrix.scores.shape == (108, 149)
    assert matrix.observed.all() and (matrix.scores >= 0).all() and (matrix.scores <= 1).all()
    xm, xd = pp.load_profiles(matrix)
    assert xm.shape[0] == 108 and xd.shape == (149, 15) and np.isfinite(xm).all()


def test_active_evaluation_keeps_the_start_normalisation_and_reveals_official_batches(monkeypatch):
    """The official script z-scores the columns once, with the start's training cells, refits on that scale, and
    reveals int(share × all cells) cells per round."""
    matrix, _, _ = pp.synthetic_low_rank(21, 31, seed=2)
    cfg = pp.config("smoke", n_burn=2, n_samples=2, active_rounds=3)
    seen, sizes, fit = [], [], pp.fit_predict

    def spy(matrix, train, cfg, seed, variant="pmf", profiles=None, norm=None):
        seen.append(norm)
        sizes.append(int(train.sum()))
        return fit(matrix, train, cfg, seed, variant, profiles, norm)

    monkeypatch.setattr(pp, "fit_predict", spy)
    pp.active_evaluation(matrix, cfg, 0)
    train0, _ = pp.split_cells(matrix.observed, 1 - cfg.active_start_share, 0, "active-start")
    start = pp.ColumnNormaliser.fit(matrix.scores, train0)
    assert len(seen) == 1 + 2 * cfg.active_rounds
    batches = [int(21 * 31 * share) for share in pp.ACTIVE_SCHEDULE[:3]]  # 32, 32, 65: rounded down
    for order in (sizes[1:4], sizes[4:7]):
        np.testing.assert_array_equal(np.diff([sizes[0]] + order), batches)
    for norm in seen:
        np.testing.assert_array_equal(norm.mean, start.mean)
        np.testing.assert_array_equal(norm.std, start.std)
