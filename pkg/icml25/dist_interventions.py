"""Distribution-wise interventions (Deng, Chang & Chen, ICML 2025): steer a frozen LM by editing hidden states
inside a low-rank subspace, with a learned *distribution* of edits instead of a single point.

LoReFT (Wu et al., 2024), the pointwise intervention, edits a hidden state h ∈ R^d inside the span of the r
orthonormal rows of R ∈ R^{r×d}:

    (1)  Φ_LoReFT(h) = h + Rᵀ(W h + b − R h),          R Rᵀ = I_r

It replaces the subspace coordinates R h by the learned target W h + b and leaves (I − RᵀR) h untouched.
D-ReFT replaces the point W h + b by a sample from a Gaussian whose mean and scale are functions of h:

    (2)  μ(h) = W_μ h + b_μ,   log σ²(h) = W_σ h + b_σ
    (3)  z = μ(h) + σ(h) ⊙ ε,   ε ~ N(0, I_r)
    (4)  Φ_D-ReFT(h) = h + Rᵀ(z − R h)

with log σ² clamped to [−14, −3.2] and then σ to [0.001, 0.2] (the official code's clamps; the paper calls them
model-specific). The official code gives W_σ, b_σ PyTorch's default `nn.Linear` init, which puts log σ² far above
the upper clamp for hidden states of unit scale, where the clamp passes no gradient: σ then never leaves 0.2 and
D-ReFT is LoReFT trained with fixed noise. Here W_σ starts at 0 and b_σ at −5, inside the clamp range, so that σ(h)
can learn (a deviation from the official init, stated on the page). Because hidden states grow with depth, σ is in
units of the layer's representation size: the sample is z = μ(h) + s_l·σ(h) ⊙ ε with s_l the root mean square of
the layer's hidden-state coordinates on the training prompts (the base model's, before any intervention). Noise is drawn at inference too; `mode="mean"` uses z = μ(h) for a deterministic evaluation.
An optional information-bottleneck term adds

    (5)  β · KL(N(μ, σ²) ‖ N(0, I)) = β · ½ Σ_i (σ_i² + μ_i² − 1 − log σ_i²)

to the task loss (off by default: the paper reports it does better without). The control `NoisyLoReFT` is
LoReFT with fixed noise, z = W h + b + s_l·σ₀ ε with σ₀ D-ReFT's initial σ: it trains through noise like D-ReFT
but learns no σ(h).

Interventions are attached with forward hooks to the outputs (the residual stream) of chosen decoder layers at the
first and last `n_edge` prompt positions (the paper's "f7+l7" with shared weights), and only their parameters are
trained; the blocks are found whatever the family (`models.decoder_blocks`: Llama, Qwen, GPT-2...). The experiment:
the base model (config knob `model`; at smoke and ci the zoo's `dist-base`, a tiny Llama pretrained on one rule
over digit strings, rule A: answer the first digit) is steered with few examples to a related rule (rule B: answer
the first digit's successor, mod 10).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from .core import models, tinylm, zoo
from .core.claims import Claim, Effect, share_at_least
from .core.config import COUNT, FRACTION, INDEX, NONNEGATIVE, POSITIVE, SEED, make_config
from .core.seeding import numpy_rng, seeded, torch_generator
from .core.train import train

DIGITS = "0123456789"
RULES = ("A", "B")
METHODS = ("loreft", "dreft", "noisy_loreft")
LOGVAR_CLAMP = (-14.0, -3.2)
SIGMA_CLAMP = (0.001, 0.2)
LOGVAR_INIT = -5.0  # b_σ at the start (W_σ = 0): inside LOGVAR_CLAMP, so σ(h) gets gradients; σ₀ = exp(−2.5)
SIGMA_INIT = float(np.exp(LOGVAR_INIT / 2))

# Seeds 0-7 were seen before this design: the training schedule was chosen on 0-3 (the convergence precondition)
# and the referee's probes of the previous design ran 0-7. The verdict seeds are fresh: 100-123 decided the previous
# round (all four claims inconclusive on the convergence precondition). 124-147 decided this round's declaration
# first; a referee then re-decided it on 300-323, where robust and distribution swapped refuted and inconclusive
# (both estimates lie within one half-width of the 1-point bar), so the verdict rests on 48 seeds, 124-171.
CALIBRATION_SEEDS = list(range(8))

config = make_config({
    "smoke": {"model": "dist-base", "seeds": [100], "calibration_seeds": CALIBRATION_SEEDS, "n_train": 64,
              "n_test": 200, "rank": 8, "n_edge": 2, "steps": 15, "lr": 3e-2, "max_rounds": 1, "converge_at": 0.98,
              "batch_size": 16, "beta_kl": 0.0, "noise_levels": [0.0, 0.5], "corrupt_rates": [0.1], "layers": [0, 3]},
    "ci": {"model": "dist-base", "seeds": list(range(124, 172)), "calibration_seeds": CALIBRATION_SEEDS,
           "n_train": 256, "n_test": 2000, "rank": 8, "n_edge": 2, "steps": 40, "lr": 3e-2, "max_rounds": 6,
           "converge_at": 0.99, "batch_size": 32, "beta_kl": 0.0, "noise_levels": [0.0, 0.5, 1.0],
           "corrupt_rates": [0.1, 0.2], "layers": [0, 3]},
    "full": {"model": "meta-llama/Llama-3.2-1B-Instruct", "seeds": list(range(100, 124)),
             "calibration_seeds": CALIBRATION_SEEDS, "n_train": 256, "n_test": 5000, "rank": 8, "n_edge": 2,
             "steps": 600, "lr": 3e-3, "max_rounds": 4, "converge_at": 0.99, "batch_size": 64, "beta_kl": 0.0,
             "noise_levels": [0.0, 0.25, 0.5, 1.0, 1.5], "corrupt_rates": [0.05, 0.1, 0.2], "layers": [0, 1, 2, 3]},
},
    seeds=SEED, calibration_seeds=SEED, n_train=COUNT, n_test=COUNT, rank=COUNT, n_edge=COUNT, steps=COUNT, lr=POSITIVE, max_rounds=COUNT,
    converge_at=NONNEGATIVE, batch_size=COUNT, beta_kl=NONNEGATIVE, noise_levels=NONNEGATIVE,
    corrupt_rates=FRACTION, layers=INDEX)

# The base model: a 4-layer tiny Llama (d = 32) trained on rule A; the zoo trains it once per scale and seed.
BASE_PRESETS = {
    "smoke": {"n_digits": 4, "layers": 4, "steps": 60, "batch_size": 64, "lr": 1e-2},
    "ci": {"n_digits": 4, "layers": 4, "steps": 300, "batch_size": 64, "lr": 1e-2},
    "full": {"n_digits": 8, "layers": 4, "steps": 2000, "batch_size": 128, "lr": 3e-3},
}

# --------------------------------------------------------------------------------------------------- claims
# Declared before any ci run of the claims (the schedule was chosen on the convergence precondition alone, from
# clean accuracies per layer). "Perturbed" means every hidden-noise level > 0 and every token-corruption rate of the
# config; a method's *drop* is its clean accuracy minus its mean perturbed accuracy, per seed; stochastic
# interventions are evaluated as the paper does, sampling z at inference. Accuracies are fractions (0.01 = 1 point).

# The two per-seed preconditions are shares of seeds (declared before the seeds 124-147 that decide them were run):
# judged on the worst of 24 seeds, one run at 0.8865 made all four claims inconclusive in the previous round.
SEED_SHARE = 0.9
_CONVERGED = share_at_least("interventions_converge", "min_clean_accuracy", 0.9, SEED_SHARE,
                            "clean rule-B accuracy >= 0.9 for every method at every layer, on >= 90% of seeds")
SIGMA_MOVES = 0.1  # σ(h) "learned": its log moved from log σ₀ by 0.1 on average (σ changed by about 10%)
_BITES = share_at_least("perturbation_bites", "loreft_drop_first_layer", 0.03, SEED_SHARE,
                        "the perturbations cost LoReFT >= 0.03 accuracy (3 points) at the first layer, on >= 90% "
                        "of seeds")

ROBUST = Claim(
    chapter="dist_interventions", id="robust",
    paper_statement="Distribution-wise interventions are more robust than pointwise ones: perturbing the input "
                    "costs D-ReFT less accuracy than LoReFT",
    paper_value="better than pointwise ReFT on 8 commonsense and 7 arithmetic benchmarks, robustness included",
    criterion="At the first layer, LoReFT's drop minus D-ReFT's drop (clean minus mean perturbed accuracy), paired "
              "by seed, is > 0 (95% t interval); refuted if wholly below +1 point",
    effects=[Effect("loreft_drop_minus_dreft_drop", "drop_advantage", min_effect=0.01)],
    preconditions=[_CONVERGED, _BITES],
    examples=({"drop_advantage": [0.03, 0.04, 0.05, 0.035], "min_clean_accuracy": 0.97,
               "loreft_drop_first_layer": [0.1, 0.12, 0.09, 0.1]},
              {"drop_advantage": [0.002, -0.003, 0.0, 0.001], "min_clean_accuracy": 0.97,
               "loreft_drop_first_layer": [0.1, 0.12, 0.09, 0.1]}),
)

CLEAN = Claim(
    chapter="dist_interventions", id="clean",
    paper_statement="On clean inputs distribution-wise interventions match or beat pointwise ones",
    paper_value="higher average accuracy than LoReFT on the paper's benchmarks",
    criterion="At the first layer, clean D-ReFT minus LoReFT accuracy, paired by seed, is > -1 point "
              "(non-inferiority: the 95% t interval lies above -0.01); refuted if wholly below it",
    effects=[Effect("dreft_minus_loreft_clean", "clean_gain", null=-0.01)],
    preconditions=[_CONVERGED],
    examples=({"clean_gain": [0.0, 0.002, -0.002, 0.004], "min_clean_accuracy": 0.97},
              {"clean_gain": [-0.05, -0.04, -0.06, -0.045], "min_clean_accuracy": 0.97}),
)

DISTRIBUTION = Claim(
    chapter="dist_interventions", id="distribution",
    paper_statement="The gain comes from learning a distribution of edits, not from training through noise: "
                    "D-ReFT is more robust than LoReFT trained with fixed noise of the same scale",
    paper_value="larger learned sigma goes with larger gains (the paper's analysis)",
    criterion="At the first layer, the drop of LoReFT trained and run with fixed noise at D-ReFT's initial σ₀ "
              "(both in units of the layer's representation size) minus D-ReFT's drop, paired by seed, is > 0 "
              "(95% t interval); refuted if wholly below +1 point. Decidable only where D-ReFT's σ(h) learned: "
              f"it moved from σ₀ by a mean |Δ log σ| >= {SIGMA_MOVES:g} on >= 90% of seeds",
    effects=[Effect("noisy_loreft_drop_minus_dreft_drop", "drop_advantage_over_noise", min_effect=0.01)],
    preconditions=[_CONVERGED, _BITES,
                   share_at_least("sigma_learns", "dreft_sigma_change_first_layer", SIGMA_MOVES, SEED_SHARE,
                                  f"D-ReFT's σ(h) at the first layer moved from its initial σ₀ by a mean |Δ log σ| "
                                  f">= {SIGMA_MOVES:g} on >= 90% of seeds (else it is the fixed-noise control)")],
    examples=({"drop_advantage_over_noise": [0.03, 0.04, 0.05, 0.035], "min_clean_accuracy": 0.97,
               "loreft_drop_first_layer": [0.1, 0.12, 0.09, 0.1], "dreft_sigma_change_first_layer": [0.5, 0.4]},
              {"drop_advantage_over_noise": [0.002, -0.003, 0.0, 0.001], "min_clean_accuracy": 0.97,
               "loreft_drop_first_layer": [0.1, 0.12, 0.09, 0.1], "dreft_sigma_change_first_layer": [0.5, 0.4]}),
)

EARLY = Claim(
    chapter="dist_interventions", id="early",
    paper_statement="Distribution-wise interventions are most effective in early layers",
    paper_value="largest gains when the stochastic intervention sits in the earliest layers",
    criterion="D-ReFT's robustness advantage (LoReFT's drop minus D-ReFT's) falls with depth: its least-squares "
              "slope against the layer index over all layers, one slope per seed, is < 0 (95% t interval); "
              "refuted if wholly above -0.5 point per layer",
    effects=[Effect("advantage_slope_per_layer", "advantage_slope", direction="less", min_effect=-0.005)],
    preconditions=[_CONVERGED, _BITES],
    examples=({"advantage_slope": [-0.02, -0.015, -0.025, -0.018], "min_clean_accuracy": 0.97,
               "loreft_drop_first_layer": [0.1, 0.12, 0.09, 0.1]},
              {"advantage_slope": [0.001, -0.002, 0.003, 0.0], "min_clean_accuracy": 0.97,
               "loreft_drop_first_layer": [0.1, 0.12, 0.09, 0.1]}),
)

# ------------------------------------------------------------------------------------------- interventions
def _check_rank(d: int, rank: int) -> None:
    if not 1 <= rank <= d:
        raise ValueError(f"rank {rank} must lie in 1..{d} (the hidden size)")


class LoReFT(nn.Module):
    """Eq. (1): Φ(h) = h + Rᵀ(W h + b − R h), R with orthonormal rows (kept so by an orthogonal
    parametrisation, so every optimiser step stays on the manifold)."""

    def __init__(self, d: int, rank: int, seed: int = 0):
        super().__init__()
        _check_rank(d, rank)
        with seeded(seed, "loreft", d, rank):
            self.rotate = nn.utils.parametrizations.orthogonal(nn.Linear(d, rank, bias=False))
            self.source = nn.Linear(d, rank)

    @property
    def R(self) -> torch.Tensor:
        return self.rotate.weight

    def target(self, h: torch.Tensor) -> torch.Tensor:
        return self.source(h)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        R = self.R
        return h + (self.target(h) - h @ R.T) @ R


class StochasticReFT(LoReFT):
    """Eqs. (3)–(4): the target of the subspace is a sample z = μ(h) + s·σ(h) ⊙ ε, with s (`noise_scale`, 1 by
    default) the layer's representation size, so σ is relative to it. `mode` is "sample" (the paper's training
    and inference) or "mean" (z = μ(h), deterministic). The last μ and σ are kept for the KL term (5).
    Subclasses say where σ(h) comes from."""

    def __init__(self, d: int, rank: int, seed: int = 0):
        super().__init__(d, rank, seed)
        self.mode = "sample"
        self.noise_scale = 1.0
        self.generator = torch_generator(seed, "dreft-noise")
        self.last_mu = self.last_sigma = None

    def mu_sigma(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def target(self, h: torch.Tensor) -> torch.Tensor:
        mu, sigma = self.mu_sigma(h)
        self.last_mu, self.last_sigma = mu, sigma
        if self.mode == "mean":
            return mu
        if self.mode != "sample":
            raise ValueError(f"unknown mode {self.mode!r}; valid modes: sample, mean")
        eps = torch.randn(mu.shape, generator=self.generator, dtype=mu.dtype).to(mu.device)  # Eq. (3)
        return mu + self.noise_scale * sigma * eps


class DReFT(StochasticReFT):
    """Eqs. (2)–(4): μ(h) = W_μ h + b_μ and a *learned* log σ²(h) = W_σ h + b_σ, clamped as the official code
    does; W_σ starts at 0 and b_σ at `logvar_init`, inside the clamp range, so σ(h) can learn (see the module
    docstring)."""

    def __init__(self, d: int, rank: int, seed: int = 0, logvar_clamp=LOGVAR_CLAMP, sigma_clamp=SIGMA_CLAMP,
                 logvar_init: float = LOGVAR_INIT):
        super().__init__(d, rank, seed)
        with seeded(seed, "dreft", d, rank):
            self.logvar = nn.Linear(d, rank)  # self.source is W_μ, b_μ
        with torch.no_grad():
            self.logvar.weight.zero_()
            self.logvar.bias.fill_(logvar_init)
        self.logvar_clamp, self.sigma_clamp = logvar_clamp, sigma_clamp

    def mu_sigma(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (2) with the clamps: μ(h) and σ(h) = exp(½ clamp(log σ²)) clamped again to `sigma_clamp`."""
        logvar = self.logvar(h).clamp(*self.logvar_clamp)
        return self.source(h), torch.exp(0.5 * logvar).clamp(*self.sigma_clamp)


class NoisyLoReFT(StochasticReFT):
    """The control for D-ReFT: LoReFT whose target W h + b gets *fixed* Gaussian noise, z = W h + b + σ₀ ε, in
    training and at inference (σ₀ defaults to D-ReFT's initial σ, scaled like it by `noise_scale`). Same
    parameters as LoReFT; what it lacks against D-ReFT is only a learned, input-dependent σ(h)."""

    def __init__(self, d: int, rank: int, seed: int = 0, sigma0: float = SIGMA_INIT):
        super().__init__(d, rank, seed)
        self.sigma0 = sigma0

    def mu_sigma(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.source(h)
        return mu, torch.full_like(mu, self.sigma0)


def kl_standard_normal(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Eq. (5) without β: KL(N(μ, diag σ²) ‖ N(0, I)) summed over the subspace, averaged over the rest."""
    return 0.5 * (sigma ** 2 + mu ** 2 - 1 - torch.log(sigma ** 2)).sum(-1).mean()


def make_intervention(method: str, d: int, rank: int, seed: int) -> LoReFT:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid methods: {', '.join(METHODS)}")
    return {"loreft": LoReFT, "dreft": DReFT, "noisy_loreft": NoisyLoReFT}[method](d, rank, seed)


def edge_positions(length: int, n_edge: int) -> list[int]:
    """The first and last `n_edge` positions of a prompt of `length` tokens ("f{n}+l{n}", shared weights)."""
    return sorted(set(range(min(n_edge, length))) | set(range(max(0, length - n_edge), length)))


@contextlib.contextmanager
def attached(model, interventions: Mapping[int, nn.Module], positions: Sequence[int], noise: float = 0.0,
             generator: torch.Generator | None = None) -> Iterator[None]:
    """Hooks on the outputs of decoder layers `interventions` keys: at `positions`, h ← Φ(h + noise·RMS(h)·ξ)
    with ξ ~ N(0, I) (the perturbation used for robustness; 0 by default). A block that returns a tuple (GPT-2)
    has its first element, the residual stream, edited; Φ runs in float32 whatever the model's dtype."""
    layers = models.decoder_blocks(model)
    bad = [i for i in interventions if not 0 <= i < len(layers)]
    if bad:
        raise ValueError(f"layer index {bad} out of range; the model has layers 0..{len(layers) - 1}")
    pos = list(positions)

    def hook(module, args, out, phi):
        if isinstance(out, tuple):
            return (hook(module, args, out[0], phi), *out[1:])
        h = out[:, pos]
        if noise:
            rms = h.pow(2).mean(-1, keepdim=True).sqrt()
            h = h + noise * rms * torch.randn(h.shape, generator=generator, dtype=h.dtype).to(h.device)
        out = out.clone()
        out[:, pos] = phi(h.float()).to(out.dtype)
        return out

    handles = [layers[i].register_forward_hook(lambda m, a, o, phi=phi: hook(m, a, o, phi))
               for i, phi in interventions.items()]
    try:
        yield
    finally:
        for hd in handles:
            hd.remove()


class Prefixes:
    """What a frozen base computes below an intervention, computed once: the output of decoder block `layer` on
    given prompts, kept per layer and prompts (every intervention at that layer, trained or evaluated on those
    prompts, sees the same states), and forward passes resumed from it (:meth:`resumed`)."""

    def __init__(self, model):
        self.model = model
        self.states: dict[tuple, torch.Tensor] = {}
        self.as_tuple = False  # whether the blocks return tuples (transformers 4's GPT-2 and Llama)

    @torch.no_grad()
    def __call__(self, layer: int, input_ids: torch.Tensor) -> torch.Tensor:
        """The hidden states at the output of block `layer` on `input_ids` (B, T, d), computed on first use."""
        key = (layer, tuple(input_ids.shape), input_ids.cpu().numpy().tobytes())
        if key not in self.states:
            captured = {}
            block = models.decoder_blocks(self.model)[layer]
            hook = block.register_forward_hook(lambda m, a, o: captured.update(o=o))
            try:
                self.model(input_ids=input_ids.to(self.model.device), use_cache=False)
            finally:
                hook.remove()
            self.as_tuple = isinstance(captured["o"], tuple)
            self.states[key] = captured["o"][0] if self.as_tuple else captured["o"]
        return self.states[key]

    @contextlib.contextmanager
    def resumed(self, layer: int, states: torch.Tensor) -> Iterator[None]:
        """Forward passes inside the block start from `states`, block `layer`'s output on the same prompts: the
        blocks below pass their input through and block `layer` returns `states`, its forward hooks (the
        interventions) still running. The base is frozen, so the logits are those of a full pass, without
        recomputing the blocks below."""
        blocks = models.decoder_blocks(self.model)

        def form(h):
            return (h,) if self.as_tuple else h

        for block in blocks[:layer]:
            block.forward = lambda hidden_states, *args, **kwargs: form(hidden_states)
        blocks[layer].forward = lambda *args, **kwargs: form(states)
        try:
            yield
        finally:
            for block in blocks[:layer + 1]:
                del block.forward


# ---------------------------------------------------------------------------------------------------- task
def rule_answer(digits: np.ndarray, rule: str) -> np.ndarray:
    """Rule A: the first digit (copy); rule B: its successor, (first + 1) mod 10, for rows of digits."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; valid rules: {', '.join(RULES)}")
    return (digits[:, 0] + (0 if rule == "A" else 1)) % 10


def sample_digits(n: int, n_digits: int, seed: int, *stream) -> np.ndarray:
    return numpy_rng(seed, "digits", *stream).integers(0, 10, size=(n, n_digits))


def encode(tok, digits: np.ndarray) -> torch.Tensor:
    """Token ids of the prompts "d1…dn=" (all the same length)."""
    ids = tok.convert_tokens_to_ids(list(DIGITS + "="))
    table = torch.tensor(ids[:10])
    return torch.cat([table[torch.as_tensor(digits)], torch.full((len(digits), 1), ids[10])], dim=1)


def digit_logits(model, tok, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits of the ten digit tokens at the last position (the answer)."""
    ids = tok.convert_tokens_to_ids(list(DIGITS))
    return model(input_ids=input_ids.to(model.device), use_cache=False).logits[:, -1, ids].float()


def corrupt(digits: np.ndarray, rate: float, seed: int, *stream) -> np.ndarray:
    """Each digit replaced by a uniform random digit with probability `rate` (labels stay those of the clean
    prompt)."""
    rng = numpy_rng(seed, "corrupt", rate, *stream)
    mask = rng.random(digits.shape) < rate
    return np.where(mask, rng.integers(0, 10, size=digits.shape), digits)


@zoo.register("dist-base", BASE_PRESETS)
def build_base(cfg, seed):
    """A 4-layer tiny Llama (d = 32) trained on rule A (answer at the '=' position)."""
    tok = tinylm.char_tokenizer(DIGITS + "=")
    model = tinylm.make_model("nano", tok, seed, max_len=cfg.n_digits + 2, num_hidden_layers=cfg.layers)

    def batches():
        for step in range(cfg.steps):
            d = sample_digits(cfg.batch_size, cfg.n_digits, seed, "pretrain", step)
            yield {"x": encode(tok, d), "y": torch.as_tensor(rule_answer(d, "A"))}

    def loss_fn(m, b):
        return nn.functional.cross_entropy(digit_logits(m, tok, b["x"]), b["y"])

    res = train(model, batches(), cfg.steps, lr=cfg.lr, loss_fn=loss_fn, desc="dist-base")
    test = sample_digits(2000, cfg.n_digits, seed, "base-test")
    acc = {r: accuracy(model, tok, test, rule_answer(test, r)) for r in RULES}
    return model, tok, {"losses": res.losses, "accuracy_A": acc["A"], "accuracy_B": acc["B"],
                        "n_digits": cfg.n_digits}


def base_model(name: str, scale: str, seed: int) -> zoo.ZooModel:
    """The frozen base model `name` (the zoo's `dist-base`, trained per scale and seed, or any causal LM
    checkpoint, the same for every seed), its tokenizer checked to write the digits and `=`; `info["n_digits"]` is
    the prompt length and `info["accuracy_A"]`, `info["accuracy_B"]` the unsteered accuracies on either rule (a
    checkpoint gets the scale's length and is scored here, as the zoo scores `dist-base`)."""
    z = models.get(name, scale, seed, alphabet=DIGITS + "=")
    z.model.requires_grad_(False)
    if "accuracy_A" not in z.info:
        z.info["n_digits"] = BASE_PRESETS[scale]["n_digits"]
        test = sample_digits(2000, z.info["n_digits"], seed, "base-test")
        z.info |= {f"accuracy_{r}": accuracy(z.model, z.tokenizer, test, rule_answer(test, r)) for r in RULES}
    return z


@torch.no_grad()
def accuracy(model, tok, digits: np.ndarray, labels: np.ndarray) -> float:
    return float((digit_logits(model, tok, encode(tok, digits)).argmax(-1).cpu().numpy() == labels).mean())


# ------------------------------------------------------------------------------------------------ training
class Steered(nn.Module):
    """A frozen base model with interventions attached (a module, so `core.train` can optimise it). `prefixes`
    keeps what the base computes below the first intervention; Steered models on one base may share it."""

    def __init__(self, base, tok, interventions: Mapping[int, LoReFT], positions: Sequence[int],
                 prefixes: Prefixes | None = None):
        super().__init__()
        self.base, self.tok, self.positions = base, tok, list(positions)
        self.interventions = nn.ModuleDict({str(k): v for k, v in interventions.items()})
        self.prefixes = Prefixes(base) if prefixes is None else prefixes

    def first_layer(self) -> int:
        return min(int(k) for k in self.interventions)

    def prefix(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The base's states at the output of the first intervened block on `input_ids` (computed once)."""
        return self.prefixes(self.first_layer(), input_ids)

    def logits(self, input_ids: torch.Tensor, noise: float = 0.0, generator=None,
               states: torch.Tensor | None = None) -> torch.Tensor:
        """Digit logits of the steered model; with `states`, :meth:`prefix` of `input_ids`, the pass starts there."""
        phis = {int(k): v for k, v in self.interventions.items()}
        resume = contextlib.nullcontext() if states is None else self.prefixes.resumed(self.first_layer(), states)
        with attached(self.base, phis, self.positions, noise, generator), resume:
            return digit_logits(self.base, self.tok, input_ids)

    def kl(self) -> torch.Tensor:
        terms = [kl_standard_normal(v.last_mu, v.last_sigma) for v in self.interventions.values()
                 if isinstance(v, StochasticReFT) and v.last_mu is not None]
        return sum(terms) if terms else torch.zeros(())

    def stochastic(self) -> bool:
        """Whether any intervention samples its edit (D-ReFT, the noise control)."""
        return any(isinstance(v, StochasticReFT) for v in self.interventions.values())

    def set_mode(self, mode: str) -> None:
        for v in self.interventions.values():
            if isinstance(v, StochasticReFT):
                v.mode = mode


def fit(steered: Steered, digits: np.ndarray, labels: np.ndarray, cfg, seed: int) -> list[float]:
    """Train the interventions only (AdamW, the base frozen) on the few-shot set; loss = CE + β·KL. Training runs
    in rounds of `cfg.steps` steps (each a warmup + cosine cycle) until the accuracy on the training set, scored
    as at test time, reaches `cfg.converge_at`, for at most `cfg.max_rounds` rounds: every method at every layer
    is trained to the same convergence target. The frozen blocks below the intervention run once, on the whole
    few-shot set; a batch starts from its rows. Returns the loss of every step."""
    x, y = encode(steered.tok, digits), torch.as_tensor(labels, device=steered.base.device)
    h = steered.prefix(x)
    g = torch_generator(seed, "batches")

    def batches():
        while True:
            idx = torch.randint(len(y), (cfg.batch_size,), generator=g)
            yield {"x": x[idx], "h": h[idx.to(h.device)], "y": y[idx.to(y.device)]}

    def loss_fn(m, b):
        loss = nn.functional.cross_entropy(m.logits(b["x"], states=b["h"]), b["y"])
        return loss + cfg.beta_kl * m.kl() if cfg.beta_kl else loss

    steered.set_mode("sample")
    params = list(steered.interventions.parameters())
    losses: list[float] = []
    for _ in range(cfg.max_rounds):
        losses += train(steered, batches(), cfg.steps, lr=cfg.lr, weight_decay=0.0, loss_fn=loss_fn, params=params,
                        desc="reft").losses
        with torch.no_grad():
            if float((steered.logits(x, states=h).argmax(-1) == y).float().mean()) >= cfg.converge_at:
                break
    return losses


@torch.no_grad()
def evaluate(steered: Steered, digits: np.ndarray, labels: np.ndarray, cfg, seed: int,
             mode: str = "sample") -> dict[str, float]:
    """Accuracy on clean prompts, under hidden-state noise at the intervened layers (levels × RMS(h)) and under
    token corruption; D-ReFT sampled (the paper) or at its mean."""
    steered.set_mode(mode)
    out = {}
    clean = encode(steered.tok, digits)
    for level in cfg.noise_levels:
        g = torch_generator(seed, "eval-noise", level)
        pred = steered.logits(clean, level, g, steered.prefix(clean)).argmax(-1).cpu().numpy()
        out[f"noise {level:g}"] = float((pred == labels).mean())
    for rate in cfg.corrupt_rates:
        ids = encode(steered.tok, corrupt(digits, rate, seed, "eval"))
        pred = steered.logits(ids, states=steered.prefix(ids)).argmax(-1).cpu().numpy()
        out[f"corrupt {rate:g}"] = float((pred == labels).mean())
    steered.set_mode("sample")
    return out


def mean_sigma(steered: Steered, digits: np.ndarray) -> float:
    """The learned σ averaged over the subspace, positions and prompts (D-ReFT interventions only; NaN, with no
    forward pass, when there are none)."""
    if not any(isinstance(v, DReFT) for v in steered.interventions.values()):
        return float("nan")
    with torch.no_grad():
        steered.set_mode("mean")
        ids = encode(steered.tok, digits)
        steered.logits(ids, states=steered.prefix(ids))
        sig = [float(v.last_sigma.mean()) for v in steered.interventions.values() if isinstance(v, DReFT)]
        steered.set_mode("sample")
    return float(np.mean(sig)) if sig else float("nan")


def sigma_change(steered: Steered, digits: np.ndarray) -> float:
    """How far D-ReFT's learned σ(h) moved from its initial σ₀: the mean |log σ(h) − log σ₀| over the subspace,
    positions and prompts (0 if σ never learned; NaN, with no forward pass, without a D-ReFT intervention)."""
    if not any(isinstance(v, DReFT) for v in steered.interventions.values()):
        return float("nan")
    with torch.no_grad():
        steered.set_mode("mean")
        ids = encode(steered.tok, digits)
        steered.logits(ids, states=steered.prefix(ids))
        moved = [float((v.last_sigma.log() - np.log(SIGMA_INIT)).abs().mean()) for v in steered.interventions.values()
                 if isinstance(v, DReFT)]
        steered.set_mode("sample")
    return float(np.mean(moved))


@torch.no_grad()
def representation_scale(model, tok, digits: np.ndarray, layer: int, positions: Sequence[int]) -> float:
    """s_l: the root mean square of the hidden-state coordinates the intervention at `layer` sees (the base
    model's, at `positions`), the unit of the stochastic interventions' noise there."""
    return float(layer_states(model, tok, digits, layer, positions).pow(2).mean().sqrt())


@dataclass
class Run:
    placement: str  # e.g. "layer 0"
    method: str
    seed: int
    losses: list[float]
    sampled: dict[str, float]
    mean_mode: dict[str, float]
    sigma: float
    sigma_change: float = float("nan")


def placements(cfg) -> dict[str, dict[str, dict[int, str]]]:
    """What is trained: LoReFT and D-ReFT alone at each single layer of `cfg.layers`, and the noise control
    beside them at the first layer (where the claims that use it are tested)."""
    return {f"layer {l}": {m: {l: m} for m in METHODS if m != "noisy_loreft" or l == cfg.layers[0]}
            for l in cfg.layers}


def run_experiment(cfg) -> list[Run]:
    """Every placement × method × seed: base model of that seed, rule-B few-shot set, train, evaluate."""
    runs = []
    for seed in cfg.seeds:
        z = base_model(cfg.model, cfg.scale, seed)
        n_digits, d = z.info["n_digits"], z.model.config.hidden_size
        train_x = sample_digits(cfg.n_train, n_digits, seed, "reft-train")
        test_x = sample_digits(cfg.n_test, n_digits, seed, "reft-test")
        train_y, test_y = rule_answer(train_x, "B"), rule_answer(test_x, "B")
        positions = edge_positions(n_digits + 1, cfg.n_edge)
        scale = {l: representation_scale(z.model, z.tokenizer, train_x, l, positions) for l in cfg.layers}
        prefixes = Prefixes(z.model)  # the seed's base below each layer, shared by the methods there
        for where, methods in placements(cfg).items():
            for label, layer_methods in methods.items():
                phis = {l: make_intervention(m, d, cfg.rank, seed + 1000 * l).to(z.model.device)
                        for l, m in layer_methods.items()}
                for l, phi in phis.items():
                    phi.noise_scale = scale[l]
                steered = Steered(z.model, z.tokenizer, phis, positions, prefixes)
                losses = fit(steered, train_x, train_y, cfg, seed)
                sampled = evaluate(steered, test_x, test_y, cfg, seed)
                # a deterministic intervention (LoReFT) has no mean mode apart from its one mode
                mean = (evaluate(steered, test_x, test_y, cfg, seed, mode="mean") if steered.stochastic()
                        else sampled)
                runs.append(Run(where, label, seed, losses, sampled, mean, mean_sigma(steered, test_x),
                                sigma_change(steered, test_x)))
    return runs


def experiment_results(cfg) -> tuple[list[Run], bool]:
    """:func:`run_experiment`, and whether it was computed now. With the zoo's base model it is cached like a zoo
    model (`icml25.core.zoo.results`), addressed by every knob of `cfg`, the base models' zoo addresses and the
    code, so the book's builder runs it in its warm-up and notebook 02 reads it back; any other `cfg.model` is
    computed in place."""
    if cfg.model not in zoo.names():
        return run_experiment(cfg), True
    settings = dict(cfg) | {"base_models": [zoo.key(cfg.model, cfg.scale, s) for s in cfg.seeds]}
    value, now = zoo.results("dist-runs", settings, lambda: [asdict(r) for r in run_experiment(cfg)],
                             sources=(inspect.getmodule(run_experiment), models, tinylm))
    return [Run(**r) for r in value], now


def warm_up_runs(cfg) -> None:
    """What the book's builder runs before the notebooks (a `CHAPTER_RESULTS` entry): :func:`experiment_results`,
    cached, when `cfg.model` is the zoo's."""
    if cfg.model in zoo.names():
        experiment_results(cfg)


def table(runs: Sequence[Run], where: str, method: str, key: str, mode: str = "sampled") -> np.ndarray:
    """Per-seed values of one condition `key` (e.g. "noise 0") for `method` at placement `where`."""
    return np.array([getattr(r, "sampled" if mode == "sampled" else "mean_mode")[key] for r in runs
                     if r.placement == where and r.method == method])


def perturbed_conditions(cfg) -> list[str]:
    return [f"noise {v:g}" for v in cfg.noise_levels if v > 0] + [f"corrupt {r:g}" for r in cfg.corrupt_rates]


def drop(runs: Sequence[Run], where: str, method: str, cfg, mode: str = "sampled") -> np.ndarray:
    """Per-seed robustness cost of `method` at `where`: clean accuracy minus the mean accuracy over the perturbed
    conditions (a fraction; smaller is more robust)."""
    perturbed = np.mean([table(runs, where, method, k, mode) for k in perturbed_conditions(cfg)], axis=0)
    return table(runs, where, method, "noise 0", mode) - perturbed


def ols_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x."""
    return float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0])


def measure_claims(runs: Sequence[Run], cfg) -> dict[str, list[float] | float]:
    """What the four claims test, per seed: at the first layer, LoReFT's (and noisy LoReFT's) drop minus D-ReFT's
    and the clean D-ReFT − LoReFT gap; over all layers, the slope of D-ReFT's drop advantage against the layer;
    and the preconditions (per seed: the lowest clean accuracy of any run, LoReFT's drop at the first layer)."""
    first = f"layer {cfg.layers[0]}"
    seeds = sorted({r.seed for r in runs})
    advantage = np.array([drop(runs, f"layer {l}", "loreft", cfg) - drop(runs, f"layer {l}", "dreft", cfg)
                          for l in cfg.layers])  # (layers, seeds)
    return {
        "drop_advantage": advantage[0].tolist(),
        "drop_advantage_over_noise": (drop(runs, first, "noisy_loreft", cfg) - drop(runs, first, "dreft", cfg)).tolist(),
        "clean_gain": (table(runs, first, "dreft", "noise 0") - table(runs, first, "loreft", "noise 0")).tolist(),
        "advantage_slope": [ols_slope(cfg.layers, advantage[:, i]) for i in range(advantage.shape[1])]
        if len(cfg.layers) > 1 else [],
        "advantage_by_layer": advantage.mean(1).tolist(),
        "min_clean_accuracy": [min(r.sampled["noise 0"] for r in runs if r.seed == s) for s in seeds],
        "loreft_drop_first_layer": drop(runs, first, "loreft", cfg).tolist(),
        "dreft_sigma_change_first_layer": [r.sigma_change for r in runs
                                           if r.placement == first and r.method == "dreft"],
    }


# ------------------------------------------------------------------------------------ looking inside (nb 01)
@torch.no_grad()
def layer_states(model, tok, digits: np.ndarray, layer: int, positions: Sequence[int]) -> torch.Tensor:
    """Hidden states h (output of decoder `layer`, where the interventions act) at `positions`, shape
    (n · len(positions), d)."""
    captured = {}
    block = models.decoder_blocks(model)[layer]
    hook = block.register_forward_hook(lambda m, a, o: captured.update(h=o[0] if isinstance(o, tuple) else o))
    try:
        model(input_ids=encode(tok, digits).to(model.device), use_cache=False)
    finally:
        hook.remove()
    hs = captured["h"].float().cpu()
    return hs[:, list(positions)].reshape(-1, hs.shape[-1])


@torch.no_grad()
def subspace_view(phi: LoReFT, h: torch.Tensor, n_samples: int = 0) -> dict[str, np.ndarray]:
    """Coordinates in the intervention's subspace (R h) before and after Φ, D-ReFT's sampled edits
    (n_samples × n × r, from its own generator) and the size of the change outside the subspace, ‖(I − RᵀR)(Φ(h) − h)‖."""
    R = phi.R
    mode = getattr(phi, "mode", None)
    if isinstance(phi, StochasticReFT):
        phi.mode = "mean"
    after = phi(h)
    out = {"before": (h @ R.T).numpy(), "after": (after @ R.T).numpy(),
           "off_subspace": float(((after - h) - (after - h) @ R.T @ R).norm(dim=-1).max())}
    if isinstance(phi, StochasticReFT):
        phi.mode = "sample"
        if n_samples:
            out["samples"] = np.stack([(phi(h) @ R.T).numpy() for _ in range(n_samples)])
        out["sigma"] = phi.mu_sigma(h)[1].numpy()
        phi.mode = mode
    return out
