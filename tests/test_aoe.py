"""Autonomy-of-Experts: routing identities, the vectorised layer against a naive loop, Eq. 5 and Eq. 6."""

import numpy as np
import pytest
import torch
from scipy import stats

from icml25 import aoe


def test_softmax_all_topk_renormalise_equals_softmax_of_subset():
    logits = torch.randn(50, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    routing, _ = aoe.top_k_softmax(logits, 3)
    direct = torch.softmax(logits.gather(1, routing.index), dim=-1)
    torch.testing.assert_close(routing.weight, direct)


def test_batched_w_down_equals_per_expert_projections():
    g = torch.Generator().manual_seed(1)
    n, d, d_low = 5, 12, 3
    w_down = torch.randn(d, n * d_low, generator=g)
    x = torch.randn(7, d, generator=g)
    C, norms = aoe.aoe_scores(x, w_down, n)
    for i in range(n):
        torch.testing.assert_close(C[:, i], x @ w_down[:, i * d_low:(i + 1) * d_low])
        torch.testing.assert_close(norms[:, i], (x @ w_down[:, i * d_low:(i + 1) * d_low]).norm(dim=-1))


def test_vectorised_aoe_equals_naive_loop_with_gradients():
    layer = aoe.AoEFFN(8, 4, 2, 12, 3, seed=3).double()
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)
    fast, slow = layer(x), aoe.aoe_reference(layer, x)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(fast)
    params = [x, layer.w_down, layer.w_up, layer.w_p, layer.w_o]
    for a, b in zip(torch.autograd.grad(fast, params, grad), torch.autograd.grad(slow, params, grad)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("d,d_ffn,d_low", [(48, 64, 8), (48, 64, 16), (768, 3072, 256), (1280, 5120, 400)])
def test_eq5_matches_parameters_within_one_column(d, d_ffn, d_low):
    d_wide = aoe.d_wide_eq5(d, d_ffn, d_low)
    gap = aoe.swiglu_expert_params(d, d_ffn) - aoe.aoe_expert_params(d, d_low, d_wide)
    assert -(d_low + 2 * d) < gap <= 0  # rounded up: at most one column of d_wide more than the MoE expert
    layer = aoe.AoEFFN(d, 2, 1, d_ffn, d_low) if d < 100 else None
    if layer is not None:
        assert sum(p.numel() for p in layer.parameters()) == 2 * aoe.aoe_expert_params(d, d_low, d_wide)


def test_paper_4b_width():
    assert aoe.d_wide_eq5(1280, 5120, 400) == 6470  # the paper's 4B configuration


def test_uniform_routing_gives_alpha_times_k():
    n, k, T, alpha = 8, 2, 16, 0.01
    probs = torch.full((T, n), 1.0 / n)
    index = torch.stack([torch.arange(T) % n, (torch.arange(T) + 1) % n], 1)  # every expert k*T/n times
    assert float(aoe.load_balancing_loss(probs, index, alpha)) == pytest.approx(alpha * k)


def test_scaling_an_experts_w_down_never_lowers_its_selection_count():
    layer = aoe.AoEFFN(16, 6, 2, 24, 4, seed=5)
    x = torch.randn(200, 16, generator=torch.Generator().manual_seed(4))
    counts = []
    for c in (1.0, 1.5, 3.0):
        with torch.no_grad():
            w = layer.w_down.clone()
            w[:, 8:12] *= c  # expert 2
            C, norms = aoe.aoe_scores(x, w, 6)
            routing, _ = aoe.top_k_softmax(norms, 2)
        counts.append(int((routing.index == 2).sum()))
    assert counts == sorted(counts) and counts[-1] > counts[0]


def test_entropies_of_extreme_cases():
    n = 4
    assert aoe.confidence_entropy(torch.full((3, n), 1 / n)) == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert aoe.confidence_entropy(torch.eye(n)) == pytest.approx(0.0)
    assert aoe.load_entropy(torch.zeros(10, 1, dtype=torch.long), n) == pytest.approx(0.0)
    assert aoe.load_entropy(torch.arange(8).view(4, 2) % n, n) == pytest.approx(torch.log(torch.tensor(4.0)).item())


def test_models_train_and_report_routing():
    cfg = aoe.config("smoke", steps=2, d_model=16, d_ffn=16, d_lows=[4], claim_d_low=4, n_train=64, n_val=64,
                     seq_len=8, eval_every=1)
    runs = aoe.pretraining_experiment(cfg)
    assert [r["label"] for r in runs] == [v[0] for v in aoe.variants(cfg)]
    for r in runs:
        assert len(r["conf_entropy"]) == cfg.n_layers and r["val_loss"] > r["floor"] - 1e-6
        assert r["floor"] < r["bigram"]  # the tag is worth something
        spec = np.asarray(r["specialisation"][0])
        assert spec.shape == (cfg.n_domains, cfg.n_experts)
        np.testing.assert_allclose(spec.sum(1), np.ones(cfg.n_domains), rtol=1e-6)


def test_markov_language_follows_its_domain():
    domains = aoe.markov_domains(3, 10, 0, 0.1)
    ids, domain = aoe.sample_sequences(domains, 300, 20, 0)
    assert torch.equal(ids[:, 0], 10 + 1 + domain)  # the tag
    assert int(ids[:, 1:].min()) >= 1 and int(ids[:, 1:].max()) <= 10
    # transitions never taken under a sequence's own domain have probability ~0 there
    logp = torch.log(torch.as_tensor(domains)[domain[:, None], ids[:, 1:-1] - 1, ids[:, 2:] - 1])
    assert torch.isfinite(logp).all()


def test_domain_known_loss_is_the_mean_nll_of_the_true_source():
    domains = aoe.markov_domains(2, 5, 1, 0.5)
    ids, domain = aoe.sample_sequences(domains, 4, 6, 1)
    nll = []
    for row, d in zip(ids.tolist(), domain.tolist()):
        nll.append(torch.log(torch.tensor(5.0)).item())  # the first content token is uniform
        nll += [-float(torch.log(torch.tensor(domains[d, a - 1, b - 1]))) for a, b in zip(row[1:-1], row[2:])]
    assert aoe.domain_known_loss(domains, ids, domain) == pytest.approx(sum(nll) / len(nll))


def test_bigram_loss_of_a_deterministic_chain_and_gap_closed():
    ids = torch.tensor([[1, 2, 3, 1, 2, 3]] * 4)  # 1 -> 2 -> 3 -> 1: a bigram predicts it almost surely
    assert aoe.bigram_loss(ids, ids, 4, smoothing=1e-9) == pytest.approx(0.0, abs=1e-6)
    # with add-1 smoothing over 4 ids each row has 4 + 4·(its count) mass; the seen successor gets 1 + count
    counts = {1: 8, 2: 8, 3: 4}  # transitions out of 1, 2, 3 in the 4 rows
    expected = sum(-torch.log(torch.tensor((1 + c) / (4 + c))).item() * c for c in counts.values()) / 20
    assert aoe.bigram_loss(ids, ids, 4, smoothing=1.0) == pytest.approx(expected)
    assert aoe.gap_closed(2.0, 3.0, 1.0) == pytest.approx(0.5)
    assert aoe.gap_closed(3.0, 3.0, 1.0) == 0 and aoe.gap_closed(1.0, 3.0, 1.0) == 1


def test_throughput_pairs_rounds_and_paired_differences():
    cfg = aoe.config("smoke", bench_repeats=3)
    tps, foreign = aoe.throughput(cfg, 0)
    assert 0 <= foreign <= 1  # the share of the machine's CPU time other processes took meanwhile
    assert list(tps) == ["MoE", f"AoE d_low={cfg.bench_shape[2]}"]
    assert all(len(v) == 3 and min(v) > 0 for v in tps.values())
    assert aoe.paired([2.0, 1.0], [1.5, 1.5]) == [0.5, -0.5]
    blocks, foreign = aoe.throughput_blocks(cfg, [0, 1])
    assert 0 <= foreign <= 1 and len(blocks) == 2 and all(len(b["MoE"]) == 3 for b in blocks)
    with pytest.raises(ValueError, match="differ in length"):
        aoe.paired([1.0], [])


def test_throughput_is_decided_over_blocks():
    # a block's ratio: the mean of its rounds' paired ratios (0.9 and 0.85), not the ratio of mean tokens/s
    assert aoe.block_ratio({"MoE": [100.0, 200.0], "AoE": [90.0, 170.0]}) == pytest.approx(0.875)
    assert aoe.time_cv([1.0, 0.5]) == pytest.approx(1 / 3)  # times 1 and 2 s per token: sd 0.5 over mean 1.5
    # the interval is a t interval over the blocks (four here, n - 1 = 3 degrees of freedom), not over rounds, with
    # the calibration runs' between-run sd added to the blocks' standard error
    ratios = [0.80, 0.84, 0.82, 0.86]
    effect = aoe.THROUGHPUT.effects[0].decide("throughput", {"block_ratio": ratios}, unit_floor=False)
    half = stats.t.ppf(0.975, 3) * np.hypot(np.std(ratios, ddof=1) / 2, aoe.THROUGHPUT_RUN_SD)
    assert (effect["estimate"], effect["ci_low"], effect["ci_high"]) == pytest.approx((0.83, 0.83 - half, 0.83 + half))
    assert effect["n"] == 4 and effect["verdict"] == "inconclusive"  # its interval, about [0.78, 0.88], holds the bar 0.85
    below = aoe.THROUGHPUT.effects[0].decide("throughput", {"block_ratio": [0.80, 0.81, 0.82, 0.81]}, unit_floor=False)
    assert below["verdict"] == "refuted"


def test_bad_input_raises():
    with pytest.raises(ValueError, match="top_k=9"):
        aoe.top_k_softmax(torch.randn(3, 8), 9)
    with pytest.raises(ValueError, match="top_k=5"):
        aoe.AoEFFN(16, 4, 5, 24, 4)
    with pytest.raises(ValueError, match="top_k=5"):
        aoe.MoEFFN(16, 4, 5, 24)
    with pytest.raises(ValueError, match="d_low=16"):
        aoe.AoEFFN(16, 4, 2, 24, 16)
    with pytest.raises(ValueError, match="kind"):
        aoe.build_model("dense", aoe.config("smoke"), 0)


def test_mlp_router_has_w_down_parameters_and_leaves_the_experts_as_the_moe():
    d, n, d_low = 16, 4, 3
    plain = aoe.MoEFFN(d, n, 2, 24, seed=7)
    big = aoe.MoEFFN(d, n, 2, 24, seed=7, router_hidden=n * d_low)
    aoe_layer = aoe.AoEFFN(d, n, 2, 24, d_low, seed=7)
    assert big.router_in.numel() == aoe_layer.w_down.numel() == d * n * d_low
    assert big.router.shape == (n * d_low, n)
    for name in ("w_gate", "w_up", "w_out"):  # same experts as the linear-router MoE of the seed
        assert torch.equal(getattr(big, name), getattr(plain, name))
    x = torch.randn(5, d, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(big.router_logits(x), torch.nn.functional.silu(x @ big.router_in) @ big.router)
    torch.testing.assert_close(plain.router_logits(x), x @ plain.router)
    model = aoe.build_model("moe_mlp_router", aoe.config("smoke"), 0, d_low=4)
    assert all(layer.router_in is not None for layer in aoe.expert_layers(model))
    assert [v[1] for v in aoe.variants(aoe.config("smoke"))][-1] == "moe_mlp_router"
    with pytest.raises(ValueError, match="router_hidden"):
        aoe.MoEFFN(d, n, 2, 24, router_hidden=-1)


def test_learning_rates_are_chosen_per_model_and_the_grid_edge_is_reported():
    cfg = aoe.config("smoke")
    tuning = [{"label": "MoE", "lr": lr, "val_loss": loss} for lr, loss in ((1, 3.0), (2, 1.0), (4, 2.0))]
    tuning += [{"label": f"AoE d_low={cfg.claim_d_low}", "lr": lr, "val_loss": loss}
               for lr, loss in ((1, 0.5), (2, 1.0), (4, 2.0))]
    chosen = aoe.chosen_learning_rates(tuning, cfg)
    assert chosen == {"MoE": 2, f"AoE d_low={cfg.claim_d_low}": 1, aoe.MLP_ROUTER: 2}
    assert aoe.lrs_at_grid_edge(tuning) == [f"AoE d_low={cfg.claim_d_low}"]


def test_depth_slope_is_the_least_squares_slope_over_layers():
    assert aoe.depth_slope([[0.3, 0.2, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0]]) == pytest.approx([-0.1, 0.0])
    assert aoe.depth_slope([[1.0, 0.0, 1.0, 0.0]])[0] == pytest.approx(-1.0 / 5)  # covariance -1, variance 5


def test_throughput_run_sd_is_the_random_effects_component_of_runs_of_blocks():
    """Two runs of two blocks: run means 1 and 2 (MS_between = 2 * var([1, 2]) = 1), blocks 0.5 about their mean
    (MS_within = 4 * 0.25 / 2 = 0.5): sqrt((1 - 0.5) / 2) = 0.5. Runs that differ less than their blocks give 0."""
    assert aoe.throughput_run_sd([[0.5, 1.5], [1.5, 2.5]]) == pytest.approx(0.5)
    assert aoe.throughput_run_sd([[0.0, 2.0], [0.1, 2.1]]) == 0.0
    assert aoe.THROUGHPUT.effects[0].run_sd == round(aoe.throughput_run_sd(aoe.THROUGHPUT_CALIBRATION_RUNS), 4) > 0
