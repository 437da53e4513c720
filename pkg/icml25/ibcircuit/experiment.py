r"""IBCircuit: circuit discovery with the information bottleneck (ICML 2025), at the level of attention heads.

Each head $h$ gets a learnable mask $\lambda_h = \sigma(w_h)$. Its output $H$ is replaced by a noisy mix of
itself and its batch statistics (the paper's noise injection),

$$Z = \lambda H + (1-\lambda)\,\mu + (1-\lambda)\,\sigma\,\varepsilon,\qquad \varepsilon \sim \mathcal N(0, I),$$

so $\lambda = 1$ keeps the head and $\lambda = 0$ replaces it by noise carrying no information about the input.
With the base weights frozen, the masks minimise

$$\mathcal L = \underbrace{\mathrm{KL}\big(p(y\mid x)\,\|\,p_{\lambda}(y\mid x)\big)}_{\text{faithfulness}}
  + \beta\,\underbrace{\mathbb E\,\mathrm{KL}\big(\mathcal N(\lambda H + (1-\lambda)\mu, (1-\lambda)^2\sigma^2)
  \,\|\,\mathcal N(\mu, \sigma^2)\big)}_{\text{compression, an upper bound on } I(Z; X)},$$

the second in closed form, $\tfrac12[(1-\lambda)^2 + \lambda^2 (H-\mu)^2/\sigma^2 - 1] - \log(1-\lambda)$ per
element (exact; the official code drops the $-1$). Heads are ranked by $\lambda$. No corrupted prompts are needed.

The testbed: tiny 2-layer, 6-head transformers trained here on a synthetic Indirect Object Identification task
and a synthetic Greater-Than task, small enough that all $2^{12}$ head subsets can be scored exactly under mean
ablation (config knob `model` = "tiny"); baselines are attribution patching, single-head activation patching, ACDC (edge pruning by KL on the
head-level graph), greedy head pruning by KL and a random ranking. :class:`HeadModel` shows any Hugging Face causal
LM (GPT-2, Llama, Qwen...) through the same per-head interface, so IBCircuit, mean ablation and the patching
baselines run on it unchanged; the exhaustive ground truth and ACDC's edge graph need the tiny transformer.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..core import models, zoo
from ..core.claims import Claim, Effect, Equivalence, at_least
from ..core.config import COUNT, FRACTION, NONNEGATIVE, POSITIVE, SEED, make_config
from ..core.seeding import numpy_rng, one_thread, seeded, torch_generator

# --------------------------------------------------------------------------------------------------------------
# A tiny transformer whose head outputs can be intervened on
# --------------------------------------------------------------------------------------------------------------

HeadFn = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, head outputs [B, T, H, d_head]) -> same shape


class TinyTransformer(nn.Module):
    """Pre-LayerNorm decoder: learned positions, causal multi-head attention and a GELU MLP per layer. `forward`
    takes a `head_fn` that may rewrite each layer's per-head outputs before the output projection."""

    def __init__(self, vocab: int, seq_len: int, d_model: int = 48, n_heads: int = 6, n_layers: int = 2):
        super().__init__()
        self.n_heads, self.n_layers, self.d_head = n_heads, n_layers, d_model // n_heads
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.qkv = nn.ModuleList(nn.Linear(d_model, 3 * d_model) for _ in range(n_layers))
        self.out = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(n_layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(n_layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                               nn.Linear(4 * d_model, d_model)) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.unembed = nn.Linear(d_model, vocab)

    @property
    def n_total_heads(self) -> int:
        return self.n_heads * self.n_layers

    def heads(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Per-head attention outputs [B, T, H, d_head] of `layer` on the residual stream `x` [B, T, d]."""
        B, T, _ = x.shape
        q, k, v = self.qkv[layer](self.ln1[layer](x)).view(B, T, 3, self.n_heads, self.d_head).unbind(2)
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_head)
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        return torch.einsum("bhqk,bkhd->bqhd", att, v)

    def finish(self, layer: int, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """The rest of `layer`: output projection of the heads into the residual stream, then the MLP."""
        x = x + self.out[layer](heads.reshape(*heads.shape[:-2], -1))
        return x + self.mlp[layer](self.ln2[layer](x))

    def forward(self, ids: torch.Tensor, head_fn: HeadFn | None = None) -> torch.Tensor:
        """Logits at the last position, [B, vocab]. `head_fn` sees every layer's heads at every position; the last
        layer's output projection and MLP run at the last position only, the one the logits read."""
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for layer in range(self.n_layers):
            h = self.heads(layer, x)
            if head_fn is not None:
                h = head_fn(layer, h)
            if layer == self.n_layers - 1:
                x, h = x[:, -1:], h[:, -1:]
            x = self.finish(layer, x, h)
        return self.unembed(self.ln_f(x[:, -1]))


ATTENTION_OUTPUTS = (("self_attn", "o_proj"), ("attn", "c_proj"), ("self_attention", "dense"))
"""(attention module, its output projection) by family: Llama / Qwen / Mistral / Gemma, GPT-2, Falcon-like."""


class HeadModel(nn.Module):
    """Any Hugging Face causal LM with the per-head interface of :class:`TinyTransformer`: `forward(ids, head_fn)`
    gives the logits at the last position, `head_fn` rewriting each layer's per-head outputs [B, T, H, d_head],
    the input of the attention's output projection (a forward pre-hook on `o_proj`, GPT-2's `c_proj`...). With
    `vocab`, only the logits of the task's tokens (ids 0..vocab−1) are returned, as the tiny model has."""

    def __init__(self, lm: nn.Module, vocab: int | None = None):
        super().__init__()
        self.lm, self.vocab = lm.eval().requires_grad_(False), vocab
        cfg = lm.config
        self.n_layers, self.n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
        self.d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.projections = [self._projection(b) for b in models.decoder_blocks(lm)]

    @staticmethod
    def _projection(block: nn.Module) -> nn.Module:
        for attn, proj in ATTENTION_OUTPUTS:
            if hasattr(getattr(block, attn, None), proj):
                return getattr(getattr(block, attn), proj)
        raise ValueError(f"{type(block).__name__}: no attention output projection among {ATTENTION_OUTPUTS}")

    @property
    def n_total_heads(self) -> int:
        return self.n_heads * self.n_layers

    def forward(self, ids: torch.Tensor, head_fn: HeadFn | None = None) -> torch.Tensor:
        """Logits at the last position, [B, vocab]."""
        handles = []
        if head_fn is not None:
            for layer, proj in enumerate(self.projections):
                def pre(module, args, layer=layer):
                    x = args[0]
                    h = head_fn(layer, x.view(*x.shape[:-1], self.n_heads, self.d_head))
                    return (h.reshape(x.shape), *args[1:])
                handles.append(proj.register_forward_pre_hook(pre))
        try:
            return self.lm(input_ids=ids.to(self.lm.device)).logits[:, -1, :self.vocab].float()
        finally:
            for hd in handles:
                hd.remove()


# --------------------------------------------------------------------------------------------------------------
# Tasks: synthetic IOI and Greater-Than
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompts:
    """Fixed-length prompts with, per prompt, the correct answer token and the token set that counts against it
    (IOI: the subject name; Greater-Than: years <= YY), plus matched corrupted prompts for the patching
    baselines."""

    ids: torch.Tensor  # [P, T]
    corrupt: torch.Tensor  # [P, T]
    answer: torch.Tensor  # [P] the training target
    good: torch.Tensor  # [P, vocab] bool: tokens that count for the metric
    bad: torch.Tensor  # [P, vocab] bool: tokens that count against it

    def __len__(self) -> int:
        return self.ids.shape[0]


class IOITask:
    """`BOS A B f f S f END -> IO`: two names, fillers, the subject S (one of the two) again; the answer is the
    indirect object IO, the name that appeared once. Metric: logit(IO) - logit(S). Corruption (ABC): S is
    replaced by a third name, so the prompt no longer says which name to avoid."""

    name = "ioi"

    def __init__(self, n_names: int = 10, n_fillers: int = 6):
        self.n_names, self.n_fillers = n_names, n_fillers
        self.bos, self.end = 0, 1
        self.names = list(range(2, 2 + n_names))
        self.fillers = list(range(2 + n_names, 2 + n_names + n_fillers))
        self.vocab, self.seq_len = 2 + n_names + n_fillers, 8

    def sample(self, n: int, generator: torch.Generator) -> Prompts:
        if n < 1:
            raise ValueError(f"need at least one prompt, got n={n}")
        g = generator
        perm = torch.stack([torch.randperm(self.n_names, generator=g)[:3] for _ in range(n)]) + 2
        a, b, c = perm.unbind(1)
        s_is_a = torch.rand(n, generator=g) < 0.5
        s, io = torch.where(s_is_a, a, b), torch.where(s_is_a, b, a)
        f = torch.randint(self.n_fillers, (n, 3), generator=g) + self.names[-1] + 1
        row = lambda subj: torch.stack([torch.full((n,), self.bos), a, b, f[:, 0], f[:, 1], subj, f[:, 2],  # noqa: E731
                                        torch.full((n,), self.end)], 1)
        good = torch.zeros(n, self.vocab, dtype=torch.bool)
        bad = torch.zeros_like(good)
        good[torch.arange(n), io] = True
        bad[torch.arange(n), s] = True
        return Prompts(row(s), row(c), io, good, bad)


class GreaterThanTask:
    """`BOS noun from YY to -> ZZ` with ZZ uniform over the years after YY (years 02..98 are single tokens).
    Metric: P(year > YY) - P(year <= YY). Corruption: YY replaced by 01, as in Hanna et al."""

    name = "greater_than"

    def __init__(self, n_nouns: int = 5, n_years: int = 100):
        self.n_years = n_years
        self.bos, self.from_, self.to = 0, 1, 2
        self.year0 = 3
        self.nouns = list(range(self.year0 + n_years, self.year0 + n_years + n_nouns))
        self.vocab, self.seq_len = self.year0 + n_years + n_nouns, 5

    def sample(self, n: int, generator: torch.Generator) -> Prompts:
        if n < 1:
            raise ValueError(f"need at least one prompt, got n={n}")
        g = generator
        yy = torch.randint(2, self.n_years - 2, (n,), generator=g)
        zz = yy + 1 + (torch.rand(n, generator=g) * (self.n_years - 1 - yy)).long()
        noun = torch.tensor(self.nouns)[torch.randint(len(self.nouns), (n,), generator=g)]
        row = lambda y: torch.stack([torch.full((n,), self.bos), noun, torch.full((n,), self.from_),  # noqa: E731
                                     y + self.year0, torch.full((n,), self.to)], 1)
        years = torch.arange(self.vocab) - self.year0
        is_year = (years >= 0) & (years < self.n_years)
        good = is_year & (years[None] > yy[:, None])
        bad = is_year & (years[None] <= yy[:, None])
        return Prompts(row(yy), row(torch.ones_like(yy)), zz + self.year0, good, bad)


TASKS = {"ioi": IOITask, "greater_than": GreaterThanTask}


def metric(logits: torch.Tensor, prompts: Prompts) -> torch.Tensor:
    """Per prompt: IOI's logit difference (one good, one bad token) or Greater-Than's probability difference."""
    if int(prompts.good.sum(1).max()) == 1:
        return (logits * prompts.good).sum(1) - (logits * prompts.bad).sum(1)
    p = logits.softmax(-1)
    return (p * prompts.good).sum(1) - (p * prompts.bad).sum(1)


def train_models(task, cfg, seeds: Sequence[int]) -> list[TinyTransformer]:
    """Train one tiny transformer per seed on the task's answer token (cross-entropy at the last position, AdamW),
    every seed in one batched run: the seeds' weights are stacked and the forward pass is vmapped over them, each
    seed with its own initialisation, its own batches and its own loss, so each model is the one a separate run
    would train (up to float rounding; the per-step cost of a model this small is mostly fixed overhead)."""
    from torch.func import functional_call, stack_module_state, vmap

    nets = []
    for seed in seeds:
        with seeded(seed, "ibcircuit-init", task.name):
            nets.append(TinyTransformer(task.vocab, task.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers))
    params, buffers = stack_module_state(nets)
    shape = TinyTransformer(task.vocab, task.seq_len, cfg.d_model, cfg.n_heads, cfg.n_layers).to("meta")
    forward = vmap(lambda p, b, ids: functional_call(shape, (p, b), (ids,)))
    opt = torch.optim.AdamW(params.values(), lr=cfg.lr, weight_decay=0.01, fused=True)
    gens = [torch_generator(seed, "ibcircuit-train", task.name) for seed in seeds]
    for _ in range(cfg.train_steps):
        batches = [task.sample(cfg.batch_size, g) for g in gens]
        logits = forward(params, buffers, torch.stack([b.ids for b in batches]))
        answers = torch.stack([b.answer for b in batches])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), answers.flatten(), reduction="none")
        opt.zero_grad(set_to_none=True)
        loss.view(len(seeds), -1).mean(1).sum().backward()  # each seed's gradient is that of its own mean loss
        opt.step()
    for i, net in enumerate(nets):
        net.load_state_dict({k: v[i].detach() for k, v in params.items()})
        net.eval().requires_grad_(False)
    return nets


def load_models(task, cfg, seeds: Sequence[int]) -> list[TinyTransformer | HeadModel]:
    """The model whose circuit is searched, per seed: `cfg.model` "tiny" trains the tiny transformer on `task` here
    (:func:`train_models`); any other value is a zoo name, checkpoint folder or Hub id, loaded frozen through
    `models.get` and seen through :class:`HeadModel` (the task's token ids must lie in its vocabulary)."""
    if cfg.model == "tiny":
        with one_thread():  # the same weights whatever the caller's thread count, so the cached masks fit them
            return train_models(task, cfg, seeds)
    out = []
    for seed in seeds:
        lm = models.get(cfg.model, cfg.scale, seed).model
        if lm.get_input_embeddings().num_embeddings < task.vocab:
            raise ValueError(f"model {cfg.model!r}: its vocabulary is smaller than the task's {task.vocab} tokens")
        out.append(HeadModel(lm, task.vocab))
    return out


# --------------------------------------------------------------------------------------------------------------
# Interventions: batch statistics, mean ablation of head subsets, and the IB noise
# --------------------------------------------------------------------------------------------------------------


def head_stats(model: TinyTransformer, prompts: Prompts) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the mean and standard deviation over the prompts of each head's clean output, [T, H, d_head]."""
    if len(prompts) < 2:
        raise ValueError(f"batch statistics need at least 2 prompts, got {len(prompts)}")
    stats = []

    def record(layer, h):
        stats.append((h.mean(0), h.std(0)))
        return h

    with torch.no_grad():
        model(prompts.ids, record)
    return stats


def _check_heads(model: TinyTransformer, heads: Sequence[int]) -> None:
    bad = [h for h in heads if not 0 <= h < model.n_total_heads]
    if bad:
        raise ValueError(f"head index {bad} out of range; valid heads are 0..{model.n_total_heads - 1} "
                         f"(layer * {model.n_heads} + head)")


def masks_from_subsets(model: TinyTransformer, subsets: Sequence[Sequence[int]]) -> torch.Tensor:
    """[K, n_heads_total] float masks, 1 for the heads kept in each subset."""
    out = torch.zeros(len(subsets), model.n_total_heads)
    for i, s in enumerate(subsets):
        _check_heads(model, s)
        out[i, list(s)] = 1.0
    return out


def ablated_logits(model: TinyTransformer, prompts: Prompts, masks: torch.Tensor, stats,
                   chunk: int = 64) -> torch.Tensor:
    """Logits [K, P, vocab] with, for each of the K masks, the masked-out heads replaced by their mean output
    (mean ablation). Runs K x P forwards in chunks of `chunk` masks."""
    if len(prompts) == 0:
        raise ValueError("empty prompt set")
    P, H = len(prompts), model.n_heads
    out = []
    for block in masks.split(chunk):
        K = block.shape[0]

        def ablate(layer, h):
            m = block[:, layer * H:(layer + 1) * H].reshape(K, 1, 1, H, 1)
            h = h.view(K, P, *h.shape[1:])
            return (m * h + (1 - m) * stats[layer][0]).reshape(K * P, *h.shape[2:])

        with torch.no_grad():
            out.append(model(prompts.ids.repeat(K, 1), ablate).view(K, P, -1))
    return torch.cat(out)


def kl_from_full(full_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p_full || p) at the answer position, averaged over prompts; broadcasts over leading dims of `logits`."""
    lp_full = full_logits.log_softmax(-1)
    return (lp_full.exp() * (lp_full - logits.log_softmax(-1))).sum(-1).mean(-1)


@dataclass
class SubsetScores:
    """Faithfulness of head subsets: KL from the full model and recovered fraction of the metric."""

    masks: torch.Tensor  # [K, n_heads_total]
    kl: np.ndarray  # [K]
    recovery: np.ndarray  # [K]: (metric - metric_all_ablated) / (metric_full - metric_all_ablated)


def score_subsets(model, prompts: Prompts, masks: torch.Tensor, stats) -> SubsetScores:
    return _scores(model, prompts, masks, ablated_logits(model, prompts, masks, stats), stats)


def _scores(model, prompts: Prompts, masks: torch.Tensor, logits: torch.Tensor, stats) -> SubsetScores:
    with torch.no_grad():
        full = model(prompts.ids)
        none = ablated_logits(model, prompts, torch.zeros(1, model.n_total_heads), stats)[0]
    m_full, m_none = metric(full, prompts).mean(), metric(none, prompts).mean()
    m = torch.stack([metric(lg, prompts).mean() for lg in logits])
    return SubsetScores(masks, kl_from_full(full, logits).numpy(), ((m - m_none) / (m_full - m_none)).numpy())


def exhaustive(model, prompts: Prompts, stats) -> SubsetScores:
    """Every one of the 2^(heads) subsets, scored under mean ablation (the ground truth). The earlier layers run
    once per mask of their heads; the last layer's heads at the answer position are then combined with all of
    its 2^H masks at once (its heads do not depend on its own mask)."""
    if not isinstance(model, TinyTransformer):
        raise ValueError(f"exhaustive scoring of 2^{model.n_total_heads} head subsets needs the tiny transformer "
                         "(config model='tiny')")
    H, L = model.n_heads, model.n_layers
    last = torch.tensor(list(itertools.product([0.0, 1.0], repeat=H)))  # [2^H, H]
    early = torch.tensor(list(itertools.product([0.0, 1.0], repeat=H * (L - 1))))
    P = len(prompts)
    mu_last = stats[-1][0][-1]  # [H, d_head] at the answer position
    logits = []
    with torch.no_grad():
        for m_early in early:
            x = model.embed(prompts.ids) + model.pos[: prompts.ids.shape[1]]
            for layer in range(L - 1):
                m = m_early[layer * H:(layer + 1) * H].view(1, 1, H, 1)
                x = model.finish(layer, x, m * model.heads(layer, x) + (1 - m) * stats[layer][0])
            h = model.heads(L - 1, x)[:, -1]  # [P, H, d_head]
            m = last.view(-1, 1, H, 1)
            mixed = m * h + (1 - m) * mu_last  # [2^H, P, H, d_head]
            x_last = model.finish(L - 1, x[:, -1].expand(len(last), P, -1), mixed)
            logits.append(model.unembed(model.ln_f(x_last)))
    masks = torch.cat([torch.cat([m_early.expand(len(last), -1), last], 1) for m_early in early])
    return _scores(model, prompts, masks, torch.cat(logits), stats)


def optimum_by_size(scores: SubsetScores) -> np.ndarray:
    """The lowest KL over subsets of each size 0..n (the exhaustive optimum)."""
    sizes = scores.masks.sum(1).long().numpy()
    return np.array([scores.kl[sizes == k].min() for k in range(scores.masks.shape[1] + 1)])


def expected_random_kl(scores: SubsetScores) -> np.ndarray:
    """The expected KL of a random ranking's top-k circuit at each size k = 0..n: a random ranking's top k heads
    are a uniformly random k-subset, so this is the mean KL over all subsets of size k (exact, from the exhaustive
    scores; one random permutation is one draw from it)."""
    sizes = scores.masks.sum(1).long().numpy()
    return np.array([scores.kl[sizes == k].mean() for k in range(scores.masks.shape[1] + 1)])


def true_circuit(scores: SubsetScores, threshold: float) -> torch.Tensor:
    """The smallest subset recovering at least `threshold` of the metric (ties: lowest KL), as a 0/1 mask."""
    sizes = scores.masks.sum(1).numpy()
    ok = np.flatnonzero(scores.recovery >= threshold)
    best = min(ok, key=lambda i: (sizes[i], scores.kl[i]))
    return scores.masks[best]


# --------------------------------------------------------------------------------------------------------------
# IBCircuit
# --------------------------------------------------------------------------------------------------------------


def compression_kl(lam: torch.Tensor, h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    r"""Elementwise $\mathrm{KL}(\mathcal N(\lambda h + (1-\lambda)\mu, (1-\lambda)^2\sigma^2)\,\|\,
    \mathcal N(\mu, \sigma^2)) = \tfrac12[(1-\lambda)^2 + \lambda^2 (h-\mu)^2/\sigma^2 - 1] - \log(1-\lambda)$."""
    var_ratio = (1 - lam) ** 2
    return 0.5 * (var_ratio + lam**2 * (h - mu) ** 2 / sigma**2 - 1 - torch.log(var_ratio))


def noisy_heads(lam: torch.Tensor, h: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor,
                eps: torch.Tensor) -> torch.Tensor:
    """Z = λh + (1-λ)μ + (1-λ)σε over head outputs `h` [B, T, H, d_head]; the official code draws one ε shaped
    like μ [T, H, d_head], shared by the prompts. `lam` broadcasts against `h`: [H] (one mask per head) or
    [B, 1, H, 1] (one per prompt and head)."""
    lam = lam.view(1, 1, -1, 1) if lam.dim() == 1 else lam
    return lam * h + (1 - lam) * mu + (1 - lam) * sigma * eps


LAMBDA_GUARD = 1e-6


@dataclass
class IBResult:
    lam: np.ndarray  # [n_heads_total] final masks averaged over the prompts: the head scores
    losses: list[float]


def _bottleneck(lam: torch.Tensor, h: torch.Tensor, eps: torch.Tensor, sigma_floor: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer of the IB pass: the noisy heads Z (`noisy_heads`) with μ, σ the batch statistics of `h` itself,
    and the mean compression KL of that layer."""
    sd, mu = torch.std_mean(h, dim=0)
    sd = sd.clamp(min=sigma_floor)
    return noisy_heads(lam, h, mu, sd, eps), compression_kl(lam, h, mu, sd).mean()


def _ib_loss(forward: Callable, ids: torch.Tensor, full: torch.Tensor, w: torch.Tensor, eps: torch.Tensor,
             n_heads: int, beta: float, sigma_floor: float) -> torch.Tensor:
    """Faithfulness KL(full ‖ noisy) + β · compression KL (averaged over layers) of one model under mask logits `w`
    [B, n_heads_total] and noise `eps` [layers, T, H, d_head]; `forward(ids, head_fn)` runs the model."""
    lam = torch.sigmoid(w).clamp(max=1 - LAMBDA_GUARD)  # keeps log(1 - λ) finite
    comp = []

    def inject(layer, h):
        z, kl = _bottleneck(lam[:, layer * n_heads:(layer + 1) * n_heads].view(len(ids), 1, n_heads, 1), h,
                            eps[layer], sigma_floor)
        comp.append(kl)
        return z

    logits = forward(ids, inject)
    return kl_from_full(full, logits) + beta * torch.stack(comp).mean()


def _noise(model, prompts: Prompts, generator: torch.Generator) -> torch.Tensor:
    """One step's noise ε per layer, [layers, T, H, d_head]: one draw shaped like μ per layer, shared by the
    prompts, as the official code draws it."""
    return torch.stack([torch.randn((prompts.ids.shape[1], model.n_heads, model.d_head), generator=generator)
                        for _ in range(model.n_layers)])


def ib_circuit(model: TinyTransformer | HeadModel, prompts: Prompts, beta: float, steps: int, lr: float, seed: int,
               init: float = 5.0, sigma_floor: float = 1e-4) -> IBResult:
    """IBCircuit as the official code optimises it: one mask logit per prompt and head (λ = sigmoid(w), w
    initialised at `init` so every head starts kept); in every forward pass each layer's noise takes its mean μ
    and spread σ over the batch of that layer's head outputs *in the noisy pass itself* (the upstream heads
    already noised, gradients flowing through μ and σ), with one noise draw shared by the prompts; the loss is the
    faithfulness KL(full ‖ noisy) + β · the compression KL averaged over elements and layers (Adam on the masks,
    the model's weights frozen, full batch). The head scores are the masks averaged over the prompts. For several
    tiny transformers at once, :func:`ib_circuits` gives the same result in one batched run."""
    return ib_circuits([model], [prompts], beta, steps, lr, [seed], init, sigma_floor)[0]


def ib_circuits(models: Sequence[TinyTransformer | HeadModel], prompts: Sequence[Prompts],
                beta: float | Sequence[float], steps: int, lr: float, seeds: Sequence[int], init: float = 5.0,
                sigma_floor: float = 1e-4) -> list[IBResult]:
    """:func:`ib_circuit` for each (model, prompts, seed, and β when `beta` is a list), all in one batched run when the models are tiny
    transformers of one shape: their weights are stacked and the IB loss is vmapped over them, each with its own
    masks, prompts and noise generator (Adam acts elementwise, so each is the run a separate call would make, up
    to float rounding). A Hugging Face model runs on its own."""
    from torch.func import functional_call, stack_module_state, vmap

    if any(len(p) < 2 for p in prompts):
        raise ValueError(f"IBCircuit needs at least 2 prompts for batch statistics, got {[len(p) for p in prompts]}")
    if not all(isinstance(m, TinyTransformer) for m in models) and len(models) > 1:
        betas = list(beta) if isinstance(beta, Sequence) else [beta] * len(models)
        return [ib_circuit(m, p, b, steps, lr, s, init, sigma_floor)
                for m, p, b, s in zip(models, prompts, betas, seeds)]
    ids = torch.stack([p.ids for p in prompts])
    with torch.no_grad():
        full = torch.stack([m(p.ids) for m, p in zip(models, prompts)])
    w = torch.full((len(models), ids.shape[1], models[0].n_total_heads), float(init), requires_grad=True)
    opt = torch.optim.Adam([w], lr=lr)
    gens = [torch_generator(seed, "ib-noise") for seed in seeds]
    H = models[0].n_heads
    betas = torch.as_tensor(beta, dtype=torch.float32).expand(len(models))
    if isinstance(models[0], TinyTransformer):
        params, buffers = stack_module_state(models)
        params = {k: v.detach() for k, v in params.items()}
        shape = copy.deepcopy(models[0]).to("meta")
        loss_fn = vmap(lambda p, b, i, f, w_, e, bt: _ib_loss(
            lambda x, fn: functional_call(shape, (p, b), (x, fn)), i, f, w_, e, H, bt, sigma_floor))
        batch_loss = lambda eps: loss_fn(params, buffers, ids, full, w, eps, betas)  # noqa: E731
    else:
        batch_loss = lambda eps: _ib_loss(models[0], ids[0], full[0], w[0], eps[0], H, betas[0],  # noqa: E731
                                          sigma_floor)[None]
    losses = []
    for _ in range(steps):
        loss = batch_loss(torch.stack([_noise(m, p, g) for m, p, g in zip(models, prompts, gens)]))
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # each model's gradient is that of its own loss
        opt.step()
        losses.append(loss.detach())
    curves = torch.stack(losses, 1).tolist() if losses else [[] for _ in models]
    lam = torch.sigmoid(w).detach().mean(1).numpy()
    return [IBResult(lam[i], curves[i]) for i in range(len(models))]


# --------------------------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------------------------


def attribution_patching(model, prompts: Prompts) -> np.ndarray:
    """Node-level attribution patching: |Σ (h_clean - h_corrupt) · ∂metric/∂h| per head, a first-order
    estimate of patching the corrupted output in, averaged over prompts."""
    corrupt_h, clean_h = [], []

    def keep(store):
        def fn(layer, h):
            if store is clean_h:
                h = h.detach().requires_grad_(True)
            store.append(h)
            return h
        return fn

    with torch.no_grad():
        model(prompts.corrupt, keep(corrupt_h))
    with torch.enable_grad():
        m = metric(model(prompts.ids, keep(clean_h)), prompts).sum()
        grads = torch.autograd.grad(m, clean_h)
    scores = [((c.detach() - k) * gr).sum(-1).sum(1) for c, k, gr in zip(clean_h, corrupt_h, grads)]  # [P, H]
    return torch.cat(scores, 1).mean(0).abs().numpy()


def activation_patching(model, prompts: Prompts) -> np.ndarray:
    """Single-head activation patching: the drop of the mean metric when one head's output is taken from the
    corrupted prompt."""
    corrupt_h = []
    with torch.no_grad():
        model(prompts.corrupt, lambda layer, h: corrupt_h.append(h) or h)
        base = metric(model(prompts.ids), prompts).mean()
        out = []
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                def patch(lyr, h, layer=layer, head=head):
                    if lyr == layer:
                        h = h.clone()
                        h[:, :, head] = corrupt_h[layer][:, :, head]
                    return h
                out.append(float(base - metric(model(prompts.ids, patch), prompts).mean()))
    return np.abs(np.array(out))


def greedy_pruning(model, prompts: Prompts, stats) -> np.ndarray:
    """Greedy head pruning under mean ablation (a node-level, threshold-free relative of ACDC): repeatedly remove
    the head whose removal raises the KL least. Score = the step at which a head was removed (kept longest = most
    important)."""
    n = model.n_total_heads
    kept, score = list(range(n)), np.zeros(n)
    for step in range(n):
        trials = [[h for h in kept if h != drop] for drop in kept]
        kl = score_subsets(model, prompts, masks_from_subsets(model, trials), stats).kl
        drop = kept[int(np.argmin(kl))]
        score[drop] = step
        kept.remove(drop)
    return score


# --- ACDC (Conmy et al., 2023) on the head-level computational graph -------------------------------------------


@dataclass(frozen=True)
class Graph:
    """The computational graph ACDC prunes: nodes in topological order ("emb", then per layer its heads "a{l}.{h}"
    and its MLP "m{l}", then "logits"); an edge (s, r) for every node s whose output the residual stream carries
    into the input of r (every earlier writer)."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, model: TinyTransformer) -> Graph:
        nodes, writers, edges = ["emb"], [0], []

        def add(name):
            nodes.append(name)
            edges.extend((s, len(nodes) - 1) for s in writers)
            return len(nodes) - 1

        for layer in range(model.n_layers):
            heads = [add(f"a{layer}.{h}") for h in range(model.n_heads)]
            writers += heads
            writers.append(add(f"m{layer}"))
        add("logits")
        return cls(tuple(nodes), tuple(edges))

    @functools.cached_property
    def out_edges(self) -> tuple[tuple[list[int], list[int]], ...]:
        """Per node: the edges leaving it and their receivers."""
        return tuple(([e for e, (s, _) in enumerate(self.edges) if s == n],
                      [r for s, r in self.edges if s == n]) for n in range(len(self.nodes)))

    def head_index(self, node: int, n_heads: int) -> int | None:
        """`layer * n_heads + head` of an attention-head node, None for the others."""
        name = self.nodes[node]
        if not name.startswith("a"):
            return None
        layer, head = map(int, name[1:].split("."))
        return layer * n_heads + head


def _head_out(model: TinyTransformer, layer: int, head: int, x: torch.Tensor, last_only: bool) -> torch.Tensor:
    """One head's write into the residual stream, W_O[:, head] z_head + b_O / H, from its own input `x` [..., T, d]
    (`last_only`: the query at the last position only)."""
    d, dh = x.shape[-1], model.d_head
    ln = model.ln1[layer](x)
    w, b = model.qkv[layer].weight, model.qkv[layer].bias
    rows = [slice(j * d + head * dh, j * d + (head + 1) * dh) for j in range(3)]
    q = (ln[..., -1:, :] if last_only else ln) @ w[rows[0]].T + b[rows[0]]
    k, v = (ln @ w[r].T + b[r] for r in rows[1:])
    att = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if not last_only:
        T = x.shape[-2]
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    out = model.out[layer]
    return att.softmax(-1) @ v @ out.weight[:, head * dh:(head + 1) * dh].T + out.bias / model.n_heads


def edge_outputs(model: TinyTransformer, graph: Graph, ids: torch.Tensor, masks: torch.Tensor,
                 patched: list[torch.Tensor] | None = None,
                 clean: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Every node's output with the edges of each of the K `masks` [K, E] kept (1) or patched (0): a receiver reads
    Σ_s m_sr·out_s + (1 − m_sr)·patched_s. The last layer and the logits are computed at the answer position only
    (the last layer's heads still read every position for their keys and values).
    A node whose incoming edges are all kept in every mask, and whose senders are all clean, reuses `clean`
    (the outputs with every edge kept). Returns [out_node] with shape [K or 1, P, T or 1, d] (logits: [K, P, V])."""
    L = model.n_layers
    into: dict[int, list[tuple[int, int]]] = {}
    for e, (s, r) in enumerate(graph.edges):
        into.setdefault(r, []).append((e, s))
    outs: list[torch.Tensor] = [(model.embed(ids) + model.pos[: ids.shape[1]])[None]]
    fresh = [False]
    for r in range(1, len(graph.nodes)):
        name = graph.nodes[r]
        last = name in ("logits", f"m{L - 1}")  # read at the answer position only
        untouched = not any(fresh[s] for _, s in into[r]) and bool(masks[:, [e for e, _ in into[r]]].all())
        if clean is not None and untouched:
            outs.append(clean[r])
            fresh.append(False)
            continue
        at = (lambda t: t[..., -1:, :] if t.shape[-2] > 1 else t) if last else (lambda t: t)
        if patched is None:
            x = sum(at(outs[s]) for _, s in into[r])
        else:  # Σ_s patched_s + Σ_s m_sr (out_s − patched_s), the clean senders in one contraction
            x = sum(at(patched[s]) for _, s in into[r])
            still = [(e, s) for e, s in into[r] if not fresh[s]]
            if still:
                d = torch.cat([at(outs[s]) - at(patched[s]) for _, s in still])
                x = x + torch.einsum("ks,s...->k...", masks[:, [e for e, _ in still]], d)
            for e, s in into[r]:
                if fresh[s]:
                    x = x + masks[:, e].view(-1, 1, 1, 1) * (at(outs[s]) - at(patched[s]))
        if name == "logits":
            out = model.unembed(model.ln_f(x[..., -1, :]))
        elif name.startswith("a"):
            layer, head = map(int, name[1:].split("."))
            out = _head_out(model, layer, head, x, last_only=layer == L - 1)
        else:
            layer = int(name[1:])
            out = model.mlp[layer](model.ln2[layer](x))
        outs.append(out)
        fresh.append(True)
    return outs


def acdc(model: TinyTransformer, prompts: Prompts, thresholds: Sequence[float],
         ablation: str = "corrupt") -> torch.Tensor:
    """ACDC (Conmy et al. 2023, Algorithm 1) for every threshold τ at once: visit the receivers from the logits
    back to the embeddings, and each receiver's incoming edges from its latest sender back; remove an edge when
    KL(full ‖ circuit without it) − KL(full ‖ circuit) < τ. A removed edge carries the sender's output on the
    corrupted prompt (`ablation="corrupt"`, ACDC's default) or its mean over the clean prompts ("mean").
    Returns the kept-edge masks [len(thresholds), E]."""
    if ablation not in ("corrupt", "mean"):
        raise ValueError(f"unknown ablation {ablation!r}; valid: corrupt, mean")
    graph = Graph.of(model)
    E = len(graph.edges)
    with torch.no_grad():
        clean = edge_outputs(model, graph, prompts.ids, torch.ones(1, E))
        patched = (edge_outputs(model, graph, prompts.corrupt, torch.ones(1, E)) if ablation == "corrupt"
                   else [o.mean(1, keepdim=True) for o in clean])
        full = clean[-1][0]
        tau = torch.as_tensor(thresholds, dtype=torch.float32)
        masks = torch.ones(len(tau), E)
        current = torch.zeros(len(tau))  # KL of the full graph from itself
        for e in sorted(range(E), key=lambda e: (-graph.edges[e][1], -graph.edges[e][0])):
            # an edge into a receiver with no path left to the logits changes nothing: its KL step is 0 < τ
            live = torch.nonzero(_alive(graph, masks)[:, graph.edges[e][1]]).flatten()
            masks[:, e] = 0.0
            if len(live):
                kl = kl_from_full(full, edge_outputs(model, graph, prompts.ids, masks[live], patched, clean)[-1])
                keep = kl - current[live] >= tau[live]
                masks[live[keep], e] = 1.0
                current[live[~keep]] = kl[~keep]
    return masks


def _alive(graph: Graph, masks: torch.Tensor) -> torch.Tensor:
    """[K, nodes] bool: the nodes with a path of kept edges to the logits in each edge mask."""
    alive = torch.zeros(masks.shape[0], len(graph.nodes), dtype=torch.bool)
    alive[:, -1] = True
    for n in range(len(graph.nodes) - 2, -1, -1):
        edges, receivers = graph.out_edges[n]
        alive[:, n] = (masks[:, edges].bool() & alive[:, receivers]).any(1)
    return alive


def circuit_heads(model: TinyTransformer, masks: torch.Tensor) -> torch.Tensor:
    """[K, n_heads_total] 0/1: the heads with a path of kept edges to the logits in each edge mask."""
    graph = Graph.of(model)
    alive = _alive(graph, masks)
    heads = torch.zeros(masks.shape[0], model.n_total_heads)
    for node in range(len(graph.nodes)):
        k = graph.head_index(node, model.n_heads)
        if k is not None:
            heads[:, k] = alive[:, node].float()
    return heads


def acdc_scores(model: TinyTransformer, prompts: Prompts, thresholds: Sequence[float],
                ablation: str = "corrupt") -> np.ndarray:
    """A head ranking from ACDC's circuits over the threshold sweep: the number of thresholds at which the head
    is in the circuit (kept at larger τ = more important), ties broken by its kept outgoing edges over the sweep
    (a fraction below 1)."""
    masks = acdc(model, prompts, thresholds, ablation)
    graph = Graph.of(model)
    heads = circuit_heads(model, masks)
    out_edges = torch.zeros(model.n_total_heads)
    for e, (s, _) in enumerate(graph.edges):
        k = graph.head_index(s, model.n_heads)
        if k is not None:
            out_edges[k] += masks[:, e].sum()
    return (heads.sum(0) + out_edges / (out_edges.max() + 1)).numpy()


def random_ranking(n: int, seed: int) -> np.ndarray:
    return numpy_rng(seed, "random-ranking").permutation(n).astype(float)


def top_k_masks(scores: np.ndarray) -> torch.Tensor:
    """[n+1, n] masks keeping the k highest-scoring heads, k = 0..n (ties by index)."""
    order = np.argsort(-scores, kind="stable")
    masks = torch.zeros(len(scores) + 1, len(scores))
    for k in range(1, len(scores) + 1):
        masks[k, order[:k]] = 1.0
    return masks


def roc_auc(scores: np.ndarray, members: np.ndarray) -> float:
    """Probability that a random member of the true circuit outscores a random non-member (ties count half)."""
    members = np.asarray(members, bool)
    pos, neg = np.asarray(scores)[members], np.asarray(scores)[~members]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return float(((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg)))


def circuit_size_at(recovery: np.ndarray, threshold: float) -> int:
    """The smallest k whose top-k circuit recovers at least `threshold` of the metric."""
    return int(np.flatnonzero(np.asarray(recovery) >= threshold)[0])


# --------------------------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------------------------

#: the seeds on which the chapter's regime (model size, training length, prompts, ACDC's thresholds) was chosen and
#: its earlier verdicts were decided; contract v2 decides on fresh seeds from 100
CALIBRATION_SEEDS = [0, 1, 2, 3, 4]

config = make_config({
    "smoke": {"model": "tiny", "seeds": [100, 101], "calibration_seeds": CALIBRATION_SEEDS, "d_model": 24,
              "n_heads": 6, "n_layers": 2, "lr": 3e-3, "train_steps": 40, "batch_size": 32, "n_prompts": 16,
              "ib_steps": 20, "ib_lr": 0.05, "beta": 1.0, "recovery_threshold": 0.9, "beta_sweep": [0.3, 3.0],
              "acdc_thresholds": 8},
    "ci": {"model": "tiny", "seeds": list(range(100, 108)), "calibration_seeds": CALIBRATION_SEEDS, "d_model": 48,
           "n_heads": 6, "n_layers": 2, "lr": 3e-3, "train_steps": 300, "batch_size": 64, "n_prompts": 32,
           "ib_steps": 1300, "ib_lr": 0.05, "beta": 1.0, "recovery_threshold": 0.9, "beta_sweep": [0.1, 1.0, 10.0],
           "acdc_thresholds": 16},
    "full": {"model": "openai-community/gpt2", "seeds": list(range(100, 108)), "calibration_seeds": CALIBRATION_SEEDS,
             "d_model": 96, "n_heads": 6, "n_layers": 2, "lr": 1e-3, "train_steps": 5000, "batch_size": 128,
             "n_prompts": 256, "ib_steps": 1300, "ib_lr": 0.05, "beta": 1.0, "recovery_threshold": 0.9,
             "beta_sweep": [0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0], "acdc_thresholds": 32},
},
    seeds=SEED, calibration_seeds=SEED, d_model=COUNT, n_heads=COUNT, n_layers=COUNT, lr=POSITIVE,
    train_steps=COUNT, batch_size=COUNT, n_prompts=COUNT, ib_steps=COUNT, ib_lr=POSITIVE, beta=NONNEGATIVE,
    recovery_threshold=FRACTION, beta_sweep=NONNEGATIVE, acdc_thresholds=COUNT)

METHODS = ("IBCircuit", "attribution patching", "activation patching", "ACDC", "greedy pruning", "random")
ACDC_TAU_RANGE = (1e-4, 3.0)
"""ACDC's thresholds τ (nats of KL), log-spaced over this range: from keeping nearly every edge to pruning all."""


@dataclass
class SeedResult:
    """Everything measured for one task and seed."""

    task_accuracy: float
    head_scores: dict[str, np.ndarray]
    kl: dict[str, np.ndarray]  # per method, KL of the top-k circuit, k = 0..n
    recovery: dict[str, np.ndarray]
    optimum_kl: np.ndarray  # exhaustive best KL per size
    random_kl: np.ndarray  # expected KL of a random ranking's top-k circuit per size (mean over all k-subsets)
    true_circuit: np.ndarray  # 0/1 per head
    ib: IBResult
    model: TinyTransformer
    prompts: Prompts
    seed: int


def run_seeds(task_name: str, cfg, seeds: Sequence[int] | None = None) -> list[SeedResult]:
    """Per seed (default `cfg.seeds`): the seed's model (the tiny ones trained together, :func:`load_models`), its
    evaluation prompts, IBCircuit's masks (the seeds' optimisations batched together, :func:`ib_circuits`), then
    every other method scored on it (:func:`run_seed`)."""
    if task_name not in TASKS:
        raise ValueError(f"unknown task {task_name!r}; valid tasks: {', '.join(TASKS)}")
    seeds = cfg.seeds if seeds is None else seeds
    task = TASKS[task_name]()
    nets = load_models(task, cfg, seeds)
    prompts = [task.sample(cfg.n_prompts, torch_generator(s, "ibcircuit-eval", task_name)) for s in seeds]
    ibs = cached_ib_circuits(task_name, cfg, seeds, nets, prompts)
    return [run_seed(task_name, cfg, s, m, p, r) for s, m, p, r in zip(seeds, nets, prompts, ibs)]


def cached_ib_circuits(task_name: str, cfg, seeds: Sequence[int], nets=None, prompts=None) -> list[IBResult]:
    """IBCircuit's masks on each seed's tiny model (:func:`ib_circuits`, 1300 official steps: most of the chapter's
    compute), cached in the zoo's results cache by task, settings and this module's code, so the builder's warm-up
    (:func:`warm_up_circuits`) computes them once. `nets` and `prompts`, when given, are the seeds' models and
    evaluation prompts (trained and drawn here otherwise). A checkpoint model is not cached."""
    task = TASKS[task_name]()

    def compute():
        models_ = load_models(task, cfg, seeds) if nets is None else nets
        prompts_ = prompts or [task.sample(cfg.n_prompts, torch_generator(s, "ibcircuit-eval", task_name))
                               for s in seeds]
        return [{"lam": r.lam.tolist(), "losses": r.losses}
                for r in ib_circuits(models_, prompts_, cfg.beta, cfg.ib_steps, cfg.ib_lr, seeds)]

    if cfg.model != "tiny":
        return [IBResult(np.asarray(r["lam"]), r["losses"]) for r in compute()]
    settings = {**{k: cfg[k] for k in cfg if k not in ("seeds", "calibration_seeds")}, "task": task_name,
                "seeds": list(seeds)}
    value, _ = zoo.results(f"ib-masks-{task_name}", settings, compute, [sys.modules[__name__]])
    return [IBResult(np.asarray(r["lam"], dtype=np.float32), r["losses"]) for r in value]


def warm_up_circuits(cfg) -> list[str]:
    """The builder's warm-up: IBCircuit's masks for both tasks on every seed of `cfg` (:func:`cached_ib_circuits`),
    so the notebooks read them. Returns the tasks computed."""
    for name in TASKS:
        cached_ib_circuits(name, cfg, cfg.seeds)
    return list(TASKS)


def run_seed(task_name: str, cfg, seed: int, model: TinyTransformer | HeadModel, prompts: Prompts,
             ib: IBResult) -> SeedResult:
    """On one seed's model and prompts, with IBCircuit's masks `ib`: score all subsets exhaustively, run every
    other method and the top-k curves."""
    with torch.no_grad():
        accuracy = float((model(prompts.ids).argmax(-1) == prompts.answer).float().mean()) \
            if task_name == "ioi" else float((metric(model(prompts.ids), prompts) > 0).float().mean())
    stats = head_stats(model, prompts)
    truth = exhaustive(model, prompts, stats)
    scores = {"IBCircuit": ib.lam, "attribution patching": attribution_patching(model, prompts),
              "activation patching": activation_patching(model, prompts),
              "ACDC": acdc_scores(model, prompts, np.geomspace(*ACDC_TAU_RANGE, cfg.acdc_thresholds)),
              "greedy pruning": greedy_pruning(model, prompts, stats),
              "random": random_ranking(model.n_total_heads, seed)}
    curves = {m: score_subsets(model, prompts, top_k_masks(s), stats) for m, s in scores.items()}
    return SeedResult(accuracy, scores, {m: c.kl for m, c in curves.items()},
                      {m: c.recovery for m, c in curves.items()}, optimum_by_size(truth), expected_random_kl(truth),
                      true_circuit(truth, cfg.recovery_threshold).numpy(), ib, model, prompts, seed)


def beta_sweep(result: SeedResult, cfg) -> list[tuple[float, int, float]]:
    """On the model and prompts of `result`, for each compression weight β of `cfg.beta_sweep`: (β, heads with
    λ > 0.5, KL of that circuit under mean ablation). At the run's own β the masks of `result` are reused (the
    same optimisation, seeded alike); every other β is optimised with the result's seed, all in one batched run."""
    model, prompts = result.model, result.prompts
    stats = head_stats(model, prompts)
    others = [b for b in cfg.beta_sweep if b != cfg.beta]
    fitted = dict(zip(others, ib_circuits([model] * len(others), [prompts] * len(others), others, cfg.ib_steps,
                                          cfg.ib_lr, [result.seed] * len(others)) if others else []))
    out = []
    for beta in cfg.beta_sweep:
        lam = result.ib.lam if beta == cfg.beta else fitted[beta].lam
        kept = torch.tensor(lam > 0.5, dtype=torch.float32)[None]
        out.append((beta, int(kept.sum()), float(score_subsets(model, prompts, kept, stats).kl[0])))
    return out


def area(kl: np.ndarray) -> float:
    """Area under KL against circuit size (mean over sizes 0..n): lower is more faithful."""
    return float(np.mean(kl))


def summarise(results: Sequence[SeedResult], threshold: float) -> dict[str, dict[str, np.ndarray]]:
    """Per method, per seed: area under KL, size at `threshold` recovery, ROC-AUC against the true circuit, and
    regret against the exhaustive optimum per size (KL of top-k minus the best KL of size k)."""
    out = {}
    for m in METHODS:
        out[m] = {"area": np.array([area(r.kl[m]) for r in results]),
                  "size90": np.array([circuit_size_at(r.recovery[m], threshold) for r in results]),
                  "auc": np.array([roc_auc(r.head_scores[m], r.true_circuit) for r in results]),
                  "regret": np.array([r.kl[m] - r.optimum_kl for r in results])}
    return out


# --------------------------------------------------------------------------------------------------------------
# Claims (fixed before any run)
# --------------------------------------------------------------------------------------------------------------

LEARNED = 0.9
"""The declared precondition: on every seed the trained model solves the task (IOI: the right name is the argmax;
Greater-Than: the metric is positive) on at least this share of the evaluation prompts."""
NON_INFERIORITY = 0.10
"""The declared margin of `near_optimal` and of the large-circuit half of `greater_than`: a difference in mean KL
regret smaller than this share of the random ranking's regret counts as "as good as"."""
BASELINES = ("attribution patching", "activation patching", "ACDC")
"""The prior methods the claims are judged against. Greedy head pruning is shown beside them as an oracle-like
reference, not a judge: it evaluates the curves' own measure for every candidate head, and the paper names it
nowhere."""


def claim_measurements(results: Sequence[SeedResult], summary: dict) -> dict:
    """Per-seed, paired measurements for the claims: areas, sizes and regrets of IBCircuit against each baseline
    (lower is better, so baseline minus IBCircuit is positive when IBCircuit wins), the same over the small
    (1 .. n/2 heads) and large (n/2 + 1 .. n) halves of the size axis, and the preconditions' values (against the
    expected KL area of a random ranking, exact from the exhaustive scores)."""
    ibs = summary["IBCircuit"]
    n = len(results[0].optimum_kl) - 1
    small, large = slice(1, n // 2 + 1), slice(n // 2 + 1, n + 1)

    def half(method, part):
        return np.array([float(np.mean(r.kl[method][part] - r.optimum_kl[part])) for r in results])

    regret = {m: summary[m]["regret"].mean(1) for m in METHODS}
    best_baseline = np.min([regret[m] for m in BASELINES], axis=0)  # per seed: the strongest baseline there
    expected_random = np.array([area(r.random_kl) for r in results])
    return {
        "task_accuracy": [r.task_accuracy for r in results],
        "expected_random_minus_best_baseline_area": (expected_random - np.min([summary[m]["area"] for m in BASELINES],
                                                                             0)),
        "expected_random_minus_acdc_area": expected_random - summary["ACDC"]["area"],
        "eap_minus_ib_area": summary["attribution patching"]["area"] - ibs["area"],
        "acdc_minus_ib_area": summary["ACDC"]["area"] - ibs["area"],
        "greedy_minus_ib_area": summary["greedy pruning"]["area"] - ibs["area"],
        "eap_minus_ib_size90": summary["attribution patching"]["size90"] - ibs["size90"],
        "acdc_minus_ib_size90": summary["ACDC"]["size90"] - ibs["size90"],
        "greedy_minus_ib_size90": summary["greedy pruning"]["size90"] - ibs["size90"],
        "best_baseline_minus_ib_regret_share": (best_baseline - regret["IBCircuit"]) / regret["random"],
        "ib_minus_acdc_small_regret": half("IBCircuit", small) - half("ACDC", small),
        "ib_minus_acdc_large_regret_share": ((half("IBCircuit", large) - half("ACDC", large))
                                             / half("random", large)),
    }


_LEARNED = at_least("model_learns_task", "task_accuracy", LEARNED,
                    f"on every seed the model solves the task on >= {LEARNED:.0%} of prompts")
# Both controls compare with the expected KL area of a random ranking (every k-subset's KL averaged, exact from the
# exhaustive scores). They compared with one random permutation per seed until a build in which ACDC lost to that
# seed's permutation on one seed (see the notebooks); the bar was made exact after that verdict was seen.
_INFORMATIVE = at_least("rankings_informative", "expected_random_minus_best_baseline_area", 0.0,
                        "on every seed the best baseline's KL area is no worse than a random ranking's expected area "
                        "(the measure can tell a ranking from chance)")
_ACDC_LEARNS = at_least("acdc_beats_random", "expected_random_minus_acdc_area", 0.0,
                        "on every seed ACDC's KL area is no worse than a random ranking's expected area (the "
                        "baseline the claim names works)")
_GOOD = {"task_accuracy": [1.0, 0.97, 0.99], "expected_random_minus_best_baseline_area": [0.8, 0.7, 0.9],
         "expected_random_minus_acdc_area": [0.5, 0.4, 0.6]}

FAITHFUL = Claim(
    chapter="ibcircuit", id="faithful",
    paper_statement="On IOI, IBCircuit finds more faithful circuits than prior methods (lower KL and higher logit "
                    "difference at a given number of nodes) without task-specific corrupted prompts",
    paper_value="better than ACDC and EAP on IOI (node and edge level)",
    criterion="On IOI, paired by seed, the area under KL against circuit size of each prior method the paper names "
              "minus IBCircuit's is above 0 (95% t intervals): attribution patching (EAP) and ACDC (edge pruning "
              "by KL). Greedy head pruning, which searches the curves' own measure, is shown as a reference only",
    effects=[Effect("eap_minus_ib_area", "eap_minus_ib_area"), Effect("acdc_minus_ib_area", "acdc_minus_ib_area")],
    preconditions=[_LEARNED, _INFORMATIVE, _ACDC_LEARNS],
    examples=(dict(_GOOD, eap_minus_ib_area=[0.1, 0.12, 0.09], acdc_minus_ib_area=[0.2, 0.25, 0.3]),
              dict(_GOOD, eap_minus_ib_area=[0.1, 0.12, 0.09], acdc_minus_ib_area=[-0.05, -0.06, -0.04])),
)

MINIMAL = Claim(
    chapter="ibcircuit", id="minimal",
    paper_statement="On IOI, IBCircuit's circuits are more minimal (fewer nodes) at equal faithfulness",
    paper_value="fewer nodes and edges than ACDC and EAP on IOI",
    criterion="On IOI, paired by seed, the smallest top-k circuit recovering >= 90% of the logit difference has "
              "fewer heads for IBCircuit than for attribution patching and for ACDC, the prior methods the paper "
              "names (95% t intervals above 0; refuted below half a head)",
    effects=[Effect("eap_minus_ib_size90", "eap_minus_ib_size90", min_effect=0.5),
             Effect("acdc_minus_ib_size90", "acdc_minus_ib_size90", min_effect=0.5)],
    preconditions=[_LEARNED, _INFORMATIVE, _ACDC_LEARNS],
    examples=(dict(_GOOD, eap_minus_ib_size90=[2, 1, 2, 3], acdc_minus_ib_size90=[2, 2, 3, 1]),
              dict(_GOOD, eap_minus_ib_size90=[0, 1, -1, 0], acdc_minus_ib_size90=[2, 2, 3, 1])),
)

NEAR_OPTIMAL = Claim(
    chapter="ibcircuit", id="near_optimal",
    paper_statement="IBCircuit's circuits are close to the most faithful circuit of their size (our ground truth "
                    "by exhaustive search; the paper has no exhaustive optimum)",
    paper_value="not reported (this book's addition)",
    criterion=f"On IOI, paired by seed, the strongest baseline's (of attribution patching, activation patching "
              f"and ACDC, the best on that seed) mean KL regret against the exhaustive optimum "
              f"minus IBCircuit's, as a share of the random ranking's regret, lies above -{NON_INFERIORITY} "
              f"(IBCircuit is no worse than the best baseline of that seed by more than {NON_INFERIORITY:.0%} of "
              "random's regret; a non-inferiority test, 95% t interval)",
    effects=[Effect("best_baseline_minus_ib_regret_share", "best_baseline_minus_ib_regret_share",
                    null=-NON_INFERIORITY)],
    preconditions=[_LEARNED, _INFORMATIVE],
    examples=(dict(_GOOD, best_baseline_minus_ib_regret_share=[0.01, -0.02, 0.0]),
              dict(_GOOD, best_baseline_minus_ib_regret_share=[-0.3, -0.25, -0.35])),
)

GREATER_THAN = Claim(
    chapter="ibcircuit", id="greater_than",
    paper_statement="On Greater-Than, IBCircuit matches the baselines for larger circuits but trails ACDC on small "
                    "ones (reported plainly)",
    paper_value="comparable at large sizes; behind ACDC on small circuits (secondary summaries, unverified)",
    criterion=f"On Greater-Than, paired by seed: over the small half of the size axis IBCircuit's mean KL regret "
              f"exceeds ACDC's (95% t interval above 0), AND over the large half their difference, as a share of "
              f"random's regret, lies within ±{NON_INFERIORITY} (TOST)",
    effects=[Effect("ib_trails_acdc_small", "ib_minus_acdc_small_regret"),
             Equivalence("ib_matches_acdc_large", "ib_minus_acdc_large_regret_share", margin=NON_INFERIORITY)],
    preconditions=[_LEARNED, _INFORMATIVE, _ACDC_LEARNS],
    examples=(dict(_GOOD, ib_minus_acdc_small_regret=[0.05, 0.06, 0.04],
                   ib_minus_acdc_large_regret_share=[0.01, -0.01, 0.0]),
              dict(_GOOD, ib_minus_acdc_small_regret=[-0.01, 0.0, -0.02],
                   ib_minus_acdc_large_regret_share=[0.01, -0.01, 0.0])),
)


# --- figures shared by the two task notebooks ---------------------------------------------------------------

def plot_masks(result, cfg):
    """The learned mask λ per head (★ marks the true circuit) and the mask-optimisation loss curve."""
    from ..core import plot

    fig, axes = plot.subplots(1, 2, figsize=(9, 3))
    im = axes[0].imshow(result.ib.lam.reshape(cfg.n_layers, cfg.n_heads), vmin=0, vmax=1, cmap="viridis")
    axes[0].set(title="IBCircuit mask λ per head", xlabel="head", ylabel="layer")
    for k in np.flatnonzero(result.true_circuit):
        axes[0].text(k % cfg.n_heads, k // cfg.n_heads, "★", ha="center", va="center", color="red")
    fig.colorbar(im, ax=axes[0], label="λ (★ = true circuit)")
    axes[1].plot(result.ib.losses, label="faithfulness + β·compression")
    axes[1].set(title="Mask optimisation", xlabel="step", ylabel="loss (nats)", yscale="log")
    axes[1].legend()
    return fig


def plot_faithfulness(results, cfg, task: str, recovery: str):
    """KL to the full model and the recovered fraction of the task metric (`recovery`) against circuit size,
    for every method (mean ± sd over seeds), with the exhaustive optimum."""
    from ..core import plot

    sizes = np.arange(cfg.n_layers * cfg.n_heads + 1)
    fig, axes = plot.subplots(1, 2, figsize=(10, 3.8))
    for m, color in zip(METHODS, plot.PALETTE):
        kl = np.array([r.kl[m] for r in results])
        rec = np.array([r.recovery[m] for r in results])
        axes[0].errorbar(sizes, kl.mean(0), yerr=kl.std(0), color=color, marker=".", capsize=2, label=m)
        axes[1].errorbar(sizes, rec.mean(0), yerr=rec.std(0), color=color, marker=".", capsize=2, label=m)
    opt = np.array([r.optimum_kl for r in results])
    axes[0].plot(sizes, opt.mean(0), "k--", label="exhaustive optimum")
    axes[0].plot(sizes, np.array([r.random_kl for r in results]).mean(0), color="gray", ls=":",
                 label="random ranking, expected")
    axes[0].set(title=f"KL(full ‖ circuit) by size ({task})", xlabel="heads kept",
                ylabel="KL (nats), mean ± sd", yscale="symlog")
    axes[1].axhline(cfg.recovery_threshold, color="gray", ls=":")
    axes[1].set(title=f"{recovery} recovery by size ({task})", xlabel="heads kept",
                ylabel="recovered fraction, mean ± sd")
    axes[0].legend(fontsize=7)
    return fig


def plot_ranking(summary, cfg):
    """ROC-AUC of each method's head scores against the true circuit, and regret against the optimum by size."""
    from ..core import plot

    sizes = np.arange(cfg.n_layers * cfg.n_heads + 1)
    fig, axes = plot.subplots(1, 2, figsize=(10, 3.5))
    aucs = [summary[m]["auc"] for m in METHODS]
    axes[0].bar(range(len(METHODS)), [np.nanmean(a) for a in aucs], yerr=[np.nanstd(a) for a in aucs],
                color=plot.PALETTE[:len(METHODS)], capsize=3)
    axes[0].set_xticks(range(len(METHODS)), [m.replace(" ", "\n") for m in METHODS], fontsize=7)
    axes[0].set(title="ROC-AUC of head scores vs true circuit", ylabel="AUC (mean ± sd over seeds)",
                ylim=(0, 1.05))
    for m, color in zip(METHODS, plot.PALETTE):
        axes[1].plot(sizes, summary[m]["regret"].mean(0), color=color, marker=".", label=m)
    axes[1].set(title="Regret against the exhaustive optimum", xlabel="heads kept", ylabel="extra KL (nats)",
                yscale="symlog")
    axes[1].legend(fontsize=7)
    return fig


def summary_table(summary) -> str:
    """One line per method: area under the KL curve, size at the recovery threshold, AUC, mean regret."""
    return "\n".join(
        f"{m:22s} area {s['area'].mean():.3f} ± {s['area'].std():.3f}   size@threshold {s['size90'].mean():.1f} "
        f"± {s['size90'].std():.1f}   AUC {np.nanmean(s['auc']):.2f}   mean regret {s['regret'].mean():.3f}"
        for m, s in ((m, summary[m]) for m in METHODS))
