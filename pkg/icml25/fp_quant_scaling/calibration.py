"""The `ci` training length of the runs `critical_data` reads (issue 51), chosen on calibration seeds only: at each
length, the law refitted to the runs trained that long, and where it puts D_crit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_FIELDS = ("seed", "steps", "dcrit_over_trained", "law_late_slope", "steps_past_dcrit", "late_slope_low",
           "late_slope_gap")

LENGTH_CALIBRATION = [
    dict(zip(_FIELDS, row))
    for row in (
        # seeds 0-2: full precision and E2M1 at B = 1024 trained 1152 steps (4x), read at each length below
        (0, 288, 0.661, +0.00338, 381, -0.0379, -0.0006),
        (0, 342, 0.572, +0.01044, 391, -0.0395, -0.0162),
        (0, 407, 0.495, +0.01710, 404, -0.0300, -0.0172),
        (0, 484, 0.426, +0.02397, 413, -0.0293, -0.0168),
        (0, 576, 0.369, +0.03030, 425, -0.0379, -0.0278),
        (0, 685, 0.318, +0.04087, 436, -0.0188, -0.0029),
        (0, 815, 0.273, +0.04766, 446, -0.0135, +0.0005),
        (0, 969, 0.234, +0.05476, 454, -0.0280, -0.0056),
        (0, 1152, 0.201, +0.05735, 463, -0.0266, -0.0085),
        (1, 288, 1.494, -0.02457, 861, -0.0378, +0.0007),
        (1, 342, 1.217, -0.01800, 833, -0.0435, -0.0006),
        (1, 407, 1.004, -0.01165, 818, -0.0612, -0.0191),
        (1, 484, 0.845, -0.00589, 818, -0.0501, -0.0059),
        (1, 576, 0.696, +0.00051, 803, -0.0198, +0.0170),
        (1, 685, 0.586, +0.00920, 803, +0.0113, +0.0370),
        (1, 815, 0.491, +0.01524, 801, -0.0281, -0.0026),
        (1, 969, 0.423, +0.02008, 821, -0.0550, -0.0532),
        (1, 1152, 0.359, +0.02278, 827, -0.0353, -0.0265),
        (2, 288, 0.982, -0.01463, 566, -0.0399, -0.0160),
        (2, 342, 0.867, -0.00873, 593, -0.0385, -0.0124),
        (2, 407, 0.765, -0.00323, 623, -0.0233, -0.0022),
        (2, 484, 0.671, +0.00213, 650, -0.0077, +0.0181),
        (2, 576, 0.588, +0.00723, 678, -0.0073, +0.0221),
        (2, 685, 0.521, +0.01485, 714, -0.0368, -0.0217),
        (2, 815, 0.452, +0.01984, 738, -0.0294, -0.0110),
        (2, 969, 0.396, +0.02430, 768, -0.0227, -0.0046),
        (2, 1152, 0.346, +0.02543, 799, -0.0174, -0.0018),
        # seeds 3-5 (added as calibration seeds): trained 815 steps
        (3, 288, 1.108, -0.01597, 639, -0.0408, -0.0109),
        (3, 342, 0.957, -0.01051, 655, -0.0373, -0.0133),
        (3, 407, 0.841, -0.00578, 685, -0.0256, -0.0031),
        (3, 484, 0.717, -0.00045, 694, -0.0334, -0.0039),
        (3, 576, 0.615, +0.00460, 709, -0.0306, -0.0042),
        (3, 685, 0.532, +0.01201, 729, -0.0221, +0.0028),
        (3, 815, 0.470, +0.01547, 767, -0.0025, -0.0061),
        (4, 288, 1.054, -0.01426, 607, -0.0451, -0.0024),
        (4, 342, 0.880, -0.00782, 602, -0.0320, +0.0135),
        (4, 407, 0.727, -0.00094, 592, -0.0328, +0.0074),
        (4, 484, 0.609, +0.00542, 590, -0.0212, +0.0089),
        (4, 576, 0.505, +0.01237, 582, -0.0294, +0.0063),
        (4, 685, 0.430, +0.02143, 590, -0.0086, +0.0043),
        (4, 815, 0.358, +0.02870, 584, -0.0403, -0.0158),
        (5, 288, 0.962, -0.01375, 555, -0.0201, +0.0179),
        (5, 342, 0.845, -0.00767, 578, -0.0180, +0.0151),
        (5, 407, 0.766, -0.00321, 624, -0.0226, -0.0074),
        (5, 484, 0.669, +0.00224, 648, -0.0301, -0.0100),
        (5, 576, 0.588, +0.00710, 678, -0.0397, -0.0264),
        (5, 685, 0.513, +0.01537, 704, -0.0288, +0.0079),
        (5, 815, 0.445, +0.02047, 725, -0.0001, +0.0219),
    )]
"""Measured on 2026-12-05, after the ci verdicts on seeds 200-208 at 288 steps (critical_data inconclusive:
`law_predicts_rise` held on 1 of 9 seeds) and before any verdict at a new length, on calibration seeds 0-5 only
(0-2 the chapter's, 3-5 added; never a verdict seed). Per seed, full precision and E2M1 at B = 1024 were trained
past 288 steps (1152 steps on seeds 0-2, 815 on 3-5) with the sweep's warmup and checkpoint grid, so the run read
up to `steps` is the run trained `steps` on the same tokens (`train_run`); E2M1 at B = 16 and E1M2 trained 288. The
token stream was drawn for the longest length (`token_stream`), so a sweep built at `steps` would train on other
draws from the same language: each row is a prefix of its seed's long run, not that sweep. At each length on the
grid (a quarter octave apart) the law was refitted without the E2M1 B = 1024 run (`fit_held_out`), on the runs as
long as that length, as the notebook fits them: `dcrit_over_trained` is its D_crit over the tokens trained,
`law_late_slope` the late slope it predicts for the run (`law_predicts_rise` asks >= 0), `steps_past_dcrit` the
length whose whole late half lies past that D_crit. `late_slope_low` and `late_slope_gap` are the measured late
slopes (E2M1, and E2M1 minus full precision), recorded to show what calibration saw; the choice did not read them.
One thread trained 9.9 (seeds 0-2) and 10.5 (3-5) ms per step of one run.

The fitted D_crit moves out as training grows, but slower than the training (on seed 0 from 381 to 463 steps'
worth of tokens while the run grows 4x), so the law's predicted rise keeps rising with the length. The rule, fixed
before seeds 3-5 were trained: the longest length on the grid whose warm-up (the sweep's run-steps at the 288-step
sweep's measured rate, 142-154 s for 36 x 288) grows by at most about 110 CPU-seconds, provided the law predicts the
rise there on at least `RISE_SHARE` of the calibration seeds. That is 685 steps (2^(5/4) x 288: 18 runs x 685 plus
18 x 288 run-steps, 1.69x the old sweep's, about +98 to +106 s); the law predicts the rise there on 6 of 6
calibration seeds, and its whole late half lies past the fitted D_crit on 2 of 6 (815 steps would give 6 of 6, at
about +130 s by that projection).

That projection overstated the cost. The first ci build with the long runs trained the 685-step sweep in 219 s
(12.5 ms per run-step, against 13.7-14.9 for the 288-step sweep), and a referee's warm-ups took 204 s at 685 and
234 s at 815. At the build's rate 815 would take about 248 s, +94 to +106 s over the old sweep: the rule evaluated
at the measured rate picks 815. The length was not changed after the ci verdicts on seeds 300-308 and the referee's
re-decision on 400-408 (at both lengths, `claims.REFEREE_400`) had been seen. The notebook prints this record; it
does not re-measure it."""


def length_table(record: Sequence[dict]) -> list[dict]:
    """Per length: how many calibration seeds the law refitted there predicts the rise on (`law_late_slope` >= 0),
    on how many the whole late half lies past its D_crit, the median D_crit / trained, and the seeds."""
    rows = []
    for steps in sorted({r["steps"] for r in record}):
        at = [r for r in record if r["steps"] == steps]
        rows.append({"steps": steps, "seeds": len(at), "law_predicts_rise": sum(r["law_late_slope"] >= 0 for r in at),
                     "late_half_past_dcrit": sum(r["steps_past_dcrit"] <= steps for r in at),
                     "median_dcrit_over_trained": float(np.median([r["dcrit_over_trained"] for r in at]))})
    return rows


def dcrit_drift(record: Sequence[dict]) -> dict:
    """How the refitted D_crit moves as training grows: between the shortest and the longest length every seed of
    `record` ran, the median over seeds of the length whose late half lies past D_crit (`steps_past_dcrit`) at each,
    and both ratios (the drift's, the training's)."""
    seeds = {r["seed"] for r in record}
    shared = [L for L in sorted({r["steps"] for r in record})
              if {r["seed"] for r in record if r["steps"] == L} == seeds]
    first, last = shared[0], shared[-1]
    moved = [float(np.median([r["steps_past_dcrit"] for r in record if r["steps"] == L])) for L in (first, last)]
    return {"from_steps": first, "to_steps": last, "past_dcrit": moved, "drift": moved[1] / moved[0],
            "training": last / first}
