"""Open the built book in headless Chromium and check what a reader would see: the landing page, the
scorecard and every chapter page render; each chapter page shows a figure and no Python traceback."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from .build import HTML, discover

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
         "--no-first-run", "--disable-component-update", "--disable-sync", "--virtual-time-budget=5000"]


def dump_dom(chromium: str, page: Path) -> str:
    """The page's DOM after Chromium has rendered it (scripts run)."""
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                             capture_output=True, text=True, timeout=120)
    if res.returncode != 0 or "<html" not in res.stdout:
        raise RuntimeError(f"chromium could not render {page}: {res.stderr.strip()[-500:]}")
    return res.stdout


def problems_of(dom: str, chapter_page: bool) -> list[str]:
    problems = []
    if "Traceback (most recent call last)" in dom or re.search(r'class="[^"]*ansi-red-fg', dom) and "Error" in dom:
        problems.append("shows a Python traceback")
    if chapter_page and not re.search(r'<img[^>]+src="[^"]*(data:image|_images/)', dom):
        problems.append("shows no figure")
    if "\\(" in re.sub(r"<script.*?</script>", "", dom, flags=re.S) and "MathJax" not in dom:
        problems.append("has unrendered LaTeX")
    return problems


def main(chromium: str = "chromium") -> int:
    pages = {"landing page": (HTML / "index.html", False), "scorecard": (HTML / "scorecard.html", False)}
    for t in discover():
        pages[t.key] = (HTML / t.slug / f"{t.name}.html", True)
    failures = 0
    for label, (page, chapter_page) in pages.items():
        if not page.exists():
            print(f"FAIL {label}: {page.relative_to(HTML.parent.parent)} was not built")
            failures += 1
            continue
        found = problems_of(dump_dom(chromium, page), chapter_page)
        print(("FAIL " if found else "ok   ") + label + (": " + "; ".join(found) if found else ""))
        failures += bool(found)
    print(f"browser check: {len(pages) - failures} passed, {failures} failed")
    return 1 if failures else 0
