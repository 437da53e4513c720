import math

import numpy as np
import pytest
import torch

from icml25 import fp_quant_scaling as fq
from icml25.ops import fp_quantize


def test_law_reproduces_the_papers_derived_numbers():
    assert fq.critical_data_size(1e9, 4, 3, 128) == pytest.approx(27.3e12, rel=5e-3)
    assert fq.critical_data_size(1e9, 2, 1, 128) == pytest.approx(0.393e12, rel=5e-3)
    assert fq.critical_data_size(1e9, 8, 7, 128) == pytest.approx(1730e12, rel=5e-3)
    assert [fq.best_layout(b) for b in (4, 8, 16)] == [(2, 1), (4, 3), (8, 7)]
    assert 3 <= fq.optimal_mantissa(8) < 3.5


def test_loss_is_stationary_in_data_at_the_critical_size():
    N, E, M, B = 1e8, 4, 3, 128
    D = fq.critical_data_size(N, E, M, B)
    left, mid, right = (fq.law_loss(N, D * f, E, M, B) for f in (0.9, 1.0, 1.1))
    assert mid < left and mid < right
    h = D * 1e-4
    assert abs(fq.law_loss(N, D + h, E, M, B) - fq.law_loss(N, D - h, E, M, B)) / (2 * h) < 1e-18


def test_cost_optimal_precision_is_low_bit_in_the_papers_range():
    assert 4 <= fq.cost_optimal_precision(1e23) <= 8


def test_fit_recovers_constants_from_the_law_itself():
    true = fq.LawParams(n=3.0, alpha=0.3, d=40.0, beta=0.4, eps=1.5, gamma=200.0, delta=2.5, nu=2.0)
    rows = [(N, D, E, M, B) for N in (1e4, 4e4) for D in (3e4, 1e5)
            for E, M in ((1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (4, 3), (np.nan, np.nan))
            for B in (8, 64, 1024)]
    N, D, E, M, B = np.array(rows).T
    loss = fq.predict(true, N, D, E, M, B)
    fit = fq.fit_law(N, D, E, M, B, loss, alpha=true.alpha, beta=true.beta)
    for name in fq.FIT_FIELDS:
        assert getattr(fit, name) == pytest.approx(getattr(true, name), rel=1e-4), name
    assert fq.r_squared(loss, fq.predict(fit, N, D, E, M, B)) > 0.999999


def _reference_grads(x, w, spec, grad_y):
    """Straight-through reference: the quantised GEMMs spelled out with materialised tensors."""
    x2, g2 = x.reshape(-1, x.shape[-1]), grad_y.reshape(-1, grad_y.shape[-1])
    w_bwd = fp_quantize(w.t().contiguous(), spec.E, spec.M, spec.B, axis=None, convention="paper").t()
    x_bwd = fp_quantize(x2.t().contiguous(), spec.E, spec.M, spec.B, axis=None, convention="paper").t()
    return (g2 @ w_bwd).reshape(x.shape), g2.t() @ x_bwd


@pytest.mark.parametrize("E,M,B", [(2, 1, 8), (4, 3, 64), (1, 2, 1024)])
def test_qlinear_forward_and_gradients_match_the_reference(E, M, B):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(12, 16, generator=g))
    spec = fq.QuantSpec(E, M, B)
    layer = fq.QLinear(w, spec)
    y = layer(x)
    w_q = fp_quantize(w.detach(), E, M, B, axis=None, convention="paper")
    torch.testing.assert_close(y, torch.nn.functional.linear(x.detach(), w_q))
    assert not torch.equal(w_q, w.detach())  # the quantisation did something
    grad_y = torch.randn(y.shape, generator=g)
    y.backward(grad_y)
    ref_x, ref_w = _reference_grads(x.detach(), w.detach(), spec, grad_y)
    torch.testing.assert_close(x.grad, ref_x)
    torch.testing.assert_close(w.grad, ref_w)


def test_full_precision_qlinear_is_nn_linear():
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(8, 6, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(6, 8, generator=g))
    layer = fq.QLinear(lin.weight, fq.QuantSpec(None))
    x = torch.randn(4, 8, generator=g)
    torch.testing.assert_close(layer(x), lin(x), rtol=0, atol=0)


def test_quantize_model_replaces_block_linears_only():
    cfg = fq.config("smoke")
    model = fq.quantize_model(fq.make_lm(cfg, 0), fq.QuantSpec(2, 1, 8))
    q = [m for m in model.modules() if isinstance(m, fq.QLinear)]
    assert len(q) == 2 * 7  # q, k, v, o, gate, up, down in each of two layers
    assert not any(isinstance(m, torch.nn.Linear) for m in model.model.layers.modules())
    assert isinstance(model.lm_head, torch.nn.Linear)


def test_block_size_one_round_trips_and_larger_blocks_err_more():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 64, generator=g) * torch.exp(2 * torch.randn(64, 64, generator=g))  # heavy-tailed
    errs = [float((fq.quantize_blocks(x, fq.QuantSpec(2, 1, b)) - x).pow(2).mean()) for b in (1, 16, 4096)]
    assert errs[0] < 1e-10 * float(x.pow(2).mean())
    assert errs[0] < errs[1] < errs[2]


def test_markov_language_entropy_rate_matches_a_sample_estimate():
    lang = fq.MarkovLanguage.make(8, 1.2, 0)
    ids = lang.sample(200, 200, torch.Generator().manual_seed(0))
    probs = torch.as_tensor(lang.probs)
    nll = -torch.log(probs[ids[:, :-1], ids[:, 1:]]).mean()
    assert float(nll) == pytest.approx(lang.entropy_rate(), rel=0.02)
    assert np.allclose(lang.probs.sum(1), 1)


def test_bad_formats_raise():
    with pytest.raises(ValueError, match="exponent bits"):
        fq.QuantSpec(0, 2, 8)
    with pytest.raises(ValueError, match="mantissa bits"):
        fq.QuantSpec(2, -1, 8)
    with pytest.raises(ValueError, match="block size"):
        fq.QuantSpec(2, 1, 0)
    with pytest.raises(ValueError, match="exponent bits"):
        fq.law_loss(1e6, 1e9, 0, 3, 128)
    with pytest.raises(ValueError, match="block size"):
        fq.critical_data_size(1e9, 4, 3, -1)


def _runs_from_law(p, seeds=(0, 1, 2), N=1280, noise=0.0):
    """Runs whose checkpoint losses are the law itself (plus a per-seed offset), for the paired statistics."""
    D = tuple(int(1e4 * 2 ** (k / 2)) for k in range(8))
    runs = []
    for s in seeds:
        for spec in (fq.QuantSpec(None), fq.QuantSpec(2, 1, 1024), fq.QuantSpec(2, 1, 16), fq.QuantSpec(1, 2, 1024)):
            loss = fq.law_loss(N, np.array(D, float), spec.E, spec.M, spec.B, p) + noise * s
            runs.append(fq.Run(spec, s, N, D, tuple(loss.tolist())))
    return runs


TOY = fq.LawParams(n=1.0, alpha=0.2368, d=40.0, beta=0.5162, eps=3.0, gamma=30.0, delta=3.19, nu=2.95)


def test_paired_statistics_on_runs_that_follow_the_law():
    runs = _runs_from_law(TOY, noise=0.01)
    seeds = [0, 1, 2]
    D = np.array(runs[0].D, float)
    late = D >= fq.LATE_SHARE * D[-1]
    term = lambda B: np.mean((D**TOY.beta / 1280**TOY.alpha * fq.precision_term(2, 1, B, TOY))[late])
    assert fq.penalty(runs, seeds, 2, 1, 1024) == pytest.approx([float(term(1024))] * 3)
    # the law is linear in log2 B, so the two-point slope is the term per unit of log2 B
    assert fq.block_slope(runs, seeds, 2, 1, 16, 1024) == pytest.approx([float(term(2))] * 3)
    fp, low = fq.find_run(runs, 0), fq.find_run(runs, 0, 2, 1, 1024)
    assert fq.late_slope(fp, 0.5) < 0  # full precision keeps improving
    assert fq.loss_minimum(fp) == fp.D[-1]
    assert fq.penalty_resolution({"penalty": [1.0, 1.1, 0.9]}) == pytest.approx(10.0)


def test_late_slope_turns_positive_past_the_critical_data_size():
    N = 1280
    dcrit = float(fq.critical_data_size(N, 2, 1, 1024, TOY))
    D = tuple(int(dcrit * 2 ** (k / 2)) for k in range(-8, 8))  # half the checkpoints beyond D_crit
    run = fq.Run(fq.QuantSpec(2, 1, 1024), 0, N, D, tuple(fq.law_loss(N, np.array(D, float), 2, 1, 1024, TOY)))
    assert fq.late_slope(run, 0.5) > 0
    assert fq.loss_minimum(run) == pytest.approx(dcrit, rel=0.42)  # the nearest checkpoint, sqrt(2) apart


@pytest.mark.parametrize("held", [fq.QuantSpec(2, 1, 16), fq.QuantSpec(2, 1, 1024)])
def test_a_run_left_out_of_the_fit_is_predicted_with_its_critical_data_size(held):
    runs = [r for r in _runs_from_law(TOY) if r.seed == 0]
    fit = fq.fit_held_out(runs, held)
    D = np.array(runs[0].D, float)
    np.testing.assert_allclose(fit.measured, D**TOY.beta / 1280**TOY.alpha * fq.precision_term(2, 1, held.B, TOY),
                               rtol=1e-9)
    assert fit.r2 > 0.999999
    assert fit.dcrit == pytest.approx(float(fq.critical_data_size(1280, 2, 1, held.B, TOY)), rel=1e-4)
    # without a quantisation term there is nothing to predict and no critical data size within reach: the fit
    # finds no positive term (gamma = inf, D_crit = inf) or, depending on the platform's rounding, a vanishing one
    # (gamma ~ 1e14, D_crit ~ 1e19 tokens), never one within a billion times the last checkpoint
    flat = [fq.Run(r.spec, 0, r.N, r.D, fq.find_run(runs, 0).loss) for r in runs]
    none = fq.fit_held_out(flat, held)
    assert none.dcrit > 1e9 * D.max() and np.allclose(none.predicted, 0, atol=1e-9)


def test_a_longer_full_precision_run_gives_the_held_out_penalty_at_the_held_out_runs_checkpoints():
    """Full precision trained past the others (as the sweep's long runs are): the penalty is read at the held-out
    run's checkpoints, where the longer run's first checkpoints are those of a run that stopped there."""
    runs = [r for r in _runs_from_law(TOY) if r.seed == 0]
    D_long = runs[0].D + tuple(int(runs[0].D[-1] * 2 ** (k / 2)) for k in (1, 2))
    fp_long = fq.Run(fq.QuantSpec(None), 0, 1280, D_long, tuple(fq.law_loss(1280, np.array(D_long, float), p=TOY)))
    held = fq.QuantSpec(2, 1, 16)
    fit = fq.fit_held_out([fp_long, *runs[1:]], held)
    np.testing.assert_allclose(fit.measured, np.subtract(fq.find_run(runs, 0, 2, 1, 16).loss, runs[0].loss))
    assert fit.r2 > 0.999999


def test_upto_reads_a_run_up_to_one_of_its_checkpoints():
    run = fq.Run(fq.QuantSpec(None), 0, 10, (10, 20, 30, 40), (4.0, 3.0, 2.0, 1.0), 5.0)
    assert run.upto(20) == fq.Run(fq.QuantSpec(None), 0, 10, (10, 20), (4.0, 3.0))
    assert run.upto(40) == run and run.upto(20).late == pytest.approx(3.5)  # D = 10, 20 both in the late half
    with pytest.raises(ValueError, match="not a checkpoint"):
        run.upto(25)


def test_points_table_has_a_row_per_checkpoint_with_nan_format_for_full_precision():
    runs = _runs_from_law(TOY, seeds=(0,))
    table = fq.points_table(runs)
    assert len(table["loss"]) == sum(len(r.D) for r in runs)
    n = len(runs[0].D)
    assert np.isnan(table["E"][:n]).all() and not np.isnan(table["E"][n:]).any()  # full precision first
    assert table["B"][n:2 * n].tolist() == [1024] * n


def test_late_loss_is_the_mean_over_the_second_half():
    run = fq.Run(fq.QuantSpec(None), 0, 10, (10, 20, 30, 40), (4.0, 3.0, 2.0, 1.0))
    assert run.late == pytest.approx(2.0)  # the checkpoints at D = 20, 30, 40


def test_checkpoints_are_log_spaced_and_end_at_the_last_step():
    at = fq.checkpoints(400, 8)
    assert at[-1] == 400 and len(at) == 8 and at == sorted(set(at))
    assert np.allclose(np.diff(np.log2(at)), 1 / fq.CHECKPOINTS_PER_OCTAVE, atol=0.05)


def test_checkpoints_carried_past_the_steps_hold_the_shorter_runs():
    assert fq.checkpoints(16, 3) == [11, 13, 16]  # 16 * 2^(-2/4), 16 * 2^(-1/4), 16
    assert fq.checkpoints(16, 3, until=32) == [11, 13, 16, 19, 23, 27, 32]
    assert fq.checkpoints(16, 3, until=30) == [11, 13, 16, 19, 23, 27, 30]  # off the grid: the last is `until`
    assert fq.checkpoints(16, 3, until=16) == fq.checkpoints(16, 3)
    with pytest.raises(ValueError, match="at least steps"):
        fq.checkpoints(16, 3, until=15)


def test_a_run_trained_longer_is_the_shorter_run_continued():
    """Same seed, same token stream, same warmup: the long run read up to `steps` is the `steps` run, bit for bit."""
    cfg = fq.config("smoke", steps=8, long_steps=16, n_checkpoints=3)
    lang = fq.MarkovLanguage.make(cfg.vocab, cfg.zipf, 0)
    stream = fq.token_stream(cfg, 300, lang, cfg.long_steps)
    short = fq.train_run(cfg, fq.QuantSpec(2, 1, 64), 300, lang, stream)
    long = fq.train_run(cfg, fq.QuantSpec(2, 1, 64), 300, lang, stream, steps=cfg.long_steps)
    assert long.D[-1] == cfg.long_steps * fq.tokens_per_step(cfg) and len(long.D) > len(short.D)
    assert long.upto(short.D[-1]) == short


def test_train_curve_evaluates_at_the_checkpoints_and_learns():
    cfg = fq.config("smoke")
    lang = fq.MarkovLanguage.make(cfg.vocab, cfg.zipf, 0)
    run = fq.train_run(cfg, fq.QuantSpec(2, 1, 64), 0, lang)
    assert len(run.loss) == len(fq.checkpoints(cfg.steps, cfg.n_checkpoints)) == len(run.D)
    assert run.D[-1] == cfg.steps * cfg.batch_size * cfg.seq_len
    assert run.loss[-1] < run.loss[0] < math.log(cfg.vocab + len(fq.tinylm.SPECIALS)) + 0.5
    again = fq.train_run(cfg, fq.QuantSpec(2, 1, 64), 0, lang)
    assert again.loss == run.loss  # a seed fixes the weights and the token stream


def test_markov_language_unigram_entropy_is_above_its_entropy_rate():
    lang = fq.MarkovLanguage.make(16, 1.2, 0)
    assert lang.entropy_rate() < lang.unigram_entropy() <= math.log(16) + 1e-12
    pi = lang.stationary()
    np.testing.assert_allclose(pi @ lang.probs, pi, atol=1e-12)


def test_e1m2_grid_is_uniform_like_int4():
    grid = fq.format_grid(1, 2)
    np.testing.assert_allclose(grid, np.arange(8) * 0.5)
    assert not np.allclose(np.diff(fq.format_grid(2, 1)), 0.5)


def test_grids_and_float8_agreement():
    assert fq.format_grid(2, 1).tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert fq.format_grid(4, 3).max() == 480
    assert fq.format_grid(4, 3, "fn").max() == 448
    assert fq.float8_mismatches(2000, 0) == {"E4M3": 0, "E5M2": 0}


def test_the_referee_record_agrees_with_the_claims_rules():
    """REFEREE_400 is transcribed: where its penalty resolution misses the bar, every claim must be inconclusive
    (the shared precondition holds them back), each interval must contain its estimate, and the page's sentence
    must give each run's resolution and labels."""
    rec = fq.REFEREE_400
    text = fq.referee_sentence(rec, 685)
    for steps, run in rec["runs"].items():
        if run["penalty_resolution"] < fq.RESOLUTION_BAR:
            assert set(run["labels"].values()) == {"inconclusive"}
        for key in ("late_slope_low", "late_slope_gap", "r2_held_out"):
            est, lo, hi = run[key]
            assert lo <= est <= hi
        assert f"at {steps} steps" in text and f"{run['penalty_resolution']:.2f}" in text
    # the bar the record is read against, on exact cases: mean / sd = 3 holds, 2 does not
    assert fq.RESOLVED.evaluate("critical_data", {"penalty": [2.0, 3.0, 4.0]})["holds"]
    assert not fq.RESOLVED.evaluate("critical_data", {"penalty": [0.5, 1.0, 1.5]})["holds"]
