"""The preregistration ledger: every claim's declared design, its verdicts, and each deviation from the design.

Each chapter keeps a committed ledger, `book/<slug>/claims.lock` (JSON, sorted keys), with one entry per claim:

- ``declaration``: what the claim declared before its experiment ran (criterion, effects with their null,
  smallest effect, margin and interval method, preconditions with the thresholds in their rule text, the null
  control, and the chapter config's seed lists at every scale: its verdict and calibration seeds, and the other
  ``*_seeds`` lists the claim names in its ``seed_knobs``, such as mpo's ``lm_seeds``), and ``hash``, its sha256;
- ``registered``: the hash, commit and date the ledger first recorded;
- ``history``: the verdicts builds reached, each with the declaration hash it was decided under;
- ``deviations``: every change of the declaration since it was registered: when, what (generated, ``field: old ->
  new``), why (one sentence), whether a verdict had been recorded under the old declaration (``verdict_seen``) and
  whether one had already been recorded under the new one before the change was (``new_verdict_seen``), and both
  hashes. A deviation of kind ``format`` records a change of what the ledger records, not of the design: until
  2026-12-05 it recorded only ``seeds`` and ``calibration_seeds``, and `migrate` added a claim's other seed lists
  with the values its latest verdict was decided with (a value that had moved since is a ``changed`` deviation).
  Every ``*_seeds`` list of a chapter config is named by a claim's ``seed_knobs`` or by the chapter's
  ``SEEDS_OF_NO_CLAIM`` (`tests/test_ledger.py`).

A claim whose declaration differs from its ledger without a deviation is an error (`tests/test_ledger.py`); the
fix is ``icml25 ledger deviate SLUG.CLAIM --why "..."``. Fields left at their dataclass default are not part of
a declaration, so a new optional field of the contract changes no existing fingerprint.

The package is imported by absolute name inside the functions, so that this file can also read the declarations
of an older checkout (`declarations_at`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

LEDGER_NAME = "claims.lock"
SCALES = ("smoke", "ci", "full")
#: fields of a Claim that are test data for its check, not its design
NOT_DECLARED = ("examples", "no_effect")
#: fields of an effect recorded even at their default: a change of the default changes the design
EFFECT_FIELDS = ("name", "samples", "direction", "null", "min_effect", "method", "confidence", "margin", "alpha")
CLAIM_FIELDS = ("chapter", "id", "paper_statement", "paper_value", "criterion", "needs_null", "null_description")
FUNCTION = "<function>"
HISTORY_LIMIT = 40  # entries kept per claim; a build appends only when a verdict or a declaration changes
ADDED, REMOVED, CHANGED, FORMAT = "added", "removed", "changed", "format"
#: the seed lists the ledger recorded before it recorded every ``*_seeds`` knob (`migrate`)
FIRST_SEED_KNOBS = ("seeds", "calibration_seeds")


class LedgerError(ValueError):
    """A ledger asked to do something that does not fit it; the message names the claim and what is wrong."""


# ---- declarations -------------------------------------------------------------------------------------------

def _plain(where: str, value: Any) -> Any:
    """`value` as JSON: numbers, strings, booleans, None, and lists or dicts of them."""
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _plain(where, value.tolist())
    if isinstance(value, Mapping):
        return {str(k): _plain(f"{where}.{k}", v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(where, v) for v in value]
    raise LedgerError(f"{where}: a {type(value).__name__} ({value!r}) cannot be part of a declaration")


def _number(value: Any) -> Any:
    """Integers as floats, so that writing `1` for `1.0` is no change of design."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _at_default(f: dataclasses.Field, value: Any) -> bool:
    """Whether a field holds its dataclass default (a field without one never does)."""
    if f.default is not dataclasses.MISSING:
        default = f.default
    elif f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    else:
        return False
    try:
        return bool(value == default)
    except ValueError:  # an array compares element by element
        return False


def _fields(obj: Any, always: Iterable[str], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The dataclass fields of `obj` that declare something: those in `always`, and any other that is not at its
    default and not a function."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name in skip or (f.name not in always and (_at_default(f, value) or callable(value))):
            continue
        out[f.name] = FUNCTION if callable(value) else value
    return out


def effect_declaration(where: str, effect: Any) -> dict[str, Any]:
    """An effect's class name and fields (a function of the measurements is recorded as "<function>")."""
    fields = _fields(effect, EFFECT_FIELDS)
    return {"kind": type(effect).__name__,
            **{k: _number(_plain(f"{where}.{k}", v)) for k, v in fields.items()}}


def config_seed_lists(cfg: Mapping[str, Any]) -> list[str]:
    """The knobs of a chapter config that list seeds: `seeds`, `calibration_seeds`, and every other list-valued
    knob whose name ends in `_seeds` (a count of seeds, such as kabb's `figure_seeds`, is not a list)."""
    return [*FIRST_SEED_KNOBS, *sorted(k for k in cfg if k.endswith("_seeds") and k not in FIRST_SEED_KNOBS
                                       and isinstance(cfg[k], (list, tuple)))]


def chapter_seeds(module: Any) -> dict[str, dict[str, Any]] | None:
    """Every seed list of the chapter's config at each scale (`config_seed_lists`; None without a config); a claim's
    declaration keeps `seeds`, `calibration_seeds` and its own `seed_knobs`."""
    if not hasattr(module, "config"):
        return None
    out = {}
    for scale in SCALES:
        cfg = module.config(scale)
        out[scale] = {k: _plain(f"config({scale!r}).{k}", cfg.get(k)) for k in config_seed_lists(cfg)}
    return out


def claim_seeds(where: str, claim: Any, seeds: dict | None) -> dict | None:
    """The seed lists a claim's declaration records at each scale: `seeds`, `calibration_seeds` and the claim's
    own `seed_knobs`, from `seeds` (`chapter_seeds`); a knob the config lacks is an error."""
    knobs = getattr(claim, "seed_knobs", ())
    if seeds is None:
        if knobs:
            raise LedgerError(f"{where}: seed_knobs {list(knobs)} but the chapter has no config")
        return None
    out = {}
    for scale, lists in seeds.items():
        missing = [k for k in knobs if k not in lists]
        if missing:
            raise LedgerError(f"{where}: seed_knobs {missing} are not seed lists of config({scale!r}); its seed "
                              f"lists: {sorted(lists)}")
        out[scale] = {k: lists[k] for k in (*FIRST_SEED_KNOBS, *knobs)}
    return out


def declaration(claim: Any, seeds: dict | None) -> dict[str, Any]:
    """A claim's declared design as a plain dict (see the module's docstring); `seeds` from `chapter_seeds`."""
    where = f"claim {claim.chapter}.{claim.id}"
    out = {k: _plain(f"{where}.{k}", v) for k, v in
           _fields(claim, CLAIM_FIELDS, skip=(*NOT_DECLARED, "effects", "preconditions", "seed_knobs")).items()}
    out["effects"] = [effect_declaration(f"{where}.effects[{i}]", e) for i, e in enumerate(claim.effects)]
    out["preconditions"] = [{"id": p.id, "rule": p.rule} for p in claim.preconditions]
    out["seeds"] = claim_seeds(where, claim, seeds)
    return out


def fingerprint(decl: Mapping[str, Any]) -> str:
    """The sha256 of a declaration's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(decl, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def chapter_modules(slugs: Iterable[str] | None = None) -> dict[str, Any]:
    """The chapters' modules (default: every chapter's), imported, so that the claims registry holds their
    claims."""
    from icml25 import catalog

    return {s: importlib.import_module(f"icml25.{s}") for s in slugs or [c.slug for c in catalog.ALL]}


def declarations(slugs: Iterable[str] | None = None) -> dict[str, dict[str, dict]]:
    """{slug: {claim id: declaration}} of the code imported now, for `slugs` (default every chapter)."""
    from icml25.core.claims import REGISTRY

    modules = chapter_modules(slugs)
    seeds = {slug: chapter_seeds(module) for slug, module in modules.items()}
    out: dict[str, dict[str, dict]] = {slug: {} for slug in modules}
    for (chapter, claim_id), claim in sorted(REGISTRY.items()):
        if chapter in out:
            out[chapter][claim_id] = declaration(claim, seeds[chapter])
    return out


def seed_lists(slugs: Iterable[str] | None = None) -> dict[str, dict | None]:
    """{slug: `chapter_seeds`} of the code imported now, for `slugs` (default every chapter)."""
    return {slug: chapter_seeds(module) for slug, module in chapter_modules(slugs).items()}


def declarations_at(commit: str, root: Path, read: str = "declarations") -> dict[str, dict]:
    """The declarations of every chapter in the code of `commit` (a git worktree in a temporary folder, read by a
    fresh interpreter that imports that commit's package and this file); `read="seed_lists"` reads the chapters'
    seed lists instead (`seed_lists`)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
        try:
            script = ("import importlib.util, json, sys; "
                      f"spec = importlib.util.spec_from_file_location('ledger_reader', {str(Path(__file__))!r}); "
                      "m = sys.modules['ledger_reader'] = importlib.util.module_from_spec(spec); "
                      f"spec.loader.exec_module(m); json.dump(m.{read}(), sys.stdout)")
            env = dict(os.environ, PYTHONPATH=str(tree / "pkg"))
            done = subprocess.run([sys.executable, "-c", script], cwd=tree, env=env, capture_output=True, text=True)
            if done.returncode:
                raise LedgerError(f"reading the declarations at {commit} failed:\n{done.stderr[-2000:]}")
            return json.loads(done.stdout)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], check=False,
                           capture_output=True)


# ---- the ledger files ------------------------------------------------------------------------------------------

def path(book: Path, slug: str) -> Path:
    return book / slug / LEDGER_NAME


def load(book: Path, slug: str) -> dict[str, Any]:
    """A chapter's ledger; a chapter without one has an empty ledger."""
    p = path(book, slug)
    return json.loads(p.read_text()) if p.exists() else {"chapter": slug, "claims": {}}


def save(book: Path, slug: str, ledger: Mapping[str, Any]) -> None:
    """Write a ledger deterministically (sorted keys, indent 1) through a temporary file."""
    p = path(book, slug)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(ledger, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(p)


@contextlib.contextmanager
def editing(book: Path, slug: str):
    """A chapter's ledger to change in place, under a file lock (a build may append while someone deviates),
    written back when the block ends without an error."""
    from filelock import FileLock

    path(book, slug).parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path(book, slug)) + ".lock"):
        ledger = load(book, slug)
        yield ledger
        save(book, slug, ledger)


def today() -> str:
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def git_commit(root: Path) -> str | None:
    """The short hash of the checkout's HEAD, or None outside git."""
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def commit_date(commit: str, root: Path) -> str:
    """The day `commit` was made (YYYY-MM-DD)."""
    done = subprocess.run(["git", "-C", str(root), "show", "-s", "--format=%cs", commit], capture_output=True,
                          text=True)
    if done.returncode:
        raise LedgerError(f"{commit!r} is not a commit of this checkout: {done.stderr.strip()}")
    return done.stdout.strip()


def init(book: Path, decls: Mapping[str, Mapping[str, dict]], commit: str | None, date: str) -> list[str]:
    """Register the declarations of every chapter in `decls` that has no ledger yet; returns the chapters
    registered. A chapter that has a ledger keeps it: its changes are deviations."""
    done = []
    for slug, claims in decls.items():
        if path(book, slug).exists():
            continue
        entries = {cid: {"declaration": d, "hash": fingerprint(d), "history": [], "deviations": [],
                         "registered": {"hash": fingerprint(d), "commit": commit, "date": date}}
                   for cid, d in claims.items()}
        save(book, slug, {"chapter": slug, "claims": entries})
        done.append(slug)
    return done


# ---- differences ------------------------------------------------------------------------------------------------

def _keyed(value: Any) -> Any:
    """A list of effects or preconditions as a dict keyed by name or id (so a diff names them); else `value`."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and ("name" in v or "id" in v) for v in value):
        return {v["name"] if "name" in v else v["id"]: v for v in value}
    return value


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _changes(old: Any, new: Any, where: str) -> list[str]:
    """"where: old -> new" for each field that differs; an effect or precondition added or removed whole is one
    line."""
    old, new = _keyed(old), _keyed(new)
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else [f"{where}: {_show(old)} -> {_show(new)}"]
    lines = []
    for k in sorted(set(old) | set(new)):
        lines += _changes(old.get(k), new.get(k), f"{where}.{k}" if where else str(k))
    return lines


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """What changed from declaration `old` to `new`, one "field: old -> new" line per field."""
    if old is None:
        return ["claim added"]
    if new is None:
        return ["claim removed"]
    lines = _changes(dict(old), dict(new), "")
    return lines or (["the order of the effects or preconditions"] if fingerprint(old) != fingerprint(new) else [])


@dataclasses.dataclass(frozen=True)
class Difference:
    """A claim whose declaration in the code differs from its ledger."""
    slug: str
    claim: str
    kind: str  # ADDED, REMOVED or CHANGED
    what: list[str]

    def __str__(self) -> str:
        return "\n".join([f"{self.slug}.{self.claim}: {self.kind} without a deviation entry",
                          *(f"    {line}" for line in self.what)])


def differences(book: Path, decls: Mapping[str, Mapping[str, dict]]) -> list[Difference]:
    """Every claim of the chapters in `decls` whose declaration differs from the chapter's ledger."""
    out = []
    for slug, claims in decls.items():
        ledger = load(book, slug)["claims"]
        for cid in sorted(set(claims) | set(ledger)):
            old = ledger.get(cid, {}).get("declaration")
            new = claims.get(cid)
            if (old and fingerprint(old)) != (new and fingerprint(new)):
                kind = ADDED if old is None else REMOVED if new is None else CHANGED
                out.append(Difference(slug, cid, kind, diff(old, new)))
    return out


def chain_errors(ledger: Mapping[str, Any]) -> list[str]:
    """Claims whose deviations do not lead from the registered declaration to the ledger's: a declaration edited
    in the ledger by hand, not by `deviate`."""
    errors = []
    for cid, entry in sorted(ledger["claims"].items()):
        h = entry["registered"]["hash"]
        for d in entry["deviations"]:
            if d["old_hash"] != h:
                errors.append(f"{ledger['chapter']}.{cid}: deviation of {d['date']} starts from {d['old_hash']}, "
                              f"not from {h}")
            h = d["new_hash"]
        if h != entry["hash"] or entry["hash"] != (entry["declaration"] and fingerprint(entry["declaration"])):
            errors.append(f"{ledger['chapter']}.{cid}: the ledger's declaration is not the one its deviations lead "
                          "to")
    return errors


# ---- deviations and history ---------------------------------------------------------------------------------

def split_name(name: str) -> tuple[str, str]:
    """"slug.claim" as (slug, claim); a name without a dot is an error that shows the form."""
    slug, dot, claim = name.partition(".")
    if not (slug and dot and claim):
        raise LedgerError(f"claim {name!r} is not of the form SLUG.CLAIM (for example rsd.efficiency_oracle)")
    return slug, claim


def deviate(book: Path, slug: str, claim_id: str, new: dict | None, why: str, date: str) -> dict:
    """Record that claim `claim_id` of `slug` now declares `new` (None: the claim was removed), and why; returns
    the deviation entry. A claim that matches its ledger has nothing to record."""
    if not why.strip():
        raise LedgerError(f"{slug}.{claim_id}: a deviation needs a reason (--why \"one sentence\")")
    with editing(book, slug) as ledger:
        return _deviate(ledger, claim_id, new, why, date)


def _deviate(ledger: dict, claim_id: str, new: dict | None, why: str, date: str, kind: str | None = None) -> dict:
    """`deviate` on a loaded ledger (changed in place); `kind` FORMAT records a change of the ledger's format."""
    slug = ledger["chapter"]
    entry = ledger["claims"].get(claim_id)
    if entry is None and new is None:
        raise LedgerError(f"{slug}.{claim_id} is neither in the code nor in the ledger; claims in the ledger: "
                          f"{', '.join(sorted(ledger['claims'])) or 'none'}")
    entry = entry or {"declaration": None, "hash": None, "history": [], "deviations": [],
                      "registered": {"hash": None, "commit": None, "date": date}}
    new_hash = new and fingerprint(new)
    if new_hash == entry["hash"]:
        raise LedgerError(f"{slug}.{claim_id} matches its ledger: there is no deviation to record")
    old = entry["declaration"]
    record = {"date": date, "kind": kind or (ADDED if old is None else REMOVED if new is None else CHANGED),
              "what": diff(old, new), "why": why.strip(), "old_hash": entry["hash"], "new_hash": new_hash,
              "verdict_seen": any(h["hash"] == entry["hash"] for h in entry["history"]) if old else False,
              "new_verdict_seen": any(h["hash"] == new_hash for h in entry["history"]) if new else False}
    entry.update(declaration=new, hash=new_hash, deviations=[*entry["deviations"], record])
    ledger["claims"][claim_id] = entry
    return record


def added_seed_knobs(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """{scale: {knob: value}} of the seed lists `new` records and `old` does not, when that is all that differs
    between them (a declaration registered before the ledger recorded them); else {}."""
    if not (old and new and new.get("seeds")):
        return {}
    added = {scale: {k: v for k, v in knobs.items() if k not in (old.get("seeds") or {}).get(scale, {})}
             for scale, knobs in new["seeds"].items()}
    rest = {**new, "seeds": {scale: {k: v for k, v in knobs.items() if k not in added[scale]}
                             for scale, knobs in new["seeds"].items()}}
    added = {scale: knobs for scale, knobs in added.items() if knobs}
    return added if added and fingerprint(rest) == fingerprint(old) else {}


def latest_verdict_commit(entry: Mapping[str, Any]) -> str | None:
    """The commit of the latest verdict in a claim's history that names one."""
    return next((h["commit"] for h in reversed(entry["history"]) if h.get("commit")), None)


def migrate(book: Path, decls: Mapping[str, Mapping[str, dict]], at_commit: Callable[[str], Mapping[str, Mapping]],
            date: str) -> list[tuple[str, str, dict]]:
    """Bring the ledgers to the format that records a claim's own seed lists (`claim_seeds`): for each claim whose
    declaration differs from its ledger only by seed lists added (`added_seed_knobs`), a FORMAT deviation when
    they hold the values its latest verdict was decided with (the chapter's seed lists at that verdict's commit,
    `at_commit(commit)`: {slug: `chapter_seeds`}), else a CHANGED one, since they moved after that verdict
    unrecorded. A claim with no verdict is a FORMAT change. Returns (slug, claim, entry) for each."""
    done = []
    for d in differences(book, decls):
        entry = load(book, d.slug)["claims"].get(d.claim, {})
        new = decls[d.slug][d.claim]
        added = added_seed_knobs(entry.get("declaration"), new)
        if not added:
            continue
        commit = latest_verdict_commit(entry)
        then = (at_commit(commit).get(d.slug) or {}) if commit else None
        moved = then is not None and any(then.get(scale, {}).get(k) != v
                                         for scale, knobs in added.items() for k, v in knobs.items())
        names = ", ".join(sorted({k for knobs in added.values() for k in knobs}))
        if moved:
            why = (f"the ledger now records the claim's seed lists; {names} differ(s) from the values of the latest "
                   f"verdict ({commit}): moved after that verdict without a ledger entry")
        else:
            why = (f"the ledger now records the claim's seed lists, {names} among them"
                   + (f", with the values the latest verdict ({commit}) was decided with" if commit else ""))
        with editing(book, d.slug) as ledger:
            done.append((d.slug, d.claim, _deviate(ledger, d.claim, new, why, date, None if moved else FORMAT)))
    return done


def append_history(book: Path, slug: str, claim_id: str, entry: dict) -> bool:
    """Append a verdict to a claim's history unless the last entry at the same scale has the same verdict and
    declaration hash (so an unchanged rebuild changes no file); False when nothing was appended or the claim is
    not in the ledger."""
    with editing(book, slug) as ledger:
        claim = ledger["claims"].get(claim_id)
        if claim is None:
            return False
        same_scale = [h for h in claim["history"] if h["scale"] == entry["scale"]]
        if same_scale and (same_scale[-1]["verdict"], same_scale[-1]["hash"]) == (entry["verdict"], entry["hash"]):
            return False
        claim["history"] = [*claim["history"], entry][-HISTORY_LIMIT:]
        return True


def record_verdicts(book: Path, records: Iterable[Mapping[str, Any]], root: Path,
                    current: Callable[[str], Mapping[str, dict]] | None = None, machine: str | None = None) -> int:
    """The builder's hook: each claim record of a ci or full run goes into its chapter's history with the
    declaration hash of the code now imported (`current(slug)`: {claim id: declaration}) and, where given, the
    `machine` it ran on (`core.machine.signature`: models trained in place differ across machine kinds); returns
    how many were appended."""
    records = [r for r in records if r["scale"] != "smoke" and path(book, r["chapter"]).exists()]
    if not records:
        return 0
    current = current or (lambda slug: declarations([slug])[slug])
    decls = {slug: current(slug) for slug in sorted({r["chapter"] for r in records})}
    commit, n = git_commit(root), 0
    for r in records:
        decl = decls[r["chapter"]].get(r["claim_id"])
        if decl is not None:
            entry = {"scale": r["scale"], "verdict": r["verdict"], "hash": fingerprint(decl), "commit": commit,
                     "date": r.get("recorded_at", today())[:10], "source": "icml25 build"}
            if machine:
                entry["machine"] = machine
            n += append_history(book, r["chapter"], r["claim_id"], entry)
    return n


def revised_after_verdict(entry: Mapping[str, Any]) -> list[dict]:
    """The deviations of a ledger entry that came after a verdict had been recorded under the old design."""
    return [d for d in entry["deviations"] if d["verdict_seen"] and d["kind"] != FORMAT]


# ---- the command line: `icml25 ledger ...` ----------------------------------------------------------------------

def _check_slugs(slugs: Iterable[str]) -> list[str]:
    from icml25 import catalog

    return [catalog.get(s).slug for s in slugs]


def cmd_status(book: Path, slugs: list[str]) -> int:
    """Print every claim whose declaration differs from its ledger without a deviation, and every ledger entry
    edited by hand; 1 if there is one."""
    decls = declarations(_check_slugs(slugs) or None)
    found = differences(book, decls)
    broken = [e for slug in decls for e in chain_errors(load(book, slug))]
    for line in [*map(str, found), *broken]:
        print(line)
    if broken:
        print(f"\n{len(broken)} ledger entry(ies) were edited by hand: restore them from git and record the "
              "change with `icml25 ledger deviate`.")
    if found:
        print(f"\n{len(found)} claim(s) differ from the ledger. Record each change with\n"
              '    icml25 ledger deviate SLUG.CLAIM --why "one sentence"\n'
              "(SLUG alone records every differing claim of the chapter with the same reason).")
    if found or broken:
        return 1
    print("Every claim matches its ledger.")
    return 0


def cmd_init(book: Path, slugs: list[str], at: str | None, root: Path) -> int:
    """Register the chapters that have no ledger yet, from the code now or at commit `at`."""
    slugs = _check_slugs(slugs)
    decls = declarations_at(at, root) if at else declarations(slugs or None)
    decls = {s: c for s, c in decls.items() if not slugs or s in slugs}
    done = init(book, decls, at or git_commit(root), commit_date(at, root) if at else today())
    kept = sorted(set(decls) - set(done))
    print(f"Registered {len(done)} chapter(s): {', '.join(done) or 'none'}."
          + (f" Kept the existing ledger of {', '.join(kept)}." if kept else ""))
    return 0


def cmd_deviate(book: Path, names: list[str], why: str) -> int:
    """Record a deviation for each named claim ("slug.claim"), or for every differing claim of a chapter
    ("slug")."""
    slugs = _check_slugs(dict.fromkeys(n.partition(".")[0] for n in names))
    decls = declarations(slugs)
    pending = {(d.slug, d.claim) for d in differences(book, decls)}
    targets = []
    for name in names:
        if "." in name:
            targets.append(split_name(name))
        else:
            found = sorted(c for s, c in pending if s == name)
            if not found:
                raise LedgerError(f"chapter {name!r}: every claim matches its ledger; nothing to record")
            targets += [(name, c) for c in found]
    for slug, cid in targets:
        entry = deviate(book, slug, cid, decls[slug].get(cid), why, today())
        seen = "".join(f" ({text})" for key, text in (
            ("verdict_seen", "a verdict had been recorded under the old declaration"),
            ("new_verdict_seen", "a build had already decided the new one")) if entry[key])
        print(f"{slug}.{cid}: recorded {entry['kind']}{seen}:" + "".join(f"\n    {w}" for w in entry["what"]))
    return 0


def cmd_migrate(book: Path, slugs: list[str], root: Path) -> int:
    """Record the ledgers' change of format (`migrate`) for the chapters `slugs` (default all), reading each
    verdict's commit once."""
    cache: dict[str, Mapping] = {}

    def at_commit(commit: str) -> Mapping:
        if commit not in cache:
            cache[commit] = declarations_at(commit, root, read="seed_lists")
        return cache[commit]

    done = migrate(book, declarations(_check_slugs(slugs) or None), at_commit, today())
    for slug, cid, entry in done:
        print(f"{slug}.{cid}: recorded {entry['kind']}: {entry['why']}" + "".join(f"\n    {w}" for w in entry["what"]))
    print(f"{len(done)} claim(s) migrated.")
    return 0


def cmd_history(book: Path, name: str) -> int:
    """Print a claim's (or every claim of a chapter's) registration, verdicts and deviations."""
    slug, _, only = name.partition(".")
    _check_slugs([slug])
    claims = load(book, slug)["claims"]
    if only and only not in claims:
        raise LedgerError(f"{name} is not in the ledger of {slug}; its claims: {', '.join(sorted(claims)) or 'none'}")
    for cid, entry in sorted(claims.items()):
        if only and cid != only:
            continue
        reg = entry["registered"]
        print(f"{slug}.{cid}  (registered {reg['date']} at {reg['commit']}, {str(reg['hash'])[:12]}; "
              f"now {str(entry['hash'])[:12]})")
        for h in entry["history"]:
            print(f"  {h['date']}  {h['scale']:5s} {h['verdict']:12s} under {h['hash'][:12]}  ({h['source']}"
                  + (f", {h['commit']}" if h.get("commit") else "")
                  + (f", on {h['machine']}" if h.get("machine") else "") + ")")
        for d in entry["deviations"]:
            after = d["verdict_seen"] and d["kind"] != FORMAT
            print(f"  {d['date']}  {d['kind']}: {d['why']}" + (" [after a verdict]" if after else ""))
            print("".join(f"      {w}\n" for w in d["what"]), end="")
    return 0


# ---- the generated page: "Deviations from the declared design" -----------------------------------------------

PAGE = "deviations.md"
PAGE_TITLE = "Deviations from the declared design"


def label(slug: str, claim_id: str) -> str:
    """The page's anchor for a claim (a MyST target), linked from the scorecard's badge."""
    return f"ledger-{slug}-{claim_id}".lower()


def _verdicts_under(entry: Mapping[str, Any], h: str | None) -> str:
    """The verdicts recorded under declaration hash `h`, e.g. "refuted at ci (c0d15e0)"."""
    seen = [f"{x['verdict']} at {x['scale']}" + (f" ({x['commit']})" if x.get("commit") else "")
            for x in entry["history"] if x["hash"] == h]
    return ", ".join(dict.fromkeys(seen))


def _deviation_lines(entry: Mapping[str, Any], d: Mapping[str, Any], n: int) -> list[str]:
    if d["kind"] == FORMAT:
        return [f"{n}. **{d['date']}**, a change of the ledger's format, not of the design. *Why:* {d['why']}", "",
                "   ```text", *(f"   {w}" for w in d["what"]), "   ```", ""]
    when = (f"after a verdict had been recorded under the old design ({_verdicts_under(entry, d['old_hash'])})"
            if d["verdict_seen"] else "before any verdict under the old design was recorded")
    if d.get("new_verdict_seen"):
        when += (", and after a build had already decided the new design "
                 f"({_verdicts_under(entry, d['new_hash'])})")
    return [f"{n}. **{d['date']}**, {d['kind']}, {when}. *Why:* {d['why']}", "", "   ```text",
            *(f"   {w}" for w in d["what"]), "   ```", ""]


def _design(entry: Mapping[str, Any], h: str) -> str:
    """Which of a claim's designs `h` is: "as registered" or "after change n" (the latest change to lead to it)."""
    changes = [i + 1 for i, d in enumerate(entry["deviations"]) if d["new_hash"] == h]
    return f"after change {changes[-1]}" if changes else "as registered"


def _claim_section(slug: str, cid: str, entry: Mapping[str, Any]) -> list[str]:
    n = len(revised_after_verdict(entry))
    heading = f"`{cid}`" + (f": revised after a verdict ({n})" if n else "")
    reg = entry["registered"]
    verdicts = "; ".join(f"{h['verdict']} at {h['scale']} ({h['date']}, {_design(entry, h['hash'])})"
                         for h in entry["history"])
    lines = [f"({label(slug, cid)})=", f"## {heading}", "",
             f"Registered at commit `{reg['commit']}` ({reg['date']}). Verdicts recorded, each with the design it "
             f"was decided under: {verdicts or 'none'}.", "",
             "Changes since registration, oldest first:", ""]
    for i, d in enumerate(entry["deviations"], 1):
        lines += _deviation_lines(entry, d, i)
    return lines


def page(ledger: Mapping[str, Any]) -> str:
    """The chapter's generated "Deviations from the declared design" page, from its ledger."""
    slug, claims = ledger["chapter"], ledger["claims"]
    listed = {cid: e for cid, e in sorted(claims.items()) if e["deviations"]}
    changed = {cid: e for cid, e in listed.items() if any(d["kind"] != FORMAT for d in e["deviations"])}
    after = [cid for cid, e in changed.items() if revised_after_verdict(e)]
    kept = sorted(set(claims) - set(changed))
    lines = [f"# {PAGE_TITLE}", "",
             f"Generated from the chapter's committed ledger (`book/{slug}/{LEDGER_NAME}`); see "
             "[How this book decides](../decides.md) for what the ledger records. Each entry says what changed "
             "in a claim's declared design (old -> new), why, and whether a verdict had been seen under the old "
             "design.", ""]
    if kept:
        lines += [f"Unchanged since registration: {', '.join(f'`{c}`' for c in kept)}.", ""]
    if not changed:
        lines += ["No claim of this chapter has changed its declared design.", ""]
    else:
        lines += [f"Changed since registration: {len(changed)} claim(s), {len(after)} of them after a verdict.", ""]
    for cid, entry in listed.items():
        lines += _claim_section(slug, cid, entry)
    return "\n".join(lines).rstrip() + "\n"


def write_pages(source: Path, book: Path) -> list[str]:
    """Write the deviations page of every chapter of `book` that has a page (index.md) and a ledger in `source`
    (the committed book/); returns their slugs."""
    done = []
    for p in sorted(source.glob(f"*/{LEDGER_NAME}")):
        slug = p.parent.name
        if (book / slug / "index.md").exists():
            (book / slug / PAGE).write_text(page(load(source, slug)))
            done.append(slug)
    return done


def badge(source: Path, slug: str, claim_id: str, linked: bool = True) -> str:
    """"revised after a verdict (n)" for a claim whose declaration changed after a verdict, linked to its entry on
    the chapter's deviations page; "" for any other claim."""
    entry = load(source, slug)["claims"].get(claim_id)
    n = len(revised_after_verdict(entry)) if entry else 0
    if not n:
        return ""
    text = f"revised after a verdict ({n})"
    return f"{{ref}}`{text} <{label(slug, claim_id)}>`" if linked else text
