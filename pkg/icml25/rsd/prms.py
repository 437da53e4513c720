"""Process reward models: the exact step verifier (oracle), its noisy copy, and a learned PRM trained on the
draft's own rollouts (a zoo entry, `rsd-prm`). At ci the learned PRM starts from the draft's weights, as the paper's
PRM (Skywork-o1-Open-PRM-Qwen-2.5-1.5B) starts from a model of its draft's family and size."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core import arithmetic, models, reasoners, tinylm, zoo
from ..core.generation import left_pad
from ..core.seeding import derive_seed, numpy_rng, torch_generator
from ..core.train import train
from .scales import DRAFT_MODEL, FROM_DRAFT, PRM_BATCH, config


def _step_index(prefix: str) -> int:
    return len(arithmetic.split_steps(prefix))


class OraclePRM:
    """The exact step verifier as a PRM: r = 1 when the step is the correct next step of the true chain, else 0.
    A program, not a model: it costs no FLOPs."""

    name = "oracle"
    model = None

    def score(self, problems: Sequence[arithmetic.Problem], prefixes: Sequence[str], steps: Sequence[str]):
        return np.array([float(arithmetic.step_correct(p, _step_index(x), s))
                         for p, x, s in zip(problems, prefixes, steps, strict=True)])


class NoisyOraclePRM(OraclePRM):
    """The oracle with each verdict flipped with probability ε. The flip is a fixed function of (seed, problem,
    prefix, step), so the same step always gets the same reward, whichever δ is being run. It stands in for a PRM
    of that quality, so it is charged the FLOPs of `cost_model` reading what a PRM reads (the chapter passes the
    draft, the learned PRM's size); with `cost_model=None` it costs nothing, as a program."""

    def __init__(self, epsilon: float, seed: int, cost_model=None):
        if not 0 <= epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon, self.seed, self.name = epsilon, seed, f"noisy oracle (ε={epsilon:g})"
        self.model = cost_model

    def score(self, problems, prefixes, steps):
        exact = super().score(problems, prefixes, steps)
        u = np.array([numpy_rng(derive_seed(self.seed, "flip"), p.prompt, x, s).random()
                      for p, x, s in zip(problems, prefixes, steps)])
        return np.where(u < self.epsilon, 1.0 - exact, exact)


PRM_GOOD, PRM_BAD = "+", "-"


class LearnedPRM:
    """A model with a value head read at the last token of a step, as the paper's PRMs are (a sigmoid value head at
    each step-end token): r = σ(z), z the head's logit after `prompt + prefix + step`. The head is the difference
    of the output layer's rows for "+" (step correct) and "-" (`own_value_head`), so r = p("+") / (p("+") +
    p("-")), a score in [0, 1]. It is a model, so its tokens are counted in FLOPs."""

    name = "learned PRM"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        self.model, self.tokenizer = model, tokenizer
        self.good, self.bad = tokenizer.convert_tokens_to_ids([PRM_GOOD, PRM_BAD])

    def texts(self, problems, prefixes, steps) -> list[str]:
        return [p.prompt + x + s for p, x, s in zip(problems, prefixes, steps, strict=True)]

    @torch.inference_mode()
    def score(self, problems, prefixes, steps):
        rows = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in self.texts(problems, prefixes, steps)]
        ids, mask = (t.to(self.model.device) for t in left_pad(rows, self.tokenizer.pad_token_id))
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        return torch.sigmoid(value_logit(logits, self.good, self.bad)).cpu().numpy()


def value_logit(logits: torch.Tensor, good: int, bad: int) -> torch.Tensor:
    """The value head's logit z = logit("+") − logit("-") at the positions of `logits`."""
    return (logits[..., good] - logits[..., bad]).float()


@dataclass
class StepLabels:
    """The draft's rollouts as PRM training data: each rollout's token ids, the position of each step's last token
    and the checker's verdict on that step (1 = the step is the correct next step of the true chain)."""

    ids: list[list[int]]
    ends: list[list[int]]
    labels: list[list[int]]

    def class_weights(self) -> dict[int, float]:
        """Class-balanced weights n / (2 n_c): right and wrong steps carry half of the loss each."""
        flat = [y for row in self.labels for y in row]
        return {c: len(flat) / (2 * max(1, flat.count(c))) for c in (0, 1)}


def step_labels(tokenizer: PreTrainedTokenizerBase, problems: Sequence[arithmetic.Problem],
                solutions: Sequence[str]) -> StepLabels:
    """One training row per solution: `prompt + solution` as tokens, with each step's last-token position (the
    length of `prompt + steps up to it`, tokenized as the PRM reads it when scoring, minus one) and the exact
    checker's label (`arithmetic.step_labels`)."""
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    out = StepLabels([], [], [])
    for p, sol in zip(problems, solutions, strict=True):
        steps = arithmetic.split_steps(sol)
        if not steps:
            continue
        out.ids.append(encode(p.prompt + sol))
        out.ends.append([len(encode(p.prompt + "".join(steps[:k + 1]))) - 1 for k in range(len(steps))])
        out.labels.append([int(ok) for ok in arithmetic.step_labels(p, sol)])
    return out


def draft_rollouts(draft: zoo.ZooModel, n_problems: int, seed: int, stream: str,
                   sampling: str) -> tuple[list[arithmetic.Problem], list[str]]:
    """The draft's sampled solutions (temperature 1) to `n_problems` problems of `stream`, drawn with the
    generator `sampling` of `seed`."""
    problems = arithmetic.sample_problems(n_problems, seed, 1, 5, stream=stream)
    return problems, reasoners.solve(draft.model, draft.tokenizer, problems, temperature=1.0,
                                     generator=torch_generator(seed, sampling))


def prm_training_data(draft: zoo.ZooModel, n_problems: int, seed: int,
                      tokenizer: PreTrainedTokenizerBase | None = None) -> StepLabels:
    """The learned PRM's training data: the draft's rollouts of `n_problems` training-stream problems, every step
    labelled by the exact checker, tokenized by the PRM's `tokenizer` (default: the draft's)."""
    problems, sols = draft_rollouts(draft, n_problems, seed, "rsd-prm", "rsd-prm-rollouts")
    return step_labels(tokenizer or draft.tokenizer, problems, sols)


def step_batches(data: StepLabels, pad_id: int, batch_size: int, seed: int) -> Iterator[dict[str, torch.Tensor]]:
    """An endless stream of batches of `batch_size` rollouts sampled with replacement from `seed`: right-padded
    ids, the (row, position) of every step's last token, its label and its class weight."""
    g = torch_generator(seed, "rsd-prm-batches")
    weights = data.class_weights()
    while True:
        idx = torch.randint(len(data.ids), (batch_size,), generator=g).tolist()
        width = max(len(data.ids[i]) for i in idx)
        ids = torch.full((batch_size, width), pad_id, dtype=torch.long)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        rows, cols, labels = [], [], []
        for b, i in enumerate(idx):
            ids[b, :len(data.ids[i])] = torch.as_tensor(data.ids[i])
            mask[b, :len(data.ids[i])] = 1
            rows += [b] * len(data.ends[i])
            cols += data.ends[i]
            labels += data.labels[i]
        yield {"input_ids": ids, "attention_mask": mask, "rows": torch.tensor(rows), "cols": torch.tensor(cols),
               "labels": torch.tensor(labels, dtype=torch.float32),
               "weights": torch.tensor([weights[y] for y in labels])}


def value_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor], good: int, bad: int) -> torch.Tensor:
    """Class-weighted binary cross-entropy of the value head at every step's last token."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    z = value_logit(logits[batch["rows"], batch["cols"]], good, bad)
    return F.binary_cross_entropy_with_logits(z, batch["labels"], weight=batch["weights"])


def own_value_head(model: PreTrainedModel) -> PreTrainedModel:
    """Untie the output layer from the input embeddings, so that the value head's rows ("+", "-") are trained
    without moving how the model reads the operators "+" and "-"."""
    if model.config.tie_word_embeddings:
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().clone())
        model.config.tie_word_embeddings = False
    return model


def prm_settings(cfg) -> dict:
    """The learned PRM's training settings in a chapter config `cfg` (its `prm_*` knobs), as `train_prm` takes them."""
    return {"preset": cfg.prm_preset, "n_problems": cfg.prm_problems, "steps": cfg.prm_steps, "batch_size": PRM_BATCH,
            "lr": cfg.prm_lr}


PRM_ZOO = {s: prm_settings(config(s)) for s in ("smoke", "ci", "full")}


def train_prm(draft: zoo.ZooModel, preset: str, n_problems: int, steps: int, seed: int, batch_size: int = PRM_BATCH,
              lr: float = 3e-3):
    """A learned PRM trained on `draft`'s rollouts of `n_problems` training problems for `steps` optimiser steps
    of `batch_size` rollouts (every step of a rollout labelled at once): (model, tokenizer, info).
    With `preset` = `FROM_DRAFT` it starts from a copy of the draft (which already computes the next step, so it
    has only to learn to compare), else it is a `preset`-sized char-level LM trained from scratch."""
    if preset == FROM_DRAFT:
        model, tok = copy.deepcopy(draft.model).float(), draft.tokenizer
    else:
        tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
        model = tinylm.make_model(preset, tok, derive_seed(seed, "rsd-prm"))
    data = prm_training_data(draft, n_problems, seed, tok)
    good, bad = tok.convert_tokens_to_ids([PRM_GOOD, PRM_BAD])
    result = train(own_value_head(model), step_batches(data, tok.pad_token_id, batch_size, seed), steps, lr=lr,
                   loss_fn=lambda m, b: value_loss(m, b, good, bad), desc=f"rsd-prm (seed {seed})")
    flat = [y for row in data.labels for y in row]
    return model, tok, {"losses": result.losses, "n_rollouts": len(data.ids), "n_steps": len(flat),
                        "frac_correct": sum(flat) / max(1, len(flat)), "class_weights": data.class_weights()}


@zoo.register("rsd-prm", PRM_ZOO)
def _build_prm(cfg, seed: int):
    return train_prm(zoo.get(DRAFT_MODEL, cfg.scale, seed), cfg.preset, cfg.n_problems, cfg.steps, seed,
                     cfg.batch_size, cfg.lr)


def learned_prm(cfg, seed: int, draft: zoo.ZooModel | None = None) -> LearnedPRM:
    """The learned PRM of `seed`, trained with `cfg`'s `prm_*` settings on rollouts of the draft `cfg.draft_model`:
    for the zoo's draft at the scale's own settings, trained once and cached in the zoo (`rsd-prm`); for any other
    draft (`draft`, already loaded) or settings, trained now."""
    settings = prm_settings(cfg)
    if cfg.draft_model == DRAFT_MODEL and settings == PRM_ZOO[cfg.scale]:
        z = zoo.get("rsd-prm", cfg.scale, seed)
        return LearnedPRM(z.model, z.tokenizer)
    draft = draft if draft is not None else models.get(cfg.draft_model, cfg.scale, seed)
    model, tok, _ = train_prm(draft, seed=seed, **settings)
    return LearnedPRM(model.eval(), tok)
