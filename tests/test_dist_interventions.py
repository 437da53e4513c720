import numpy as np
import pytest
import torch

from icml25 import dist_interventions as di
from icml25.core import models, tinylm

D, RANK = 12, 3


def test_rows_of_R_stay_orthonormal_through_optimiser_steps():
    phi = di.make_intervention("dreft", D, RANK, seed=0)
    opt = torch.optim.Adam(phi.parameters(), lr=0.1)
    for step in range(6):
        assert torch.allclose(phi.R @ phi.R.T, torch.eye(RANK), atol=1e-5)
        loss = phi(torch.randn(8, D, generator=torch.Generator().manual_seed(step))).pow(3).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.allclose(phi.R @ phi.R.T, torch.eye(RANK), atol=1e-5)


def test_loreft_with_W_equal_R_and_zero_bias_is_the_identity():
    phi = di.LoReFT(D, RANK, seed=1)
    with torch.no_grad():
        phi.source.weight.copy_(phi.R)
        phi.source.bias.zero_()
    h = torch.randn(5, D)
    assert torch.allclose(phi(h), h, atol=1e-6)


@pytest.mark.parametrize("method", di.METHODS)
def test_edits_stay_inside_the_subspace(method):
    phi = di.make_intervention(method, D, RANK, seed=2)
    h = torch.randn(20, D) * 3
    delta = phi(h) - h
    R = phi.R.detach()
    off = delta - delta @ R.T @ R
    assert off.abs().max() < 1e-5
    assert delta.abs().max() > 1e-3  # and it does change something


def test_sigma_stays_inside_its_clamp_for_extreme_inputs():
    phi = di.DReFT(D, RANK, seed=3)
    torch.nn.init.normal_(phi.logvar.weight, generator=torch.Generator().manual_seed(3))  # σ(h) depends on h
    for big in (1e6, -1e6):
        _, sigma = phi.mu_sigma(torch.full((4, D), big))
        assert (sigma >= di.SIGMA_CLAMP[0] - 1e-9).all() and (sigma <= di.SIGMA_CLAMP[1] + 1e-7).all()


def test_sigma_starts_inside_its_clamp_and_learns():
    """σ(h) starts at σ₀ = exp(b_σ/2) for every h, strictly inside the clamps, so its parameters get gradients and
    one optimiser step moves it (with the official default init log σ² lies above the clamp and nothing moves)."""
    phi = di.DReFT(D, RANK, seed=7)
    h = torch.randn(16, D, generator=torch.Generator().manual_seed(7)) * 3
    _, sigma = phi.mu_sigma(h)
    assert torch.allclose(sigma, torch.full_like(sigma, di.SIGMA_INIT))
    assert di.LOGVAR_CLAMP[0] < di.LOGVAR_INIT < di.LOGVAR_CLAMP[1]
    sigma.sum().backward()
    assert phi.logvar.weight.grad.abs().sum() > 0 and phi.logvar.bias.grad.abs().sum() > 0
    pinned = di.DReFT(D, RANK, seed=7, logvar_init=0.0)  # above the upper clamp -3.2: no gradient
    pinned.mu_sigma(h)[1].sum().backward()
    assert pinned.logvar.bias.grad.abs().sum() == 0


def test_noise_is_in_units_of_the_representation_scale():
    h = torch.randn(1, D, generator=torch.Generator().manual_seed(8))
    spread = {}
    for scale in (1.0, 10.0):
        phi = di.NoisyLoReFT(D, RANK, seed=8)
        phi.noise_scale = scale
        with torch.no_grad():
            draws = torch.cat([phi(h) for _ in range(2000)]) @ phi.R.T.detach()
        spread[scale] = float(draws.std(0).mean())
    assert spread[1.0] == pytest.approx(di.SIGMA_INIT, rel=0.1)
    assert spread[10.0] == pytest.approx(10 * spread[1.0], rel=0.1)


def test_sample_mean_matches_mean_mode_within_three_standard_errors():
    phi = di.DReFT(D, RANK, seed=4)
    h = torch.randn(1, D)
    with torch.no_grad():
        phi.mode = "mean"
        mean_out = phi(h)[0]
        phi.mode = "sample"
        draws = torch.cat([phi(h) for _ in range(4000)])
    se = draws.std(0) / np.sqrt(len(draws))
    assert ((draws.mean(0) - mean_out).abs() <= 3 * se + 1e-7).all()
    assert (draws.std(0) > 0).any()  # sampling really is on


def test_mean_mode_is_deterministic_and_bad_mode_rejected():
    phi = di.DReFT(D, RANK, seed=5)
    h = torch.randn(3, D)
    phi.mode = "mean"
    assert torch.equal(phi(h), phi(h))
    phi.mode = "median"
    with pytest.raises(ValueError, match="valid modes"):
        phi(h)


def test_kl_term_matches_torch_distributions():
    g = torch.Generator().manual_seed(0)
    mu, sigma = torch.randn(6, RANK, generator=g), torch.rand(6, RANK, generator=g) + 0.1
    ref = torch.distributions.kl_divergence(torch.distributions.Normal(mu, sigma),
                                            torch.distributions.Normal(0.0, 1.0)).sum(-1).mean()
    assert torch.allclose(di.kl_standard_normal(mu, sigma), ref, atol=1e-6)


def _tiny_base():
    tok = tinylm.char_tokenizer(di.DIGITS + "=")
    return tinylm.make_model("nano", tok, 0, max_len=8, num_hidden_layers=2).requires_grad_(False), tok


def test_training_changes_only_the_intervention_and_hooks_are_removed():
    model, tok = _tiny_base()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = di.sample_digits(16, 4, 0, "t")
    clean = di.digit_logits(model, tok, di.encode(tok, x))
    phi = di.make_intervention("dreft", 32, 4, seed=0)
    phi_before = [p.detach().clone() for p in phi.parameters()]
    steered = di.Steered(model, tok, {1: phi}, di.edge_positions(5, 2))
    cfg = di.config("smoke", steps=3)
    di.fit(steered, x, di.rule_answer(x, "B"), cfg, seed=0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert any(not torch.equal(a, b) for a, b in zip(phi_before, phi.parameters()))
    assert torch.equal(di.digit_logits(model, tok, di.encode(tok, x)), clean)  # hooks gone after the forward


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="hidden size"):
        di.LoReFT(8, 9)
    with pytest.raises(ValueError, match="hidden size"):
        di.DReFT(8, 0)
    model, tok = _tiny_base()
    with pytest.raises(ValueError, match="out of range"):
        with di.attached(model, {2: di.LoReFT(32, 2)}, [0]):
            pass
    with pytest.raises(ValueError, match="valid methods"):
        di.make_intervention("vib", 8, 2, 0)
    with pytest.raises(ValueError, match="valid rules"):
        di.rule_answer(np.zeros((1, 4), int), "C")


def test_task_rules_and_positions_by_enumeration():
    d = np.array([[0, 5, 5, 9], [9, 1, 1, 1]])
    assert di.rule_answer(d, "A").tolist() == [0, 9]
    assert di.rule_answer(d, "B").tolist() == [1, 0]
    assert di.edge_positions(5, 2) == [0, 1, 3, 4]
    assert di.edge_positions(3, 2) == [0, 1, 2]
    assert (di.corrupt(d, 0.0, 0) == d).all()


def test_noisy_loreft_has_fixed_sigma_and_its_mean_is_loreft_with_the_same_weights():
    noisy, plain = di.NoisyLoReFT(D, RANK, seed=6), di.LoReFT(D, RANK, seed=6)
    h = torch.randn(7, D)
    _, sigma = noisy.mu_sigma(h)
    assert torch.equal(sigma, torch.full((7, RANK), di.SIGMA_INIT))
    noisy.mode = "mean"
    assert torch.allclose(noisy(h), plain(h), atol=1e-6)  # same seed: the same R, W, b
    noisy.mode = "sample"
    spread = torch.stack([(noisy(h) - plain(h)) @ noisy.R.T.detach() for _ in range(2000)]).std(0)
    assert torch.allclose(spread, torch.full_like(spread, di.SIGMA_INIT), rtol=0.1)


def _run(where, method, seed, clean, perturbed):
    cond = {"noise 0": clean, "noise 0.5": perturbed[0], "corrupt 0.1": perturbed[1]}
    return di.Run(where, method, seed, [], cond, cond, float("nan"), 0.5 if method == "dreft" else float("nan"))


def test_drop_slope_and_claim_measurements_by_hand():
    cfg = di.config("smoke", layers=[0, 1], seeds=[0, 1])
    # LoReFT loses 0.2 at layer 0 and 0.1 at layer 1; D-ReFT 0.1 and 0.1; the control 0.15 at layer 0
    runs = [_run("layer 0", "loreft", s, 1.0, (0.8, 0.8)) for s in (0, 1)]
    runs += [_run("layer 0", "dreft", s, 0.98, (0.88, 0.88)) for s in (0, 1)]
    runs += [_run("layer 0", "noisy_loreft", s, 0.96, (0.81, 0.81)) for s in (0, 1)]
    runs += [_run("layer 1", m, s, 0.95, (0.85, 0.85)) for m in ("loreft", "dreft") for s in (0, 1)]
    assert np.allclose(di.drop(runs, "layer 0", "loreft", cfg), [0.2, 0.2])
    m = di.measure_claims(runs, cfg)
    assert np.allclose(m["drop_advantage"], [0.1, 0.1])
    assert np.allclose(m["drop_advantage_over_noise"], [0.05, 0.05])
    assert np.allclose(m["clean_gain"], [-0.02, -0.02])
    assert np.allclose(m["advantage_slope"], [-0.1, -0.1])  # advantage 0.1 at layer 0, 0 at layer 1
    assert m["min_clean_accuracy"] == [0.95, 0.95] and np.allclose(m["loreft_drop_first_layer"], [0.2, 0.2])
    assert m["dreft_sigma_change_first_layer"] == [0.5, 0.5]  # D-ReFT's at the first layer only
    assert di.ols_slope([0, 1, 2, 3], [3.0, 1.0, -1.0, -3.0]) == pytest.approx(-2.0)


def test_placements_put_the_noise_control_at_the_first_layer_only():
    p = di.placements(di.config("ci", layers=[0, 1, 2, 3]))
    assert list(p) == ["layer 0", "layer 1", "layer 2", "layer 3"]
    assert set(p["layer 0"]) == set(di.METHODS) and set(p["layer 2"]) == {"loreft", "dreft"}
    assert p["layer 2"]["dreft"] == {2: "dreft"}


def test_fit_trains_in_rounds_until_the_training_set_is_learned():
    model, tok = _tiny_base()
    x = di.sample_digits(32, 4, 0, "t")
    phi = di.make_intervention("loreft", 32, 4, seed=0)
    steered = di.Steered(model, tok, {1: phi}, di.edge_positions(5, 2))
    never = di.fit(steered, x, di.rule_answer(x, "B"), di.config("smoke", steps=4, max_rounds=3,
                                                                   converge_at=1.01), seed=0)
    assert len(never) == 12  # an unreachable target: every round runs
    done = di.fit(steered, x, di.rule_answer(x, "B"), di.config("smoke", steps=4, max_rounds=3,
                                                                  converge_at=0.0), seed=0)
    assert len(done) == 4  # reached after the first round


@pytest.fixture(scope="module")
def families(family_checkpoints):
    tok = tinylm.char_tokenizer(di.DIGITS + "=")
    return {f: di.base_model(str(path), "smoke", 0) for f, path in family_checkpoints(tok, layers=3).items()}


def _block_outputs(model, input_ids):
    from icml25.core import models
    out, handles = [], [b.register_forward_hook(lambda m, a, o: out.append((o[0] if isinstance(o, tuple) else o).clone()))
                        for b in models.decoder_blocks(model)]
    try:
        logits = model(input_ids=input_ids).logits
    finally:
        for h in handles:
            h.remove()
    return logits, out


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_any_family_identity_intervention_leaves_the_logits_unchanged(families, family):
    """On GPT-2 (blocks return tuples), Llama and Qwen2: LoReFT with W = R, b = 0 is the identity, Φ(h) = h +
    Rᵀ(R h − R h), so the steered logits are the base model's."""
    z = families[family]
    x = di.encode(z.tokenizer, di.sample_digits(16, 4, 0, "t"))
    phi = di.make_intervention("loreft", z.model.config.hidden_size, 4, 0)
    with torch.no_grad():
        phi.source.weight.copy_(phi.R)
        phi.source.bias.zero_()
    steered = di.Steered(z.model, z.tokenizer, {1: phi}, di.edge_positions(5, 2))
    with torch.no_grad():
        torch.testing.assert_close(steered.logits(x), di.digit_logits(z.model, z.tokenizer, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_any_family_intervention_edits_only_the_chosen_layer_and_positions(families, family):
    """A trained-like (random) D-ReFT at layer 1, positions f1+l1: the outputs of layer 0 are untouched, layer 1's
    output changes at exactly the chosen positions, and the edit there is Φ of the unsteered state."""
    z = families[family]
    x = di.encode(z.tokenizer, di.sample_digits(8, 4, 0, "t"))
    pos = di.edge_positions(5, 1)  # [0, 4]
    phi = di.make_intervention("dreft", z.model.config.hidden_size, 4, 1)
    phi.mode = "mean"
    with torch.no_grad():
        _, clean = _block_outputs(z.model, x)
        with di.attached(z.model, {1: phi}, pos):
            _, steered = _block_outputs(z.model, x)
        torch.testing.assert_close(steered[0], clean[0], atol=0, rtol=0)
        changed = (steered[1] != clean[1]).any(-1).all(0)  # [T]: a position edited in every prompt
        unchanged = (steered[1] == clean[1]).all(-1).all(0)
        assert changed.nonzero().flatten().tolist() == pos
        assert unchanged.nonzero().flatten().tolist() == [1, 2, 3]
        torch.testing.assert_close(steered[1][:, pos], phi(clean[1][:, pos]), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_any_family_fit_trains_the_intervention_only(families, family):
    """Training on rule B moves the intervention's parameters, one loss per step; the base model stays frozen."""
    z = families[family]
    cfg = di.config("smoke", steps=8, max_rounds=1, lr=3e-2)
    d = di.sample_digits(64, 4, 0, "fit")
    before = {k: v.clone() for k, v in z.model.state_dict().items()}
    phi = di.make_intervention("loreft", z.model.config.hidden_size, 4, 0)
    w0 = phi.source.weight.detach().clone()
    losses = di.fit(di.Steered(z.model, z.tokenizer, {0: phi}, di.edge_positions(5, 2)), d, di.rule_answer(d, "B"),
                    cfg, 0)
    assert not torch.equal(phi.source.weight, w0) and len(losses) == cfg.steps
    assert all(torch.equal(v, before[k]) for k, v in z.model.state_dict().items())


def test_loreft_has_one_mode_so_its_mean_mode_is_its_sampled_evaluation():
    """run_experiment scores LoReFT once: being deterministic, its "mean" evaluation equals its sampled one exactly
    (the noise of the perturbations comes from the evaluation's own generators), and it has no σ to average."""
    model, tok = _tiny_base()
    x = di.sample_digits(64, 4, 0, "t")
    cfg = di.config("smoke", noise_levels=[0.0, 1.0], corrupt_rates=[0.3])
    steered = di.Steered(model, tok, {1: di.make_intervention("loreft", 32, 4, seed=0)}, di.edge_positions(5, 2))
    assert not steered.stochastic()
    y = di.rule_answer(x, "B")
    assert di.evaluate(steered, x, y, cfg, 0) == di.evaluate(steered, x, y, cfg, 0, mode="mean")
    assert np.isnan(di.mean_sigma(steered, x))
    noisy = di.Steered(model, tok, {1: di.make_intervention("noisy_loreft", 32, 4, seed=0)}, di.edge_positions(5, 2))
    assert noisy.stochastic() and np.isnan(di.mean_sigma(noisy, x))
    dreft = di.Steered(model, tok, {1: di.make_intervention("dreft", 32, 4, seed=0)}, di.edge_positions(5, 2))
    assert dreft.stochastic() and di.SIGMA_CLAMP[0] - 1e-6 <= di.mean_sigma(dreft, x) <= di.SIGMA_CLAMP[1] + 1e-6


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_a_pass_resumed_from_the_frozen_prefix_equals_the_full_pass(families, family):
    """The blocks below the first intervention run once (`Prefixes`): a pass resumed from their output, on the same
    prompts or on a batch of their rows, gives exactly the logits of the full pass, noise and all, and leaves the
    blocks as they were."""
    z = families[family]
    x = di.encode(z.tokenizer, di.sample_digits(16, 4, 0, "t"))
    phi = di.make_intervention("dreft", z.model.config.hidden_size, 4, 1)
    steered = di.Steered(z.model, z.tokenizer, {1: phi}, di.edge_positions(5, 2))
    steered.set_mode("mean")  # the edit itself deterministic; the hidden-state noise comes from the generators
    with torch.no_grad():
        h = steered.prefix(x)
        assert steered.prefix(x) is h  # computed once
        full = steered.logits(x, 0.5, torch.Generator().manual_seed(0))
        resumed = steered.logits(x, 0.5, torch.Generator().manual_seed(0), states=h)
        rows = [3, 0, 3, 7]
        assert torch.equal(steered.logits(x[rows], states=h[rows]), steered.logits(x[rows]))
    assert torch.equal(resumed, full)
    assert all("forward" not in vars(b) for b in models.decoder_blocks(z.model))
