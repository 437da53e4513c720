"""Reward-Guided Speculative Decoding (RSD; Liao et al., ICML 2025), at the scale of the zoo's arithmetic reasoners.

A cheap *draft* model proposes each reasoning step (text up to the step delimiter ``;``); a process reward model
(PRM) scores it; the step is kept when its reward reaches a threshold δ, otherwise the *target* model regenerates
that step from the same prefix. Equations are numbered as in this chapter (the paper's Section 3 states them):

    (1)  P_RSD(y | z) = ω(r(y | z)) · P_draft(y | z) + ν(z) · P_target(y | z),   ν(z) = Σ_y (1 − ω(r(y | z))) P_draft(y | z)
    (2)  ω(r) = 1{r ≥ δ}                                             (the binary step the official code implements)
    (3)  E_{P_RSD}[r] = Σ_{y ∈ S} P_draft(y) r(y) + P_draft(S^c) · E_{P_target}[r],    S = {y : ω(r(y)) = 1}

Among acceptance sets S of equal draft mass P_draft(S) (so equal target-call rate ν), (3) is largest for the
threshold set S_δ = {r ≥ δ}: that is the paper's optimality argument for (2), checked here by brute force.

Compute is counted in FLOPs with :mod:`icml25.core.flops`, as if every model kept a KV cache of the text it has
read (prefix caching): a model pays for each token the first time it reads it (prompt, steps written by the other
model) and for each token it writes; a discarded draft step is paid for and rolled back. The exact oracle PRM is a
program and costs nothing; the noisy oracle stands in for a PRM and is charged as one of the draft's size; a
learned PRM is a model and its tokens are counted.

The package, one idea per module: `scales` (settings per scale), `pair` (the chapter's draft/target pair and its
declared calibration), `claims`, `mixture` (Eqs. 1-3 on a one-step toy), `prms` (oracle, noisy and learned PRMs),
`decoding` (Eq. 2 over a batch, with its FLOP meter), `implicit` (the implicit PRM of Yuan et al. on
the draft, and its calibration), `routers` (the content-blind baselines of the threshold),
`speculative` (token-level speculative decoding), `baselines` (best-of-N, majority vote), `experiment` (notebook
02's run and the claims' measurements) and `figures`.
"""

from __future__ import annotations

from .baselines import (CHAIN_SCORES, Samples, at_flops, best_of_n, majority_vote, right_through_wrong_steps,
                        sample, step_rewards, within_problem_auc)
from .claims import (ACCURACY_MARGIN, BEATS_PARALLEL, EFFICIENCY, EFFICIENCY_DESIGN_SD, GRADED, HARD_BEATS_SOFT,
                     PRM_AUC_MIN, PRM_RANK_MIN, PRMS, RATE_MATCH, REFEREE_1800, REFEREE_2600, REFEREE_4900,
                     REFEREE_7900, ROUTER_DESIGN_SD, ROUTER_MIN_EFFECT, THRESHOLD_MATTERS)
from .decoding import (Decoded, Meter, Step, _ntok, budget_rule, check_pair, cut_step, decode, decode_single,
                       delta_for_budget, floor_share, keeping_budget, keeps, models_of, random_rule, soft_rule,
                       threshold_rule, tie_share)
from .experiment import (accuracy_keeping_budget, calibrated_deltas, calibration_problems, calibration_steps,
                         claim_measurements, draft_and_target, generated_flops, keep_spread, prm_auc,
                         reasoning_experiment, reasoning_results, spread_components, target_call_share, warm_up_seed)
from .figures import (PRM_MARKERS, bon_calibration_table, implicit_calibration_table, implicit_learns_text,
                      implicit_referee_text, keep_budget_table, keep_calibration_table, keep_spread_table, pair_calibration_table,
                      pair_runs_table, plot_acceptance, plot_accountings, plot_accuracy_vs_flops, prm_calibration_table,
                      ranking_table, router_calibration_table, router_comparison_table)
from .implicit import (READINGS, SCORE_SCALE, ImplicitStepPRM, boundary_mismatches, calibrate_implicit, kept_setting,
                       learns, outcome_rollouts, train_implicit)
from .mixture import acceptance_sets, brute_force_best, expected_reward, mixture, sample_rsd_categorical
from .prms import (PRM_BAD, PRM_GOOD, LearnedPRM, NoisyOraclePRM, OraclePRM, StepLabels, draft_rollouts,
                   learned_prm, own_value_head, prm_settings, prm_training_data, step_batches, step_labels, train_prm,
                   value_loss)
from .pair import CALIBRATION, DRAFT_ACCURACY, PAIR_CALIBRATION, TARGET_ACCURACY, exact_match, pair_calibration
from .routers import LengthRouter, PositionRouter, router_rule, step_positions
from .scales import (BON_CALIBRATION, BON_CHAIN, DELIMITER, DRAFT_MODEL, FROM_DRAFT, IMPLICIT_PRM_CALIBRATION,
                     IMPLICIT_REFEREE_2400, KEEP_BUDGETS, KEEP_CALIBRATION, KEEP_SPREAD, MAX_NEW_TOKENS, MAX_STEPS,
                     NOISY_EPSILON, PATIENCE, PRM_BATCH, ROUTER_CALIBRATION, TARGET_CALL_BUDGET, TARGET_MODEL, config)
from .speculative import speculative_cost, speculative_decode
