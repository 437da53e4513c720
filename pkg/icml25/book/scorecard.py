"""The scorecard page: every claim of every paper, its verdict (reproduced / refuted / inconclusive) with the reason,
its effect and interval, and each chapter's runtime, from the results of one book (one scale: book/_results/ for
ci); and one figure of every claim's effect. Only records made at the book's scale by the notebooks its manifest
lists count, so the scorecard shows what the pages show and never mixes scales."""

from __future__ import annotations

import json

from .. import catalog
from ..core.claims import INCONCLUSIVE, REFUTED, REPRODUCED, VERDICTS, standardised
from . import build, ledger

VERDICT_TEXT = {REPRODUCED: "**reproduced**", REFUTED: "refuted", INCONCLUSIVE: "*inconclusive*"}
FIGURE = "scorecard_effects.png"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def chapter_runtime(manifest: dict, slug: str) -> tuple[float, list[str], list[str]]:
    """Seconds spent on the chapter's notebooks, the notebooks built, and those that failed."""
    entries = {k: v for k, v in manifest["notebooks"].items() if k.split("/")[0] == slug}
    seconds = sum(v["duration_s"] for v in entries.values())
    failed = [k for k, v in entries.items() if v["status"] != "ok"]
    return seconds, [k.split("/")[1] for k in entries], failed


def chapter_records(out: build.Output, manifest: dict, slug: str) -> list[dict]:
    """The chapter's claim records that the book's pages show: made at the book's scale by a notebook of the
    chapter that the manifest lists at that scale."""
    path = out.results / f"{slug}.json"
    records = json.loads(path.read_text())["records"] if path.exists() else []
    built = {k.split("/")[1] for k, v in manifest["notebooks"].items()
             if k.split("/")[0] == slug and v["scale"] == out.scale}
    return [r for r in records if r["scale"] == out.scale and r["notebook"] in built]


def _effect_text(e: dict | None) -> str:
    if not e:
        return ""
    if e["ci_low"] is None:
        return f"{e['name']}: n={e['n']}, no interval"
    return f"{e['name']} = {e['estimate']:.3g} [{e['ci_low']:.3g}, {e['ci_high']:.3g}], n={e['n']}"


def rows(out: build.Output | None = None, manifest: dict | None = None) -> list[dict]:
    """One row per claim (or one per chapter without claims), for all 19 papers; `verdict` is one of the three
    verdicts, "failed" or "not yet checked". Only the records `chapter_records` accepts count."""
    out = out or build.output(build.BOOK_SCALE)
    manifest, table = manifest or build.load_manifest(out), []
    for ch in catalog.CHAPTERS:
        seconds, built, failed = chapter_runtime(manifest, ch.slug)
        records = chapter_records(out, manifest, ch.slug)
        link = f"[{ch.title}]({ch.slug}/index.md)" if (out.book / ch.slug / "index.md").exists() else ch.title
        base = {"slug": ch.slug, "chapter": link, "runtime": f"{seconds:.0f} s" if seconds else "",
                "failed": failed, "scale": out.scale if built else ""}
        if failed:
            base["runtime"] += " (failed: " + ", ".join(f.split("/")[1] for f in failed) + ")"
        if not records:
            table.append(dict(base, claim="", paper="", ours="", verdict="failed" if failed else "not yet checked",
                            reason="", effect="", effects=[], deciding=None, seeds=""))
        linked = (out.book / ch.slug / ledger.PAGE).exists()
        for r in records:
            table.append(dict(base, claim=f"`{r['claim_id']}`: {r['paper_statement']}", claim_id=r["claim_id"],
                            badge=ledger.badge(build.BOOK, ch.slug, r["claim_id"], linked),
                            paper=r["paper_value"], ours=r["our_value"], verdict=r["verdict"],
                            reason=r["reason"] if r["verdict"] != REPRODUCED else "",
                            effect=_effect_text(r.get("effect")), effects=r.get("effects", []),
                            deciding=r.get("effect"),
                            seeds=", ".join(map(str, r["seeds"])) + f" ({r['scale']})"))
    return table


def _summary(table: list[dict]) -> list[str]:
    """One line per paper: claims by verdict, and the chapter's runtime and scale."""
    lines = ["| Paper | Reproduced | Refuted | Inconclusive | Runtime (scale) |", "|---|---|---|---|---|"]
    for slug in dict.fromkeys(r["slug"] for r in table):
        mine = [r for r in table if r["slug"] == slug]
        counts = [sum(r["verdict"] == v for r in mine) for v in VERDICTS]
        if not any(counts):
            counts = [mine[0]["verdict"], "", ""]
        lines.append(f"| {_cell(mine[0]['chapter'])} | " + " | ".join(map(str, counts))
                     + f" | {_cell(mine[0]['runtime'])} ({mine[0]['scale']}) |")
    return lines


def _warmup(manifest: dict) -> list[str]:
    """A sentence on the shared zoo models trained before the notebooks ran (their time is in no chapter's)."""
    w = manifest.get("zoo_warmup")
    if not w:
        return []
    return [f"Before the notebooks ran, the builder trained (or loaded) the zoo models several chapters share in "
            f"{w['duration_s']:.0f} s at {w['scale']} scale: {', '.join(w['models'])}. That time is in no chapter's "
            "runtime above.", ""]


def machines(manifest: dict, scale: str) -> list[str]:
    """A sentence naming the machine(s) that built the book's notebooks at `scale` (from their manifest entries),
    or nothing where no entry records one."""
    seen = dict.fromkeys(v["machine"] for v in manifest["notebooks"].values()
                         if v.get("scale") == scale and v.get("machine"))
    if not seen:
        return []
    return [f"Built on {'; '.join(seen)}. Models are trained in place, and their bits (so a verdict whose interval "
            "sits near its bar) can differ on a CPU of another kind: see each claim's history in its chapter's "
            "ledger (`icml25 ledger history`).", ""]


def figure(table: list[dict]):
    """Every claim's deciding effect (`core.claims.deciding_effect`: the one that refutes it, is left undecided,
    or clears its bar by the least), standardised (see `standardised`), with its interval, coloured by verdict."""
    import matplotlib.pyplot as plt

    from ..core.plot import VERDICT_COLOURS, use_seaborn_style

    use_seaborn_style()
    shown = [r for r in table if r["deciding"] and r["deciding"]["ci_low"] is not None]
    fig, ax = plt.subplots(figsize=(8.0, 1.2 + 0.24 * max(len(shown), 1)), constrained_layout=True)
    for i, r in enumerate(shown):
        est, lo, hi = standardised(r["deciding"])
        clip = lambda v: max(-5.0, min(5.0, v))  # noqa: E731  (very wide intervals are cut at the frame)
        ax.plot([clip(lo), clip(hi)], [i, i], color=VERDICT_COLOURS[r["verdict"]], lw=2.5)
        ax.plot(clip(est), i, "o", color=VERDICT_COLOURS[r["verdict"]], ms=5)
    ax.axvline(0, color="black", ls="--", lw=1)
    ax.axvline(1, color="black", ls=":", lw=1)
    ax.set_yticks(range(len(shown)), [f"{r['slug']}.{r['claim_id']}" for r in shown], fontsize=7)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(-5.2, 5.2)
    ax.set_xlabel("effect in the paper's direction (0 = none; 1 = the paper's smallest effect, or the margin)")
    ax.set_title("Every claim's effect and interval")
    for verdict, colour in VERDICT_COLOURS.items():
        ax.plot([], [], color=colour, lw=2.5, label=verdict)
    ax.legend(loc="lower right", fontsize=8)
    return fig


HOW = ("How a verdict is made: each claim declares, before its experiment runs, the effects that decide it (a "
       "statistic over paired units, usually seeds, with its 95% interval), the preconditions that show the "
       "experiment could have seen the effect, and, where chance could pass the criterion, a null control. "
       "**Reproduced**: every precondition holds and every interval excludes no effect on the paper's side. "
       "**Refuted**: the preconditions hold and an interval lies wholly short of the paper's smallest effect (or "
       "outside an equivalence margin). **Inconclusive**: anything else, with the reason given. See "
       "[How this book decides](decides.md). A claim whose declared design changed after a verdict had been seen "
       "is marked *revised after a verdict (n)*, linked to its chapter's deviations page.")


def render(out: build.Output | None = None, with_figure: bool = True) -> str:
    out = out or build.output(build.BOOK_SCALE)
    manifest = build.load_manifest(out)
    table = rows(out, manifest)
    checked = [r for r in table if r["verdict"] in VERDICTS]
    counts = {v: sum(r["verdict"] == v for r in checked) for v in VERDICTS}
    lines = [
        "# Scorecard", "",
        f"Every claim the book checks, from every chapter's executed notebooks at scale "
        f"`{out.scale}`: **{counts[REPRODUCED]} reproduced, "
        f"{counts[REFUTED]} refuted, {counts[INCONCLUSIVE]} inconclusive** of {len(checked)} claims, across "
        f"{len({r['slug'] for r in checked})} of {len(catalog.CHAPTERS)} papers.", "", HOW, "",
        "## By paper", "", *_summary(table), "", *_warmup(manifest), *machines(manifest, out.scale),
    ]
    if with_figure and any(r["effects"] for r in table):
        lines += ["## Every effect at a glance", "", f"![Every claim's effect and interval]({FIGURE})", ""]
    lines += ["## Every claim", "",
              "| Paper | Verdict | Claim | Paper's value | Deciding effect [95% interval] | Why (if not reproduced) | "
              "Our value | Seeds (scale) |", "|---|---|---|---|---|---|---|---|"]
    previous = None
    for r in table:
        paper = r["chapter"] if r["slug"] != previous else ""
        previous = r["slug"]
        verdict = VERDICT_TEXT.get(r["verdict"], f"*{r['verdict']}*")
        if r.get("badge"):
            verdict += f" ({r['badge']})"
        lines.append("| " + " | ".join(_cell(x) for x in (paper, verdict, r["claim"], r["paper"], r["effect"],
                                                           r["reason"], r["ours"], r["seeds"])) + " |")
    return "\n".join(lines) + "\n"


def write(out: build.Output | None = None) -> None:
    out = out or build.output(build.BOOK_SCALE)
    table = rows(out)
    if any(r["effects"] for r in table):
        fig = figure(table)
        fig.savefig(out.book / FIGURE)
    (out.book / "scorecard.md").write_text(render(out))
