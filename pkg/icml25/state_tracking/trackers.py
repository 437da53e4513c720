"""(How) Do Language Models Track State? (Li, Guo & Andreas, ICML 2025), in miniature.

The task is the *word problem* of a permutation group: a sequence of actions a_1 … a_T, each a permutation of n
objects, and the state s_t = a_1 · a_2 · … · a_t after each action (a prefix product in S_n, starting from the
identity). A model reads the actions and must output s_t at every position t ("direct-state supervision").

The paper finds two mechanisms in trained transformers:

* **AA**, an associative scan: states of longer and longer blocks are composed layer by layer, like the
  Hillis–Steele parallel prefix product (:func:`parallel_prefix_product`), so the depth at which s_t becomes
  linearly decodable grows like log t; the parity of s_t is decodable only together with s_t.
* **PAA**, a parity-associative scan: the parity ε(s_t) = Σ_i ε(a_i) mod 2 (paper Eq. 1) is computed first (it is
  linearly decodable early at every t), then the state is resolved within its parity class, so the model's
  errors keep the right parity.

This module holds the group, the task, the training of tiny Llama models with per-token state supervision under a
length curriculum (and, as the steering intervention, an auxiliary parity objective throughout training),
logistic-regression probes for state and parity at every layer pooled over positions (as in the official code),
layer × token activation patching of the first action (as in the official code), the three signatures they give
(errors, probes, patching), the declared rule that votes them into a label, and the chapter's claims.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from ..core import models, tinylm, train, zoo
from ..core.claims import Claim, Effect, at_least, at_most
from ..core.config import COUNT, FRACTION, INDEX, NONNEGATIVE, POSITIVE, SEED, make_config, one_of
from ..core.seeding import numpy_rng, one_thread, torch_generator

SUPPORTED_N = (3, 5)
PARITY_WORDS = ("even", "odd")
CONDITIONS = ("plain", "parity_aux")

# --------------------------------------------------------------------------------------------------------------
# The group S_n
# --------------------------------------------------------------------------------------------------------------


def _check_n(n: int) -> int:
    if n not in SUPPORTED_N:
        raise ValueError(f"unsupported group S_{n!r}; supported: " + ", ".join(f"S_{k}" for k in SUPPORTED_N))
    return n


def _check_length(length: int) -> int:
    if not isinstance(length, (int, np.integer)) or length <= 0:
        raise ValueError(f"sequence length must be a positive integer, got {length!r}")
    return int(length)


@lru_cache(maxsize=None)
def elements(n: int) -> tuple[tuple[int, ...], ...]:
    """The n! permutations of (0, …, n-1) in lexicographic order; index 0 is the identity."""
    return tuple(itertools.permutations(range(_check_n(n))))


def compose(state: Sequence[int], action: Sequence[int]) -> tuple[int, ...]:
    """Apply `action` to the arrangement `state`: new[j] = state[action[j]] (the object at slot action[j] moves
    to slot j), so the state after a_1 … a_t is the product s_{t-1} · a_t."""
    return tuple(state[i] for i in action)


def parity(perm: Sequence[int]) -> int:
    """ε(perm): the number of inversions mod 2 (0 even, 1 odd)."""
    return sum(1 for i in range(len(perm)) for j in range(i + 1, len(perm)) if perm[i] > perm[j]) % 2


def n_cycles(perm: Sequence[int]) -> int:
    seen, count = set(), 0
    for start in range(len(perm)):
        if start not in seen:
            count += 1
            j = start
            while j not in seen:
                seen.add(j)
                j = perm[j]
    return count


@lru_cache(maxsize=None)
def cayley_table(n: int) -> torch.Tensor:
    """table[i, k] = index of elements[i] · elements[k] (an n! × n! int64 tensor)."""
    els = elements(n)
    index = {p: i for i, p in enumerate(els)}
    return torch.tensor([[index[compose(a, b)] for b in els] for a in els], dtype=torch.long)


@lru_cache(maxsize=None)
def parity_table(n: int) -> torch.Tensor:
    """ε of every element, by index."""
    return torch.tensor([parity(p) for p in elements(n)], dtype=torch.long)


@lru_cache(maxsize=None)
def shuffled_parity(n: int) -> torch.Tensor:
    """The null control's stand-in for ε: a fixed balanced 2-colouring of the n! elements drawn at random among
    those that are not the parity (nor its complement). It is not a homomorphism, so it plays no part in any
    algorithm for the word problem; the AA/PAA pipeline read against it must find no parity-first run."""
    sign, rng = parity_table(_check_n(n)), numpy_rng(0, "state_tracking", "shuffled_parity")
    while True:
        colouring = torch.as_tensor(rng.permutation(len(sign)) % 2, dtype=torch.long)
        if not (torch.equal(colouring, sign) or torch.equal(colouring, 1 - sign)):
            return colouring


def perm_word(perm: Sequence[int]) -> str:
    """The token of a permutation, written 1-based like the paper's data ('213' swaps the first two objects)."""
    return "".join(str(i + 1) for i in perm)


# --------------------------------------------------------------------------------------------------------------
# The task: actions, states, parity
# --------------------------------------------------------------------------------------------------------------


def sample_actions(n: int, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """A [batch, length] tensor of action indices drawn uniformly from all n! permutations."""
    _check_length(length)
    return torch.randint(len(elements(_check_n(n))), (batch, length), generator=generator)


def state_sequence(actions: torch.Tensor, n: int) -> torch.Tensor:
    """The states s_t = a_1 · … · a_t (indices), by a sequential fold over t: one Cayley-table lookup per step."""
    table = cayley_table(_check_n(n))
    state = torch.zeros(actions.shape[0], dtype=torch.long)  # the identity
    out = torch.empty_like(actions)
    for t in range(actions.shape[1]):
        state = table[state, actions[:, t]]
        out[:, t] = state
    return out


def parallel_prefix_product(actions: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    """The same states by the Hillis–Steele scan the AA mechanism resembles: in round r every position t ≥ 2^r
    composes the product of its block with the block ending 2^r earlier, x_t ← x_{t-2^r} · x_t, so after
    ⌈log₂ T⌉ rounds x_t = s_t. Returns (states, number of rounds)."""
    table = cayley_table(_check_n(n))
    x, step, rounds = actions.clone(), 1, 0
    while step < x.shape[1]:
        x = torch.cat([x[:, :step], table[x[:, :-step], x[:, step:]]], dim=1)
        step, rounds = step * 2, rounds + 1
    return x, rounds


def scan_blocks(length: int) -> list[list[tuple[int, int]]]:
    """For drawing the scan: after each Hillis–Steele round, the block [lo, t] (1-based) whose product x_t holds."""
    _check_length(length)
    blocks, step = [[(t, t) for t in range(1, length + 1)]], 1
    while step < length:
        blocks.append([(max(1, t - 2 * step + 1), t) for t in range(1, length + 1)])
        step *= 2
    return blocks


def parity_of_states(states: torch.Tensor, n: int, colouring: torch.Tensor | None = None) -> torch.Tensor:
    """ε of each state index (or its class under `colouring`, a 2-colouring by element index)."""
    return (parity_table(n) if colouring is None else colouring)[states]


# --------------------------------------------------------------------------------------------------------------
# Models: a tiny Llama reads [bos, a_1, …, a_T] and its LM head names s_t at the position of a_t
# --------------------------------------------------------------------------------------------------------------


def make_tokenizer(n: int):
    """One word per permutation of S_n (its 1-based digits) plus the two parity words."""
    return tinylm.word_tokenizer([perm_word(p) for p in elements(_check_n(n))] + list(PARITY_WORDS))


def token_ids(tokenizer, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Vocabulary ids of the n! permutation words (by element index) and of the parity words (even, odd)."""
    perm = tokenizer.convert_tokens_to_ids([perm_word(p) for p in elements(n)])
    par = tokenizer.convert_tokens_to_ids(list(PARITY_WORDS))
    return torch.tensor(perm), torch.tensor(par)


def model_inputs(actions: torch.Tensor, tokenizer, n: int) -> torch.Tensor:
    perm_ids, _ = token_ids(tokenizer, n)
    bos = torch.full((actions.shape[0], 1), tokenizer.bos_token_id, dtype=torch.long)
    return torch.cat([bos, perm_ids[actions]], dim=1)


def state_loss(model, actions: torch.Tensor, tokenizer, n: int, parity_weight: float = 0.0,
               parity_layer: int | None = None) -> torch.Tensor:
    """Per-token cross-entropy of s_t at the position of a_t, over the n! permutation words (direct-state
    supervision); with `parity_weight` λ > 0, plus λ times the cross-entropy of ε(s_t) over the two parity words at
    the same position, read from the residual stream after block `parity_layer` through the final norm and the
    output head (layer-wise parity supervision, a logit lens: it asks for the parity *early*, the lever that steers
    a model toward PAA); `parity_layer` None reads it at the output."""
    if parity_layer is not None and not 0 <= parity_layer < model.config.num_hidden_layers:
        raise ValueError(f"parity_layer {parity_layer} must name a block before the last, 0.."
                         f"{model.config.num_hidden_layers - 1} (the last block's output is the output itself)")
    perm_ids, par_ids = token_ids(tokenizer, n)
    out = model(input_ids=model_inputs(actions, tokenizer, n), output_hidden_states=parity_layer is not None)
    logits = out.logits[:, 1:]  # position of a_t predicts s_t
    states = state_sequence(actions, n)
    loss = F.cross_entropy(logits[..., perm_ids].flatten(0, 1), states.flatten())
    if parity_weight:
        parities = parity_of_states(states, n).flatten()
        if parity_layer is not None:
            logits = model.get_output_embeddings()(model.model.norm(out.hidden_states[parity_layer]))[:, 1:]
        loss = loss + parity_weight * F.cross_entropy(logits[..., par_ids].flatten(0, 1), parities)
    return loss


@torch.no_grad()
def predict_states(model, actions: torch.Tensor, tokenizer, n: int, batch_size: int = 256) -> torch.Tensor:
    """The model's predicted state index at every position (argmax over the permutation words)."""
    perm_ids, _ = token_ids(tokenizer, n)
    out = []
    for chunk in actions.split(batch_size):
        logits = model(input_ids=model_inputs(chunk, tokenizer, n)).logits[:, 1:]
        out.append(logits[..., perm_ids].argmax(-1))
    return torch.cat(out)


def curriculum_length(step: int, steps: int, start: int, final: int, ramp: float) -> int:
    """The story length at optimiser step `step` of a length curriculum: it climbs one action at a time, in equal
    stages, from `start` to `final` over the first `ramp` share of the steps, then stays at `final`."""
    ramp_steps = int(ramp * steps)
    if final <= start or step >= ramp_steps:
        return final
    return start + step * (final - start + 1) // ramp_steps


def _batches(cfg, seed: int):
    g = torch_generator(seed, "state_tracking", "train")
    step = 0
    while True:
        length = curriculum_length(step, cfg.steps, cfg.start_length, cfg.train_length, cfg.ramp)
        yield sample_actions(cfg.group_n, cfg.batch_size, length, g)
        step += 1


TINY_MODEL = "tinylm"
"""The `model` knob's value for a fresh tiny Llama built in place (`preset` width, `n_layers` blocks)."""


def initial_model(cfg, seed: int, tokenizer):
    """The model fine-tuned on the task: with `cfg.model` = :data:`TINY_MODEL` a fresh tiny Llama of `cfg.preset`
    with `cfg.n_layers` blocks initialised from `seed`; otherwise any causal LM checkpoint (a `save_pretrained`
    folder or a Hub id, through :func:`icml25.core.models.load`) whose token embeddings are resized to the task's
    words (one token per permutation, as in :func:`make_tokenizer`; the blocks keep their weights)."""
    if cfg.model == TINY_MODEL:
        return tinylm.make_model(cfg.preset, tokenizer, seed, max_len=4 * cfg.train_length + 1,
                                 num_hidden_layers=cfg.n_layers)
    model, _ = models.load(cfg.model, device="cpu")
    if model.get_input_embeddings().num_embeddings != len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    model.config.bos_token_id, model.config.pad_token_id = tokenizer.bos_token_id, tokenizer.pad_token_id
    return model


def train_tracker(cfg, seed: int, condition: str) -> tuple[object, object, dict]:
    """Train one model (:func:`initial_model`; a tiny Llama by default) on S_n with direct-state supervision for
    `cfg.steps` steps, under a length curriculum (:func:`curriculum_length`: short stories first,
    `cfg.train_length` actions from `cfg.ramp` of the way on).
    Under `parity_aux` the loss adds `cfg.parity_weight` times the cross-entropy of ε(s_t) at every position and
    every step, read after block `cfg.parity_layer` (:func:`state_loss`); the data, initialisation and state loss
    are the plain run's."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    n = _check_n(cfg.group_n)
    tok = make_tokenizer(n)
    model = initial_model(cfg, seed, tok)
    weight = cfg.parity_weight if condition == "parity_aux" else 0.0
    res = train.train(model, _batches(cfg, seed), cfg.steps, lr=cfg.lr, desc=f"S{n} {condition}",
                      loss_fn=lambda m, a: state_loss(m, a, tok, n, weight, cfg.parity_layer))
    return model, tok, {"condition": condition, "parity_weight": weight, "losses": res.losses}


# --------------------------------------------------------------------------------------------------------------
# Batched training: every run of a design in one optimisation, each from its own initialisation on its own batches
# --------------------------------------------------------------------------------------------------------------
# A model this small costs mostly fixed per-operation overhead on a CPU (and Hugging Face's forward adds Python
# work per module), so training the runs one after another pays that overhead once per run and step. Here the runs'
# tiny Llamas are stacked weight by weight ([runs, ...]) and one plain-PyTorch forward computes all of them with
# batched matrix products: the same equations as `LlamaForCausalLM` (RMSNorm, rotary attention, SwiGLU, tied
# embeddings), the same loss per run (:func:`state_loss`), AdamW with the same schedule, and gradient clipping per
# run, so each trained model is the one :func:`train_tracker` gives, up to float rounding (tested).

_STACKED = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj",
            "norm_attn": "input_layernorm", "norm_mlp": "post_attention_layernorm"}


def stack_trackers(trackers: Sequence) -> dict[str, torch.Tensor]:
    """The parameters of tiny Llamas of one shape, stacked run by run: name -> [runs, ...] (leaf tensors)."""
    sds = [m.state_dict() for m in trackers]
    out = {"embed": torch.stack([sd["model.embed_tokens.weight"] for sd in sds]),
           "norm": torch.stack([sd["model.norm.weight"] for sd in sds])}
    for layer in range(trackers[0].config.num_hidden_layers):
        for short, long in _STACKED.items():
            out[f"{layer}.{short}"] = torch.stack([sd[f"model.layers.{layer}.{long}.weight"] for sd in sds])
    return {k: v.clone().requires_grad_(True) for k, v in out.items()}


def unstack_into(params: dict[str, torch.Tensor], trackers: Sequence) -> None:
    """Write run i's slice of the stacked `params` back into `trackers[i]` (the tied head follows the embedding)."""
    for i, model in enumerate(trackers):
        sd = {"model.embed_tokens.weight": params["embed"][i], "model.norm.weight": params["norm"][i]}
        for layer in range(model.config.num_hidden_layers):
            for short, long in _STACKED.items():
                sd[f"model.layers.{layer}.{long}.weight"] = params[f"{layer}.{short}"][i]
        model.load_state_dict({k: v.detach().clone() for k, v in sd.items()}, strict=False)
        model.eval()


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight[:, None, None] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def stacked_logits(params: dict[str, torch.Tensor], input_ids: torch.Tensor, config, rotary,
                   vocab_ids: torch.Tensor, lens_layer: int | None = None, lens_ids: torch.Tensor | None = None):
    """The logits of every run at every position, restricted to the words `vocab_ids`: [runs, batch, S, len(ids)],
    for `input_ids` [runs, batch, S]. `config` is the runs' shared LlamaConfig, `rotary` one run's rotary embedding
    module (it holds no parameters). With `lens_layer`, also the logit lens after that block (final norm and
    output head on the residual stream there) over the words `lens_ids`: (logits, lens logits)."""
    runs, batch, length = input_ids.shape
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    eps = config.rms_norm_eps
    x = params["embed"][torch.arange(runs)[:, None, None], input_ids]  # [R, B, S, d]
    cos, sin = rotary(x[0], torch.arange(length)[None])  # [1, S, head_dim]
    cos, sin = cos[:, None], sin[:, None]  # broadcast over (R·B, heads)
    causal = torch.full((length, length), float("-inf")).triu(1)

    def head(x, ids):
        return torch.einsum("rbsd,rvd->rbsv", _rms_norm(x, params["norm"], eps), params["embed"][:, ids])

    lens = head(x, lens_ids) if lens_layer == 0 else None
    for layer in range(config.num_hidden_layers):
        p = {k: params[f"{layer}.{k}"] for k in _STACKED}
        h = _rms_norm(x, p["norm_attn"], eps).reshape(runs, batch * length, -1)
        qkv = torch.bmm(h, torch.cat([p["q"], p["k"], p["v"]], 1).transpose(1, 2))
        q, k, v = qkv.view(runs * batch, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(-1, -2)) * head_dim ** -0.5 + causal  # tiny S: plain matmuls beat SDPA
        att = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(runs, batch * length, -1)
        x = x + torch.bmm(att, p["o"].transpose(1, 2)).view(runs, batch, length, -1)
        h = _rms_norm(x, p["norm_mlp"], eps).reshape(runs, batch * length, -1)
        gate, up = torch.bmm(h, torch.cat([p["gate"], p["up"]], 1).transpose(1, 2)).chunk(2, -1)
        x = x + torch.bmm(F.silu(gate) * up, p["down"].transpose(1, 2)).view(runs, batch, length, -1)
        if lens_layer == layer + 1:
            lens = head(x, lens_ids)
    logits = head(x, vocab_ids)
    return logits if lens_layer is None else (logits, lens)


def train_trackers(cfg, runs: Sequence[tuple[int, str]]) -> list[tuple[object, object, dict]]:
    """Train the tiny Llamas of `runs` ((seed, condition) pairs) in one batched optimisation: run (s, c) from the
    initialisation and on the batches :func:`train_tracker` would give it (the stories of seed s, the loss of
    condition c), with AdamW, the shared schedule (:func:`icml25.core.train.lr_at`) and gradient clipping per run.
    Returns what :func:`train_tracker` returns, run by run."""
    for _, condition in runs:
        if condition not in CONDITIONS:
            raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    if cfg.model != TINY_MODEL:
        raise ValueError(f"batched training needs the in-place tiny Llama (model={TINY_MODEL!r}), got {cfg.model!r}")
    n = _check_n(cfg.group_n)
    tok = make_tokenizer(n)
    trackers = [initial_model(cfg, seed, tok) for seed, _ in runs]
    params = stack_trackers(trackers)
    perm_ids, par_ids = token_ids(tok, n)
    weights = torch.tensor([cfg.parity_weight if c == "parity_aux" else 0.0 for _, c in runs])
    seeds = list(dict.fromkeys(seed for seed, _ in runs))
    streams = {seed: _batches(cfg, seed) for seed in seeds}
    which = torch.tensor([seeds.index(seed) for seed, _ in runs])
    leaves = list(params.values())
    opt = torch.optim.AdamW(leaves, lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95), foreach=True)
    warmup = max(1, cfg.steps // 20)  # train.train's default
    config, rotary = trackers[0].config, trackers[0].model.rotary_emb
    losses = []
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = train.lr_at(step, cfg.steps, cfg.lr, warmup)
        actions = torch.stack([next(streams[seed]) for seed in seeds])[which]  # [R, B, T]
        states = torch.stack([state_sequence(a, n) for a in actions])
        ids = torch.cat([torch.full((*actions.shape[:2], 1), tok.bos_token_id), perm_ids[actions]], dim=2)
        logits, lens = stacked_logits(params, ids, config, rotary, perm_ids, cfg.parity_layer, par_ids)
        r, b, t = states.shape
        state_ce = F.cross_entropy(logits[:, :, 1:].reshape(-1, len(perm_ids)), states.flatten(),
                                   reduction="none").view(r, -1).mean(1)
        parity_ce = F.cross_entropy(lens[:, :, 1:].reshape(-1, 2), parity_of_states(states, n).flatten(),
                                    reduction="none").view(r, -1).mean(1)
        loss = state_ce + weights * parity_ce  # each run's own loss; their sum has each run's gradient
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        # clip each run's gradient to norm 1 over all its parameters (clip_grad_norm_ per model)
        norms = torch.stack([g.grad.flatten(1).pow(2).sum(1) for g in leaves]).sum(0).sqrt()
        coef = (1.0 / (norms + 1e-6)).clamp(max=1.0)
        for g in leaves:
            g.grad.mul_(coef.view(-1, *[1] * (g.dim() - 1)))
        opt.step()
        losses.append(loss.detach())
    losses = torch.stack(losses).T.tolist() if losses else [[] for _ in runs]
    unstack_into(params, trackers)
    return [(model, tok, {"condition": c, "parity_weight": float(w), "losses": curve, "trained_with": len(runs)})
            for model, (_, c), w, curve in zip(trackers, runs, weights, losses)]


# --------------------------------------------------------------------------------------------------------------
# Settings and the zoo
# --------------------------------------------------------------------------------------------------------------

# ci calibration (1 CPU thread on a shared, heavily loaded machine, seed 0 unless said; accuracy of s_T at t = T on
# 1000 held-out stories; recorded before any claim was checked). Budget: about 4000 optimiser steps in all at
# ~25 ms each. With a curriculum from 2 actions over the first half of 800 steps, T = 6 reached only 0.48 (0.43
# with the parity objective; lr 1e-2: 0.38), although t <= 3 were right every time and t = 4 0.94. At T = 4, 500
# steps with a half-length ramp gave 0.83 (0.77 with the parity objective, weight 1), 600 steps with a quarter ramp
# 0.89 (0.80). The old design without a curriculum reached 0.93-0.96 at T = 4 in 600-1000 steps. Hence T = 4, a
# short ramp (the first 10% of the steps at 2 and 3 actions), 700 steps, and a parity weight of 0.5; longer
# stories are out of this budget.
# Re-calibrated (a later session, from the precondition alone, before any verdict of the new regime was read):
# that design took 191 s of the chapter's 150 s budget and one run in six missed the precondition (parity_aux
# seed 2 at 0.884). For parity_aux seed 2 alone at T = 4: 400 steps at lr 6e-3 0.73; 2 blocks, 600 steps at lr
# 4e-3 0.79; the wider `small` preset 0.84 at 350 and at 450 steps (0.75 at lr 5e-3), none learned within
# ~20 s of CPU. At T = 3, 450 steps at lr 3e-3 reached 1.00 in 14 s. Hence T = 3 (stories of 6 actions at
# evaluation) and 450 steps; the shorter training length is the price of a chapter in budget whose every run learns.
# Re-calibrated again (issue 36, to pay for the S5 run below; from the precondition alone, no verdict of the new
# setting read): T = 4 with batch 256 for 200 steps (17 s, as much CPU as 450 steps of batch 64) left parity_aux
# seed 2 at 0.74, so T stays 3. At 350 steps, accuracy at t = 3 was 0.95 (parity_aux seed 2, the slowest run),
# 1.00 (parity_aux seeds 0 and 1, plain seed 0), at 11 s of CPU each instead of 16 s. Hence 350 steps.
# Issue "a longer training length" (a later session; the verdicts of this T = 3 regime were known, all three
# inconclusive, before it started; nothing below was chosen from a verdict). Training got cheaper: a profile showed
# the runs bound by per-operation overhead at batch 64 and by the matrix products beyond, so the six runs are now
# trained together (:func:`train_trackers`: stacked weights, one forward of plain batched products, each run on its
# own initialisation, batches, loss and clipping; equal to separate training up to float rounding, tested), at
# 7.4 ms per run and step instead of 13 ms at T = 3 (9.2 ms at T = 4, 11 ms at T = 6). Whether T = 6 fits was then
# measured from the precondition alone (accuracy of s_6 at t = 6 of all six runs, 500 held-out stories; one
# thread on the loaded machine): curriculum from 2 actions over the first 30% of the steps, batch 64, lr 3e-3:
# 1200 steps (75 s for the six runs) 0.65-0.81; the same at lr 8e-3 and 800 steps 0.47-0.87; 4 blocks, 800 steps
# (60 s) 0.45-0.71; batch 32, 1600 steps (85 s) 0.62-0.90; no curriculum, 800 steps (80 s) 0.50-0.73. Every
# setting spent two to three times the chapter's whole training time (about 35 s) and left most runs below 0.9
# (t <= 3 were right every time; accuracy fell from t = 4 on). So T = 6 is out of this budget and T stays 3; the
# batched training only makes the same design cheaper (its models differ from separately trained ones by float
# rounding, which moved one run's label between "mixed" and "AA-like"; no verdict changed).
# Issue 36, the length curriculum (a later session; the three verdicts of the T = 3 regime were known, all
# inconclusive, before it started; nothing below was chosen from, or after reading, a verdict of the new setting).
# The chapter's models are now trained in the book builder's warm-up (:func:`train_design`), whose time is not the
# chapter's: about 300 s of one thread for the S3 design and the S5 run. T = 6 was calibrated again in that budget,
# from the precondition alone (accuracy of s_6 at t = 6 of all six runs, 1000 held-out stories of the "eval"
# stream; one thread, two calibrations at a time on the shared 2-core machine, so the seconds are upper bounds);
# curriculum from 2 actions over the first 30% of the steps; :data:`LENGTH_CALIBRATION` holds every setting tried,
# with each run's accuracy and the seconds. Batch 64, lr 3e-3: 3000 steps 0.83-0.98 (one run below 0.9), 4000
# steps 0.92-1.00 (317 s); batch 128, 2000 steps 0.90-0.98 (two runs just below); lr 5e-3: 3000 steps 0.91-0.98
# (251 s), 3500 steps 0.90-1.00 (310 s); lr 7e-3, 3000 steps 0.88-0.98 (two below). The accuracy of one run moves
# by a few points between settings with no trend, so the setting chosen is the one whose slowest run has the
# widest margin over the precondition, not the cheapest that passed once: hence T = 6 with 4000 steps of batch 64
# at lr 3e-3 (slowest run 0.921; 317 s beside another calibration, 233 s for the whole warm-up, the S5 run
# included, in a chapter build). The S5 run keeps its own learning rate (3e-3) and its settings.
TRAIN_PRESETS = {
    "smoke": {"group_n": 3, "preset": "nano", "n_layers": 2, "train_length": 4, "start_length": 2, "ramp": 0.5,
              "batch_size": 32, "steps": 20, "lr": 3e-3, "parity_weight": 1.0, "parity_layer": 1},
    "ci": {"group_n": 3, "preset": "micro", "n_layers": 3, "train_length": 6, "start_length": 2, "ramp": 0.3,
           "batch_size": 64, "steps": 4000, "lr": 3e-3, "parity_weight": 0.5, "parity_layer": 1},
    "full": {"group_n": 3, "preset": "base", "n_layers": 6, "train_length": 16, "start_length": 2, "ramp": 0.5,
             "batch_size": 128, "steps": 20000, "lr": 1e-3, "parity_weight": 1.0, "parity_layer": 1},
}
TRAIN_KEYS = tuple(TRAIN_PRESETS["ci"])
EARLIER_TRAIN_LENGTH = 3
"""The `ci` training length before the length curriculum's calibration (its verdicts: all three inconclusive)."""
CALIBRATION_RUNS = tuple(f"{c}/s{s}" for s in (0, 1, 2) for c in CONDITIONS)
LENGTH_CALIBRATION = [
    # (train_length, steps, batch_size, lr, ramp) -> accuracy at t = T of each run of `CALIBRATION_RUNS`, seconds
    dict(zip(("train_length", "steps", "batch_size", "lr", "ramp", "accuracy_at_T", "seconds"), row))
    for row in (
        (6, 3000, 64, 3e-3, 0.3, (0.909, 0.965, 0.965, 0.827, 0.903, 0.979), 438),
        (6, 2000, 128, 3e-3, 0.3, (0.957, 0.920, 0.964, 0.899, 0.976, 0.898), 494),
        (6, 4000, 64, 3e-3, 0.3, (0.921, 0.967, 1.000, 1.000, 0.949, 0.979), 317),
        (6, 3000, 64, 5e-3, 0.3, (0.946, 0.979, 0.946, 0.950, 0.908, 0.953), 251),
        (6, 3500, 64, 5e-3, 0.3, (0.973, 0.977, 0.998, 0.975, 0.952, 0.902), 310),
        (6, 3000, 64, 7e-3, 0.3, (0.878, 0.909, 0.950, 0.979, 0.974, 0.886), 282),
    )]
"""The `ci` calibration of the training length (issue 36), judged by the precondition alone: each setting tried,
each run's held-out accuracy of s_T at t = T (runs in the order of `CALIBRATION_RUNS`) and the seconds of one
thread that the six runs' batched training took (measured beside another calibration on the shared machine).
Recorded when measured, not re-measured by the notebook, which prints it."""

# S5 (120 states) at ci: one plain run, a cheap check that the whole pipeline (training, probes, patching,
# signatures, the precondition) runs on S5, not a claim. Calibration (1 CPU thread, seed 0, before any S5 run was
# labelled): 300 steps on 2-action stories (curriculum from 1) took 11 s and were right at t = 1 (a copy) and at
# chance (0.01) at t = 2: composing two S5 actions is learning a 120 x 120 table, far beyond ci's budget, so the run
# is expected to miss the precondition, and the notebook says so from its measured accuracy.
S5_TRAIN = {"smoke": {"group_n": 5, "train_length": 2, "start_length": 2, "steps": 20},
            "ci": {"group_n": 5, "n_layers": 2, "train_length": 2, "start_length": 2, "steps": 200, "lr": 3e-3},
            "full": {"group_n": 5}}
S5_PRESETS = {scale: dict(train, **S5_TRAIN[scale]) for scale, train in TRAIN_PRESETS.items()}

CALIBRATION_SEEDS = (0, 1, 2)
"""The seeds of the training-length calibration (:data:`LENGTH_CALIBRATION`) and of every earlier verdict of this
chapter; contract v2 decides on fresh seeds from 100."""

config = make_config({
    scale: dict(train, model=model, seeds=seeds, calibration_seeds=list(CALIBRATION_SEEDS), length_factor=2, n_eval=n_eval, n_probe=n_probe, early_layer=1,
                min_errors=30, n_patch=n_patch)
    for (scale, train), model, seeds, n_eval, n_probe, n_patch in zip(
        TRAIN_PRESETS.items(), (TINY_MODEL, TINY_MODEL, "openai-community/gpt2"),
        ([100], [100, 101, 102], list(range(100, 110))),
        (200, 2000, 4000), (100, 500, 2000), (20, 200, 400))
},
    group_n=one_of(*SUPPORTED_N), preset=one_of(*tinylm.PRESETS), n_layers=COUNT, train_length=COUNT,
    start_length=COUNT, ramp=FRACTION, batch_size=COUNT, steps=COUNT, lr=POSITIVE, parity_weight=POSITIVE,
    parity_layer=INDEX, seeds=SEED, calibration_seeds=SEED, length_factor=COUNT, n_eval=COUNT, n_probe=COUNT, early_layer=INDEX, min_errors=NONNEGATIVE,
    n_patch=COUNT)


PRESETS_BY_GROUP = {3: TRAIN_PRESETS, 5: S5_PRESETS}


def s5_config(scale: str, **overrides):
    """The settings of the S5 run at `scale`: the scale's, with :data:`S5_TRAIN` over them (then `overrides`)."""
    return config(scale, **(S5_TRAIN[scale] | {k: v for k, v in overrides.items() if v is not None}))


def design_runs(cfg, seed: int, condition: str) -> list[tuple[int, str]]:
    """The runs trained together with (`seed`, `condition`): every condition of each of `cfg.seeds` when `seed` is
    one of them, else that run alone. Fixed by the settings, not by which run is asked for first, so a run's model
    does not depend on the order in which the notebook fetches them."""
    if "seeds" in cfg and seed in cfg.seeds:
        return [(s, c) for s in cfg.seeds for c in CONDITIONS]
    return [(seed, condition)]


_TRAINED: dict[str, dict[tuple[int, str], tuple]] = {}  # the last design trained in one go: run -> trained run


def trained_run(cfg, seed: int, condition: str) -> tuple[object, object, dict]:
    """Run (`seed`, `condition`) trained as :func:`train_tracker` would train it. With the in-place tiny Llama, the
    whole design (:func:`design_runs`) is trained at once by :func:`train_trackers` the first time one of its runs
    is asked for, and kept (the last design only) for the others (the zoo asks for them one by one)."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    if cfg.model != TINY_MODEL:
        return train_tracker(cfg, seed, condition)
    runs = design_runs(cfg, seed, condition)
    design = repr((sorted((k, str(v)) for k, v in cfg.items() if k != "condition"), runs))
    if design not in _TRAINED:
        _TRAINED.clear()
        _TRAINED[design] = dict(zip(runs, train_trackers(cfg, runs)))
    return _TRAINED[design][seed, condition]


def _register(n: int, condition: str) -> None:
    # S3: the scale's seeds are one design, trained together (`seeds` enters the zoo key); S5: one run alone
    @zoo.register(f"st-s{n}-{condition}", {s: dict(v, condition=condition, model=TINY_MODEL,
                                                   **({"seeds": list(config(s).seeds)} if n == 3 else {}))
                                            for s, v in PRESETS_BY_GROUP[n].items()})
    def build(cfg, seed):
        return trained_run(cfg, seed, condition)


for _n in SUPPORTED_N:
    for _condition in CONDITIONS:
        _register(_n, _condition)


def eval_length(cfg) -> int:
    return cfg.length_factor * cfg.train_length


def get_tracker(cfg, seed: int, condition: str) -> zoo.ZooModel:
    """The trained tracker of `condition` for `seed`: from the zoo (`st-s3-…` or `st-s5-…`) when `cfg`'s training
    settings are the scale's defaults for its group (:data:`TRAIN_PRESETS`, :data:`S5_PRESETS`) and the model is
    the tiny in-place one, trained here (not cached) when a notebook overrode
    them or named a checkpoint (`model`)."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    presets = PRESETS_BY_GROUP[_check_n(cfg.group_n)][cfg.scale]
    if cfg.model == TINY_MODEL and all(cfg[k] == presets[k] for k in TRAIN_KEYS):
        return zoo.get(f"st-s{cfg.group_n}-{condition}", cfg.scale, seed)
    model, tok, info = trained_run(cfg, seed, condition)
    return zoo.ZooModel(model, tok, info, path=None, trained_now=True)


WARM_UP = "st-trackers"
"""The name under which the book's builder trains this chapter's models in its warm-up (`CHAPTER_RESULTS`)."""


def train_design(cfg, s5_seed: int | None = None) -> list[str]:
    """Train and cache (or find cached) every zoo model the mechanisms notebook fetches at `cfg`'s scale with its
    default settings: the S3 design (every seed of `cfg.seeds`, both conditions, trained together) and the one S5
    run (plain, seed `s5_seed`, by default the first of `cfg.seeds`, as the notebook's default `seed`). The book's builder runs this in its warm-up, before
    the notebooks fan out, so the notebooks only load the trained runs and their runtime is the measurement's.
    Nothing is trained when the scale's `model` is a checkpoint (not cached in the zoo). Returns the zoo folders."""
    if cfg.model != TINY_MODEL:
        return []
    s5_seed = cfg.seeds[0] if s5_seed is None else s5_seed
    wanted = [(f"st-s3-{c}", s) for s in cfg.seeds for c in CONDITIONS] + [("st-s5-plain", s5_seed)]
    return [zoo.ensure(name, cfg.scale, seed)[0].name for name, seed in wanted]


# --------------------------------------------------------------------------------------------------------------
# Measurements: accuracy by position, parity-consistent errors, pooled linear probes, layer × token patching
# --------------------------------------------------------------------------------------------------------------


def eval_actions(cfg, n_seq: int, length: int, stream: str) -> torch.Tensor:
    """Held-out action sequences, the same for every model (seeded by `stream`, not by the training seed)."""
    return sample_actions(cfg.group_n, n_seq, length, torch_generator(0, "state_tracking", stream))


def accuracy_by_position(pred: torch.Tensor, states: torch.Tensor) -> np.ndarray:
    """Fraction of sequences whose predicted s_t is right, for t = 1 … T."""
    return (pred == states).float().mean(0).numpy()


def parity_chance(n: int) -> float:
    """Parity-consistency of an error drawn uniformly from the wrong states: (n!/2 − 1)/(n! − 1)."""
    g = len(elements(n))
    return (g / 2 - 1) / (g - 1)


def parity_consistent_errors(pred: torch.Tensor, states: torch.Tensor, n: int,
                             where: torch.Tensor | None = None,
                             colouring: torch.Tensor | None = None) -> tuple[float, int]:
    """Among wrong predictions (at the positions `where`, a boolean mask over t; all when None), the fraction
    with the true state's parity ε(s_t) (its class under `colouring`, when given); and the number of errors."""
    wrong = pred != states
    if where is not None:
        wrong = wrong & torch.as_tensor(where)
    n_err = int(wrong.sum())
    if n_err == 0:
        return float("nan"), 0
    same = parity_of_states(pred, n, colouring) == parity_of_states(states, n, colouring)
    return float((same & wrong).sum() / n_err), n_err


@torch.no_grad()
def hidden_states(model, actions: torch.Tensor, tokenizer, n: int) -> torch.Tensor:
    """Residual stream at the position of every action: [layers + 1, batch, T, d] (layer 0 = embeddings)."""
    out = model(input_ids=model_inputs(actions, tokenizer, n), output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, :, 1:].float()


def pooled_probe(features: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """One logistic-regression probe for one layer, pooled over positions as in the official code: features
    [N, T, d] and labels [N, T] are flattened story by story, the probe is fitted on the first min(1000, 0.8 N T)
    rows and scored on the rest. Returns (held-out accuracy, held-out accuracy at each position t = 1 … T)."""
    n_seq, length, d = features.shape
    x, y = features.reshape(-1, d), labels.reshape(-1)
    split = min(1000, int(0.8 * len(x)))
    probe = LogisticRegression(max_iter=5000).fit(x[:split], y[:split])
    right = probe.predict(x[split:]) == y[split:]
    pos = np.arange(split, len(x)) % length
    return float(right.mean()), np.array([right[pos == t].mean() for t in range(length)])


def probe_maps(model, tokenizer, cfg, actions: torch.Tensor,
               colouring: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """State and parity probes at every layer (pooled over positions): {"state", "parity"}: [L+1] held-out
    accuracy; {"state_by_t", "parity_by_t"}: [L+1, T], the same probes' accuracy at each position. With
    `colouring`, the "parity" probe reads that 2-colouring of the state instead of ε."""
    n = cfg.group_n
    h = hidden_states(model, actions, tokenizer, n).numpy()  # [L+1, N, T, d]
    states = state_sequence(actions, n)
    out = {}
    for name, lab in (("state", states), ("parity", parity_of_states(states, n, colouring))):
        scores = [pooled_probe(layer, lab.numpy()) for layer in h]
        out[name] = np.array([s for s, _ in scores])
        out[f"{name}_by_t"] = np.stack([by_t for _, by_t in scores])
    return out


def resolving_layer(probe_map: np.ndarray, threshold: float) -> np.ndarray:
    """For each position t, the first layer whose probe accuracy reaches `threshold` (NaN if none does): the
    depth at which s_t becomes linearly decodable. AA predicts it grows like log t (one scan round per layer)."""
    reached = probe_map >= threshold  # [layers, T]
    first = reached.argmax(0).astype(float)
    first[~reached.any(0)] = np.nan
    return first


def corrupt(actions: torch.Tensor, position: int, same_parity: bool, n: int, generator: torch.Generator,
            colouring: torch.Tensor | None = None):
    """Replace a_position by a different action of the same (or the other) parity (class under `colouring`)."""
    par = parity_table(n) if colouring is None else colouring
    out = actions.clone()
    for i in range(actions.shape[0]):
        a = int(actions[i, position])
        pool = [k for k in range(len(elements(n))) if k != a and (par[k] == par[a]) == same_parity]
        out[i, position] = pool[int(torch.randint(len(pool), (1,), generator=generator))]
    return out


PATCH_MODES = ("window", "prefix")


def _residual(output):
    """The residual stream in a module's output: a decoder block of some families returns a tuple whose first
    entry it is (GPT-2), others the tensor itself (Llama, Qwen2 in current transformers)."""
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def patching_map(model, tokenizer, n: int, clean: torch.Tensor, corrupted: torch.Tensor,
                 mode: str = "window") -> np.ndarray:
    """Activation patching over layers × tokens, as in the official code: the clean run, with the residual stream
    at layer ℓ (0 = embeddings) and token t replaced by the corrupted run's (`mode="window"`: token t alone;
    `"prefix"`: tokens 1 … t), scored at the last position by

        NLD(ℓ, t) = (LD(x; h_ℓ,t ← h'_ℓ,t) − LD(x)) / (LD(x') − LD(x)),   clipped to [0, 1],

    where LD = p(y') − p(y), y and y' are the clean and corrupted runs' predicted final states and p the softmax
    over the state words. Averaged over the pairs whose two predictions differ. Returns [L+1, T]."""
    if mode not in PATCH_MODES:
        raise ValueError(f"unknown patching mode {mode!r}; valid: {', '.join(PATCH_MODES)}")
    perm_ids, _ = token_ids(tokenizer, n)
    modules = [model.get_input_embeddings(), *models.decoder_blocks(model)]

    def probs(input_ids):
        return model(input_ids=input_ids).logits[:, -1][:, perm_ids].softmax(-1)

    x, x_c = model_inputs(clean, tokenizer, n), model_inputs(corrupted, tokenizer, n)
    saved = []  # each module's corrupted output (hooks, not hidden_states: the last of those is after the norm)
    handles = [mod.register_forward_hook(lambda _m, _i, o: saved.append(_residual(o).detach())) for mod in modules]
    try:
        p_corr = probs(x_c)
    finally:
        for h in handles:
            h.remove()
    p_clean = probs(x)
    rows = torch.arange(clean.shape[0])
    y, y_c = p_clean.argmax(-1), p_corr.argmax(-1)
    keep = y != y_c

    def ld(p):
        return p[rows, y_c] - p[rows, y]

    base, new = ld(p_clean), ld(p_corr)
    out = np.zeros((len(modules), clean.shape[1]))
    for i, (module, source) in enumerate(zip(modules, saved)):
        for t in range(1, clean.shape[1] + 1):  # input index t holds a_t (index 0 is bos)
            lo = t if mode == "window" else 1

            def hook(_m, _inp, output, source=source, lo=lo, t=t):
                hidden = _residual(output).clone()
                hidden[:, lo:t + 1] = source[:, lo:t + 1]
                return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

            handle = module.register_forward_hook(hook)
            try:
                nld = ((ld(probs(x)) - base) / (new - base)).clamp(0, 1)
            finally:
                handle.remove()
            out[i, t - 1] = float(nld[keep].mean()) if keep.any() else float("nan")
    return out


# --------------------------------------------------------------------------------------------------------------
# The three signatures and the declared classification rule
# --------------------------------------------------------------------------------------------------------------

LEARNED_ACCURACY = 0.9
"""The declared precondition: a run has learned the task if its held-out accuracy of s_T at the training length
t = T is at least this. Mechanism labels and every claim are about such runs only; the others are reported, with
their count, and excluded (a model that has learned only the parity is "PAA-like" whatever it would become)."""
ABOVE_CHANCE = 0.5
"""A position where the model is right at least this often is one where it still tracks the state; the error
signature reads only errors made there (errors made at chance keep the parity at the chance rate whatever the
mechanism)."""
AA_BAND, PAA_BAND = 1 / 3, 2 / 3
"""Each signature is scaled so that 0 is what AA predicts and 1 what PAA predicts; it votes AA-like at or below
AA_BAND, PAA-like at or above PAA_BAND, and abstains in between."""
RESOLVED = 0.9
"""A layer whose state probe (scaled, :func:`scaled_probe`) is above this has resolved the state: the parity
surplus is not read there (there is no room left for parity beyond the state)."""


def scaled_probe(accuracy, n_classes: int):
    """Probe accuracy scaled from chance (0) to perfect (1)."""
    return (np.asarray(accuracy) - 1 / n_classes) / (1 - 1 / n_classes)


def error_signature(pred: torch.Tensor, states: torch.Tensor, accuracy: np.ndarray, n: int,
                    min_errors: int, colouring: torch.Tensor | None = None) -> tuple[float, int]:
    """The errors' parity: among errors made where the model tracks (accuracy ≥ :data:`ABOVE_CHANCE`), the share
    that keep the true parity, scaled z = (p − c)/(1 − c) with c the chance rate for uniform errors (0 for AA,
    whose errors ignore the parity; 1 for PAA, whose errors keep it). NaN with fewer than `min_errors` such errors.
    `colouring` replaces ε (the null control). Returns (z, number of errors read)."""
    p, n_err = parity_consistent_errors(pred, states, n, where=accuracy >= ABOVE_CHANCE, colouring=colouring)
    if n_err < min_errors:
        return float("nan"), n_err
    c = parity_chance(n)
    return (p - c) / (1 - c), n_err


def probe_signature(probes: dict, n: int) -> float:
    """Parity decodable ahead of the state. At each layer, with the state and parity probes scaled from chance
    (z_s, z_ε), a representation that holds only (partial) state information and errs uniformly gives z_ε = z_s
    exactly; the surplus (z_ε − z_s)/(1 − z_s) is 0 there (AA: parity only with the state) and 1 where the parity is
    decodable though the state is not (PAA). The largest surplus over the layers that have not resolved the state
    (z_s ≤ :data:`RESOLVED`); NaN if every layer has."""
    z_s = scaled_probe(probes["state"], len(elements(n)))
    z_p = scaled_probe(probes["parity"], 2)
    open_ = z_s <= RESOLVED
    if not open_.any():
        return float("nan")
    return float(np.max((z_p[open_] - z_s[open_]) / (1 - z_s[open_])))


def patching_signature(maps: dict, early_layer: int) -> float:
    """Parity reaches the answer early. Window patching at the last token after `early_layer` blocks: the share of
    a parity-changing corruption's effect that token already carries, minus that of a parity-keeping corruption
    (of a_1). AA moves a_1's information forward one scan round per layer, whatever its parity (0); PAA sends the
    parity to every later token first, so only the parity-changing corruption is carried early (towards 1)."""
    return float(maps["different"][early_layer, -1] - maps["same"][early_layer, -1])


def vote(signature: float) -> str | None:
    if math.isnan(signature):
        return None
    return "AA" if signature <= AA_BAND else "PAA" if signature >= PAA_BAND else None


def classify(signatures: Sequence[float]) -> str:
    """The declared rule: each signature votes (:func:`vote`); PAA-like with at least two PAA votes and no AA vote,
    AA-like with at least two AA votes and no PAA vote, "mixed" otherwise."""
    votes = [vote(s) for s in signatures]
    aa, paa = votes.count("AA"), votes.count("PAA")
    if paa >= 2 and aa == 0:
        return "PAA-like"
    if aa >= 2 and paa == 0:
        return "AA-like"
    return "mixed"


def label_run(trained_accuracy: float, signatures: Sequence[float]) -> str:
    """"not learned" below the precondition (:data:`LEARNED_ACCURACY` at the training length), else the
    declared rule's label (:func:`classify`)."""
    if trained_accuracy < LEARNED_ACCURACY:
        return "not learned"
    return classify(signatures)


SIGNATURES = ("errors", "probes", "patching")
VOTING = ("errors", "probes")
"""The signatures that vote in the label. The patching signature is measured and shown but does not vote: on a
model forced to compute parity first it stayed below the PAA band (0.60), and under a parity curriculum it voted
AA, because attention carries a_1's identity to the last token by layer 1 whatever its parity (referee audit of
issue 54), so it could only ever veto a PAA label."""


@dataclass
class RunReport:
    condition: str
    seed: int
    accuracy: np.ndarray  # by position, 1 … eval_length
    trained_accuracy: float  # accuracy at t = train_length
    learned: bool  # trained_accuracy >= LEARNED_ACCURACY
    signatures: dict  # SIGNATURES -> scaled value (0 AA, 1 PAA; NaN: not readable)
    null_signatures: dict  # the same, read against shuffled_parity instead of ε (the null control)
    n_errors: int  # errors the error signature read
    probes: dict  # probe_maps
    patching: dict  # "same"/"different" -> window map [L+1, T]
    long_accuracy: float  # mean state accuracy beyond the training length, T < t <= 2T
    label: str  # the rule's label, or "not learned" (excluded)
    null_label: str  # the rule's label on null_signatures
    losses: list


def patching_maps(model, tokenizer, cfg, seed: int, mode: str = "window",
                  colouring: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Window (or prefix) patching maps for parity-keeping ("same") and parity-changing ("different")
    corruptions of the first action (class-keeping and class-changing under `colouring`), on held-out stories of
    the training length."""
    clean = eval_actions(cfg, cfg.n_patch, cfg.train_length, "patch")
    g = torch_generator(seed, "state_tracking", "corrupt", mode, *(() if colouring is None else ("null",)))
    return {kind: patching_map(model, tokenizer, cfg.group_n, clean,
                               corrupt(clean, 0, kind == "same", cfg.group_n, g, colouring), mode)
            for kind in ("same", "different")}


def signatures_of(model, tokenizer, cfg, seed: int, pred: torch.Tensor, states: torch.Tensor, accuracy,
                  colouring: torch.Tensor | None = None) -> tuple[dict, int, dict, dict]:
    """The three signatures of one run, read against ε (or `colouring`, for the null control): (signatures,
    errors read, probe maps, patching maps)."""
    n = cfg.group_n
    z_err, n_err = error_signature(pred, states, accuracy, n, cfg.min_errors, colouring)
    probes = probe_maps(model, tokenizer, cfg, eval_actions(cfg, cfg.n_probe, cfg.train_length, "probe"), colouring)
    patching = patching_maps(model, tokenizer, cfg, seed, colouring=colouring)
    signatures = {"errors": z_err, "probes": probe_signature(probes, n),
                  "patching": patching_signature(patching, cfg.early_layer)}
    return signatures, n_err, probes, patching


def measure_run(cfg, seed: int, condition: str) -> RunReport:
    """Every measurement of one run, on one torch thread (as the runs train) and one BLAS thread (the probes'
    logistic regressions): these tiny products gain nothing from a second thread, whose OpenMP team stalls on a
    busy machine (measured on the loaded machine: one run's measurements took 12.7 s with two BLAS threads, 2.1 s
    with one; the six runs took 65-71 s of a two-thread notebook kernel)."""
    with one_thread(), threadpool_limits(1):
        return _measure_run(cfg, seed, condition)


def _measure_run(cfg, seed: int, condition: str) -> RunReport:
    z = get_tracker(cfg, seed, condition)
    n, length = cfg.group_n, eval_length(cfg)
    acts = eval_actions(cfg, cfg.n_eval, length, "eval")
    states = state_sequence(acts, n)
    pred = predict_states(z.model, acts, z.tokenizer, n)
    acc = accuracy_by_position(pred, states)
    signatures, n_err, probes, patching = signatures_of(z.model, z.tokenizer, cfg, seed, pred, states, acc)
    null_signatures = signatures_of(z.model, z.tokenizer, cfg, seed, pred, states, acc, shuffled_parity(n))[0]
    trained = float(acc[cfg.train_length - 1])
    return RunReport(condition, seed, acc, trained, trained >= LEARNED_ACCURACY, signatures, null_signatures,
                     n_err, probes, patching, long_accuracy=float(acc[cfg.train_length:].mean()),
                     label=label_run(trained, [signatures[k] for k in VOTING]),
                     null_label=label_run(trained, [null_signatures[k] for k in VOTING]),
                     losses=list(z.info["losses"]))


def measure_all(cfg) -> list[RunReport]:
    return [measure_run(cfg, s, c) for c in CONDITIONS for s in cfg.seeds]


def mean_map(reports: Sequence[RunReport], condition: str, get) -> tuple[np.ndarray, int]:
    """`get(report)` (a probe or patching map) averaged over the runs of `condition` that learned the task, and
    their number (an all-NaN map when none did)."""
    maps = [get(r) for r in reports if r.condition == condition and r.learned]
    if not maps:
        return np.full_like(get(reports[0]), np.nan, dtype=float), 0
    return np.mean(maps, axis=0), len(maps)


def summarise(reports: Sequence[RunReport]) -> dict:
    """The claims' measurements over the runs that learned the task (:data:`LEARNED_ACCURACY`); `labels` lists
    every run, `n_not_learned` counts the excluded ones."""
    learned = [r for r in reports if r.learned]
    by_label = {lab: [r for r in learned if r.label == lab] for lab in ("AA-like", "PAA-like")}
    by_seed = {(r.seed, r.condition): r for r in learned}
    seeds = sorted({r.seed for r in learned})
    # paired by seed: the same seed's plain and parity_aux runs (same data order and initialisation)
    pairs = [(by_seed[s, "plain"], by_seed[s, "parity_aux"]) for s in seeds
             if (s, "plain") in by_seed and (s, "parity_aux") in by_seed]
    # seeds whose two runs got different labels: (the AA-like run, the PAA-like run)
    mixed = [tuple(sorted(p, key=lambda r: r.label)) for p in pairs if {p[0].label, p[1].label} == {"AA-like",
                                                                                                   "PAA-like"}]
    out = {
        "labels": [f"{r.condition}/s{r.seed}:{r.label}" for r in reports],
        "n_not_learned": len(reports) - len(learned),
        "n_mixed_label": sum(r.label == "mixed" for r in learned),
        "n_aa": len(by_label["AA-like"]), "n_paa": len(by_label["PAA-like"]),
        "long_accuracy_aa": [r.long_accuracy for r in by_label["AA-like"]],
        "long_accuracy_paa": [r.long_accuracy for r in by_label["PAA-like"]],
        "n_pairs": len(pairs),
        "is_aa": [float(r.label == "AA-like") for r in learned],
        "is_paa": [float(r.label == "PAA-like") for r in learned],
        "aa_minus_paa_long_accuracy": [a.long_accuracy - b.long_accuracy for a, b in mixed],
        "n_mixed_seeds": len(mixed),
        "n_signatures_read": [sum(not math.isnan(r.signatures[k]) for k in VOTING) for r in learned],
    }
    # the null control: the same rule on the same learned runs, with ε replaced by shuffled_parity
    out["null"] = {"is_aa": [float(r.null_label == "AA-like") for r in learned],
                   "is_paa": [float(r.null_label == "PAA-like") for r in learned],
                   "labels": [f"{r.condition}/s{r.seed}:{r.null_label}" for r in learned],
                   "n_not_learned": out["n_not_learned"],
                   "n_signatures_read": [sum(not math.isnan(r.null_signatures[k]) for k in VOTING)
                                         for r in learned]}
    for name in SIGNATURES:
        out[f"steer_{name}_diff"] = [aux.signatures[name] - pl.signatures[name] for pl, aux in pairs]
    return out


def _finite(xs) -> list[float]:
    return [float(x) for x in xs if x is not None and not math.isnan(x)]


# --------------------------------------------------------------------------------------------------------------
# Claims. Redesigned (issue 36) before any redesigned run was measured: the label is now the vote of three
# signatures (errors, probes, patching) instead of the errors' parity alone, the steering intervention is an
# auxiliary parity objective throughout training instead of a parity stage first, and the error signature reads
# only errors made where the model tracks (this replaces the old `errors_informative` precondition, which asked
# that at least half of the errors be made there).
# --------------------------------------------------------------------------------------------------------------

_ALL_LEARNED = at_most("all_learned", "n_not_learned", 0,
                       f"every run learned the task: the number of runs below {LEARNED_ACCURACY} accuracy at the "
                       "training length is 0")
_READABLE = at_least("signatures_read", "n_signatures_read", 2,
                     "every learned run has both voting signatures readable (errors: enough errors where the model "
                     "tracks; probes: a layer that has not resolved the state), so the rule can label it")


def _rise(name: str):
    return lambda m: _finite(m[f"steer_{name}_diff"])


STEERABLE = Claim(
    chapter="state_tracking", id="steerable",
    paper_statement="Training that encourages the parity heuristic steers models toward PAA (parity decodable "
                    "before the state)",
    paper_value="qualitative (parity supervision yields PAA)",
    criterion="Paired by seed (parity_aux minus plain run of the same seed; parity_aux adds layer-wise parity "
              "supervision after block 1), the probe signature rises (95% t interval above 0; refuted "
              "below +0.10); it is scaled so that 0 is AA's prediction and 1 PAA's",
    effects=[Effect("probe_signature_rise", _rise("probes"), min_effect=0.10)],
    preconditions=[_ALL_LEARNED, at_least("paired_seeds", "n_pairs", 3, "at least 3 seeds with both runs learned")],
    examples=({"steer_probes_diff": [0.4, 0.5, 0.35, 0.45], "n_not_learned": 0, "n_pairs": 4},
              {"steer_probes_diff": [0.02, -0.01, 0.03, 0.0], "n_not_learned": 0, "n_pairs": 4},
              {"steer_probes_diff": [0.05, -0.04, 0.02, -0.03, 0.01, -0.01], "n_not_learned": 0, "n_pairs": 6}),
)

TWO_MECHANISMS = Claim(
    chapter="state_tracking", id="two_mechanisms",
    paper_statement="Models learn one of two mechanisms, AA or PAA, rather than a continuum",
    paper_value="two discrete signatures across runs",
    criterion="Over the runs that learned the task, the share labelled AA-like and the share labelled PAA-like by "
              "the declared rule (a vote of the error and probe signatures) are both above 0 (95% exact "
              "binomial interval over runs; refuted when either lies wholly below 0.10)",
    effects=[Effect("aa_share", "is_aa", min_effect=0.10, method="binomial"),
             Effect("paa_share", "is_paa", min_effect=0.10, method="binomial")],
    preconditions=[_ALL_LEARNED, _READABLE],
    needs_null=True,
    null_description="the same pipeline on the same learned runs with the parity replaced by a fixed random "
                     "balanced 2-colouring of the states that is not a homomorphism (shuffled parity labels): "
                     "no run can be parity-first there, so a PAA-like share found there is the rule labelling noise",
    examples=({"is_aa": [1, 0, 1, 0, 1, 0, 1, 0], "is_paa": [0, 1, 0, 1, 0, 1, 0, 1], "n_not_learned": 0,
               "n_signatures_read": [2] * 8},
              {"is_aa": [1] * 8, "is_paa": [0] * 8, "n_not_learned": 0, "n_signatures_read": [2] * 8}),
)

AA_GENERALISES = Claim(
    chapter="state_tracking", id="aa_generalises",
    paper_statement="AA models generalise to longer sequences better than PAA models",
    paper_value="AA keeps accuracy to longer lengths than PAA",
    criterion="Over the seeds whose two runs got different labels, the AA-like run's mean state accuracy beyond "
              "the training length (T < t <= 2T) minus the PAA-like run's is above 0 (95% t interval; refuted "
              "below +0.05)",
    effects=[Effect("aa_minus_paa_long_accuracy", "aa_minus_paa_long_accuracy", min_effect=0.05)],
    preconditions=[_ALL_LEARNED, _READABLE, at_least("mixed_seeds", "n_mixed_seeds", 3,
                                                     "at least 3 seeds with one AA-like and one PAA-like run")],
    examples=({"aa_minus_paa_long_accuracy": [0.2, 0.15, 0.25], "n_not_learned": 0, "n_mixed_seeds": 3,
               "n_signatures_read": [2] * 6},
              {"aa_minus_paa_long_accuracy": [-0.01, 0.0, 0.01], "n_not_learned": 0, "n_mixed_seeds": 3,
               "n_signatures_read": [2] * 6}),
)

CLAIMS = (STEERABLE, TWO_MECHANISMS, AA_GENERALISES)
