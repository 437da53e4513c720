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
