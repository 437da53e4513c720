"""Notebook 02's sweep as a cached chapter result (what the builder's warm-up computes is what computing it here
gives, read back on the next call), and the two new pieces the claims read: the law's own late slope and the
smallest weight a block can span."""

import numpy as np
import pytest

from icml25 import fp_quant_scaling as fq
from icml25.core.seeding import one_thread


def test_the_cached_sweep_equals_the_direct_one_and_is_read_back():
    cfg = fq.config("smoke", seeds=[300], steps=6, long_steps=12, n_checkpoints=2)
    runs, language, _ = fq.sweep_results(cfg)
    again, _, now_again = fq.sweep_results(cfg)
    assert not now_again and again == runs
    with one_thread():  # the cache computes on one thread: the same numbers as computing it here
        direct, direct_language = fq.run_sweep(cfg)
    assert direct == runs
    assert language.entropy_rate() == direct_language.entropy_rate()
    assert [(r.spec, r.seed, r.D[-1] // fq.tokens_per_step(cfg)) for r in runs] == fq.sweep_plan(cfg)


def test_the_cache_is_addressed_by_the_language_seed():
    cfg = fq.config("smoke", seeds=[300], steps=6, long_steps=12, n_checkpoints=2)
    a, _, _ = fq.sweep_results(cfg, seed=0)
    b, _, _ = fq.sweep_results(cfg, seed=1)
    assert [r.loss for r in a] != [r.loss for r in b]


TOY = fq.LawParams(n=1.0, alpha=0.2368, d=40.0, beta=0.5162, eps=3.0, gamma=30.0, delta=3.19, nu=2.95)


@pytest.mark.parametrize("first_octave, rises", [(-6, False), (1, True)])
def test_the_law_predicts_a_late_rise_only_once_dcrit_lies_before_the_late_half(first_octave, rises):
    """Checkpoints four per doubling over four doublings of D; the late half is the last doubling. With the run's
    first checkpoint at 2^first_octave D_crit the whole run lies before D_crit (no rise) or past it (a rise)."""
    N, spec = 1280, fq.QuantSpec(2, 1, 1024)
    dcrit = float(fq.critical_data_size(N, 2, 1, 1024, TOY))
    D = tuple(int(dcrit * 2 ** (first_octave + k / 4)) for k in range(17))
    run = fq.Run(spec, 0, N, D, tuple(np.zeros(len(D))))
    fit = fq.HeldOutFit(TOY, np.zeros(len(D)), np.zeros(len(D)), dcrit)
    law_run = fq.Run(spec, 0, N, D, tuple(fq.law_loss(N, np.array(D, float), 2, 1, 1024, TOY)))
    assert fq.law_late_slope(fit, run, 0.5) == pytest.approx(fq.late_slope(law_run, 0.5), rel=1e-9)
    assert (fq.law_late_slope(fit, run, 0.5) > 0) is rises


def test_smallest_weight_is_the_attention_projection():
    cfg = fq.config("ci")
    hidden, ffn = cfg.model
    assert fq.smallest_weight(fq.make_lm(cfg, 0)) == hidden * min(hidden, ffn)
    assert fq.smallest_weight(fq.make_lm(fq.config("full"), 0)) >= fq.config("full").low[2]  # B fits the weights


def test_law_rise_steps_is_the_first_length_whose_late_slope_the_law_predicts_rising():
    """A run of 64 steps of 1000 tokens, 16 checkpoints, with the toy law's D_crit at 2x the run's last D: the law
    predicts a fall over its late half; the returned length is the first at which it predicts a rise."""
    N, spec, tokens, n = 1280, fq.QuantSpec(2, 1, 1024), 1000, 16
    dcrit = float(fq.critical_data_size(N, 2, 1, 1024, TOY))
    steps = round(dcrit / 2 / tokens)
    D = tuple(s * tokens for s in fq.checkpoints(steps, n))
    run = fq.Run(spec, 0, N, D, (0.0,) * len(D))
    fit = fq.HeldOutFit(TOY, np.zeros(len(D)), np.zeros(len(D)), dcrit)

    def slope(k):
        Dk = tuple(s * tokens for s in fq.checkpoints(k, n))
        return fq.law_late_slope(fit, fq.Run(spec, 0, N, Dk, (0.0,) * len(Dk)), 0.5)

    k = fq.law_rise_steps(fit, run, tokens, n, 0.5)
    assert slope(steps) < 0 and slope(k) >= 0 > slope(k - 1)
    room = fq.steps_past_dcrit(fit, tokens)
    assert room >= k and room * tokens * fq.LATE_SHARE >= dcrit > (room - 1) * tokens * fq.LATE_SHARE
    no_dcrit = fq.HeldOutFit(TOY, fit.measured, fit.predicted, float("inf"))
    assert fq.law_rise_steps(no_dcrit, run, tokens, n, 0.5) is None and fq.steps_past_dcrit(no_dcrit, tokens) is None


def test_steps_for_share_is_the_length_that_enough_seeds_reach():
    assert fq.steps_for_share([300, 100, 200], 2 / 3) == 200
    assert fq.steps_for_share([300, 100, 200], 1.0) == 300
    assert fq.steps_for_share([None, 100, 200], 2 / 3) == 200 and fq.steps_for_share([None, None, 200], 2 / 3) is None


def test_a_runs_seconds_are_timing_not_a_result():
    spec = fq.QuantSpec(None)
    runs = [fq.Run(spec, 0, 10, (1, 2), (3.0, 2.0), 4.0), fq.Run(spec, 1, 10, (1, 2), (3.0, 2.0), 2.0)]
    assert runs[0] == fq.Run(spec, 0, 10, (1, 2), (3.0, 2.0), 9.0)
    assert fq.seconds_per_step(runs, 1) == 1.5  # 6 s over 2 + 2 steps
    longer = [fq.Run(spec, 0, 10, (2, 8), (3.0, 2.0), 4.0), fq.Run(spec, 1, 10, (2, 4), (3.0, 2.0), 2.0)]
    assert fq.seconds_per_step(longer, 2) == 1.0  # 6 s over 4 + 2 steps of 2 tokens


def test_the_sweep_trains_only_full_precision_and_the_low_precision_run_long():
    cfg = fq.config("smoke", seeds=[300, 301], steps=24, long_steps=48)
    plan = fq.sweep_plan(cfg)
    assert [steps for _, _, steps in plan] == [48, 48, 24, 24] * 2
    assert [spec for spec, _, steps in plan if steps == 48] == [fq.QuantSpec(None), fq.QuantSpec(*cfg.low)] * 2
    assert fq.sweep_steps(cfg) == 2 * (2 * 48 + 2 * 24)
    with pytest.raises(ValueError, match="long_steps"):
        fq.sweep_plan(fq.config("smoke", steps=24, long_steps=12))


def test_the_length_table_counts_seeds_per_length():
    record = [{"seed": s, "steps": L, "dcrit_over_trained": d, "law_late_slope": k, "steps_past_dcrit": p}
              for s, L, d, k, p in [(0, 10, 0.9, -0.1, 30), (1, 10, 0.5, 0.2, 10), (0, 20, 0.4, 0.3, 20),
                                    (1, 20, 0.2, 0.0, 40)]]
    assert fq.length_table(record) == [
        {"steps": 10, "seeds": 2, "law_predicts_rise": 1, "late_half_past_dcrit": 1,
         "median_dcrit_over_trained": pytest.approx(0.7)},
        {"steps": 20, "seeds": 2, "law_predicts_rise": 2, "late_half_past_dcrit": 1,
         "median_dcrit_over_trained": pytest.approx(0.3)}]


def test_the_ci_long_length_is_a_calibrated_one_where_the_law_predicts_the_rise():
    """The `ci` length of the long runs is one the calibration measured, on calibration seeds only (never a
    verdict seed), and there the refitted law predicts the rise on at least `RISE_SHARE` of them."""
    cfg = fq.config("ci")
    seeds = {r["seed"] for r in fq.LENGTH_CALIBRATION}
    assert seeds <= set(cfg.calibration_seeds) and not seeds & set(cfg.seeds)
    row = next(r for r in fq.length_table(fq.LENGTH_CALIBRATION) if r["steps"] == cfg.long_steps)
    assert row["law_predicts_rise"] >= fq.RISE_SHARE * row["seeds"]
    assert cfg.long_steps in fq.checkpoints(cfg.steps, cfg.n_checkpoints, until=2 * cfg.long_steps)


def test_the_model_blocks_fill_is_the_full_scales_width():
    cfg = fq.config("ci")
    hidden = fq.hidden_to_fill_blocks(cfg)
    assert fq.smallest_weight(fq.make_lm(fq.config("ci", model=(hidden, 2 * hidden)), 0)) >= cfg.low[2]
    assert fq.smallest_weight(fq.make_lm(fq.config("ci", model=(hidden - 4, 2 * hidden - 8)), 0)) < cfg.low[2]
    assert hidden == fq.config("full").model[0]


def test_dcrit_drift_reads_the_shortest_and_longest_length_every_seed_ran():
    """Seed 1 ran 100, 200 and 400 steps, seed 2 only 100 and 200: the drift is read at 100 and 200, medians of
    the two seeds' lengths past D_crit (150 and 250, then 180 and 320)."""
    rows = [{"seed": 1, "steps": 100, "steps_past_dcrit": 150}, {"seed": 2, "steps": 100, "steps_past_dcrit": 250},
            {"seed": 1, "steps": 200, "steps_past_dcrit": 180}, {"seed": 2, "steps": 200, "steps_past_dcrit": 320},
            {"seed": 1, "steps": 400, "steps_past_dcrit": 999}]
    assert fq.dcrit_drift(rows) == {"from_steps": 100, "to_steps": 200, "past_dcrit": [200.0, 250.0],
                                    "drift": 1.25, "training": 2.0}
