"""The book's plot style: one call at the top of every notebook, so all figures look alike."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

PALETTE = ["#1f5aa6", "#d1495b", "#2e8b57", "#edae49", "#6c4f9c", "#00798c", "#8c564b", "#7f7f7f"]


def use_style() -> None:
    """Readable defaults: light grid, colour-blind-friendly palette, titles and labels big enough to read."""
    mpl.rcParams.update({
        "figure.figsize": (7.0, 4.0),
        "figure.dpi": 110,
        "savefig.dpi": 110,
        "axes.prop_cycle": mpl.cycler(color=PALETTE),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 12,
        "axes.titleweight": "bold",
        "axes.labelsize": 11,
        "legend.frameon": False,
        "font.size": 10,
    })


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
