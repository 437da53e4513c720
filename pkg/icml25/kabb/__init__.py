"""KABB: Knowledge-Aware Bayesian Bandits for Dynamic Expert Coordination (Zhang et al., ICML 2025)

A multi-agent system answers each task with a small team of expert LLMs instead of all of them. KABB picks the
team by Thompson sampling whose Beta posteriors are reshaped by a *knowledge distance* between the task and
each expert:

    Dist(e, t) = ln(1 + d_t) · [w₁(1 − ρ_e,t) + w₂ · |dep_e| / K + w₃(1 − h_e)]                   (Eq. 1)

with ρ the share of the task's concepts the expert's knowledge-graph entry covers, |dep_e| its dependencies,
h_e = α_e/(α_e + β_e) its historical success and d_t the task's difficulty;

    κ_e = exp(−Dist(e, t)),     θ_e ~ Beta(κ_e α_e, β_e),     team = top-k of θ                     (Eq. 2)

and a dual adaptation: posteriors decay each round, (α, β) ← γ^Δt (α, β) (Eq. 3), and the experts called
are updated with the task's reward r ∈ [0, 1]: α += r, β += 1 − r (Eq. 4). Here time is counted in rounds
(the official code uses wall-clock seconds) and the decay has a floor so that a long-idle expert's Beta
parameters never underflow to zero.

The environment is simulated (experts with capabilities over concepts, tasks with required concepts and a
difficulty, Bernoulli team rewards, a drift in which the strongest experts swap their skills with the weakest), vectorised
over seeds. Three properties of the simulator would otherwise decide claims by themselves, so they are knobs declared
with the claims: `dilution` (a team's answer is pulled down by members who do not know the task's concepts, as an
aggregator of many agents is by its off-topic ones; with none, calling every expert is the best team by
construction), `graph_at_drift` ("updated": the knowledge graph lists the experts' concepts after the drift, so
whatever the drift costs is in the posteriors that decay is meant to refresh, not in a stale graph) and the decay γ
per round (the official γ = 0.99 is per wall-clock second; per round it forgets so fast that decay costs reward
before any drift), chosen on the calibration seeds by `calibrate_decay`. Each claim has controls in the same world:
a selector that reads only the knowledge graph (it should pass the cost criterion) and KABB given a misleading graph
(it should not); the same drift statistic in a world without a drift (it should not pass).

The chapter is split by idea: :mod:`.method` (the equations), :mod:`.environment` (the simulated world),
:mod:`.experiment` (config, runs, calibration, summaries) and :mod:`.claims`.
"""

from __future__ import annotations

from . import claims, environment, experiment, method
from .method import (
    CONCEPTS, WEIGHTS, TASK_PHRASES, PROFILE_PHRASES, knowledge_distance, concept_overlap, task_concepts,
    task_text, expert_profile, semantic_overlap, semantic_overlap_table, decay, update, top_k, kabb_select,
    team_synergy)
from .environment import (
    DILUTION, DRIFT_PAIRS, OFF_TOPIC, Environment, make_environment, on_topic, success_probability,
    team_table, oracle_table)
from .experiment import (
    POLICIES, GAMMAS, CALIBRATION_SEEDS, VERDICT_SEEDS, config, simulate, run_all, gamma_sweep,
    calibrate_decay, decay_gamma, CLAIM_POLICIES, claim_runs, warm_up, config_like, mean_ci, cumulative_regret, rolling, recovery_reward,
    phase_reward, drop_at_drift, adaptation_gain, drift_null, WORLD_POLICIES, world_preconditions,
    calibrate_world)
from .claims import (
    REGRET, COST, DRIFT, claim_measurements)
