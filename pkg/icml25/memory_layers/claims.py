"""The chapter's claims, declared before any run: each a per-seed paired difference of the ladder's runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..core.claims import Claim, Effect, Precondition, at_least, at_most

def paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-seed differences a - b of two lists in seed order (the runs of one seed share a fact world)."""
    if len(a) != len(b):
        raise ValueError(f"paired lists differ in length: {len(a)} vs {len(b)}")
    return [float(x) - float(y) for x, y in zip(a, b)]


_GRID = at_most("lr_grid_brackets", "lrs_at_grid_edge", 0,
                rule="no architecture's learning rate, chosen on the held-out world, sits at the edge of its grid "
                     "(count of those that do)")
HEADROOM_BAR = 0.5


def _dense_learns(full: str = "dense_acc") -> Precondition:
    return at_least("dense_learns", full, 0.05,
                    rule="the dense model recalls >= 5% of the facts on every seed (3x chance: 1/64)")


def _headroom(full: str = "dense_acc") -> Precondition:
    """The dense model recalls at most `HEADROOM_BAR` of the facts on every seed. With the plateau checks this
    separates "bounded by its parameters" from "has learned everything": a referee's 1024-fact world, learned whole
    by 800 steps, passed both plateau checks and refuted `factual` on a ceiling (every model at 1.000)."""
    return at_most("dense_has_headroom", full, HEADROOM_BAR,
                   rule="the world binds the dense model: it recalls at most half of the facts on every seed, so "
                        "extra capacity has something to add")
PLATEAU_GAIN = 0.05
#: the gain per doubling of the steps below which a recall curve counts as flat whatever came before: 1% of the
#: facts per doubling of training (a unit of meaning, not fitted to any seeds' spread)
FLAT_GAIN = 0.01
#: how much a plateau's later gain must have shrunk: at most this share of the gain of the doubling before
BEND_SHARE = 0.5
#: bits per parameter a language model stores at most (Allen-Zhu and Li, "Physics of Language Models 3.3", 2024:
#: about 2 bits per parameter, for facts seen about a thousand times)
BITS_PER_PARAM = 2.0


def _world_exceeds_dense(bits: str = "fact_bits", params: str = "dense_params") -> Precondition:
    """The issue's "a world with more facts than the dense model can store", computed, not inferred from the recall
    curve: the facts' information (facts x log2(objects) bits) per dense parameter is at least `BITS_PER_PARAM`, so
    the dense model cannot hold every fact, whatever its training. A referee showed that the curve checks alone pass
    about half the time on a curve gaining a steady 0.03-0.04 per doubling, and at chance."""
    return Precondition("world_exceeds_dense",
                        f"the facts hold at least {BITS_PER_PARAM:g} bits per dense parameter (facts x "
                        "log2(objects) / the dense model's parameters), about what a language model can store at "
                        "most: the dense model cannot hold them all", lambda m: m[bits] / m[params],
                        lambda v: v >= BITS_PER_PARAM)


def _plateau(full: str = "dense_acc", half: str = "dense_half_acc") -> Precondition:
    """The capacity check: the dense model's recall, trained `steps`, gains at most `PLATEAU_GAIN` on average
    over the same model trained half the steps, so at the budget it is bounded by what it can store, not by
    training (the comparison then measures capacity, not learning speed)."""
    return Precondition("dense_at_plateau",
                        f"the dense model's fact recall gains at most {PLATEAU_GAIN} from half the steps to the "
                        "full budget (mean paired difference): it has plateaued, so its parameters bound it",
                        lambda m: float(np.mean(paired(m[full], m[half]))), lambda v: v <= PLATEAU_GAIN)


def _bends(full: str = "dense_acc", half: str = "dense_half_acc", quarter: str = "dense_quarter_acc") -> Precondition:
    """The capacity check's other half: a small gain from half to full steps is a plateau only where the recall
    curve has stopped accelerating. Early in training the curve is flat too: a referee's 250-step budget on seeds
    5101-5108 passed `dense_at_plateau` (gain +0.037 from 125 steps) in a world the dense model memorises whole at
    1600 steps; there the gains grow with every doubling of the steps (+0.019 more than from 62 to 125), and this
    check fails. A curve gaining a steady amount per doubling has not bent either (a referee: equal gains pass an
    exact comparison half the time), so the later gain must be at most `BEND_SHARE` of the earlier one; on a real
    plateau both gains are noise around 0, so a later gain up to `FLAT_GAIN` passes whatever came before. A curve
    flat at chance passes this check, and `dense_learns` stops it. Statistic: the mean gain from half to full steps
    minus the larger of `BEND_SHARE` x the mean gain from a quarter to half and `FLAT_GAIN`."""
    def excess(m) -> float:
        later, earlier = np.mean(paired(m[full], m[half])), np.mean(paired(m[half], m[quarter]))
        return float(later - max(BEND_SHARE * earlier, FLAT_GAIN))

    return Precondition("dense_curve_bends",
                        f"the dense model's mean recall gain from half to full steps is at most {BEND_SHARE:g} of its "
                        f"gain from a quarter to half, or at most {FLAT_GAIN} (value: the excess, <= 0): its curve "
                        "has bent, so a small gain is a plateau, not the flat or steady start of learning", excess,
                        lambda v: v <= 0)


def _capacity(full: str = "dense_acc") -> list[Precondition]:
    """What every capacity claim asks of the dense model (`full`: its recall at the budget): it learns, it leaves
    headroom, the world holds more than it can store, and its recall curve has plateaued and bent."""
    return [_dense_learns(full), _headroom(full), _world_exceeds_dense(), _plateau(full), _bends(full)]


#: example measurements of a dense model that meets `_capacity` (16384 facts over 64 objects, the ci dense model)
_CAPACITY_OK = {"dense_half_acc": [0.39, 0.35, 0.43], "dense_quarter_acc": [0.3, 0.28, 0.33], "fact_bits": 98304.0,
                "dense_params": 39104}


def _diff(a: str, b: str) -> Callable[[Mapping], list[float]]:
    """The per-seed paired difference of measured lists `a` - `b`."""
    return lambda m: paired(m[a], m[b])


ISO_FLOP = Claim(
    chapter="memory_layers", id="iso_flop",
    paper_statement="At matched compute, memory-augmented models clearly outperform dense models, most of all on "
                    "factual tasks",
    paper_value="e.g. NQ 27.06 vs 25.24 (8B base + ~64B memory vs dense 8B, 1T tokens; unverified)",
    criterion="The per-seed paired difference of fact accuracy memory - dense FFN-4d (memory FLOPs per token at "
              "most the dense model's) is above 0 (95% t interval); refuted if it lies wholly below +0.05",
    effects=[Effect("memory_minus_dense", _diff("memory_acc", "dense_acc"), min_effect=0.05)],
    preconditions=[at_most("iso_flop", "flop_ratio", 1.0, rule="memory FLOPs per token / dense <= 1"),
                   *_capacity(), _GRID],
    examples=({**_CAPACITY_OK, "memory_acc": [0.9, 0.8, 0.85], "dense_acc": [0.4, 0.35, 0.45], "flop_ratio": 0.9,
               "lrs_at_grid_edge": 0},
              {**_CAPACITY_OK, "memory_acc": [0.4, 0.3, 0.42], "dense_acc": [0.4, 0.35, 0.45], "flop_ratio": 0.9,
               "lrs_at_grid_edge": 0},
              {**_CAPACITY_OK, "memory_acc": [0.41, 0.33, 0.46, 0.38], "dense_acc": [0.4, 0.35, 0.45, 0.38],
               "dense_half_acc": [0.39, 0.35, 0.43, 0.37], "dense_quarter_acc": [0.3, 0.28, 0.33, 0.3],
               "flop_ratio": 0.9, "lrs_at_grid_edge": 0}),
)

_WIDER_LEARNS = Precondition("loss_falls_with_width",
                             "the 2x dense model's fact loss is below the dense model's (mean paired difference, "
                             "nats, at equal steps)",
                             lambda m: float(np.mean(paired(m["dense2x_loss"], m["dense_loss"]))), lambda v: v < 0)
_B2_OK = {"dense_flop_ratio": 2.0, "dense2x_loss": [2.0, 2.1, 2.0], "dense_loss": [2.5, 2.4, 2.6],
          "dense_acc": [0.4, 0.35, 0.45], **_CAPACITY_OK, "lrs_at_grid_edge": 0}

BEATS_2X = Claim(
    chapter="memory_layers", id="beats_2x",
    paper_statement="Memory-augmented models outperform dense models with more than twice the compute budget",
    paper_value="8B+memory close to Llama2-7B trained on 2x the tokens with 10x the FLOPs (unverified summary)",
    criterion="The per-seed paired difference of fact accuracy memory - dense with 2x its FLOPs per token is "
              "above 0 (95% t interval)",
    effects=[Effect("memory_minus_dense2x", _diff("memory_acc", "dense2x_acc"))],
    preconditions=[at_least("twice_the_flops", "dense_flop_ratio", 2.0 - 0.05,
                            rule="dense 2x FLOPs per token / memory >= 1.95"),
                   _WIDER_LEARNS, *_capacity(), _GRID],
    examples=({**_B2_OK, "memory_acc": [0.9, 0.8, 0.85], "dense2x_acc": [0.5, 0.45, 0.5]},
              {**_B2_OK, "memory_acc": [0.4, 0.3, 0.42], "dense2x_acc": [0.5, 0.45, 0.5]},
              {**_B2_OK, "memory_acc": [0.52, 0.43, 0.5], "dense2x_acc": [0.5, 0.45, 0.5]}),
)

_MOE_OK = {"moe_param_ratio": 1.0, "moe_flop_ratio": 0.95, "lrs_at_grid_edge": 0, "dense_acc": [0.4, 0.35, 0.45],
           **_CAPACITY_OK}

BEATS_MOE = Claim(
    chapter="memory_layers", id="beats_moe",
    paper_statement="Memory-augmented models outperform mixture-of-experts models matched for compute and "
                    "parameters",
    paper_value="Memory+ ahead of MoE baselines of matched compute and parameters on factual QA (unverified)",
    criterion="The per-seed paired difference of fact accuracy memory - routed MoE (the same model with its "
              "second FFN replaced by a top-k MoE whose layer has the memory layer's parameters, values "
              "included, within the dense FFN's FLOPs) is above 0 (95% t interval); refuted if it lies wholly "
              "below +0.05",
    effects=[Effect("memory_minus_moe", _diff("memory_acc", "moe_acc"), min_effect=0.05)],
    preconditions=[Precondition("moe_matched_params", "MoE parameters / memory parameters (whole models) within "
                                "[0.95, 1.05]", lambda m: m["moe_param_ratio"], lambda v: 0.95 <= v <= 1.05),
                   at_most("moe_within_flops", "moe_flop_ratio", 1.0,
                           rule="MoE FLOPs per token / dense <= 1 (the memory model's budget)"),
                   at_least("moe_learns", "moe_acc", 0.05,
                            rule="the MoE model recalls >= 5% of the facts on every seed (3x chance: 1/64)"),
                   *_capacity(), _GRID],
    examples=({**_MOE_OK, "memory_acc": [0.9, 0.8, 0.85], "moe_acc": [0.5, 0.45, 0.5]},
              {**_MOE_OK, "memory_acc": [0.4, 0.3, 0.42], "moe_acc": [0.5, 0.45, 0.5]},
              {**_MOE_OK, "memory_acc": [0.52, 0.43, 0.5], "moe_acc": [0.5, 0.45, 0.5]}),
)


def _factual_gap(m) -> list[float]:
    return paired(paired(m["fact_memory"], m["fact_dense"]), paired(m["control_memory"], m["control_dense"]))


FACTUAL = Claim(
    chapter="memory_layers", id="factual",
    paper_statement="The gains of memory layers are largest on factual tasks",
    paper_value="largest gains on factual QA (NQ, TriviaQA) vs smaller on reasoning/coding",
    criterion="Per seed, the memory model's accuracy advantage over dense on the fact world minus its advantage "
              "on the control task (modular arithmetic, scored on held-out problems none of the training set "
              "holds) is above 0 (95% t interval)",
    effects=[Effect("fact_gain_minus_control_gain", _factual_gap)],
    preconditions=[at_least("control_learns", "control_dense", 0.2,
                            rule="the dense model gets >= 20% of the control's digits right on every seed "
                                 "(guessing: 10%)"),
                   *_capacity("fact_dense"), _GRID],
    examples=({"fact_memory": [0.9, 0.8, 0.85], "fact_dense": [0.4, 0.35, 0.45], "control_memory": [0.5, 0.5, 0.6],
               "control_dense": [0.5, 0.52, 0.58], "lrs_at_grid_edge": 0, **_CAPACITY_OK},
              {"fact_memory": [0.4, 0.35, 0.45], "fact_dense": [0.4, 0.35, 0.45],
               "control_memory": [0.6, 0.62, 0.7], "control_dense": [0.5, 0.52, 0.58], "lrs_at_grid_edge": 0,
               **_CAPACITY_OK},
              {"fact_memory": [0.6, 0.45, 0.55], "fact_dense": [0.4, 0.35, 0.45],
               "control_memory": [0.72, 0.6, 0.66], "control_dense": [0.5, 0.52, 0.58], "lrs_at_grid_edge": 0,
               **_CAPACITY_OK}),
)

_BN_LEARN = {"acc_bn": [0.9, 0.8, 0.9], "acc_no_bn": [0.3, 0.3, 0.4], "lrs_at_grid_edge": 0, "lr_bn": 3e-3,
             "lr_no_bn": 3e-3}

QUERY_BN = Claim(
    chapter="memory_layers", id="query_batchnorm",
    paper_statement="A BatchNorm on the query (the official code's mem_query_batchnorm, from Lample et al. 2019) "
                    "spreads the lookups over more of the memory",
    paper_value="Lample et al. (2019): keys used 25.8% without, 80.3% with query BatchNorm (unverified)",
    criterion="The per-seed paired difference of value usage (fraction of values the facts select at the scored "
              "position) memory with - without the query BatchNorm, same data, each at its own learning rate "
              "chosen on the held-out world, is above 0 (95% t interval); refuted if it lies wholly below +0.05",
    effects=[Effect("usage_with_minus_without_bn", _diff("usage_bn", "usage_no_bn"), min_effect=0.05)],
    preconditions=[Precondition("same_learning_rate",
                                "the two variants' learning rates, each chosen on the held-out world, are the same "
                                "(ratio with / without = 1): value usage falls as the rate rises (a referee's "
                                "probe), so at different rates the comparison measures the rate, not the BatchNorm",
                                lambda m: m["lr_bn"] / m["lr_no_bn"], lambda v: abs(v - 1.0) <= 1e-9),
                   at_least("memory_learns", "acc_bn", 0.2,
                            rule="the memory model with the BatchNorm recalls >= 20% of the facts on every seed"),
                   at_least("ablation_learns", "acc_no_bn", 0.05,
                            rule="the memory model without it recalls >= 5% (3x chance: 1/64) on every seed"),
                   _GRID],
    examples=({**_BN_LEARN, "usage_bn": [0.5, 0.6, 0.55], "usage_no_bn": [0.2, 0.18, 0.21]},
              {**_BN_LEARN, "usage_bn": [0.2, 0.19, 0.2], "usage_no_bn": [0.2, 0.18, 0.21]},
              {**_BN_LEARN, "usage_bn": [0.22, 0.16, 0.2, 0.21], "usage_no_bn": [0.2, 0.18, 0.21, 0.2]}),
)
