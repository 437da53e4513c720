import numpy as np
import pytest
import torch

from icml25 import ibcircuit as ib


@pytest.fixture(scope="module")
def setup():
    cfg = ib.config("smoke")
    task = ib.IOITask()
    model = ib.train_model(task, cfg, 0)
    prompts = task.sample(16, torch.Generator().manual_seed(1))
    return cfg, task, model, prompts, ib.head_stats(model, prompts)


def test_compression_is_the_exact_gaussian_kl():
    g = torch.Generator().manual_seed(0)
    h, mu = torch.randn(50, generator=g), torch.randn(50, generator=g)
    sigma = torch.rand(50, generator=g) + 0.5
    assert torch.allclose(ib.compression_kl(torch.tensor(0.0), h, mu, sigma), torch.zeros(50), atol=1e-7)
    values = []
    for lam in (0.1, 0.5, 0.9, 0.99):
        lam_t = torch.tensor(lam)
        ours = ib.compression_kl(lam_t, h, mu, sigma)
        ref = torch.distributions.kl_divergence(
            torch.distributions.Normal(lam_t * h + (1 - lam_t) * mu, (1 - lam_t) * sigma),
            torch.distributions.Normal(mu, sigma))
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
        values.append(float(ours.mean()))
    assert values == sorted(values)


def test_noise_at_lambda_zero_has_the_batch_statistics():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(4000, 1, 2, 3, generator=g) * 5 + 7
    mu, sigma = torch.tensor(1.5), torch.tensor(2.0)
    z = ib.noisy_heads(torch.zeros(2), h, mu, sigma, g)
    se = 2.0 / np.sqrt(z.numel())
    assert abs(float(z.mean()) - 1.5) < 4 * se
    assert float(z.std()) == pytest.approx(2.0, rel=0.05)
    torch.testing.assert_close(ib.noisy_heads(torch.ones(2), h, mu, sigma, g), h)


def test_lambda_one_reproduces_the_model_and_only_masks_learn(setup):
    cfg, task, model, prompts, stats = setup
    before = [p.clone() for p in model.parameters()]
    res = ib.ib_circuit(model, prompts, beta=0.0, steps=3, lr=0.0, seed=0, init=30.0)
    assert res.losses[0] < 1e-6  # λ = 1: the IB model is the base model, faithfulness KL 0
    res = ib.ib_circuit(model, prompts, beta=1.0, steps=5, lr=0.1, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(not p.requires_grad for p in model.parameters())
    assert res.lam.shape == (12,) and np.all(res.lam < 1 / (1 + np.exp(-5.0)))  # the masks moved


def test_keep_all_is_full_and_ablate_all_is_mean_ablation(setup):
    cfg, task, model, prompts, stats = setup
    masks = ib.masks_from_subsets(model, [list(range(12)), []])
    logits = ib.ablated_logits(model, prompts, masks, stats)
    torch.testing.assert_close(logits[0], model(prompts.ids))
    manual = model(prompts.ids, lambda layer, h: stats[layer][0].expand_as(h))
    torch.testing.assert_close(logits[1], manual)


def test_exhaustive_matches_direct_scoring_and_bounds_every_top_k(setup):
    cfg, task, model, prompts, stats = setup
    truth = ib.exhaustive(model, prompts, stats)
    assert truth.masks.shape == (4096, 12) and len(set(map(tuple, truth.masks.tolist()))) == 4096
    idx = torch.arange(0, 4096, 97)
    direct = ib.score_subsets(model, prompts, truth.masks[idx], stats)
    np.testing.assert_allclose(direct.kl, truth.kl[idx.numpy()], atol=1e-5)
    np.testing.assert_allclose(direct.recovery, truth.recovery[idx.numpy()], atol=1e-4)
    opt = ib.optimum_by_size(truth)
    assert opt[-1] == pytest.approx(0.0, abs=1e-6)
    for scores in (ib.attribution_patching(model, prompts), ib.random_ranking(12, 0)):
        curve = ib.score_subsets(model, prompts, ib.top_k_masks(scores), stats).kl
        assert np.all(opt <= curve + 1e-6)


def test_roc_auc_and_sizes():
    members = np.array([1, 1, 0, 0, 0], bool)
    assert ib.roc_auc(np.array([5, 4, 3, 2, 1.0]), members) == 1.0
    assert ib.roc_auc(np.array([1, 2, 3, 4, 5.0]), members) == 0.0
    assert ib.roc_auc(np.ones(5), members) == 0.5
    assert ib.circuit_size_at(np.array([0, 0.5, 0.95, 1.0]), 0.9) == 2
    assert ib.top_k_masks(np.array([0.1, 0.9, 0.5])).tolist() == [[0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 1, 1]]


def test_tasks_are_well_formed():
    g = torch.Generator().manual_seed(0)
    p = ib.IOITask().sample(50, g)
    assert p.ids.shape == (50, 8) and torch.all(p.good.sum(1) == 1) and torch.all(p.bad.sum(1) == 1)
    assert torch.all(p.ids[torch.arange(50), 5] == p.bad.float().argmax(1))  # S is the repeated name
    q = ib.GreaterThanTask().sample(50, g)
    yy = q.ids[:, 3] - 3
    assert torch.all(q.answer - 3 > yy) and torch.all(q.good[torch.arange(50), q.answer])


def test_bad_input_raises(setup):
    cfg, task, model, prompts, stats = setup
    with pytest.raises(ValueError, match="out of range"):
        ib.masks_from_subsets(model, [[0, 12]])
    with pytest.raises(ValueError, match="at least one prompt"):
        task.sample(0, torch.Generator())
    empty = ib.Prompts(prompts.ids[:0], prompts.corrupt[:0], prompts.answer[:0], prompts.good[:0], prompts.bad[:0])
    with pytest.raises(ValueError, match="at least 2 prompts"):
        ib.head_stats(model, empty)
    with pytest.raises(ValueError, match="empty prompt set"):
        ib.ablated_logits(model, empty, torch.ones(1, 12), stats)
    with pytest.raises(ValueError, match="unknown task"):
        ib.run_seed("sva", cfg, 0)


def test_claim_measurements_are_paired_by_seed_and_signed_so_that_ibcircuit_winning_is_positive():
    from types import SimpleNamespace

    n = 4
    opt = np.array([2.0, 1.0, 0.5, 0.2, 0.0])
    worse = opt + np.array([0, 0.4, 0.4, 0.4, 0])  # regret 0.4 at every size but 0 and n
    kl = {"IBCircuit": opt, "attribution patching": worse, "activation patching": worse,
          "greedy pruning": opt + np.array([0, 0.2, 0.2, 0, 0]), "random": opt + 1.0}
    results = [SimpleNamespace(kl=kl, optimum_kl=opt, task_accuracy=1.0) for _ in range(2)]
    summary = {m: {"area": np.array([ib.area(kl[m])] * 2), "size90": np.array([3, 3]),
                   "regret": np.array([kl[m] - opt] * 2)} for m in ib.METHODS}
    m = ib.claim_measurements(results, summary)
    assert np.allclose(m["greedy_minus_ib_area"], 0.4 / 5) and np.allclose(m["eap_minus_ib_area"], 1.2 / 5)
    # the best baseline (greedy) has mean regret 0.08; random's is 1.0: IBCircuit (0) is 0.08 of it better
    assert np.allclose(m["best_baseline_minus_ib_regret_share"], 0.08)
    # small half = sizes 1..2, where greedy's regret is 0.2; large half = sizes 3..4, where both are optimal
    assert np.allclose(m["ib_minus_greedy_small_regret"], -0.2)
    assert np.allclose(m["ib_minus_greedy_large_regret_share"], 0.0)
    assert np.allclose(m["random_minus_best_baseline_area"], 1.0 - 0.4 / 5)
