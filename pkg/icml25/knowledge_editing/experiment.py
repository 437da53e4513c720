"""The experiment: the configuration (with how the reader's training was chosen), the model to edit, one method's
lifelong run over an edit stream, the merge weight's tuning, every method on every stream, and its cache."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Sequence

import numpy as np

from .. import knowledge_editing_world
from ..core import adapters, flops, models, sentence, tinylm, zoo
from ..core.config import COUNT, FRACTION, NONNEGATIVE, POSITIVE, SEED, make_config, one_of
from ..core.seeding import derive_seed
from ..knowledge_editing_world import TRAIN_TEMPLATES, Edit, FactWorld, question
from . import benchmark, claims, finetune, memit, retrieval, rome, sites, tracing, values
from .benchmark import METRICS, Window, base_report, edit_stream, evaluate, locality, predict, probes, query_flops, score
from .claims import MERGE_LEARNS, METHODS
from .finetune import finetune_window, lora_merge_window
from .memit import memit_edit, memit_layers
from .retrieval import DenseMemory, LexicalMemory
from .rome import generic_keys, key_covariance, rome_edit
from .tracing import traced_site
from .values import objective_of

_EDITORS = {"v_steps": 25, "v_lr": 0.5, "kl_factor": 0.0625,
            "v_weight_decay": 1e-3, "clamp_norm_factor": 4.0, "stop_loss": 5e-2,
            "memit_lambda": 36.0, "c_texts": 400, "ft_steps": 30, "ft_lr": 3e-3, "lora_rank": 4, "lora_steps": 30, "lora_lr": 1e-2,
            "merge_alpha": 0.25, "merge_alphas": (0.25, 0.5, 0.75), "tune_windows": 2}


# Edit streams 0-2 were seen before this design (the reader was calibrated on ROME's first window of streams 0-2, and
# the referee's probes ran them with 40- and 5-edit windows); the verdict streams are fresh (from 100). The merge
# weight is tuned on its own stream (`tune_merge_alpha`), drawn under the base seed, apart from every verdict stream.
CALIBRATION_SEEDS = [0, 1, 2]


config = make_config({
    "smoke": {"model": "ke-base", "seeds": [100], "calibration_seeds": CALIBRATION_SEEDS, "base_seed": 0, "n_entities": 20, "n_relations": 2, "base_steps": 150, "preset": "nano", "n_layers": 4,
              "context_rate": 0.5, "irrelevant_share": 0.6, "base_weight_decay": 0.1, "n_windows": 2, "edits_per_window": 4} | _EDITORS | {"merge_alphas": (0.25, 0.75)},
    "ci": {"model": "ke-base", "seeds": list(range(100, 108)), "calibration_seeds": CALIBRATION_SEEDS, "base_seed": 0, "n_entities": 160, "n_relations": 3, "base_steps": 4000, "preset": "nano",
           "n_layers": 4, "context_rate": 0.5, "irrelevant_share": 0.6, "base_weight_decay": 0.1, "n_windows": 8, "edits_per_window": 5} | _EDITORS,
    "full": {"model": "meta-llama/Llama-3.2-1B-Instruct", "seeds": list(range(100, 110)),
             "calibration_seeds": CALIBRATION_SEEDS, "base_seed": 0, "n_entities": 1000, "n_relations": 6, "base_steps": 20000, "preset": "small",
             "n_layers": 6, "context_rate": 0.5, "irrelevant_share": 0.6, "base_weight_decay": 0.1, "n_windows": 8, "edits_per_window": 100} | _EDITORS,
},
    seeds=SEED, calibration_seeds=SEED, base_seed=SEED, n_entities=COUNT, n_relations=COUNT, base_steps=COUNT, preset=one_of(*tinylm.PRESETS),
    n_layers=COUNT, context_rate=FRACTION, irrelevant_share=FRACTION,
    base_weight_decay=NONNEGATIVE, n_windows=COUNT, edits_per_window=COUNT, v_steps=COUNT, v_lr=POSITIVE, kl_factor=NONNEGATIVE,
    v_weight_decay=NONNEGATIVE, clamp_norm_factor=POSITIVE, stop_loss=NONNEGATIVE, memit_lambda=POSITIVE, c_texts=COUNT,
    ft_steps=COUNT, ft_lr=POSITIVE, lora_rank=COUNT, lora_steps=COUNT, lora_lr=POSITIVE, merge_alpha=FRACTION,
    merge_alphas=FRACTION, tune_windows=COUNT)


# How the reader's training was chosen (ci, base seed 0, one torch thread), recorded as measured: for each setting
# tried, the base model's preconditions (fact accuracy, copying a relevant line, ignoring an irrelevant one on
# held-out combinations, held-out two-hop chains: the minimum over the training templates where there are two) and
# ROME's first-window success per seed (a one-window stream of the ci window's size at the traced site: the same
# facts as the chapter stream's first window, but their new objects can differ, since the stream's draws depend on
# its length), and the training time; "alone" says whether the run had the machine's cores to itself (otherwise it
# ran beside another and took longer).
# Judged on these alone, never on a claim's verdict; the first row is the previous reader (no irrelevant lines).
READER_CALIBRATION = (
    # steps, context share, irrelevant share, weight decay, lr, fact, copy, ignore, two-hop, ROME per seed, s, alone
    (1200, 0.3, 0.0, 0.01, 1e-2, 1.0, 0.881, 0.000, 0.925, (0.875, 0.825, 0.85), 24.8, True),
    (2400, 0.4, 0.5, 0.01, 1e-2, 1.0, 0.821, 0.697, 0.982, (0.8125, 0.75, 0.85), 49.7, True),
    (3600, 0.5, 0.5, 0.01, 1e-2, 1.0, 0.981, 0.840, 0.926, (0.625, 0.725, 0.8), 75.5, True),
    (4000, 0.6, 0.6, 0.01, 1e-2, 1.0, 0.994, 0.983, 1.0, (0.525, 0.475, 0.4625), 79.6, True),
    (4000, 0.4, 0.5, 0.01, 1e-2, 1.0, 0.979, 0.859, 0.993, (0.8125, 0.65, 0.6125), 96.3, False),
    (2400, 0.7, 0.6, 0.01, 1e-2, 0.9125, 0.298, 0.307, 0.283, (0.9, 0.8875, 0.9375), 112.2, False),
    (3000, 0.6, 0.6, 0.01, 1e-2, 1.0, 0.910, 0.859, 0.997, (0.825, 0.9375, 0.975), 130.1, False),
    (4000, 0.6, 0.6, 0.1, 1e-2, 1.0, 0.998, 0.987, 0.958, (0.7625, 0.7625, 0.75), 158.1, False),
    (3500, 0.6, 0.6, 0.1, 1e-2, 1.0, 0.927, 0.842, 0.926, (0.7125, 0.8, 0.725), 91.2, False),
    (4000, 0.6, 0.6, 0.3, 1e-2, 0.998, 0.017, 0.742, 0.556, (0.4625, 0.425, 0.45), 107.0, False),
    (4000, 0.5, 0.6, 0.1, 1e-2, 1.0, 1.0, 0.983, 0.9875, (0.7625, 0.8375, 0.8125), 215.2, False),  # chosen
    (4000, 0.6, 0.6, 0.1, 5e-3, 1.0, 0.996, 0.970, 0.994, (0.7125, 0.6875, 0.8125), 213.5, False),
)
READER_CALIBRATION_FIELDS = ("steps", "context share", "irrelevant share", "weight decay", "lr", "fact", "copy",
                             "ignore", "two-hop", "ROME first window", "train s", "alone")


BASELINES = ("retrieval_lexical",)  # shown beside them: exact-match retrieval, an upper bound for the retriever
EARLY_EDITS = (1, 2, 5, 10, 20)  # ROME's locality is also measured after this many edits of the first window


def early_edits(per_window: int) -> list[int]:
    """The counts of :data:`EARLY_EDITS` that fall inside a first window of `per_window` edits (before its end,
    where the window's own metrics are measured)."""
    return [k for k in EARLY_EDITS if k < per_window]


def base_model(cfg, seed: int) -> tuple[zoo.ZooModel, FactWorld]:
    """The model to edit, `cfg.model` (the zoo's fact model ``ke-base`` at smoke and ci, trained at `cfg`'s scale
    from `seed`; or any causal LM's folder or Hub id, through :func:`icml25.core.models.get`), and its (fresh,
    unedited) fact world. The questions are read one token per word: a checkpoint other than the zoo's must use
    the world's word tokenizer (:func:`tokenizer_for`) and know its facts."""
    z = models.get(cfg.model, cfg.scale, seed, device="cpu")
    z.model.requires_grad_(False)
    return z, FactWorld.sample(cfg.n_entities, cfg.n_relations, seed)


def run_lifelong(method: str, z, world: FactWorld, windows: Sequence[Window], cfg, seed: int,
                 site: tuple[int, str] = (0, "last"), alpha: float | None = None) -> dict:
    """Apply `method` window after window to a copy of the base model; ROME and MEMIT edit at `site` (layer,
    token), LoRA + merge merges with `alpha` (default `cfg.merge_alpha`). After each window, every metric of
    :func:`probes`, and "retention_learned": of the earlier windows' edits the method had learned right after
    their window (every training template answered), the fraction still answered. Returns {metric: [value per
    window]} and the mean inference FLOPs per question; "locality_before": the unedited model's locality, and for
    ROME "locality_early": its locality after each of :data:`EARLY_EDITS` edits inside the first window."""
    if method not in METHODS + BASELINES:
        raise ValueError(f"unknown method {method!r}; methods: {', '.join(METHODS + BASELINES)}")
    model, tok, world = copy.deepcopy(z.model), z.tokenizer, copy.deepcopy(world)
    memory = {"retrieval": DenseMemory, "retrieval_lexical": LexicalMemory}.get(method, lambda: None)()
    layer, token = site
    edited_layers = {"rome": [layer], "memit": memit_layers(layer)}.get(method, [])
    Cs = {l: key_covariance(generic_keys(model, tok, world, l, cfg.c_texts, derive_seed(seed, "C")))
          for l in edited_layers}  # of the unedited model
    out = {m: [] for m in METRICS} | {"retention_learned": []}
    if windows:
        out["locality_before"] = locality(model, tok, world, windows)
        if method == "rome":
            out["locality_early"], out["efficacy"] = [], []
    learned: list[Edit] = []
    for w, win in enumerate(windows):
        if method == "rome":
            for i, e in enumerate(win.edits, 1):
                rome_edit(model, tok, world, e, Cs[layer], layer, cfg.v_steps, cfg.v_lr, token, objective_of(cfg))
                out["efficacy"].append(score(lambda ps: predict(model, tok, ps),
                                             [(question(e.subject, e.relation, t), e.new) for t in TRAIN_TEMPLATES]))
                if w == 0 and i in early_edits(len(win.edits)):
                    out["locality_early"].append(locality(model, tok, world, windows))
        elif method == "memit":
            memit_edit(model, tok, world, win.edits, Cs, memit_layers(layer), cfg.v_steps, cfg.v_lr,
                       cfg.memit_lambda, token, objective_of(cfg))
        else:
            for e in win.edits:
                world.apply(e)
                if memory is not None:
                    memory.add(e)
            if method == "finetune":
                finetune_window(model, tok, win.edits, cfg.ft_steps, cfg.ft_lr)
            elif method == "lora_merge":
                lora_merge_window(model, tok, win.edits, cfg.lora_rank, cfg.lora_steps, cfg.lora_lr,
                                  cfg.merge_alpha if alpha is None else alpha, derive_seed(seed, "lora", w))
        answer = (lambda ps: predict(model, tok, memory.augment_all(ps))) if memory is not None else \
            (lambda ps: predict(model, tok, ps))
        right = evaluate(answer, probes(world, windows, w))
        for metric in METRICS:
            out[metric].append(float(np.mean(right[metric])) if len(right[metric]) else float("nan"))
        n_t = len(TRAIN_TEMPLATES)  # success and retention ask each edit under every training template, in order
        past = [e for win_ in windows[:w] for e in win_.edits]
        kept = {e: right["retention"][i * n_t:(i + 1) * n_t] for i, e in enumerate(past)}
        out["retention_learned"].append(float(np.concatenate([kept[e] for e in learned]).mean()) if learned
                                        else float("nan"))
        learned += [e for i, e in enumerate(win.edits) if right["success"][i * n_t:(i + 1) * n_t].all()]
    asked = [q for q, _ in probes(world, windows, len(windows) - 1)["success"]]
    prompts = [memory.augment(q) for q in asked] if memory is not None else asked
    out["flops"] = query_flops(model, tok, prompts, sentence.encoder_params() if method == "retrieval" else 0)
    return out


def tune_merge_alpha(z, world: FactWorld, cfg, seed: int) -> tuple[float, dict[float, float]]:
    """The merge weight α of LoRA + merge, chosen on a separate tuning stream (`cfg.tune_windows` windows drawn
    under another seed) before any claim is checked: among the α in `cfg.merge_alphas` (all < 1: α = 1 replaces
    the weights and merges nothing) whose mean edit success over the windows reaches `MERGE_LEARNS` (the claim's
    precondition), the one with the highest final retention of learned edits; the most successful α if none
    learns. Returns α and every α's (success, retention of learned edits)."""
    if any(a >= 1 for a in cfg.merge_alphas):
        raise ValueError(f"merge weights must lie below 1 (alpha = 1 is no merge), got {cfg.merge_alphas}")
    windows = edit_stream(copy.deepcopy(world), cfg.tune_windows, cfg.edits_per_window, derive_seed(seed, "tune"))
    scores = {}
    for a in cfg.merge_alphas:
        run = run_lifelong("lora_merge", z, world, windows, cfg, derive_seed(seed, "tune"), alpha=a)
        kept = run["retention_learned"][-1]  # nan when nothing was learned: nothing retained
        scores[a] = (float(np.mean(run["success"])), 0.0 if np.isnan(kept) else float(kept))
    learns = [a for a, (success, _) in scores.items() if success >= MERGE_LEARNS]
    if not learns:
        return max(scores, key=lambda a: scores[a][0]), scores
    return max(learns, key=lambda a: scores[a][1]), scores


def lifelong(cfg, seeds: Sequence[int] | None = None, methods: Sequence[str] = METHODS + BASELINES) -> dict:
    """Every method on one base model (the zoo's, at seed `cfg.base_seed`) and on every seed's edit stream, ROME
    and MEMIT at the site causal tracing picks on that model, LoRA + merge with the α tuned on a separate tuning
    stream. A seed is one edit stream (with its own key-statistics sample and LoRA initialisations), as the paper
    edits one model with many edits. Returns {method: [run_lifelong(...) per seed]} and, under "setup": the traced
    site, the base model's report, and the tuned α with its scores."""
    from tqdm.auto import tqdm

    seeds = list(cfg.seeds if seeds is None else seeds)
    z, world = base_model(cfg, cfg.base_seed)
    alpha, scores = tune_merge_alpha(z, world, cfg, cfg.base_seed)
    site = traced_site(z.model, z.tokenizer, world, cfg.base_seed)
    results = {m: [] for m in methods} | {"setup": {"site": site, "alpha": alpha, "alpha_scores": scores,
                                                     "base": base_report(z.model, z.tokenizer, world, cfg.base_seed)}}
    for seed in tqdm(seeds, desc="edit streams"):
        windows = edit_stream(copy.deepcopy(world), cfg.n_windows, cfg.edits_per_window, seed)
        for m in methods:
            results[m].append(run_lifelong(m, z, world, windows, cfg, seed, site, alpha))
    return results


def _sources() -> tuple:
    """The code :func:`lifelong` runs, which addresses its cache: this module, every other part of the package but
    the figures, the fact world and the core modules it calls (the zoo's cache adds the rest of the core)."""
    return (sys.modules[__name__], sites, values, rome, tracing, memit, finetune, retrieval, benchmark, claims,
            knowledge_editing_world, sentence, adapters, models, flops)


def lifelong_results(cfg) -> tuple[dict, bool]:
    """:func:`lifelong` (every method, every seed), as JSON (tuples become lists, α's keys strings), and whether it
    was computed now. With the zoo's base model it is cached like one (`icml25.core.zoo.results`), addressed by
    every knob of `cfg` (the stream, the seeds, the editors' settings, the scale), the base model's own zoo address
    and the code that computes it, so the book's builder runs it in its warm-up, before the notebooks start, and a
    notebook with the same settings reads it back. Any other `cfg.model` (a folder or a Hub id, whose weights the
    address could not see) is computed in place, every time."""
    if cfg.model not in zoo.names():
        return json.loads(json.dumps(lifelong(cfg))), True
    settings = dict(cfg) | {"base_model": zoo.key(cfg.model, cfg.scale, cfg.base_seed)}
    return zoo.results("ke-lifelong", settings, lambda: lifelong(cfg), sources=_sources())


def warm_up_lifelong(cfg) -> None:
    """What the book's builder runs before the notebooks (its `CHAPTER_RESULTS`): :func:`lifelong_results` when
    `cfg.model` is the zoo's, so that it is cached; nothing for another checkpoint (a folder or a Hub id, whose
    results are not cached), which notebook 02 runs itself."""
    if cfg.model in zoo.names():
        lifelong_results(cfg)
