"""The claims, declared before the runs and checked by notebook 02."""

from __future__ import annotations

from ..core.claims import Claim, Effect, at_least
from .scales import CHAPTER

MIN_EXPERT_GAIN = 0.02  # an expert "beats the base on its domain" by at least 2 accuracy points


EXPERTS_LEARN = at_least(
    "experts_learn", "expert_gain_own_domain", MIN_EXPERT_GAIN,
    f"every expert beats the unadapted base on its own domain's test problems (smallest exact-solution accuracy "
    f"gain >= {MIN_EXPERT_GAIN:g})")


PAPER_BASELINES = ("best expert", "uniform soup", "greedy soup", "task arithmetic", "TIES", "DARE", "LoraHub")
SEARCH_CONTROLS = ("hill climbing", "random search")  # dev-set searches at the swarm's budget, without its dynamics
BASELINES = PAPER_BASELINES + SEARCH_CONTROLS


def _key(baseline: str) -> str:
    return "swarm_minus_" + baseline.lower().replace(" ", "_")


BEATS_BASELINES = Claim(
    chapter=CHAPTER, id="beats_baselines",
    paper_statement="Model Swarms improves over 12 model-composition baselines (best single expert, uniform soup, "
                    "greedy soup, task arithmetic, TIES, DARE, LoraHub, ...) by up to 21.0% across tasks",
    paper_value="up to +21.0%; e.g. single-task averages above every baseline",
    criterion="Single-task target, held-out test set, paired by seed, every baseline at the swarm's budget of "
              "utility calls on the same dev set: for each of the paper's baselines built here (best expert chosen "
              "on dev, uniform soup, greedy soup, task arithmetic, TIES, DARE, LoraHub-style search) and the two "
              "equal-budget search controls (hill climbing from the best expert, random search over affine "
              "combinations), the 95% t interval of swarm − baseline (exact-solution accuracy) lies above 0; "
              "refuted if any lies wholly below +0.01 (one accuracy point)",
    effects=[Effect(_key(b), _key(b), min_effect=0.01) for b in BASELINES],
    preconditions=[EXPERTS_LEARN,
                   at_least("search_climbs", "swarm_dev_gain", 0.005,
                            "on every seed the search moved: its global best solves at least one more of the 200 "
                            "dev problems than the best initial particle (dev gain >= 0.005)")],
    examples=({**{_key(b): [0.03, 0.04, 0.05] for b in BASELINES},
               "expert_gain_own_domain": [0.1, 0.2], "swarm_dev_gain": [0.02, 0.03, 0.01]},
              {**{_key(b): [0.03, 0.04, 0.05] for b in BASELINES}, _key("hill climbing"): [-0.01, 0.0, -0.005],
               "expert_gain_own_domain": [0.1, 0.2], "swarm_dev_gain": [0.02, 0.03, 0.01]}),
    seed_knobs=("tune_seeds",),
)


WEAK_TO_STRONG = Claim(
    chapter=CHAPTER, id="weak_to_strong",
    paper_statement="Weak-to-strong transition: the final global best often did not start as the best expert, "
                    "and often started in the weaker half",
    paper_value="about 90% not the initial best, about 57% from the bottom half (research notes; not checked "
                "against the paper's text)",
    criterion="Over all runs (seeds × utilities), one indicator per run: the exact binomial 95% intervals of the "
              "share of runs whose final global best was not the initial best lie above 0.5, and of the share that "
              "started in the weaker half above 0.25; and each share beats the same searches' share on a noise "
              "utility, run at the same number of runs (one-sided permutation test, p < 0.05), since a search on "
              "noise also ends away from its initial best most of the time",
    effects=[Effect("not_initial_best", "not_initial_best", null=0.5, method="binomial"),
             Effect("from_weaker_half", "from_weaker_half", null=0.25, method="binomial")],
    preconditions=[EXPERTS_LEARN],
    examples=({"not_initial_best": [1] * 22 + [0] * 2, "from_weaker_half": [1] * 18 + [0] * 6,
               "expert_gain_own_domain": [0.1, 0.2]},
              {"not_initial_best": [0] * 20 + [1] * 4, "from_weaker_half": [0] * 24,
               "expert_gain_own_domain": [0.1, 0.2]}),
    needs_null=True,
    null_description="the same searches (same seeds, particles and budget) on a utility that is seeded Gaussian "
                     "noise, so that which particle ends best carries no information about the experts",
    seed_knobs=("tune_seeds",),
)


LOW_DATA = Claim(
    chapter=CHAPTER, id="low_data",
    paper_statement="Model Swarms works in low-data regimes with as few as 200 examples",
    paper_value="200 dev examples",
    criterion="At each dev-set size (the paper's 200 and a smaller one, `low_n_dev`), the per-seed test accuracy of "
              "the swarm's global best minus that of a LoRA fine-tuned on the same dev examples (the oracle at "
              "that size) has a 95% t interval above 0 (the swarm is the better use of so few examples); refuted "
              "if either lies wholly below 0",
    effects=[Effect("swarm_minus_oracle_at_200", "swarm_minus_oracle"),
             Effect("swarm_minus_oracle_at_low_n", "swarm_minus_oracle_low")],
    preconditions=[EXPERTS_LEARN],
    examples=({"swarm_minus_oracle": [0.02, 0.03, 0.025], "swarm_minus_oracle_low": [0.1, 0.08, 0.12],
               "expert_gain_own_domain": [0.1, 0.2]},
              {"swarm_minus_oracle": [-0.4, -0.45, -0.42], "swarm_minus_oracle_low": [0.1, 0.08, 0.12],
               "expert_gain_own_domain": [0.1, 0.2]}),
    seed_knobs=("tune_seeds",),
)
