"""Claims: the evidence contract by which the book decides whether a paper's statement holds at our scale.

A chapter module declares each claim before any experiment runs: the paper's statement, the *effects* that decide
it (each a statistic over paired units, usually seeds, with its confidence interval), the *preconditions* that
show the experiment could have seen the effect, and two example measurements, one on which the claim must come
out reproduced and one on which it must not::

    EFFICIENCY = Claim(
        chapter="rsd", id="efficiency",
        paper_statement="RSD needs fewer FLOPs than target-only decoding at equal accuracy",
        paper_value="up to 4.4x fewer FLOPs",
        criterion="the paired FLOP ratio RSD / target-only is below 1 (95% t interval)",
        effects=[Effect("flop_ratio", samples="flop_ratio", direction="less", null=1.0, min_effect=0.9)],
        preconditions=[at_least("target_learns", "target_accuracy", 0.85)],
        examples=({"flop_ratio": [0.5, 0.6, 0.55], "target_accuracy": 0.9},
                  {"flop_ratio": [0.95, 1.0, 1.02], "target_accuracy": 0.9}),
    )

and the notebook calls ``check(EFFICIENCY, measured={...}, seeds=[0, 1, 2], scale=scale)``. The verdict is one of

- ``reproduced``: every precondition holds and every effect's interval excludes "no effect" on the paper's side;
- ``refuted``: every precondition holds and some effect's interval lies wholly short of the paper's smallest
  effect (``min_effect``; on the wrong side of ``null`` when none is declared), or, for an `Equivalence`, wholly
  outside its margin;
- ``inconclusive``: anything else: a failed precondition, fewer than two paired units, an interval that decides
  nothing, or a criterion that also comes out reproduced on the claim's null control.

The verdict is computed, never written by hand, and the record (measurements, preconditions, effects with their
intervals, null, verdict, reason) lands in ``book/_results/<chapter>.json``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock
from scipy import stats

from .config import check_scale
from .paths import results_dir

REPRODUCED = "reproduced"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
VERDICTS = (REPRODUCED, REFUTED, INCONCLUSIVE)

#: every Claim constructed, by (chapter, id): the falsifiability test walks it
REGISTRY: dict[tuple[str, str], "Claim"] = {}

_EFFECT_SCHEMA = {
    "type": "object",
    "required": ["name", "estimate", "ci_low", "ci_high", "n", "method", "verdict"],
    "properties": {
        "name": {"type": "string"}, "estimate": {"type": ["number", "null"]}, "ci_low": {"type": ["number", "null"]},
        "ci_high": {"type": ["number", "null"]}, "n": {"type": "integer"}, "method": {"type": "string"},
        "verdict": {"enum": list(VERDICTS)}, "null": {"type": "number"}, "min_effect": {"type": "number"},
        "direction": {"enum": ["greater", "less", "equivalent"]}, "margin": {"type": "number"},
    },
}

RESULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["chapter", "records"],
    "additionalProperties": False,
    "properties": {
        "chapter": {"type": "string"},
        "records": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["chapter", "claim_id", "paper_statement", "paper_value", "criterion", "measured",
                             "our_value", "verdict", "reason", "preconditions", "effect", "effects", "seeds",
                             "scale", "notebook", "recorded_at"],
                "properties": {
                    "chapter": {"type": "string"},
                    "claim_id": {"type": "string", "minLength": 1},
                    "paper_statement": {"type": "string", "minLength": 1},
                    "paper_value": {"type": "string"},
                    "criterion": {"type": "string", "minLength": 1},
                    "measured": {"type": "object"},
                    "our_value": {"type": "string"},
                    "verdict": {"enum": list(VERDICTS)},
                    "reason": {"type": "string"},
                    "preconditions": {"type": "array", "items": {
                        "type": "object", "required": ["id", "holds", "detail"], "additionalProperties": False,
                        "properties": {"id": {"type": "string"}, "holds": {"type": "boolean"},
                                       "detail": {"type": "string"}}}},
                    "effect": {"anyOf": [{"type": "null"}, _EFFECT_SCHEMA]},
                    "effects": {"type": "array", "items": _EFFECT_SCHEMA},
                    "null": {"type": "object", "required": ["measured", "verdict"],
                             "properties": {"measured": {"type": "object"}, "verdict": {"enum": list(VERDICTS)},
                                            "effects": {"type": "array"}}},
                    "margin": {"type": "number"},
                    "seeds": {"type": "array", "items": {"type": "integer"}},
                    "scale": {"enum": ["smoke", "ci", "full"]},
                    "notebook": {"type": "string"},
                    "recorded_at": {"type": "string"},
                },
            },
        },
    },
}


class ClaimError(ValueError):
    """A claim declared or checked with bad input; the message names the claim and what is wrong."""


# --------------------------------------------------------------------------------------------- measurements


def _lookup(claim_id: str, what: str, source: str | Callable[[Mapping], Any], m: Mapping[str, Any]) -> Any:
    try:
        return m[source] if isinstance(source, str) else source(m)
    except KeyError as missing:
        raise ClaimError(f"claim {claim_id!r}: {what} needs measured value {missing}; got {sorted(m)}") from None


def _finite(claim_id: str, name: str, values: Any) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=float))
    if arr.ndim != 1:
        raise ClaimError(f"claim {claim_id!r}: effect {name!r} needs a flat list of paired values, got shape "
                         f"{arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ClaimError(f"claim {claim_id!r}: effect {name!r} has a non-finite value: {arr.tolist()}")
    return arr


def t_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean of the paired values `x` and its two-sided Student t interval (scipy); a zero spread gives a point."""
    if len(x) < 2:
        return (float(x[0]) if len(x) else math.nan), math.nan, math.nan
    mean = float(np.mean(x))
    if np.ptp(x) == 0:
        return mean, mean, mean
    lo, hi = stats.ttest_1samp(x, 0.0).confidence_interval(confidence)
    return mean, float(lo), float(hi)


def bootstrap_interval(x: np.ndarray, confidence: float, statistic: Callable = np.mean
                       ) -> tuple[float, float, float]:
    """`statistic` of `x` and its percentile bootstrap interval (scipy.stats.bootstrap, fixed generator)."""
    if len(x) < 2:
        return (float(statistic(x)) if len(x) else math.nan), math.nan, math.nan
    est = float(statistic(x))
    if np.ptp(x) == 0:
        return est, est, est
    res = stats.bootstrap((x,), statistic, confidence_level=confidence, method="percentile", n_resamples=2000,
                          rng=np.random.default_rng(0))
    return est, float(res.confidence_interval.low), float(res.confidence_interval.high)


def binomial_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """The share of 1s among the 0/1 outcomes `x` and its exact (Clopper-Pearson) interval (statsmodels): 0 of 6
    gives [0, 0.46], where a t interval over six zeros would collapse to a point."""
    from statsmodels.stats.proportion import proportion_confint

    if not np.isin(x, (0.0, 1.0)).all():
        raise ClaimError(f"a binomial interval needs 0/1 outcomes, got {x.tolist()}")
    if len(x) < 2:
        return (float(x[0]) if len(x) else math.nan), math.nan, math.nan
    k, n = int(x.sum()), len(x)
    lo, hi = proportion_confint(k, n, alpha=1 - confidence, method="beta")
    return k / n, float(lo), float(hi)


INTERVALS = {"t": (t_interval, "paired t"), "bootstrap": (bootstrap_interval, "percentile bootstrap"),
             "binomial": (binomial_interval, "exact binomial (Clopper-Pearson)")}


# ------------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Effect:
    """A directional effect: `samples` (a measured key, or a function of the measurements) gives one value per
    paired unit (a per-seed difference between methods, a per-seed ratio); the claim says their mean lies on the
    `direction` side of `null`. Reproduced when the interval excludes `null` on that side; refuted when it lies
    wholly short of `min_effect` (the smallest effect the paper's statement implies; `null` when not given).
    `method`: "t" (Student t over the units), "bootstrap" (percentile), or "binomial" for a share of 0/1 outcomes
    (exact interval: a share of runs with no spread is not known to a point)."""

    name: str
    samples: str | Callable[[Mapping], Sequence[float]]
    direction: str = "greater"
    null: float = 0.0
    min_effect: float | None = None
    method: str = "t"
    confidence: float = 0.95

    def __post_init__(self):
        if self.direction not in ("greater", "less"):
            raise ClaimError(f"effect {self.name!r}: direction {self.direction!r} is not 'greater' or 'less'")
        if self.method not in INTERVALS:
            raise ClaimError(f"effect {self.name!r}: method {self.method!r} is not one of {', '.join(INTERVALS)}")
        if self.min_effect is not None and self._beyond(self.null, self.min_effect):
            raise ClaimError(f"effect {self.name!r}: min_effect {self.min_effect} lies on the null's side of "
                             f"null {self.null}")

    def _beyond(self, a: float, b: float) -> bool:
        """a is strictly on the paper's side of b."""
        return a > b if self.direction == "greater" else a < b

    def decide(self, claim_id: str, m: Mapping[str, Any]) -> dict:
        x = _finite(claim_id, self.name, _lookup(claim_id, f"effect {self.name!r}", self.samples, m))
        interval, label = INTERVALS[self.method]
        try:
            est, lo, hi = interval(x, self.confidence)
        except ClaimError as e:
            raise ClaimError(f"claim {claim_id!r}: effect {self.name!r}: {e}") from None
        near, far = (lo, hi) if self.direction == "greater" else (hi, lo)
        bar = self.null if self.min_effect is None else self.min_effect
        if len(x) < 2:
            verdict = INCONCLUSIVE
        elif self._beyond(near, self.null):
            verdict = REPRODUCED
        elif self._beyond(bar, far):
            verdict = REFUTED
        else:
            verdict = INCONCLUSIVE
        out = {"name": self.name, "estimate": est, "ci_low": lo, "ci_high": hi, "n": int(len(x)),
               "method": f"{label}, {self.confidence:.0%}", "direction": self.direction, "null": self.null,
               "verdict": verdict}
        if self.min_effect is not None:
            out["min_effect"] = self.min_effect
        return out


@dataclass(frozen=True)
class Equivalence:
    """A "no difference" effect: the mean of the paired values `samples` lies within ±`margin` of zero, decided by
    two one-sided t tests (TOST, statsmodels' ``ttost_paired`` on the differences) at level `alpha`. Reproduced when
    TOST rejects both one-sided nulls (equivalently, the 1 - 2·alpha interval lies inside the margin); refuted when
    the 1 - 2·alpha interval lies wholly outside the margin."""

    name: str
    samples: str | Callable[[Mapping], Sequence[float]]
    margin: float
    alpha: float = 0.05

    def __post_init__(self):
        if not self.margin > 0:
            raise ClaimError(f"equivalence {self.name!r}: margin must be positive, got {self.margin}")

    def decide(self, claim_id: str, m: Mapping[str, Any]) -> dict:
        from statsmodels.stats.weightstats import ttost_paired

        x = _finite(claim_id, self.name, _lookup(claim_id, f"equivalence {self.name!r}", self.samples, m))
        est, lo, hi = t_interval(x, 1 - 2 * self.alpha)
        if len(x) < 2:
            verdict = INCONCLUSIVE
        elif np.ptp(x) == 0:
            verdict = REPRODUCED if abs(est) < self.margin else REFUTED
        else:
            p = ttost_paired(x, np.zeros_like(x), -self.margin, self.margin)[0]
            verdict = REPRODUCED if p < self.alpha else (
                REFUTED if lo > self.margin or hi < -self.margin else INCONCLUSIVE)
        return {"name": self.name, "estimate": est, "ci_low": lo, "ci_high": hi, "n": int(len(x)),
                "method": f"TOST (paired t), {1 - 2 * self.alpha:.0%} interval", "direction": "equivalent",
                "margin": self.margin, "verdict": verdict}


@dataclass(frozen=True)
class Precondition:
    """A named check that the experiment could see the effect: `value` (a measured key or a function of the
    measurements) passes `test`; `rule` says it in words ("the target is right on >= 85% of the test mix")."""

    id: str
    rule: str
    value: str | Callable[[Mapping], Any]
    test: Callable[[Any], bool]

    def evaluate(self, claim_id: str, m: Mapping[str, Any]) -> dict:
        v = _lookup(claim_id, f"precondition {self.id!r}", self.value, m)
        holds = bool(self.test(v))
        return {"id": self.id, "holds": holds, "detail": f"{self.rule}; measured {_fmt(v)}"}


def _bound(id: str, key: str | Callable, bound: float, rule: str | None, low: bool) -> Precondition:
    agg, sign = (min, ">=") if low else (max, "<=")
    name = key if isinstance(key, str) else id

    def value(m):
        v = np.atleast_1d(np.asarray(m[key] if isinstance(key, str) else key(m), dtype=float))
        return agg(v.tolist()) if v.size and np.all(np.isfinite(v)) else math.nan  # no data never holds

    return Precondition(id, rule or f"{name} {sign} {bound:g}", value,
                        (lambda v: v >= bound) if low else (lambda v: v <= bound))


def at_least(id: str, key: str | Callable, bound: float, rule: str | None = None) -> Precondition:
    """Precondition: the measured value (its minimum, for a per-seed list) is at least `bound`."""
    return _bound(id, key, bound, rule, low=True)


def at_most(id: str, key: str | Callable, bound: float, rule: str | None = None) -> Precondition:
    """Precondition: the measured value (its maximum, for a per-seed list) is at most `bound`."""
    return _bound(id, key, bound, rule, low=False)


@dataclass(frozen=True)
class Claim:
    """One claim of a paper, the effects that decide it, the preconditions that make it decidable, and two example
    measurements: ``examples = (must_reproduce, must_not_reproduce)``; the second must meet every precondition, so
    the criterion itself is what fails on it. ``needs_null`` claims are checked only beside a null control."""

    chapter: str
    id: str
    paper_statement: str
    paper_value: str
    criterion: str
    effects: Sequence[Effect | Equivalence]
    preconditions: Sequence[Precondition]
    examples: tuple[Mapping[str, Any], Mapping[str, Any]]
    needs_null: bool = False
    null_description: str = ""

    def __post_init__(self):
        where = f"claim {self.chapter}.{self.id}"
        if not self.effects:
            raise ClaimError(f"{where} declares no effect")
        if not self.preconditions:
            raise ClaimError(f"{where} declares no precondition")
        if not (isinstance(self.examples, tuple) and len(self.examples) == 2):
            raise ClaimError(f"{where} needs examples=(measurement that reproduces, measurement that does not)")
        if self.needs_null and not self.null_description:
            raise ClaimError(f"{where} needs a null control and must say what it is (null_description)")
        object.__setattr__(self, "effects", tuple(self.effects))
        object.__setattr__(self, "preconditions", tuple(self.preconditions))
        REGISTRY[(self.chapter, self.id)] = self

    def decide(self, measured: Mapping[str, Any], null: Mapping[str, Any] | None = None) -> dict:
        """The verdict on `measured` (and on `null`, when given) with its reason, preconditions and effects."""
        pre = [p.evaluate(self.id, measured) for p in self.preconditions]
        effects = [e.decide(self.id, measured) for e in self.effects]
        verdicts = [e["verdict"] for e in effects]
        failed = [p for p in pre if not p["holds"]]
        out: dict[str, Any] = {"preconditions": pre, "effects": effects}
        null_verdict = None
        if null is not None:
            null_effects = [e.decide(self.id, null) for e in self.effects]
            null_verdict = REPRODUCED if all(e["verdict"] == REPRODUCED for e in null_effects) else (
                REFUTED if any(e["verdict"] == REFUTED for e in null_effects) else INCONCLUSIVE)
            out["null"] = {"measured": _jsonable(dict(null)), "verdict": null_verdict, "effects": null_effects}
        if failed:
            verdict = INCONCLUSIVE
            reason = "precondition failed: " + "; ".join(f"{p['id']} ({p['detail']})" for p in failed)
        elif null_verdict == REPRODUCED:
            verdict, reason = INCONCLUSIVE, (f"the criterion also passes on its null control "
                                             f"({self.null_description})")
        elif all(v == REPRODUCED for v in verdicts):
            verdict, reason = REPRODUCED, "every interval excludes no effect on the paper's side"
        elif any(v == REFUTED for v in verdicts):
            verdict = REFUTED
            reason = "; ".join(f"{e['name']}: {_interval(e)} excludes the paper's effect" for e in effects
                               if e["verdict"] == REFUTED)
        else:
            verdict = INCONCLUSIVE
            reason = "; ".join(
                f"{e['name']}: " + (f"only {e['n']} paired unit{'s' * (e['n'] != 1)}" if e["n"] < 2 else f"{_interval(e)} decides "
                                    "nothing") for e in effects if e["verdict"] == INCONCLUSIVE)
        out.update(verdict=verdict, reason=reason)
        return out


def _interval(e: Mapping[str, Any]) -> str:
    return f"{_fmt(e['estimate'])} [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}] ({e['method']}, n={e['n']})"


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    record: dict = field(repr=False)

    @property
    def label(self) -> str:
        return self.record["verdict"]

    @property
    def holds(self) -> bool:
        return self.label == REPRODUCED

    def _repr_markdown_(self) -> str:
        mark = {REPRODUCED: "✅", REFUTED: "❌", INCONCLUSIVE: "❔"}[self.label]
        r = self.record
        lines = [f"**{mark} Claim `{self.claim.id}`: {self.label}.** {self.claim.paper_statement} "
                 f"(paper: {self.claim.paper_value}).", "",
                 f"*Criterion:* {self.claim.criterion}", "", f"*Why:* {r['reason']}.", "",
                 "| | estimate | interval | n | method | verdict |", "|---|---|---|---|---|---|"]
        for e in r["effects"]:
            lines.append(f"| {e['name']} | {_fmt(e['estimate'])} | [{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}] | "
                         f"{e['n']} | {e['method']} | {e['verdict']} |")
        lines += ["", "*Preconditions:* " + "; ".join(
            f"{'✓' if p['holds'] else '✗'} `{p['id']}`: {p['detail']}" for p in r["preconditions"])]
        if "null" in r:
            lines += ["", f"*Null control* ({self.claim.null_description}): the criterion says "
                          f"**{r['null']['verdict']}** there."]
        lines += ["", f"*Measured:* {r['our_value']} (seeds {r['seeds']}, scale `{r['scale']}`)"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Verdict({self.claim.chapter}.{self.claim.id}: {self.label}; {self.record['reason']})"


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _jsonable(value: Any) -> Any:
    """Numbers from numpy/torch become plain floats/ints; NaN becomes None (JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    raise TypeError(f"measured value {value!r} of type {type(value).__name__} is not a number, string or list")


def results_path(chapter: str) -> Path:
    return results_dir() / f"{chapter}.json"


def load_results(chapter: str) -> dict:
    path = results_path(chapter)
    if not path.exists():
        return {"chapter": chapter, "records": []}
    return json.loads(path.read_text())


def check(claim: Claim, measured: Mapping[str, Any], seeds: Sequence[int], scale: str,
          our_value: str | None = None, null: Mapping[str, Any] | None = None) -> Verdict:
    """Decide `claim` on `measured` (and its `null` control), record it in `book/_results/<chapter>.json`, return
    it. `our_value` is the short form shown on the scorecard (default: every measured value). A record for the same
    claim and scale replaces the older one; a check that raises records nothing and keeps every other record."""
    check_scale(scale)
    if claim.needs_null and null is None:
        raise ClaimError(f"claim {claim.chapter}.{claim.id} must be checked beside its null control "
                         f"({claim.null_description}): pass null=")
    measured = _jsonable(dict(measured))
    decision = claim.decide(measured, None if null is None else _jsonable(dict(null)))
    if decision["verdict"] not in VERDICTS:
        raise ClaimError(f"claim {claim.id!r}: verdict {decision['verdict']!r} is not one of {VERDICTS}")
    record = {
        "chapter": claim.chapter,
        "claim_id": claim.id,
        "paper_statement": claim.paper_statement,
        "paper_value": claim.paper_value,
        "criterion": claim.criterion,
        "measured": measured,
        "our_value": our_value if our_value is not None else ", ".join(
            f"{k}={_fmt(v)}" for k, v in measured.items()),
        **decision,
        "effect": decision["effects"][0],
        "seeds": [int(s) for s in seeds],
        "scale": scale,
        "notebook": os.environ.get("ICML25_NOTEBOOK", "interactive"),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    margins = [e["margin"] for e in decision["effects"] if "margin" in e]
    if margins:
        record["margin"] = margins[0]
    record = _jsonable(record)
    _append(record)
    return Verdict(claim, record)


def _rewrite(chapter: str, keep: Callable[[dict], bool], add: Sequence[dict] = ()) -> None:
    """Atomically rewrite a chapter's results file, keeping the records `keep` accepts and adding `add`."""
    path = results_path(chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        data = load_results(chapter)
        data["records"] = [r for r in data["records"] if keep(r)] + list(add)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


def _append(record: dict) -> None:
    key = (record["claim_id"], record["scale"])
    _rewrite(record["chapter"], lambda r: (r["claim_id"], r["scale"]) != key, [record])


def forget_notebook(chapter: str, notebook: str, scale: str) -> None:
    """Drop the records a notebook wrote at `scale` (the builder calls this before re-running it)."""
    if results_path(chapter).exists():
        _rewrite(chapter, lambda r: (r["notebook"], r["scale"]) != (notebook, scale))


def mean_sd(values, sep: str = " ± ") -> str:
    """"mean ± sd" over seeds (population sd, two decimals) of the finite values, "n/a" if there are none: the
    short form of a measurement on the scorecard."""
    v = [float(x) for x in values if x is not None and not math.isnan(x)]
    return f"{statistics.fmean(v):.2f}{sep}{statistics.pstdev(v):.2f}" if v else "n/a"


def examples_behave(claim: Claim) -> None:
    """The falsifiability check: the claim comes out reproduced on its first example and not on its second, and
    the second meets every precondition (so the criterion itself fails there). Raises ClaimError otherwise."""
    good, bad = claim.examples
    where = f"claim {claim.chapter}.{claim.id}"
    got = claim.decide(good)
    if got["verdict"] != REPRODUCED:
        raise ClaimError(f"{where}: its reproducing example comes out {got['verdict']} ({got['reason']})")
    got = claim.decide(bad)
    if got["verdict"] == REPRODUCED:
        raise ClaimError(f"{where}: its non-reproducing example comes out reproduced")
    failed = [p["id"] for p in got["preconditions"] if not p["holds"]]
    if failed:
        raise ClaimError(f"{where}: its non-reproducing example fails preconditions {failed}, so it does not show "
                         "that the criterion can fail")
