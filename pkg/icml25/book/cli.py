"""`icml25`: build the book, list its chapters, benchmark the kernels, check the rendered HTML, keep the claims'
preregistration ledger."""

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


def _ledger_parser(sub) -> None:
    """`icml25 ledger {status,init,deviate,migrate,history}`: the claims' declared designs and their deviations."""
    lp = sub.add_parser("ledger", help="the preregistration ledger of the claims (book/<slug>/claims.lock)")
    ls = lp.add_subparsers(dest="action", required=True)
    s = ls.add_parser("status", help="list claims whose declaration differs from the ledger without a deviation")
    s.add_argument("slugs", type=_slug, nargs="*", metavar="SLUG", help="only these chapters (default: all)")
    i = ls.add_parser("init", help="register the chapters that have no ledger yet")
    i.add_argument("slugs", type=_slug, nargs="*", metavar="SLUG", help="only these chapters (default: all)")
    i.add_argument("--at", metavar="COMMIT", help="register the declarations of this commit's code (default: now)")
    d = ls.add_parser("deviate", help="record why a claim's declaration changed (or was added or removed)")
    d.add_argument("names", nargs="+", metavar="SLUG.CLAIM",
                   help="the claims; a bare SLUG means every claim of the chapter that differs from its ledger")
    d.add_argument("--why", required=True, help="one sentence: why the design changed")
    m = ls.add_parser("migrate", help="record the ledger's change to recording every seed list (a format change)")
    m.add_argument("slugs", type=_slug, nargs="*", metavar="SLUG", help="only these chapters (default: all)")
    h = ls.add_parser("history", help="a claim's registration, verdicts and deviations")
    h.add_argument("name", metavar="SLUG[.CLAIM]")


def _ledger(args) -> int:
    from . import ledger
    from .build import BOOK, PROJECT_ROOT

    try:
        if args.action == "status":
            return ledger.cmd_status(BOOK, args.slugs)
        if args.action == "init":
            return ledger.cmd_init(BOOK, args.slugs, args.at, PROJECT_ROOT)
        if args.action == "deviate":
            return ledger.cmd_deviate(BOOK, args.names, args.why)
        if args.action == "migrate":
            return ledger.cmd_migrate(BOOK, args.slugs, PROJECT_ROOT)
        return ledger.cmd_history(BOOK, args.name)
    except ValueError as e:  # a LedgerError, or an unknown chapter
        print(f"icml25 ledger {args.action}: {e}", file=sys.stderr)
        return 2


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
    _ledger_parser(sub)
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
    if args.command == "ledger":
        return _ledger(args)
    if args.command == "check-html":
        from .htmlcheck import main as check

        return check(args.chromium)
    return 2


if __name__ == "__main__":
    sys.exit(main())
