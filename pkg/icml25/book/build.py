"""The book builder: jupytext → papermill (a process pool) → executed notebooks in book/ → Jupyter Book.

Each notebook `notebooks/<slug>/<name>.py` becomes `book/<slug>/<name>.ipynb`, executed with `scale` injected.
A notebook whose inputs (its source, the scale, and the hashes of pkg/, kernels/ and the lock file) match its
last successful run is not run again. The manifest `book/_results/build.json` records each notebook's status,
duration and scale. A failed notebook keeps its traceback in its page and does not stop the others. Before the
notebooks fan out, the zoo models several chapters share are trained once (recorded as the manifest's
`zoo_warmup`), so no chapter's runtime includes waiting for another's training.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from .. import catalog
from ..core.config import check_scale
from ..core.paths import PROJECT_ROOT, build_dir, results_dir

NOTEBOOKS = PROJECT_ROOT / "notebooks"
BOOK = PROJECT_ROOT / "book"
HTML = PROJECT_ROOT / "_build" / "html"
TIMEOUT_S = {"smoke": 300, "ci": 1800, "full": 24 * 3600}  # per cell (ci: twice the longest cell seen under load)
# Zoo models that several chapters start from, trained before the notebooks fan out so that no notebook's time
# is spent waiting on a zoo lock while another trains them; at the seeds of the chapters that use every seed.
SHARED_ZOO = ("arith-draft", "arith-target")
SHARED_ZOO_USERS = ("workbench", "rsd")
# chapters that start from the shared models at seed 0 only
SHARED_ZOO_SEED0_USERS = ("implicit_prm", "mpo", "hybrid_winrate", "lora_init", "model_swarms")


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

    @property
    def output(self) -> Path:
        return BOOK / self.slug / f"{self.name}.ipynb"


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


def _tree_hash(*roots: Path) -> str:
    h = hashlib.sha256()
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                     and "__pycache__" not in p.parts and p.suffix != ".pyc")
        for p in files:
            h.update(str(p.relative_to(PROJECT_ROOT)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def code_hash() -> str:
    """The hash of everything a notebook imports: the package, the kernel sources and the pinned versions."""
    roots = [PROJECT_ROOT / "pkg", PROJECT_ROOT / "kernels", PROJECT_ROOT / "requirements.lock"]
    return _tree_hash(*[r for r in roots if r.exists()])


def input_hash(task: Task, scale: str, code: str) -> str:
    return hashlib.sha256(f"{task.source.read_text()}\0{scale}\0{code}".encode()).hexdigest()


def manifest_path() -> Path:
    return results_dir() / "build.json"


def load_manifest() -> dict:
    path = manifest_path()
    return json.loads(path.read_text()) if path.exists() else {"notebooks": {}}


def _hide_injected_parameters(nb) -> None:
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]


def run_notebook(task: Task, scale: str, threads: int) -> dict:
    """Execute one notebook (in a worker process) and put the executed copy in book/; never raises."""
    import jupytext
    import nbformat
    import papermill

    from ..core.claims import forget_notebook

    os.environ.update({"ICML25_NOTEBOOK": task.name, "TQDM_DISABLE": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                       "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    work = build_dir() / "notebooks" / task.slug
    work.mkdir(parents=True, exist_ok=True)
    src, executed = work / f"{task.name}.ipynb", work / f"{task.name}.executed.ipynb"
    nb = jupytext.read(task.source)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src)
    forget_notebook(task.slug, task.name, scale)
    start, error = time.perf_counter(), None
    try:
        papermill.execute_notebook(str(src), str(executed), parameters={"scale": scale}, kernel_name="python3",
                                   cwd=str(task.source.parent), progress_bar=False,
                                   execution_timeout=TIMEOUT_S[scale])
    except Exception as exc:  # the executed copy (with its traceback) is still rendered
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    duration = time.perf_counter() - start
    if executed.exists():
        out = nbformat.read(executed, as_version=4)
        _hide_injected_parameters(out)
        task.output.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(out, task.output)
    return {"status": "failed" if error else "ok", "duration_s": round(duration, 1), "scale": scale,
            "error": error, "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def _record(key: str, entry: dict, section: str | None = "notebooks") -> dict:
    """Merge one entry (a notebook's, or with `section=None` a top-level one) into the manifest on disk, under
    a lock: builds may run side by side."""
    path = manifest_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        manifest = load_manifest()
        (manifest if section is None else manifest[section])[key] = entry
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(manifest, indent=1))
        tmp.replace(path)
    return manifest


def shared_models(tasks: list[Task], scale: str) -> list[tuple[str, int]]:
    """(zoo name, seed) of every shared model the selected notebooks will ask for."""
    import importlib

    slugs = {t.slug for t in tasks}
    users = sorted(slugs & set(SHARED_ZOO_USERS))
    seeds = sorted({s for slug in users for s in importlib.import_module(f"icml25.{slug}").config(scale).seeds}
                   | ({0} if slugs & set(SHARED_ZOO_SEED0_USERS) else set()))
    return [(name, seed) for seed in seeds for name in SHARED_ZOO]


def _train_shared(name: str, scale: str, seed: int) -> None:
    from ..core import reasoners, zoo  # noqa: F401  (importing reasoners registers the shared entries)

    zoo.get(name, scale, seed)


def warm_zoo(tasks: list[Task], scale: str, jobs: int) -> None:
    """Train the shared zoo models (cached ones are only loaded) and record the time in the manifest."""
    models = shared_models(tasks, scale)
    if not models:
        return
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(_train_shared, *zip(*[(name, scale, seed) for name, seed in models])))
    entry = {"duration_s": round(time.perf_counter() - start, 1), "scale": scale,
             "models": [f"{name} seed {seed}" for name, seed in models]}
    _record("zoo_warmup", entry, section=None)
    print(f"Shared zoo models ready in {entry['duration_s']:.0f} s: {', '.join(entry['models'])}", flush=True)


def execute(tasks: list[Task], scale: str, jobs: int, keep_going: bool) -> dict:
    """Run the tasks that are out of date; returns the updated manifest."""
    manifest, code = load_manifest(), code_hash()
    todo = []
    for t in tasks:
        entry, h = manifest["notebooks"].get(t.key, {}), input_hash(t, scale, code)
        if entry.get("status") == "ok" and entry.get("hash") == h and t.output.exists():
            print(f"  cached  {t.key} ({entry['duration_s']:.0f} s at {scale})")
        else:
            todo.append((t, h))
    warm_zoo([t for t, _ in todo], scale, jobs)
    threads = 1 if jobs > 1 else max(1, os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_notebook, t, scale, threads): (t, h) for t, h in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            t, h = futures[fut]
            entry = dict(fut.result(), hash=h)
            manifest = _record(t.key, entry)
            print(f"  [{i}/{len(todo)}] {entry['status']:6s} {t.key} {entry['duration_s']:.1f} s"
                  + (f"  -- {entry['error']}" if entry["error"] else ""), flush=True)
            if entry["status"] == "failed" and not keep_going:
                for f in futures:
                    f.cancel()
                break
    return manifest


def print_table(manifest: dict, tasks: list[Task]) -> None:
    print(f"\n{'notebook':40s} {'status':8s} {'scale':6s} {'seconds':>8s}")
    for t in tasks:
        e = manifest["notebooks"].get(t.key)
        if e:
            print(f"{t.key:40s} {e['status']:8s} {e['scale']:6s} {e['duration_s']:8.1f}")


def render(strict: bool = True) -> int:
    """Write the table of contents and the scorecard, then run Jupyter Book; returns its exit code."""
    from . import scorecard, toc

    toc.write()
    scorecard.write()
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(BOOK), "--config",
           str(PROJECT_ROOT / "_config.yml"), "--toc", str(BOOK / "_toc.yml"), "--path-output", str(PROJECT_ROOT)]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    return subprocess.call(cmd, cwd=PROJECT_ROOT)


def build(scale: str = "ci", only: list[str] | None = None, jobs: int = 2, keep_going: bool = False,
          render_book: bool = True) -> int:
    check_scale(scale)
    tasks = discover(only)
    from .. import ops

    ops.prepare()  # compiled kernels are built once, here, before the notebooks fan out
    start = time.perf_counter()
    print(f"Executing {len(tasks)} notebook(s) at scale {scale!r} with {jobs} worker(s)")
    manifest = execute(tasks, scale, jobs, keep_going)
    print_table(manifest, tasks)
    rc = render() if render_book else 0
    minutes = (time.perf_counter() - start) / 60
    failed = [t.key for t in tasks if manifest["notebooks"].get(t.key, {}).get("status") != "ok"]
    print(f"\nBuilt {len(tasks) - len(failed)}/{len(tasks)} notebook(s) in {minutes:.1f} min; "
          f"HTML: {HTML / 'index.html'}")
    if failed:
        print(f"Failed: {', '.join(failed)}")
    return 1 if failed or rc else 0
