"""Beyond Zero Initialization (Li et al., ICML 2025): initialise both LoRA factors to non-zero values.

A LoRA layer computes (Eq. 1, numbered in this chapter)

    (1)  h = W x + (α/r) B A x,        A ∈ R^{r×n_in},  B ∈ R^{n_out×r},  W frozen.

Three initialisations are compared:

    Init[A]   A ~ U(±√(s/n_in)), B = 0                 (PEFT's default: fine-tuning starts at the pretrained model)
    Init[AB]  A, B ~ U(±√(s/n_in))                     (the paper: the noise (α/r) B₀A₀ stays in the function)
    Init[AB+] as Init[AB], then W ← W − (α/r) B₀A₀      (control: non-zero factors, start exactly at W)

where n_in is the adapted layer's input dimension, for B as for A (Kaiming uniform, as in the reference
implementation), and the scale s multiplies the variance, s/(3·n_in); s = 1 gives A PEFT's default bound 1/√n_in.

    (2)  ∂L/∂A = (α/r) Bᵀ (∂L/∂h) xᵀ,      ∂L/∂B = (α/r) (∂L/∂h) (A x)ᵀ

so under Init[A] the gradient of A is exactly zero at step 0 and the function first moves only through ΔB·A₀; the
B₀·ΔA path opens only as B grows. With B₀ ≠ 0 both paths are first order from the first step, which is the
paper's explanation of why non-zero initialisation is more robust to small learning rates.

LoRA itself is PEFT's: `lora_model` (from `icml25.core.adapters`) applies a `LoraConfig` with `get_peft_model`
(to the tiny Llama's `q_proj`/`v_proj`, and to both `nn.Linear` layers of the MLP toy, so one LoRA implementation
serves both experiments), and `init_lora` re-initialises every PEFT `LoraLayer`'s `lora_A`/`lora_B` in place.

Saving: for Init[A] and Init[AB] the adapter is all that changed, so `save_pretrained` /
`PeftModel.from_pretrained` round-trip it. Init[AB+] also changed the frozen weight, which an adapter file does not
hold. The trained model equals W + (α/r)(BA − B₀A₀), a rank-2r update of the *unmodified* pretrained weight: save
the adapter once right after `init_lora` and pass that directory as `save_pretrained`'s
`path_initial_model_for_weight_conversion` (PEFT's conversion for PiSSA-like inits, which also move the base weight);
PEFT then writes [A; A₀] and [B, −B₀] as a rank-2r adapter that loads onto the untouched pretrained model.
"""

from __future__ import annotations

import copy
import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from torch import nn

from .core import adapters, arithmetic, zoo
from .core.adapters import lora_model  # noqa: F401  (the chapter's LoRA; tests and notebooks call it from here)
from .core.claims import Claim, Equivalence, Effect, at_least, at_most
from .core.config import COUNT, NONNEGATIVE, POSITIVE, SEED, make_config
from .core.generation import encode_completions
from .core.seeding import seeded, torch_generator
from .core.train import lm_loss

MODES = ("A", "AB", "AB+")

def half_decades(lo: int, hi: int) -> list[float]:
    """The learning-rate grid 10^(k/2) for k = lo..hi-1: spaced by √10."""
    return [10 ** (k / 2) for k in range(lo, hi)]


# Seeds 0-11 were seen before this design: the regime (toy, grid, steps) was chosen on 0-3 and the referee's probes
# of the previous design ran 0-11, whose per-seed optima led to judging "same at best" at each seed's own best.
# The verdict seeds are fresh (from 100).
CALIBRATION_SEEDS = list(range(12))

SEEDS_OF_NO_CLAIM = ("width_seeds", "lm_seeds")
"""Seed lists of the config that decide no claim (the width sweep's and the language model's seeds: figures, no
claim). Every other `*_seeds` list is named by a claim's `seed_knobs`, so the ledger records it."""

config = make_config({
    "smoke": {"seeds": [100, 101], "calibration_seeds": CALIBRATION_SEEDS, "lrs": half_decades(-6, 0),
              "init_scales": [1.0, 100.0], "scale_lr": 1e-3,
              "width": 64, "d_in": 16, "d_out": 8, "rank": 4, "alpha": 4, "pretrain_steps": 30,
              "finetune_steps": 20, "batch_size": 128, "shift": 1.0,
              "lm_lrs": [3e-3], "lm_steps": 2, "lm_batch_size": 8, "lm_rank": 4, "lm_eval": 16,
              "curve_lr": 1e-3, "widths": [32], "width_lrs": half_decades(-6, -2), "width_seeds": [100],
              "lm_seeds": [100], "figure_seeds": 2, "model": "arith-draft"},
    "ci": {"seeds": list(range(100, 112)), "calibration_seeds": CALIBRATION_SEEDS, "lrs": half_decades(-6, 0),
           "init_scales": [0.01, 1.0, 100.0, 10000.0],
           "scale_lr": 1e-3, "width": 256, "d_in": 16, "d_out": 8, "rank": 4, "alpha": 4, "pretrain_steps": 400,
           "finetune_steps": 150, "batch_size": 128, "shift": 1.0,
           "lm_lrs": [3e-4, 3e-3, 3e-2], "lm_steps": 20, "lm_batch_size": 32, "lm_rank": 4,
           "lm_eval": 256, "curve_lr": 1e-3, "widths": [64, 1024], "width_lrs": half_decades(-6, 0),
           "width_seeds": [100, 101], "lm_seeds": [100, 101], "figure_seeds": 4, "model": "arith-draft"},
    "full": {"seeds": list(range(100, 116)), "calibration_seeds": CALIBRATION_SEEDS,
             "lrs": half_decades(-10, 0),
             "init_scales": [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0], "scale_lr": 1e-3, "width": 1024,
             "d_in": 32, "d_out": 8, "rank": 4, "alpha": 4, "pretrain_steps": 2000, "finetune_steps": 1000,
             "batch_size": 256, "shift": 1.0, "lm_lrs": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2], "lm_steps": 300,
             "lm_batch_size": 64, "lm_rank": 8, "lm_eval": 1000, "curve_lr": 1e-3, "widths": [128, 512, 4096],
             "width_lrs": half_decades(-8, 0), "width_seeds": [100, 101, 102],
             "lm_seeds": [100, 101, 102], "figure_seeds": 5, "model": "meta-llama/Llama-3.2-1B"},
},
    seeds=SEED, calibration_seeds=SEED, lrs=POSITIVE, init_scales=POSITIVE, scale_lr=POSITIVE, width=COUNT,
    d_in=COUNT, d_out=COUNT,
    rank=COUNT, alpha=POSITIVE, pretrain_steps=COUNT, finetune_steps=COUNT, batch_size=COUNT, shift=NONNEGATIVE,
    lm_lrs=POSITIVE, lm_steps=COUNT, lm_batch_size=COUNT, lm_rank=COUNT, lm_eval=COUNT, curve_lr=POSITIVE,
    widths=COUNT, width_lrs=POSITIVE, width_seeds=SEED, lm_seeds=SEED, figure_seeds=COUNT)

# --------------------------------------------------------------------------------------------------- claims
# Declared before the experiments of this version ran. Every effect is a per-seed paired difference of log final
# test loss (log-loss differences are relative: 0.1 is about 10% of loss). The learning rates judged are read off
# the grid relative to the measured optimum lr* of the standard Init[A] (the grid is spaced by √10, half a decade).

MIN_GAIN = 0.05  # the smallest small-rate advantage the paper's "more robust" implies: 5% lower loss
MARGIN = 0.1  # "about the same": within ±0.1 in log loss (about ±10%), declared before any run
MOVES = 0.8  # "training moves": the final loss is at most 80% of where fine-tuning started

BRACKETED = at_least("optimum_bracketed", "optimum_inside_grid", 1,
                     "every init's best learning rate lies strictly inside the grid (1 = yes)")
MOVES_AT_JUDGED = at_most("training_moves", "loss_ratio_at_judged", MOVES,
                          f"at every judged rate every init ends at <= {MOVES:g} of the pretrained loss (worst "
                          "seed, rate and init)")

SMALL_LR = Claim(
    chapter="lora_init", id="small_lr",
    paper_statement="Non-zero initialisation (Init[AB]) makes LoRA more robust to suboptimal, especially small, "
                    "learning rates than the standard Init[A]",
    paper_value="largest gains at small learning rates (T5-base/GLUE, Llama-3-8B)",
    criterion="MLP toy, at lr*/10 and lr*/10^1.5 below Init[A]'s measured optimum lr*: the 95% t intervals of the "
              "per-seed log(loss Init[A]) − log(loss Init[AB]) lie above 0; refuted if either lies wholly below "
              f"{MIN_GAIN:g}",
    effects=[Effect("A_minus_AB_at_lr*/10", "a_minus_ab_lr/10", min_effect=MIN_GAIN),
             Effect("A_minus_AB_at_lr*/30", "a_minus_ab_lr/30", min_effect=MIN_GAIN)],
    preconditions=[BRACKETED, MOVES_AT_JUDGED],
    examples=({"a_minus_ab_lr/10": [0.3, 0.25, 0.35], "a_minus_ab_lr/30": [0.4, 0.5, 0.45],
               "optimum_inside_grid": 1, "loss_ratio_at_judged": 0.5},
              {"a_minus_ab_lr/10": [0.01, -0.01, 0.0], "a_minus_ab_lr/30": [0.4, 0.5, 0.45],
               "optimum_inside_grid": 1, "loss_ratio_at_judged": 0.5}),
)

SAME_AT_BEST = Claim(
    chapter="lora_init", id="same_at_best",
    paper_statement="At the optimal learning rate the initialisations perform about the same",
    paper_value="differences vanish near the best learning rate",
    criterion="MLP toy, each seed and init at its own best learning rate (the lowest final loss over the grid and "
              "the quarter-decade rates on either side of that seed's best grid rate): per-seed "
              "log(loss Init[AB]) − log(loss Init[A]) and log(loss Init[AB+]) − log(loss Init[A]) are each "
              f"equivalent to 0 within ±{MARGIN:g} (TOST, α = 0.05)",
    effects=[Equivalence("AB_minus_A_at_best", "ab_minus_a_seed_best", MARGIN),
             Equivalence("ABplus_minus_A_at_best", "abplus_minus_a_seed_best", MARGIN)],
    preconditions=[at_least("seed_optima_inside_grid", "seed_optima_inside_grid", 1,
                            "every seed's best grid rate of every init lies strictly inside the grid (1 = yes)")],
    examples=({"ab_minus_a_seed_best": [0.01, -0.02, 0.0, 0.01], "abplus_minus_a_seed_best": [0.0, 0.01, -0.01, 0.0],
               "seed_optima_inside_grid": 1},
              {"ab_minus_a_seed_best": [0.3, 0.35, 0.32], "abplus_minus_a_seed_best": [0.0, 0.01, -0.01, 0.0],
               "seed_optima_inside_grid": 1}),
)

NOISE_HARMLESS = Claim(
    chapter="lora_init", id="noise_harmless",
    paper_statement="The random noise (α/r)B₀A₀ that Init[AB] adds to the pretrained weights generally does not hurt",
    paper_value="Init[AB] ≈ Init[AB+] at standard scales",
    criterion="MLP toy at init scale s = 1: the per-seed mean, over the rates from lr*/10^1.5 to lr* (where "
              f"training moves), of log(loss Init[AB]) − log(loss Init[AB+]) is equivalent to 0 within ±{MARGIN:g} "
              "(TOST, α = 0.05)",
    effects=[Equivalence("AB_minus_ABplus", "ab_minus_abplus", MARGIN)],
    preconditions=[at_most("training_moves", "loss_ratio_in_window", MOVES,
                           f"at every rate of the window every init ends at <= {MOVES:g} of the pretrained loss")],
    examples=({"ab_minus_abplus": [0.01, 0.02, 0.0, 0.01], "loss_ratio_in_window": 0.5},
              {"ab_minus_abplus": [0.3, 0.25, 0.35], "loss_ratio_in_window": 0.5}),
)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (ddof 1) over seeds."""
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1))


def format_mean_sd(values: Sequence[float]) -> str:
    return "{:.3g} ± {:.2g}".format(*mean_sd(values))


# ------------------------------------------------------------------------------------ LoRA through PEFT

ADAPTER = "default"  # the name PEFT gives the adapter `lora_model` (core.adapters) creates


def lora_layers(model: PeftModel) -> dict[str, LoraLayer]:
    """The PEFT LoRA layers of `model`, by their names in the base model (`fc1`, `model.layers.0.self_attn.q_proj`)."""
    return {n: m for n, m in model.get_base_model().named_modules() if isinstance(m, LoraLayer)}


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown LoRA initialisation {mode!r}; valid modes: {', '.join(MODES)}")
    return mode


def init_bound(n_in: int, scale: float) -> float:
    """The bound √(s/n_in) of the uniform distribution both factors are drawn from (variance s/(3·n_in)); n_in is
    the adapted layer's input dimension for A and for B alike, and s scales the variance. s = 1 is PEFT's (and
    LoRA's) Kaiming-uniform default for A, 1/√n_in."""
    if not scale > 0:
        raise ValueError(f"the init scale s must be positive, got {scale}")
    return math.sqrt(scale / n_in)


@torch.no_grad()
def init_lora_layer(layer: LoraLayer, mode: str, scale: float, generator: torch.Generator) -> None:
    """Re-initialise a PEFT layer's `lora_A`/`lora_B` in place as Init[A], Init[AB] or Init[AB+] (see the module
    docstring); for Init[AB+] also subtract (α/r) B₀A₀ (PEFT's `get_delta_weight`) from the frozen base weight."""
    check_mode(mode)
    a, b = layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight
    bound = init_bound(a.shape[1], scale)
    a.copy_((torch.rand(a.shape, generator=generator) * 2 - 1) * bound)
    if mode == "A":
        b.zero_()
        return
    b.copy_((torch.rand(b.shape, generator=generator) * 2 - 1) * bound)
    if mode == "AB+":
        layer.get_base_layer().weight.sub_(layer.get_delta_weight(ADAPTER))


def init_lora(model: PeftModel, mode: str, scale: float, seed: int) -> None:
    """`init_lora_layer` on every LoRA layer of `model`, each from its own seeded stream, so every mode draws the
    same A₀ (and Init[AB] and Init[AB+] the same B₀) for a given seed."""
    check_mode(mode)
    for name, layer in lora_layers(model).items():
        init_lora_layer(layer, mode, scale, torch_generator(seed, "lora-init", name))


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def finetune(model: nn.Module, loss_fn, batches, steps: int, lr: float) -> list[float]:
    """Adam on the LoRA factors, learning rate decayed linearly to 0 (the paper's recipe); the per-step losses."""
    params = trainable(model)
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1 - t / steps)
    losses = []
    for _ in range(steps):
        loss = loss_fn(model, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses


# ------------------------------------------------------------------------------------------ the MLP toy


class MLP(nn.Module):
    """y = W₂ tanh(W₁ x + b₁) + b₂."""

    def __init__(self, d_in: int, width: int, d_out: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, width), nn.Linear(width, d_out)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


@dataclass
class Toy:
    pretrained: MLP  # trained on the upstream teacher
    teacher: MLP  # the downstream teacher: hidden weights shifted by rank-4, readout shifted
    test_x: torch.Tensor
    seed: int
    streams: dict = field(default_factory=dict, repr=False)  # the fine-tuning batches, see `toy_batches`


def mlp_toy(cfg, seed: int) -> Toy:
    """Pretrain an MLP on a random teacher, then build a downstream teacher whose hidden weights move by a rank-4
    matrix and whose readout moves too (`cfg.shift` sets the size), so a rank-4 LoRA on both layers can fit it."""
    with seeded(seed, "toy-teacher"):
        teacher = MLP(cfg.d_in, cfg.width, cfg.d_out)
        student = MLP(cfg.d_in, cfg.width, cfg.d_out)
    gen = torch_generator(seed, "toy-data")
    opt = torch.optim.Adam(student.parameters(), lr=3e-3)
    for _ in range(cfg.pretrain_steps):
        x = torch.randn(cfg.batch_size, cfg.d_in, generator=gen)
        loss = ((student(x) - teacher(x).detach()) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    down = copy.deepcopy(teacher)
    with torch.no_grad():
        u = torch.randn(cfg.width, 4, generator=gen) / math.sqrt(cfg.width)
        v = torch.randn(4, cfg.d_in, generator=gen) / math.sqrt(cfg.d_in)
        down.fc1.weight.add_(cfg.shift * math.sqrt(cfg.width / 4) * u @ v)
        down.fc2.weight.add_(cfg.shift * torch.randn(cfg.d_out, cfg.width, generator=gen) / math.sqrt(cfg.width))
    for p in down.parameters():
        p.requires_grad_(False)
    return Toy(student, down, torch.randn(2048, cfg.d_in, generator=gen), seed)


MLP_TARGETS = ("fc1", "fc2")  # LoRA on both layers of the toy


def toy_lora(toy: Toy, cfg, mode: str, scale: float, seed: int) -> PeftModel:
    """A copy of the pretrained MLP with PEFT LoRA (rank `cfg.rank`, α `cfg.alpha`) on both layers, set to `mode`."""
    model = lora_model(copy.deepcopy(toy.pretrained), MLP_TARGETS, cfg.rank, cfg.alpha)
    init_lora(model, mode, scale, seed)
    return model


def toy_loss(toy: Toy, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return ((model(x) - toy.teacher(x)) ** 2).mean()


def toy_batches(toy: Toy, cfg, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The `cfg.finetune_steps` fine-tuning batches of `toy` for `seed`, x ~ N(0, I) with the downstream teacher's
    targets: one seeded stream, drawn once and shared by every init, rate and scale fine-tuned on it."""
    key = (seed, cfg.batch_size, cfg.d_in, cfg.finetune_steps)
    if key not in toy.streams:
        gen = torch_generator(seed, "toy-batches", toy.seed)
        xs = [torch.randn(cfg.batch_size, cfg.d_in, generator=gen) for _ in range(cfg.finetune_steps)]
        with torch.no_grad():
            toy.streams[key] = [(x, toy.teacher(x)) for x in xs]
    return toy.streams[key]


def finetune_toy(toy: Toy, cfg, mode: str, lr: float, scale: float = 1.0, seed: int = 0) -> dict:
    """LoRA (rank `cfg.rank`, α `cfg.alpha`) on both layers of the pretrained MLP, initialised by `mode`, trained on
    the downstream teacher; returns the training curve and the final test MSE."""
    model = toy_lora(toy, cfg, mode, scale, seed)
    losses = finetune(model, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), iter(toy_batches(toy, cfg, seed)),
                      cfg.finetune_steps, lr)
    with torch.no_grad():
        return {"losses": losses, "test_loss": float(toy_loss(toy, model, toy.test_x))}


@torch.no_grad()
def pretrained_loss(toy: Toy) -> float:
    """Test MSE of the pretrained MLP on the downstream teacher: where every fine-tuning run starts (but Init[AB])."""
    return float(toy_loss(toy, toy.pretrained, toy.test_x))


def lr_sweep(cfg, runner, lrs: Sequence[float], seeds: Sequence[int] | None = None) -> dict[str, np.ndarray]:
    """Final loss [seeds, lrs] per init mode, from `runner(mode, lr, seed)` (paired: the same seed, the same data);
    `seeds` defaults to `cfg.seeds`."""
    return {mode: np.array([[runner(mode, lr, s) for lr in lrs] for s in (cfg.seeds if seeds is None else seeds)])
            for mode in MODES}


HALF_DECADE = math.sqrt(10)  # the spacing of the learning-rate grid
JUDGED = {"lr/10": 2, "lr/30": 3}  # the small rates judged: lr*/10 and lr*/10^1.5, in grid steps below lr*


def best_index(losses: np.ndarray) -> int:
    """The grid index of the lowest seed-mean final loss (losses [seeds, lrs])."""
    return int(np.argmin(losses.mean(0)))


def lr_measurements(grid: dict[str, np.ndarray], lrs: Sequence[float], start: np.ndarray) -> dict:
    """What `small_lr` and `noise_harmless` are decided on, from the final losses `grid` ([seeds, lrs] per init, paired by
    seed) on a grid spaced by √10 and each seed's pretrained loss `start` ([seeds]): lr* is Init[A]'s best rate;
    the judged small rates lie two and three grid steps (one and one and a half decades) below it."""
    lrs = np.asarray(lrs, dtype=float)
    if not np.allclose(lrs[1:] / lrs[:-1], HALF_DECADE, rtol=1e-3):
        raise ValueError(f"the learning-rate grid must be spaced by √10 (half a decade); got {lrs.tolist()}")
    star = best_index(grid["A"])
    if star < max(JUDGED.values()):
        raise ValueError(f"Init[A]'s best rate {lrs[star]:g} is fewer than {max(JUDGED.values())} grid steps above "
                         f"the grid's smallest rate {lrs[0]:g}: extend the grid downwards")
    log = {m: np.log(v) for m, v in grid.items()}
    best = {m: best_index(v) for m, v in grid.items()}
    ratio = {m: v / np.asarray(start)[:, None] for m, v in grid.items()}  # [seeds, lrs]
    judged = [star - k for k in JUDGED.values()]
    window = list(range(star - max(JUDGED.values()), star + 1))
    out = {f"a_minus_ab_{name}": log["A"][:, star - k] - log["AB"][:, star - k] for name, k in JUDGED.items()}
    out |= {
        "lr_star": lrs[star], "best_lr": {m: lrs[i] for m, i in best.items()},
        "optimum_inside_grid": int(all(0 < i < len(lrs) - 1 for i in best.values())),
        "loss_ratio_at_judged": max(float(r[:, judged].max()) for r in ratio.values()),
        "loss_ratio_in_window": max(float(r[:, window].max()) for r in ratio.values()),
        "ab_minus_abplus": (log["AB"][:, window] - log["AB+"][:, window]).mean(1),
    }
    return out


QUARTER_DECADE = 10 ** 0.25  # the finer steps tried on either side of each seed's best grid rate


def seed_best(grid: dict[str, np.ndarray], lrs: Sequence[float], runner, seeds: Sequence[int]) -> dict:
    """Each seed's own best final loss per init: the lowest over the grid (`grid`: [seeds, lrs] per init) and the
    two rates a quarter decade either side of that seed's best grid rate, from `runner(mode, lr, seed)`. Returns
    the per-seed log-loss differences `same_at_best` is decided on and whether every seed's best grid rate lies
    strictly inside the grid (else the finer rates could leave it)."""
    best, inside = {}, True
    for mode, losses in grid.items():
        row = []
        for i, s in enumerate(seeds):
            j = int(np.argmin(losses[i]))
            inside &= 0 < j < len(lrs) - 1
            row.append(min([losses[i, j]] + [runner(mode, lrs[j] * f, s) for f in (1 / QUARTER_DECADE,
                                                                                     QUARTER_DECADE)]))
        best[mode] = np.log(row)
    return {"ab_minus_a_seed_best": best["AB"] - best["A"], "abplus_minus_a_seed_best": best["AB+"] - best["A"],
            "seed_optima_inside_grid": int(inside), "seed_best_loss": {m: np.exp(v) for m, v in best.items()}}


def width_sweep(cfg, widths: Sequence[int], lrs: Sequence[float]) -> dict[int, dict]:
    """The paper's infinite-width lens, judged relative to each width's own optimum: the toy rebuilt at each hidden
    width n (everything else as `cfg`, s = 1, seeds `cfg.width_seeds`), Init[A] swept over `lrs` (spaced by √10),
    its best rate η*(n), and the per-seed gain log(loss Init[A]) − log(loss Init[AB]) at the judged rates η*(n)/10
    and η*(n)/10^1.5, under the keys `lr_measurements` uses (NaN where the grid does not reach that low)."""
    from .core.config import Config

    lrs = list(lrs)
    out = {}
    for n in widths:
        c = Config(cfg.scale, {**cfg, "width": n})
        toys = [mlp_toy(c, s) for s in cfg.width_seeds]
        a = np.array([[finetune_toy(t, c, "A", lr, 1.0, s)["test_loss"] for lr in lrs]
                      for t, s in zip(toys, cfg.width_seeds)])
        star = best_index(a)
        out[n] = {"lr_star": lrs[star], "optimum_inside_grid": int(0 < star < len(lrs) - 1)}
        for name, k in JUDGED.items():
            i = star - k
            ab = [finetune_toy(t, c, "AB", lrs[i], 1.0, s)["test_loss"] if i >= 0 else math.nan
                  for t, s in zip(toys, cfg.width_seeds)]
            out[n][f"a_minus_ab_{name}"] = np.log(a[:, i]) - np.log(ab) if i >= 0 else np.full(len(toys), np.nan)
    return out


def scale_sweep(cfg, toys: dict, grid: dict[str, np.ndarray], lrs: Sequence[float]) -> dict[str, np.ndarray]:
    """Final loss [seeds, init_scales] of Init[AB] and Init[AB+] at rate `cfg.scale_lr`, and of Init[A] (s = 1)
    [seeds] as the reference, on the first `cfg.figure_seeds` of `cfg.seeds` (toys {seed: Toy}). A run the
    learning-rate sweep `grid` (s = 1, final loss [seeds, lrs] per init) already holds is read from it rather than
    trained again: the runs are deterministic given (toy, init, rate, scale, seed)."""
    on_grid = [i for i, lr in enumerate(lrs) if math.isclose(lr, cfg.scale_lr, rel_tol=1e-9)]

    def loss(mode, s_index, seed, c):
        if on_grid and c == 1.0:
            return float(grid[mode][s_index, on_grid[0]])
        return finetune_toy(toys[seed], cfg, mode, cfg.scale_lr, c, seed)["test_loss"]

    seeds = list(enumerate(cfg.seeds))[: cfg.figure_seeds]
    out = {m: np.array([[loss(m, i, s, c) for c in cfg.init_scales] for i, s in seeds]) for m in ("AB", "AB+")}
    out["A"] = np.array([loss("A", i, s, 1.0) for i, s in seeds])
    return out


def toy_sweeps(cfg) -> dict:
    """Every MLP-toy run notebook 02 reads: the learning-rate grid (`lr_sweep`), each seed's pretrained loss, the
    claims' measurements (`lr_measurements` and `seed_best`), the init-scale sweep and the width sweep."""
    toys = {s: mlp_toy(cfg, s) for s in cfg.seeds}

    def run(mode, lr, s):
        return finetune_toy(toys[s], cfg, mode, lr, 1.0, s)["test_loss"]

    grid = lr_sweep(cfg, run, cfg.lrs)
    start = np.array([pretrained_loss(toys[s]) for s in cfg.seeds])
    measured = lr_measurements(grid, cfg.lrs, start) | seed_best(grid, cfg.lrs, run, cfg.seeds)
    return {"grid": grid, "start": start, "measured": measured, "scale_grid": scale_sweep(cfg, toys, grid, cfg.lrs),
            "by_width": width_sweep(cfg, cfg.widths, cfg.width_lrs)}


#: config knobs the toy sweeps do not read (the tiny Llama's, and notebook 01's curve)
NOT_IN_TOY_SWEEPS = ("calibration_seeds", "lm_lrs", "lm_steps", "lm_batch_size", "lm_rank", "lm_eval", "lm_seeds",
                     "model", "curve_lr")


def _arrays(x):
    """The sweeps as `toy_sweeps` returns them, from the cache's JSON: every list an array again."""
    if isinstance(x, dict):
        return {k: _arrays(v) for k, v in x.items()}
    return np.asarray(x, dtype=float) if isinstance(x, list) else x


def toy_sweep_results(cfg) -> tuple[dict, bool]:
    """`toy_sweeps(cfg)`, cached like a zoo model (`icml25.core.zoo.results`: addressed by the knobs it reads and
    this module's code), so the book's builder runs it in its warm-up and the notebook reads it back; the widths'
    keys come back as integers. Returns the sweeps and whether they were computed now."""
    settings = {k: v for k, v in dict(cfg).items() if k not in NOT_IN_TOY_SWEEPS}
    value, now = zoo.results("lora-toy-sweeps", settings, lambda: toy_sweeps(cfg),
                             sources=(sys.modules[__name__], adapters))
    value = _arrays(value)
    value["by_width"] = {int(n): v for n, v in value["by_width"].items()}
    return value, now


def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry)."""
    toy_sweep_results(cfg)


def step0_gradients(toy: Toy, cfg, seed: int = 0) -> dict[str, dict[str, float]]:
    """‖∂L/∂A‖ and ‖∂L/∂B‖ (Frobenius, summed over both layers) at step 0 for every init (Eq. 2)."""
    out = {}
    x = toy.test_x[: cfg.batch_size]
    for mode in MODES:
        model = toy_lora(toy, cfg, mode, 1.0, seed)
        toy_loss(toy, model, x).backward()
        layers = lora_layers(model).values()
        out[mode] = {"A": float(sum(l.lora_A[ADAPTER].weight.grad.norm() ** 2 for l in layers) ** 0.5),
                     "B": float(sum(l.lora_B[ADAPTER].weight.grad.norm() ** 2 for l in layers) ** 0.5)}
    return out


# -------------------------------------------------------------------------- the tiny Llama on a new task

MODULUS = 7  # the downstream task: the same arithmetic, evaluated modulo 7 on digits 0-6


@functools.cache
def modular_problems(n: int, seed: int, modulus: int = MODULUS, stream: str = "lora") -> tuple[tuple[str, str], ...]:
    """(prompt, solution) pairs of the core's arithmetic format, evaluated modulo `modulus` on digits < modulus
    (drawn once per arguments: every init and rate fine-tunes on the same set)."""
    problems = arithmetic.sample_problems(n, seed, stream=stream)
    out = []
    for p in problems:
        digits = [d % modulus for d in p.digits]
        acc, steps = digits[0], []
        for op, d in zip(p.ops, digits[1:]):
            new = {"+": acc + d, "-": acc - d, "*": acc * d}[op] % modulus
            steps.append(f"{acc}{op}{d}={new}{arithmetic.STEP_DELIMITER}")
            acc = new
        prompt = str(digits[0]) + "".join(op + str(d) for op, d in zip(p.ops, digits[1:])) + arithmetic.PROMPT_END
        out.append((prompt, "".join(steps) + f"{arithmetic.ANSWER_MARK}{acc}"))
    return tuple(out)


LLAMA_TARGETS = ("q_proj", "v_proj")  # PEFT's default LoRA targets for Llama


def lora_targets(model) -> tuple[str, ...]:
    """PEFT's default LoRA targets for the model's family (Llama, Qwen2, Gemma: q_proj and v_proj; GPT-2: its fused
    c_attn), from PEFT's own table."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    kind = model.config.model_type
    if kind not in DEFAULTS:
        raise ValueError(f"PEFT has no default LoRA targets for model type {kind!r}")
    return tuple(DEFAULTS[kind])


def pretrained_lm(cfg) -> zoo.ZooModel:
    """The model LoRA adapts, from the `model` knob: at smoke and ci the zoo's arithmetic draft model (trained on
    mod-10 arithmetic); any causal LM's folder or Hub id through :func:`icml25.core.models.get`."""
    from .core import arithmetic, models

    return models.get(cfg.model, cfg.scale, 0, alphabet=arithmetic.ALPHABET)


def finetune_lm(cfg, base: zoo.ZooModel, mode: str, lr: float, seed: int) -> dict:
    """LoRA on PEFT's default targets (q_proj/v_proj for a Llama) of a copy of `base` (from `pretrained_lm`),
    fine-tuned to mod-7 arithmetic; returns the loss curve and the held-out loss (nats per solution token)."""
    tok = base.tokenizer
    model = lora_model(copy.deepcopy(base.model), lora_targets(base.model), cfg.lm_rank, cfg.lm_rank,
                       task_type="CAUSAL_LM")
    init_lora(model, mode, 1.0, seed)
    data = modular_problems(4096, seed, stream="lora-train")
    held_out = modular_problems(cfg.lm_eval, 0, stream="lora-test")
    gen = torch_generator(seed, "lora-llama-batches")

    def batches():
        while True:
            idx = torch.randint(len(data), (cfg.lm_batch_size,), generator=gen).tolist()
            yield encode_completions(tok, [data[i][0] for i in idx], [data[i][1] for i in idx], add_eos=True)

    model.train()
    losses = finetune(model, lm_loss, batches(), cfg.lm_steps, lr)
    model.eval()
    with torch.no_grad():
        test = float(lm_loss(model, encode_completions(tok, *zip(*held_out), add_eos=True)))
    return {"losses": losses, "test_loss": test}


def plot_lr_sweep(grid: dict[str, np.ndarray], lrs: Sequence[float], title: str, ylabel: str):
    """Final loss against learning rate per init: the seed mean, and a min-max band over seeds."""
    from .core import plot

    fig, ax = plot.subplots()
    for mode, v in grid.items():
        ax.plot(lrs, v.mean(0), marker="o", label=f"Init[{mode}]")
        ax.fill_between(lrs, v.min(0), v.max(0), alpha=0.2)
    ax.set(title=title, xlabel="learning rate (Adam, peak)", ylabel=ylabel, xscale="log", yscale="log")
    ax.legend()
    return fig, ax


def plot_width_sweep(by_width: dict[int, dict]):
    """The gain of Init[AB] over Init[A] at each width's judged rates: every seed as a point, the mean ± sd as a bar."""
    from .core import plot

    fig, ax = plot.subplots()
    widths = sorted(by_width)
    for j, (name, k) in enumerate(JUDGED.items()):
        key, color = f"a_minus_ab_{name}", plot.PALETTE[1 + j]
        label = f"at η*(n)/10^{k / 2:g}" if k % 2 else f"at η*(n)/{10 ** (k // 2)}"
        shift = 1.06 ** (j - 0.5)
        for n in widths:
            ax.scatter(np.full(len(by_width[n][key]), n * shift), by_width[n][key], color=color, alpha=0.45, s=14)
        mean = [np.nanmean(by_width[n][key]) if np.isfinite(by_width[n][key]).any() else np.nan for n in widths]
        sd = [np.nanstd(by_width[n][key]) if np.isfinite(by_width[n][key]).any() else np.nan for n in widths]
        ax.errorbar(np.array(widths) * shift, mean, sd, color=color, marker="o", capsize=3, label=label)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(title="Gain of Init[AB] over Init[A] below each width's optimum", xlabel="hidden width n", xscale="log",
           ylabel="log(loss Init[A]) − log(loss Init[AB])")
    ax.legend()
    return fig, ax
