import json

import jsonschema
import pytest

from icml25 import catalog
from icml25.core import claims
from icml25.core.claims import Claim, check, forget_notebook, load_results
from icml25.core.config import Range, make_config

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



def test_a_knob_unset_at_every_scale_takes_the_type_of_its_declared_range():
    cfg = make_config({s: {"gamma": None} for s in ("smoke", "ci", "full")}, gamma=Range(gt=0, le=1))
    assert cfg("ci").gamma is None and cfg("ci", gamma="0.5").gamma == 0.5 and cfg("ci", gamma=1).gamma == 1.0
    for bad in ("abc", 0, 1.5, [0.5]):
        with pytest.raises(ValueError, match="gamma"):
            cfg("ci", gamma=bad)

def test_catalog_has_nineteen_papers_with_unique_slugs():
    slugs = [c.slug for c in catalog.CHAPTERS]
    assert len(slugs) == 19 == len(set(slugs))
    with pytest.raises(ValueError, match="valid chapters"):
        catalog.get("nosuchchapter")


def test_mean_sd_is_population_sd_over_the_finite_values():
    assert claims.mean_sd([1.0, 3.0, float("nan"), None]) == "2.00 ± 1.00"
    assert claims.mean_sd([0.5, 0.5], sep="±") == "0.50±0.00"
    assert claims.mean_sd([]) == "n/a" and claims.mean_sd([float("nan")]) == "n/a"
