"""KABB: distance, posterior updates and decay, top-k, a stationary bandit, bad input, the semantic overlap, the
drift-free null world, the knowledge-only control, the decay calibration and the claims' runs (cached == direct)."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from icml25 import kabb
from icml25.core.sentence import embed
from icml25.core.seeding import numpy_rng


def test_update_adds_exactly_one_and_clamps_rewards():
    a, b = np.array([[3.0, 1.0, 2.0]]), np.array([[2.0, 4.0, 1.0]])
    chosen = np.array([[True, False, True]])
    for r in (0.0, 0.3, 1.0, 1.7, -0.5):
        a2, b2 = kabb.update(a, b, chosen, np.array([r]))
        np.testing.assert_allclose((a2 + b2) - (a + b), chosen.astype(float))
        rc = min(max(r, 0), 1)
        np.testing.assert_allclose(a2[0, 0], 3.0 + rc)
        np.testing.assert_allclose(b2[0, 2], 1.0 + 1 - rc)
        assert a2[0, 1] == 1.0 and b2[0, 1] == 4.0


def test_decay_keeps_the_mean_and_widens_the_posterior():
    a, b = np.array([6.0, 20.0]), np.array([4.0, 5.0])
    a2, b2 = kabb.decay(a, b, 10, gamma=0.95, floor=0.01)
    np.testing.assert_allclose(a2 / (a2 + b2), a / (a + b))
    var = lambda x, y: x * y / ((x + y) ** 2 * (x + y + 1))
    assert (var(a2, b2) > var(a, b)).all()


def test_long_idle_gaps_never_give_a_zero_beta_parameter():
    a, b = kabb.decay(np.array([3.0]), np.array([2.0]), 10**6, gamma=0.99, floor=0.05)
    assert a[0] == 0.05 and b[0] == 0.05
    kappa = np.exp(-kabb.knowledge_distance(0.0, 10, 0.0, 5.0, 10))
    draw = numpy_rng(0, "beta").beta(kappa * a, b)
    assert np.isfinite(draw).all() and (kappa * a > 0).all()


def test_knowledge_distance_properties():
    assert kabb.knowledge_distance(1.0, 0, 1.0, 3.0, 10) == 0.0
    assert kabb.knowledge_distance(0.2, 2, 0.5, 0.0, 10) == 0.0
    overlaps = np.linspace(0, 1, 11)
    d = kabb.knowledge_distance(overlaps, 1, 0.6, 3.0, 10)
    assert (d >= 0).all() and (np.diff(d) < 0).all()
    diffs = np.linspace(0.5, 5, 10)
    assert (np.diff(kabb.knowledge_distance(0.3, 1, 0.6, diffs, 10)) > 0).all()
    kappa = np.exp(-d)
    assert ((kappa > 0) & (kappa <= 1)).all()
    # hand value: ln(1+4)·[0.4·0.5 + 0.3·2/10 + 0.3·0.25]
    np.testing.assert_allclose(kabb.knowledge_distance(0.5, 2, 0.75, 4.0, 10), np.log(5) * (0.2 + 0.06 + 0.075))


def test_concept_overlap_and_task_concepts():
    graph = np.array([[True, True, False, False, False, False], [False, False, True, False, False, False]])
    req = kabb.task_concepts(["algebra", "coding"])
    np.testing.assert_allclose(kabb.concept_overlap(graph, req), [0.5, 0.5])
    np.testing.assert_allclose(kabb.concept_overlap(graph, kabb.task_concepts(["algebra"])), [1.0, 0.0])
    with pytest.raises(ValueError, match="unknown concept.*valid concepts"):
        kabb.task_concepts(["astrology"])


def test_top_k_returns_k_distinct_experts_deterministically():
    scores = numpy_rng(0, "s").random((5, 10))
    mask = kabb.top_k(scores, 3)
    assert (mask.sum(1) == 3).all()
    np.testing.assert_array_equal(mask, np.argsort(np.argsort(-scores, 1), 1) < 3)
    a, b = np.full((4, 10), 3.0), np.full((4, 10), 2.0)
    g, req = np.zeros((4, 10, 6), bool), np.zeros((4, 6), bool)
    t1, _ = kabb.kabb_select(a, b, g, np.zeros((4, 10)), req, np.full(4, 2.0), 2, numpy_rng(5, "sel"))
    t2, _ = kabb.kabb_select(a, b, g, np.zeros((4, 10)), req, np.full(4, 2.0), 2, numpy_rng(5, "sel"))
    np.testing.assert_array_equal(t1, t2)
    assert (t1.sum(1) == 2).all()
    with pytest.raises(ValueError, match="number of experts"):
        kabb.top_k(scores, 11)


def test_stationary_bandit_learns_the_best_arm():
    means = np.array([0.2, 0.35, 0.5, 0.8, 0.3])
    rng = numpy_rng(0, "bandit")
    seeds, t_max = 20, 2000
    a, b = np.ones((seeds, 5)), np.ones((seeds, 5))
    regret, best_late = np.zeros((seeds, t_max)), []
    for t in range(t_max):
        arm = kabb.top_k(rng.beta(a, b), 1)
        r = (rng.random(seeds) < (arm * means).sum(1)).astype(float)
        a, b = kabb.update(a, b, arm, r)
        regret[:, t] = means.max() - (arm * means).sum(1)
        if t >= t_max - 500:
            best_late.append(arm[:, 3].mean())
    per_round = np.cumsum(regret.mean(0)) / np.arange(1, t_max + 1)
    assert per_round[1999] < per_round[499] < per_round[99]
    assert np.mean(best_late) > 0.8


def test_simulation_runs_is_deterministic_and_oracle_has_zero_regret():
    cfg = kabb.config("smoke", seeds=[0, 1], n_rounds=60)
    env = kabb.make_environment(cfg.seeds, cfg.n_rounds)
    r1, r2 = kabb.simulate(env, "kabb", cfg), kabb.simulate(env, "kabb", cfg)
    np.testing.assert_array_equal(r1["expected"], r2["expected"])
    assert (r1["calls"] == 2).all()
    oracle = kabb.simulate(env, "oracle", cfg)
    np.testing.assert_allclose(kabb.cumulative_regret(oracle), 0.0, atol=1e-12)
    assert (kabb.cumulative_regret(r1)[:, -1] >= 0).all()
    assert (kabb.simulate(env, "call-all", cfg)["calls"] == 10).all()
    with pytest.raises(ValueError, match="valid policies"):
        kabb.simulate(env, "mixture", cfg)
    with pytest.raises(ValueError, match="number of experts"):
        kabb.simulate(env, "kabb", kabb.config("smoke", seeds=[0, 1], n_rounds=60, k=11))


def test_success_probability_by_hand_and_drift():
    cap = np.array([[[0.9, 0.0], [0.0, 0.5]]])
    team = np.array([[True, True]])
    req = np.array([[True, True]])
    cov, comp = (0.9 + 0.5) / 2, (0.9 + 0.5) / 2
    np.testing.assert_allclose(kabb.success_probability(cap, team, req, np.array([2.0])),
                               1 / (1 + np.exp(-(4 * cov + 2 * comp - 1.0))))
    env = kabb.make_environment([0, 1], 10, drift_pairs=2)
    strength = env.capability.max(2) + env.capability.mean(2)
    for s in range(2):
        assert strength[s, env.best[s, 0]] == strength[s].max() and strength[s, env.weakest[s, 0]] == strength[s].min()
        after = env.capability_at(5)[s]
        np.testing.assert_array_equal(after[env.best[s]], env.capability[s, env.weakest[s]])  # the best degrade
        np.testing.assert_array_equal(after[env.weakest[s]], env.capability[s, env.best[s]])  # the weak improve
        others = np.setdiff1d(np.arange(10), np.concatenate([env.best[s], env.weakest[s]]))
        np.testing.assert_array_equal(after[others], env.capability[s, others])
    np.testing.assert_array_equal(env.capability_at(4), env.capability)
    # the swap keeps every skill in the pool: the per-task best team is as good after the drift as before
    teams_before = kabb.team_table(env.capability, env.required, env.difficulty, 2)[1].max(1)
    teams_after = kabb.team_table(env.capability_at(5), env.required, env.difficulty, 2)[1].max(1)
    np.testing.assert_allclose(teams_before, teams_after)
    with pytest.raises(ValueError, match="drift_pairs"):
        kabb.make_environment([0], 10, drift_pairs=6)


def test_off_topic_members_dilute_a_team_and_the_graph_follows_the_drift():
    cap = np.array([[[0.9, 0.0], [0.1, 0.2], [0.0, 0.4]]])  # only expert 0 knows concept 0
    req = np.array([[True, False]])
    d = np.array([1.0])
    pair, all_three = np.array([[True, True, False]]), np.array([[True, True, True]])
    cov, comp = 0.9, 1 - 0.1 * 0.9
    for lam in (0.0, 2.0):  # one of the pair's two members is off-topic, two of the three
        np.testing.assert_allclose(kabb.success_probability(cap, pair, req, d, lam),
                                   1 / (1 + np.exp(-(4 * cov + 2 * comp - lam / 2 - 0.5))))
    comp3 = 1 - 0.1 * 0.9 * 1.0
    np.testing.assert_allclose(kabb.success_probability(cap, all_three, req, d, 2.0),
                               1 / (1 + np.exp(-(4 * cov + 2 * comp3 - 2.0 * 2 / 3 - 0.5))))
    # without dilution more members never hurt; with it the expert who knows the task alone beats everyone
    alone = np.array([[True, False, False]])
    assert kabb.success_probability(cap, all_three, req, d) >= kabb.success_probability(cap, alone, req, d)
    assert kabb.success_probability(cap, alone, req, d, 2.0) > kabb.success_probability(cap, all_three, req, d, 2.0)
    env = kabb.make_environment([0, 1], 10, drift_pairs=2)
    np.testing.assert_array_equal(env.knowledge_graph(4, updated=True), env.graph)
    np.testing.assert_array_equal(env.knowledge_graph(5, updated=False), env.graph)
    np.testing.assert_array_equal(env.knowledge_graph(5, updated=True), env.capability_at(5) >= kabb.OFF_TOPIC)
    assert not np.array_equal(env.knowledge_graph(5, updated=True), env.graph)


def test_oracle_bounds_and_team_synergy():
    cfg = kabb.config("smoke", seeds=[0, 1], n_rounds=60)
    env = kabb.make_environment(cfg.seeds, cfg.n_rounds)
    oracle_team, oracle_p, fixed = kabb.oracle_table(env, 2)
    assert oracle_team.shape == (2, 60, 10) and (oracle_team.sum(-1) == 2).all() and (fixed.sum(-1) == 2).all()
    fixed_run = kabb.simulate(env, "best fixed team", cfg)
    assert (fixed_run["expected"] <= oracle_p + 1e-12).all()  # the per-task best team bounds every fixed team
    # Synergy: two experts covering the task's two concepts between them have synergy 1, two covering one 0.5
    graph = np.array([[[1, 0, 0], [0, 1, 0], [1, 0, 0]]], bool)
    teams3 = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1]], bool)
    np.testing.assert_allclose(kabb.team_synergy(graph, teams3, np.array([[1, 1, 0]], bool)), [[1.0, 0.5, 1.0]])
    for policy in ("kabb (team synergy)", "contextual thompson"):
        run = kabb.simulate(env, policy, cfg)
        assert (run["calls"] == 2).all() and (run["expected"] <= oracle_p + 1e-12).all()


def test_contextual_thompson_learns_who_is_good_at_what():
    """With one expert per task, a sampler with one posterior per (expert, concept) learns to send each task to
    an expert strong in its concepts, and so beats per-expert Thompson sampling once it has learned."""
    cfg = kabb.config("smoke", seeds=[0], n_rounds=400, k=1)
    env = kabb.make_environment([0], 400)
    run = kabb.simulate(env, "contextual thompson", cfg)
    ts = kabb.simulate(env, "thompson", cfg)
    assert run["expected"][:, 200:].mean() > ts["expected"][:, 200:].mean()


def test_claim_measurements_are_per_seed():
    cfg = kabb.config("smoke", seeds=[0, 1, 2], n_rounds=80, recovery_window=10)
    env, runs = kabb.run_all(cfg, policies=("kabb", "kabb (no decay)", "kabb (misleading graph)", "thompson",
                                            "random", "call-all", "oracle", "knowledge only"))
    m = kabb.claim_measurements(runs, cfg)
    for key in ("regret_ratio", "reward_ratio", "recovery_gain", "adaptation_gain"):
        assert np.shape(m[key]) == (3,)
    np.testing.assert_allclose(m["reward_ratio"], runs["kabb"]["expected"].mean(1)
                               / runs["call-all"]["expected"].mean(1))
    assert m["calls_share"] == pytest.approx(0.2)
    # the drift statistic by hand: rounds 30-39 before the drift (T/2 = 40), 40-49 after
    drop = lambda p: runs[p]["expected"][:, 30:40].mean(1) - runs[p]["expected"][:, 40:50].mean(1)
    np.testing.assert_allclose(m["adaptation_gain"], drop("kabb (no decay)") - drop("kabb"))
    np.testing.assert_allclose(m["drift_drop_no_decay"], drop("kabb (no decay)").mean())
    ratio = runs["knowledge only"]["expected"].mean(1) / runs["call-all"]["expected"].mean(1)
    half = stats.t.ppf(0.975, 2) * ratio.std(ddof=1) / np.sqrt(3)
    assert m["knowledge_only_ratio_low"] == pytest.approx(ratio.mean() - half)


def test_knowledge_only_picks_the_largest_overlaps_and_ignores_rewards():
    cfg = kabb.config("smoke", seeds=[0, 1], n_rounds=60)
    env = kabb.make_environment(cfg.seeds, cfg.n_rounds, drift_pairs=2)
    run = kabb.simulate(env, "knowledge only", cfg, with_oracle=False)
    flipped = kabb.simulate(dataclasses.replace(env, uniforms=1 - env.uniforms), "knowledge only", cfg,
                            with_oracle=False)
    np.testing.assert_array_equal(run["expected"], flipped["expected"])  # other reward coins, the same teams
    for t in (0, 59):  # before and after the drift (the graph is updated at it)
        rho = kabb.concept_overlap(env.knowledge_graph(t, updated=True), env.required[:, t])
        team = kabb.experiment._select("knowledge only", cfg, {"alpha": np.ones((2, 10)), "beta": np.ones((2, 10))}, env,
                            env.knowledge_graph(t, True), None, t, 2, numpy_rng(0, "t"), None, None)
        assert (np.where(team, rho, np.inf).min(1) >= np.where(team, -np.inf, rho).max(1)).all()


def test_a_world_without_drift_is_the_same_world_unchanged():
    drifting = kabb.make_environment([3, 4], 40, drift_pairs=5)
    still = kabb.make_environment([3, 4], 40, drift_pairs=0)
    for field in ("capability", "graph", "required", "difficulty", "uniforms"):
        np.testing.assert_array_equal(getattr(still, field), getattr(drifting, field))
    np.testing.assert_array_equal(still.capability_at(39), still.capability)
    assert not np.array_equal(drifting.capability_at(39), drifting.capability)
    cfg = kabb.config("smoke", seeds=[3, 4], n_rounds=40, recovery_window=5, gamma=0.95)
    runs = {p: kabb.simulate(still, p, cfg, with_oracle=False) for p in ("kabb", "kabb (no decay)")}
    np.testing.assert_allclose(kabb.drift_null(cfg)["adaptation_gain"], kabb.adaptation_gain(runs, 5))


def test_decay_calibration_cached_equals_direct_and_picks_the_best_window_reward():
    cfg = kabb.config("smoke", n_rounds=80, recovery_window=10)
    cached = kabb.calibrate_decay(cfg)
    calib = kabb.config_like(cfg, seeds=cfg.calibration_seeds)
    env = kabb.make_environment(calib.seeds, calib.n_rounds, calib.n_experts, calib.drift_pairs)
    runs = list(kabb.gamma_sweep(env, calib, cached["gammas"]).values())
    window = [float(r["expected"][:, 40:50].mean()) for r in runs]  # the 10 rounds after the drift at T/2 = 40
    np.testing.assert_allclose(cached["window_reward"], window)
    np.testing.assert_allclose(cached["reward"], [float(r["expected"].mean()) for r in runs])
    assert cached["gammas"] == sorted(cfg.gammas) and cached["gammas"][-1] == 1.0
    best = int(np.argmax(window))
    assert cached["gamma"] == cached["gammas"][best]
    if 0 < best < len(window) - 1:
        assert cached["bracket_margin"] == pytest.approx(window[best] - max(window[best - 1], window[best + 1]))
        assert cached["bracket_margin"] >= 0
    else:
        assert cached["bracket_margin"] == -1.0
    assert kabb.decay_gamma(cfg) == cached["gamma"] and kabb.decay_gamma(kabb.config_like(cfg, gamma=0.9)) == 0.9
    with pytest.raises(ValueError, match="gamma"):
        kabb.decay_gamma(kabb.config_like(cfg, gamma=1.5))


def test_decay_calibration_at_the_sweeps_edge_fails_its_bracket():
    cfg = kabb.config("smoke", n_rounds=80, recovery_window=10, gammas=[0.5, 0.6])  # whichever wins is an edge
    cached = kabb.calibrate_decay(cfg)
    assert cached["gamma"] in (0.5, 0.6) and cached["bracket_margin"] == -1.0
    assert not kabb.DRIFT.decide({**kabb.DRIFT.examples[0], "bracket_margin": -1.0})["preconditions"][-1]["holds"]


def test_claim_runs_cached_equal_the_direct_runs():
    cfg = kabb.config("smoke", seeds=[7, 8, 9], n_rounds=60, recovery_window=8, gamma=0.97)
    measured, null = kabb.claim_runs(cfg)
    env, runs = kabb.run_all(cfg, kabb.CLAIM_POLICIES)
    direct = kabb.claim_measurements(runs, cfg)
    assert set(measured) == set(direct) | {"bracket_margin"}
    for key, value in direct.items():
        np.testing.assert_allclose(measured[key], value)
    assert measured["bracket_margin"] == kabb.calibrate_decay(cfg)["bracket_margin"]
    np.testing.assert_allclose(null["adaptation_gain"], kabb.drift_null(cfg)["adaptation_gain"])


def test_embeddings_identical_texts_and_related_texts():
    texts = ["A question on algebra: solve an equation for x.", "An expert in algebra and polynomials.",
             "An expert in history and politics."]
    e = embed(texts + texts[:1])
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(e[0] @ e[3], 1.0, atol=1e-5)
    rho = kabb.semantic_overlap(texts[:1], texts[1:])
    assert rho[0, 0] > rho[0, 1] + 0.1


def test_semantic_overlap_and_distance_lie_in_range():
    env = kabb.make_environment([0, 1], 40)
    rho = kabb.semantic_overlap_table(env)
    assert rho.shape == (2, 40, 10) and ((rho >= 0) & (rho <= 1)).all()
    np.testing.assert_allclose(rho[0, 0], kabb.semantic_overlap([kabb.task_text(env.required[0, 0])],
                                                                [kabb.expert_profile(g) for g in env.graph[0]])[0])
    graph_rho = kabb.concept_overlap(env.graph[:, None], env.required)
    assert rho[graph_rho == 1].mean() > rho[graph_rho == 0].mean()
    d = env.difficulty[..., None]
    dist = kabb.knowledge_distance(rho, env.dependencies[:, None], 0.6, d, 10)
    w1, w2, w3 = kabb.WEIGHTS
    assert (dist >= 0).all() and (dist <= np.log1p(d) * (w1 + w2 * 2 / 10 + w3 * 0.4)).all()
    run = kabb.simulate(env, "kabb (semantic distance)", kabb.config("smoke", seeds=[0, 1], n_rounds=40))
    assert (run["calls"] == 2).all()


def test_sentence_encoder_loads_offline(tmp_path):
    code = ("from icml25.core.sentence import embed; e = embed(['a cat', 'a cat']); "
            "assert e.shape == (2, 384) and abs(e[0] @ e[1] - 1) < 1e-5")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
