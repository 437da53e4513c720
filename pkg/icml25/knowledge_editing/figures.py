"""The figures: every metric of the lifelong runs against the edits so far, one line per method."""

from __future__ import annotations

import numpy as np

from .benchmark import METRICS
from .experiment import BASELINES, early_edits

LABELS = {"rome": "ROME", "memit": "MEMIT", "finetune": "continual FT", "lora_merge": "LoRA + merge",
          "retrieval": "retrieval (MiniLM)", "retrieval_lexical": "retrieval (keyword)"}


def _with_first_window(runs: list[dict], x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The locality curve `x`, `y` (edits so far, one row per seed) with the unedited model's point and the
    measurements inside the first window in front, where the runs have them."""
    early = [[run.get("locality_before")] + run.get("locality_early", []) for run in runs]
    if None in (e[0] for e in early):
        return x, y
    n_early = [0] + early_edits(x[0])[:len(early[0]) - 1]  # methods other than ROME have the unedited point only
    return np.concatenate([n_early, x]), np.hstack([np.array(early, dtype=float), y])


def plot_lifelong(results: dict, axes, edits_per_window: int | None = None) -> None:
    """Every metric of the runs (:data:`METRICS` and "retention_learned") against the number of edits so far
    (`edits_per_window` per window; without it, against the window), one line per method (mean over seeds, band
    ± sd), one panel per metric; the legend goes in the first panel left over. Where the runs have them, the
    locality panel starts from the unedited model's (0 edits) and shows ROME's inside the first window."""
    from ..core.plot import PALETTE

    metrics = METRICS + ("retention_learned",)
    if len(axes.flat) < len(metrics):
        raise ValueError(f"{len(axes.flat)} axes for {len(metrics)} metrics ({', '.join(metrics)})")
    per = edits_per_window or 1
    for ax, metric in zip(axes.flat, metrics):
        for i, (m, runs) in enumerate(results.items()):
            y = np.array([run[metric] for run in runs], dtype=float)
            defined = ~np.isnan(y).any(0)  # retention has no value after the first window
            x, y = per * np.arange(1, y.shape[1] + 1)[defined], y[:, defined]
            if metric == "locality" and edits_per_window:
                x, y = _with_first_window(runs, x, y)
            mu, sd = y.mean(0), y.std(0)
            ls = "--" if m in BASELINES else "-"
            ax.plot(x, mu, ls, marker="o", ms=3, color=PALETTE[i], label=LABELS[m])
            ax.fill_between(x, mu - sd, mu + sd, color=PALETTE[i], alpha=0.15)
        n = len(runs[0][metric])
        ax.set(title=metric.replace("_", " "), xlabel="edits so far" if edits_per_window else "window",
               ylim=(-0.03, 1.03), xticks=per * np.arange(0 if edits_per_window else 1, n + 1, max(1, n // 8)))
    spare = list(axes.flat)[len(metrics):]
    for ax in spare:
        ax.set_axis_off()
    axes.flat[0].set_ylabel("accuracy")
    if spare:  # the legend in the first spare panel
        spare[0].legend(*axes.flat[0].get_legend_handles_labels(), loc="center", fontsize=9)
    else:
        axes.flat[0].legend(fontsize=8)
