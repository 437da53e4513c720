import numpy as np
import pytest
from scipy.special import softmax

from icml25 import mpo


def small(beta=0.5, seed=0, n_x=6, n_y=10):
    prob = mpo.tabular_problem(n_x, n_y, seed)
    pols = mpo.single_policies(prob, beta)
    return prob, pols, mpo.log_ratios(pols, prob.pi_ref)


def test_normalisation_idempotent_and_partition_one():
    prob, _, _ = small()
    for beta in (0.1, 0.5, 2.0):
        p = mpo.normalize(prob.rewards[0], prob.pi_ref, beta)
        assert np.allclose(mpo.normalize(p, prob.pi_ref, beta), p, atol=1e-12)
        assert np.allclose((prob.pi_ref * np.exp(p / beta)).sum(-1), 1.0)


def test_normalisation_invariant_to_per_prompt_constant():
    prob, _, _ = small()
    c = np.random.default_rng(1).normal(size=(prob.pi_ref.shape[0], 1)) * 5
    r = prob.rewards[1]
    assert np.allclose(mpo.normalize(r + c, prob.pi_ref, 0.3), mpo.normalize(r, prob.pi_ref, 0.3), atol=1e-10)


def test_vertex_weights_give_the_single_policy():
    _, pols, _ = small()
    for k in range(len(pols)):
        assert np.allclose(mpo.mixture_policy(pols, np.eye(len(pols))[k]), pols[k], atol=1e-12)


def test_mixture_equals_reference_tilted_by_normalised_rewards():
    prob, pols, _ = small(beta=0.4)
    lam = np.array([0.2, 0.5, 0.3])
    r_tilde = np.stack([mpo.normalize(r, prob.pi_ref, 0.4) for r in prob.rewards])
    tilted = prob.pi_ref * np.exp(np.tensordot(lam, r_tilde, axes=1) / 0.4)
    assert np.allclose(mpo.mixture_policy(pols, lam), tilted / tilted.sum(-1, keepdims=True), atol=1e-12)


def test_dual_gradient_matches_finite_differences_and_convexity():
    prob, _, logr = small(beta=0.3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.dirichlet(np.ones(3)), rng.dirichlet(np.ones(3))
        for t in (0.25, 0.5, 0.75):  # F convex along the segment
            mid = mpo.dual_objective(t * a + (1 - t) * b, logr, prob.pi_ref)
            assert mid <= t * mpo.dual_objective(a, logr, prob.pi_ref) + (1 - t) * mpo.dual_objective(
                b, logr, prob.pi_ref) + 1e-12
        d, eps = b - a, 1e-6
        fd = (mpo.dual_objective(a + eps * d, logr, prob.pi_ref) - mpo.dual_objective(a, logr, prob.pi_ref)) / eps
        assert mpo.dual_gradient(a, logr, prob.pi_ref) @ d == pytest.approx(fd, abs=1e-4)


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_optimum_equalises_active_objectives_and_attains_dual_value(beta):
    prob, pols, logr = small(beta=beta, n_x=20, n_y=32)
    lam = mpo.exact_weights(logr, prob.pi_ref)
    per_k, _ = mpo.objective_values(mpo.mixture_policy(pols, lam), logr, prob.pi_ref, beta)
    active = lam > 1e-6
    assert np.ptp(per_k[active]) < 1e-4
    assert np.all(per_k[~active] >= per_k[active].min() - 1e-4)
    v_star = beta * mpo.dual_objective(lam, logr, prob.pi_ref)
    assert mpo.maxmin_value(mpo.mixture_policy(pols, lam), logr, prob.pi_ref, beta) == pytest.approx(v_star, abs=1e-6)
    for pi in mpo.baselines(prob, pols).values():  # the optimum beats every other policy
        assert mpo.maxmin_value(pi, logr, prob.pi_ref, beta) <= v_star + 1e-9


def test_identical_rewards_give_the_single_policy():
    prob, _, _ = small()
    pols = np.stack([mpo.optimal_policy(prob.pi_ref, prob.rewards[0], 0.5)] * 3)
    for lam in ([1 / 3] * 3, [0.7, 0.2, 0.1]):
        assert np.allclose(mpo.mixture_policy(pols, lam), pols[0], atol=1e-12)


def test_bsmd_iterates_stay_on_simplex_and_land_near_optimum():
    prob, pols, logr = small(beta=0.5, n_x=20, n_y=32)
    res = mpo.bsmd(logr, prob.pi_ref, steps=2000, m=64, seed=0, step_scale=16.0, prompts_per_step=4)
    assert np.all(res.iterates >= 0) and np.allclose(res.iterates.sum(1), 1)
    assert np.allclose(res.averages.sum(1), 1)
    lam_star = mpo.exact_weights(logr, prob.pi_ref)
    assert np.abs(res.lam_bar - lam_star).max() <= 0.05


def test_bsmd_step_with_one_sample_per_prompt_is_the_exact_mirror_step():
    rng = np.random.default_rng(0)
    logr = rng.normal(size=(3, 2, 1))  # m = 1: the self-normalised weight is 1
    lam = np.array([0.2, 0.3, 0.5])
    expected = softmax(np.log(lam) - 0.1 * logr[:, :, 0].mean(-1))
    assert np.allclose(mpo.bsmd_step(lam, logr, 0.1), expected)


def test_linear_mixture_and_pg_are_distributions():
    prob, pols, logr = small()
    lin = mpo.linear_mixture(pols, [0.2, 0.3, 0.5])
    assert np.allclose(lin.sum(-1), 1)
    pg = mpo.maxmin_rlhf_pg(logr, prob.pi_ref, 0.5, steps=50, m=8, lr=1.0, seed=0, eval_every=10)
    assert np.allclose(pg.policy.sum(-1), 1) and len(pg.values) == 6


def test_inverse_cdf_sampling_matches_the_distribution():
    pi = softmax(np.random.default_rng(0).normal(size=(3, 7)), -1)
    u = np.random.default_rng(1).random((3, 40000))
    y = mpo.sample_responses(np.cumsum(pi, -1), u)
    freq = np.stack([np.bincount(row, minlength=7) / len(row) for row in y])
    assert np.abs(freq - pi).max() < 0.01
    # exact case: the first response whose cdf reaches u
    cdf = np.array([[0.2, 0.5, 1.0]])
    assert mpo.sample_responses(cdf, np.array([[0.0, 0.2, 0.21, 0.5, 0.99]])).tolist() == [[0, 0, 1, 1, 2]]


def test_exact_mirror_descent_converges_and_dual_gap_is_zero_at_the_optimum():
    prob, _, logr = small(beta=0.3, n_x=10, n_y=16)
    lam_star = mpo.exact_weights(logr, prob.pi_ref)
    assert mpo.relative_dual_gap(lam_star, lam_star, logr, prob.pi_ref) == 0.0
    lam = mpo.exact_mirror_descent(logr, prob.pi_ref, steps=2000, step_scale=16.0)
    assert np.isclose(lam.sum(), 1) and np.all(lam >= 0)
    assert 0 <= mpo.relative_dual_gap(lam, lam_star, logr, prob.pi_ref) < 1e-3
    assert mpo.relative_dual_gap(np.full(3, 1 / 3), lam_star, logr, prob.pi_ref) > 0


def test_dual_gap_is_second_order_and_value_gap_first_order_in_the_weight_error():
    beta = 0.5
    prob, pols, logr = small(beta=beta, seed=0, n_x=20, n_y=32)
    lam_star = mpo.exact_weights(logr, prob.pi_ref)  # two active objectives, an interior optimum on their edge
    v_star = beta * mpo.dual_objective(lam_star, logr, prob.pi_ref)
    gaps = []
    for eps in (0.04, 0.02):
        lam = lam_star + eps * np.array([1.0, -1.0, 0.0])
        dual = mpo.relative_dual_gap(lam, lam_star, logr, prob.pi_ref)
        value = (v_star - mpo.maxmin_value(mpo.mixture_policy(pols, lam), logr, prob.pi_ref, beta)) / abs(v_star)
        gaps.append((dual, value))
    (d1, v1), (d2, v2) = gaps
    assert d1 / d2 == pytest.approx(4, rel=0.1)  # half the weight error, a quarter of the dual gap
    assert v1 / v2 == pytest.approx(2, rel=0.1)  # and half the value gap
    assert v2 > 10 * d2


def test_policy_gradient_gets_the_declared_compute_multiple():
    cfg = mpo.config("ci")
    steps = mpo.pg_steps_for(cfg, 3)
    mpo_passes = cfg.bsmd_steps * mpo.mpo_passes_per_sample(3)
    assert steps * mpo.pg_passes_per_sample(3) >= cfg.pg_compute_factor * mpo_passes
    assert (steps - 1) * mpo.pg_passes_per_sample(3) < cfg.pg_compute_factor * mpo_passes


def test_lm_rewards():
    from icml25.core import arithmetic
    p = arithmetic.Problem((3, 4), ("+",))  # 3+4 = 7
    assert mpo.lm_rewards(p, "3+4=7;A7").tolist() == [1, 1, 0]
    assert mpo.lm_rewards(p, "3+4=8;A8").tolist() == [0, 1, 1]
    assert mpo.lm_rewards(p, "3+4=").tolist() == [0, 0, 0]


def test_bad_inputs():
    _, pols, _ = small()
    with pytest.raises(ValueError, match="simplex"):
        mpo.mixture_policy(pols, [0.5, 0.6, -0.1])
    with pytest.raises(ValueError, match="simplex"):
        mpo.mixture_policy(pols, [0.5, 0.2, 0.2])
    with pytest.raises(ValueError, match="K = 3"):
        mpo.mixture_policy(pols, [0.5, 0.5])
    with pytest.raises(ValueError, match="K = 0"):
        mpo.mixture_policy([], [])
    with pytest.raises(ValueError, match="support"):
        mpo.mixture_policy([pols[0], pols[1][:, :5] / pols[1][:, :5].sum(-1, keepdims=True)], [0.5, 0.5])
    with pytest.raises(ValueError, match="support"):
        mpo.log_ratios(pols, np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="unknown setting"):
        mpo.config("ci", bogus=1)


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_the_per_token_mix_on_any_causal_lm_reduces_to_the_model_itself(family_checkpoints, family):
    """On a GPT-2, Llama or Qwen2 checkpoint from the `model` knob: a mix of a model with itself samples exactly
    what the model samples (KV-cached), and its sequence log-probability is the model's own (minus its summed
    cross-entropy on the completion and end token)."""
    import torch
    import torch.nn.functional as F

    from icml25.core import arithmetic, generation, models, tinylm
    from icml25.core.seeding import torch_generator

    tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
    cfg = mpo.config("smoke", model=str(family_checkpoints(tok)[family]))
    z = models.get(cfg.model, "smoke", 0, alphabet=arithmetic.ALPHABET)
    m, tok = z.model, z.tokenizer
    assert m.config.model_type == family
    prompts = [p.prompt for p in arithmetic.sample_problems(4, 0)]
    alone = mpo.sample_mixture([m], [1.0], tok, prompts, torch_generator(0, "t"))
    mixed = mpo.sample_mixture([m, m], [0.5, 0.5], tok, prompts, torch_generator(0, "t"))
    assert alone == mixed and any(alone)
    got = mpo.mixture_sequence_logprobs([m, m], [0.5, 0.5], tok, prompts, alone)
    batch = generation.encode_completions(tok, prompts, alone, add_eos=True)
    logits = m(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    nll = F.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:], reduction="none")
    torch.testing.assert_close(got, -(nll * batch["completion_mask"][:, 1:]).sum(-1), atol=1e-4, rtol=1e-5)


def test_reference_policy_is_the_model_at_temperature_t():
    """π_ref's logits are the model's divided by T at every position; the model itself (whose output layer is tied
    to its input embeddings) is left unchanged."""
    import torch

    from icml25.core import arithmetic, models

    z = models.get("arith-draft", "smoke", 0, alphabet=arithmetic.ALPHABET)
    before = {k: v.clone() for k, v in z.model.state_dict().items()}
    ref = mpo.reference_policy(z.model, 1.5)
    ids = z.tokenizer([p.prompt for p in arithmetic.sample_problems(3, 0)], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(ref(**ids).logits, z.model(**ids).logits / 1.5)
    assert all(torch.equal(v, z.model.state_dict()[k]) for k, v in before.items())


def test_language_model_runs_are_computed_in_the_warm_up_and_read_back(tmp_path, monkeypatch):
    """What the builder's warm-up caches is what the notebook reads back, and equals a direct run of every seed."""
    from icml25.book import build

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    assert build.CHAPTER_RESULTS["mpo"] == ("mpo-lm-runs", "warm_up")
    config = mpo.config
    cfg = config("smoke", lm_seeds=[100, 101])
    monkeypatch.setattr(mpo, "config", lambda scale: cfg)
    build._train_shared("mpo-lm-runs", "smoke", None)  # what the warm-up runs
    cached, now = mpo.language_model_runs(cfg)  # what the notebook runs
    assert not now and len(cached) == 2
    for s, run in zip(cfg.lm_seeds, cached):
        direct = mpo.run_language_models(cfg, s)
        assert run.as_json() == direct.as_json()
        assert mpo.lm_measurements([run]) == mpo.lm_measurements([direct])
    assert mpo.language_model_runs(config("smoke", lm_seeds=[100, 101], lm_temperature=2.0))[1]  # a knob counts


def test_weighted_nll_batches_equal_the_per_batch_encoding():
    """The fine-tuning batches (encoded once, trimmed to the longest row) give the loss of encoding each batch."""
    import torch

    from icml25.core import arithmetic, models
    from icml25.core.generation import encode_completions

    z = models.get("arith-draft", "smoke", 0, alphabet=arithmetic.ALPHABET)
    problems = arithmetic.sample_problems(3, 0)
    prompts = [p.prompt for p in problems]
    completions = [f"A{problems[0].answer}", "1+2=3;3*4=2;A2", ""]  # of different lengths
    rows = encode_completions(z.tokenizer, prompts, completions, True)
    idx = torch.tensor([2, 0])
    width = int(rows["attention_mask"][idx].sum(-1).max())
    trimmed = {k: v[idx, :width] for k, v in rows.items()} | {"weight": torch.tensor([1.0, 3.0])}
    direct = encode_completions(z.tokenizer, [prompts[2], prompts[0]], [completions[2], completions[0]], True)
    torch.testing.assert_close(mpo.weighted_nll(z.model, trimmed),
                               mpo.weighted_nll(z.model, direct | {"weight": torch.tensor([1.0, 3.0])}))


def test_common_noise_couples_the_samples_of_nearby_policies():
    """Gumbel-max sampling with generators in the same state (the paired evaluation): a policy and a slightly
    tempered copy of it give the same completion far more often than with independent noise, and a policy with
    itself always does."""
    from icml25.core import arithmetic, models
    from icml25.core.seeding import torch_generator

    z = models.get("arith-draft", "smoke", 0, alphabet=arithmetic.ALPHABET)
    ref, near = mpo.reference_policy(z.model, 1.5), mpo.reference_policy(z.model, 1.6)
    prompts = [p.prompt for p in arithmetic.sample_problems(64, 0, max_ops=3)]
    a = mpo.sample_mixture([ref], [1.0], z.tokenizer, prompts, torch_generator(0, "crn"))
    assert a == mpo.sample_mixture([ref], [1.0], z.tokenizer, prompts, torch_generator(0, "crn"))
    coupled = mpo.sample_mixture([near], [1.0], z.tokenizer, prompts, torch_generator(0, "crn"))
    independent = mpo.sample_mixture([near], [1.0], z.tokenizer, prompts, torch_generator(1, "crn"))
    same = lambda xs: np.mean([x == y for x, y in zip(a, xs)])  # noqa: E731
    assert same(coupled) > same(independent) + 0.2


def test_smallest_effect_is_twice_the_papers_smallest_margin_of_minimum_win_rates():
    """The margin rule (the smallest margin over the β of MPO over the best other method), and the conversion of a
    win rate to a raw-reward gain checked by enumerating two independent 0/1 rewards: W = P(win) + P(tie)/2 =
    (1 + p − q)/2."""
    rates = {0.5: {"MPO": 60.0, "A": 52.0, "B": 55.0}, 0.1: {"MPO": 40.0, "A": 38.0, "B": 30.0}}
    assert mpo.smallest_paper_margin(rates) == pytest.approx(0.02)
    for p, q in ((0.7, 0.4), (0.2, 0.5), (0.5, 0.5)):
        win = p * (1 - q) + 0.5 * (p * q + (1 - p) * (1 - q))
        assert mpo.gain_from_win_rate(win - 0.5) == pytest.approx(p - q)
    assert mpo.MIN_EFFECT == pytest.approx(2 * 0.015)  # 46.3 vs 44.8 at β = 0.1 is the smaller margin
    assert all(e.min_effect == mpo.MIN_EFFECT for e in mpo.BALANCED_LM.effects)


def test_simplex_grid():
    grid = mpo.simplex_grid(3, 3)
    assert grid.shape == (10, 3) and np.allclose(grid.sum(1), 1) and (grid >= 0).all()
    for lam in [*np.eye(3), np.full(3, 1 / 3)]:  # the single policies and the uniform mix are on the grid
        assert np.isclose(grid, lam).all(1).sum() == 1
    assert len(mpo.simplex_grid(2, 4)) == 5 and len(mpo.simplex_grid(4, 2)) == 10


def test_max_min_mix_finds_the_known_balance_of_two_objectives():
    """Two objectives whose gains are linear in the weight: g_1 = 0.09 λ_1 − 0.01, g_2 = 0.045 λ_2; the worst one
    is largest where they cross, λ_1 = 0.055/0.135 ≈ 0.41, so the grid of thirds picks (1/3, 2/3), whose worst gain
    (0.02) beats the uniform mix's (0.0125 at λ = ½, off this grid) and every vertex's (≤ 0)."""
    lams = mpo.simplex_grid(2, 3)
    gains = np.stack([0.09 * lams[:, 0] - 0.01, 0.045 * lams[:, 1]], 1)
    best = mpo.max_min_mix(lams, gains)
    np.testing.assert_allclose(best, [1 / 3, 2 / 3])
    assert gains.min(1).max() == pytest.approx(0.02)
    ties = np.zeros((3, 2))
    np.testing.assert_array_equal(mpo.max_min_mix(lams[:3], ties), lams[0])  # the first of ties


def _run(raw: dict) -> "mpo.LMRun":
    names = ["π_ref", *(f"π_{o}" for o in mpo.LM_OBJECTIVES), "uniform per-token mix", "MPO", mpo.GRID_MIX]
    raw = {n: np.asarray(raw[n], dtype=float) for n in names}
    return mpo.LMRun(np.full(3, 1 / 3), {n: np.zeros(3) for n in names}, raw, np.zeros(3),
                     {n: np.full(3, 0.01) for n in names}, np.array([0.5, 0.5, 0.0]))


def test_headroom_is_the_grid_mix_over_the_better_comparator():
    """Worst-objective gains: singles −0.05, −0.1, −0.1; uniform +0.01; grid mix +0.04: headroom 0.03 over the
    uniform mix; with a single policy at +0.02 it is 0.02 over that single. The precondition reads their mean."""
    raw = {"π_ref": [0.5, 0.5, 0.5], "π_correct": [0.6, 0.45, 0.5], "π_large answer": [0.4, 0.7, 0.5],
           "π_even answer": [0.5, 0.4, 0.6], "uniform per-token mix": [0.52, 0.53, 0.51], "MPO": [0.53, 0.53, 0.53],
           mpo.GRID_MIX: [0.56, 0.55, 0.54]}
    a = _run(raw)
    assert a.headroom == pytest.approx(0.03) and a.best_single_min_gain == pytest.approx(-0.05)
    b = _run(raw | {"π_correct": [0.6, 0.52, 0.53]})
    assert b.headroom == pytest.approx(0.02)
    m = mpo.lm_measurements([a, b])
    assert m["headroom"] == pytest.approx([0.03, 0.02])
    assert m["grid_minus_uniform"] == pytest.approx([0.03, 0.03])
    assert m["mpo_minus_uniform"] == pytest.approx([0.02, 0.02])
    assert mpo.LMRun.from_json(a.as_json()).as_json() == a.as_json()


def test_no_headroom_makes_balanced_lm_inconclusive_not_refuted():
    """The second example refutes mpo_minus_uniform when there is headroom; the same effects with a grid mix no
    better than the comparators (headroom below the smallest effect) give an inconclusive verdict that names it."""
    ok, bad = mpo.BALANCED_LM.examples[:2]
    assert mpo.BALANCED_LM.decide(ok, unit_floor=False)["verdict"] == "reproduced"
    assert mpo.BALANCED_LM.decide(bad, unit_floor=False)["verdict"] == "refuted"
    flat = mpo.BALANCED_LM.decide(bad | {"headroom": [0.0, 0.01, -0.005]}, unit_floor=False)
    assert flat["verdict"] == "inconclusive" and "headroom" in flat["reason"]


def test_a_zero_weight_leaves_the_mix_unchanged():
    """A model of weight 0 is not run, and the samples are those of the mix without it."""
    from icml25.core import arithmetic, models
    from icml25.core.seeding import torch_generator

    z = models.get("arith-draft", "smoke", 0, alphabet=arithmetic.ALPHABET)
    a, b = mpo.reference_policy(z.model, 1.5), mpo.reference_policy(z.model, 2.0)
    prompts = [p.prompt for p in arithmetic.sample_problems(16, 0, max_ops=3)]
    with_zero = mpo.sample_mixture([a, b, z.model], [0.4, 0.6, 0.0], z.tokenizer, prompts, torch_generator(0, "z"))
    assert with_zero == mpo.sample_mixture([a, b], [0.4, 0.6], z.tokenizer, prompts, torch_generator(0, "z"))


def test_the_referee_records_match_the_claims_judgement():
    """The self-check's and the referee's records: every estimate inside its interval; effects alone refuted means
    every interval lies wholly below the smallest effect; a failed headroom lies below its bar."""
    for r in (mpo.REFEREE_800, mpo.REFEREE_900):
        intervals = (r["mpo_minus_best_single"], r["mpo_minus_uniform"])
        assert all(lo < est < hi for est, lo, hi in intervals)
        assert (r["effects_alone"] == "refuted") == all(hi < mpo.MIN_EFFECT for _, _, hi in intervals)
        assert ("headroom" in r["failed"]) == (r["headroom"] < mpo.MIN_EFFECT)
        assert r["verdict"] == ("inconclusive" if r["failed"] else r["effects_alone"])
