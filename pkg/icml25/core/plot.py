"""The book's plot style, built on seaborn's theme: one call at the top of every notebook, so all figures look
alike; and the claim figures (`effect_plot`, `show_verdicts`) that draw a verdict's per-seed points and interval."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

PALETTE = ["#1f5aa6", "#d1495b", "#2e8b57", "#edae49", "#6c4f9c", "#00798c", "#8c564b", "#7f7f7f"]


# the book's sizes and spines on top of seaborn's theme
RC = {
    "figure.figsize": (7.0, 4.0),
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 11,
    "legend.frameon": False,
    "font.size": 10,
}


def use_style() -> None:
    """The one style of every figure: seaborn's whitegrid theme with the book's colour-blind-friendly palette,
    and titles and labels big enough to read."""
    import seaborn as sns

    sns.set_theme(style="whitegrid", palette=PALETTE, rc=RC)


def subplots(nrows: int = 1, ncols: int = 1, **kw):
    """`plt.subplots` with the book's style and a layout that fits titles."""
    use_style()
    kw.setdefault("figsize", (5.0 * ncols, 3.8 * nrows))
    kw.setdefault("constrained_layout", True)
    return plt.subplots(nrows, ncols, **kw)


def seed_errorbar(ax, values, x, color, label: str, ls: str = "-") -> None:
    """Curves of several seeds (values [seeds, len(x)]) as their mean with ± sd error bars (none for one seed);
    the legend label says how many seeds."""
    values = np.asarray(values)
    mean, sd = values.mean(0), values.std(0)
    ax.errorbar(x, mean, yerr=sd if len(values) > 1 else None, color=color, ls=ls, marker="o", ms=4, capsize=3,
                label=f"{label} (n={len(values)})")


VERDICT_COLOURS = {"reproduced": "#2e8b57", "refuted": "#d1495b", "inconclusive": "#7f7f7f"}


def use_seaborn_style() -> None:
    """`use_style` under the name of what it is built on (the scorecard's figure calls it so)."""
    use_style()


def effect_plot(verdict, ax=None, samples=None):
    """A claim's decision as a figure: for each effect, the paired per-unit values (seeds) as points, the
    estimate with its interval as a bar, and the null (dashed), the paper's smallest effect (dotted) or the
    equivalence margin (shaded); coloured by the effect's verdict. `verdict` is what `claims.check` returns;
    `samples` maps effect names to their per-unit values (default: read from the record's measurements)."""
    import seaborn as sns

    use_style()
    record = verdict.record
    effects = record["effects"]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 0.9 + 0.7 * len(effects)), constrained_layout=True)
    spec = {e.name: e for e in verdict.claim.effects}
    for row, e in enumerate(effects):
        colour = VERDICT_COLOURS[e["verdict"]]
        values = (samples or {}).get(e["name"])
        if values is None:
            src = spec[e["name"]].samples
            values = record["measured"][src] if isinstance(src, str) else src(record["measured"])
        values = np.atleast_1d(np.asarray(values, dtype=float))
        if e["ci_low"] is None:  # fewer than two units: the points only
            ax.plot(values, np.full(len(values), row), "o", color=colour)
            continue
        outer = np.random.get_state()  # seaborn jitters with the global generator: a fixed draw, state restored,
        np.random.seed(0)  # so a figure is the same on every build and the experiment's random numbers are untouched
        sns.stripplot(x=values, y=np.full(len(values), row), orient="h", native_scale=True, ax=ax, color=colour,
                      alpha=0.6, size=6, jitter=0.12, legend=False)
        np.random.set_state(outer)
        ax.errorbar(e["estimate"], row, xerr=[[e["estimate"] - e["ci_low"]], [e["ci_high"] - e["estimate"]]],
                    fmt="D", color="black", ms=6, capsize=5, lw=1.5, zorder=5)
        if "margin" in e:
            ax.fill_betweenx([row - 0.4, row + 0.4], -e["margin"], e["margin"], color=colour, alpha=0.12, lw=0)
        if "null" in e:
            ax.plot([e["null"]] * 2, [row - 0.4, row + 0.4], ls="--", color="black", lw=1)
        if "min_effect" in e:
            ax.plot([e["min_effect"]] * 2, [row - 0.4, row + 0.4], ls=":", color=colour, lw=1.5)
    ax.set_yticks(range(len(effects)), [f"{e['name']}\n({e['verdict']})" for e in effects])
    ax.set_ylim(len(effects) - 0.5, -0.5)
    ax.set_xlabel("per-unit value (points), estimate and interval (black)")
    ax.set_title(f"{verdict.claim.id}: {record['verdict']}")
    return ax


def show_verdicts(*verdicts) -> None:
    """The end of a claim cell: each verdict's box (its markdown) followed by its `effect_plot`, in order, each
    figure shown and closed at once so that boxes and figures alternate (and no figure is shown twice)."""
    from IPython.display import display

    for verdict in verdicts:
        display(verdict)
        ax = effect_plot(verdict)
        display(ax.figure)
        plt.close(ax.figure)
