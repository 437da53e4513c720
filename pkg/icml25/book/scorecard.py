"""The scorecard page: every claim of every paper, its verdict and runtime, from book/_results/."""

from __future__ import annotations

import json

from .. import catalog
from ..core.claims import load_results
from .build import BOOK, load_manifest

VERDICT_MARK = {"reproduced": "✅ reproduced", "not reproduced": "❌ not reproduced"}


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
    """One row per claim (or one per chapter without claims), for all 19 papers."""
    manifest, out = load_manifest(), []
    for ch in catalog.CHAPTERS:
        seconds, scale, failed = chapter_runtime(manifest, ch.slug)
        records = [r for r in load_results(ch.slug)["records"] if scale is None or r["scale"] == scale]
        link = f"[{ch.title}]({ch.slug}/index.md)" if (BOOK / ch.slug / "index.md").exists() else ch.title
        base = {"chapter": link, "runtime": f"{seconds:.0f} s" if seconds else "", "failed": failed}
        if failed:
            base["runtime"] += " (failed: " + ", ".join(f.split("/")[1] for f in failed) + ")"
        if not records:
            out.append(dict(base, claim="", paper="", ours="", verdict="failed" if failed else "not yet reproduced",
                            seeds=""))
        for r in records:
            out.append(dict(base, claim=f"`{r['claim_id']}`: {r['paper_statement']}", paper=r["paper_value"],
                            ours=r["our_value"], verdict=VERDICT_MARK[r["verdict"]],
                            seeds=", ".join(map(str, r["seeds"])) + f" ({r['scale']})"))
    return out


def render() -> str:
    table = rows()
    n_claims = sum(1 for r in table if r["verdict"].startswith(("✅", "❌")))
    n_ok = sum(1 for r in table if r["verdict"].startswith("✅"))
    chapters = len({r["chapter"] for r in table if r["verdict"].startswith(("✅", "❌"))})
    lines = [
        "# Scorecard", "",
        f"Every claim the book checks, from every chapter's executed notebooks: **{n_ok} of {n_claims} claims "
        f"reproduced**, across {chapters} of {len(catalog.CHAPTERS)} papers. A verdict is computed by the claim's "
        "test from the measured values (the criterion column of each chapter's claim check); it is never written "
        "by hand. *Not yet reproduced* means the chapter has not been written yet.", "",
        "| Paper | Claim | Paper's value | Our value | Verdict | Seeds (scale) | Runtime |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append("| " + " | ".join(_cell(r[k]) for k in
                                         ("chapter", "claim", "paper", "ours", "verdict", "seeds", "runtime")) + " |")
    return "\n".join(lines) + "\n"


def write() -> None:
    (BOOK / "scorecard.md").write_text(render())


def as_json() -> str:
    return json.dumps(rows(), indent=1)
