"""The trackers: a tiny Llama reads [bos, a_1, …, a_T] and its LM head names s_t at the position of a_t; trained with
per-token state supervision under a length curriculum, with the auxiliary parity objective as the steering
intervention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import models, tinylm, train
from ..core.seeding import torch_generator
from .group import _check_n, elements, perm_word
from .task import parity_of_states, sample_actions, state_sequence

PARITY_WORDS = ("even", "odd")
CONDITIONS = ("plain", "parity_aux")


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
