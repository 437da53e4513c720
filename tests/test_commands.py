"""Every command the README and the landing page (book/intro.md) show runs as written: each names a make target of
the Makefile, an `icml25` subcommand with options its parser accepts, or notebooks and notebook parameters that
exist. The cheap ones run (`icml25 list`, `icml25 build --help`, the full-scale dry run)."""

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

from icml25.book import cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "book/intro.md")
#: the programs whose commands are checked; `.venv/bin/X` is X
PROGRAMS = ("make", "icml25", "papermill", "jupytext", "ray")


def commands(page: str) -> list[list[str]]:
    """The commands of a page: each line of its ```bash blocks (comments dropped) and each inline `code` span that
    starts with one of PROGRAMS and has arguments (a bare `make` in prose names the tool), as argument lists with
    `.venv/bin/` taken off the program."""
    text = (ROOT / page).read_text()
    lines = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    lines += re.findall(r"`([^`\n]+)`", prose)
    out = []
    for line in lines:
        words = shlex.split(line, comments=True)
        if len(words) > 1 and words[0].removeprefix(".venv/bin/") in PROGRAMS:
            out.append([words[0].removeprefix(".venv/bin/"), *words[1:]])
    return out


ALL = [(page, words) for page in PAGES for words in commands(page)]


def test_the_pages_show_commands_of_every_program():
    shown = {words[0] for _, words in ALL}
    assert {"make", "icml25", "papermill", "jupytext"} <= shown, shown
    assert ["make", "test"] in [w for _, w in ALL] and ["make", "book"] in [w for _, w in ALL]


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


class _Parsed(Exception):
    """Raised in place of running a command: carries the parser `icml25` built."""


@pytest.fixture(scope="module")
def icml25_parser() -> argparse.ArgumentParser:
    """The parser of the `icml25` console script, taken from its main() just before it would parse."""
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        raise _Parsed(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        cli.main([])
    except _Parsed as parsed:
        return parsed.args[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    pytest.fail("icml25's main() never parsed its arguments")


def subcommand_options(parser: argparse.ArgumentParser, name: str) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert name in sub.choices, f"icml25 has no subcommand {name!r}; it has {sorted(sub.choices)}"
    return set(sub.choices[name]._option_string_actions)


def notebook_source(path: str) -> Path:
    """The jupytext source an .ipynb of a command comes from: notebooks/X.ipynb is converted from notebooks/X.py,
    book/SLUG/X.ipynb is executed by the builder from notebooks/SLUG/X.py."""
    p = Path(path)
    assert p.suffix == ".ipynb", f"papermill runs an .ipynb, got {path}"
    parts = p.with_suffix(".py").parts
    source = ROOT / "notebooks" / Path(*parts[1:]) if parts[0] in ("notebooks", "book") else ROOT / p
    assert source.exists(), f"{path}: no notebook source {source.relative_to(ROOT)} to make it from"
    return source


def parameters(source: Path) -> set[str]:
    cell = next(c for c in jupytext.read(source).cells if c.cell_type == "code")
    return set(re.findall(r"^(\w+)\s*=", cell.source, re.M))


@pytest.mark.parametrize("page, words", ALL, ids=[f"{p}:{' '.join(w)}" for p, w in ALL])
def test_each_command_names_what_exists(page, words, icml25_parser):
    program, args = words[0], words[1:]
    if program == "make":
        assert set(args) <= make_targets(), f"{page}: make {' '.join(args)}: targets are {sorted(make_targets())}"
    elif program == "icml25" and any(c in " ".join(args) for c in "[|"):  # a synopsis: its options must exist
        options = subcommand_options(icml25_parser, args[0])
        named = set(re.findall(r"--[\w-]+", " ".join(args)))
        assert named <= options, f"{page}: icml25 {args[0]} has no {sorted(named - options)}"
    elif program == "icml25":
        try:
            icml25_parser.parse_args(args)
        except SystemExit:
            pytest.fail(f"{page}: icml25 refuses {' '.join(args)} (its message is above)")
    elif program == "jupytext":
        assert (ROOT / args[-1]).exists(), f"{page}: {args[-1]} does not exist"
    elif program == "papermill":
        names = parameters(notebook_source(args[0]))
        given = [args[i + 1] for i, a in enumerate(args) if a in ("-p", "--parameters")]
        assert set(given) <= names, f"{page}: {args[0]} has no parameter {sorted(set(given) - names)}: {names}"
    elif program == "ray":
        assert args[0] in ("start", "stop") and (Path(sys.executable).parent / "ray").exists()


def test_the_cheap_commands_run(capsys):
    """`icml25 list` through the console script as a reader types it; `build --help` and the full-scale dry run
    (which plans without training) in this process."""
    listed = subprocess.run([str(Path(sys.executable).parent / "icml25"), "list"], capture_output=True, text=True,
                            cwd=ROOT, timeout=300)
    assert listed.returncode == 0 and "rsd" in listed.stdout and "01_method" in listed.stdout, listed.stderr
    with pytest.raises(SystemExit) as done:
        cli.main(["build", "--help"])
    assert done.value.code == 0 and "--only" in capsys.readouterr().out
    assert cli.main(["build", "--scale", "full", "--dry-run"]) == 0
    assert "chapters valid" in capsys.readouterr().out
