"""The figures and the summary table shared by the two task notebooks."""

from __future__ import annotations

import numpy as np

from .experiment import METHODS


def plot_masks(result, cfg):
    """The learned mask λ per head (★ marks the true circuit) and the mask-optimisation loss curve."""
    from ..core import plot

    fig, axes = plot.subplots(1, 2, figsize=(9, 3))
    im = axes[0].imshow(result.ib.lam.reshape(cfg.n_layers, cfg.n_heads), vmin=0, vmax=1, cmap="viridis")
    axes[0].set(title="IBCircuit mask λ per head", xlabel="head", ylabel="layer")
    for k in np.flatnonzero(result.true_circuit):
        axes[0].text(k % cfg.n_heads, k // cfg.n_heads, "★", ha="center", va="center", color="red")
    fig.colorbar(im, ax=axes[0], label="λ (★ = true circuit)")
    axes[1].plot(result.ib.losses, label="faithfulness + β·compression")
    axes[1].set(title="Mask optimisation", xlabel="step", ylabel="loss (nats)", yscale="log")
    axes[1].legend()
    return fig


def plot_faithfulness(results, cfg, task: str, recovery: str):
    """KL to the full model and the recovered fraction of the task metric (`recovery`) against circuit size,
    for every method (mean ± sd over seeds), with the exhaustive optimum."""
    from ..core import plot

    sizes = np.arange(cfg.n_layers * cfg.n_heads + 1)
    fig, axes = plot.subplots(1, 2, figsize=(10, 3.8))
    for m, color in zip(METHODS, plot.PALETTE):
        kl = np.array([r.kl[m] for r in results])
        rec = np.array([r.recovery[m] for r in results])
        axes[0].errorbar(sizes, kl.mean(0), yerr=kl.std(0), color=color, marker=".", capsize=2, label=m)
        axes[1].errorbar(sizes, rec.mean(0), yerr=rec.std(0), color=color, marker=".", capsize=2, label=m)
    opt = np.array([r.optimum_kl for r in results])
    axes[0].plot(sizes, opt.mean(0), "k--", label="exhaustive optimum")
    axes[0].plot(sizes, np.array([r.random_kl for r in results]).mean(0), color="gray", ls=":",
                 label="random ranking, expected")
    axes[0].set(title=f"KL(full ‖ circuit) by size ({task})", xlabel="heads kept",
                ylabel="KL (nats), mean ± sd", yscale="symlog")
    axes[1].axhline(cfg.recovery_threshold, color="gray", ls=":")
    axes[1].set(title=f"{recovery} recovery by size ({task})", xlabel="heads kept",
                ylabel="recovered fraction, mean ± sd")
    axes[0].legend(fontsize=7)
    return fig


def plot_ranking(summary, cfg):
    """ROC-AUC of each method's head scores against the true circuit, and regret against the optimum by size."""
    from ..core import plot

    sizes = np.arange(cfg.n_layers * cfg.n_heads + 1)
    fig, axes = plot.subplots(1, 2, figsize=(10, 3.5))
    aucs = [summary[m]["auc"] for m in METHODS]
    axes[0].bar(range(len(METHODS)), [np.nanmean(a) for a in aucs], yerr=[np.nanstd(a) for a in aucs],
                color=plot.PALETTE[:len(METHODS)], capsize=3)
    axes[0].set_xticks(range(len(METHODS)), [m.replace(" ", "\n") for m in METHODS], fontsize=7)
    axes[0].set(title="ROC-AUC of head scores vs true circuit", ylabel="AUC (mean ± sd over seeds)",
                ylim=(0, 1.05))
    for m, color in zip(METHODS, plot.PALETTE):
        axes[1].plot(sizes, summary[m]["regret"].mean(0), color=color, marker=".", label=m)
    axes[1].set(title="Regret against the exhaustive optimum", xlabel="heads kept", ylabel="extra KL (nats)",
                yscale="symlog")
    axes[1].legend(fontsize=7)
    return fig


def summary_table(summary) -> str:
    """One line per method: area under the KL curve, size at the recovery threshold, AUC, mean regret."""
    return "\n".join(
        f"{m:22s} area {s['area'].mean():.3f} ± {s['area'].std():.3f}   size@threshold {s['size90'].mean():.1f} "
        f"± {s['size90'].std():.1f}   AUC {np.nanmean(s['auc']):.2f}   mean regret {s['regret'].mean():.3f}"
        for m, s in ((m, summary[m]) for m in METHODS))
