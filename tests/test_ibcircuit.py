import numpy as np
import pytest
import torch

from icml25 import ibcircuit as ib


@pytest.fixture(scope="module")
def setup():
    cfg = ib.config("smoke")
    task = ib.IOITask()
    model, = ib.train_models(task, cfg, [0])
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


def test_noise_at_lambda_zero_is_the_batch_statistics_with_one_draw_shared_by_the_prompts():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(8, 500, 2, 3, generator=g) * 5 + 7
    mu, sigma, eps = torch.full((500, 2, 3), 1.5), torch.full((500, 2, 3), 2.0), torch.randn(500, 2, 3, generator=g)
    z = ib.noisy_heads(torch.zeros(2), h, mu, sigma, eps)
    assert torch.equal(z, (1.5 + 2.0 * eps).expand_as(z))  # every prompt gets the same draw
    assert abs(float(z[0].mean()) - 1.5) < 4 * 2.0 / np.sqrt(eps.numel())
    assert float(z[0].std()) == pytest.approx(2.0, rel=0.05)
    torch.testing.assert_close(ib.noisy_heads(torch.ones(2), h, mu, sigma, eps), h)
    per_prompt = torch.tensor([0.0, 1.0]).repeat(4).view(8, 1, 1, 1).expand(8, 1, 2, 1)
    z = ib.noisy_heads(per_prompt, h, mu, sigma, eps)
    assert torch.equal(z[1::2], h[1::2]) and torch.equal(z[0], 1.5 + 2.0 * eps)


def test_batched_ib_equals_each_model_alone(setup):
    """The vmapped run over several models gives each model's own masks (float rounding aside)."""
    cfg, task, model, prompts, stats = setup
    other = ib.train_models(task, cfg, [1])[0]
    prompts_b = task.sample(len(prompts), torch.Generator().manual_seed(5))
    together = ib.ib_circuits([model, other], [prompts, prompts_b], beta=1.0, steps=6, lr=0.1, seeds=[0, 3])
    for res, (m, p, s) in zip(together, [(model, prompts, 0), (other, prompts_b, 3)]):
        alone = ib.ib_circuit(m, p, beta=1.0, steps=6, lr=0.1, seed=s)
        np.testing.assert_allclose(res.lam, alone.lam, atol=1e-5)
        np.testing.assert_allclose(res.losses, alone.losses, rtol=1e-4)


def test_ib_masks_are_one_per_prompt_and_beta_drives_compression(setup):
    """β = 0 keeps every head (only faithfulness acts, and it is best with no noise); a large β closes them."""
    cfg, task, model, prompts, stats = setup
    keep = ib.ib_circuit(model, prompts, beta=0.0, steps=30, lr=0.1, seed=0)
    drop = ib.ib_circuit(model, prompts, beta=100.0, steps=30, lr=0.1, seed=0)
    assert keep.lam.min() > drop.lam.max()


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
        ib.run_seeds("sva", cfg, [0])


def test_claim_measurements_are_paired_by_seed_and_signed_so_that_ibcircuit_winning_is_positive():
    from types import SimpleNamespace

    n = 4
    opt = np.array([2.0, 1.0, 0.5, 0.2, 0.0])
    worse = opt + np.array([0, 0.4, 0.4, 0.4, 0])  # regret 0.4 at every size but 0 and n
    kl = {"IBCircuit": opt, "attribution patching": worse, "activation patching": worse,
          "ACDC": opt + np.array([0, 0.2, 0.2, 0, 0]), "greedy pruning": opt + np.array([0, 0.1, 0, 0, 0]),
          "random": opt + 1.0}
    expected_random = opt + 0.5  # the mean over all k-subsets; the one permutation above drew a worse ranking
    results = [SimpleNamespace(kl=kl, optimum_kl=opt, random_kl=expected_random, task_accuracy=1.0)
               for _ in range(2)]
    summary = {m: {"area": np.array([ib.area(kl[m])] * 2), "size90": np.array([3, 3]),
                   "regret": np.array([kl[m] - opt] * 2)} for m in ib.METHODS}
    m = ib.claim_measurements(results, summary)
    assert np.allclose(m["acdc_minus_ib_area"], 0.4 / 5) and np.allclose(m["eap_minus_ib_area"], 1.2 / 5)
    assert np.allclose(m["greedy_minus_ib_area"], 0.1 / 5)
    # near_optimal counts greedy pruning: its mean regret 0.02 is the best (ACDC's is 0.08); random's is 1.0, so
    # IBCircuit (0) is 0.02 of it better; the informativeness precondition still compares the baselines alone
    assert np.allclose(m["best_baseline_minus_ib_regret_share"], 0.02)
    # small half = sizes 1..2, where ACDC's regret is 0.2; large half = sizes 3..4, where both are optimal
    assert np.allclose(m["ib_minus_acdc_small_regret"], -0.2)
    assert np.allclose(m["ib_minus_acdc_large_regret_share"], 0.0)
    # the preconditions compare with the expected random area, not the one permutation's
    assert np.allclose(m["expected_random_minus_best_baseline_area"], 0.5 - 0.4 / 5)
    assert np.allclose(m["expected_random_minus_acdc_area"], 0.5 - 0.4 / 5)


def test_a_random_ranking_s_expected_kl_is_the_mean_over_all_subsets_of_each_size():
    import itertools

    masks = torch.tensor(list(itertools.product([0.0, 1.0], repeat=3)))  # 8 subsets of 3 heads
    kl = np.array([float(10 * m[0] + 3 * m[1] + m[2]) for m in masks])  # head 0 matters most
    scores = ib.SubsetScores(masks, kl, np.zeros(len(masks)))
    assert np.allclose(ib.expected_random_kl(scores), [0.0, 14 / 3, 28 / 3, 14.0])
    assert np.allclose(ib.optimum_by_size(scores), [0.0, 1.0, 4.0, 14.0])
    # over many random permutations the mean top-k KL converges to it
    draws = [ib.random_ranking(3, s) for s in range(3000)]
    top_k = [[kl[int(sum(2 ** (2 - h) for h in np.argsort(-r)[:k]))] for k in range(4)] for r in draws]
    assert np.allclose(np.mean(top_k, 0), ib.expected_random_kl(scores), atol=0.3)


def _plain_forward(model, ids, head_fn=None):
    """The tiny transformer written out in full: every layer at every position, the logits read at the last."""
    x = model.embed(ids) + model.pos[: ids.shape[1]]
    for layer in range(model.n_layers):
        h = model.heads(layer, x)
        x = model.finish(layer, x, h if head_fn is None else head_fn(layer, h))
    return model.unembed(model.ln_f(x[:, -1]))


def test_forward_equals_the_plain_full_forward_and_hooks_see_every_position(setup):
    cfg, task, model, prompts, stats = setup
    seen = []
    torch.testing.assert_close(model(prompts.ids, lambda layer, h: seen.append(h.shape) or h * 0.5),
                               _plain_forward(model, prompts.ids, lambda layer, h: h * 0.5), atol=1e-6, rtol=1e-6)
    assert seen == [(16, task.seq_len, 6, cfg.d_model // 6)] * 2


def test_seeds_trained_together_equal_each_seed_trained_alone():
    cfg = ib.config("smoke", train_steps=4)
    task = ib.IOITask()
    together = ib.train_models(task, cfg, [0, 3])
    for seed, model in zip([0, 3], together):
        with ib.seeded(seed, "ibcircuit-init", task.name):
            alone = ib.TinyTransformer(task.vocab, task.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers)
        opt = torch.optim.AdamW(alone.parameters(), lr=cfg.lr, weight_decay=0.01)
        g = ib.torch_generator(seed, "ibcircuit-train", task.name)
        for _ in range(cfg.train_steps):
            batch = task.sample(cfg.batch_size, g)
            loss = torch.nn.functional.cross_entropy(_plain_forward(alone, batch.ids), batch.answer)
            opt.zero_grad()
            loss.backward()
            opt.step()
        # the keys' bias has a zero gradient in exact arithmetic (softmax ignores it) and Adam scales its rounding
        # noise up to full steps, so the models are compared by what they compute, and every other weight
        d = cfg.d_model
        for (name, a), b in zip(alone.state_dict().items(), model.state_dict().values()):
            if name.endswith("qkv.0.bias") or name.endswith("qkv.1.bias"):
                a, b = torch.cat([a[:d], a[2 * d:]]), torch.cat([b[:d], b[2 * d:]])
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4, msg=name)
        probe = task.sample(64, torch.Generator().manual_seed(9)).ids
        with torch.no_grad():
            torch.testing.assert_close(model(probe), _plain_forward(alone, probe), atol=1e-5, rtol=1e-4)
    assert not any(p.requires_grad for p in together[0].parameters())
    assert not torch.equal(together[0].embed.weight, together[1].embed.weight)


def test_edge_graph_of_two_layers():
    model = ib.TinyTransformer(10, 5, d_model=12, n_heads=6, n_layers=2)
    g = ib.Graph.of(model)
    assert g.nodes[0] == "emb" and g.nodes[-1] == "logits" and len(g.nodes) == 16
    # into a0.h: emb; m0: emb + 6 heads; a1.h: emb, a0.*, m0; m1: + a1.*; logits: every writer
    assert len(g.edges) == 6 * 1 + 7 + 6 * 8 + 14 + 15
    assert all(s < r for s, r in g.edges)
    assert g.head_index(g.nodes.index("a1.2"), 6) == 8 and g.head_index(g.nodes.index("m0"), 6) is None


def test_edge_forward_is_the_model_and_cutting_a_heads_edges_is_mean_ablating_it(setup):
    cfg, task, model, prompts, stats = setup
    g = ib.Graph.of(model)
    E = len(g.edges)
    clean = ib.edge_outputs(model, g, prompts.ids, torch.ones(1, E))
    torch.testing.assert_close(clean[-1][0], model(prompts.ids), atol=1e-5, rtol=1e-5)
    mean = [o.mean(1, keepdim=True) for o in clean]
    masks = torch.ones(2, E)
    for e, (s, _) in enumerate(g.edges):
        if g.head_index(s, model.n_heads) in (1, 9):
            masks[0, e] = 0.0
        if g.head_index(s, model.n_heads) == 4:
            masks[1, e] = 0.0
    logits = ib.edge_outputs(model, g, prompts.ids, masks, mean, clean)[-1]
    nodes = ib.ablated_logits(model, prompts, ib.masks_from_subsets(
        model, [[h for h in range(12) if h not in (1, 9)], [h for h in range(12) if h != 4]]), stats)
    torch.testing.assert_close(logits, nodes, atol=1e-5, rtol=1e-5)


def _acdc_reference(model, prompts, tau):
    """ACDC for one threshold, written plainly: every trial recomputes the whole graph."""
    g = ib.Graph.of(model)
    E = len(g.edges)
    clean = ib.edge_outputs(model, g, prompts.ids, torch.ones(1, E))
    patched = ib.edge_outputs(model, g, prompts.corrupt, torch.ones(1, E))
    full = model(prompts.ids)
    mask, current = torch.ones(1, E), 0.0
    for e in sorted(range(E), key=lambda e: (-g.edges[e][1], -g.edges[e][0])):
        trial = mask.clone()
        trial[0, e] = 0.0
        kl = float(ib.kl_from_full(full, ib.edge_outputs(model, g, prompts.ids, trial, patched)[-1])[0])
        if kl - current < tau:
            mask, current = trial, kl
    return mask[0]


def test_batched_acdc_equals_the_plain_algorithm_for_each_threshold(setup):
    cfg, task, model, prompts, stats = setup
    taus = [1e-3, 3e-2, 0.3]
    with torch.no_grad():
        masks = ib.acdc(model, prompts, taus)
        for k, tau in enumerate(taus):
            torch.testing.assert_close(masks[k], _acdc_reference(model, prompts, tau))
    everything = ib.acdc(model, prompts, [-1.0, 1e9])
    assert everything[0].all() and not everything[1].any()
    with pytest.raises(ValueError, match="valid: corrupt, mean"):
        ib.acdc(model, prompts, taus, ablation="zero")


def test_circuit_heads_follow_paths_to_the_logits():
    model = ib.TinyTransformer(10, 5, d_model=12, n_heads=6, n_layers=2)
    g = ib.Graph.of(model)
    masks = torch.zeros(1, len(g.edges))
    idx = {n: i for i, n in enumerate(g.nodes)}
    for s, r in (("a0.2", "a1.1"), ("a1.1", "logits"), ("a0.5", "m0")):  # a0.5 → m0 leads nowhere
        masks[0, g.edges.index((idx[s], idx[r]))] = 1.0
    assert np.flatnonzero(ib.circuit_heads(model, masks)[0].numpy()).tolist() == [2, 7]


@pytest.fixture(scope="module")
def head_models(family_checkpoints):
    from icml25.core import models, tinylm
    tok = tinylm.char_tokenizer("abcdefghijklmnopqrstuvwxyz")
    vocab = ib.IOITask().vocab
    return {f: ib.HeadModel(models.get(str(p), device="cpu").model, vocab) for f, p in family_checkpoints(tok).items()}


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_any_family_all_ones_mask_reproduces_the_full_model(head_models, family):
    """On GPT-2, Llama and Qwen2 seen through HeadModel: the identity head function gives the LM's own last-position
    logits; a mask of all ones reproduces them exactly under mean ablation and under IBCircuit's noise (λ = 1);
    ablating every head changes them; patching from an identical 'corrupted' prompt scores every head 0."""
    model = head_models[family]
    prompts = ib.IOITask().sample(12, torch.Generator().manual_seed(0))
    with torch.no_grad():
        own = model.lm(input_ids=prompts.ids).logits[:, -1, :model.vocab]
        full = model(prompts.ids)
        assert torch.equal(model(prompts.ids, lambda layer, h: h), full) and torch.equal(full, own)
        stats = ib.head_stats(model, prompts)
        assert len(stats) == model.n_layers and stats[0][0].shape == (8, model.n_heads, model.d_head)
        masks = torch.stack([torch.ones(model.n_total_heads), torch.zeros(model.n_total_heads)])
        kept, none = ib.ablated_logits(model, prompts, masks, stats)
        assert torch.equal(kept, full) and not torch.allclose(none, full)
        g = torch.Generator().manual_seed(0)
        noisy = model(prompts.ids, lambda layer, h: ib.noisy_heads(torch.ones(model.n_heads), h, *stats[layer],
                                                                torch.randn(stats[layer][0].shape, generator=g)))
        assert torch.equal(noisy, full)
    same = ib.Prompts(prompts.ids, prompts.ids, prompts.answer, prompts.good, prompts.bad)
    assert np.all(ib.attribution_patching(model, same) == 0) and np.all(ib.activation_patching(model, same) == 0)


def test_any_family_ib_masks_train_and_exhaustive_needs_the_tiny_model(head_models):
    """IBCircuit's masks move from their start on an HF model with its weights frozen (one λ per head); the
    exhaustive ground truth refuses a model it cannot enumerate."""
    model = head_models["qwen2"]
    prompts = ib.IOITask().sample(12, torch.Generator().manual_seed(1))
    before = [p.clone() for p in model.parameters()]
    res = ib.ib_circuit(model, prompts, beta=1.0, steps=5, lr=0.5, seed=0)
    assert res.lam.shape == (model.n_total_heads,) and not np.allclose(res.lam, 1 / (1 + np.exp(-5.0)))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match="tiny transformer"):
        ib.exhaustive(model, prompts, ib.head_stats(model, prompts))


def test_mask_cache_is_addressed_by_every_part_that_computes_the_masks():
    """The cached IB masks are keyed by the code of each part the computation runs (the models and their training,
    the prompts, the IB loss with its KL, the cached run itself), so changing any of them misses the cache."""
    import inspect

    computing = {inspect.getmodule(f) for f in (ib.load_models, ib.train_models, ib.IOITask, ib.GreaterThanTask,
                                                ib.ib_circuits, ib.kl_from_full, ib.cached_ib_circuits)}
    assert computing <= set(ib.MASK_SOURCES)


def test_the_power_note_quotes_the_record_s_power_line_and_its_cost():
    from icml25.core.claims import Verdict

    good = {"task_accuracy": [1.0] * 8, "expected_random_minus_best_baseline_area": [0.5] * 8,
            "expected_random_minus_acdc_area": [0.5] * 8}
    spread = [-2.0, 2.0, -1.0, 1.0, 0.0, -2.0, 2.0, 0.0]
    undecided = Verdict(ib.MINIMAL, ib.MINIMAL.decide(dict(good, eap_minus_ib_size90=spread,
                                                            acdc_minus_ib_size90=spread)))
    need = undecided.record["units_needed"]
    assert undecided.label == "inconclusive" and need > 8
    note = ib.power_note(undecided, 8, 10.0, "IOI")
    assert f"about {need} seeds" in note and f"about {need * 10:,.0f} s" in note and "undecidable" in note
    decided = Verdict(ib.MINIMAL, ib.MINIMAL.decide(dict(good, eap_minus_ib_size90=[2.0, 3.0] * 4,
                                                          acdc_minus_ib_size90=[2.0, 3.0] * 4)))
    assert ib.power_note(decided, 8, 10.0, "IOI") == ("`minimal` is reproduced on these 8 seeds: no more seeds are "
                                                      "needed.")
