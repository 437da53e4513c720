"""The book's table of contents: every chapter, its paper and its part, in reading order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chapter:
    slug: str
    title: str  # the paper's title
    part: str


FRONT = "Front matter"
PARTS = (
    "Faster, cheaper inference",
    "Architectures and number formats",
    "Rewards, feedback and alignment",
    "Adapting and editing models",
    "Understanding and predicting models",
)

WORKBENCH = Chapter("workbench", "How this book works", FRONT)

CHAPTERS: tuple[Chapter, ...] = (
    Chapter("rsd", "Reward-Guided Speculative Decoding for Efficient LLM Reasoning", PARTS[0]),
    Chapter("cascade_routing", "A Unified Approach to Routing and Cascading for LLMs", PARTS[0]),
    Chapter("kabb", "KABB: Knowledge-Aware Bayesian Bandits for Dynamic Expert Coordination", PARTS[0]),
    Chapter("memory_layers", "Memory Layers at Scale", PARTS[1]),
    Chapter("aoe", "Autonomy-of-Experts Models", PARTS[1]),
    Chapter("fp_quant_scaling", "Scaling Laws for Floating-Point Quantization Training", PARTS[1]),
    Chapter("implicit_prm", "Free Process Rewards without Process Labels", PARTS[2]),
    Chapter("ple", "PLE: Progressively Label Enhancement for LLM Alignment", PARTS[2]),
    Chapter("mpo", "MPO: Mixing Preference Optimization for Diverse Preferences", PARTS[2]),
    Chapter("rlthf", "RLTHF: Targeted Human Feedback for LLM Alignment", PARTS[2]),
    Chapter("hybrid_winrate", "Accelerating Unbiased LLM Evaluation via Synthetic Feedback", PARTS[2]),
    Chapter("lora_init", "Beyond Zero Initialization: Non-Zero LoRA Initialization", PARTS[3]),
    Chapter("model_swarms", "Model Swarms: Collaborative Search to Adapt LLM Experts", PARTS[3]),
    Chapter("dist_interventions", "Distribution-wise Interventions for Steering Language Models", PARTS[3]),
    Chapter("knowledge_editing", "Understanding the Limits of Lifelong Knowledge Editing (WikiBigEdit)", PARTS[3]),
    Chapter("efficient_code", "Efficiency-aware Fine-tuning for Code Generation (SwiftCoder)", PARTS[3]),
    Chapter("state_tracking", "(How) Do Language Models Track State?", PARTS[4]),
    Chapter("ibcircuit", "IBCircuit: Circuit Discovery with the Information Bottleneck", PARTS[4]),
    Chapter("perf_prediction", "Can We Predict Performance of Large Models across Vision-Language Tasks?", PARTS[4]),
)

BACK = "Back matter"
KERNELS = Chapter("kernels", "Kernels: compiled hot spots and their benchmarks", BACK)

ALL = (WORKBENCH, *CHAPTERS, KERNELS)
BY_SLUG = {c.slug: c for c in ALL}


def get(slug: str) -> Chapter:
    """The chapter named `slug`; an unknown slug is an error that lists the valid ones."""
    try:
        return BY_SLUG[slug]
    except KeyError:
        raise ValueError(f"unknown chapter {slug!r}; valid chapters: {', '.join(BY_SLUG)}") from None
