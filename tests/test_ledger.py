"""The preregistration ledger: every claim's declaration matches its chapter's committed ledger or a deviation
says what changed and why; a change is caught on a copy of a ledger and cleared by a deviation; the builder appends
verdicts without churn; the deviations page and the scorecard's badge are generated from the ledger."""

import copy
import dataclasses
import json

import pytest

from icml25.book import build, cli, ledger, scorecard, toc
from icml25.core import claims
from icml25.core.claims import Claim, Effect, at_least

CLAIM = "efficiency_oracle"  # a claim of the test ledger with a c0d15e0 verdict (reproduced at ci)


def test_every_claim_matches_its_ledger_or_records_a_deviation():
    """The real ledgers: a declaration that changed without `icml25 ledger deviate` fails, naming the claim and
    the generated diff; a ledger edited by hand (its deviations do not lead to its declaration) fails too."""
    found = ledger.differences(build.BOOK, ledger.declarations())
    assert not found, ("claims whose declaration differs from book/<slug>/claims.lock without a deviation entry "
                       '(record each with: icml25 ledger deviate SLUG.CLAIM --why "..."):\n'
                       + "\n".join(map(str, found)))
    errors = [e for p in sorted(build.BOOK.glob(f"*/{ledger.LEDGER_NAME}"))
              for e in ledger.chain_errors(ledger.load(build.BOOK, p.parent.name))]
    assert not errors, "\n".join(errors)


def demo_declaration(claim_id: str) -> dict:
    """The declaration of a claim like rsd's, built through `Claim` (a test claim, not one of the chapter's)."""
    claim = Claim("rsd", claim_id, "RSD needs fewer FLOPs", "up to 4.4x", "the FLOP ratio is below 1",
                  [Effect("flop_ratio", "flop_ratio", direction="less", null=1.0, min_effect=0.9)],
                  [at_least("target_strong", "target_accuracy", 0.85)],
                  ({"flop_ratio": [0.5, 0.6], "target_accuracy": 0.9},
                   {"flop_ratio": [1.0, 1.1], "target_accuracy": 0.9}))
    claims.REGISTRY.pop(("rsd", claim_id))
    return ledger.declaration(claim, {s: {"seeds": [0, 1, 2], "calibration_seeds": None} for s in ledger.SCALES})


@pytest.fixture
def book(tmp_path):
    """A book of the test's own whose rsd ledger registers three claims at c0d15e0, two with a verdict there."""
    book = tmp_path / "book"
    decls = {c: demo_declaration(c) for c in (CLAIM, "efficiency_noisy", "efficiency_learned")}
    ledger.init(book, {"rsd": decls}, "c0d15e0", "2026-12-03")
    for cid, verdict in ((CLAIM, "reproduced"), ("efficiency_noisy", "refuted")):
        ledger.append_history(book, "rsd", cid, {"scale": "ci", "verdict": verdict, "hash": ledger.fingerprint(
            decls[cid]), "commit": "c0d15e0", "date": "2026-12-03", "source": "referee audit"})
    return book


def ledgered(book) -> dict:
    """{"rsd": {claim id: declaration}} as the ledger holds them: code that changed nothing."""
    return {"rsd": {c: copy.deepcopy(e["declaration"]) for c, e in ledger.load(book, "rsd")["claims"].items()
                    if e["declaration"] is not None}}


def test_an_undeclared_change_is_caught_and_a_deviation_clears_it(book):
    decls = ledgered(book)
    assert ledger.differences(book, decls) == []  # unchanged claims pass
    decls["rsd"][CLAIM]["effects"][0]["min_effect"] = 0.8
    decls["rsd"][CLAIM]["seeds"]["ci"]["calibration_seeds"] = [5, 6]
    (found,) = ledger.differences(book, decls)
    assert (found.slug, found.claim, found.kind) == ("rsd", CLAIM, ledger.CHANGED)
    assert found.what == ["effects.flop_ratio.min_effect: 0.9 -> 0.8", "seeds.ci.calibration_seeds: (none) -> [5, 6]"]
    assert str(found).startswith(f"rsd.{CLAIM}: changed without a deviation entry")
    entry = ledger.deviate(book, "rsd", CLAIM, decls["rsd"][CLAIM], "the smallest effect is the paper's", "2026-12-03")
    assert entry["what"] == found.what and entry["why"] == "the smallest effect is the paper's"
    assert entry["verdict_seen"] is True  # c0d15e0's verdict was recorded under the old declaration
    assert ledger.differences(book, decls) == [] and ledger.chain_errors(ledger.load(book, "rsd")) == []


def test_a_ledger_edited_by_hand_is_caught(book):
    data = ledger.load(book, "rsd")
    data["claims"][CLAIM]["declaration"]["criterion"] = "something easier"
    data["claims"][CLAIM]["hash"] = ledger.fingerprint(data["claims"][CLAIM]["declaration"])
    ledger.save(book, "rsd", data)
    assert [e.split(":")[0] for e in ledger.chain_errors(ledger.load(book, "rsd"))] == [f"rsd.{CLAIM}"]


def test_added_and_removed_claims_need_an_entry_too(book):
    decls = ledgered(book)
    decls["rsd"]["new_claim"] = dict(decls["rsd"][CLAIM], id="new_claim")
    del decls["rsd"]["efficiency_noisy"]
    found = {d.claim: (d.kind, d.what) for d in ledger.differences(book, decls)}
    assert found == {"new_claim": ("added", ["claim added"]), "efficiency_noisy": ("removed", ["claim removed"])}
    added = ledger.deviate(book, "rsd", "new_claim", decls["rsd"]["new_claim"], "a new claim", "2026-12-03")
    removed = ledger.deviate(book, "rsd", "efficiency_noisy", None, "a sensitivity result, not a claim", "2026-12-03")
    assert (added["verdict_seen"], removed["verdict_seen"]) == (False, True)  # efficiency_noisy had a verdict
    assert ledger.differences(book, decls) == [] and ledger.chain_errors(ledger.load(book, "rsd")) == []
    with pytest.raises(ledger.LedgerError, match="matches its ledger"):
        ledger.deviate(book, "rsd", CLAIM, decls["rsd"][CLAIM], "nothing changed", "2026-12-03")


def test_the_command_line_status_deviate_history(book, monkeypatch, capsys):
    decls = ledgered(book)
    decls["rsd"][CLAIM]["criterion"] = "a new criterion"
    monkeypatch.setattr(build, "BOOK", book)
    monkeypatch.setattr(ledger, "declarations", lambda slugs=None: decls)
    assert cli.main(["ledger", "status"]) == 1
    out = capsys.readouterr().out
    assert f"rsd.{CLAIM}: changed without a deviation entry" in out and "-> a new criterion" in out
    assert cli.main(["ledger", "deviate", "rsd", "--why", "the criterion said the wrong thing"]) == 0
    assert "recorded changed (a verdict had been recorded" in capsys.readouterr().out
    assert cli.main(["ledger", "status"]) == 0
    assert cli.main(["ledger", "history", f"rsd.{CLAIM}"]) == 0
    out = capsys.readouterr().out
    assert "reproduced" in out and "the criterion said the wrong thing [after a verdict]" in out
    assert cli.main(["ledger", "deviate", "rsd.efficiency_oracle", "--why", "again"]) == 2
    assert "matches its ledger" in capsys.readouterr().err


def test_a_declaration_omits_defaults_examples_and_functions():
    """An optional field added to the contract at its default changes no fingerprint; a callable `samples` is
    "<function>"; the examples are test data, not design; the precondition's threshold is in its rule text."""

    @dataclasses.dataclass(frozen=True)
    class Effect2(Effect):
        design_sd: float | None = None

    def make(effect, examples):
        claim = Claim("rsd", "ledger_demo", "s", "v", "c", [effect], [at_least("learns", "acc", 0.8)], examples)
        claims.REGISTRY.pop(("rsd", "ledger_demo"))  # a test claim, not one of the chapter's
        return ledger.declaration(claim, None)

    good, bad = {"r": [1, 2], "acc": 1}, {"r": [0, 0.1], "acc": 1}
    plain = make(Effect("r", "r", min_effect=0.5), (good, bad))
    same = make(Effect2("r", "r", min_effect=0.5), (bad, good))
    same["effects"][0]["kind"] = "Effect"  # the subclass's own name aside
    assert same == plain and ledger.fingerprint(same) == ledger.fingerprint(plain)
    sd = make(Effect2("r", "r", min_effect=0.5, design_sd=0.2), (good, bad))
    assert sd["effects"][0]["design_sd"] == 0.2
    assert plain["preconditions"] == [{"id": "learns", "rule": "acc >= 0.8"}] and "examples" not in plain
    assert make(Effect("r", lambda m: m["r"]), (good, bad))["effects"][0]["samples"] == ledger.FUNCTION
    assert make(Effect("r", "r", null=1), (good, bad))["effects"][0]["null"] == make(
        Effect("r", "r", null=1.0), (good, bad))["effects"][0]["null"]


class Chapter:
    """A chapter config with a verdict seed list of its own claim's (`lm_seeds`) and a count of seeds."""

    @staticmethod
    def config(scale):
        return {"seeds": [0, 1, 2] if scale == "ci" else [0], "calibration_seeds": [7] if scale == "ci" else None,
                "lm_seeds": [40, 41] if scale == "ci" else [40], "figure_seeds": 3, "steps": 10}


def test_the_config_s_seeds_at_every_scale_are_declared():
    seeds = ledger.chapter_seeds(Chapter)
    assert seeds["ci"] == {"seeds": [0, 1, 2], "calibration_seeds": [7], "lm_seeds": [40, 41]}
    assert seeds["smoke"] == {"seeds": [0], "calibration_seeds": None, "lm_seeds": [40]}
    assert set(seeds) == set(ledger.SCALES)  # a count of seeds and other knobs are not seed lists


def seeded_claim(claim_id: str, **kw) -> Claim:
    """A test claim (not one of the chapter's), with `kw` such as seed_knobs."""
    claim = Claim("rsd", claim_id, "s", "v", "c", [Effect("r", "r", min_effect=0.5)],
                  [at_least("learns", "acc", 0.8)], ({"r": [1, 2], "acc": 1}, {"r": [0, 0.1], "acc": 1}), **kw)
    claims.REGISTRY.pop(("rsd", claim_id))
    return claim


def test_a_claim_records_the_seed_lists_it_names_and_no_other():
    seeds = ledger.chapter_seeds(Chapter)
    plain = ledger.declaration(seeded_claim("plain"), seeds)
    own = ledger.declaration(seeded_claim("own", seed_knobs=("lm_seeds",)), seeds)
    assert plain["seeds"]["ci"] == {"seeds": [0, 1, 2], "calibration_seeds": [7]}
    assert own["seeds"]["ci"] == {"seeds": [0, 1, 2], "calibration_seeds": [7], "lm_seeds": [40, 41]}
    assert "seed_knobs" not in own  # recorded by its values, not by its name
    with pytest.raises(ledger.LedgerError, match=r"seed_knobs \['width_seeds'\] are not seed lists"):
        ledger.declaration(seeded_claim("missing", seed_knobs=("width_seeds",)), seeds)
    with pytest.raises(claims.ClaimError, match="seed_knobs"):
        seeded_claim("bad", seed_knobs=("calibration_seeds",))


def test_every_seed_list_of_a_chapter_is_a_claim_s_or_declared_of_no_claim():
    """So a moved list of verdict seeds is a declaration change the ledger sees: each `*_seeds` list of every
    chapter config is named by one of its claims' `seed_knobs` or by its `SEEDS_OF_NO_CLAIM`, never by both."""
    from icml25.core.claims import REGISTRY

    for slug, module in ledger.chapter_modules().items():
        lists = set().union(*(ledger.chapter_seeds(module) or {"": {}}).values()) - set(ledger.FIRST_SEED_KNOBS)
        named = {k for (chapter, _), c in REGISTRY.items() if chapter == slug for k in c.seed_knobs}
        of_no_claim = set(getattr(module, "SEEDS_OF_NO_CLAIM", ()))
        assert lists == named | of_no_claim and not named & of_no_claim, (slug, lists, named, of_no_claim)


def test_migrate_records_a_format_change_only_where_the_seeds_are_the_verdict_s(book):
    """Seed lists a ledger did not record are added as a format change when they hold the values of the claim's
    latest verdict, which then counts as no revision; where they moved since, it is a change after a verdict; a
    claim whose design also changed is not migrated."""
    decls = ledgered(book)
    for cid, value in ((CLAIM, [40, 41]), ("efficiency_noisy", [50, 51]), ("efficiency_learned", [40, 41])):
        for scale in ledger.SCALES:
            decls["rsd"][cid]["seeds"][scale]["lm_seeds"] = value
    decls["rsd"]["efficiency_learned"]["criterion"] = "another criterion"
    at_commit = {"c0d15e0": {"rsd": {s: {"seeds": [0, 1, 2], "lm_seeds": [40, 41]} for s in ledger.SCALES}}}
    done = {cid: e for _, cid, e in ledger.migrate(book, decls, at_commit.__getitem__, "2026-12-05")}
    assert set(done) == {CLAIM, "efficiency_noisy"}
    assert done[CLAIM]["kind"] == ledger.FORMAT and "values the latest verdict (c0d15e0)" in done[CLAIM]["why"]
    assert done[CLAIM]["what"] == [f"seeds.{s}.lm_seeds: (none) -> [40, 41]" for s in ("ci", "full", "smoke")]
    assert done["efficiency_noisy"]["kind"] == ledger.CHANGED and "moved after that verdict" in done[
        "efficiency_noisy"]["why"]
    data = ledger.load(book, "rsd")
    assert [len(ledger.revised_after_verdict(data["claims"][c])) for c in (CLAIM, "efficiency_noisy")] == [0, 1]
    assert [d.claim for d in ledger.differences(book, decls)] == ["efficiency_learned"]
    assert ledger.chain_errors(data) == []
    page = ledger.page(data)
    assert "a change of the ledger's format, not of the design" in page and f"## `{CLAIM}`\n" in page


def _record(verdict: str, scale: str = "ci") -> dict:
    return {"chapter": "rsd", "claim_id": CLAIM, "verdict": verdict, "scale": scale, "notebook": "02_reasoning",
            "recorded_at": "2026-12-03T12:00:00+00:00"}


def test_the_builder_appends_a_verdict_only_when_it_or_the_declaration_changes(book, monkeypatch):
    decls = ledgered(book)
    monkeypatch.setattr(build, "BOOK", book)
    monkeypatch.setattr(ledger, "declarations", lambda slugs=None: decls)
    out, task = build.output("ci"), build.Task("rsd", "02_reasoning")
    entry = {"status": "ok", "duration_s": 1.0, "scale": "ci", "error": None, "machine": "Demo CPU, AVX2, 8 MiB LLC"}

    def run(*records):
        build.commit(out, task, {"entry": entry, "notebook": None, "records": list(records)}, "input-hash")
        return ledger.load(book, "rsd")["claims"][CLAIM]["history"]

    baseline = ledger.load(book, "rsd")["claims"][CLAIM]["history"]
    first = run(_record("refuted"))
    assert first[:-1] == baseline and first[-1]["verdict"] == "refuted" and first[-1]["source"] == "icml25 build"
    assert first[-1]["hash"] == ledger.fingerprint(decls["rsd"][CLAIM]) and first[-1]["date"] == "2026-12-03"
    assert first[-1]["machine"] == "Demo CPU, AVX2, 8 MiB LLC"  # the machine the notebook ran on
    assert run(_record("refuted")) == first  # an unchanged rebuild changes no file
    assert run(_record("reproduced", scale="smoke")) == first  # smoke runs decide nothing
    decls["rsd"][CLAIM]["criterion"] = "a new criterion"
    changed = run(_record("refuted"))
    assert len(changed) == len(first) + 1 and changed[-1]["hash"] == ledger.fingerprint(decls["rsd"][CLAIM])
    # the new design was decided before its change was recorded: the deviation says so
    entry = ledger.deviate(book, "rsd", CLAIM, decls["rsd"][CLAIM], "a clearer criterion", "2026-12-03")
    assert (entry["verdict_seen"], entry["new_verdict_seen"]) == (True, True)
    page = ledger.page(ledger.load(book, "rsd"))
    assert "and after a build had already decided the new design (refuted at ci" in page


def test_the_deviations_page_and_the_badge(book, monkeypatch):
    """The page lists each change (old -> new) and why; the scorecard badge marks only claims revised after a
    verdict, linked to their entry; the table of contents lists the page."""
    decls = ledgered(book)
    decls["rsd"][CLAIM]["effects"][0]["min_effect"] = 0.8
    ledger.deviate(book, "rsd", CLAIM, decls["rsd"][CLAIM], "the paper's smallest effect", "2026-12-03")
    data = ledger.load(book, "rsd")
    data["claims"]["efficiency_noisy"]["history"] = []  # no verdict seen under its old design
    ledger.save(book, "rsd", data)
    decls["rsd"]["efficiency_noisy"]["criterion"] = "a clearer criterion"
    ledger.deviate(book, "rsd", "efficiency_noisy", decls["rsd"]["efficiency_noisy"], "said better", "2026-12-03")
    (book / "rsd" / "index.md").write_text("# RSD\n")
    (book / "rsd" / "02_reasoning.ipynb").write_text("{}")
    monkeypatch.setattr(build, "BOOK", book)

    assert ledger.write_pages(book, book) == ["rsd"]
    text = (book / "rsd" / ledger.PAGE).read_text()
    assert text.startswith(f"# {ledger.PAGE_TITLE}\n")
    assert "effects.flop_ratio.min_effect: 0.9 -> 0.8" in text and "*Why:* the paper's smallest effect" in text
    assert f"({ledger.label('rsd', CLAIM)})=\n## `{CLAIM}`: revised after a verdict (1)" in text
    assert "under the old design (reproduced at ci (c0d15e0))" in text
    assert "decided under: reproduced at ci (2026-12-03, as registered)." in text
    assert "## `efficiency_noisy`\n" in text and "before any verdict under the old design" in text
    assert "- file: rsd/02_reasoning\n          - file: rsd/deviations" in toc.render()

    out = build.output("ci")
    (out.results / "rsd.json").parent.mkdir(parents=True, exist_ok=True)
    records = [dict(_record("refuted"), claim_id=c, paper_statement="s", paper_value="v", our_value="o",
                    reason="r", effect=None, effects=[], seeds=[0], notebook="02_reasoning")
               for c in (CLAIM, "efficiency_noisy", "efficiency_learned")]
    (out.results / "rsd.json").write_text(json.dumps({"chapter": "rsd", "records": records}))
    build._record(out, "rsd/02_reasoning", {"status": "ok", "duration_s": 1.0, "scale": "ci", "error": None})
    badges = {r["claim_id"]: r["badge"] for r in scorecard.rows() if r["slug"] == "rsd"}
    assert badges == {CLAIM: f"{{ref}}`revised after a verdict (1) <{ledger.label('rsd', CLAIM)}>`",
                      "efficiency_noisy": "", "efficiency_learned": ""}
    assert scorecard.render(with_figure=False).count("revised after a verdict (1)") == 1
