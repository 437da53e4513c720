import importlib

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from scipy import stats

from icml25 import catalog
from icml25.core import claims, plot
from icml25.core.claims import Claim, Effect, Verdict, at_least, check


def test_seed_errorbar_draws_the_mean_with_sd_bars_and_counts_the_seeds():
    fig, ax = plt.subplots()
    values = np.array([[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]])
    plot.seed_errorbar(ax, values, np.arange(3), "C0", "demo")
    line = ax.lines[0]
    assert np.allclose(line.get_ydata(), [1.0, 2.0, 3.0])
    assert ax.get_legend_handles_labels()[1] == ["demo (n=2)"]
    caps = ax.containers[0].lines[2][0].get_segments()  # the vertical bars: mean ± population sd (= 1)
    assert np.allclose([seg[:, 1] for seg in caps], [[0.0, 2.0], [1.0, 3.0], [2.0, 4.0]])
    plot.seed_errorbar(ax, values[:1], np.arange(3), "C1", "one seed")
    assert not ax.containers[1].has_yerr
    plt.close(fig)


GAIN = Claim(chapter="plot_demo", id="gain", paper_statement="A beats B", paper_value="+1",
             criterion="A - B > 0 (paired t, 95%); refuted below +0.5",
             effects=[Effect("a_minus_b", "diff", min_effect=0.5)], preconditions=[at_least("b_learns", "b_acc", 0.5)],
             examples=({"diff": [1.0, 1.2, 0.9], "b_acc": 0.9}, {"diff": [0.0, 0.1, -0.1], "b_acc": 0.9}))


def test_show_verdicts_shows_each_box_then_its_effect_figure_and_closes_it(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    up_diff = [1.0, 1.2, 0.9, 1.1, 0.95, 1.05, 1.15, 0.85]
    flat_diff = [0.0, 0.1, -0.1, 0.05, -0.05, 0.02, -0.02, 0.0]
    up = check(GAIN, {"diff": up_diff, "b_acc": 0.9}, seeds=range(8), scale="smoke")
    flat = check(GAIN, {"diff": flat_diff, "b_acc": 0.9}, seeds=range(8), scale="smoke")
    assert plot.show_verdicts(up, flat) is None
    assert [type(x) for x in shown] == [Verdict, Figure, Verdict, Figure]
    assert shown[0] is up and shown[2] is flat
    assert not {shown[1].number, shown[3].number} & set(plt.get_fignums())  # shown once, not again at cell end
    for fig, verdict, diff in ((shown[1], "reproduced", up_diff), (shown[3], "refuted", flat_diff)):
        ax = fig.axes[0]
        assert ax.get_title() == f"gain: {verdict}"
        points = ax.collections[0]  # the per-seed values, in the verdict's colour
        assert sorted(points.get_offsets()[:, 0]) == pytest.approx(sorted(diff))
        assert to_hex(points.get_facecolor()[0]) == plot.VERDICT_COLOURS[verdict]
        bar = ax.containers[0]  # the estimate with its paired t interval
        assert bar.lines[0].get_xdata()[0] == pytest.approx(np.mean(diff))
        (segment,) = bar.lines[2][0].get_segments()
        assert segment[:, 0] == pytest.approx(stats.ttest_1samp(diff, 0).confidence_interval(0.95))


def test_use_style_is_seaborns_whitegrid_theme_with_the_books_palette_and_sizes():
    plot.use_style()
    rc = plt.rcParams
    assert [to_hex(c) for c in rc["axes.prop_cycle"].by_key()["color"]] == plot.PALETTE
    assert rc["axes.grid"] and to_hex(rc["axes.facecolor"]) == "#ffffff"  # whitegrid
    assert all(rc[k] == v for k, v in plot.RC.items() if k != "figure.figsize")
    assert tuple(rc["figure.figsize"]) == plot.RC["figure.figsize"]


def test_effect_plot_jitters_the_same_way_every_time_and_leaves_the_global_generator_alone():
    v = check(GAIN, {"diff": [1.0, 1.2, 0.9], "b_acc": 0.9}, seeds=[0, 1, 2], scale="smoke")
    np.random.seed(7)
    expected = np.random.uniform(size=3)
    np.random.seed(7)
    first, second = plot.effect_plot(v), plot.effect_plot(v)
    assert np.random.uniform(size=3) == pytest.approx(expected)
    assert first.collections[0].get_offsets().tolist() == second.collections[0].get_offsets().tolist()
    plt.close("all")


@pytest.mark.parametrize("slug", [c.slug for c in catalog.ALL])
def test_effect_plot_draws_every_claim_of_every_chapter_on_its_examples(slug):
    """What show_verdicts draws in a notebook, on each claim's two examples: one row per effect, named with the
    effect's verdict, under a title with the claim's verdict."""
    importlib.import_module(f"icml25.{slug}")
    mine = [c for (chapter, _), c in sorted(claims.REGISTRY.items()) if chapter == slug]
    assert mine or slug == "workbench"  # the front chapter shows a calibration table, not a claim
    for claim in mine:
        for example in claim.examples:
            v = check(claim, example, seeds=[0, 1, 2], scale="smoke", null=example if claim.needs_null else None)
            ax = plot.effect_plot(v)
            labels = [t.get_text() for t in ax.get_yticklabels()]
            assert labels == [f"{e['name']}\n({e['verdict']})" for e in v.record["effects"]]
            assert ax.get_title() == f"{claim.id}: {v.label}"
            plt.close(ax.figure)
