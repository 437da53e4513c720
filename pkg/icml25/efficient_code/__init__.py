"""EffiCoder: Enhancing Code Generation in Large Language Models through Efficiency-Aware Fine-tuning
(Huang et al., ICML 2025), in miniature.

- :mod:`.sandbox` — a sandboxed executor for untrusted generated Python and the ET / MU / TMU measurements;
- :mod:`.tasks` — task families with solutions of different cost, instances, and candidate generators;
- :mod:`.pipeline` — selection of the fastest correct candidate, the three SFT datasets, a tiny code LM
  fine-tuned on each, and evaluation by pass@1 and normalised time, memory and memory-time.
"""

from __future__ import annotations

from ..core.claims import Claim
from ..core.config import make_config
from . import pipeline, sandbox, tasks
from .pipeline import Measurer, build_datasets, candidate_pool, evaluate, finetune, run_seed, select_fastest
from .sandbox import Execution, Limits, run_candidate

__all__ = ["pipeline", "sandbox", "tasks", "Measurer", "build_datasets", "candidate_pool", "evaluate", "finetune", "run_seed",
           "select_fastest", "Execution", "Limits", "run_candidate", "config", "FASTER", "CORRELATION"]

config = make_config({
    "smoke": {"seeds": [0], "families": ["sum_mult", "member", "gen_sum"], "constants": [3, 4, 5, 6],
              "n_test": 4, "perf_size": 1, "noise_runs": 3, "model": "nano", "steps": 40, "generator_steps": 10,
              "batch_size": 16, "lr": 1e-2, "max_tokens": 16, "mix_shares": [0.0, 0.5, 1.0], "workers": 2},
    "ci": {"seeds": [0, 1, 2], "families": list(tasks.FAMILIES), "constants": [3, 4, 5, 6, 7, 8, 9, 10],
           "n_test": 16, "perf_size": 4, "noise_runs": 5, "model": "nano", "steps": 150, "generator_steps": 40,
           "batch_size": 24, "lr": 1e-2, "max_tokens": 16, "mix_shares": [0.0, 0.5, 1.0], "workers": 2},
    "full": {"seeds": [0, 1, 2, 3, 4], "families": list(tasks.FAMILIES), "constants": list(range(3, 23)),
             "n_test": 40, "perf_size": 20, "noise_runs": 30, "model": "micro", "steps": 1500,
             "generator_steps": 500, "batch_size": 64, "lr": 1e-2, "max_tokens": 16,
             "mix_shares": [0.0, 0.25, 0.5, 0.75, 1.0], "workers": 4},
})

FASTER = Claim(
    chapter="efficient_code", id="faster",
    paper_statement="Fine-tuning on the fastest correct solutions makes the generated code faster without hurting "
                    "correctness (Qwen2.5-Coder-7B-Instruct on EffiBench: ET -48.4%, pass@1 44.8% -> 57.7%)",
    paper_value="ET 0.52x of the base model, pass@1 +12.9 points",
    criterion="Mean over seeds: the fastest-correct model's NET is at most 0.7x the random-correct model's, and "
              "its pass@1 is not lower by more than 0.05",
    test=lambda m: None not in (m["net_fastest"], m["net_random_correct"])  # None: a model solved nothing
    and m["net_fastest"] <= 0.7 * m["net_random_correct"] and m["pass_fastest"] >= m["pass_random_correct"] - 0.05,
)

CORRELATION = Claim(
    chapter="efficient_code", id="correlation",
    paper_statement="The efficiency of the training data correlates strongly with the efficiency of the generated "
                    "code",
    paper_value="Pearson r = 0.972 (ET), 0.950 (MU), 0.986 (TMU) [from the research notes, unverified]",
    criterion="Pearson r between training-set NET and generated-code NET over every (fastest-correct share, seed) "
              "model is at least 0.8",
    test=lambda m: m["pearson_r"] is not None and m["pearson_r"] >= 0.8,
)
