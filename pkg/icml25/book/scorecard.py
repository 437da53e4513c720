"""The scorecard page: every claim of every paper, its verdict and runtime, from book/_results/."""

from __future__ import annotations

from .. import catalog
from ..core.claims import load_results
from .build import BOOK, load_manifest

VERDICT_TEXT = {"reproduced": "**reproduced**", "not reproduced": "not reproduced"}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def chapter_runtime(manifest: dict, slug: str) -> tuple[float, str | None, list[str]]:
    """Seconds spent on the chapter's notebooks, the scale, and the notebooks that failed."""
    entries = {k: v for k, v in manifest["notebooks"].items() if k.split("/")[0] == slug}
    seconds = sum(v["duration_s"] for v in entries.values())
    scales = {v["scale"] for v in entries.values()}
    failed = [k for k, v in entries.items() if v["status"] != "ok"]
    return seconds, (scales.pop() if len(scales) == 1 else None), failed


def rows() -> list[dict]:
    """One row per claim (or one per chapter without claims), for all 19 papers; `verdict` is "reproduced",
    "not reproduced", "failed" or "not yet reproduced"."""
    manifest, out = load_manifest(), []
    for ch in catalog.CHAPTERS:
        seconds, scale, failed = chapter_runtime(manifest, ch.slug)
        records = [r for r in load_results(ch.slug)["records"] if scale is None or r["scale"] == scale]
        link = f"[{ch.title}]({ch.slug}/index.md)" if (BOOK / ch.slug / "index.md").exists() else ch.title
        base = {"slug": ch.slug, "chapter": link, "runtime": f"{seconds:.0f} s" if seconds else "",
                "failed": failed}
        if failed:
            base["runtime"] += " (failed: " + ", ".join(f.split("/")[1] for f in failed) + ")"
        if not records:
            out.append(dict(base, claim="", paper="", ours="", verdict="failed" if failed else "not yet reproduced",
                            seeds=""))
        for r in records:
            out.append(dict(base, claim=f"`{r['claim_id']}`: {r['paper_statement']}", paper=r["paper_value"],
                            ours=r["our_value"], verdict=r["verdict"],
                            seeds=", ".join(map(str, r["seeds"])) + f" ({r['scale']})"))
    return out


def _summary(table: list[dict]) -> list[str]:
    """One line per paper: claims reproduced out of claims checked, and the chapter's runtime."""
    lines = ["| Paper | Reproduced | Runtime |", "|---|---|---|"]
    for slug in dict.fromkeys(r["slug"] for r in table):
        mine = [r for r in table if r["slug"] == slug]
        checked = [r for r in mine if r["verdict"] in VERDICT_TEXT]
        score = f"{sum(r['verdict'] == 'reproduced' for r in checked)} of {len(checked)}" if checked \
            else mine[0]["verdict"]
        lines.append(f"| {_cell(mine[0]['chapter'])} | {score} | {_cell(mine[0]['runtime'])} |")
    return lines


def _warmup(manifest: dict) -> list[str]:
    """A sentence on the shared zoo models trained before the notebooks ran (their time is in no chapter's)."""
    w = manifest.get("zoo_warmup")
    if not w:
        return []
    return [f"Before the notebooks ran, the builder trained (or loaded) the zoo models several chapters share in "
            f"{w['duration_s']:.0f} s at {w['scale']} scale: {', '.join(w['models'])}. That time is in no chapter's "
            "runtime above.", ""]


def render() -> str:
    table = rows()
    checked = [r for r in table if r["verdict"] in VERDICT_TEXT]
    n_ok = sum(r["verdict"] == "reproduced" for r in checked)
    lines = [
        "# Scorecard", "",
        f"Every claim the book checks, from every chapter's executed notebooks: **{n_ok} of {len(checked)} claims "
        f"reproduced**, across {len({r['slug'] for r in checked})} of {len(catalog.CHAPTERS)} papers. A verdict is "
        "computed by the claim's test from the measured values (the criterion is stated in each chapter's claim "
        "check); it is never written by hand. *Not yet reproduced* means no claim of that paper has been checked "
        "yet.", "",
        "## By paper", "", *_summary(table), "", *_warmup(load_manifest()),
        "## Every claim", "",
        "| Paper | Verdict | Claim | Paper's value | Our value | Seeds (scale) |",
        "|---|---|---|---|---|---|",
    ]
    previous = None
    for r in table:
        paper = r["chapter"] if r["slug"] != previous else ""
        previous = r["slug"]
        verdict = VERDICT_TEXT.get(r["verdict"], f"*{r['verdict']}*")
        lines.append("| " + " | ".join(_cell(x) for x in (paper, verdict, r["claim"], r["paper"], r["ours"],
                                                           r["seeds"])) + " |")
    return "\n".join(lines) + "\n"


def write() -> None:
    (BOOK / "scorecard.md").write_text(render())
