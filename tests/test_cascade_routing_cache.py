"""The benchmark's cells and the real pool's seeds read back from the cache (what notebooks 02 and 03 read after the
builder's warm-up) equal the direct computation, with the same types: arrays where the code expects arrays,
(costs, qualities) tuples, a `RealRuns`."""

import dataclasses

import numpy as np
import pytest

from icml25 import cascade_routing as cr


def assert_same(a, b, where="value"):
    """Equal nested values of the same types: dicts with the same keys in the same order, tuples and lists element
    for element, arrays of the same shape and dtype equal element for element, numbers and strings equal."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif dataclasses.is_dataclass(a):
        assert_same(vars(a), vars(b), where)
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def test_benchmark_read_back_from_the_cache_equals_the_direct_computation(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    cfg = cr.config("smoke", seeds=[100, 101], pool_sizes=[3], noise_levels=["low", "high"])
    direct = cr.run_benchmark(cfg)
    computed, n_now = cr.benchmark_results(cfg)
    read, n_later = cr.benchmark_results(cfg)
    assert (n_now, n_later) == (len(direct), 0) == (4, 0)
    assert_same(computed, direct, "cells")
    assert_same(read, direct, "cells")
    assert_same(cr.claim_measurements(read), cr.claim_measurements(direct))
    # a cell is addressed by itself: another seed list or the real pool's knobs leave it where it was
    assert not cr.cached_benchmark_cell(3, "low", 101, cr.config("smoke", seeds=[101], real_n_fit=50))[1]
    assert not cr.cached_benchmark_cell(3, "low", 101, cr.config("smoke", real_pool="classifiers"))[1]
    assert cr.cached_benchmark_cell(3, "low", 101, cr.config("smoke", n_queries=300))[1]


def test_real_pool_read_back_from_the_cache_equals_the_direct_computation(tmp_path, monkeypatch):
    """The builder's warm-up computes every seed (and every benchmark cell); what the notebook then reads equals
    computing it in place."""
    from icml25.cascade_routing import cached

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    cfg = cr.config("smoke", seeds=[100, 101], pool_sizes=[3], noise_levels=["low"])
    direct = [cr.real_pool_cell(s, cfg) for s in cfg.seeds]
    cr.warm_up(cfg)
    assert cr.benchmark_results(cfg)[1] == 0
    read = [cr.real_pool_results(s, cfg) for s in cfg.seeds]
    assert not any(now for *_, now in read)
    for (runs, cell), (r_runs, r_cell, _) in zip(direct, read):
        assert_same(r_runs, runs, "runs")
        assert_same(r_cell, cell, "cell")
    # so what the claims are decided on is the same too
    assert_same(cr.real_claim_measurements([r for r, *_ in read], [c for _, c, _ in read]),
                cr.real_claim_measurements(*map(list, zip(*direct))))
    # and the calibration seeds' candidate pools, which notebook 03 tabulates, are read back without computing
    monkeypatch.setattr(cached, "real_pool_cell", lambda seed, cfg: pytest.fail("computed after the warm-up"))
    pools = cr.calibration_pools(cfg)
    assert list(pools) == list(cr.CALIBRATION_POOLS)
    assert all(len(runs) == len(cells) == len(cfg.calibration_seeds) for runs, cells in pools.values())


def test_real_pool_cache_is_addressed_by_the_knobs_it_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    cfg = cr.config("smoke", seeds=[100])
    assert cr.real_pool_results(100, cfg)[2]
    # the benchmark's knobs and the seed list do not change a seed's cell ...
    assert not cr.real_pool_results(100, cr.config("smoke", seeds=[100, 105], n_queries=300, pool_sizes=[3]))[2]
    # ... another seed and a knob the cell reads do
    assert cr.real_pool_results(101, cfg)[2]
    assert cr.real_pool_results(100, cr.config("smoke", seeds=[100], n_lambdas=8))[2]


def test_a_pool_of_lms_is_computed_in_place_not_cached(tmp_path, monkeypatch):
    """With `pool_models` the cell is whatever `real_pool_cell` computes now; nothing is written to the cache."""
    from icml25.cascade_routing import cached

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(cached, "real_pool_cell", lambda seed, cfg: calls.append(seed) or ("runs", {"seed": seed}))
    cfg = cr.config("smoke", seeds=[100], pool_models=["lm-a", "lm-b"])
    assert cr.real_pool_results(100, cfg) == ("runs", {"seed": 100}, True)
    assert cr.real_pool_results(100, cfg)[2] and calls == [100, 100]
    assert not any(tmp_path.iterdir())
