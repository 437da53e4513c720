"""The book builder: jupytext → papermill (a process pool, or Ray tasks) → executed notebooks → Jupyter Book.

Each notebook `notebooks/<slug>/<name>.py` becomes the page `<slug>/<name>.ipynb` of the book of its scale: the
`ci` book is `book/` (rendered to `_build/html`); a build at another scale writes a book of its own under
`_build/<scale>/` (pages, results, manifest and HTML), so a book never mixes scales.

A notebook is not run again while its inputs match its last successful run: its source, the scale, the lock file,
and the package modules it imports, directly or through them (with the kernel sources when it reaches
`icml25.ops`); editing one chapter's module re-runs only the notebooks that import it. The manifest
`<results>/build.json` records each notebook's status, duration, scale and input hash. A failed notebook keeps
its traceback in its page and does not stop the others.

A notebook runs in a worker with its claims' records staged in a folder of its own; only the builder process
writes the book: the page, the chapter's records and the manifest entry together, under the manifest's lock, with
SIGINT and SIGTERM held off meanwhile. Workers and kernels die with the builder (parent-death signal), and SIGINT
or SIGTERM cancel the build: running notebooks are killed and the book keeps its previous pages and entries.

The warm-up trains the zoo models several chapters share once, with the base models of the chapters in
`CHAPTER_ZOO` and the cached preparations of those in `CHAPTER_RESULTS` (a learning-rate search, a chapter's runs),
longest first, recorded as the manifest's `zoo_warmup`, each entry with its own time. A notebook starts once the
entries its chapter needs are ready, so no chapter's runtime includes waiting for another's training, and a worker
with no entry left runs notebooks while the others still train; on Ray the entries are tasks the notebooks of those
chapters depend on. The notebooks of `ALONE` chapters (the kernels appendix,
which times the machine) run locally after all the others, one at a time.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import datetime as _dt
import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from .. import catalog
from ..core import machine
from ..core.config import check_scale
from ..core.paths import PROJECT_ROOT, build_dir, results_dir
from . import ledger

NOTEBOOKS = PROJECT_ROOT / "notebooks"
BOOK = PROJECT_ROOT / "book"
HTML = PROJECT_ROOT / "_build" / "html"
PACKAGE = PROJECT_ROOT / "pkg" / "icml25"
KERNELS = PROJECT_ROOT / "kernels"
LOCK = PROJECT_ROOT / "requirements.lock"
BOOK_SCALE = "ci"  # the scale of book/; the book of any other scale is built under _build/<scale>/
TIMEOUT_S = {"smoke": 300, "ci": 1800, "full": 24 * 3600}  # per cell (ci: twice the longest cell seen under load)
KERNEL_START_S = 300  # a kernel's start-up (imports) on a loaded machine has taken more than papermill's 60 s
# Zoo models that several chapters start from, trained before the notebooks fan out so that no notebook's time
# is spent waiting on a zoo lock while another trains them; at the seeds of the chapters that use every seed.
SHARED_ZOO = ("arith-draft", "arith-target")
SHARED_ZOO_USERS = ("workbench",)
# chapters that start from the shared models at seed 0 only
SHARED_ZOO_SEED0_USERS = ("implicit_prm", "ple", "mpo", "hybrid_winrate", "lora_init", "model_swarms")
# a chapter's own zoo model that the warm-up trains too when the chapter's `model` knob names it (at its config's
# `base_seed`, or else at each of its `seeds`), so the chapter's runtime is its experiment's:
# {slug: (module that registers it, zoo name)}
CHAPTER_ZOO = {"knowledge_editing": ("icml25.knowledge_editing_world", "ke-base"),
               "dist_interventions": ("icml25.dist_interventions", "dist-base")}
# what a chapter computes before its experiment and caches like a zoo model (`icml25.core.zoo.results`), run by the
# warm-up too, so the chapter's runtime is its experiment's: {slug: (cache name, function of the chapter's module
# that takes its config)}
CHAPTER_RESULTS = {"rsd": ("rsd-runs", "warm_up_seed"),
                   "cascade_routing": ("cascade-runs", "warm_up"),
                   "memory_layers": ("memory-runs", "warm_up"),
                   "aoe": ("aoe-runs", "warm_up"),
                   "implicit_prm": ("implicit-prm-runs", "warm_up"),
                   "fp_quant_scaling": ("fq-runs", "warm_up"),
                   "lora_init": ("lora-toy-sweeps", "warm_up"),
                   "model_swarms": ("swarm-runs", "warm_up_runs"),
                   "ple": ("ple-start", "warm_up_start"),
                   "mpo": ("mpo-lm-runs", "warm_up"),
                   "rlthf": ("rlthf-targeting", "warm_up_targeting"),
                   "dist_interventions": ("dist-runs", "warm_up_runs"),
                   "ibcircuit": ("ib-masks", "warm_up_circuits"),
                   "state_tracking": ("st-trackers", "train_design"),
                   "efficient_code": ("ec-runs", "warm_up"),
                   "knowledge_editing": ("ke-lifelong", "warm_up_lifelong"),
                   "kabb": ("kabb-runs", "warm_up"),
                   "hybrid_winrate": ("hybrid-winrate-runs", "warm_up")}
# chapters whose `CHAPTER_RESULTS` function also takes a seed: one warm-up entry per seed of the chapter's config, so
# that the builder's workers share a chapter whose every seed trains models of its own
SEEDED_RESULTS = ("rsd",)
# the warm-up's longest entries at ci, longest first (wall seconds in a build from an empty cache on a 2-core machine,
# two entries at a time: memory-runs about 850, cascade-runs 530 for its 174 seeds, dist-runs 380,
# hybrid-winrate-runs 340, implicit-prm-runs 290, ec-runs 210, st-trackers 170, aoe-runs 160, fq-runs 150,
# mpo-lm-runs 140, an rsd seed about 100-120, its learned PRM trained 2.2x longer since b6dd411): they start first,
# so that the last entry to finish is a short one; the others follow in the order `shared_models` gives
WARMUP_FIRST = ("memory-runs", "cascade-runs", "dist-runs", "hybrid-winrate-runs", "implicit-prm-runs", "ec-runs",
                "st-trackers", "aoe-runs", "fq-runs", "mpo-lm-runs", "rsd-runs")
# chapters whose notebooks time the machine itself (the kernels appendix: interleaved benchmarks with a quiet-machine
# precondition): the local executor runs them after every other notebook has finished, one at a time, so that no
# other notebook shares the cores while they time them
ALONE = ("aoe", "kernels")
FULL_SCALE_SECTION = "_full_scale.md"  # generated per chapter page by `render`, included by its index.md
GENERATED = ("_results", "_toc.yml", "scorecard.md", "scorecard_effects.png", "[0-9]*.ipynb", "_build",
             FULL_SCALE_SECTION, ledger.PAGE)


@dataclass(frozen=True)
class Task:
    slug: str
    name: str  # file stem, e.g. "01_decode"

    @property
    def key(self) -> str:
        return f"{self.slug}/{self.name}"

    @property
    def source(self) -> Path:
        return NOTEBOOKS / self.slug / f"{self.name}.py"


@dataclass(frozen=True)
class Output:
    """The book of one scale: its source tree with the executed pages, its results (claims' records and the
    manifest) and where Jupyter Book writes its HTML (`<html_root>/_build/html`)."""
    scale: str
    book: Path
    results: Path
    html_root: Path

    @property
    def manifest(self) -> Path:
        return self.results / "build.json"

    @property
    def html(self) -> Path:
        return self.html_root / "_build" / "html"

    def page(self, task: Task) -> Path:
        return self.book / task.slug / f"{task.name}.ipynb"


def output(scale: str) -> Output:
    """`book/` for the book's own scale (results in `results_dir()`), `_build/<scale>/book` for any other."""
    check_scale(scale)
    if scale == BOOK_SCALE:
        return Output(scale, BOOK, results_dir(), PROJECT_ROOT)
    root = build_dir() / scale
    return Output(scale, root / "book", root / "book" / "_results", root)


def discover(only: list[str] | None = None) -> list[Task]:
    """Every notebook under notebooks/, in the book's order; `only` restricts to some chapters."""
    for slug in only or []:
        catalog.get(slug)  # a clear error for an unknown chapter
    folders = {p.name for p in NOTEBOOKS.iterdir() if p.is_dir()} if NOTEBOOKS.exists() else set()
    stray = folders - set(catalog.BY_SLUG) - {"__pycache__"}
    if stray:
        raise ValueError(f"notebooks/{sorted(stray)[0]} is not a chapter of the catalog; chapters: "
                         f"{', '.join(catalog.BY_SLUG)}")
    return [Task(c.slug, p.stem) for c in catalog.ALL if (not only or c.slug in only)
            for p in sorted((NOTEBOOKS / c.slug).glob("[0-9]*.py"))]


# ---- what a notebook imports -------------------------------------------------------------------------------

def _module_file(module: str) -> Path | None:
    """The file of `icml25.a.b` under PACKAGE (a module or a package's __init__), or None."""
    parts = module.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for p in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
        if p is not None and p.is_file():
            return p
    return None


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The icml25 modules an AST imports (`from x import y` counts `x.y` when that is a module)."""
    found = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m == "icml25" or m.startswith("icml25.")}


@functools.lru_cache(maxsize=None)
def _module_imports(path: Path, mtime_ns: int, module: str) -> frozenset[str]:
    return frozenset(_imported(ast.parse(path.read_text()), module, path.name == "__init__.py"))


def dependencies(source: str) -> list[Path]:
    """The package files a notebook's source imports, transitively (with each module's parent packages), and the
    kernel sources when `icml25.ops` is among them; every package file if the source cannot be parsed."""
    try:
        todo = _imported(ast.parse(source), "__notebook__", False)
    except SyntaxError:
        return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    seen: dict[str, Path] = {}
    while todo:
        module = todo.pop()
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        for name in [module, *parents]:
            path = _module_file(name)
            if name in seen or path is None:
                continue
            seen[name] = path
            todo |= _module_imports(path, path.stat().st_mtime_ns, name) - set(seen)
    files = sorted(set(seen.values()))
    if any(m == "icml25.ops" or m.startswith("icml25.ops.") for m in seen) and KERNELS.exists():
        files += sorted(p for p in KERNELS.rglob("*") if p.is_file())
    return files


def input_hash(task: Task, scale: str) -> str:
    """The hash of a notebook's inputs: its source, the scale, the lock file and the files it imports."""
    source = task.source.read_text()
    h = hashlib.sha256(f"{source}\0{scale}\0".encode())
    for p in ([LOCK] if LOCK.exists() else []) + dependencies(source):
        h.update(str(p.relative_to(PROJECT_ROOT) if p.is_relative_to(PROJECT_ROOT) else p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


# ---- the manifest and the book's files (written by the builder process only) ------------------------------

def load_manifest(out: Output | None = None) -> dict:
    path = (out or output(BOOK_SCALE)).manifest
    return json.loads(path.read_text()) if path.exists() else {"notebooks": {}}


def _write_json(path: Path, data) -> None:
    """Write through a temporary file in the same folder and rename it over `path` (atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(data if isinstance(data, str) else json.dumps(data, indent=1))
    tmp.replace(path)


def _record(out: Output, key: str, entry: dict, section: str | None = "notebooks") -> dict:
    """Merge one entry (a notebook's, or with `section=None` a top-level one) into the manifest on disk, under
    its lock: builds may run side by side."""
    out.manifest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.manifest) + ".lock"):
        manifest = load_manifest(out)
        (manifest if section is None else manifest[section])[key] = entry
        _write_json(out.manifest, manifest)
    return manifest


def _merge_records(out: Output, task: Task, records: list[dict]) -> None:
    """Replace the records `task` made at this scale with those of its new run, in each chapter's results file
    (under the lock `icml25.core.claims` takes); a newer record of the same claim and scale replaces an older."""
    chapters = {task.slug} | {r["chapter"] for r in records}
    for chapter in sorted(chapters):
        path = out.results / f"{chapter}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            data = json.loads(path.read_text()) if path.exists() else {"chapter": chapter, "records": []}
            new = [r for r in records if r["chapter"] == chapter]
            replaced = {(r["claim_id"], r["scale"]) for r in new}
            data["records"] = [r for r in data["records"] if (r["notebook"], r["scale"]) != (task.name, out.scale)
                               and (r["claim_id"], r["scale"]) not in replaced] + new
            _write_json(path, data)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM wait until the block is done (they arrive right after it)."""
    held = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def commit(out: Output, task: Task, result: dict, h: str) -> dict:
    """Put a run's page, records and manifest entry into the book together, under the manifest's lock; returns
    the updated manifest. The page carries its scale and input hash in its metadata."""
    entry = dict(result["entry"], hash=h)
    with _signals_held(), FileLock(str(out.manifest) + ".lock"):
        if result["notebook"] is not None:
            nb = json.loads(result["notebook"])
            nb["metadata"]["icml25"] = {"scale": out.scale, "hash": h, "status": entry["status"]}
            _write_json(out.page(task), json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        _merge_records(out, task, result["records"])
        manifest = load_manifest(out)
        manifest["notebooks"][task.key] = entry
        _write_json(out.manifest, manifest)
    ledger.record_verdicts(BOOK, result["records"], PROJECT_ROOT,  # the claims' history in the committed ledger
                           machine=entry.get("machine"))
    return manifest


def page_meta(out: Output, task: Task) -> dict:
    """The scale, input hash and status a page was built with ({} for a page the builder did not write)."""
    try:
        return json.loads(out.page(task).read_text())["metadata"].get("icml25", {})
    except (OSError, ValueError, KeyError):
        return {}


# ---- running one notebook (in a worker: a pool process or a Ray task) ------------------------------------

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit now if it already has."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _worker_init(parent: int) -> None:
    """A pool worker dies with the builder, leaves SIGINT (a terminal's Ctrl-C) to it, and dies of SIGTERM."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, lambda signum, frame: None)  # not SIG_IGN, which the kernels would inherit
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _kernel_manager_class():
    """A kernel manager whose kernels die with the process that started them."""
    from jupyter_client import AsyncKernelManager

    class BoundKernelManager(AsyncKernelManager):
        async def _launch_kernel(self, kernel_cmd, **kw):
            parent = os.getpid()
            return await super()._launch_kernel(kernel_cmd, preexec_fn=lambda: _die_with_parent(parent), **kw)

    return BoundKernelManager


def _hide_injected_parameters(nb) -> None:
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]


def run_notebook(task: Task, source: str, scale: str, threads: int) -> dict:
    """Execute one notebook from its jupytext `source`; never raises. Returns its manifest entry, the executed
    notebook (JSON text, None if it never started) and the claims' records it made, staged in a folder of its
    own: nothing of the book is written here."""
    import jupytext
    import nbformat
    import papermill

    os.environ.update({"ICML25_NOTEBOOK": task.name, "TQDM_DISABLE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                       "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    with tempfile.TemporaryDirectory(prefix=f"icml25-{task.slug}-{task.name}-") as work:
        work = Path(work)
        os.environ["ICML25_RESULTS"] = str(work / "_results")
        src, executed = work / f"{task.name}.ipynb", work / f"{task.name}.executed.ipynb"
        nb = jupytext.reads(source, fmt="py")
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, src)
        cwd = task.source.parent if task.source.parent.is_dir() else work
        start, error = time.perf_counter(), None
        try:
            papermill.execute_notebook(str(src), str(executed), parameters={"scale": scale}, kernel_name="python3",
                                       cwd=str(cwd), progress_bar=False, execution_timeout=TIMEOUT_S[scale],
                                       start_timeout=KERNEL_START_S,
                                       kernel_manager_class=_kernel_manager_class())
        except Exception as exc:  # the executed copy (with its traceback) is still rendered
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        duration = time.perf_counter() - start
        page = None
        if executed.exists():
            out = nbformat.read(executed, as_version=4)
            _hide_injected_parameters(out)
            page = nbformat.writes(out)
        records = [r for p in sorted((work / "_results").glob("*.json")) for r in json.loads(p.read_text())["records"]]
    entry = {"status": "failed" if error else "ok", "duration_s": round(duration, 1), "scale": scale,
             "error": error, "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "machine": machine.signature()}
    return {"entry": entry, "notebook": page, "records": records}


# ---- the shared zoo models --------------------------------------------------------------------------------

def shared_models(tasks: list[Task], scale: str) -> list[tuple[str, int | None]]:
    """(zoo name, seed) of every shared model the selected notebooks will ask for, and (cache name, None) of every
    chapter result of `CHAPTER_RESULTS` they will ((cache name, seed) for each seed of a `SEEDED_RESULTS` chapter)."""
    import importlib

    slugs = {t.slug for t in tasks}
    users = sorted(slugs & set(SHARED_ZOO_USERS))
    seeds = sorted({s for slug in users for s in importlib.import_module(f"icml25.{slug}").config(scale).seeds}
                   | ({0} if slugs & set(SHARED_ZOO_SEED0_USERS) else set()))
    own = []
    for slug in sorted(slugs & set(CHAPTER_ZOO)):
        cfg = importlib.import_module(f"icml25.{slug}").config(scale)
        if cfg.model == CHAPTER_ZOO[slug][1]:
            own += [(cfg.model, seed) for seed in ([cfg.base_seed] if "base_seed" in cfg else cfg.seeds)]
    for slug in sorted(slugs & set(CHAPTER_RESULTS)):
        seeded = importlib.import_module(f"icml25.{slug}").config(scale).seeds if slug in SEEDED_RESULTS else [None]
        own += [(CHAPTER_RESULTS[slug][0], seed) for seed in seeded]
    return [(name, seed) for seed in seeds for name in SHARED_ZOO] + own


def warmup_order(models: list[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """`models` with the entries named in `WARMUP_FIRST` first, in its order (a stable sort)."""
    rank = {name: i for i, name in enumerate(WARMUP_FIRST)}
    return sorted(models, key=lambda m: rank.get(m[0], len(rank)))


def _train_shared(name: str, scale: str, seed: int | None) -> None:
    import importlib

    from ..core import reasoners, zoo  # noqa: F401  (importing reasoners registers the shared entries)

    for slug, (result, function) in CHAPTER_RESULTS.items():
        if name == result:
            chapter = importlib.import_module(f"icml25.{slug}")
            getattr(chapter, function)(chapter.config(scale), *([] if seed is None else [seed]))
            return

    for module, _ in CHAPTER_ZOO.values():
        importlib.import_module(module)  # registers the chapters' own entries
    zoo.get(name, scale, seed)


# ---- executors ----------------------------------------------------------------------------------------------

class Cancelled(Exception):
    """The build got SIGINT or SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _cancel_on_signals():
    """SIGINT and SIGTERM raise `Cancelled` in the builder (main thread only; elsewhere they are left alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def cancel(signum, frame):
        raise Cancelled(signum)

    old = {s: signal.signal(s, cancel) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _pool(jobs: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=multiprocessing.get_context("fork"),
                               initializer=_worker_init, initargs=(os.getpid(),))


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's workers and everything they started (kernels and their children), then drop the pool."""
    import psutil

    procs = []
    for pid in list(getattr(pool, "_processes", {}) or {}):
        with contextlib.suppress(psutil.NoSuchProcess):
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=10)
    pool.shutdown(wait=False, cancel_futures=True)


def _timed_train(name: str, scale: str, seed: int | None) -> float:
    """`_train_shared`, returning its wall time in seconds."""
    start = time.perf_counter()
    _train_shared(name, scale, seed)
    return time.perf_counter() - start


def _record_warmup(out: Output, models: list[tuple[str, int]], scale: str, seconds: float,
                   each: list[float]) -> None:
    """The manifest's `zoo_warmup`: its wall time, and each entry's own (`duration_s_per_model`; entries run side by
    side in `jobs` workers, so these add up to more than the wall time)."""
    labels = [n if s is None else f"{n} seed {s}" for n, s in models]
    entry = {"duration_s": round(seconds, 1), "scale": scale, "models": labels, "machine": machine.signature(),
             "duration_s_per_model": {label: round(t, 1) for label, t in zip(labels, each, strict=True)}}
    _record(out, "zoo_warmup", entry, section=None)
    print(f"Shared zoo models ready in {entry['duration_s']:.0f} s: {', '.join(entry['models'])}", flush=True)


def _report(i: int, n: int, task: Task, entry: dict) -> None:
    print(f"  [{i}/{n}] {entry['status']:6s} {task.key} {entry['duration_s']:.1f} s"
          + (f"  -- {entry['error']}" if entry["error"] else ""), flush=True)


def run_order(todo: list[tuple[Task, str]]) -> tuple[list[tuple[Task, str]], list[tuple[Task, str]]]:
    """The local executor's order: the notebooks that may share the machine (with the warm-up), and those of the
    `ALONE` chapters, which run one at a time after all of them."""
    return [x for x in todo if x[0].slug not in ALONE], [x for x in todo if x[0].slug in ALONE]


def notebook_threads(task: Task, jobs: int) -> int:
    """The threads a notebook gets: one when `jobs` notebooks share the cores, every core for an `ALONE` chapter's
    notebook (it times the machine, as `icml25 bench` does, on all of it) or when the build runs one notebook at a
    time."""
    return max(1, os.cpu_count() or 1) if task.slug in ALONE or jobs == 1 else 1


def _run_local(out: Output, todo: list[tuple[Task, str]], jobs: int, keep_going: bool,
               warm: list[Task] | None = None) -> None:
    """The warm-up entries of the notebooks of `todo` (or of `warm`), longest first, and the notebooks in one pool
    of `jobs` workers: a notebook starts once the entries its chapter needs are ready, so a worker with no entry
    left runs notebooks while another still trains; then each notebook of an `ALONE` chapter on its own."""
    tasks = [t for t, _ in todo] if warm is None else warm
    models = warmup_order(shared_models(tasks, out.scale))
    needs = {t.key: set(shared_models([t], out.scale)) for t in tasks}
    waiting, alone = run_order(todo)
    pool = _pool(jobs)
    try:
        start, each = time.perf_counter(), {}
        training = {pool.submit(_timed_train, name, out.scale, seed): (name, seed) for name, seed in models}
        running, i, failed = {}, 0, False
        while training or running or (waiting and not failed):
            for t, h in [x for x in waiting if needs[x[0].key] <= each.keys()] if not failed else []:
                waiting.remove((t, h))
                running[pool.submit(run_notebook, t, t.source.read_text(), out.scale,
                                    notebook_threads(t, jobs))] = (t, h)
            done, _ = wait({*training, *running}, return_when=FIRST_COMPLETED)
            for fut in done:
                if fut in training:
                    each[training.pop(fut)] = fut.result()
                    if len(each) == len(models):
                        _record_warmup(out, models, out.scale, time.perf_counter() - start,
                                       [each[m] for m in models])
                    continue
                t, h = running.pop(fut)
                i += 1
                entry = commit(out, t, fut.result(), h)["notebooks"][t.key]
                _report(i, len(todo), t, entry)
                if entry["status"] == "failed" and not keep_going:
                    failed = True
                    training = {f: m for f, m in training.items() if not f.cancel()}
        for t, h in alone if not failed else []:
            i += 1
            result = pool.submit(run_notebook, t, t.source.read_text(), out.scale, notebook_threads(t, jobs))
            entry = commit(out, t, result.result(), h)["notebooks"][t.key]
            _report(i, len(todo), t, entry)
            if entry["status"] == "failed" and not keep_going:
                break
    except BaseException:
        _kill_pool(pool)
        raise
    pool.shutdown()


def _ray_notebook(task: Task, source: str, scale: str, *zoo_models) -> dict:
    """A notebook as a Ray task; `zoo_models` are the shared models' tasks it waits for."""
    return run_notebook(task, source, scale, 1)


RAY_RESOURCES = {"smoke": {"num_cpus": 1}, "ci": {"num_cpus": 1}, "full": {"num_cpus": 1, "num_gpus": 1}}


def _run_ray(out: Output, todo: list[tuple[Task, str]], jobs: int, keep_going: bool, address: str | None) -> None:
    """Each notebook a Ray task (RAY_RESOURCES); the shared zoo models are tasks the notebooks of the chapters that
    start from them wait for; pages, records and the manifest are written here, on the driver."""
    import ray

    started, refs = not ray.is_initialized(), {}
    if started:
        ray.init(address=address, num_cpus=None if address else max(1, jobs), include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        resources = dict(RAY_RESOURCES[out.scale])
        if resources.get("num_gpus") and not ray.cluster_resources().get("GPU"):
            print("  the Ray cluster has no GPU: full-scale notebooks run on CPUs", flush=True)
            resources.pop("num_gpus")
        models = warmup_order(shared_models([t for t, _ in todo], out.scale))  # submitted longest first
        train = ray.remote(num_cpus=1)(_timed_train)
        start = time.perf_counter()
        zoo_refs = [train.remote(name, out.scale, seed) for name, seed in models]
        users = set(SHARED_ZOO_USERS) | set(SHARED_ZOO_SEED0_USERS) | set(CHAPTER_ZOO) | set(CHAPTER_RESULTS)
        run = ray.remote(**resources)(_ray_notebook)
        refs = {run.remote(t, t.source.read_text(), out.scale, *(zoo_refs if t.slug in users else [])): (t, h)
                for t, h in todo}
        if zoo_refs:
            each = ray.get(zoo_refs)
            _record_warmup(out, models, out.scale, time.perf_counter() - start, each)
        pending, i = list(refs), 0
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=1.0)  # a timeout lets signals in
            if not done:
                continue
            t, h = refs[done[0]]
            i += 1
            entry = commit(out, t, ray.get(done[0]), h)["notebooks"][t.key]
            _report(i, len(todo), t, entry)
            if entry["status"] == "failed" and not keep_going:
                for ref in pending:
                    ray.cancel(ref, force=True)
                break
    except BaseException:
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def execute(tasks: list[Task], scale: str, jobs: int, keep_going: bool, executor: str = "local",
            address: str | None = None) -> dict:
    """Run the tasks that are out of date in the book of `scale`; returns its updated manifest."""
    out = output(scale)
    manifest = load_manifest(out)
    todo = []
    for t in tasks:
        entry, h = manifest["notebooks"].get(t.key, {}), input_hash(t, scale)
        if entry.get("status") == "ok" and entry.get("hash") == h and page_meta(out, t).get("hash") == h:
            print(f"  cached  {t.key} ({entry['duration_s']:.0f} s at {scale})")
        else:
            todo.append((t, h))
    if todo:
        with _cancel_on_signals():
            if executor == "ray":
                _run_ray(out, todo, jobs, keep_going, address)
            else:
                _run_local(out, todo, jobs, keep_going)
    return load_manifest(out)


def print_table(manifest: dict, tasks: list[Task]) -> None:
    print(f"\n{'notebook':40s} {'status':8s} {'scale':6s} {'seconds':>8s}")
    for t in tasks:
        e = manifest["notebooks"].get(t.key)
        if e:
            print(f"{t.key:40s} {e['status']:8s} {e['scale']:6s} {e['duration_s']:8.1f}")


def sync_sources(out: Output) -> None:
    """Copy the book's hand-written sources (landing page, chapter introductions, references) into the book of
    another scale."""
    if out.book != BOOK:
        shutil.copytree(BOOK, out.book, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*GENERATED))


def write_full_scale_sections(out: Output) -> None:
    """Each chapter page's "At full scale" section (its checkpoints, GPU memory and hours), generated from
    `icml25.core.fullplan` into the file the page includes."""
    from ..core import fullplan

    for slug in fullplan.PLANS:
        if (out.book / slug / "index.md").exists():
            (out.book / slug / FULL_SCALE_SECTION).write_text(fullplan.page_section(slug))


def render(out: Output | None = None, strict: bool = True) -> int:
    """Write the chapters' deviations pages (from the committed ledgers), the table of contents, the scorecard and
    the chapters' full-scale sections, then run Jupyter Book; returns its exit code."""
    from . import scorecard, toc

    out = out or output(BOOK_SCALE)
    ledger.write_pages(BOOK, out.book)
    toc.write(out)
    scorecard.write(out)
    write_full_scale_sections(out)
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(out.book), "--config",
           str(PROJECT_ROOT / "_config.yml"), "--toc", str(out.book / "_toc.yml"), "--path-output",
           str(out.html_root)]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    return subprocess.call(cmd, cwd=PROJECT_ROOT)


def build(scale: str = "ci", only: list[str] | None = None, jobs: int = 2, keep_going: bool = False,
          render_book: bool = True, executor: str = "local", address: str | None = None) -> int:
    check_scale(scale)
    tasks = discover(only)
    out = output(scale)
    sync_sources(out)
    from .. import ops

    ops.prepare()  # compiled kernels are built once, here, before the notebooks fan out
    start = time.perf_counter()
    where = "" if out.book == BOOK else f" into {out.book}"
    print(f"Executing {len(tasks)} notebook(s) at scale {scale!r}{where} with {jobs} worker(s) ({executor})")
    try:
        manifest = execute(tasks, scale, jobs, keep_going, executor, address)
    except Cancelled as exc:
        print(f"\nCancelled by {exc}: running notebooks were stopped; the book keeps its previous pages for "
              "them.", flush=True)
        return 128 + exc.signum
    print_table(manifest, tasks)
    rc = render(out) if render_book else 0
    minutes = (time.perf_counter() - start) / 60
    failed = [t.key for t in tasks if manifest["notebooks"].get(t.key, {}).get("status") != "ok"]
    print(f"\nBuilt {len(tasks) - len(failed)}/{len(tasks)} notebook(s) in {minutes:.1f} min; "
          f"HTML: {out.html / 'index.html'}")
    if failed:
        print(f"Failed: {', '.join(failed)}")
    return 1 if failed or rc else 0
