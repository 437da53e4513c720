"""The models whose circuits are searched, seen per attention head: a tiny transformer trained here on a task,
or any Hugging Face causal LM through the same interface (`forward(ids, head_fn)`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..core import models
from ..core.seeding import one_thread, seeded, torch_generator


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
