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

and the notebook calls ``check(EFFICIENCY, measured={...}, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
scale=scale)``. The verdict is one of

- ``reproduced``: every precondition holds, every effect's interval excludes "no effect" on the paper's side and its
  estimate reaches the paper's smallest effect (``min_effect``), and, beside a null control, the real statistic
  beats the null's by a permutation test;
- ``refuted``: every precondition holds and some effect's interval lies wholly short of the paper's smallest
  effect (on the wrong side of ``null`` when none is declared) - *size before sign*: an interval that excludes "no
  effect" but lies wholly below ``min_effect`` is refuted on size - or, for an `Equivalence`, wholly outside its
  margin;
- ``inconclusive``: anything else: a failed precondition, an interval that decides nothing, a real statistic that
  does not beat its null, an interval that cannot be trusted (no spread under a t formula, a bootstrap of fewer
  than ``BOOTSTRAP_MIN_UNITS`` units), or fewer than ``MIN_UNITS`` paired units where no power calculation from
  calibration runs (``design_sd``) shows that fewer decide. An inconclusive record whose preconditions hold says
  how many paired units the observed spread would need (its *power line*).

Contract v2 also keeps calibration apart from verdicts: `check` refuses verdict seeds that overlap the seeds any
tuning or regime choice used (``calibration_seeds``), and the record keeps both.

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
        "note": {"type": "string"}, "sd": {"type": ["number", "null"]},
        "units_needed": {"type": ["integer", "null"]}, "design_sd": {"type": "number"},
        "planned_units": {"type": ["integer", "null"]}, "run_sd": {"type": "number"},
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
                    "null": {"type": "object", "required": ["measured", "verdict", "comparisons"],
                             "properties": {"measured": {"type": "object"}, "verdict": {"enum": list(VERDICTS)},
                                            "effects": {"type": "array"}, "comparisons": {"type": "array"}}},
                    "margin": {"type": "number"},
                    "seeds": {"type": "array", "items": {"type": "integer"}},
                    "calibration_seeds": {"anyOf": [{"type": "null"},
                                                    {"type": "array", "items": {"type": "integer"}}]},
                    "contract": {"type": "integer"},
                    "units_needed": {"type": ["integer", "null"]},
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


#: contract v2: a decisive verdict rests on at least this many paired units, unless a power calculation from the
#: effect's calibration spread (``design_sd``) shows that fewer decide
MIN_UNITS = 8
#: a percentile bootstrap of fewer units under-covers (about 74% for a nominal 95% at n = 3): below this it decides
#: nothing
BOOTSTRAP_MIN_UNITS = 20
#: the power that a power line plans for, and the level of the null comparison
POWER = 0.8
NULL_ALPHA = 0.05


def t_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean of the paired values `x` and its two-sided Student t interval (scipy). With no spread there is no t
    interval (it would be a single point, certain of nothing): the bounds are NaN."""
    mean = float(np.mean(x)) if len(x) else math.nan
    if len(x) < 2 or np.ptp(x) == 0:
        return mean, math.nan, math.nan
    lo, hi = stats.ttest_1samp(x, 0.0).confidence_interval(confidence)
    return mean, float(lo), float(hi)


def bootstrap_interval(x: np.ndarray, confidence: float, statistic: Callable = np.mean
                       ) -> tuple[float, float, float]:
    """`statistic` of `x` and its percentile bootstrap interval (scipy.stats.bootstrap, fixed generator); NaN bounds
    below `BOOTSTRAP_MIN_UNITS` units, where the percentile interval under-covers, and with no spread."""
    est = float(statistic(x)) if len(x) else math.nan
    if len(x) < BOOTSTRAP_MIN_UNITS or np.ptp(x) == 0:
        return est, math.nan, math.nan
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


#: up to this many units a sign-flip interval enumerates every sign pattern (65,536 at 16)
SIGN_FLIP_EXACT_UNITS = 16


def sign_flip_p(d: np.ndarray, alternative: str = "two-sided") -> float:
    """p value of the sign-flip permutation test that the paired differences `d` centre on 0, against `alternative`
    ("two-sided", "greater", "less"; scipy.stats.permutation_test: every one of the 2^n sign patterns up to
    `SIGN_FLIP_EXACT_UNITS` units, 99,999 drawn with a fixed generator beyond). Flipping a unit's sign is swapping
    its pair's two values, so this is also the paired permutation test of two samples."""
    res = stats.permutation_test((np.asarray(d, dtype=float),), np.mean, permutation_type="samples",
                                 alternative=alternative, vectorized=True, rng=np.random.default_rng(0),
                                 n_resamples=math.inf if len(d) <= SIGN_FLIP_EXACT_UNITS else 99_999)
    return float(res.pvalue)


def sign_flip_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean of the paired values `x` and its permutation interval: the shifts μ that the two-sided sign-flip test of
    x - μ (`sign_flip_p`) does not reject at 1 - `confidence`, found by bisection from the mean outwards. Assumes
    the units are symmetric about their centre, not normal. NaN bounds when even the most extreme of 2^n patterns could not reject (n < 6 at 95%) or with no spread."""
    mean = float(np.mean(x)) if len(x) else math.nan
    alpha = 1 - confidence
    if len(x) < 2 or np.ptp(x) == 0 or 2.0 ** (1 - len(x)) > alpha:
        return mean, math.nan, math.nan

    def accepted(mu: float) -> bool:
        return sign_flip_p(x - mu) > alpha

    def edge(outside: float) -> float:
        inside = mean
        for _ in range(40):  # 2^-40 of the range: far below any reported digit
            mid = (inside + outside) / 2
            inside, outside = (mid, outside) if accepted(mid) else (inside, mid)
        return inside

    reach = float(np.ptp(x))
    return mean, edge(float(np.min(x)) - reach), edge(float(np.max(x)) + reach)


def run_widened_interval(x: np.ndarray, run_sd: float, confidence: float) -> tuple[float, float]:
    """The t interval of the mean of `x` with a random run effect of sd `run_sd` added to its standard error:
    mean +- t_{n-1, (1+confidence)/2} sqrt(var(x) / n + run_sd^2)."""
    half = stats.t.ppf((1 + confidence) / 2, len(x) - 1) * math.hypot(np.std(x, ddof=1) / math.sqrt(len(x)), run_sd)
    return float(np.mean(x) - half), float(np.mean(x) + half)


def between_run_sd(means, sds, units: int) -> float:
    """The sd of an effect shared by every unit of one run (a build, a process), from runs of `units` units each,
    given each run's mean and sd (ddof 1) over its units: the one-way random-effects estimate (method of moments)
    sqrt(max(0, (MS_between - MS_within) / units)), MS_between = units var(means), MS_within the mean of sd^2.
    What `Effect(run_sd=...)` takes, measured on calibration runs that are not verdicts."""
    ms_between = units * float(np.var(means, ddof=1))
    ms_within = float(np.mean(np.square(sds)))
    return math.sqrt(max(0.0, (ms_between - ms_within) / units))


INTERVALS = {"t": (t_interval, "paired t"), "bootstrap": (bootstrap_interval, "percentile bootstrap"),
             "binomial": (binomial_interval, "exact binomial (Clopper-Pearson)"),
             "sign_flip": (sign_flip_interval, "sign-flip permutation")}


def _no_interval_note(x: np.ndarray, method: str) -> str:
    """Why `x` has no interval under `method`."""
    if len(x) < 2:
        return f"only {len(x)} paired unit{'s' * (len(x) != 1)}"
    if method == "sign_flip" and np.ptp(x) > 0:
        return (f"no sign-flip test of {len(x)} units can reject at this level (the most extreme of the 2^{len(x)} "
                "sign patterns is too likely): use more units or a t interval")
    if method == "bootstrap" and len(x) < BOOTSTRAP_MIN_UNITS:
        return (f"a percentile bootstrap of {len(x)} units under-covers (it needs at least {BOOTSTRAP_MIN_UNITS}); "
                "use a t or an exact interval")
    return (f"all {len(x)} units give {_fmt(float(x[0]))}: with no spread a t interval would be a single point, so "
            "nothing is decided (a discrete statistic needs an exact method, e.g. method='binomial')")


def units_needed(sd: float, delta: float, two_sided_alpha: float = 0.05, power: float = POWER) -> int | None:
    """Paired units a one-sample test needs to see a mean shift `delta` with spread `sd` at level `two_sided_alpha`
    and the given power (normal approximation: n = ((z_{1-a/2} + z_{power}) sd / delta)^2); None if undefined."""
    if not (sd > 0 and delta > 0 and math.isfinite(sd) and math.isfinite(delta)):
        return None
    z = stats.norm.ppf(1 - two_sided_alpha / 2) + stats.norm.ppf(power)
    return max(2, math.ceil((z * sd / delta) ** 2))


def _unit_floor(n: int, planned: int | None) -> str | None:
    """Why `n` paired units cannot carry a decisive verdict (None if they can): fewer than `MIN_UNITS`, unless the
    calibration power calculation `planned` says that n suffice."""
    if n >= MIN_UNITS or (planned is not None and n >= planned):
        return None
    plan = (f"the calibration spread asks for {planned}" if planned is not None else
            "no calibration spread (design_sd) shows that fewer decide")
    return f"only {n} paired units: a decisive verdict needs {MIN_UNITS} ({plan})"


#: a size-undecided power line asking for more than this many times the units run is not a plan: the estimate sits
#: on the paper's smallest effect, and the record says so instead of printing the number
ON_THE_BAR = 100


def _with_floor(need: int | None, floor: str | None, planned: int | None) -> int | None:
    """The units a verdict held back by the unit floor needs: at least what the floor asks, whatever the spread."""
    if not floor:
        return need
    return max(need or 0, MIN_UNITS if planned is None else min(MIN_UNITS, planned))


# ------------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Effect:
    """A directional effect: `samples` (a measured key, or a function of the measurements) gives one value per
    paired unit (a per-seed difference between methods, a per-seed ratio); the claim says their mean lies on the
    `direction` side of `null`, by at least `min_effect` (the smallest effect the paper's statement implies).

    Size before sign: *refuted* when the interval lies wholly short of `min_effect` (of `null` when none is given),
    even if it excludes `null`; *reproduced* when it excludes `null` on the paper's side and the estimate reaches
    `min_effect`. `method`: "t" (Student t over the units), "bootstrap" (percentile, only from
    `BOOTSTRAP_MIN_UNITS` units), or "binomial" for a share of 0/1 outcomes (exact interval). `design_sd`: the
    sd of the paired values measured on calibration runs; it lets fewer than `MIN_UNITS` units decide when a power
    calculation at `min_effect` shows that they suffice. `run_sd` (method "t" only): for units all measured within
    one run (the timing blocks of one build), the sd of a run's mean between identical runs, measured on
    calibration runs: what moves every unit of a run alike (the machine's state over minutes) is not in their
    spread, so the interval is mean +- t_{n-1} sqrt(sd^2 / n + run_sd^2), a random run effect added to the units'
    standard error, and no number of units within one run narrows it below the run's own spread."""

    name: str
    samples: str | Callable[[Mapping], Sequence[float]]
    direction: str = "greater"
    null: float = 0.0
    min_effect: float | None = None
    method: str = "t"
    confidence: float = 0.95
    design_sd: float | None = None
    run_sd: float | None = None

    def __post_init__(self):
        if self.direction not in ("greater", "less"):
            raise ClaimError(f"effect {self.name!r}: direction {self.direction!r} is not 'greater' or 'less'")
        if self.method not in INTERVALS:
            raise ClaimError(f"effect {self.name!r}: method {self.method!r} is not one of {', '.join(INTERVALS)}")
        if self.min_effect is not None and self._beyond(self.null, self.min_effect):
            raise ClaimError(f"effect {self.name!r}: min_effect {self.min_effect} lies on the null's side of "
                             f"null {self.null}")
        if self.design_sd is not None and not (self.design_sd > 0 and self.min_effect not in (None, self.null)):
            raise ClaimError(f"effect {self.name!r}: design_sd needs a positive value and a min_effect away from "
                             f"the null to plan for (got design_sd={self.design_sd}, min_effect={self.min_effect})")
        if self.run_sd is not None and not (self.run_sd > 0 and self.method == "t"):
            raise ClaimError(f"effect {self.name!r}: run_sd needs a positive value and method 't' (got "
                             f"run_sd={self.run_sd}, method={self.method!r})")

    def _beyond(self, a: float, b: float) -> bool:
        """a is strictly on the paper's side of b."""
        return a > b if self.direction == "greater" else a < b

    @property
    def planned_units(self) -> int | None:
        """Units the calibration spread needs to see `min_effect` (None without `design_sd`)."""
        if self.design_sd is None:
            return None
        return units_needed(self.design_sd, abs(self.min_effect - self.null), 1 - self.confidence)

    def samples_of(self, claim_id: str, m: Mapping[str, Any]) -> np.ndarray:
        return _finite(claim_id, self.name, _lookup(claim_id, f"effect {self.name!r}", self.samples, m))

    def decide(self, claim_id: str, m: Mapping[str, Any], unit_floor: bool = True) -> dict:
        x = self.samples_of(claim_id, m)
        interval, label = INTERVALS[self.method]
        try:
            est, lo, hi = interval(x, self.confidence)
        except ClaimError as e:
            raise ClaimError(f"claim {claim_id!r}: effect {self.name!r}: {e}") from None
        if self.run_sd is not None and not math.isnan(lo):
            lo, hi = run_widened_interval(x, self.run_sd, self.confidence)
            label += f" with a between-run sd of {_fmt(self.run_sd)}"
        out = {"name": self.name, "estimate": est, "ci_low": lo, "ci_high": hi, "n": int(len(x)),
               "method": f"{label}, {self.confidence:.0%}", "direction": self.direction, "null": self.null}
        if self.min_effect is not None:
            out["min_effect"] = self.min_effect
        verdict, note = self._judge(est, lo, hi)
        if math.isnan(lo):
            verdict, note = INCONCLUSIVE, _no_interval_note(x, self.method)
        floor = _unit_floor(len(x), self.planned_units) if unit_floor and verdict != INCONCLUSIVE else None
        if floor:
            verdict, note = INCONCLUSIVE, f"{floor}; it would be {verdict}"
        sd = float(np.std(x, ddof=1)) if len(x) > 1 else math.nan
        need, on_the_bar = self._power_line(est, sd, len(x)) if verdict == INCONCLUSIVE else (None, "")
        if on_the_bar:
            about = (f"about {need} units" if need is not None else "no number of units within one run"
                     if on_the_bar.endswith("between-run spread") else "more than a hundred times the units run")
            note += (f"; the estimate sits on {on_the_bar}: {about} would tell them apart at this spread, "
                     "so no feasible sample of this design decides it")
            need = None
        out.update(verdict=verdict, note=note, sd=_nan_none(sd),
                   units_needed=_with_floor(need, floor, self.planned_units))
        if self.design_sd is not None:
            out.update(design_sd=self.design_sd, planned_units=self.planned_units)
        if self.run_sd is not None:
            out.update(run_sd=self.run_sd)
        return out

    def _power_line(self, est: float, sd: float, n: int) -> tuple[int | None, str]:
        """Paired units that would decide this effect at the observed estimate and spread, and what the estimate
        sits on when that is more than `ON_THE_BAR` times `n` ("" otherwise). An estimate short of the bar (the
        smallest effect, or the null when none is given) can only come to be refuted, once the interval shrinks
        inside the gap between the two; one that reaches the bar can only come to be reproduced, once the interval
        clears the null. Never fewer than n + 1: n units left it undecided."""
        bar = self.null if self.min_effect is None else self.min_effect
        short = self._beyond(bar, est)
        on_the_bar = "the paper's smallest effect" if short and self.min_effect is not None else "the null"
        if self.method == "binomial":
            need = self._binomial_units(est, n)
            return (None, on_the_bar) if need is None else (need, "")
        gap = abs(bar - est) if short else abs(est - self.null)
        if self.run_sd is not None:  # the run's own spread takes its share of the gap whatever the units
            gap -= stats.norm.ppf(1 - (1 - self.confidence) / 2) * self.run_sd
            if gap <= 0:
                return None, on_the_bar + ", within the between-run spread"
        need = units_needed(sd, gap, 1 - self.confidence)
        if need is None:
            return None, ""
        if need > ON_THE_BAR * n:
            return need, on_the_bar
        return max(need, n + 1), ""

    def _binomial_units(self, share: float, n: int) -> int | None:
        """The fewest units m > n at which the observed `share` (round(share·m) ones of m) gets an exact interval
        that decides, by this effect's own judgement; None past `ON_THE_BAR`·n. Exact, because a share with no
        spread (0 of n, n of n) has no sd for the normal formula to use."""
        for m in range(n + 1, ON_THE_BAR * n + 1):
            k = round(share * m)
            _, lo, hi = binomial_interval(np.r_[np.ones(k), np.zeros(m - k)], self.confidence)
            if self._judge(k / m, lo, hi)[0] != INCONCLUSIVE:
                return m
        return None

    def _judge(self, est: float, lo: float, hi: float) -> tuple[str, str]:
        """Size before sign: the verdict of an interval [lo, hi] around `est`, and why."""
        near, far = (lo, hi) if self.direction == "greater" else (hi, lo)
        bar = self.null if self.min_effect is None else self.min_effect
        side = "above" if self.direction == "greater" else "below"
        if self._beyond(bar, far):
            if self._beyond(near, self.null):
                return REFUTED, (f"the direction holds, the size is below the paper's: the interval excludes "
                                 f"{_fmt(self.null)} but lies wholly short of the smallest effect {_fmt(bar)}")
            return REFUTED, f"the interval lies wholly short of {_fmt(bar)}"
        if self._beyond(near, self.null):
            if self.min_effect is not None and self._beyond(self.min_effect, est):
                return INCONCLUSIVE, (f"the direction holds, but the estimate is short of the paper's smallest "
                                      f"effect {_fmt(self.min_effect)} and the interval reaches it: size undecided")
            return REPRODUCED, f"the interval lies {side} {_fmt(self.null)}"
        return INCONCLUSIVE, "the interval decides nothing"


def _nan_none(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


@dataclass(frozen=True)
class Equivalence:
    """A "no difference" effect: the mean of the paired values `samples` lies within ±`margin` of zero, decided by
    two one-sided t tests (TOST, statsmodels' ``ttost_paired`` on the differences) at level `alpha`. Reproduced when
    TOST rejects both one-sided nulls (equivalently, the 1 - 2·alpha interval lies inside the margin); refuted when
    the 1 - 2·alpha interval lies wholly outside the margin. Units with no spread decide nothing (TOST has no
    interval then); fewer than `MIN_UNITS` units decide only with a `design_sd` whose power calculation allows it."""

    name: str
    samples: str | Callable[[Mapping], Sequence[float]]
    margin: float
    alpha: float = 0.05
    design_sd: float | None = None
    run_sd: float | None = None

    def __post_init__(self):
        if not self.margin > 0:
            raise ClaimError(f"equivalence {self.name!r}: margin must be positive, got {self.margin}")
        if self.design_sd is not None and not self.design_sd > 0:
            raise ClaimError(f"equivalence {self.name!r}: design_sd must be positive, got {self.design_sd}")

    @property
    def planned_units(self) -> int | None:
        """Units the calibration spread needs for TOST to show a true difference of 0 inside the margin."""
        return None if self.design_sd is None else units_needed(self.design_sd, self.margin, 2 * self.alpha,
                                                                1 - (1 - POWER) / 2)

    def samples_of(self, claim_id: str, m: Mapping[str, Any]) -> np.ndarray:
        return _finite(claim_id, self.name, _lookup(claim_id, f"equivalence {self.name!r}", self.samples, m))

    def decide(self, claim_id: str, m: Mapping[str, Any], unit_floor: bool = True) -> dict:
        from statsmodels.stats.weightstats import ttost_paired

        x = self.samples_of(claim_id, m)
        est, lo, hi = t_interval(x, 1 - 2 * self.alpha)
        if math.isnan(lo):
            verdict, note = INCONCLUSIVE, _no_interval_note(x, "t")
        else:
            p = ttost_paired(x, np.zeros_like(x), -self.margin, self.margin)[0]
            if p < self.alpha:
                verdict, note = REPRODUCED, f"TOST p = {p:.3g}: the interval lies inside ±{_fmt(self.margin)}"
            elif lo > self.margin or hi < -self.margin:
                verdict, note = REFUTED, f"the interval lies wholly outside ±{_fmt(self.margin)}"
            else:
                verdict, note = INCONCLUSIVE, f"the interval is neither inside nor outside ±{_fmt(self.margin)}"
        floor = _unit_floor(len(x), self.planned_units) if unit_floor and verdict != INCONCLUSIVE else None
        if floor:
            verdict, note = INCONCLUSIVE, f"{floor}; it would be {verdict}"
        sd = float(np.std(x, ddof=1)) if len(x) > 1 else math.nan
        room = abs(self.margin - abs(est)) if math.isfinite(est) else math.nan
        out = {"name": self.name, "estimate": est, "ci_low": lo, "ci_high": hi, "n": int(len(x)),
               "method": f"TOST (paired t), {1 - 2 * self.alpha:.0%} interval", "direction": "equivalent",
               "margin": self.margin, "verdict": verdict, "note": note, "sd": _nan_none(sd),
               "units_needed": _with_floor(units_needed(sd, room, 2 * self.alpha), floor, self.planned_units)}
        if self.design_sd is not None:
            out.update(design_sd=self.design_sd, planned_units=self.planned_units)
        if self.run_sd is not None:
            out.update(run_sd=self.run_sd)
        return out


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


def share_at_least(id: str, key: str | Callable, bound: float, share: float, rule: str | None = None) -> Precondition:
    """Precondition over units (seeds): the share of per-unit values at least `bound` is at least `share`. A rule
    stated "on every seed" gets harder to pass with every seed added, so that a decision on more seeds can fail on
    one unlucky run; a share does not. A unit without a finite value counts as not reaching `bound`; no units at
    all never holds."""
    if not 0 < share <= 1:
        raise ValueError(f"precondition {id!r}: share must lie in (0, 1], got {share}")
    name = key if isinstance(key, str) else id

    def value(m):
        v = np.atleast_1d(np.asarray(m[key] if isinstance(key, str) else key(m), dtype=float))
        return float(np.mean(np.isfinite(v) & (v >= bound))) if v.size else math.nan

    return Precondition(id, rule or f"{name} >= {bound:g} on >= {share:.0%} of units", value, lambda v: v >= share)


@dataclass(frozen=True)
class Claim:
    """One claim of a paper, the effects that decide it, the preconditions that make it decidable, and example
    measurements: ``examples = (must_reproduce, must_not_reproduce[, no_effect])``. The second must meet every
    precondition, so the criterion itself is what fails on it; the third is data with no effect (each effect at its
    null, an equivalence at its margin) on which the claim must not come out reproduced either: a statement that
    holds for any data is a unit test, not a claim. Where every effect reads a measured key, the third is derived
    (`no_effect_example`). ``needs_null`` claims are checked only beside a null control, run by the same pipeline at
    the same number of units; the real statistic must then beat the null's by a one-sided permutation test (a
    Monte Carlo test against the units' own null distributions, where the null gives each unit one)."""

    chapter: str
    id: str
    paper_statement: str
    paper_value: str
    criterion: str
    effects: Sequence[Effect | Equivalence]
    preconditions: Sequence[Precondition]
    examples: tuple[Mapping[str, Any], ...]
    needs_null: bool = False
    null_description: str = ""
    #: the chapter config's other seed lists this claim's units or design come from, beside `seeds` and
    #: `calibration_seeds` (mpo's balanced_lm is decided on `lm_seeds`): the ledger records their values
    seed_knobs: tuple[str, ...] = ()

    def __post_init__(self):
        where = f"claim {self.chapter}.{self.id}"
        if not self.effects:
            raise ClaimError(f"{where} declares no effect")
        if not self.preconditions:
            raise ClaimError(f"{where} declares no precondition")
        if not (isinstance(self.examples, tuple) and len(self.examples) in (2, 3)):
            raise ClaimError(f"{where} needs examples=(measurement that reproduces, measurement that does not"
                             "[, measurement with no effect])")
        if self.needs_null and not self.null_description:
            raise ClaimError(f"{where} needs a null control and must say what it is (null_description)")
        if any(not k.endswith("_seeds") or k == "calibration_seeds" for k in self.seed_knobs):
            raise ClaimError(f"{where}: seed_knobs {list(self.seed_knobs)} must name config knobs `*_seeds` other "
                             "than seeds and calibration_seeds (those two are always recorded)")
        object.__setattr__(self, "effects", tuple(self.effects))
        object.__setattr__(self, "preconditions", tuple(self.preconditions))
        object.__setattr__(self, "seed_knobs", tuple(self.seed_knobs))
        REGISTRY[(self.chapter, self.id)] = self

    def decide(self, measured: Mapping[str, Any], null: Mapping[str, Any] | None = None,
               unit_floor: bool = True) -> dict:
        """The verdict on `measured` (beside `null`, when given) with its reason, preconditions and effects.
        `unit_floor=False` judges the criterion alone, as the falsifiability check of the examples does."""
        pre = [p.evaluate(self.id, measured) for p in self.preconditions]
        effects = [e.decide(self.id, measured, unit_floor) for e in self.effects]
        failed = [p for p in pre if not p["holds"]]
        out: dict[str, Any] = {"preconditions": pre, "effects": effects}
        beaten = True
        if null is not None:
            out["null"] = self._against_null(measured, null, unit_floor)
            beaten = all(c["beats_null"] for c in out["null"]["comparisons"])
        verdicts, null_need = [e["verdict"] for e in effects], None
        if failed:
            verdict = INCONCLUSIVE
            reason = "precondition failed: " + "; ".join(f"{p['id']} ({p['detail']})" for p in failed)
        elif any(v == REFUTED for v in verdicts):
            verdict = REFUTED
            reason = "; ".join(f"{e['name']}: {_interval(e)}: {e['note']}" for e in effects
                               if e["verdict"] == REFUTED)
        elif all(v == REPRODUCED for v in verdicts) and not beaten:
            verdict = INCONCLUSIVE
            unbeaten = [c for c in out["null"]["comparisons"] if not c["beats_null"]]
            reason = "the real statistic does not beat its null control's (" + "; ".join(
                f"{c['name']}: permutation p = {_fmt(c['p_value'])}" for c in unbeaten) + (
                f"; null: {self.null_description})")
            needs = [c["units_needed"] for c in unbeaten]
            null_need = max(needs) if all(needs) else None
            reason += (f". Power line: about {null_need} units, and as many null units, would beat the null at the "
                       f"observed means" if null_need else ". No feasible number of units beats the null at the "
                       "observed means")
        elif all(v == REPRODUCED for v in verdicts):
            verdict = REPRODUCED
            reason = "every effect reaches the paper's side" + (", beyond its null control" if null else "")
        else:
            verdict = INCONCLUSIVE
            reason = "; ".join(f"{e['name']}: {_interval(e)}: {e['note']}" for e in effects
                               if e["verdict"] == INCONCLUSIVE)
        if null_need:  # held back by the null alone: its power line is already in the reason
            out["units_needed"] = null_need
        elif verdict == INCONCLUSIVE and not failed:
            out["units_needed"] = _power_need(effects)
            if out["units_needed"]:
                exact = all(e["method"].startswith(INTERVALS["binomial"][1]) for e in effects
                            if e.get("units_needed") == out["units_needed"])
                reason += (f". Power line: {out['units_needed']} units would decide if the observed share held "
                           "(exact)" if exact else
                           f". Power line: about {out['units_needed']} paired units would decide at the observed "
                           f"spread ({POWER:.0%} power)")
        out.update(verdict=verdict, reason=reason)
        return out

    def _against_null(self, measured: Mapping[str, Any], null: Mapping[str, Any], unit_floor: bool) -> dict:
        """Each directional effect's real units against its null units (same pipeline, same n): a one-sided
        permutation test of the difference in means (scipy.stats.permutation_test, exact when small). Where the
        null gives each unit its whole null distribution (`null_distributions`), the real mean is tested against
        the distribution of the mean of one independent draw per unit (`_distribution_p`), and the null's own
        verdict is decided on one such draw per unit (`null_replicate`), the same pipeline on one null data set."""
        comparisons, replicate = [], dict(null)
        for e in self.effects:
            if not isinstance(e, Effect):
                continue
            x = e.samples_of(self.id, measured)
            rows = null_distributions(self.id, e.name, _lookup(self.id, f"effect {e.name!r}", e.samples, null))
            if rows is not None and not isinstance(e.samples, str):
                raise ClaimError(f"claim {self.chapter}.{self.id}: effect {e.name!r} reads its units through a "
                                 "function, so its null distributions cannot be replaced by a draw")
            y = e.samples_of(self.id, null) if rows is None else null_replicate(rows)
            if len(x) != len(y):
                raise ClaimError(f"claim {self.chapter}.{self.id}: effect {e.name!r} has {len(x)} real units but "
                                 f"{len(y)} null units: the null must run the same pipeline at the same n")
            if rows is None:
                p, null_mean, extra = _permutation_p(x, y, e.direction), float(np.mean(y)), {}
            else:
                p, null_mean = _distribution_p(x, rows, e.direction), float(np.mean([r.mean() for r in rows]))
                extra, replicate[e.samples] = {"null_draws": NULL_DRAWS}, y.tolist()
            comparisons.append({"name": e.name, "real_mean": float(np.mean(x)), "null_mean": null_mean,
                                "n": int(len(x)), "p_value": p, "beats_null": bool(p < NULL_ALPHA), **extra})
            if p >= NULL_ALPHA:
                comparisons[-1]["units_needed"] = (null_units_needed(x, y, e.direction) if rows is None else
                                                   distribution_units_needed(x, rows, e.direction))
        null_effects = [e.decide(self.id, replicate, unit_floor) for e in self.effects]
        null_verdict = REPRODUCED if all(e["verdict"] == REPRODUCED for e in null_effects) else (
            REFUTED if any(e["verdict"] == REFUTED for e in null_effects) else INCONCLUSIVE)
        return {"measured": _jsonable(dict(null)), "verdict": null_verdict, "effects": null_effects,
                "comparisons": comparisons}

    def no_effect_example(self) -> Mapping[str, Any]:
        """Data with no effect: the declared third example, or the reproducing example with each effect's units
        replaced by twelve values spread evenly around its null (an equivalence's around its margin)."""
        if len(self.examples) == 3:
            return self.examples[2]
        if not all(isinstance(e.samples, str) for e in self.effects):
            raise ClaimError(f"claim {self.chapter}.{self.id}: an effect computed by a function needs a third "
                             "example, data with no effect, since it cannot be derived")
        good = dict(self.examples[0])
        for e in self.effects:
            centre = e.null if isinstance(e, Effect) else e.margin
            x = np.asarray(good[e.samples], dtype=float)
            spread = float(np.std(x)) or abs(centre) * 0.1 or 0.1
            good[e.samples] = (centre + spread * np.linspace(-1, 1, 12)).tolist()
            if isinstance(e, Effect) and e.method == "binomial":
                k = round(e.null * 12)
                good[e.samples] = [1.0] * k + [0.0] * (12 - k)
        return good


def null_units_needed(x: np.ndarray, y: np.ndarray, direction: str) -> int | None:
    """The fewest units (real and null alike) at which the one-sided test against the null control would pass at
    the observed means, or None when the real mean is not beyond the null's or past `ON_THE_BAR` times len(x).
    Units of 0 and 1 (shares): exact, the permutation test of a difference in means being Fisher's exact test there,
    with round(share·m) ones of m on each side. Otherwise the normal approximation of a two-sample test with the
    pooled spread: m = 2 ((z_{1-α} + z_power) s / Δ)^2."""
    x, y, n = np.asarray(x, float), np.asarray(y, float), len(x)
    shift = (np.mean(x) - np.mean(y)) * (1 if direction == "greater" else -1)
    if not shift > 0:
        return None
    if np.isin(np.concatenate([x, y]), (0.0, 1.0)).all():
        for m in range(n + 1, ON_THE_BAR * n + 1):
            ones = [round(np.mean(x) * m), round(np.mean(y) * m)]
            table = [[ones[0], m - ones[0]], [ones[1], m - ones[1]]]
            alternative = "greater" if direction == "greater" else "less"
            if stats.fisher_exact(table, alternative=alternative).pvalue < NULL_ALPHA:
                return m
        return None
    sd = math.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / 2)
    need = units_needed(sd, shift, 2 * NULL_ALPHA)  # a one-sample n; two independent samples need twice as many
    if need is None or 2 * need > ON_THE_BAR * n:
        return None
    return max(2 * need, n + 1)


#: Monte Carlo draws of the null mean where each unit's null is a distribution (`_distribution_p`)
NULL_DRAWS = 9999


def null_distributions(claim_id: str, name: str, values: Any) -> list[np.ndarray] | None:
    """Each unit's null distribution, when the null gives one per unit (a list of values per unit: the unit's
    statistic on every permutation of its labels, say); None when it gives one value per unit."""
    if not (isinstance(values, (list, tuple)) and values
            and all(isinstance(v, (list, tuple, np.ndarray)) for v in values)):
        return None
    rows = [np.asarray(v, dtype=float).ravel() for v in values]
    if any(r.size == 0 or not np.all(np.isfinite(r)) for r in rows):
        raise ClaimError(f"claim {claim_id!r}: effect {name!r}: every unit's null distribution needs finite values")
    return rows


def _null_draws(rows: Sequence[np.ndarray], draws: int) -> np.ndarray:
    """[draws, units]: each unit's value drawn from its own null distribution, independently (a fixed generator,
    so a record is the same in every build)."""
    rng = np.random.default_rng(0)
    return np.stack([r[rng.integers(0, r.size, draws)] for r in rows], axis=1)


def null_replicate(rows: Sequence[np.ndarray]) -> np.ndarray:
    """One null data set: a draw from each unit's null distribution (the first of `_null_draws`)."""
    return _null_draws(rows, 1)[0]


def _distribution_p(x: np.ndarray, rows: Sequence[np.ndarray], direction: str) -> float:
    """One-sided Monte Carlo p value of the real mean of `x` under the null in which each unit's value is a draw
    from its own null distribution: (1 + #{draws whose mean is at or beyond it}) / (1 + NULL_DRAWS)."""
    means = _null_draws(rows, NULL_DRAWS).mean(axis=1)
    beyond = means >= np.mean(x) if direction == "greater" else means <= np.mean(x)
    return float((1 + beyond.sum()) / (1 + NULL_DRAWS))


def distribution_units_needed(x: np.ndarray, rows: Sequence[np.ndarray], direction: str) -> int | None:
    """The fewest units at which the test against per-unit null distributions (`_distribution_p`) would pass at
    the observed mean with `POWER`, by the normal approximation: the null mean has sd s0/sqrt(n) (s0 the units'
    pooled null sd) and the real one s/sqrt(n), so n = ((z_{1-α} s0 + z_power s) / Δ)^2; None when the real mean is
    not beyond the null's or past `ON_THE_BAR` times len(x)."""
    x, n = np.asarray(x, float), len(x)
    shift = (np.mean(x) - np.mean([r.mean() for r in rows])) * (1 if direction == "greater" else -1)
    if not shift > 0 or n < 2:
        return None
    s0 = math.sqrt(np.mean([r.var() for r in rows]))
    z = stats.norm.ppf(1 - NULL_ALPHA) * s0 + stats.norm.ppf(POWER) * np.std(x, ddof=1)
    need = math.ceil((z / shift) ** 2)
    return None if need > ON_THE_BAR * n else max(need, n + 1)


def _permutation_p(x: np.ndarray, y: np.ndarray, direction: str) -> float:
    """One-sided p value that the mean of `x` lies beyond the mean of `y` in `direction` (independent samples)."""
    if len(x) == 0 or np.ptp(np.concatenate([x, y])) == 0:  # no units, or no spread: nothing beats anything
        return 1.0
    res = stats.permutation_test((x, y), lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
                                 permutation_type="independent", alternative=direction, n_resamples=9999,
                                 vectorized=True, rng=np.random.default_rng(0))
    return float(res.pvalue)


def _power_need(effects: Sequence[dict]) -> int | None:
    """The most paired units any undecided effect would need (None when none can say)."""
    needs = [e.get("units_needed") for e in effects if e["verdict"] == INCONCLUSIVE]
    needs = [n for n in needs if n]
    return max(needs) if needs else None


def standardised(e: Mapping[str, Any]) -> tuple[float, float, float]:
    """An effect's estimate and interval on one axis for every claim: 0 is no effect and 1 the paper's smallest
    effect (or, for an equivalence, the margin; or, where the smallest effect is the null itself or none is declared,
    the interval's half-width), signed so that the paper's direction is positive."""
    if e.get("direction") == "equivalent":
        scale, centre, sign = e["margin"], 0.0, 1.0
    else:
        centre, sign = e.get("null", 0.0), (1.0 if e.get("direction", "greater") == "greater" else -1.0)
        scale = abs(e.get("min_effect", centre) - centre)
        if scale == 0:  # no smallest effect beyond the null: the interval's half-width is the unit
            scale = max(abs(e["ci_high"] - e["ci_low"]) / 2, 1e-12)
    pts = sorted(sign * (v - centre) / scale for v in (e["ci_low"], e["ci_high"]))
    return sign * (e["estimate"] - centre) / scale, pts[0], pts[1]


def _slack(e: Mapping[str, Any]) -> float:
    """How far an effect's interval clears its bar, in units of the bar (see `standardised`): the lower end on the
    paper's side for an effect, the unused share of the margin for an equivalence; -inf without an interval."""
    if e["ci_low"] is None:
        return -math.inf
    if e.get("direction") == "equivalent":
        return 1.0 - max(abs(e["ci_low"]), abs(e["ci_high"])) / e["margin"]
    return standardised(e)[1]


def deciding_effect(effects: Sequence[Mapping[str, Any]], verdict: str) -> Mapping[str, Any] | None:
    """The effect that decides a claim's `verdict`: the first that refutes it; else the first left undecided; else
    (every effect decided, the verdict reproduced or held back by a precondition or a null) the one whose interval
    clears its bar by the least, which for a claim of the form "every case clears the bar" is its weakest case."""
    if not effects:
        return None
    if verdict == REFUTED:
        return next(e for e in effects if e["verdict"] == REFUTED)
    undecided = [e for e in effects if e["verdict"] == INCONCLUSIVE]
    return undecided[0] if undecided else min(effects, key=_slack)


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
            beats = "; ".join(f"`{c['name']}` real {_fmt(c['real_mean'])} vs null {_fmt(c['null_mean'])}, one-sided "
                              f"permutation p = {_fmt(c['p_value'])}" for c in r["null"]["comparisons"])
            lines += ["", f"*Null control* ({self.claim.null_description}), same pipeline at the same n: {beats}; "
                          f"the criterion alone says **{r['null']['verdict']}** there."]
        calibration = r.get("calibration_seeds")
        apart = f"; calibration seeds {calibration}" if calibration else (
            "; nothing was tuned on seeds" if calibration == [] else "")
        lines += ["", f"*Measured:* {r['our_value']} (verdict seeds {r['seeds']}{apart}, scale `{r['scale']}`)"]
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
          calibration_seeds: Sequence[int] | None = None, our_value: str | None = None,
          null: Mapping[str, Any] | None = None) -> Verdict:
    """Decide `claim` on `measured` (and its `null` control), record it in `book/_results/<chapter>.json`, return
    it. `seeds` are the verdict seeds; `calibration_seeds` the seeds any tuning or regime choice of the chapter used
    (the chapter config's ``calibration_seeds``; empty when nothing was tuned): the two must not overlap. `our_value`
    is the short form shown on the scorecard (default: every measured value). A record for the same claim and scale
    replaces the older one; a check that raises records nothing and keeps every other record."""
    check_scale(scale)
    seeds = [int(s) for s in seeds]
    if calibration_seeds is not None:
        calibration_seeds = [int(s) for s in calibration_seeds]
        shared = sorted(set(seeds) & set(calibration_seeds))
        if shared:
            raise ClaimError(f"claim {claim.chapter}.{claim.id}: verdict seeds {seeds} overlap the calibration seeds "
                             f"{calibration_seeds} (both hold {shared}); decide on seeds that no tuning or regime "
                             "choice has seen")
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
        "effect": deciding_effect(decision["effects"], decision["verdict"]),
        "seeds": seeds,
        "calibration_seeds": calibration_seeds,
        "contract": 2,
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
    """The falsifiability check of a claim's criterion (judged without the unit floor, which is the contract's, not
    the claim's): the claim comes out reproduced on its first example and not on its second, which meets every
    precondition (so the criterion itself fails there), nor on data with no effect (`Claim.no_effect_example`).
    Raises ClaimError otherwise."""
    good, bad = claim.examples[:2]
    where = f"claim {claim.chapter}.{claim.id}"
    got = claim.decide(good, unit_floor=False)
    if got["verdict"] != REPRODUCED:
        raise ClaimError(f"{where}: its reproducing example comes out {got['verdict']} ({got['reason']})")
    got = claim.decide(bad, unit_floor=False)
    if got["verdict"] == REPRODUCED:
        raise ClaimError(f"{where}: its non-reproducing example comes out reproduced")
    failed = [p["id"] for p in got["preconditions"] if not p["holds"]]
    if failed:
        raise ClaimError(f"{where}: its non-reproducing example fails preconditions {failed}, so it does not show "
                         "that the criterion can fail")
    got = claim.decide(claim.no_effect_example(), unit_floor=False)
    if got["verdict"] == REPRODUCED:
        raise ClaimError(f"{where}: it comes out reproduced on data with no effect, so it holds for any data: "
                         "make it a unit test")
