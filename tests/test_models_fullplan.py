"""`icml25 build --scale full --dry-run`: every chapter's full config checked and its plan printed (checkpoints,
GPUs, memory, hours), with nothing downloaded and nothing trained."""

import pytest
import transformers

from icml25 import catalog
from icml25.book import cli
from icml25.core import fullplan, zoo


@pytest.fixture
def nothing_fetched_or_trained(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the dry run tried to download or train")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    monkeypatch.setattr(zoo, "ensure", refuse)


def test_the_dry_run_prints_a_plan_for_every_chapter(nothing_fetched_or_trained, capsys):
    assert cli.main(["build", "--scale", "full", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for ch in (catalog.WORKBENCH, *catalog.CHAPTERS):
        assert f"\n{ch.slug}: " in out
        for c in fullplan.PLANS[ch.slug].checkpoints:
            assert (c.repo or "(trained from scratch)") in out
    assert f"{len(catalog.CHAPTERS) + 1} of {len(catalog.CHAPTERS) + 1} chapters valid" in out
    assert "Qwen/Qwen2.5-Math-7B-Instruct" in out and "GPU-h" in out


def test_the_dry_run_reads_each_chapters_full_config_and_reports_an_invalid_one(monkeypatch, capsys):
    import icml25.rsd as rsd

    seen = []
    real = fullplan.full_config
    monkeypatch.setattr(fullplan, "full_config", lambda slug: seen.append(slug) or real(slug))
    assert fullplan.dry_run(["rsd", "ibcircuit"]) == 0
    assert seen == ["rsd", "ibcircuit"]
    assert fullplan.rows(["rsd"])[0].seeds == len(rsd.config("full").seeds)

    def broken(scale, **kw):
        raise ValueError("knob 'n_test' = -1 is not >= 1")

    monkeypatch.setattr(rsd, "config", broken)
    assert fullplan.dry_run(["rsd", "ibcircuit"]) == 1
    assert "rsd: INVALID - ValueError: knob 'n_test'" in capsys.readouterr().out


def test_dry_run_needs_the_full_scale():
    with pytest.raises(SystemExit):
        cli.main(["build", "--scale", "ci", "--dry-run"])


def test_memory_grows_with_training_and_spills_onto_more_gpus():
    ck = lambda trained: fullplan.Checkpoint("m", "owner/model", 8.0, "", trained)  # noqa: E731
    plan = lambda mode, trained: fullplan.ChapterPlan(  # noqa: E731
        "x", mode, (ck(trained),), fullplan.Workload(trained=1e6))
    infer, lora, full = plan("inference", False), plan("lora", True), plan("finetune", True)
    assert fullplan.memory_gib(infer) < fullplan.memory_gib(lora) < fullplan.memory_gib(full)
    assert fullplan.memory_gib(full) == pytest.approx(8 * fullplan.memory_gib(infer))  # 16 bytes a weight vs 2
    assert (fullplan.n_gpus(infer), fullplan.n_gpus(full)) == (1, 2)  # 8B: 18 GiB to serve, 143 GiB to fine-tune
    assert fullplan.gpu_hours(lora) < fullplan.gpu_hours(full)  # no weight gradients under LoRA
    with pytest.raises(ValueError, match="not a Hub id"):
        fullplan.ChapterPlan("x", "inference", (fullplan.Checkpoint("m", "model", 1.0, ""),), fullplan.Workload())


def test_each_chapter_page_includes_its_full_scale_section_generated_from_the_plan(tmp_path):
    """The section quotes the plan's own estimates and checkpoints, and every chapter page with a plan includes it
    (a page that did not would show no full-scale cost)."""
    from icml25.book import build

    book = tmp_path / "book"
    for slug in fullplan.PLANS:
        (book / slug).mkdir(parents=True)
        (book / slug / "index.md").write_text("# page\n")
    build.write_full_scale_sections(build.Output("ci", book, tmp_path / "results", tmp_path))
    for row in fullplan.rows(list(fullplan.PLANS)):
        text = (book / row.slug / build.FULL_SCALE_SECTION).read_text()
        assert text.startswith("## At full scale")
        for c in row.plan.checkpoints:
            assert (f"`{c.repo}`" if c.repo else "trained from scratch") in text and f"{c.params_b:.2f} B" in text
        if row.plan.checkpoints:
            assert f"**{row.memory_gib:.0f} GiB**" in text and f"**{row.hours:.1f} GPU-hours**" in text
        else:
            assert "needs no GPU" in text and "GiB" not in text
        page = (build.BOOK / row.slug / "index.md").read_text()
        assert f"```{{include}} {build.FULL_SCALE_SECTION}\n```" in page, f"{row.slug}/index.md lacks the section"


def test_an_invalid_full_config_has_no_page_section(monkeypatch):
    import icml25.rsd as rsd

    monkeypatch.setattr(rsd, "config", lambda scale, **kw: (_ for _ in ()).throw(ValueError("bad knob")))
    with pytest.raises(ValueError, match="rsd: the full-scale plan is invalid: ValueError: bad knob"):
        fullplan.page_section("rsd")


MODEL_KNOBS = ("model", "draft_model", "target_model", "pool_models")


@pytest.mark.parametrize("chapter", sorted(fullplan.PLANS))
def test_a_chapter_s_full_scale_model_knobs_name_checkpoints_of_its_plan(chapter):
    """The Hub ids (owner/name) a chapter's `full` config loads through its model knobs are checkpoints its plan
    lists (and so costs on its page); at smoke and ci no model knob names a Hub id, so nothing is downloaded."""
    import importlib

    module = importlib.import_module(f"icml25.{chapter}")
    repos = {c.repo for c in fullplan.PLANS[chapter].checkpoints}
    for scale in ("smoke", "ci", "full"):
        cfg = module.config(scale)
        named = [v for k in MODEL_KNOBS if k in cfg for v in ([cfg[k]] if isinstance(cfg[k], str) else cfg[k])]
        hub = [n for n in named if isinstance(n, str) and n.count("/") == 1]
        assert set(hub) <= (repos if scale == "full" else set()), (scale, hub, repos)
