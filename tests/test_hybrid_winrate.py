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


def test_official_ddof_convention_is_ours_times_n_over_n_minus_1():
    """The official code's main variant divides np.cov (ddof = 1) by np.var (ddof = 0); ours uses one convention for
    both moments, so the two coefficients differ by exactly n/(n − 1) (what the chapter page says)."""
    z, s, _, _ = toy(12, 5)
    for r in range(len(z)):
        official = np.cov(z[r], s[r])[0, 1] / np.var(s[r])
        assert official == pytest.approx(hw.optimal_alpha(z[r], s[r])[0] * 12 / 11, rel=1e-12)


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


def test_fitted_judge_matches_the_mean_of_its_training_labels():
    """Why the fine-tuned judge is left out of the synthetic-bias effect: a logistic regression with an intercept,
    at its optimum, predicts on average exactly the mean of the (fractional) labels it was fitted to."""
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(3000, 2))
    z = hw.draw_labels(1 / (1 + np.exp(-feats[:, 0])), 0.1, rng)
    w = hw.fit_judge(feats, z)
    pred = 1 / (1 + np.exp(-(feats @ w[:2] + w[2])))
    assert pred.mean() == pytest.approx(z.mean(), abs=1e-9)


def test_pair_labels_and_scores():
    assert hw.pair_label([1, 1, 0, 0], [1, 0, 1, 0]).tolist() == [0.5, 1.0, 0.0, 0.5]
    assert hw.pair_score([0.9, 0.2], [0.1, 0.2]).tolist() == pytest.approx([0.9, 0.5])


def test_finite_population_moments_and_degenerate_labels():
    rng = np.random.default_rng(0)
    z = hw.pair_label(rng.random(500) < 0.7, rng.random(500) < 0.4)
    s = 0.3 * z + 0.2 * rng.random(500)
    pop = hw.FinitePopulation(z, s)
    assert pop.rho == pytest.approx(np.corrcoef(z, s)[0, 1])
    assert pop.alpha == pytest.approx(np.polyfit(s, z, 1)[0])  # the OLS slope of z on ŝ
    flat = hw.FinitePopulation(np.full(10, 0.5), rng.random(10))
    assert flat.rho == 0.0 and flat.alpha == 0.0


def test_zoo_experiment_saving_matches_rho_squared_on_a_known_population():
    """On a finite population with a known ρ the measured saving (fitted α, n = 200) is ρ² within Monte Carlo
    error, and with constant labels the saving is 0 rather than undefined."""
    cfg = hw.config("smoke", repeats=4000, n_grid=[200], n_claim=200)
    rng = np.random.default_rng(1)
    z = hw.pair_label(rng.random(3000) < 0.6, rng.random(3000) < 0.5)
    s = z + rng.normal(0, 0.3, 3000)
    pop = hw.FinitePopulation(z, s)
    flat = hw.FinitePopulation(np.full(50, 0.5), rng.random(50))
    rows = hw.run_zoo_experiment(cfg, {0: ({hw.ZOO_JUDGE: pop}, 0.5), 1: ({hw.ZOO_JUDGE: flat}, 0.0)})
    saving = hw.measured_saving(rows, hw.ZOO_JUDGE, 200)
    assert saving[0] == pytest.approx(pop.rho ** 2, abs=0.03)
    assert saving[1] == 0.0


def test_likelihood_scores_equal_a_plain_reference():
    from icml25.core import arithmetic, tinylm

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model("nano", tok, 0).eval()
    problems = arithmetic.sample_problems(3, 0)
    sols = [p.solution for p in problems[:2]] + ["A1"]
    got = hw.likelihood_scores(model, tok, problems, sols, batch_size=2)
    for p, sol, g in zip(problems, sols, got):
        lp = _solution_logps(model, tok, p.prompt, sol)
        assert g == pytest.approx(np.exp(np.mean(lp)), rel=1e-5)


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


def test_normal_interval_covers_at_the_papers_sample_sizes():
    """Formerly the `coverage` claim, a property of the CLT for any judge: on the simulated population the nominal
    95% control-variates interval covers the truth 93-97% of the time at n >= 50."""
    cfg = hw.config("smoke", seeds=[0], repeats=4000, n_grid=[50, 200])
    rows = hw.run_experiment(cfg)
    for judge in hw.JUDGES:
        for n in (50, 200):
            assert 0.93 <= hw.coverage(rows, judge, n) <= 0.97, (judge, n)


def test_solution_rewards_equal_a_plain_reference():
    """The mean token log-probability of each solution, end token included."""
    from icml25.core import arithmetic, tinylm

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model("nano", tok, 1).eval()
    problems = arithmetic.sample_problems(3, 1)
    sols = [problems[0].solution, "A7", problems[2].solution]
    got = hw.solution_rewards(model, tok, problems, sols, batch_size=2)
    assert got.shape == (3,)
    for p, sol, g in zip(problems, sols, got):
        assert g == pytest.approx(np.mean(_solution_logps(model, tok, p.prompt, sol)), rel=1e-5)


def _pairs(n, rng, signal=1.0):
    """ZooPairs whose reward difference predicts which solution is right."""
    a_ok, b_ok = rng.random(n) < 0.6, rng.random(n) < 0.5
    ra, rb = (-1 + signal * ok + 0.3 * rng.normal(size=n) for ok in (a_ok, b_ok))
    return hw.ZooPairs(hw.pair_label(a_ok, b_ok), ra, rb)


def test_zoo_null_permutes_the_judge_and_keeps_the_labels():
    rng = np.random.default_rng(1)
    pairs = _pairs(800, rng)
    scores = {hw.ZOO_JUDGE: pairs.offshelf}
    (real, decided), (null, decided_null) = (hw.zoo_populations(pairs.z, scores, 5),
                                             hw.zoo_populations(pairs.z, scores, 5, null=True))
    assert decided == decided_null == pytest.approx(np.mean(pairs.z != 0.5))
    assert np.array_equal(real[hw.ZOO_JUDGE].z, null[hw.ZOO_JUDGE].z)
    assert sorted(real[hw.ZOO_JUDGE].s) == pytest.approx(sorted(null[hw.ZOO_JUDGE].s))
    assert real[hw.ZOO_JUDGE].rho > 0.3 and abs(null[hw.ZOO_JUDGE].rho) < 0.1


def test_fitted_alpha_bias_matches_monte_carlo():
    """The first-order O(1/n) bias of the fitted-α estimate, on a bounded finite population whose residual is
    skewed in ŝ, equals the Monte Carlo bias at n = 50 within 4 standard errors plus a fifth (the O(1/n²) rest), and
    shrinks as 1/n."""
    rng = np.random.default_rng(3)
    s = rng.random(400) ** 2
    z = np.clip(0.2 + 0.3 * s + 0.8 * (s - 0.3) ** 2 + 0.1 * rng.normal(size=400), 0, 1)
    idx = rng.integers(400, size=(200_000, 50))
    est = hw.control_variates(z[idx], s[idx], s.mean())
    mc, se = est.mean() - z.mean(), est.std() / np.sqrt(len(est))
    pred = hw.fitted_alpha_bias(z, s, 50)
    assert abs(pred) > 8 * se  # the term is visible at this n
    assert abs(mc - pred) < 4 * se + 0.2 * abs(pred)  # first order: O(1/n²) left over
    assert hw.fitted_alpha_bias(z, s, 500) == pytest.approx(pred / 10)
    assert hw.fitted_alpha_bias(z, np.ones(400), 50) == 0.0


def _arith_pairs(model, tok, n, seed):
    from icml25.core import arithmetic

    problems = arithmetic.sample_problems(n, seed)
    sol_a = [p.solution if i % 2 else "A" + str(i) for i, p in enumerate(problems)]
    sol_b = [p.solution if i % 3 == 0 else "A" + str(i + 1) for i, p in enumerate(problems)]
    z = hw.pair_label([arithmetic.is_correct(p, x) for p, x in zip(problems, sol_a)],
                      [arithmetic.is_correct(p, x) for p, x in zip(problems, sol_b)])
    reward = lambda sols: hw.solution_rewards(model, tok, problems, sols)  # noqa: E731
    return hw.ZooPairs(z, reward(sol_a), reward(sol_b), tuple(problems), tuple(sol_a), tuple(sol_b))


def test_preferences_drop_ties_and_choose_the_right_solution():
    from icml25.core import arithmetic, tinylm

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    pairs = _arith_pairs(tinylm.make_model("nano", tok, 0).eval(), tok, 12, 2)
    problems, chosen, rejected = pairs.preferences()
    assert len(problems) == int(np.sum(pairs.z != 0.5)) > 0
    for p, c, r in zip(problems, chosen, rejected):
        assert arithmetic.is_correct(p, c) and not arithmetic.is_correct(p, r)


def test_bradley_terry_loss_equals_a_plain_reference():
    import torch
    from icml25.core import arithmetic, tinylm
    from icml25.core.generation import encode_completions, select_rows

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model("nano", tok, 0).eval()
    problems = arithmetic.sample_problems(3, 4)
    chosen, rejected = [p.solution for p in problems], ["A1", "A22", problems[0].solution]
    enc = lambda sols: encode_completions(tok, [p.prompt for p in problems], sols, add_eos=True)  # noqa: E731
    with torch.no_grad():
        got = float(hw.bradley_terry_loss(model, {"chosen": enc(chosen), "rejected": enc(rejected)}))
    r = lambda p, y: np.mean(_solution_logps(model, tok, p.prompt, y))  # noqa: E731
    want = np.mean([np.log1p(np.exp(-(r(p, c) - r(p, x)))) for p, c, x in zip(problems, chosen, rejected)])
    assert got == pytest.approx(want, rel=1e-5)


def test_fine_tuning_moves_the_judge_towards_its_preferences_and_leaves_the_original():
    """Bradley-Terry fine-tuning of a copy: the original judge's weights are untouched, the copy's reward margin
    (chosen − rejected) on its training pairs grows, and the fine-tuned judge's pair score is the off-the-shelf
    formula (with lr → 0 it equals the off-the-shelf judge's score)."""
    import torch
    from types import SimpleNamespace
    from icml25.core import arithmetic, tinylm

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    judge = SimpleNamespace(model=tinylm.make_model("nano", tok, 0).eval(), tokenizer=tok)
    before = [t.clone() for t in judge.model.parameters()]
    train = _arith_pairs(judge.model, tok, 40, 5)
    tuned = hw.fine_tune_judge(judge, train, lr=3e-3, epochs=4, batch_size=8, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(before, judge.model.parameters()))
    problems, chosen, rejected = train.preferences()

    def margin(m):
        r = lambda sols: hw.solution_rewards(m, tok, problems, sols)  # noqa: E731
        return float(np.mean(r(chosen) - r(rejected)))

    assert margin(tuned) > margin(judge.model) + 0.05
    frozen = hw.fine_tune_judge(judge, train, lr=1e-12, epochs=1, batch_size=8, seed=0)
    assert hw.likelihood_judge(frozen, tok, train) == pytest.approx(train.offshelf, abs=1e-6)


def _solution_logps(model, tok, prompt, sol):
    """The plain reference: each log-probability of the solution's tokens (and the end token) after the prompt."""
    import torch

    ids = tok(prompt + sol, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    start = len(tok(prompt, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, :-1], -1)
    return [float(logp[t - 1, ids[t]]) for t in range(start, len(ids))]


def test_rows_of_a_batch_encoded_once_are_the_batch_encoded_anew():
    """Fine-tuning draws its batches as rows of the preferences tokenized once, cut to the longest row drawn: the
    tensors `encode_completions` gives those rows alone (the same training run)."""
    import torch
    from icml25.core import arithmetic, tinylm
    from icml25.core.generation import encode_completions, select_rows

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    prompts, sols = ["3+4|", "7-1*2|", "2*2|", "9-3|"], ["3+4=7;A7", "1*2=2;7-2=5;A5", "A4", "9-3=6;A6"]
    encoded = encode_completions(tok, prompts, sols, add_eos=True)
    for idx in (np.array([2]), np.array([2, 0]), np.array([3, 1, 3])):
        batch = select_rows(encoded, idx)
        anew = encode_completions(tok, [prompts[i] for i in idx], [sols[i] for i in idx], add_eos=True)
        assert batch.keys() == anew.keys() and all(torch.equal(batch[k], anew[k]) for k in anew)
