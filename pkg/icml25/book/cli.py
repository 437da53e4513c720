"""`icml25`: build the book, list its chapters, benchmark the kernels, check the rendered HTML."""

from __future__ import annotations

import argparse
import sys

from .. import catalog
from ..core.config import SCALES


def _scale(value: str) -> str:
    if value not in SCALES:
        raise argparse.ArgumentTypeError(f"invalid scale {value!r}; valid scales: {', '.join(SCALES)}")
    return value


def _slug(value: str) -> str:
    if value not in catalog.BY_SLUG:
        raise argparse.ArgumentTypeError(f"unknown chapter {value!r}; valid chapters: {', '.join(catalog.BY_SLUG)}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="icml25", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="execute the notebooks and render the book")
    b.add_argument("--scale", type=_scale, default="ci", help=f"one of {', '.join(SCALES)} (default ci)")
    b.add_argument("--only", type=_slug, nargs="+", metavar="SLUG", help="build only these chapters")
    b.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default 2)")
    b.add_argument("--keep-going", action="store_true", help="run every notebook even after one fails")
    b.add_argument("--no-render", action="store_true", help="execute the notebooks but do not render the HTML")
    b.add_argument("--dry-run", action="store_true",
                   help="with --scale full: check every chapter's full config and print the plan (checkpoints, "
                        "GPUs, memory, hours) without downloading or training anything")
    b.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="run the notebooks in a local process pool (default) or as Ray tasks")
    b.add_argument("--address", metavar="ADDR", help="with --executor ray: the cluster to join (default: start a "
                   "local Ray with --jobs CPUs)")
    sub.add_parser("list", help="list the chapters and their notebooks")
    bn = sub.add_parser("bench", help="benchmark the compiled kernels against their references")
    bn.add_argument("--scale", type=_scale, default="full", help="the shapes of this scale (default full)")
    bn.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    c = sub.add_parser("check-html", help="open the built pages in headless Chromium and check them")
    c.add_argument("--chromium", default="chromium")
    args = parser.parse_args(argv)

    if args.command == "build" and args.dry_run:
        if args.scale != "full":
            parser.error("--dry-run plans the full scale: pass --scale full")
        from ..core.fullplan import dry_run

        return dry_run(args.only)
    if args.command == "build":
        from .build import build

        if args.address and args.executor != "ray":
            parser.error("--address needs --executor ray")
        return build(args.scale, args.only, args.jobs, args.keep_going, not args.no_render, args.executor,
                     args.address)
    if args.command == "list":
        from .build import discover

        tasks = discover()
        for ch in catalog.ALL:
            names = [t.name for t in tasks if t.slug == ch.slug]
            print(f"{ch.slug:20s} {ch.part[:28]:28s} {', '.join(names) or '(not written yet)'}")
        return 0
    if args.command == "bench":
        from ..ops import bench

        return bench.main(args.scale, args.json)
    if args.command == "check-html":
        from .htmlcheck import main as check

        return check(args.chromium)
    return 2


if __name__ == "__main__":
    sys.exit(main())
