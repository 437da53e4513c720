"""Scales and per-chapter configuration.

Every chapter module keeps one table `PRESETS = {"smoke": {...}, "ci": {...}, "full": {...}}` with the same
keys at each scale, and exposes `config(scale, **overrides)` built with :func:`make_config`. A notebook's
parameters cell passes its knobs as overrides; a knob left at ``None`` takes the scale's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

SCALES = ("smoke", "ci", "full")


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


def resolve(presets: Mapping[str, Mapping[str, Any]], scale: str, overrides: Mapping[str, Any]) -> Config:
    """The settings of `scale` with `overrides` applied (``None`` overrides are ignored)."""
    values = dict(presets[check_scale(scale)])
    unknown = sorted(set(overrides) - set(values))
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(map(repr, unknown))}; valid settings: {', '.join(values)}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Config(scale, values)


def make_config(presets: Mapping[str, Mapping[str, Any]]) -> Callable[..., Config]:
    """Build a chapter's `config(scale, **overrides)` from its preset table (checked to cover every scale)."""
    missing = [s for s in SCALES if s not in presets]
    if missing:
        raise ValueError(f"presets lack scale(s) {missing}")
    keys = {s: set(presets[s]) for s in SCALES}
    if len({frozenset(k) for k in keys.values()}) != 1:
        raise ValueError(f"presets must have the same keys at every scale, got {keys}")

    def config(scale: str = "ci", **overrides: Any) -> Config:
        return resolve(presets, scale, overrides)

    config.__doc__ = "Settings at `scale` (one of " + ", ".join(SCALES) + "), with keyword overrides."
    return config
