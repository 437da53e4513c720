"""Typed, validated knobs: every chapter's config accepts each knob's valid values (also as papermill passes
them, as strings) with the knob's type, and refuses wrong types, NaN and out-of-range values naming the knob."""

import importlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25 import catalog, rsd
from icml25.core.config import COUNT, FRACTION, Knob, Range, make_config, one_of

MODULES = {c.slug: "icml25.ops.bench" if c.slug == "kernels" else f"icml25.{c.slug}" for c in catalog.ALL}
CONFIGS = {slug: importlib.import_module(name).config for slug, name in MODULES.items()}
FEW = settings(max_examples=8, deadline=None)


def _bounds(r: Range | None, kind: type) -> dict:
    """Keyword bounds of hypothesis' integers/floats strategy for range `r`."""
    if r is None:
        return {}
    if kind is int:
        lo = r.ge if r.gt is None else math.floor(r.gt) + 1
        hi = r.le if r.lt is None else math.ceil(r.lt) - 1
        return {"min_value": None if lo is None else math.ceil(lo), "max_value": None if hi is None else math.floor(hi)}
    return {"min_value": r.ge if r.gt is None else r.gt, "exclude_min": r.gt is not None,
            "max_value": r.le if r.lt is None else r.lt, "exclude_max": r.lt is not None}


def scalar(kind: type, r: Range | None):
    """Valid values of a scalar knob."""
    if r is not None and r.choices:
        return st.sampled_from(r.choices)
    if kind is int:
        return st.integers(**_bounds(r, int))
    if kind is float:
        return st.floats(allow_nan=False, allow_infinity=False, **_bounds(r, float))
    return st.booleans() if kind is bool else st.text(min_size=1)


def valid(knob: Knob):
    """Valid values of `knob`, in the type `config` must return."""
    if knob.item is None and knob.kind not in (list, tuple, dict):
        return scalar(knob.kind, knob.valid)
    item = valid(knob.item) if knob.item is not None else st.integers()
    if knob.kind is dict:
        return st.dictionaries(st.text(min_size=1, max_size=8), item, max_size=3)
    if knob.positions:
        return st.tuples(*(scalar(knob.item.kind, r) for r in knob.positions))
    if knob.length is not None:
        return st.tuples(*[item] * knob.length)
    return st.lists(item, min_size=int(knob.nonempty), max_size=4).map(knob.kind)


def as_passed(value, kind: type):
    """How a caller may pass `value`: as is, as papermill's string, and an integral float as an int."""
    forms = [st.just(value)]
    if kind is not str:
        forms.append(st.just(repr(value)))
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        forms.append(st.just(int(value)))
    return st.one_of(forms)


def invalid_scalars(kind: type, r: Range | None):
    """Values a scalar knob must refuse: the wrong type, NaN and infinity, and values out of range."""
    wrong = [st.just("abc"), st.just(True), st.just([1])] if kind in (int, float) else [st.just(7), st.just([])]
    if kind in (int, float):
        wrong.append(st.sampled_from([math.nan, math.inf, -math.inf, "nan"]))
    if kind is int:  # a non-integer number
        wrong.append(st.tuples(st.integers(-10**6, 10**6), st.floats(0.01, 0.99)).map(sum))
    if r is not None and r.choices:
        wrong.append(st.text(min_size=1).map(lambda x: x + "?") if kind is str else st.just(max(r.choices) + 1))
    elif r is not None:  # beyond a bound, by a step `d` (at least 1 for an integer)
        step = st.integers(1, 10**6) if kind is int else st.floats(1e-3, 1e6)
        lo, hi = (r.ge if r.gt is None else r.gt), (r.le if r.lt is None else r.lt)
        if lo is not None:
            wrong.append(step.map(lambda d: (math.ceil(lo) - d if r.gt is None else math.floor(lo) + 1 - d)
                                  if kind is int else lo - d * (1 + abs(lo))))
            if r.gt is not None:
                wrong.append(st.just(r.gt))
        if hi is not None:
            wrong.append(step.map(lambda d: (math.floor(hi) + d if r.lt is None else math.ceil(hi) - 1 + d)
                                  if kind is int else hi + d * (1 + abs(hi))))
            if r.lt is not None:
                wrong.append(st.just(r.lt))
    return st.one_of(wrong)


def invalid(knob: Knob):
    """Values `knob` must refuse."""
    if knob.item is None and knob.kind not in (list, tuple, dict):
        return invalid_scalars(knob.kind, knob.valid)
    if knob.item is None:
        return st.just("abc")
    bad_item = invalid_scalars(knob.item.kind, knob.item.valid) if knob.item.item is None else invalid(knob.item)
    if knob.kind is dict:
        return st.one_of(st.just([1]), bad_item.map(lambda v: {"a": v}))
    wrong = [st.just("abc"), st.just(7)]
    if knob.positions:  # one position invalid, the others valid
        others = st.tuples(*(scalar(knob.item.kind, r) for r in knob.positions))
        wrong += [st.tuples(others, invalid_scalars(knob.item.kind, r))
                  .map(lambda p, i=i: p[0][:i] + (p[1],) + p[0][i + 1:]) for i, r in enumerate(knob.positions)]
    elif knob.length is not None:
        wrong += [st.just(()), bad_item.map(lambda v: (v,) * knob.length)]
    else:
        wrong.append(bad_item.map(lambda v: [v]))
    if knob.nonempty:
        wrong.append(st.just([]))
    return st.one_of(wrong)


def same(got, want) -> bool:
    """Equal with the same types, all the way down."""
    if type(got) is not type(want):
        return False
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(map(same, got, want))
    return got == want


def test_every_numeric_knob_of_every_chapter_declares_its_range():
    for slug, config in CONFIGS.items():
        for name, knob in config.knobs.items():
            leaf = knob.item or knob
            if leaf.kind in (int, float):
                assert leaf.valid is not None or knob.positions, f"{slug}.{name} has no declared range"


@pytest.mark.parametrize("slug", CONFIGS)
@FEW
@given(data=st.data())
def test_valid_values_are_accepted_with_the_knobs_type(slug, data):
    config = CONFIGS[slug]
    for name, knob in config.knobs.items():
        want = data.draw(valid(knob), label=name)
        passed = data.draw(as_passed(want, knob.kind), label=f"{name} as passed")
        got = config("ci", **{name: passed})[name]
        assert same(got, want), f"{slug}.{name}: passed {passed!r}, got {got!r}, want {want!r}"


@pytest.mark.parametrize("slug", CONFIGS)
@FEW
@given(data=st.data())
def test_invalid_values_are_refused_naming_the_knob(slug, data):
    config = CONFIGS[slug]
    for name, knob in config.knobs.items():
        bad = data.draw(invalid(knob), label=name)
        with pytest.raises(ValueError, match=rf"setting {name}=.* is not valid: {name} must be "):
            config("ci", **{name: bad})


def test_rsd_examples_of_the_issue_are_refused_with_what_is_valid():
    with pytest.raises(ValueError, match=r"^setting n_test=-5 is not valid: n_test must be an integer >= 1$"):
        rsd.config("ci", n_test=-5)
    with pytest.raises(ValueError, match=r"^setting toy_delta='abc' is not valid: toy_delta must be a finite number in "
                                         r"\[0, 1\]$"):
        rsd.config("ci", toy_delta="abc")


def test_papermill_values_are_coerced_where_nothing_is_lost():
    cfg = rsd.config("ci", n_test="5", toy_delta="0.3", seeds="[0, 1]", epsilon=0, bon_n=6.0, prm_preset="micro")
    assert same((cfg.n_test, cfg.toy_delta, cfg.seeds, cfg.epsilon, cfg.bon_n, cfg.prm_preset),
                (5, 0.3, [0, 1], 0.0, 6, "micro"))
    assert rsd.config("ci", n_test=None).n_test == rsd.config("ci").n_test  # None: the scale's value
    for bad in (dict(n_test=5.5), dict(n_test="5.5"), dict(n_test=True), dict(toy_delta=float("nan")),
                dict(seeds=[]), dict(seeds="0, 1, x"), dict(prm_preset="huge"), dict(deltas=[0.5, 1.5])):
        with pytest.raises(ValueError, match=f"setting {next(iter(bad))}="):
            rsd.config("ci", **bad)


def test_every_preset_value_is_accepted_back_as_an_override():
    for config in CONFIGS.values():
        for scale in ("smoke", "ci", "full"):
            cfg = config(scale)
            assert config(scale, **{k: v for k, v in cfg.items() if k != "scale"}) == cfg


PRESETS = {"smoke": {"n": 1, "share": 0.5, "fmt": (2, 1), "name": "a"},
           "ci": {"n": 10, "share": 0.5, "fmt": (2, 1), "name": "a"},
           "full": {"n": 100, "share": 0.25, "fmt": (4, 3), "name": "b"}}


def test_make_config_refuses_ranges_that_do_not_fit_the_presets():
    with pytest.raises(ValueError, match=r"preset 'smoke': setting n=1 is not valid: n must be an integer >= 2"):
        make_config(PRESETS, n=Range(ge=2))
    with pytest.raises(ValueError, match="unknown setting"):
        make_config(PRESETS, m=COUNT)
    with pytest.raises(ValueError, match="cannot take range"):
        make_config(PRESETS, name=COUNT)
    with pytest.raises(ValueError, match="one range per position"):
        make_config(PRESETS, fmt=(COUNT,))
    with pytest.raises(ValueError, match="different types"):
        make_config({s: {"n": v} for s, v in zip(("smoke", "ci", "full"), (1, "2", 3))})
    config = make_config(PRESETS, n=COUNT, share=FRACTION, fmt=(Range(ge=1), Range(ge=0)), name=one_of("a", "b"))
    assert same(config("ci", fmt=[5, 0]).fmt, (5, 0))
    with pytest.raises(ValueError, match=r"fmt must be a 2-tuple: item 0 an integer >= 1; item 1 an integer >= 0"):
        config("ci", fmt=(0, 1))


def test_a_preset_of_none_is_unset_and_the_knob_typed_by_the_other_scales():
    config = make_config({"smoke": {"shape": None}, "ci": {"shape": (2, 3)}, "full": {"shape": (4, 5)}},
                         shape=COUNT)
    assert config("smoke").shape is None and same(config("smoke", shape=[1, 2]).shape, (1, 2))
    with pytest.raises(ValueError, match=r"shape must be a 2-tuple, each item an integer >= 1"):
        config("smoke", shape=(1, 2, 3))
