import numpy as np
import pytest

from icml25 import hybrid_winrate as hw


def toy(n, repeats, seed=0, corr=0.6):
    """Labels z ∈ {0, ½, 1} and a score correlated with them, with exactly known moments."""
    rng = np.random.default_rng(seed)
    p = rng.random((repeats, n))
    z = hw.draw_labels(p, 0.1, rng)
    s = corr * p + (1 - corr) * rng.random((repeats, n)) + 0.3  # a biased judge
    # exact E[s] = corr·½ + (1 − corr)·½ + 0.3; exact E[z] = 0.1·½ + 0.9·½
    return z, s, 0.8, 0.5


def test_unbiased_with_known_alpha_and_exact_mean_score():
    z, s, s_mean, truth = toy(20, 20000)
    est = hw.control_variates(z, s, s_mean, alpha=0.7)
    se = est.std(ddof=1) / np.sqrt(len(est))
    assert abs(est.mean() - truth) < 3 * se
    # the judge alone is biased by far more than that
    assert abs(hw.synthetic_only(s).mean() - truth) > 50 * se


def test_zero_variance_when_score_equals_label():
    z, _, _, truth = toy(30, 200)
    est = hw.control_variates(z, z, truth)
    ok = z.std(-1) > 0
    assert np.allclose(est[ok], truth, atol=1e-12)


def test_human_only_variance_when_score_independent():
    z, _, _, _ = toy(200, 4000, seed=1)
    s = np.random.default_rng(2).random(z.shape)
    cv, human = hw.control_variates(z, s, 0.5), hw.human_only(z)
    ratio = cv.var() / human.var()
    assert ratio == pytest.approx(1.0, abs=0.05)  # fitted α costs O(1/n) extra variance, here ~0.5%
    assert hw.control_variates(z, s, 0.5, alpha=0.0) == pytest.approx(human)


def test_exactly_invariant_to_affine_transforms_of_the_score():
    z, s, s_mean, _ = toy(25, 50)
    a, b = -3.7, 11.0
    assert np.allclose(hw.control_variates(z, s, s_mean), hw.control_variates(z, a * s + b, a * s_mean + b),
                       rtol=0, atol=1e-12)
    lo1, hi1 = hw.confidence_interval(z, s, s_mean)
    lo2, hi2 = hw.confidence_interval(z, a * s + b, a * s_mean + b)
    assert np.allclose(lo1, lo2, atol=1e-12) and np.allclose(hi1, hi2, atol=1e-12)


def test_variance_ratio_is_one_minus_rho_squared():
    cfg = hw.config("smoke")
    pop = hw.make_population(cfg, 0)
    out = hw.simulate(pop, 100, 6000, 0)
    for judge in hw.JUDGES:
        ratio = out[judge]["cv_known_alpha"].var() / out[judge]["human"].var()
        assert ratio == pytest.approx(1 - pop.rho(judge) ** 2, abs=0.03)


def test_ties_count_as_half():
    assert hw.labels_from_outcomes(["A", "tie", "B"]).tolist() == [1.0, 0.5, 0.0]
    with pytest.raises(ValueError, match="unknown outcome"):
        hw.labels_from_outcomes(["A", "draw"])
    z = hw.draw_labels(np.full(20000, 0.9), 1.0, np.random.default_rng(0))
    assert np.all(z == 0.5)


def test_vectorised_repeats_equal_a_loop():
    z, s, s_mean, _ = toy(15, 40)
    vec = hw.control_variates(z, s, s_mean)
    lo, hi = hw.confidence_interval(z, s, s_mean)
    for r in range(len(z)):
        zr, sr = z[r], s[r]
        alpha = np.cov(zr, sr, bias=True)[0, 1] / np.var(sr)
        mu = zr.mean() - alpha * (sr.mean() - s_mean)
        assert vec[r] == pytest.approx(mu, abs=1e-12)
        half = 1.959963984540054 * np.std(zr - alpha * sr, ddof=1) / np.sqrt(len(zr))
        assert (lo[r], hi[r]) == pytest.approx((mu - half, mu + half), abs=1e-12)


def test_equals_regression_adjusted_mean():
    """A plain reference: the control-variates estimate with fitted α is the OLS fit of z on ŝ evaluated at ŝ̄_N."""
    z, s, s_mean, _ = toy(40, 10)
    for r in range(len(z)):
        slope, intercept = np.polyfit(s[r], z[r], 1)
        assert hw.control_variates(z[r], s[r], s_mean)[0] == pytest.approx(intercept + slope * s_mean, abs=1e-10)


def test_population_rho_matches_sampled_correlation():
    cfg = hw.config("smoke")
    pop = hw.make_population(cfg, 1)
    idx, z = hw.sample(pop, 200, 200, np.random.default_rng(0))
    for judge in hw.JUDGES:
        sampled = np.corrcoef(z.ravel(), pop.scores[judge][idx].ravel())[0, 1]
        assert sampled == pytest.approx(pop.rho(judge), abs=0.02)
    assert pop.rho("fine-tuned") > 0 and pop.rho("off-the-shelf") > 0


def test_bad_inputs():
    with pytest.raises(ValueError, match="at least two"):
        hw.control_variates(np.zeros((3, 0)), np.zeros((3, 0)), 0.5)
    with pytest.raises(ValueError, match="at least two"):
        hw.control_variates([1.0], [0.3], 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        hw.control_variates([1.0, 2.0, 0.0], [0.3, 0.2, 0.1], 0.5)
    with pytest.raises(ValueError, match="same shape"):
        hw.control_variates([1.0, 0.0], [0.3, 0.2, 0.1], 0.5)
    with pytest.raises(ValueError, match="at least 1"):
        hw.sample(hw.make_population(hw.config("smoke"), 0), 0, 5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown setting"):
        hw.config("ci", repeat=3)


def test_claim_rules_on_known_measurements():
    assert hw.SAVING.test({"saving_pct": [10.0, 20.0], "rho2_pct": [12.5, 18.0]})
    assert not hw.SAVING.test({"saving_pct": [10.0, 20.0], "rho2_pct": [13.5, 18.0]})
    assert not hw.COVERAGE.test({"coverage_pct": [94.0, 92.5]})


def test_control_variates_agrees_with_prediction_powered_inference():
    """Cross-check against ppi-python: PPI++'s power-tuned mean is the control-variates estimator, with the
    judge's scores as predictions and the tuning parameter λ playing α."""
    from ppi_py import ppi_mean_ci, ppi_mean_pointestimate

    rng = np.random.default_rng(0)
    n, N = 300, 400_000
    quality = rng.normal(size=n + N)
    z = np.where(rng.random(n) < 0.1, 0.5, (quality[:n] + rng.normal(size=n) > 0).astype(float))
    s_all = 1 / (1 + np.exp(-(quality + 0.7 + 0.5 * rng.normal(size=n + N))))  # a biased judge
    s, s_unlabelled = s_all[:n], s_all[n:]
    for lam in (0.0, 0.6, 1.0):  # a known α: identical point estimates
        ours = hw.control_variates(z, s, s_unlabelled.mean(), alpha=lam)
        assert ours == pytest.approx(float(ppi_mean_pointestimate(z, s, s_unlabelled, lam=lam)[0]), abs=1e-12)
    # α fitted on the n labels: PPI++ shrinks its λ by 1/(1 + n/N), so the two agree up to n/N
    fitted = hw.control_variates(z, s, s_unlabelled.mean())
    assert fitted == pytest.approx(float(ppi_mean_pointestimate(z, s, s_unlabelled)[0]), abs=1e-3)
    lo, hi = hw.confidence_interval(z, s, s_unlabelled.mean(), level=0.95)
    ppi_lo, ppi_hi = ppi_mean_ci(z, s, s_unlabelled, alpha=0.05)
    assert (lo, hi) == pytest.approx((float(ppi_lo[0]), float(ppi_hi[0])), abs=2e-3)
