"""The three signatures (errors, probes, patching), each scaled so that 0 is AA's prediction and 1 PAA's, and the
declared rule that votes them into a label."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from .group import elements
from .measurements import parity_chance, parity_consistent_errors

LEARNED_ACCURACY = 0.9
"""The declared precondition: a run has learned the task if its held-out accuracy of s_T at the training length
t = T is at least this. Mechanism labels and every claim are about such runs only; the others are reported, with
their count, and excluded (a model that has learned only the parity is "PAA-like" whatever it would become)."""
ABOVE_CHANCE = 0.5
"""A position where the model is right at least this often is one where it still tracks the state; the error
signature reads only errors made there (errors made at chance keep the parity at the chance rate whatever the
mechanism)."""
AA_BAND, PAA_BAND = 1 / 3, 2 / 3
"""Each signature is scaled so that 0 is what AA predicts and 1 what PAA predicts; it votes AA-like at or below
AA_BAND, PAA-like at or above PAA_BAND, and abstains in between."""
RESOLVED = 0.9
"""A layer whose state probe (scaled, :func:`scaled_probe`) is above this has resolved the state: the parity
surplus is not read there (there is no room left for parity beyond the state)."""


def scaled_probe(accuracy, n_classes: int):
    """Probe accuracy scaled from chance (0) to perfect (1)."""
    return (np.asarray(accuracy) - 1 / n_classes) / (1 - 1 / n_classes)


def error_signature(pred: torch.Tensor, states: torch.Tensor, accuracy: np.ndarray, n: int,
                    min_errors: int, colouring: torch.Tensor | None = None) -> tuple[float, int]:
    """The errors' parity: among errors made where the model tracks (accuracy ≥ :data:`ABOVE_CHANCE`), the share
    that keep the true parity, scaled z = (p − c)/(1 − c) with c the chance rate for uniform errors (0 for AA,
    whose errors ignore the parity; 1 for PAA, whose errors keep it). NaN with fewer than `min_errors` such errors.
    `colouring` replaces ε (the null control). Returns (z, number of errors read)."""
    p, n_err = parity_consistent_errors(pred, states, n, where=accuracy >= ABOVE_CHANCE, colouring=colouring)
    if n_err < min_errors:
        return float("nan"), n_err
    c = parity_chance(n)
    return (p - c) / (1 - c), n_err


def probe_signature(probes: dict, n: int) -> float:
    """Parity decodable ahead of the state. At each layer, with the state and parity probes scaled from chance
    (z_s, z_ε), a representation that holds only (partial) state information and errs uniformly gives z_ε = z_s
    exactly; the surplus (z_ε − z_s)/(1 − z_s) is 0 there (AA: parity only with the state) and 1 where the parity is
    decodable though the state is not (PAA). The largest surplus over the layers that have not resolved the state
    (z_s ≤ :data:`RESOLVED`); NaN if every layer has."""
    z_s = scaled_probe(probes["state"], len(elements(n)))
    z_p = scaled_probe(probes["parity"], 2)
    open_ = z_s <= RESOLVED
    if not open_.any():
        return float("nan")
    return float(np.max((z_p[open_] - z_s[open_]) / (1 - z_s[open_])))


def patching_signature(maps: dict, early_layer: int) -> float:
    """Parity reaches the answer early. Window patching at the last token after `early_layer` blocks: the share of
    a parity-changing corruption's effect that token already carries, minus that of a parity-keeping corruption
    (of a_1). AA moves a_1's information forward one scan round per layer, whatever its parity (0); PAA sends the
    parity to every later token first, so only the parity-changing corruption is carried early (towards 1)."""
    return float(maps["different"][early_layer, -1] - maps["same"][early_layer, -1])


def vote(signature: float) -> str | None:
    if math.isnan(signature):
        return None
    return "AA" if signature <= AA_BAND else "PAA" if signature >= PAA_BAND else None


def classify(signatures: Sequence[float]) -> str:
    """The declared rule: each voting signature votes (:func:`vote`); PAA-like (AA-like) when every one votes PAA
    (AA), "mixed" otherwise (an abstention or an unreadable signature included)."""
    votes = {vote(s) for s in signatures}
    if votes == {"PAA"}:
        return "PAA-like"
    if votes == {"AA"}:
        return "AA-like"
    return "mixed"


def label_run(trained_accuracy: float, signatures: Sequence[float]) -> str:
    """"not learned" below the precondition (:data:`LEARNED_ACCURACY` at the training length), else the
    declared rule's label (:func:`classify`)."""
    if trained_accuracy < LEARNED_ACCURACY:
        return "not learned"
    return classify(signatures)


SIGNATURES = ("errors", "probes", "patching")
POSITIVE_CONTROL = {
    # calibration seeds 0-7 of the `ci` design (T = 4, 1500 steps), every run learned: condition -> signature ->
    # the value of each seed's run (NaN: fewer errors than `min_errors` where the model tracks)
    "plain": {"errors": (0.44, 0.30, math.nan, 0.30, 0.31, math.nan, 0.27, 0.47),
              "probes": (0.22, 0.07, 0.47, 0.44, 0.05, 0.15, 0.16, 0.27),
              "patching": (0.24, 0.39, 0.17, 0.43, 0.35, 0.40, 0.35, 0.49)},
    "parity_aux": {"errors": (0.43, 0.41, 0.36, 0.37, 0.53, math.nan, 0.48, 0.52),
                   "probes": (1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00, 1.00),
                   "patching": (0.26, 0.41, 0.45, 0.25, 0.42, 0.50, 0.36, 0.53)},
}
"""The rule's positive control on the calibration seeds (issue 54; measured before any verdict of this design): the
three signatures of each run. A signature that cannot vote PAA on the runs forced to compute the parity after
block 1 (parity_aux) cannot be part of the rule: the error signature voted PAA on none of them (on 1 of 3 of the
T = 6 design's calibration runs), so it blocked nearly every PAA label it joined; the patching signature never
reached the PAA band either. The probe signature votes PAA on every forced run and AA on most plain ones: it votes both
ways, so it alone labels (:data:`VOTING`)."""
VOTING = ("probes",)
"""The signatures that vote in the label, chosen from the positive control (:data:`POSITIVE_CONTROL`): the probe
signature alone. The error and patching signatures are measured and shown but do not vote: on the planted
parity-first runs neither reached the PAA band (the errors of a model whose early layers hold the parity need not
keep it: its answer is not computed within the parity class), so each could only ever block a PAA label."""
