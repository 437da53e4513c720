"""Chapter: A Unified Approach to Routing and Cascading for LLMs (Dekoninck, Baader, Vechev; ICML 2025).

A *strategy* decides, per query, which models of a pool to run and whose answer to return, trading expected
quality against cost with a multiplier λ:

* **routing** runs one model, ``argmax_m q̂_m − λ ĉ_m`` with ex-ante estimates (the paper's Eq. 1);
* the **threshold cascade** runs models from cheapest up and stops once the post-hoc estimate of the last one
  clears a threshold;
* the **optimal cascade** (Sec. 3) runs the next model only if some longer prefix of the cascade has a better
  trade-off ``q̂(M) − λ ĉ(M)``, where the quality of a set of models ("supermodel") is the expected maximum of
  their qualities, ``q̂(M) = E[max_{m∈M} Q_m]``, with Q Gaussian around the estimates (Eq. 4);
* **cascade routing** (Sec. 4) maximises the same trade-off over *all* supersets of the models already run, and
  runs the cheapest model of the best one; it stops when the best set is the one already run.

Models not yet run carry the uncertainty of their ex-ante estimate, fitted as the covariance of
``q̂_pre − q̂_post`` on a training split; models already run are known (variance 0). Quality–cost curves are
compared by their normalised area (AUC) between the cheapest and the most expensive model's cost.

Everything is vectorised over queries: the expected maxima of every (models-run ⊆ candidate-set) pair are
tabulated once per query (3^K entries, Sec. 5's "supermodel" values), so one λ costs only table look-ups.

The package, one idea per module: `scales` (settings per scale), `claims`, `supermodel` (Eq. 4 and its table),
`benchmark` (the synthetic RouterBench), `strategies`, `curves` (budgets, quality-cost curves, AUC), `experiment`
(notebook 02's cells and the claims' measurements), `real_pool` and `cached` (notebook 02's cells and notebook 03's
seeds, cached for the book's warm-up: `warm_up`).
"""

from __future__ import annotations

from .benchmark import Estimates, Pool, make_estimates, make_pool
from .cached import (CALIBRATION_POOLS, benchmark_results, cached_benchmark_cell, calibration_pools,
                     real_pool_results, warm_up)
from .claims import (BEATS_BOTH, CLAIM_POOL_SIZES, CLAIMS, ESTIMATORS_MATTER, NON_INFERIORITY_MARGIN, OPTIMAL_CASCADE,
                     PAPER_SMALLEST_GAIN, REAL_POOL_BEATS_BOTH, cell_key)
from .curves import (curves, lambda_grid, quality_cost_auc, remove_dominated, routing_for_budget, run_strategy,
                     step_family, strategy_settings, upper_envelope)
from .experiment import auc_table, benchmark_cell, cell_gain, claim_measurements, evaluate, mean_auc, run_benchmark
from .real_pool import (MEMORY_SIZES, REAL_MEMBERS, RealRuns, confidence, fit_quality_estimator, lm_context,
                        member_flops, nearest_margin, pool_pixels, positive_control, real_claim_measurements,
                        real_estimates, real_pool_cell, run_lm_pool, run_memory_pool, run_real_pool)
from .scales import CHAPTER, FULL_POOL, NOISE_LEVELS, STRATEGIES, config
from .strategies import Outcome, _candidates, cascade_routing, optimal_cascade, per_step, routing, threshold_cascade
from .supermodel import _sqrt_psd, config_index, expected_max, expected_max_two, gaussian_samples, supermodel_table
