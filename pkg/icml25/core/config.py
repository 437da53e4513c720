"""Scales and per-chapter configuration: typed, validated knobs.

Every chapter module keeps one table `PRESETS = {"smoke": {...}, "ci": {...}, "full": {...}}` with the same
keys at each scale, and exposes `config(scale, **overrides)` built with :func:`make_config`. A notebook's
parameters cell passes its knobs as overrides; a knob left at ``None`` takes the scale's value.

Each knob has a type, read off its preset values (bool, int, float, str, or a list, tuple or dict of those; a
tuple of the same length at every scale has that fixed length; a preset of ``None`` is unset), and the chapter
declares its valid values::

    config = make_config(PRESETS, seeds=SEED, n_test=COUNT, delta=FRACTION, gamma=Range(gt=0, le=1),
                         prm_preset=one_of(*tinylm.PRESETS))

A range on a list, tuple or dict applies to each item (a fixed-length tuple may take one range per position); a
list that is non-empty at every scale must stay non-empty. An override is coerced to the knob's type where that
loses nothing, as papermill's ``-p`` values need (``"5"`` or ``5.0`` to an int, ``5`` or ``"0.3"`` to a float,
``"[0, 1]"`` to a list, a list to a tuple); anything else (``"abc"`` for a number, ``2.5`` for a count, ``True``
for a number, NaN or infinity, a value out of range) is a ``ValueError`` that names the knob, the value and
what is valid. Preset values are checked when the table is built and returned unchanged.
"""

from __future__ import annotations

import ast
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

SCALES = ("smoke", "ci", "full")


@dataclass(frozen=True)
class Range:
    """The valid values of a number (bounds ``ge``, ``gt``, ``le``, ``lt``) or of a string or integer
    (``choices``)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple = ()

    def admits(self, x: Any) -> bool:
        if self.choices:
            return x in self.choices
        return ((self.ge is None or x >= self.ge) and (self.gt is None or x > self.gt)
                and (self.le is None or x <= self.le) and (self.lt is None or x < self.lt))

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        lo, left = (self.ge, "[") if self.gt is None else (self.gt, "(")
        hi, right = (self.le, "]") if self.lt is None else (self.lt, ")")
        if lo is not None and hi is not None:
            return f"in {left}{lo:g}, {hi:g}{right}"
        bounds = ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
        return " ".join(f"{op} {b:g}" for op, b in bounds if b is not None)


def one_of(*choices: str | int) -> Range:
    """A string or integer knob (or each item of a list of them) that must be one of `choices`."""
    return Range(choices=tuple(choices))


COUNT = Range(ge=1)  # a number of things: steps, examples, sizes, repeats
SEED = Range(ge=0)  # a random seed
INDEX = Range(ge=0)  # a position: a layer, a step
NONNEGATIVE = Range(ge=0)  # a weight or noise level that may be zero
POSITIVE = Range(gt=0)  # a learning rate, temperature or scale
FRACTION = Range(ge=0, le=1)  # a share or a probability

_NAMES = {bool: "a boolean", int: "an integer", float: "a finite number", str: "a string"}


def _kind(value: Any) -> type:
    for kind in (bool, str, list, tuple, dict):
        if isinstance(value, kind):
            return kind
    if isinstance(value, numbers.Integral):
        return int
    if isinstance(value, numbers.Real):
        return float
    raise TypeError(f"unsupported preset value {value!r} of type {type(value).__name__}")


@dataclass(frozen=True)
class Knob:
    """One setting's type and valid values: a scalar `kind` with range `valid`, or a list, tuple or dict whose
    items are `item` (a fixed-length tuple has `length`, and may have one range per position in `positions`)."""

    name: str
    kind: type
    valid: Range | None = None
    item: Knob | None = None
    length: int | None = None
    nonempty: bool = False
    positions: tuple[Range, ...] = ()

    def __str__(self) -> str:
        if self.kind is object:
            return "any value"
        if self.item is None and self.kind in _NAMES:
            if self.valid and self.valid.choices:
                return str(self.valid)
            return f"{_NAMES[self.kind]} {self.valid}".rstrip() if self.valid else _NAMES[self.kind]
        size = "non-empty " if self.nonempty else (f"{self.length}-" if self.length else "")
        container = {list: "list", tuple: "tuple", dict: "dict with string keys"}[self.kind]
        if self.item is None:
            return f"a {size}{container}"
        if self.positions:
            each = "; ".join(f"item {i} {Knob(self.name, self.item.kind, r)}" for i, r in enumerate(self.positions))
            return f"a {size}{container}: {each}"
        return f"a {size}{container}, each {'value' if self.kind is dict else 'item'} {self.item}"

    def coerce(self, value: Any) -> Any:
        """`value` as this knob's type, or ValueError if that would lose information or it is out of range."""
        if self.kind is object:
            return value
        if isinstance(value, str) and self.kind is not str:
            value = _literal(value)
        if self.kind in _NAMES:
            value = _scalar(self.kind, value)
            if self.valid is not None and not self.valid.admits(value):
                raise ValueError
            return value
        if self.kind is dict:
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise ValueError
            return {k: self.item.coerce(v) if self.item else v for k, v in value.items()}
        if not isinstance(value, (list, tuple)) or (self.nonempty and not value) or \
                (self.length is not None and len(value) != self.length):
            raise ValueError
        items = [self.item.coerce(v) if self.item else v for v in value]
        if any(not r.admits(v) for r, v in zip(self.positions, items)):
            raise ValueError
        return self.kind(items)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ValueError from None


def _scalar(kind: type, x: Any) -> Any:
    if kind is str:
        if isinstance(x, str):
            return x
    elif kind is bool:
        if isinstance(x, bool) or type(x).__name__ == "bool_":
            return bool(x)
    elif isinstance(x, numbers.Real) and not isinstance(x, bool) and type(x).__name__ != "bool_":
        if math.isfinite(x):
            if kind is float:
                return float(x)
            if isinstance(x, numbers.Integral) or float(x).is_integer():
                return int(x)
    raise ValueError


def _infer(name: str, values: list) -> Knob:
    """The knob whose preset values (at every scale, or every item of them) are `values`."""
    values = [v for v in values if v is not None]
    kinds = {_kind(v) for v in values}
    if not kinds:
        return Knob(name, object)
    if kinds == {int, float}:
        kinds = {float}
    if len(kinds) != 1:
        raise ValueError(f"setting {name!r} has values of different types across scales: {values!r}")
    kind = kinds.pop()
    if kind in _NAMES:
        return Knob(name, kind)
    items = [x for v in values for x in (v.values() if kind is dict else v)]
    lengths = {len(v) for v in values}
    return Knob(name, kind, item=_infer(name, items) if items else None, nonempty=kind is list and 0 not in lengths,
                length=lengths.pop() if kind is tuple and len(lengths) == 1 else None)


def _with_range(knob: Knob, valid: Range | tuple[Range, ...]) -> Knob:
    """`knob` with its declared range: on the knob itself, on its items, or per position of a fixed tuple."""
    if isinstance(valid, tuple):
        if knob.kind is not tuple or knob.length != len(valid) or knob.item is None:
            raise ValueError(f"setting {knob.name!r}: one range per position needs a tuple of {len(valid)} items")
        return Knob(knob.name, tuple, item=knob.item, length=knob.length, positions=valid)
    if knob.item is not None:
        return Knob(knob.name, knob.kind, item=_with_range(knob.item, valid), length=knob.length,
                    nonempty=knob.nonempty)
    if knob.kind is object and not valid.choices:  # unset at every scale: a numeric range makes it a number
        return Knob(knob.name, float, valid=valid)
    if knob.kind not in ((str, int) if valid.choices else (int, float)):
        raise ValueError(f"setting {knob.name!r} ({_NAMES.get(knob.kind, knob.kind.__name__)}) cannot take range "
                         f"{valid}")
    return Knob(knob.name, knob.kind, valid=valid)


class Config(Mapping):
    """An immutable bag of settings, read as attributes (`cfg.n_steps`) or as a mapping."""

    def __init__(self, scale: str, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", dict(values, scale=scale))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"config has no setting {name!r}; settings: {', '.join(self._values)}") from None

    def __setattr__(self, name, value):
        raise AttributeError("Config is immutable; pass overrides to config(scale, ...) instead")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Config({inner})"


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; valid scales: {', '.join(SCALES)}")
    return scale


def check(knob: Knob, value: Any) -> Any:
    """`value` coerced to `knob`'s type; a ValueError naming the knob, the value and what is valid if it cannot be."""
    try:
        return knob.coerce(value)
    except (ValueError, TypeError):
        raise ValueError(f"setting {knob.name}={value!r} is not valid: {knob.name} must be {knob}") from None


def resolve(presets: Mapping[str, Mapping[str, Any]], scale: str, overrides: Mapping[str, Any],
            knobs: Mapping[str, Knob] | None = None) -> Config:
    """The settings of `scale` with `overrides` applied (``None`` overrides are ignored), each override checked
    against its knob (inferred from `presets` when `knobs` is not given)."""
    values = dict(presets[check_scale(scale)])
    unknown = sorted(set(overrides) - set(values))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(map(repr, unknown))}; valid settings: {', '.join(values)}")
    knobs = knobs if knobs is not None else infer_knobs(presets)
    values.update({k: check(knobs[k], v) for k, v in overrides.items() if v is not None})
    return Config(scale, values)


def infer_knobs(presets: Mapping[str, Mapping[str, Any]], **valid: Range | tuple[Range, ...]) -> dict[str, Knob]:
    """Every setting's knob: its type read off the presets at every scale, with the declared ranges `valid`."""
    names = list(presets[SCALES[0]])
    unknown = sorted(set(valid) - set(names))
    if unknown:
        raise ValueError(f"range(s) for unknown setting(s) {', '.join(map(repr, unknown))}")
    knobs = {}
    for name in names:
        knob = _infer(name, [presets[s][name] for s in SCALES])
        knobs[name] = _with_range(knob, valid[name]) if name in valid else knob
    return knobs


def make_config(presets: Mapping[str, Mapping[str, Any]], **valid: Range | tuple[Range, ...]) -> Callable[..., Config]:
    """Build a chapter's `config(scale, **overrides)` from its preset table (checked to cover every scale, with
    the same keys at each) and the valid values of its knobs (`name=Range(...)`; see the module docstring). Every
    preset value must be valid. The knobs are `config.knobs`."""
    missing = [s for s in SCALES if s not in presets]
    if missing:
        raise ValueError(f"presets lack scale(s) {missing}")
    keys = {s: set(presets[s]) for s in SCALES}
    if len({frozenset(k) for k in keys.values()}) != 1:
        raise ValueError(f"presets must have the same keys at every scale, got {keys}")
    knobs = infer_knobs(presets, **valid)
    for scale in SCALES:
        for name, value in presets[scale].items():
            if value is None:  # a preset may leave a knob unset
                continue
            try:
                check(knobs[name], value)
            except ValueError as err:
                raise ValueError(f"preset {scale!r}: {err}") from None

    def config(scale: str = "ci", **overrides: Any) -> Config:
        return resolve(presets, scale, overrides, knobs)

    config.__doc__ = "Settings at `scale` (one of " + ", ".join(SCALES) + "), with keyword overrides."
    config.knobs = knobs
    return config
