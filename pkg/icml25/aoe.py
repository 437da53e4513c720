r"""Autonomy-of-Experts models (Lv et al., ICML 2025): mixture-of-experts layers without a router.

In a routed MoE a linear router decides which experts see a token, and the experts never get a say. AoE removes
the router: every expert $i$ first computes a low-rank projection of the token, $C_i = x W_\text{down}^i$
($W_\text{down}^i \in \mathbb R^{d \times d_\text{low}}$, all $n$ at once in one GEMM), the experts are ranked by
$\|C_i\|_2$, and only the top $K$ continue (Alg. 2):

$$ p = \operatorname{softmax}\big(\|C_1\|, \dots, \|C_n\|\big), \qquad I = \operatorname{top}_K(p), \qquad
   y = \sum_{i \in I} \frac{p_i}{\sum_{j\in I} p_j}\;
   \big(\operatorname{SiLU}(C_i W_\text{up}^i) \odot x W_p^i\big) W_o^i . \qquad (3) $$

$W_\text{down} W_\text{up}$ is a factorised version of a SwiGLU expert's gate matrix, so with
$d_\text{wide} = (3 d\, d_\text{ffn} - d_\text{low} d) / (d_\text{low} + 2d)$ (Eq. 5) an AoE expert has the
parameters of a $d_\text{ffn}$-wide SwiGLU expert. An optional load-balancing loss (Eq. 6)
$\mathcal L_\text{aux} = \alpha\, n \sum_i f_i P_i$ works for both ($f_i$: fraction of tokens that pick expert
$i$, $P_i$: its mean probability). Equation numbers follow the paper where these notes could check them (Eqs. 5
and 6); Eq. (3) is this chapter's label for Alg. 2.

Both layers drop into a tiny Hugging Face Llama in place of its MLP, and both dispatch tokens through the compiled
`icml25.ops.expert_ffn` kernel. The data is a synthetic multi-domain language: several random Markov sources
over one vocabulary, one source per sequence, so experts have domains to specialise on.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from . import ops
from .ops import bench
from .ops.timing import ALONE_ON_THE_MACHINE, ForeignLoad
from .core import moe, zoo
from .core import train as core_train
from .core.moe import MoEFFN, RoutedLayer, aux_loss, load_balancing_loss, top_k_softmax  # noqa: F401
from .core.claims import Claim, Effect, at_least, at_most, between_run_sd
from .core.config import COUNT, NONNEGATIVE, POSITIVE, SEED, Range, make_config
from .core.seeding import numpy_rng, one_thread, seeded, torch_generator

#: the seeds any tuning used: the held-out language (`tune_seed`) on which each model's learning rate is chosen.
#: Verdict seeds start at 100 (this chapter decided on seeds 0-4 before).
CALIBRATION_SEEDS = [99]

config = make_config({
    "smoke": {"seeds": [100], "calibration_seeds": CALIBRATION_SEEDS, "tune_seed": 99, "d_model": 32, "n_layers": 2,
              "n_experts": 4, "top_k": 2, "d_ffn": 32, "d_lows": [8], "claim_d_low": 8, "alpha": 0.01,
              "n_domains": 4, "vocab": 32, "concentration": 0.1, "seq_len": 16, "n_train": 512, "batch_size": 8,
              "steps": 15, "lrs": [3e-3, 1e-2, 3e-2], "n_val": 16, "eval_every": 5, "bench_repeats": 3,
              "bench_shape": (64, 128, 16), "bench_tokens": 256},
    "ci": {"seeds": list(range(100, 108)), "calibration_seeds": CALIBRATION_SEEDS, "tune_seed": 99, "d_model": 48,
           "n_layers": 4, "n_experts": 8, "top_k": 2, "d_ffn": 64, "d_lows": [16], "claim_d_low": 16, "alpha": 0.01,
           "n_domains": 8, "vocab": 32, "concentration": 0.1, "seq_len": 32, "n_train": 4096, "batch_size": 16,
           "steps": 200, "lrs": [3e-3, 1e-2, 3e-2], "n_val": 128, "eval_every": 25, "bench_repeats": 28,
           "bench_shape": (256, 512, 64), "bench_tokens": 2048},
    "full": {"seeds": list(range(100, 108)), "calibration_seeds": CALIBRATION_SEEDS, "tune_seed": 99,
             "d_model": 256, "n_layers": 4, "n_experts": 8, "top_k": 2, "d_ffn": 512, "d_lows": [32, 64, 128],
             "claim_d_low": 64, "alpha": 0.01, "n_domains": 8, "vocab": 256, "concentration": 0.1, "seq_len": 128,
             "n_train": 65536, "batch_size": 32, "steps": 5000, "lrs": [3e-4, 1e-3, 3e-3], "n_val": 512,
             "eval_every": 250, "bench_repeats": 30, "bench_shape": (768, 3072, 64), "bench_tokens": 8192},
},
    seeds=SEED, calibration_seeds=SEED, tune_seed=SEED, d_model=COUNT, n_layers=COUNT, n_experts=COUNT,
    top_k=COUNT, d_ffn=COUNT, d_lows=COUNT, claim_d_low=COUNT, alpha=NONNEGATIVE, n_domains=COUNT, vocab=COUNT,
    concentration=POSITIVE, seq_len=Range(ge=2), n_train=COUNT, batch_size=COUNT, steps=COUNT, lrs=POSITIVE,
    n_val=COUNT, eval_every=COUNT, bench_repeats=COUNT, bench_shape=COUNT, bench_tokens=COUNT)


def paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-seed differences a - b of two lists in seed order."""
    if len(a) != len(b):
        raise ValueError(f"paired lists differ in length: {len(a)} vs {len(b)}")
    return [float(x) - float(y) for x, y in zip(a, b)]


def mean_sd3(values: Sequence[float]) -> str:
    """"mean ± sd" (population sd) with three decimals: loss and entropy gaps are a few hundredths of a nat."""
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


#: every model closes at least this share of the way from the domain-blind bigram to the true source's loss
LEARNED = 0.5

_LEARNED = at_least("both_learn_the_domains", "gap_closed", LEARNED,
                    rule=f"every model's validation loss closes >= {LEARNED:.0%} of the way from the domain-blind "
                         "bigram to the loss of the true source (worst model and seed)")
_GRID = at_most("lr_grid_brackets", "lrs_at_grid_edge", 0,
                rule="neither model's learning rate, chosen on the held-out language, sits at the edge of its grid "
                     "(count of those that do)")
_OK = {"gap_closed": [0.7, 0.8], "lrs_at_grid_edge": 0}

LOSS = Claim(
    chapter="aoe", id="loss",
    paper_statement="AoE reaches a lower loss than a traditional MoE with the same parameters",
    paper_value="lower training NLL at 732M; downstream average 49.80 (AoE) vs 48.06 (MoE) at 4B (unverified)",
    criterion="For AoE at the paper's best d_low (about d/3), each model at its own learning rate (chosen on a "
              "held-out language), the per-seed paired difference of validation loss AoE - MoE (same language, "
              "same data order) is below 0 (95% t interval); refuted if the interval lies wholly above -0.01 nats",
    effects=[Effect("aoe_minus_moe_loss", "loss_diff", direction="less", null=0.0, min_effect=-0.01)],
    preconditions=[_LEARNED, _GRID],
    examples=({**_OK, "loss_diff": [-0.05, -0.04, -0.06]},
              {**_OK, "loss_diff": [0.02, 0.01, 0.03]}),
)

CONFIDENCE = Claim(
    chapter="aoe", id="confidence",
    paper_statement="AoE selects experts more confidently than a router (lower confidence entropy)",
    paper_value="lower Ent_conf than MoE in every layer (unverified)",
    criterion="For AoE at d_low about d/3, each model at its own learning rate (chosen on a held-out language), "
              "the per-seed paired difference of trained confidence entropy AoE - MoE, averaged over layers, is "
              "below 0 (95% t interval)",
    effects=[Effect("aoe_minus_moe_entropy", "entropy_diff", direction="less")],
    preconditions=[_LEARNED, _GRID],
    examples=({**_OK, "entropy_diff": [-0.3, -0.25, -0.35]},
              {**_OK, "entropy_diff": [0.1, 0.2, 0.15]}),
)


def depth_slope(gap) -> list[float]:
    """Per seed, the least-squares slope of the entropy gap AoE - MoE over the layer index ([seeds, layers] in;
    nats per layer): negative when the gap grows more negative deeper in the model."""
    gap = np.atleast_2d(np.asarray(gap, dtype=float))
    layers = np.arange(gap.shape[1])
    return [float(np.polyfit(layers, row, 1)[0]) for row in gap]


DEEPER = Claim(
    chapter="aoe", id="confidence_deeper",
    paper_statement="AoE's confidence advantage is largest in deeper layers",
    paper_value="Ent_conf gap to MoE grows with depth (unverified)",
    criterion="For AoE at d_low about d/3 in a model of at least 4 layers, the per-seed least-squares slope of the "
              "entropy gap AoE - MoE over the layer index is below 0 (95% t interval): the gap is more negative "
              "deeper in the model",
    effects=[Effect("gap_slope_over_layers", "depth_slope", direction="less")],
    preconditions=[_LEARNED, _GRID, at_least("deep_enough", "n_layers", 4, rule="the models have >= 4 layers")],
    examples=({**_OK, "n_layers": 4, "depth_slope": [-0.05, -0.03, -0.04]},
              {**_OK, "n_layers": 4, "depth_slope": [0.05, 0.03, 0.04]}),
)

#: The throughput's calibration runs (none of them a verdict): nine timings of 8 blocks of 28 rounds at the ci
#: settings, each block's AoE-over-MoE ratio. Six ran in one process each, 8 fresh-layer blocks on seeds
#: 1010-1057; three ran each block in a fresh process, seeds 2010-2037; over 20 minutes of one session, the first
#: four before expert_ffn's exp_u20 commit and the rest after it. Their between-run spread sets `run_sd`.
THROUGHPUT_CALIBRATION_RUNS = (
    (0.8658, 0.855, 0.8707, 0.8492, 0.8199, 0.8679, 0.842, 0.8467),
    (0.87, 0.8423, 0.8477, 0.8378, 0.8451, 0.8661, 0.8179, 0.825),
    (0.863, 0.8432, 0.8604, 0.8536, 0.8456, 0.8481, 0.8198, 0.837),
    (0.8586, 0.8706, 0.864, 0.8632, 0.8618, 0.8735, 0.8579, 0.8811),
    (0.8726, 0.8407, 0.8694, 0.8744, 0.8767, 0.8689, 0.8685, 0.8621),
    (0.8703, 0.8406, 0.8416, 0.8363, 0.8794, 0.8653, 0.8649, 0.8753),
    (0.8778, 0.8684, 0.8787, 0.8487, 0.8869, 0.8743, 0.8696, 0.8594),
    (0.8572, 0.8531, 0.8384, 0.8684, 0.8681, 0.8552, 0.8596, 0.866),
    (0.8584, 0.823, 0.854, 0.8572, 0.8516, 0.8391, 0.831, 0.8253),
)


def throughput_run_sd(runs: Sequence[Sequence[float]]) -> float:
    """The between-run sd of a build's mean block ratio, from calibration runs of equally many blocks each
    (`core.claims.between_run_sd` over the runs' means and sds)."""
    x = np.asarray(runs, dtype=float)
    return between_run_sd(x.mean(axis=1), x.std(axis=1, ddof=1), x.shape[1])


THROUGHPUT_RUN_SD = round(throughput_run_sd(THROUGHPUT_CALIBRATION_RUNS), 4)

THROUGHPUT = Claim(
    chapter="aoe", id="throughput",
    paper_statement="AoE trains at nearly the throughput of a traditional MoE",
    paper_value="97% (49.79 vs 51.42 K tokens/s/GPU, d_low = 64; unverified)",
    criterion="At a width where the experts' GEMMs, not per-operation overhead, take the time (one layer, the "
              "scale's bench_shape), AoE's training tokens/s (forward + backward) over the routed MoE's is above "
              "0.85 (95% t interval over timing blocks): one block per verdict seed, each with its own layers and "
              "inputs drawn from that seed, its ratio the mean over its interleaved rounds of the paired per-round "
              "ratios; the interval carries the between-run sd of a build's mean measured on calibration runs "
              "(THROUGHPUT_RUN_SD), which the blocks of one build share",
    effects=[Effect("aoe_over_moe_throughput", "block_ratio", direction="greater", null=0.85,
                    run_sd=THROUGHPUT_RUN_SD)],
    preconditions=[at_least("timed_rounds", "rounds_per_block", 8, rule="at least 8 timed rounds in every block"),
                   at_most("quiet_machine", "moe_cv", 0.25,
                           rule="in every block the MoE's time per round varies by at most 25% (sd / mean) across "
                                "its rounds (the largest over blocks)"),
                   ALONE_ON_THE_MACHINE],
    examples=({"block_ratio": [0.95, 0.97, 0.93, 0.96, 0.94, 0.95, 0.96, 0.94], "rounds_per_block": 28,
               "moe_cv": 0.1, "foreign_cpu_share": 0.01},
              {"block_ratio": [0.6, 0.62, 0.58, 0.61, 0.6, 0.61, 0.59, 0.6], "rounds_per_block": 28,
               "moe_cv": 0.1, "foreign_cpu_share": 0.01}),
)


# --- routing ------------------------------------------------------------------------------------------------

def aoe_scores(x: torch.Tensor, w_down: torch.Tensor, n_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every expert's low-rank activation C [T, n, d_low] = x W_down^i, computed as one GEMM with the
    concatenated W_down [d, n·d_low], and its L2 norm [T, n] (the expert's self-assessed score)."""
    C = (x @ w_down).view(x.shape[0], n_experts, -1)
    return C, C.norm(dim=-1)


def confidence_entropy(probs: torch.Tensor) -> float:
    """Ent_conf: mean over tokens of the entropy (nats) of the selection distribution over all experts."""
    return float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean())


def load_entropy(index: torch.Tensor, n_experts: int) -> float:
    """Ent_load: entropy (nats) of the share of top-k slots each expert receives (log n = perfectly balanced)."""
    share = torch.bincount(index.flatten(), minlength=n_experts).double() / index.numel()
    return float(-(share * share.clamp_min(1e-12).log()).sum())


def d_wide_eq5(d: int, d_ffn: int, d_low: int) -> int:
    """Eq. 5: the AoE expert width that matches a SwiGLU expert's 3·d·d_ffn parameters, rounded up (which gives
    the paper's d_wide = 6470 for its 4B model)."""
    if not 1 <= d_low < d:
        raise ValueError(f"d_low={d_low} must lie in [1, d={d}): the factorisation must be low-rank")
    return -(-(3 * d * d_ffn - d_low * d) // (d_low + 2 * d))


# --- the two layers -----------------------------------------------------------------------------------------

class AoEFFN(RoutedLayer):
    """Autonomy-of-Experts (Eq. 3): experts ranked by ||x W_down^i||, the top-k continue with their own C_i."""

    def __init__(self, d: int, n_experts: int, top_k: int, d_ffn: int, d_low: int, alpha: float = 0.0,
                 seed: int = 0):
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"top_k={top_k} must lie in [1, n_experts={n_experts}]")
        d_wide = d_wide_eq5(d, d_ffn, d_low)
        self.n_experts, self.top_k, self.alpha, self.d_low, self.d_wide = n_experts, top_k, alpha, d_low, d_wide
        g = torch_generator(seed, "aoe")
        self.w_down = nn.Parameter(torch.randn(d, n_experts * d_low, generator=g) * d ** -0.5)
        self.w_up = nn.Parameter(torch.randn(n_experts, d_low, d_wide, generator=g) * d_low ** -0.5)
        self.w_p = nn.Parameter(torch.randn(n_experts, d, d_wide, generator=g) * d ** -0.5)
        self.w_o = nn.Parameter(torch.randn(n_experts, d_wide, d, generator=g) * d_wide ** -0.5)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x = hidden.reshape(-1, hidden.shape[-1])
        C, norms = aoe_scores(x, self.w_down, self.n_experts)
        routing, probs = top_k_softmax(norms, self.top_k)
        self._record(routing, probs)
        # the kernel's gate input is C itself, so the selected experts reuse the activations they ranked by
        y = ops.expert_ffn(x, routing, ops.Experts(self.w_up, self.w_p, self.w_o), gate_input=C)
        return y.view(hidden.shape)


def aoe_reference(layer: AoEFFN, x: torch.Tensor) -> torch.Tensor:
    """A naive AoE forward, one token and one expert at a time, for testing the vectorised layer."""
    out = []
    for t in range(x.shape[0]):
        C = [x[t] @ layer.w_down[:, i * layer.d_low:(i + 1) * layer.d_low] for i in range(layer.n_experts)]
        p = torch.softmax(torch.stack([c.norm() for c in C]), 0)
        top = p.topk(layer.top_k).indices.tolist()
        y = torch.zeros_like(x[t])
        for i in top:
            expert = (F.silu(C[i] @ layer.w_up[i]) * (x[t] @ layer.w_p[i])) @ layer.w_o[i]
            y = y + p[i] / p[top].sum() * expert
        out.append(y)
    return torch.stack(out)


def swiglu_expert_params(d: int, d_ffn: int) -> int:
    return 3 * d * d_ffn


def aoe_expert_params(d: int, d_low: int, d_wide: int) -> int:
    return d * d_low + d_low * d_wide + 2 * d * d_wide


# --- models ---------------------------------------------------------------------------------------------------

KINDS = ("moe", "aoe", "moe_mlp_router")


def build_model(kind: str, cfg, seed: int, d_low: int | None = None) -> LlamaForCausalLM:
    """A tiny Llama whose every MLP is a routed MoE (`kind="moe"`), an AoE layer (`kind="aoe"`, with d_low), or
    a routed MoE whose router is an MLP with a first matrix of AoE's W_down shape, d × n·d_low
    (`kind="moe_mlp_router"`, with d_low); all with the Eq. 6 loss at `cfg.alpha`."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    llama = LlamaConfig(vocab_size=vocab_size(cfg), hidden_size=cfg.d_model, intermediate_size=8,
                        num_hidden_layers=cfg.n_layers, num_attention_heads=4, num_key_value_heads=4,
                        max_position_embeddings=cfg.seq_len, tie_word_embeddings=True, pad_token_id=0)
    with seeded(seed, "init", "aoe"):
        model = LlamaForCausalLM(llama)
    for i, layer in enumerate(model.model.layers):
        s = seed * 1000 + i
        if kind == "aoe":
            layer.mlp = AoEFFN(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_ffn, d_low, cfg.alpha, s)
        else:
            hidden = cfg.n_experts * d_low if kind == "moe_mlp_router" else 0
            layer.mlp = MoEFFN(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.d_ffn, cfg.alpha, s, hidden)
    return model


def expert_layers(model: nn.Module) -> list[RoutedLayer]:
    return [m for m in model.modules() if isinstance(m, RoutedLayer)]


# --- the multi-domain language --------------------------------------------------------------------------------

def markov_domains(n_domains: int, vocab: int, seed: int, concentration: float) -> np.ndarray:
    """One random bigram transition matrix [vocab, vocab] per domain (rows ~ Dirichlet(concentration), so each
    domain prefers a few successors per token), all over the same vocabulary: [n_domains, vocab, vocab]."""
    rng = numpy_rng(seed, "markov_domains")
    return rng.dirichlet(np.full(vocab, concentration), size=(n_domains, vocab))


def sample_sequences(domains: np.ndarray, n: int, seq_len: int, seed: int,
                     stream: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """`n` sequences, each from one uniformly chosen domain d: its tag token (id vocab + 1 + d) first, then
    `seq_len - 1` tokens with ids 1..vocab (uniform start, then the domain's bigram chain); returns (ids, domain)."""
    rng = numpy_rng(seed, "sequences", stream)
    n_domains, vocab, _ = domains.shape
    domain = rng.integers(0, n_domains, n)
    ids = np.empty((n, seq_len - 1), dtype=np.int64)
    ids[:, 0] = rng.integers(0, vocab, n)
    cdf = domains.cumsum(-1)
    for t in range(1, seq_len - 1):
        u = rng.random(n)[:, None]
        ids[:, t] = np.minimum((u > cdf[domain, ids[:, t - 1]]).sum(-1), vocab - 1)
    tags = vocab + 1 + domain
    return torch.as_tensor(np.concatenate([tags[:, None], ids + 1], axis=1)), torch.as_tensor(domain)


def vocab_size(cfg) -> int:
    """Token ids of the language: padding 0, content 1..vocab, the domain tags after them."""
    return cfg.vocab + cfg.n_domains + 1


def domain_known_loss(domains: np.ndarray, ids: torch.Tensor, domain: torch.Tensor) -> float:
    """The floor of the validation loss: the mean next-token loss (nats, positions 1..T-1) of the true source
    given the tag, -log(1/vocab) for the first content token and -log P_d[x_{t-1}, x_t] after it."""
    vocab = domains.shape[1]
    x = ids[:, 1:].numpy() - 1
    chain = -np.log(np.clip(domains[domain.numpy()[:, None], x[:, :-1], x[:, 1:]], 1e-300, None))
    return float((np.log(vocab) * len(x) + chain.sum()) / x.size)


def bigram_loss(train_ids: torch.Tensor, val_ids: torch.Tensor, n_tokens: int, smoothing: float = 0.1) -> float:
    """The domain-blind baseline: the validation loss (nats, positions 1..T-1) of a bigram model over token ids
    0..n_tokens-1 counted on the training sequences (add-`smoothing`), which predicts from the previous token
    alone and so uses the tag only for the first content token."""
    counts = np.full((n_tokens, n_tokens), smoothing)
    np.add.at(counts, (train_ids[:, :-1].flatten().numpy(), train_ids[:, 1:].flatten().numpy()), 1.0)
    logp = np.log(counts / counts.sum(1, keepdims=True))
    return float(-logp[val_ids[:, :-1].numpy(), val_ids[:, 1:].numpy()].mean())


def gap_closed(val_loss: float, bigram: float, floor: float) -> float:
    """How much of the way from the domain-blind bigram down to the true source's loss a model's loss has come
    (0: no better than the bigram, 1: at the floor)."""
    return (bigram - val_loss) / (bigram - floor)


# --- training and measurement -----------------------------------------------------------------------------------

def lm_loss_with_aux(model: nn.Module, batch: dict) -> torch.Tensor:
    """Next-token cross-entropy plus every expert layer's Eq. 6 loss."""
    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits
    nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    return nll + sum(layer.aux_loss for layer in expert_layers(model))


@torch.no_grad()
def validation_loss(model: nn.Module, ids: torch.Tensor) -> float:
    logits = model(input_ids=ids).logits
    return float(F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()))


def batches(ids: torch.Tensor, batch_size: int, seed: int) -> Iterator[dict]:
    g = torch_generator(seed, "aoe_batches")
    while True:
        yield {"input_ids": ids[torch.randint(len(ids), (batch_size,), generator=g)]}


@torch.no_grad()
def routing_stats(model: nn.Module, ids: torch.Tensor, domain: torch.Tensor, n_domains: int) -> dict:
    """Per layer: Ent_conf, Ent_load, and the expert-by-domain share [n_domains, n_experts] of top-k slots."""
    model(input_ids=ids)
    token_domain = domain[:, None].expand_as(ids).flatten()
    out = {"conf_entropy": [], "load_entropy": [], "specialisation": []}
    for layer in expert_layers(model):
        n = layer.n_experts
        out["conf_entropy"].append(confidence_entropy(layer.last_probs))
        out["load_entropy"].append(load_entropy(layer.last_index, n))
        counts = torch.zeros(n_domains, n)
        counts.index_put_((token_domain[:, None].expand_as(layer.last_index).flatten(), layer.last_index.flatten()),
                          torch.ones(layer.last_index.numel()), accumulate=True)
        out["specialisation"].append((counts / counts.sum(1, keepdim=True)).tolist())
    return out


def variants(cfg) -> list[tuple[str, str, int | None]]:
    """(label, kind, d_low) of every model the experiment trains: the MoE, AoE at every d_low, and the MoE whose
    router has AoE's W_down parameters at `claim_d_low` (the ablation)."""
    return ([("MoE", "moe", None)] + [(f"AoE d_low={d}", "aoe", d) for d in cfg.d_lows]
            + [(MLP_ROUTER, "moe_mlp_router", cfg.claim_d_low)])


#: the label of the ablation: a routed MoE whose router has as many parameters as AoE's W_down
MLP_ROUTER = "MoE, MLP router"
#: the ablation trains at the MoE's learning rate: only the router differs
LR_OF = {MLP_ROUTER: "MoE"}


def language(cfg, seed: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """The multi-domain language of `seed`: its sources, training ids, validation ids and domains, and the two
    reference losses (the domain-blind bigram, the true source's floor)."""
    domains = markov_domains(cfg.n_domains, cfg.vocab, seed, cfg.concentration)
    train_ids, _ = sample_sequences(domains, cfg.n_train, cfg.seq_len, seed, "train")
    val_ids, val_domain = sample_sequences(domains, cfg.n_val, cfg.seq_len, seed, "val")
    baselines = {"bigram": bigram_loss(train_ids, val_ids, vocab_size(cfg)),
                 "floor": domain_known_loss(domains, val_ids, val_domain)}
    return domains, train_ids, val_ids, val_domain, baselines


def train_variant(cfg, kind: str, d_low: int | None, seed: int, lr: float, train_ids: torch.Tensor,
                  val_ids: torch.Tensor, label: str = "") -> tuple[nn.Module, core_train.TrainResult, float]:
    """One model of `kind` trained from `seed` at learning rate `lr` on `train_ids` (the seed's data order); the
    model, its training result (validation loss every `eval_every` steps) and the training time."""
    model = build_model(kind, cfg, seed, d_low)
    start = time.perf_counter()
    with one_thread():
        result = core_train.train(model, batches(train_ids, cfg.batch_size, seed), cfg.steps, lr=lr,
                                  weight_decay=0.1, loss_fn=lm_loss_with_aux, eval_every=cfg.eval_every,
                                  eval_fn=lambda m: validation_loss(m, val_ids), desc=label or kind)
    return model, result, time.perf_counter() - start


def tune_learning_rates(cfg) -> list[dict]:
    """The MoE and AoE at `claim_d_low`, each trained at every rate of `cfg.lrs` on the held-out language of
    `cfg.tune_seed` (no claim uses it): one {label, lr, val_loss} per run."""
    _, train_ids, val_ids, _, _ = language(cfg, cfg.tune_seed)
    runs = []
    for label, kind, d_low in (("MoE", "moe", None), (f"AoE d_low={cfg.claim_d_low}", "aoe", cfg.claim_d_low)):
        for lr in cfg.lrs:
            _, result, seconds = train_variant(cfg, kind, d_low, cfg.tune_seed, lr, train_ids, val_ids, label)
            runs.append({"label": label, "lr": lr, "val_loss": result.evals[-1][1], "seconds": seconds})
    return runs


#: config knobs the learning-rate search does not read
NOT_IN_SEARCH = ("seeds", "calibration_seeds", "d_lows", "bench_repeats", "bench_shape", "bench_tokens")


def learning_rate_search(cfg) -> tuple[list[dict], bool]:
    """`tune_learning_rates(cfg)`, cached like a zoo model (`icml25.core.zoo.results`), addressed by the knobs it
    reads and the code it trains with, so the book's builder runs it before the notebooks fan out. Returns the
    runs and whether they were computed now."""
    settings = {k: v for k, v in dict(cfg).items() if k not in NOT_IN_SEARCH}
    settings["kernel_sources"] = ops.build.source_digest()
    return zoo.results("aoe-lr-search", settings, lambda: tune_learning_rates(cfg),
                       sources=(inspect.getmodule(tune_learning_rates), moe, ops.expert_ffn))


#: config knobs the pretraining runs do not read
NOT_IN_RUNS = ("calibration_seeds", "bench_repeats", "bench_shape", "bench_tokens")


def pretraining_results(cfg, lrs: dict[str, float]) -> tuple[list[dict], bool]:
    """`pretraining_experiment(cfg, lrs)`, cached like the search (addressed by the knobs the runs read, the rates
    and the same code), so the builder's warm-up trains every model once and the notebook reads them back. Returns
    the runs and whether they were computed now."""
    settings = {k: v for k, v in dict(cfg).items() if k not in NOT_IN_RUNS}
    settings.update(lrs=dict(lrs), kernel_sources=ops.build.source_digest())
    return zoo.results("aoe-runs", settings, lambda: pretraining_experiment(cfg, lrs),
                       sources=(inspect.getmodule(tune_learning_rates), moe, ops.expert_ffn))


def warm_up(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS` entry): the learning-rate search,
    then the pretraining runs at the rates it chose."""
    tuning, _ = learning_rate_search(cfg)
    pretraining_results(cfg, chosen_learning_rates(tuning, cfg))


def chosen_learning_rates(tuning: Sequence[dict], cfg) -> dict[str, float]:
    """Per model, the rate with the lowest held-out validation loss; AoE's rate serves every d_low, the MoE's its
    ablation."""
    best = {}
    for r in tuning:
        if r["label"] not in best or r["val_loss"] < best[r["label"]]["val_loss"]:
            best[r["label"]] = r
    aoe_lr = best[f"AoE d_low={cfg.claim_d_low}"]["lr"]
    return {label: best["MoE"]["lr"] if kind != "aoe" else aoe_lr for label, kind, _ in variants(cfg)}


def lrs_at_grid_edge(tuning: Sequence[dict]) -> list[str]:
    """The models whose chosen rate is the smallest or largest of the grid (the grid does not bracket it)."""
    labels = sorted({r["label"] for r in tuning})
    out = []
    for label in labels:
        rs = [r for r in tuning if r["label"] == label]
        best = min(rs, key=lambda r: r["val_loss"])["lr"]
        if best in (min(r["lr"] for r in rs), max(r["lr"] for r in rs)):
            out.append(label)
    return out


def pretraining_experiment(cfg, lrs: dict[str, float] | None = None) -> list[dict]:
    """Each variant trained from each seed at its learning rate in `lrs` (default: every one at the middle of
    `cfg.lrs`) on the same multi-domain language and data order (both drawn from the seed, so runs of one seed are
    paired); one dict per run with the loss curves, validation curve, final validation loss, the seed's baselines
    (domain-blind bigram, the true source's loss), and routing statistics after training and at initialisation."""
    lrs = lrs or {label: cfg.lrs[len(cfg.lrs) // 2] for label, _, _ in variants(cfg)}
    runs = []
    for seed in cfg.seeds:
        _, train_ids, val_ids, val_domain, baselines = language(cfg, seed)
        for label, kind, d_low in variants(cfg):
            initial = routing_stats(build_model(kind, cfg, seed, d_low), val_ids, val_domain, cfg.n_domains)
            model, result, seconds = train_variant(cfg, kind, d_low, seed, lrs[label], train_ids, val_ids, label)
            runs.append({"label": label, "seed": seed, "lr": lrs[label], "losses": result.losses,
                         "evals": result.evals, "val_loss": result.evals[-1][1], "seconds": seconds, **baselines,
                         "n_params": sum(p.numel() for p in model.parameters()),
                         "initial_conf_entropy": initial["conf_entropy"],
                         **routing_stats(model, val_ids, val_domain, cfg.n_domains)})
    return runs


def throughput(cfg, seed: int) -> tuple[dict[str, list[float]], float]:
    """Training tokens/s (forward + backward of one layer's output and its Eq. 6 loss) of the routed MoE and of
    AoE at `bench_shape` = (d, d_ffn, d_low) on `bench_tokens` tokens, both layers and the tokens drawn from
    `seed`, timed in `cfg.bench_repeats` interleaved rounds (`icml25.ops.bench.interleaved`: rotating order, each
    unit at least 20 ms) on one thread, so that a change in machine load hits both alike: per layer, its tokens/s
    in each round (rounds pair them); and the share of the machine's CPU time other processes took meanwhile
    (`icml25.ops.timing.ForeignLoad`)."""
    d, d_ffn, d_low = cfg.bench_shape
    layers = {"MoE": MoEFFN(d, cfg.n_experts, cfg.top_k, d_ffn, cfg.alpha, seed),
              f"AoE d_low={d_low}": AoEFFN(d, cfg.n_experts, cfg.top_k, d_ffn, d_low, cfg.alpha, seed)}
    x = torch.randn(cfg.bench_tokens, d, generator=torch_generator(seed, "aoe_bench"))

    def step(layer):
        def go():
            (layer(x).square().mean() + layer.aux_loss).backward()
            layer.zero_grad(set_to_none=True)
        return go

    with one_thread(), ForeignLoad() as load:
        times = bench.interleaved({label: step(layer) for label, layer in layers.items()}, cfg.bench_repeats)
    return {label: [cfg.bench_tokens / t for t in ts] for label, ts in times.items()}, load.share


def throughput_blocks(cfg, seeds: Sequence[int]) -> tuple[list[dict[str, list[float]]], float]:
    """`throughput` once per seed, one timing block each: every block draws its own layers, routing and tokens
    (fresh tensors, so fresh allocations), which the rounds of one block share and the blocks do not. Returns each
    block's tokens/s per layer and round, and the share of the machine's CPU time other processes took while all
    the blocks ran."""
    with ForeignLoad() as load:
        blocks = [throughput(cfg, seed)[0] for seed in seeds]
    return blocks, load.share


def block_ratio(tps: dict[str, list[float]]) -> float:
    """One block's AoE tokens/s over the MoE's: the mean over its rounds of the per-round ratio (`tps` holds the
    MoE's per-round tokens/s first, AoE's second)."""
    moe_tps, aoe_tps = (np.asarray(v, dtype=float) for v in tps.values())
    return float(np.mean(aoe_tps / moe_tps))


def time_cv(tps: Sequence[float]) -> float:
    """The variation (sd / mean, population sd) across rounds of the time per token of one layer's tokens/s."""
    seconds = 1 / np.asarray(tps, dtype=float)
    return float(np.std(seconds) / np.mean(seconds))


def selection_demo(layer: RoutedLayer, x: torch.Tensor) -> dict:
    """What a layer decides for tokens `x` [T, d]: the scores it ranks by, the full probabilities, the top-k."""
    with torch.no_grad():
        scores = layer.router_logits(x) if isinstance(layer, MoEFFN) else aoe_scores(x, layer.w_down, layer.n_experts)[1]
        routing, probs = top_k_softmax(scores, layer.top_k)
    return {"scores": scores, "probs": probs, "index": routing.index, "weight": routing.weight}
