import json

import jsonschema
import pytest

from icml25 import catalog
from icml25.core import claims
from icml25.core.claims import Claim, check, forget_notebook, load_results
from icml25.core.config import make_config

PRESETS = {"smoke": {"n": 1, "lr": 0.1}, "ci": {"n": 10, "lr": 0.1}, "full": {"n": 100, "lr": 0.01}}
config = make_config(PRESETS)


def test_config_resolves_scale_and_overrides():
    cfg = config("ci", lr=0.5, n=None)
    assert (cfg.n, cfg.lr, cfg.scale) == (10, 0.5, "ci")
    assert dict(config("full")) == {"n": 100, "lr": 0.01, "scale": "full"}


def test_config_rejects_unknown_scale_and_setting_listing_valid_ones():
    with pytest.raises(ValueError, match="smoke, ci, full"):
        config("huge")
    with pytest.raises(ValueError, match="valid settings: n, lr"):
        config("ci", n_step=3)


def test_config_is_immutable():
    cfg = config("ci")
    with pytest.raises(AttributeError):
        cfg.n = 3


def test_presets_must_share_keys_and_cover_scales():
    with pytest.raises(ValueError):
        make_config({"smoke": {"a": 1}, "ci": {"a": 1}})
    with pytest.raises(ValueError):
        make_config({"smoke": {"a": 1}, "ci": {"b": 1}, "full": {"a": 1}})


def test_catalog_has_nineteen_papers_with_unique_slugs():
    slugs = [c.slug for c in catalog.CHAPTERS]
    assert len(slugs) == 19 == len(set(slugs))
    with pytest.raises(ValueError, match="valid chapters"):
        catalog.get("nosuchchapter")


CLAIM = Claim(chapter="demo", id="bigger", paper_statement="A beats B", paper_value="+3",
              criterion="A - B >= 1", test=lambda m: m["a"] - m["b"] >= 1)


def test_check_computes_verdict_from_measurements_and_records_it():
    v = check(CLAIM, measured={"a": 3.0, "b": 1.0}, seeds=[0, 1, 2], scale="ci")
    assert v.holds and v.label == "reproduced"
    v = check(CLAIM, measured={"a": 1.5, "b": 1.0}, seeds=[0, 1, 2], scale="ci")
    assert not v.holds
    data = load_results("demo")
    jsonschema.validate(data, claims.RESULTS_SCHEMA)
    # a re-check of the same claim at the same scale replaces the record
    assert [r["verdict"] for r in data["records"]] == ["not reproduced"]
    check(CLAIM, measured={"a": 5, "b": 1}, seeds=[0], scale="smoke")
    assert len(load_results("demo")["records"]) == 2


def test_check_records_numpy_values_as_json(tmp_path):
    import numpy as np

    check(CLAIM, measured={"a": np.float32(2.5), "b": np.array([1.0, 1.0]).mean(), "per_seed": np.arange(3)},
          seeds=[0], scale="ci")
    record = load_results("demo")["records"][0]
    assert record["measured"] == {"a": 2.5, "b": 1.0, "per_seed": [0, 1, 2]}
    json.dumps(record)


def test_check_names_a_missing_measurement():
    with pytest.raises(KeyError, match="needs measured value"):
        check(CLAIM, measured={"a": 1.0}, seeds=[0], scale="ci")


def test_check_rejects_unknown_scale():
    with pytest.raises(ValueError, match="valid scales"):
        check(CLAIM, measured={"a": 1, "b": 0}, seeds=[0], scale="medium")


def test_forget_notebook_drops_only_that_notebooks_records(monkeypatch):
    monkeypatch.setenv("ICML25_NOTEBOOK", "01_a")
    check(CLAIM, measured={"a": 3, "b": 1}, seeds=[0], scale="ci")
    monkeypatch.setenv("ICML25_NOTEBOOK", "02_b")
    check(Claim("demo", "other", "s", "v", "c", lambda m: True), measured={}, seeds=[0], scale="ci")
    forget_notebook("demo", "01_a", "ci")
    assert [r["claim_id"] for r in load_results("demo")["records"]] == ["other"]


def test_mean_sd_is_population_sd_over_the_finite_values():
    assert claims.mean_sd([1.0, 3.0, float("nan"), None]) == "2.00 ± 1.00"
    assert claims.mean_sd([0.5, 0.5], sep="±") == "0.50±0.00"
    assert claims.mean_sd([]) == "n/a" and claims.mean_sd([float("nan")]) == "n/a"
