"""The experiment: every measurement and signature of each run, the null control's, and the claims' measurements
over the runs that learned the task."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from ..core.seeding import one_thread, torch_generator
from .group import elements, shuffled_parity
from .measurements import (AblationDrops, ErasureDrops, accuracy_by_position, corrupt, eval_actions,
                           parity_ablation_drops, parity_erasure_drops, patching_map, probe_maps)
from .claims import VARIANCE_TOLERANCE
from .settings import eval_length
from .signatures import (LEARNED_ACCURACY, SIGNATURES, VOTING, error_signature, label_run, patching_signature,
                         probe_signature)
from .task import state_sequence
from .trackers import get_tracker
from .training import CONDITIONS, predict_states

@dataclass
class RunReport:
    condition: str
    seed: int
    accuracy: np.ndarray  # by position, 1 … eval_length
    trained_accuracy: float  # accuracy at t = train_length
    learned: bool  # trained_accuracy >= LEARNED_ACCURACY
    signatures: dict  # SIGNATURES -> scaled value (0 AA, 1 PAA; NaN: not readable)
    null_signatures: dict  # the same, read against shuffled_parity instead of ε (the null control)
    n_errors: int  # errors the error signature read
    probes: dict  # probe_maps
    patching: dict  # "same"/"different" -> window map [L+1, T]
    long_accuracy: float  # mean state accuracy beyond the training length, T < t <= 2T
    label: str  # the rule's label, or "not learned" (excluded)
    null_label: str  # the rule's label on null_signatures
    losses: list
    ablation: AblationDrops | None = None  # accuracy at t <= T lost when a direction at parity_layer is ablated
    erasure: ErasureDrops | None = None  # accuracy at t <= T lost when the parity at parity_layer is erased
    parity_readable: float = math.nan  # the parity probe's held-out accuracy after block parity_layer
    far_above_chance: float = math.nan  # mean state accuracy over T + 2 <= t <= 2T minus chance (1/|S_n|)
    # the seconds the zoo spent training this run: a design trained together is timed on the run that trained it
    # (the other runs of the design cost nothing more), so the sum over a design's runs is the design's training
    train_seconds: float = math.nan


def patching_maps(model, tokenizer, cfg, seed: int, mode: str = "window",
                  colouring: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Window (or prefix) patching maps for parity-keeping ("same") and parity-changing ("different")
    corruptions of the first action (class-keeping and class-changing under `colouring`), on held-out stories of
    the training length."""
    clean = eval_actions(cfg, cfg.n_patch, cfg.train_length, "patch")
    g = torch_generator(seed, "state_tracking", "corrupt", mode, *(() if colouring is None else ("null",)))
    return {kind: patching_map(model, tokenizer, cfg.group_n, clean,
                               corrupt(clean, 0, kind == "same", cfg.group_n, g, colouring), mode)
            for kind in ("same", "different")}


def signatures_of(model, tokenizer, cfg, seed: int, pred: torch.Tensor, states: torch.Tensor, accuracy,
                  colouring: torch.Tensor | None = None) -> tuple[dict, int, dict, dict]:
    """The three signatures of one run, read against ε (or `colouring`, for the null control): (signatures,
    errors read, probe maps, patching maps)."""
    n = cfg.group_n
    z_err, n_err = error_signature(pred, states, accuracy, n, cfg.min_errors, colouring)
    probes = probe_maps(model, tokenizer, cfg, eval_actions(cfg, cfg.n_probe, cfg.train_length, "probe"), colouring)
    patching = patching_maps(model, tokenizer, cfg, seed, colouring=colouring)
    signatures = {"errors": z_err, "probes": probe_signature(probes, n),
                  "patching": patching_signature(patching, cfg.early_layer)}
    return signatures, n_err, probes, patching


def measure_run(cfg, seed: int, condition: str) -> RunReport:
    """Every measurement of one run, on one torch thread (as the runs train) and one BLAS thread (the probes'
    logistic regressions): these tiny products gain nothing from a second thread, whose OpenMP team stalls on a
    busy machine (measured on the loaded machine: one run's measurements took 12.7 s with two BLAS threads, 2.1 s
    with one; the six runs took 65-71 s of a two-thread notebook kernel)."""
    with one_thread(), threadpool_limits(1):
        return _measure_run(cfg, seed, condition)


def far_above_chance(accuracy: np.ndarray, train_length: int, n: int) -> float:
    """Mean state accuracy over T + 2 <= t <= 2T (`accuracy` by position, 1 … 2T) minus chance, 1/|S_n|: whether
    the run still tracks beyond the one step past the training length (NaN when there is no such position)."""
    far = accuracy[train_length + 1:]
    return float(far.mean() - 1 / len(elements(n))) if len(far) else math.nan


def _measure_run(cfg, seed: int, condition: str) -> RunReport:
    z = get_tracker(cfg, seed, condition)
    ablation = parity_ablation_drops(z.model, z.tokenizer, cfg)
    erasure = parity_erasure_drops(z.model, z.tokenizer, cfg)
    n, length = cfg.group_n, eval_length(cfg)
    acts = eval_actions(cfg, cfg.n_eval, length, "eval")
    states = state_sequence(acts, n)
    pred = predict_states(z.model, acts, z.tokenizer, n)
    acc = accuracy_by_position(pred, states)
    signatures, n_err, probes, patching = signatures_of(z.model, z.tokenizer, cfg, seed, pred, states, acc)
    null_signatures = signatures_of(z.model, z.tokenizer, cfg, seed, pred, states, acc, shuffled_parity(n))[0]
    trained = float(acc[cfg.train_length - 1])
    return RunReport(condition, seed, acc, trained, trained >= LEARNED_ACCURACY, signatures, null_signatures,
                     n_err, probes, patching, long_accuracy=float(acc[cfg.train_length:].mean()),
                     label=label_run(trained, [signatures[k] for k in VOTING]),
                     null_label=label_run(trained, [null_signatures[k] for k in VOTING]),
                     losses=list(z.info["losses"]),
                     ablation=ablation, erasure=erasure, parity_readable=float(probes["parity"][cfg.parity_layer]),
                     far_above_chance=far_above_chance(acc, cfg.train_length, n),
                     train_seconds=float(z.info.get("train_seconds", math.nan)))


def measure_all(cfg) -> list[RunReport]:
    return [measure_run(cfg, s, c) for c in CONDITIONS for s in cfg.seeds]


def mean_map(reports: Sequence[RunReport], condition: str, get) -> tuple[np.ndarray, int]:
    """`get(report)` (a probe or patching map) averaged over the runs of `condition` that learned the task, and
    their number (an all-NaN map when none did)."""
    maps = [get(r) for r in reports if r.condition == condition and r.learned]
    if not maps:
        return np.full_like(get(reports[0]), np.nan, dtype=float), 0
    return np.mean(maps, axis=0), len(maps)


def summarise(reports: Sequence[RunReport]) -> dict:
    """The claims' measurements over the runs that learned the task (:data:`LEARNED_ACCURACY`); `labels` lists
    every run, `n_not_learned` counts the excluded ones. The label shares of `two_mechanisms` (and their null) are
    over the learned plain runs alone: the parity_aux runs are supervised to compute the parity early, so counting
    them would plant the PAA-like share the claim is about; they are the rule's positive control instead."""
    learned = [r for r in reports if r.learned]
    # two_mechanisms counts the unsteered runs: a parity_aux run is planted parity-first (the positive control)
    unsteered = [r for r in learned if r.condition == "plain"]
    by_label = {lab: [r for r in learned if r.label == lab] for lab in ("AA-like", "PAA-like")}
    by_seed = {(r.seed, r.condition): r for r in learned}
    seeds = sorted({r.seed for r in learned})
    # paired by seed: the same seed's plain and parity_aux runs (same data order and initialisation)
    pairs = [(by_seed[s, "plain"], by_seed[s, "parity_aux"]) for s in seeds
             if (s, "plain") in by_seed and (s, "parity_aux") in by_seed]
    # seeds whose two runs got different labels: (the AA-like run, the PAA-like run)
    mixed = [tuple(sorted(p, key=lambda r: r.label)) for p in pairs if {p[0].label, p[1].label} == {"AA-like",
                                                                                                   "PAA-like"}]
    out = {
        "labels": [f"{r.condition}/s{r.seed}:{r.label}" for r in reports],
        "n_not_learned": len(reports) - len(learned),
        "n_unsteered": len(unsteered),
        "n_mixed_label": sum(r.label == "mixed" for r in unsteered),
        "n_aa": sum(r.label == "AA-like" for r in unsteered),
        "n_paa": sum(r.label == "PAA-like" for r in unsteered),
        "long_accuracy_aa": [r.long_accuracy for r in by_label["AA-like"]],
        "long_accuracy_paa": [r.long_accuracy for r in by_label["PAA-like"]],
        "n_pairs": len(pairs),
        "is_aa": [float(r.label == "AA-like") for r in unsteered],
        "is_paa": [float(r.label == "PAA-like") for r in unsteered],
        "aa_minus_paa_long_accuracy": [a.long_accuracy - b.long_accuracy for a, b in mixed],
        "n_mixed_seeds": len(mixed),
        # the precondition off_the_floor: the compared runs of either label, still above chance beyond T + 1
        "far_above_chance": max((float(np.mean([p[side].far_above_chance for p in mixed])) for side in (0, 1)),
                                default=math.nan),
        # which condition each mixed seed's AA-like run had (the comparison is between conditions when it is plain)
        "mixed_aa_conditions": [a.condition for a, _ in mixed],
        "n_signatures_read": [sum(not math.isnan(r.signatures[k]) for k in VOTING) for r in learned],
        # the positive control: the rule's label of each learned run forced to compute the parity after block 1
        "forced_is_paa": [float(r.label == "PAA-like") for r in learned if r.condition == "parity_aux"],
    }
    # the null control: the same rule on the same runs, with ε replaced by shuffled_parity
    out["null"] = {"is_aa": [float(r.null_label == "AA-like") for r in unsteered],
                   "is_paa": [float(r.null_label == "PAA-like") for r in unsteered],
                   "labels": [f"{r.condition}/s{r.seed}:{r.null_label}" for r in unsteered],
                   "n_not_learned": out["n_not_learned"],
                   "n_signatures_read": [sum(not math.isnan(r.null_signatures[k]) for k in VOTING)
                                         for r in learned],
                   "forced_is_paa": out["forced_is_paa"]}
    for name in SIGNATURES:
        out[f"steer_{name}_diff"] = [aux.signatures[name] - pl.signatures[name] for pl, aux in pairs]
    # steerable: per seed, the parity flips the erasure causes beyond its controls of the same size (the rate over
    # all predictions at t <= T of predicted states with the other parity, erasure minus controls pooled) in the
    # parity_aux run minus the same in the plain run: the unsteered run of the same seed is the comparison
    forced = [r for r in learned if r.condition == "parity_aux"]
    erased = [r for r in learned if r.erasure is not None]
    # steerable's per-seed rule: a seed's unit is kept only when the controls of both its runs match the erasure's
    # change (the edits' geometry, read before any flip); `variance_matched` asks it of a share of the seeds
    matched = [controls_match(pl) and controls_match(aux) for pl, aux in pairs]
    out["seed_matched"] = [float(k) for k in matched]
    out["n_kept_pairs"] = sum(matched)
    out["steerable_seeds"] = [{"seed": pl.seed, "kept": k, "plain_ratio": _erased(pl, "change_ratio"),
                               "parity_aux_ratio": _erased(aux, "change_ratio")}
                              for (pl, aux), k in zip(pairs, matched)]
    out["flip_excess_aux_minus_plain"] = [_erased(aux, "flip_excess") - _erased(pl, "flip_excess")
                                          for (pl, aux), k in zip(pairs, matched) if k]
    out["n_forced"] = len(forced)
    out["parity_probe_min"] = min((r.parity_readable for r in forced), default=math.nan)
    out["parity_after_erasure"] = max((_erased(r, "parity_after") for r in forced), default=math.nan)
    # the preconditions on the edits hold in both conditions' runs, since the statistic reads both
    out["parity_after_erasure_both"] = max((_erased(r, "parity_after") for r in erased), default=math.nan)
    out["change_mismatch"] = max((_erased(r, "change_mismatch") for r in erased), default=math.nan)
    # reported, not decisive (they decided before): in each parity_aux run, the wrong-parity share of the state
    # errors after the erasure minus after its controls (errors pooled, `wrong_parity_contrast_by_run` below), its
    # accuracy drop minus theirs (`erased_minus_matched`), and the fewest errors under one edit
    out["edit_errors_min"] = min((_erased(r, "fewest_errors") for r in forced), default=math.nan)
    # described, each condition's: the erasure's quantities, and the ablation of the parity probe's direction (the
    # earlier measure, after which the parity stays readable) beside its variance-matched controls
    for name, attr in (("erasure_drop", "erased"), ("erasure_matched_drop", "matched_mean"),
                       ("erasure_change_share", "change_share"), ("erased_minus_matched", "erased_minus_matched"),
                       ("parity_after_erasure_by_run", "parity_after"),
                       ("erased_wrong_parity", "erased_wrong_parity"), ("matched_wrong_parity", "matched_wrong_parity"),
                       ("wrong_parity_contrast_by_run", "wrong_parity_contrast"),
                       ("erased_flip_rate", "erased_flip_rate"), ("matched_flip_rate", "matched_flip_rate"),
                       ("flip_excess", "flip_excess")):
        out[name] = {c: [_erased(r, attr) for r in learned if r.condition == c] for c in CONDITIONS}
    out["parity_after_controls_min"] = {c: [min(r.erasure.parity_after_controls) if r.erasure else math.nan
                                            for r in learned if r.condition == c] for c in CONDITIONS}
    for name, attr in (("ablation_drop", "parity"), ("matched_ablation_drop", "matched_mean"),
                       ("control_ablation_drop", "random"), ("parity_variance_share", "parity_variance_share"),
                       ("parity_minus_matched", "parity_minus_matched")):
        out[name] = {c: [_ablated(r, attr) for r in learned if r.condition == c] for c in CONDITIONS}
    out["steer_ablation_diff"] = [_ablated(aux, "parity") - _ablated(pl, "parity") for pl, aux in pairs]
    return out


def controls_match(report: RunReport) -> bool:
    """steerable's per-run rule: every control of the run's erasure changes the residual stream by the erasure's
    mean squared change within :data:`~icml25.state_tracking.claims.VARIANCE_TOLERANCE` (false for a run measured
    without the erasure). It reads the edits' geometry alone, not what the edits do to the predictions; it fails
    where the whole complement of the parity classes' mean difference carries less than the erasure's change."""
    return _erased(report, "change_mismatch") <= VARIANCE_TOLERANCE


def _ablated(report: RunReport, attr: str) -> float:
    """One quantity of a run's :class:`AblationDrops` (NaN for a run measured without the ablation)."""
    return math.nan if report.ablation is None else float(getattr(report.ablation, attr))


def _erased(report: RunReport, attr: str) -> float:
    """One quantity of a run's :class:`ErasureDrops` (NaN for a run measured without the erasure)."""
    return math.nan if report.erasure is None else float(getattr(report.erasure, attr))
