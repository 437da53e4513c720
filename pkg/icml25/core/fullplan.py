"""The full-scale plan: which real checkpoint each chapter would run, and what that would cost on GPUs.

`icml25 build --scale full --dry-run` prints this plan after checking every chapter's full configuration; it
downloads and trains nothing. Each chapter's entry names its checkpoints (the paper's models where one GPU can
hold them, otherwise the closest small open ones, with what the paper used), how they are used (inference,
LoRA, full fine-tuning, pre-training from scratch, or no model at all) and its workload in tokens, from which
:func:`memory_gib` and :func:`gpu_hours` estimate peak GPU memory and time.

The estimates are first-order, and say so: weights in bf16 (2 bytes a parameter) for every model held at once;
training adds fp32 master weights and two Adam moments (16 bytes a trained parameter in all; LoRA trains about
1% of them); activations and KV cache take a fifth on top. Time is FLOPs over a sustained rate: 2N FLOPs per
token read or written by a model of N parameters, 6N per token trained (4N with LoRA: no weight gradients), at
40% of an H100's dense bf16 peak when reading or training and 5% when decoding (one token per step is bound by
memory bandwidth, not arithmetic).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .. import catalog

GPU = "H100 80GB"
GPU_GIB = 80
PEAK_FLOPS = 989e12  # dense bf16
READ_UTILISATION, DECODE_UTILISATION = 0.40, 0.05
MODES = ("inference", "lora", "finetune", "pretrain", "none")


@dataclass(frozen=True)
class Checkpoint:
    """One model a chapter runs at full scale: its role, Hub id (empty when trained from scratch), size in
    billions of parameters, whether it is trained, and what the paper used in that role."""

    role: str
    repo: str
    params_b: float
    paper: str
    trained: bool = False


@dataclass(frozen=True)
class Workload:
    """Tokens per seed: read (prompts and scored text), written (decoded one step at a time), trained on."""

    read: float = 0.0
    written: float = 0.0
    trained: float = 0.0
    how: str = ""


@dataclass(frozen=True)
class ChapterPlan:
    slug: str
    mode: str
    checkpoints: tuple[Checkpoint, ...]
    workload: Workload
    note: str = ""
    per_seed: bool = True  # the workload repeats for every seed of the full config

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"{self.slug}: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode != "none" and not self.checkpoints:
            raise ValueError(f"{self.slug}: a {self.mode} plan needs at least one checkpoint")
        for c in self.checkpoints:
            if c.repo and c.repo.count("/") != 1:
                raise ValueError(f"{self.slug}: {c.repo!r} is not a Hub id (owner/name)")
            if not c.repo and self.mode != "pretrain":
                raise ValueError(f"{self.slug}: only a pre-training plan may have a checkpoint without a Hub id")


def _ck(role, repo, params_b, paper, trained=False):
    return Checkpoint(role, repo, params_b, paper, trained)


M = 1e6
PLANS: dict[str, ChapterPlan] = {p.slug: p for p in (
    ChapterPlan("workbench", "inference", (
        _ck("draft", "Qwen/Qwen2.5-Math-1.5B-Instruct", 1.54, "(the book's shared reasoners)"),
        _ck("target", "Qwen/Qwen2.5-Math-7B-Instruct", 7.62, "(the book's shared reasoners)")),
        Workload(read=0.5 * M, written=0.6 * M, how="500 MATH500 problems, greedy solutions from both models"),
        "calibrates the draft/target pair the reasoning chapters share"),
    ChapterPlan("rsd", "inference", (
        _ck("draft", "Qwen/Qwen2.5-Math-1.5B-Instruct", 1.54, "Qwen2.5-Math-1.5B-Instruct"),
        _ck("target", "Qwen/Qwen2.5-Math-7B-Instruct", 7.62, "Qwen2.5-Math-7B-Instruct (also 72B)"),
        _ck("prm", "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B", 1.54, "Skywork-o1-Open-PRM 1.5B (also 7B)")),
        Workload(read=40 * M, written=8 * M,
                 how="500 MATH500 problems x ~27 decodings (baselines, 3 PRMs, random acceptance, 10 thresholds, "
                     "best-of-16) x ~600 tokens written; the PRM reads every step"),
        "the paper's 72B target needs 2 GPUs; the 7B pair fits one"),
    ChapterPlan("cascade_routing", "inference", (
        _ck("pool-0.5B", "Qwen/Qwen2.5-0.5B-Instruct", 0.49, "RouterBench's 11 API and open models"),
        _ck("pool-1.5B", "Qwen/Qwen2.5-1.5B-Instruct", 1.54, "RouterBench pool"),
        _ck("pool-3B", "Qwen/Qwen2.5-3B-Instruct", 3.09, "RouterBench pool"),
        _ck("pool-7B", "Qwen/Qwen2.5-7B-Instruct", 7.62, "RouterBench pool")),
        Workload(read=4 * M, written=2 * M, how="~8k benchmark queries answered once by every pool model"),
        "a pool of open models of one family, run once; routing and cascading then replay the answers",
        per_seed=False),
    ChapterPlan("kabb", "none", (), Workload(how="simulated experts and tasks (CPU)"),
                "the method routes among simulated experts; no language model is needed", per_seed=False),
    ChapterPlan("memory_layers", "pretrain", (
        _ck("memory+ LM", "", 0.373, "373M Llama-style LM with Memory+ layers (also 1.3B, 8B)", trained=True),),
        Workload(trained=8000 * M, how="8B tokens of pre-training per model (the paper: 1T)"),
        "trained from scratch: there is no checkpoint to download"),
    ChapterPlan("aoe", "pretrain", (
        _ck("AoE LM", "", 0.732, "732M total / 247M active MoE and AoE (also 4B)", trained=True),),
        Workload(trained=10000 * M, how="10B tokens per model (the paper: 100B RedPajama)"),
        "trained from scratch: there is no checkpoint to download"),
    ChapterPlan("fp_quant_scaling", "pretrain", (
        _ck("LLaMA-style LM", "", 0.154, "LLaMA 41M-679M, 366 runs", trained=True),),
        Workload(trained=20000 * M, how="a 41M-154M grid at 10-20B tokens each, summed"),
        "trained from scratch in simulated low-precision formats", per_seed=False),
    ChapterPlan("implicit_prm", "finetune", (
        _ck("policy/PRM", "meta-llama/Llama-3.2-1B-Instruct", 1.24, "Llama-3.1-8B-Instruct", trained=True),
        _ck("reference", "meta-llama/Llama-3.2-1B-Instruct", 1.24, "Llama-3.1-8B-Instruct")),
        Workload(read=20 * M, written=10 * M, trained=50 * M,
                 how="8 rollouts x 20k problems written and trained on (CE and DPO objectives), best-of-64 reranking"),
        "the paper's 8B full fine-tune needs ~150 GB: the closest small open model fits one GPU"),
    ChapterPlan("ple", "lora", (
        _ck("policy", "meta-llama/Llama-3.1-8B-Instruct", 8.03, "Llama-3-8B with LoRA r=8", trained=True),
        _ck("reward", "Ray2333/GRM-Llama3.2-3B-rewardmodel-ft", 3.21, "Llama-3-8b-rm-mixture")),
        Workload(read=30 * M, written=15 * M, trained=30 * M, how="best-of-8 samples on 20k UltraFeedback prompts"),
        "LoRA on the paper's size; a smaller open reward model"),
    ChapterPlan("mpo", "finetune", (
        _ck("policy", "Qwen/Qwen2.5-1.5B-Instruct", 1.54, "Qwen2.5-7B (HH-RLHF), LLaMA-3.2-3B (IMDb)", trained=True),
        _ck("reference", "Qwen/Qwen2.5-1.5B-Instruct", 1.54, "Qwen2.5-7B")),
        Workload(read=20 * M, written=10 * M, trained=40 * M,
                 how="DPO per objective, then mixing, on 40k HH-RLHF pairs"),
        "a smaller open model of the paper's family"),
    ChapterPlan("rlthf", "finetune", (
        _ck("reward model", "Qwen/Qwen2.5-1.5B-Instruct", 1.54, "a Bradley-Terry reward model on GPT-4o labels",
            trained=True),),
        Workload(trained=60 * M, read=20 * M, how="5 rounds of reward-model training on 60k pairs and rescoring"),
        "no official code; a small open base model"),
    ChapterPlan("hybrid_winrate", "inference", (
        _ck("synthetic judge", "Skywork/Skywork-Reward-Llama-3.1-8B", 8.03, "GRM-Gemma, Skywork-8B, ArmoRM, GPT-4"),),
        Workload(read=10 * M, how="every response pair of Chatbot Arena / MT-Bench scored once"),
        "one of the paper's reward models", per_seed=False),
    ChapterPlan("lora_init", "lora", (
        _ck("base", "meta-llama/Llama-3.2-1B", 1.24, "T5-base (GLUE), Llama-3-8B (commonsense, arithmetic)",
            trained=True),),
        Workload(trained=100 * M, read=5 * M, how="an LR grid of 8 x 2 initialisations, 6M tokens each"),
        "LoRA over a learning-rate grid; a small open model so the grid fits"),
    ChapterPlan("model_swarms", "lora", (
        _ck("experts' base", "google/gemma-2-2b-it", 2.61, "Gemma-7B-it with 10 Tulu-v2 LoRA experts", trained=True),),
        Workload(trained=50 * M, read=40 * M, how="10 LoRA experts, then 50 swarm iterations x 20 particles scored"),
        "a smaller Gemma"),
    ChapterPlan("dist_interventions", "lora", (
        _ck("base", "meta-llama/Llama-3.2-1B-Instruct", 1.24, "LLaMA models with ReFT interventions", trained=True),),
        Workload(trained=40 * M, read=5 * M, how="interventions at each layer on commonsense and arithmetic sets"),
        "interventions train a few parameters; the base is frozen"),
    ChapterPlan("knowledge_editing", "lora", (
        _ck("edited model", "meta-llama/Llama-3.2-1B-Instruct", 1.24, "Llama-2-7B, Llama-3-8B, Mistral-7B, Gemma-7B",
            trained=True),),
        Workload(trained=20 * M, read=20 * M, how="lifelong edits over WikiBigEdit's ~500k facts, evaluated per step"),
        "a small open model; 8B editing takes ~370 s an edit in some methods"),
    ChapterPlan("efficient_code", "finetune", (
        _ck("coder", "Qwen/Qwen2.5-Coder-1.5B-Instruct", 1.54, "Qwen2.5-Coder-7B-Instruct (also 14B, CodeLlama-7B)",
            trained=True),),
        Workload(trained=150 * M, read=10 * M, written=10 * M, how="4 epochs over SwiftCoder's ~70k programs, then "
                                                                   "EffiBench sampling"),
        "the paper's full fine-tune of 7B needs ZeRO-3 on several GPUs"),
    ChapterPlan("state_tracking", "finetune", (
        _ck("LM", "openai-community/gpt2", 0.124, "GPT-2 small-xl, Pythia 70M-12B", trained=True),),
        Workload(trained=500 * M, read=10 * M, how="20 epochs over 100k permutation sequences of length 100"),
        "the paper's smallest model"),
    ChapterPlan("ibcircuit", "inference", (
        _ck("LM", "openai-community/gpt2", 0.124, "GPT-2 small (frozen; masks trained)"),),
        Workload(read=50 * M, how="IOI and Greater-Than prompts through the masked model, ~1k steps"),
        "the paper's model; only per-head masks are trained"),
    ChapterPlan("perf_prediction", "none", (), Workload(how="a 108 x 176 results matrix (CPU)"),
                "matrix completion over published benchmark results; no model runs", per_seed=False),
)}


def _weight_bytes(c: Checkpoint, mode: str) -> float:
    if c.trained and mode in ("finetune", "pretrain"):
        return 16 * c.params_b * 1e9
    if c.trained and mode == "lora":
        return (2 + 0.01 * 14) * c.params_b * 1e9
    return 2 * c.params_b * 1e9


def memory_gib(plan: ChapterPlan) -> float:
    """Peak GPU memory: every checkpoint held at once (see the module docstring), plus a fifth."""
    return 1.2 * sum(_weight_bytes(c, plan.mode) for c in plan.checkpoints) / 2**30


def n_gpus(plan: ChapterPlan) -> int:
    return max(1, math.ceil(memory_gib(plan) / GPU_GIB)) if plan.checkpoints else 0


def seeds(slug: str) -> int:
    """How many seeds the chapter's full configuration runs (1 when it has no `seeds` knob)."""
    cfg = full_config(slug)
    return len(cfg["seeds"]) if "seeds" in cfg else 1


def gpu_hours(plan: ChapterPlan, n_seeds: int = 1) -> float:
    """GPU-hours for the workload (once, or per seed for each of `n_seeds`), with the largest model's FLOPs."""
    if not plan.checkpoints:
        return 0.0
    n = max(c.params_b for c in plan.checkpoints) * 1e9
    w = plan.workload
    train_flops = (4 if plan.mode == "lora" else 6) * n * w.trained
    seconds = (2 * n * w.read + train_flops) / (PEAK_FLOPS * READ_UTILISATION) + \
        2 * n * w.written / (PEAK_FLOPS * DECODE_UTILISATION)
    return seconds / 3600 * (n_seeds if plan.per_seed else 1)


def _module(slug: str):
    return importlib.import_module(f"icml25.{slug}")


def full_config(slug: str):
    """The chapter's validated configuration at the full scale (its `config("full")`)."""
    return _module(slug).config("full")


@dataclass
class Row:
    slug: str
    plan: ChapterPlan | None
    seeds: int = 0
    memory_gib: float = 0.0
    gpus: int = 0
    hours: float = 0.0
    error: str = ""


def rows(slugs: Sequence[str] | None = None) -> list[Row]:
    """One row per chapter: its full config checked (an error is recorded, not raised) and its estimates."""
    out = []
    for slug in slugs or [c.slug for c in (catalog.WORKBENCH, *catalog.CHAPTERS)]:
        plan = PLANS.get(slug)
        try:
            if plan is None:
                raise ValueError("no full-scale plan in icml25.core.fullplan.PLANS")
            k = seeds(slug)
            out.append(Row(slug, plan, k, memory_gib(plan), n_gpus(plan), gpu_hours(plan, k)))
        except Exception as e:  # noqa: BLE001 - every chapter is checked; the failures are reported together
            out.append(Row(slug, plan, error=f"{type(e).__name__}: {e}"))
    return out


def format_plan(table: Sequence[Row]) -> str:
    """The plan as text: one block per chapter, then the totals."""
    lines = [f"Full-scale plan (dry run: nothing is downloaded or trained). GPU: {GPU}; estimates as in "
             "icml25.core.fullplan's docstring.", ""]
    for r in table:
        if r.error:
            lines.append(f"{r.slug}: INVALID - {r.error}")
            continue
        p = r.plan
        head = f"{r.slug}: {p.mode}"
        if p.checkpoints:
            head += f", {r.gpus} x {GPU}, ~{r.memory_gib:.0f} GiB peak, ~{r.hours:.1f} GPU-h " \
                    f"({r.seeds if p.per_seed else 1} seed(s))"
        lines.append(head)
        for c in p.checkpoints:
            name = c.repo or "(trained from scratch)"
            lines.append(f"    {c.role:16s} {name:45s} {c.params_b:6.2f}B{'  trained' if c.trained else ''}"
                         f"   paper: {c.paper}")
        lines.append(f"    workload: {p.workload.how}" + (f"; {p.note}" if p.note else ""))
    ok = [r for r in table if not r.error]
    lines += ["", f"{len(ok)} of {len(table)} chapters valid; total ~{sum(r.hours for r in ok):.0f} GPU-hours."]
    return "\n".join(lines)


_DOES = {"inference": "runs real checkpoints (inference only)", "lora": "fine-tunes real checkpoints with LoRA",
         "finetune": "fine-tunes real checkpoints", "pretrain": "pre-trains its models from scratch at real size"}


def page_section(slug: str) -> str:
    """The chapter page's "At full scale" section, in Markdown, generated from the chapter's plan and its full
    configuration (so no page quotes an estimate by hand)."""
    r = rows([slug])[0]
    if r.error:
        raise ValueError(f"{slug}: the full-scale plan is invalid: {r.error}")
    p = r.plan
    lines = ["## At full scale", ""]
    if not p.checkpoints:
        lines.append(f"`scale=\"full\"` needs no GPU: {p.note or p.workload.how}.")
    else:
        seeds_text = f"{r.seeds} seed{'s' * (r.seeds != 1)}" if p.per_seed else "run once for all seeds"
        lines += [f"`scale=\"full\"` {_DOES[p.mode]}: about **{r.memory_gib:.0f} GiB** "
                  f"of peak GPU memory ({r.gpus} × {GPU}) and **{r.hours:.1f} GPU-hours** ({seeds_text}).", "",
                  "| role | checkpoint | parameters | trained here | the paper used |", "|---|---|---|---|---|"]
        lines += [f"| {c.role} | {f'`{c.repo}`' if c.repo else 'trained from scratch'} | {c.params_b:.2f} B | "
                  f"{'yes' if c.trained else 'no'} | {c.paper} |" for c in p.checkpoints]
        lines += ["", f"Workload per {'seed' if p.per_seed else 'run'}: {p.workload.how}."
                  + (f" {p.note[0].upper()}{p.note[1:]}." if p.note else "")]
        lines += ["", "These are first-order estimates (weights, optimiser state and a fifth for activations; FLOPs "
                  "at a sustained share of the GPU's peak): the assumptions are in `icml25.core.fullplan`."]
    lines += ["", "`icml25 build --scale full --dry-run` checks every chapter's full configuration and prints the "
              "whole plan without downloading or training anything.", ""]
    return "\n".join(lines)


def dry_run(slugs: Sequence[str] | None = None) -> int:
    """Print the plan; 0 when every chapter's full config is valid and planned, else 1."""
    table = rows(slugs)
    print(format_plan(table))
    return 1 if any(r.error for r in table) else 0
