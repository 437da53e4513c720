"""`icml25 build --executor ray` on a local Ray with 2 CPUs builds the same book as the local pool: the first notebook
of two fast chapters at smoke scale (one of them waits for the shared zoo models' task), compared by the pages'
cells (not their outputs), the manifest's statuses and scales, and the claims' verdict records (not timings)."""

import json
import time

from icml25.book import build

CHAPTERS = ["hybrid_winrate", "perf_prediction"]


def _cells(page):
    nb = json.loads(page.read_text())
    return [(c["cell_type"], "".join(c["source"]), c["metadata"].get("tags", [])) for c in nb["cells"]]


def _book(out, tasks):
    manifest = build.load_manifest(out)
    entries = {t.key: (manifest["notebooks"][t.key]["status"], manifest["notebooks"][t.key]["scale"],
                       build.page_meta(out, t)["scale"], build.page_meta(out, t)["status"]) for t in tasks}
    records = sorted((r["chapter"], r["notebook"], r["claim_id"], r["scale"], r["verdict"], tuple(r["seeds"]))
                     for slug in CHAPTERS for r in json.loads((out.results / f"{slug}.json").read_text())["records"])
    return entries, records, {t.key: _cells(out.page(t)) for t in tasks}, manifest.get("zoo_warmup", {}).get("models")


def test_a_ray_build_equals_a_local_build(tmp_path, monkeypatch, capsys):
    tasks = [next(t for t in build.discover([slug])) for slug in CHAPTERS]  # each chapter's first notebook
    books, seconds = {}, {}
    for executor in ("local", "ray"):
        monkeypatch.setattr(build, "build_dir", lambda: tmp_path / executor)
        start = time.perf_counter()
        build.execute(tasks, "smoke", jobs=2, keep_going=True, executor=executor)
        seconds[executor] = time.perf_counter() - start
        books[executor] = _book(build.output("smoke"), tasks)
    local, ray = books["local"], books["ray"]
    assert all(entry == ("ok", "smoke", "smoke", "ok") for entry in local[0].values())
    assert local[0] == ray[0] and local[1] == ray[1] and local[2] == ray[2] and local[3] == ray[3]
    assert local[1]  # the chapters' claims were checked
    with capsys.disabled():
        print(f"\n{', '.join(CHAPTERS)} at smoke: local pool {seconds['local']:.0f} s, Ray {seconds['ray']:.0f} s")
