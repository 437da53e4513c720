"""Claims: a paper's statement, the rule that decides whether our measurement reproduces it, and the record.

A chapter module declares its claims before any experiment runs::

    FLOPS = Claim(
        chapter="rsd", id="flops",
        paper_statement="RSD needs up to 4.4x fewer FLOPs than target-only decoding",
        paper_value="4.4x",
        criterion="RSD's FLOPs are at most 0.7 of target-only, with accuracy within 2 points",
        test=lambda m: m["flop_ratio"] <= 0.7 and m["acc_gap"] <= 2.0,
    )

and the notebook calls ``check(FLOPS, measured={...}, seeds=[0, 1, 2], scale=scale)``: the verdict is
``claim.test(measured)``, never written by hand, and the record lands in ``book/_results/<chapter>.json``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from .config import check_scale
from .paths import results_dir

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
VERDICTS = (REPRODUCED, NOT_REPRODUCED)

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
                             "our_value", "verdict", "seeds", "scale", "notebook", "recorded_at"],
                "properties": {
                    "chapter": {"type": "string"},
                    "claim_id": {"type": "string", "minLength": 1},
                    "paper_statement": {"type": "string", "minLength": 1},
                    "paper_value": {"type": "string"},
                    "criterion": {"type": "string", "minLength": 1},
                    "measured": {"type": "object"},
                    "our_value": {"type": "string"},
                    "verdict": {"enum": list(VERDICTS)},
                    "seeds": {"type": "array", "items": {"type": "integer"}},
                    "scale": {"enum": ["smoke", "ci", "full"]},
                    "notebook": {"type": "string"},
                    "recorded_at": {"type": "string"},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Claim:
    """One claim of a paper and the rule (in words, `criterion`, and as code, `test`) that checks it."""

    chapter: str
    id: str
    paper_statement: str
    paper_value: str
    criterion: str
    test: Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    holds: bool
    record: dict

    @property
    def label(self) -> str:
        return REPRODUCED if self.holds else NOT_REPRODUCED

    def _repr_markdown_(self) -> str:
        mark = "✅" if self.holds else "❌"
        return (f"**{mark} Claim `{self.claim.id}`: {self.label}.** {self.claim.paper_statement} "
                f"(paper: {self.claim.paper_value}).\n\n*Criterion:* {self.claim.criterion}\n\n"
                f"*Measured:* {self.record['our_value']} (seeds {self.record['seeds']}, scale `{self.record['scale']}`)")

    def __repr__(self) -> str:
        return f"Verdict({self.claim.chapter}.{self.claim.id}: {self.label}; {self.record['our_value']})"


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


def _format_measured(measured: Mapping[str, Any]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return str(v)

    return ", ".join(f"{k}={fmt(v)}" for k, v in measured.items())


def results_path(chapter: str) -> Path:
    return results_dir() / f"{chapter}.json"


def load_results(chapter: str) -> dict:
    path = results_path(chapter)
    if not path.exists():
        return {"chapter": chapter, "records": []}
    return json.loads(path.read_text())


def check(claim: Claim, measured: Mapping[str, Any], seeds: Sequence[int], scale: str,
          our_value: str | None = None) -> Verdict:
    """Decide `claim` from `measured` with `claim.test`, record it in `book/_results/<chapter>.json`, return it.

    `our_value` is the short form shown on the scorecard (default: every measured value). A record for the same
    claim and scale replaces the older one.
    """
    check_scale(scale)
    measured = _jsonable(dict(measured))
    try:
        holds = bool(claim.test(measured))
    except KeyError as missing:
        raise KeyError(f"claim {claim.id!r} needs measured value {missing}; got {sorted(measured)}") from None
    record = {
        "chapter": claim.chapter,
        "claim_id": claim.id,
        "paper_statement": claim.paper_statement,
        "paper_value": claim.paper_value,
        "criterion": claim.criterion,
        "measured": measured,
        "our_value": our_value if our_value is not None else _format_measured(measured),
        "verdict": REPRODUCED if holds else NOT_REPRODUCED,
        "seeds": [int(s) for s in seeds],
        "scale": scale,
        "notebook": os.environ.get("ICML25_NOTEBOOK", "interactive"),
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    _append(record)
    return Verdict(claim, holds, record)


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
