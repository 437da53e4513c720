r"""Memory Layers at Scale (Berges et al., ICML 2025): a product-key memory that adds capacity, not FLOPs.

A memory layer is a trainable key-value lookup with $N$ values. Scoring a query against all $N$ keys would cost
$O(N d)$; the *product key* trick (Lample et al., 2019) makes the keys a Cartesian product of two sets of
$\sqrt N$ half-keys, so the top-$k$ of all $N$ scores is found among $k^2$ candidates:

$$ s(q, (i, j)) = \langle q_1, K^1_i \rangle + \langle q_2, K^2_j \rangle, \qquad
   \operatorname{top}_k \{ s(q, n) \}_{n \le N} \subseteq \operatorname{top}_k(q_1 K^1) \times \operatorname{top}_k(q_2 K^2)
   \qquad (1) $$

and the layer returns a softmax-weighted sum of the $k$ selected values (an *embedding bag*),
$y = \sum_{n \in I} \operatorname{softmax}(s)_n V_n$ (2). The paper's Memory+ block gates it like a SwiGLU,
$\text{out} = W_2\,(y \odot \operatorname{SiLU}(W_1 x))$ (3), uses several heads (one bag of $H k$ values), shares
one value pool among the few layers whose feed-forward block it replaces, and trains the values with a higher
learning rate. Equation numbers are this chapter's.

Everything here is laptop-sized: a two-layer Llama with d = 64, and a synthetic *fact world* (subjects,
relations, objects; a fact is the sequence ``s r o``, scored on ``o``) where capacity is the bottleneck, against
a control task (the core's modular arithmetic) where it is not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from . import ops
from .core import arithmetic, flops, tinylm
from .core.facts import Facts, sample_facts
from .core.claims import Claim
from .core.config import make_config
from .core.seeding import seeded, torch_generator
from .core.train import lr_at

config = make_config({
    "smoke": {"seeds": [0], "n_facts": [64, 128], "n_relations": 8, "n_objects": 64, "steps": 15,
              "batch_size": 64, "lr": 1e-2, "value_lr_mult": 10.0, "d_model": 32, "n_keys": 16, "heads": 2,
              "knn": 4, "k_dim": 16, "dense_flop_multiples": [2.0], "control_problems": 100,
              "control_batch_size": 16, "lookup_sizes": [8, 16, 32], "lookup_tokens": 256},
    "ci": {"seeds": [0, 1, 2], "n_facts": [256, 1024], "n_relations": 8, "n_objects": 64, "steps": 200,
           "batch_size": 256, "lr": 1e-2, "value_lr_mult": 10.0, "d_model": 32, "n_keys": 64, "heads": 2,
           "knn": 8, "k_dim": 16, "dense_flop_multiples": [2.0, 4.0], "control_problems": 1000,
           "control_batch_size": 64, "lookup_sizes": [16, 32, 64, 128, 256], "lookup_tokens": 1024},
    "full": {"seeds": [0, 1, 2, 3, 4], "n_facts": [4096, 16384], "n_relations": 16, "n_objects": 256,
             "steps": 5000, "batch_size": 512, "lr": 2e-3, "value_lr_mult": 10.0, "d_model": 128, "n_keys": 256,
             "heads": 4, "knn": 16, "k_dim": 64, "dense_flop_multiples": [2.0, 4.0], "control_problems": 10000,
             "control_batch_size": 128, "lookup_sizes": [16, 32, 64, 128, 256, 512, 1024], "lookup_tokens": 4096},
})

ISO_FLOP = Claim(
    chapter="memory_layers", id="iso_flop",
    paper_statement="At matched compute, memory-augmented models clearly outperform dense models, most of all on "
                    "factual tasks",
    paper_value="e.g. NQ 27.06 vs 25.24, MMLU 63.04 vs 59.68 (8B base + ~64B memory vs dense 8B, 1T tokens)",
    criterion="On the larger fact world, the memory model (FLOPs per token at most the dense model's) recalls at "
              "least 10 points more facts than the dense FFN-4d model, mean over >= 3 seeds",
    test=lambda m: m["flop_ratio"] <= 1.0 and np.mean(m["memory_acc"]) - np.mean(m["dense_acc"]) >= 0.10,
)

BEATS_2X = Claim(
    chapter="memory_layers", id="beats_2x",
    paper_statement="Memory-augmented models outperform dense models with more than twice the compute budget",
    paper_value="8B+memory close to Llama2-7B trained on 2x the tokens with 10x the FLOPs (unverified summary)",
    criterion="On the larger fact world, the memory model's mean fact accuracy is at least that of the dense "
              "model with >= 2x its FLOPs per token (means over >= 3 seeds)",
    test=lambda m: m["dense_flop_ratio"] >= 2.0 and np.mean(m["memory_acc"]) >= np.mean(m["dense2x_acc"]),
)

FACTUAL = Claim(
    chapter="memory_layers", id="factual",
    paper_statement="The gains of memory layers are largest on factual tasks",
    paper_value="largest gains on factual QA (NQ, TriviaQA) vs smaller on reasoning/coding",
    criterion="The memory model's accuracy advantage over the dense model on the control task (modular "
              "arithmetic) is smaller than its advantage on the larger fact world (means over >= 3 seeds)",
    test=lambda m: (np.mean(m["control_memory"]) - np.mean(m["control_dense"])
                    < np.mean(m["fact_memory"]) - np.mean(m["fact_dense"])),
)


# --- Eq. (1): the product-key top-k ------------------------------------------------------------------------

def check_memory_shape(n_values: int, knn: int, k_dim: int, heads: int = 1, query_dim: int | None = None) -> int:
    """Validate a product-key memory's sizes; return n_keys = sqrt(n_values). Raises ValueError on bad input."""
    n_keys = math.isqrt(n_values)
    if n_values < 1 or n_keys * n_keys != n_values:
        raise ValueError(f"the number of values N={n_values} must be a perfect square (N = n_keys**2)")
    if not 1 <= knn <= n_keys:
        raise ValueError(f"knn={knn} must lie in [1, sqrt(N)={n_keys}]: each half offers only sqrt(N) sub-keys")
    if k_dim < 2 or k_dim % 2:
        raise ValueError(f"k_dim={k_dim} must be even and >= 2 so that a query splits into two halves")
    if query_dim is not None and query_dim != heads * k_dim:
        raise ValueError(f"query dimension {query_dim} does not split into heads={heads} x k_dim={k_dim}")
    return n_keys


def half_scores(query: torch.Tensor, subkeys1: torch.Tensor,
                subkeys2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two halves of Eq. (1): <q_1, K^1_i> and <q_2, K^2_j>, each [..., H, n]."""
    half = subkeys1.shape[-1]
    return (torch.einsum("...hd,hnd->...hn", query[..., :half], subkeys1),
            torch.einsum("...hd,hnd->...hn", query[..., half:], subkeys2))


def product_key_topk(query: torch.Tensor, subkeys1: torch.Tensor, subkeys2: torch.Tensor,
                     knn: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-`knn` of the N = n^2 product-key scores (Eq. 1) without scoring all N keys.

    `query` [..., H, k_dim]; `subkeys1`, `subkeys2` [H, n, k_dim/2]. Returns (scores, indices), both
    [..., H, knn], sorted by decreasing score; index i*n + j stands for the pair (sub-key i, sub-key j).
    Each half keeps its own top-knn, and the top-knn of the knn^2 candidate sums is the global top-knn: any
    pair outside the candidates is beaten by knn candidate pairs in both halves.
    """
    H, n, half = subkeys1.shape
    check_memory_shape(n * n, knn, 2 * half, H, query.shape[-2] * query.shape[-1])
    if subkeys2.shape != subkeys1.shape:
        raise ValueError(f"sub-key tables differ in shape: {list(subkeys1.shape)} vs {list(subkeys2.shape)}")
    s1, s2 = half_scores(query, subkeys1, subkeys2)
    top1, idx1 = s1.topk(knn, dim=-1)
    top2, idx2 = s2.topk(knn, dim=-1)
    candidates = (top1.unsqueeze(-1) + top2.unsqueeze(-2)).flatten(-2)  # [..., H, knn*knn]
    scores, flat = candidates.topk(knn, dim=-1)
    i = idx1.gather(-1, flat // knn)
    j = idx2.gather(-1, flat % knn)
    return scores, i * n + j


def brute_force_topk(query: torch.Tensor, subkeys1: torch.Tensor, subkeys2: torch.Tensor,
                     knn: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain reference for Eq. (1): score all N = n^2 keys, then take the top-`knn`."""
    s1, s2 = half_scores(query, subkeys1, subkeys2)
    return (s1.unsqueeze(-1) + s2.unsqueeze(-2)).flatten(-2).topk(knn, dim=-1)


def decode_index(index: torch.Tensor, n_keys: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A value index back to its (first-half, second-half) sub-key pair."""
    return index // n_keys, index % n_keys


# --- Eqs. (2)-(3): the Memory+ layer ------------------------------------------------------------------------

def new_values(n_values: int, dim: int, seed: int) -> nn.Parameter:
    """A value pool V [N, dim] ~ N(0, dim^-1/2), to be shared by every memory layer of a model."""
    g = torch_generator(seed, "memory_values")
    return nn.Parameter(torch.randn(n_values, dim, generator=g) * dim ** -0.5)


class MemoryPlus(nn.Module):
    r"""Memory+ (Eq. 3): out = W_2 (y ⊙ SiLU(W_1 x)), with y the product-key lookup of Eqs. (1)-(2).

    The query projection is d -> heads·k_dim (with bias); each head has two sub-key tables [n_keys, k_dim/2];
    `values` is a shared [n_keys^2, d] parameter (pass the same one to every memory layer). `query_norm`
    RMS-normalises each query half before scoring (the paper's optional normalisation for stability, §3.1.4).
    The lookup runs through `icml25.ops.embedding_bag` (the compiled kernel when it built).
    """

    def __init__(self, d_model: int, values: nn.Parameter, heads: int, knn: int, k_dim: int,
                 query_norm: bool = False, seed: int = 0):
        super().__init__()
        n_keys = check_memory_shape(values.shape[0], knn, k_dim, heads)
        if values.shape[1] != d_model:
            raise ValueError(f"values have dimension {values.shape[1]}; the model's is d_model={d_model}")
        self.heads, self.knn, self.k_dim, self.n_keys, self.query_norm = heads, knn, k_dim, n_keys, query_norm
        self.values = values
        with seeded(seed, "memory_plus"):
            self.query = nn.Linear(d_model, heads * k_dim, bias=True)
            nn.init.xavier_uniform_(self.query.weight)
            nn.init.zeros_(self.query.bias)
            bound = k_dim ** -0.5
            self.subkeys = nn.Parameter(torch.empty(2, heads, n_keys, k_dim // 2).uniform_(-bound, bound))
            self.w1 = nn.Linear(d_model, d_model, bias=False)
            self.w2 = nn.Linear(d_model, d_model, bias=False)
            for w in (self.w1, self.w2):
                nn.init.normal_(w.weight, std=d_model ** -0.5)

    def lookup(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Selected value indices [T, H·knn] and their weights [T, H·knn] (each head's softmax sums to 1)."""
        q = self.query(x).view(-1, self.heads, self.k_dim)
        if self.query_norm:
            half = self.k_dim // 2
            q = torch.cat([F.rms_norm(q[..., :half], (half,)), F.rms_norm(q[..., half:], (half,))], dim=-1)
        scores, index = product_key_topk(q, self.subkeys[0], self.subkeys[1], self.knn)
        weights = torch.softmax(scores.float(), dim=-1).to(x.dtype)  # Eq. (2), per head
        return index.flatten(1), weights.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        index, weights = self.lookup(flat)
        y = ops.embedding_bag(self.values, index, weights)  # Eq. (2), one bag of H·knn values per token
        return self.w2(y * F.silu(self.w1(flat))).view(shape)  # Eq. (3)


# --- tiny Llamas with and without memory --------------------------------------------------------------------

@dataclass(frozen=True)
class Arch:
    """A model of the comparison: dense FFN width `d_ff` everywhere, or memory in `memory_layers`."""

    name: str
    d_ff: int
    memory_layers: tuple[int, ...] = ()
    query_norm: bool = False


def tiny_llama(vocab_size: int, d_model: int, d_ff: int, seed: int, n_layers: int = 2, n_heads: int = 4,
               max_len: int = 64) -> LlamaForCausalLM:
    """A tiny Llama with an explicit FFN width (the core presets fix it), initialised from `seed`."""
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=d_model, intermediate_size=d_ff,
                      num_hidden_layers=n_layers, num_attention_heads=n_heads, num_key_value_heads=n_heads,
                      max_position_embeddings=max_len, tie_word_embeddings=True, pad_token_id=0)
    with seeded(seed, "init", "memory_layers"):
        return LlamaForCausalLM(cfg)


def add_memory(model: LlamaForCausalLM, layers: Sequence[int], n_keys: int, heads: int, knn: int, k_dim: int,
               query_norm: bool = False, seed: int = 0) -> nn.Parameter:
    """Replace the feed-forward block of `layers` by Memory+ layers sharing one value pool; return the pool."""
    n_layers = model.config.num_hidden_layers
    bad = [i for i in layers if not 0 <= i < n_layers]
    if bad or not layers:
        raise ValueError(f"memory layers {list(layers)} must be a non-empty subset of 0..{n_layers - 1}")
    d = model.config.hidden_size
    values = new_values(n_keys * n_keys, d, seed)
    for i in layers:
        model.model.layers[i].mlp = MemoryPlus(d, values, heads, knn, k_dim, query_norm, seed=seed + 1000 * i)
    return values


def memory_flops_per_token(d_model: int, n_keys: int, heads: int, knn: int, k_dim: int) -> int:
    """FLOPs (2 per multiply-add) of one Memory+ layer per token: query projection, 2·n_keys sub-key scores of
    k_dim/2 per head, the weighted sum of heads·knn values, and W_1, W_2. Top-k comparisons are not counted."""
    macs = d_model * heads * k_dim + heads * n_keys * k_dim + heads * knn * d_model + 2 * d_model * d_model
    return 2 * macs


def memory_params(d_model: int, n_keys: int, heads: int, k_dim: int) -> int:
    """Parameters of one Memory+ layer without its (shared) values: query, sub-keys, W_1, W_2."""
    return d_model * heads * k_dim + heads * k_dim + heads * n_keys * k_dim + 2 * d_model * d_model


def flops_per_token(model: LlamaForCausalLM, seq_len: int) -> float:
    """Forward FLOPs per token averaged over a sequence of `seq_len` (core accounting), with each Memory+
    layer's FLOPs in place of the dense FFN it replaced."""
    cfg = model.config
    total = flops.forward_flops(cfg, seq_len) / seq_len
    for layer in model.model.layers:
        if isinstance(layer.mlp, MemoryPlus):
            m = layer.mlp
            total += memory_flops_per_token(cfg.hidden_size, m.n_keys, m.heads, m.knn, m.k_dim)
            total -= 2 * 3 * cfg.hidden_size * cfg.intermediate_size
    return total


def dense_ff_for_flops(target_flops: float, vocab_size: int, d_model: int, seq_len: int, n_layers: int = 2) -> int:
    """The FFN width that gives a dense tiny Llama `target_flops` forward FLOPs per token (rounded to 8)."""
    base = flops_per_token(tiny_llama(vocab_size, d_model, 8, 0, n_layers), seq_len)
    per_unit = 2 * 3 * d_model * n_layers
    return max(8, int(round((target_flops - base) / per_unit / 8)) * 8 + 8)


def build(arch: Arch, vocab_size: int, cfg, seed: int, seq_len: int) -> tuple[LlamaForCausalLM, nn.Parameter | None]:
    model = tiny_llama(vocab_size, cfg.d_model, arch.d_ff, seed, max_len=max(seq_len, 8))
    values = None
    if arch.memory_layers:
        values = add_memory(model, arch.memory_layers, cfg.n_keys, cfg.heads, cfg.knn, cfg.k_dim,
                            arch.query_norm, seed)
    return model, values


# --- data: the fact world and the control task --------------------------------------------------------------

@dataclass(frozen=True)
class FactWorld(Facts):
    """The core's fact world (separate objects) as token ids: 0 is padding/BOS, then subjects, relations,
    objects. A fact is the sequence [BOS, s, r] whose next token must be o."""

    @property
    def vocab_size(self) -> int:
        return 1 + self.n_subjects + self.n_relations + self.n_objects

    def object_token(self, o) -> np.ndarray:
        return 1 + self.n_subjects + self.n_relations + np.asarray(o)

    def inputs(self) -> torch.Tensor:
        """[F, 3] token ids: BOS, subject, relation."""
        s = 1 + self.subject
        r = 1 + self.n_subjects + self.relation
        return torch.as_tensor(np.stack([np.zeros_like(s), s, r], axis=1), dtype=torch.long)

    def targets(self) -> torch.Tensor:
        return torch.as_tensor(self.object_token(self.object), dtype=torch.long)


def fact_world(n_facts: int, seed: int, n_relations: int = 16, n_objects: int = 256) -> FactWorld:
    """`n_facts` distinct (subject, relation) pairs (n_facts/n_relations subjects, every subject with every
    relation), each with a uniformly random object from the core's fact world."""
    if n_facts < n_relations or n_facts % n_relations:
        raise ValueError(f"n_facts={n_facts} must be a positive multiple of n_relations={n_relations}")
    return FactWorld(**vars(sample_facts(n_facts // n_relations, n_relations, seed, n_objects)))


@dataclass(frozen=True)
class Task:
    """Next-token prediction with a mask: `inputs` [M, T] token ids, `targets` [M, T] with -100 where unscored."""

    name: str
    inputs: torch.Tensor
    targets: torch.Tensor
    vocab_size: int


def fact_task(world: FactWorld) -> Task:
    inputs = world.inputs()
    targets = torch.full_like(inputs, -100)
    targets[:, -1] = world.targets()
    return Task(f"facts ({len(inputs)})", inputs, targets, world.vocab_size)


def control_task(n_problems: int, seed: int) -> Task:
    """The core's modular arithmetic (1-2 operations), scored on every digit after '=' (each is one operation
    on the two digits before it: a rule, not a fact to memorise). Characters map to ids 1.., 0 is padding."""
    problems = arithmetic.sample_problems(n_problems, seed, 1, 2, stream="memory_control")
    texts = [p.prompt + p.solution for p in problems]
    vocab = {ch: i + 1 for i, ch in enumerate(arithmetic.ALPHABET)}
    T = max(map(len, texts))
    ids = torch.zeros(len(texts), T, dtype=torch.long)
    targets = torch.full((len(texts), T), -100, dtype=torch.long)
    for row, text in enumerate(texts):
        ids[row, :len(text)] = torch.tensor([vocab[c] for c in text])
        for pos, ch in enumerate(text[:-1]):
            if ch == "=":
                targets[row, pos] = vocab[text[pos + 1]]
    return Task("control: modular arithmetic", ids, targets, len(vocab) + 1)


# --- training and evaluation --------------------------------------------------------------------------------

def task_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


@torch.no_grad()
def accuracy(model: nn.Module, task: Task, batch_size: int = 1024) -> float:
    """Fraction of scored positions where the greedy next token is the target (teacher forcing)."""
    model.eval()
    hits = total = 0
    for start in range(0, len(task.inputs), batch_size):
        x, t = task.inputs[start:start + batch_size], task.targets[start:start + batch_size]
        pred = model(input_ids=x).logits.argmax(-1)
        mask = t != -100
        hits += int((pred[mask] == t[mask]).sum())
        total += int(mask.sum())
    return hits / total


def batches(task: Task, batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    g = torch_generator(seed, "memory_batches", task.name)
    while True:
        idx = torch.randint(len(task.inputs), (batch_size,), generator=g)
        yield task.inputs[idx], task.targets[idx]


def train(model: nn.Module, task: Task, steps: int, batch_size: int, lr: float, seed: int,
          values: nn.Parameter | None = None, value_lr_mult: float = 1.0) -> list[float]:
    """AdamW (0.9, 0.95) with the core's warmup-cosine schedule; the shared memory values (if any) get their
    own parameter group at `value_lr_mult` × the learning rate and no weight decay. Returns the loss curve."""
    others = [p for p in model.parameters() if values is None or p is not values]
    groups = [{"params": others, "mult": 1.0, "weight_decay": 0.1}]
    if values is not None:
        groups.append({"params": [values], "mult": value_lr_mult, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    data, losses = batches(task, batch_size, seed), []
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, max(1, steps // 20)) * group["mult"]
        loss = task_loss(model, *next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


@torch.no_grad()
def value_usage(model: nn.Module, task: Task) -> float:
    """Fraction of the shared values selected by at least one token of `task` in any memory layer."""
    used, n_values = None, None
    for layer in model.model.layers:
        if isinstance(layer.mlp, MemoryPlus):
            captured = []
            handle = layer.mlp.register_forward_hook(lambda mod, inp, out: captured.append(mod.lookup(
                inp[0].reshape(-1, inp[0].shape[-1]))[0]))
            model(input_ids=task.inputs)
            handle.remove()
            n_values = layer.mlp.values.shape[0]
            hit = torch.zeros(n_values, dtype=torch.bool)
            hit[captured[0].flatten()] = True
            used = hit if used is None else used | hit
    if used is None:
        raise ValueError("the model has no memory layer")
    return float(used.float().mean())


def architectures(cfg, vocab_size: int, seq_len: int) -> list[Arch]:
    """Dense FFN-4d, the same with its second FFN replaced by memory (≈ iso-FLOP), and dense models whose FFN
    is widened to `dense_flop_multiples` × the memory model's FLOPs per token."""
    d = cfg.d_model
    memory = Arch("memory", 4 * d, (1,))
    mem_model, _ = build(memory, vocab_size, cfg, 0, seq_len)
    mem_flops = flops_per_token(mem_model, seq_len)
    wider = [Arch(f"dense {m:g}x", dense_ff_for_flops(m * mem_flops, vocab_size, d, seq_len))
             for m in cfg.dense_flop_multiples]
    return [Arch("dense", 4 * d), memory, *wider]


def run(arch: Arch, task: Task, cfg, seed: int, batch_size: int | None = None) -> dict:
    """Train `arch` on `task` from `seed` (batch `batch_size`, default `cfg.batch_size`); its accuracy, FLOPs
    per token, parameters, value usage and training time."""
    seq_len = task.inputs.shape[1]
    model, values = build(arch, task.vocab_size, cfg, seed, seq_len)
    start = time.perf_counter()
    losses = train(model, task, cfg.steps, batch_size or cfg.batch_size, cfg.lr, seed, values, cfg.value_lr_mult)
    return {"arch": arch.name, "task": task.name, "seed": seed, "accuracy": accuracy(model, task),
            "flops_per_token": flops_per_token(model, seq_len), "params": tinylm.n_params(model),
            "usage": value_usage(model, task) if values is not None else None, "losses": losses,
            "seconds": time.perf_counter() - start}


def lookup_cost(n_keys_list: Sequence[int], d_model: int, heads: int, knn: int, k_dim: int,
                n_tokens: int, seed: int) -> dict[str, list[float]]:
    """Seconds per token of the product-key search (Eq. 1) against brute force scoring of all N keys."""
    g = torch_generator(seed, "lookup_cost")
    out = {"n_values": [], "product_key": [], "brute_force": []}
    for n in n_keys_list:
        q = torch.randn(n_tokens, heads, k_dim, generator=g)
        k1, k2 = (torch.randn(heads, n, k_dim // 2, generator=g) for _ in range(2))
        out["n_values"].append(n * n)
        for name, fn in (("product_key", product_key_topk), ("brute_force", brute_force_topk)):
            start = time.perf_counter()
            fn(q, k1, k2, min(knn, n))
            out[name].append((time.perf_counter() - start) / n_tokens)
    return out


def scaling_experiment(cfg) -> list[dict]:
    """Every training run of the scaling notebook, one dict each (see `run`), for each seed: on the largest
    fact world (drawn from the seed) every architecture and the memory model with query normalisation; on the
    smaller worlds dense and memory; on the control task dense and memory (batch `control_batch_size`)."""
    runs = []
    for seed in cfg.seeds:
        for n_facts in cfg.n_facts:
            task = fact_task(fact_world(n_facts, seed, cfg.n_relations, cfg.n_objects))
            archs = architectures(cfg, task.vocab_size, task.inputs.shape[1])
            if n_facts == max(cfg.n_facts):
                archs.append(Arch("memory + query norm", 4 * cfg.d_model, (1,), True))
            else:
                archs = archs[:2]
            runs += [dict(run(arch, task, cfg, seed), n_facts=n_facts) for arch in archs]
        control = control_task(cfg.control_problems, seed)
        for arch in architectures(cfg, task.vocab_size, task.inputs.shape[1])[:2]:
            runs.append(dict(run(arch, control, cfg, seed, cfg.control_batch_size), n_facts=None))
    return runs


def select(runs: Sequence[dict], key: str = "accuracy", **where) -> list:
    """`key` of the runs matching every `where` condition, in seed order."""
    return [r[key] for r in runs if all(r[k] == v for k, v in where.items())]
