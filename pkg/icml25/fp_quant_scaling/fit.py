"""Fitting the law to our runs: least squares with alpha and beta fixed, and prediction of a run left out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from .experiment import Run
from .law import PAPER, LawParams, critical_data_size, precision_term
from .quantize import QuantSpec


FIT_FIELDS = ("n", "d", "eps", "gamma", "delta", "nu")


def fit_law(N, D, E, M, B, loss, alpha: float = PAPER.alpha, beta: float = PAPER.beta) -> LawParams:
    """Least squares for (n, d, ε, γ, δ, ν) of the law with α and β held fixed (our runs cannot identify the
    exponents). Full-precision runs have E = NaN and no quantisation term.

    Given (δ, ν) the law is linear in (n, d, ε, 1/γ), so those are solved exactly (minimum-norm least squares,
    which also copes with a single model size, where n/N^α and ε are one constant) and only (δ, ν) are searched:
    a coarse grid, then a bounded local refinement (variable projection)."""
    N, D, E, M, B, loss = (np.asarray(v, dtype=float) for v in (N, D, E, M, B, loss))
    if len(loss) < len(FIT_FIELDS):
        raise ValueError(f"need at least {len(FIT_FIELDS)} points to fit {FIT_FIELDS}, got {len(loss)}")
    quant = ~np.isnan(E)
    scale_q = np.where(quant, D**beta / N**alpha * np.log2(np.where(quant, B, 2)), 0.0)
    e_half, m_half = np.where(quant, E, 0) + 0.5, np.where(quant, M, 0) + 0.5

    def linear_part(delta_nu):
        delta, nu = delta_nu
        X = np.stack([N**-alpha, D**-beta, np.ones_like(N), scale_q / (e_half**delta * m_half**nu)], 1)
        coef = np.linalg.lstsq(X, loss, rcond=None)[0]
        return coef, X @ coef - loss

    grid = [(dl, nu) for dl in np.linspace(0.25, 6, 24) for nu in np.linspace(0.25, 6, 24)]
    start = min(grid, key=lambda dn: float((linear_part(dn)[1] ** 2).sum()))
    delta, nu = least_squares(lambda dn: linear_part(dn)[1], start, bounds=([0, 0], [20, 20])).x
    (n, d, eps, inv_gamma), _ = linear_part((delta, nu))
    gamma = 1 / inv_gamma if inv_gamma > 0 else math.inf  # no positive quantisation term: gamma is infinite
    return LawParams(n=n, alpha=alpha, d=d, beta=beta, eps=eps, gamma=gamma, delta=delta, nu=nu)


def predict(p: LawParams, N, D, E, M, B):
    """the law for arrays where full-precision entries have E = NaN."""
    N, D, E, M, B = (np.asarray(v, dtype=float) for v in (N, D, E, M, B))
    base = p.n / N**p.alpha + p.d / D**p.beta + p.eps
    quant = ~np.isnan(E)
    term = np.zeros_like(base)
    term[quant] = D[quant] ** p.beta / N[quant] ** p.alpha * precision_term(E[quant], M[quant], B[quant], p)
    return base + term


def points_table(runs: Sequence[Run]) -> dict[str, np.ndarray]:
    """One row per (run, checkpoint): columns N, D, E, M, B, loss (E, M, B = NaN for full precision)."""
    rows = [(r.N, D, *(3 * [math.nan] if r.spec.E is None else [r.spec.E, r.spec.M, r.spec.B]), loss)
            for r in runs for D, loss in zip(r.D, r.loss)]
    return dict(zip(("N", "D", "E", "M", "B", "loss"), np.array(rows, float).T))


def r_squared(y, pred) -> float:
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    return float(1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum())


@dataclass(frozen=True)
class HeldOutFit:
    """The law fitted to one seed's runs but one, and what it says of the run left out."""

    law: LawParams
    measured: np.ndarray  # the held-out run's penalty over full precision (same seed) at each checkpoint
    predicted: np.ndarray  # the fitted law's quantisation term for it at the same D
    dcrit: float  # the fitted law's critical data size for the held-out run's format (tokens; inf if none)

    @property
    def r2(self) -> float:
        """R^2 of the predicted penalty on the measured one (1 is perfect; 0 is no better than its mean)."""
        return r_squared(self.measured, self.predicted)


def fit_held_out(runs: Sequence[Run], held: QuantSpec) -> HeldOutFit:
    """Fit the law (alpha, beta fixed) on every checkpoint of one seed's runs except the run with format
    `held`, and predict that run's penalty over the seed's full-precision run (at the held-out run's checkpoints,
    which a longer full-precision run holds). With one model size the law's
    base cancels in the penalty, so the prediction is its quantisation term alone, carried to the held-out
    format by the law's (E + 0.5)^delta (M + 0.5)^nu and log2 B."""
    fit = points_table([r for r in runs if r.spec != held])
    law = fit_law(fit["N"], fit["D"], fit["E"], fit["M"], fit["B"], fit["loss"])
    target, fp = (next(r for r in runs if r.spec == spec) for spec in (held, QuantSpec(None)))
    fp = fp.upto(target.D[-1])  # full precision at the held-out run's checkpoints (it may be trained longer)
    D = np.array(target.D, float)
    quantised = math.isfinite(law.gamma)  # else the fit found no positive quantisation term
    term = D**law.beta / target.N**law.alpha * precision_term(held.E, held.M, held.B, law) if quantised else 0 * D
    has_dcrit = quantised and law.d > 0  # the loss falls with D at first and then rises
    dcrit = float(critical_data_size(target.N, held.E, held.M, held.B, law)) if has_dcrit else math.inf
    return HeldOutFit(law, np.subtract(target.loss, fp.loss), term, dcrit)
