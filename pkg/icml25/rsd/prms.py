"""Process reward models: the exact step verifier (oracle), its noisy copy, and a learned PRM trained on the
draft's own rollouts (a zoo entry, `rsd-prm`). At ci the learned PRM starts from the draft's weights, as the paper's
PRM (Skywork-o1-Open-PRM-Qwen-2.5-1.5B) starts from a model of its draft's family and size."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core import arithmetic, models, reasoners, tinylm, zoo
from ..core.generation import left_pad
from ..core.seeding import derive_seed, numpy_rng, torch_generator
from ..core.train import lm_batches, train
from .scales import DRAFT_MODEL, FROM_DRAFT, config


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
    prefix, step), so the same step always gets the same reward, whichever δ is being run. Costs no FLOPs."""

    def __init__(self, epsilon: float, seed: int):
        if not 0 <= epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.epsilon, self.seed, self.name = epsilon, seed, f"noisy oracle (ε={epsilon:g})"

    def score(self, problems, prefixes, steps):
        exact = super().score(problems, prefixes, steps)
        u = np.array([numpy_rng(derive_seed(self.seed, "flip"), p.prompt, x, s).random()
                      for p, x, s in zip(problems, prefixes, steps)])
        return np.where(u < self.epsilon, 1.0 - exact, exact)


PRM_QUERY, PRM_GOOD, PRM_BAD = arithmetic.PROMPT_END, "+", "-"


class LearnedPRM:
    """A tiny LM trained to answer, after `prompt + prefix + step + "|"`, the token "+" (step correct) or "-".
    r = p("+") / (p("+") + p("-")), a score in [0, 1]. It is a model, so its tokens are counted in FLOPs."""

    name = "learned PRM"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        self.model, self.tokenizer = model, tokenizer
        self.good, self.bad = tokenizer.convert_tokens_to_ids([PRM_GOOD, PRM_BAD])

    def texts(self, problems, prefixes, steps) -> list[str]:
        return [p.prompt + x + s + PRM_QUERY for p, x, s in zip(problems, prefixes, steps, strict=True)]

    @torch.inference_mode()
    def score(self, problems, prefixes, steps):
        rows = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in self.texts(problems, prefixes, steps)]
        ids, mask = (t.to(self.model.device) for t in left_pad(rows, self.tokenizer.pad_token_id))
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        two = torch.log_softmax(logits[:, [self.good, self.bad]].float(), -1)
        return two[:, 0].exp().cpu().numpy()


def prm_training_data(draft: zoo.ZooModel, n_problems: int, seed: int) -> tuple[list[str], list[str]]:
    """(text, label) pairs for the learned PRM: the draft's sampled solutions (temperature 1) to training-stream
    problems, one example per step, labelled by the oracle."""
    problems = arithmetic.sample_problems(n_problems, seed, 1, 5, stream="rsd-prm")
    sols = reasoners.solve(draft.model, draft.tokenizer, problems, temperature=1.0,
                           generator=torch_generator(seed, "rsd-prm-rollouts"))
    texts, labels = [], []
    for p, sol in zip(problems, sols):
        steps = arithmetic.split_steps(sol)
        for k, (s, ok) in enumerate(zip(steps, arithmetic.step_labels(p, sol))):
            texts.append(p.prompt + "".join(steps[:k]) + s + PRM_QUERY)
            labels.append(PRM_GOOD if ok else PRM_BAD)
    return texts, labels


def _prm_cfg(scale):
    c = config(scale)
    return {"preset": c.prm_preset, "n_problems": c.prm_problems, "steps": c.prm_steps, "batch_size": 64, "lr": 3e-3}


PRM_ZOO = {s: _prm_cfg(s) for s in ("smoke", "ci", "full")}


def train_prm(draft: zoo.ZooModel, preset: str, n_problems: int, steps: int, seed: int, batch_size: int = 64,
              lr: float = 3e-3):
    """A learned PRM trained on `draft`'s rollouts of `n_problems` training problems: (model, tokenizer, info).
    With `preset` = `FROM_DRAFT` it starts from a copy of the draft (which already computes the next step, so it
    has only to learn to compare), else it is a `preset`-sized char-level LM trained from scratch."""
    texts, labels = prm_training_data(draft, n_problems, seed)
    if preset == FROM_DRAFT:
        model, tok = copy.deepcopy(draft.model).float(), draft.tokenizer
    else:
        tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
        model = tinylm.make_model(preset, tok, derive_seed(seed, "rsd-prm"))
    result = train(model, lm_batches(tok, texts, labels, batch_size, seed, add_eos=False), steps,
                   lr=lr, desc=f"rsd-prm (seed {seed})")
    return model, tok, {"losses": result.losses, "n_examples": len(texts),
                        "frac_correct": labels.count(PRM_GOOD) / len(labels)}


@zoo.register("rsd-prm", PRM_ZOO)
def _build_prm(cfg, seed: int):
    return train_prm(zoo.get(DRAFT_MODEL, cfg.scale, seed), cfg.preset, cfg.n_problems, cfg.steps, seed,
                     cfg.batch_size, cfg.lr)


def learned_prm(cfg, seed: int, draft: zoo.ZooModel | None = None) -> LearnedPRM:
    """The learned PRM of `seed`, trained on rollouts of the draft `cfg.draft_model`: for the zoo's draft, trained
    once and cached in the zoo; for any other draft (`draft`, already loaded), trained now on its rollouts."""
    if cfg.draft_model == DRAFT_MODEL:
        z = zoo.get("rsd-prm", cfg.scale, seed)
        return LearnedPRM(z.model, z.tokenizer)
    draft = draft if draft is not None else models.get(cfg.draft_model, cfg.scale, seed)
    prm_cfg = _prm_cfg(cfg.scale)
    model, tok, _ = train_prm(draft, prm_cfg["preset"], prm_cfg["n_problems"], prm_cfg["steps"], seed,
                              prm_cfg["batch_size"], prm_cfg["lr"])
    return LearnedPRM(model.eval(), tok)
