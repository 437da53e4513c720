"""The Kernels appendix: what the compiled kernels claim about themselves, checked on the machine that built the
book (the kernels and their references live in `icml25.ops`; the benchmark in `icml25.ops.bench`)."""

import math

from .core.claims import Claim, Effect, Precondition, at_least

#: the declared margin: a kernel counts as faster only if it is at least this much faster than its reference
MARGIN = 1.10
#: the timing noise the claim tolerates: the copy ceiling's slowest round over its fastest, in one run
QUIET = 1.5


def worst_case_log_speedup(rows: list[dict]) -> list[float]:
    """Per interleaved round, the smallest log speedup (reference / compiled) over every benchmarked case: one
    paired unit per round, so "every kernel beats its reference on every case" is one effect."""
    return [min(math.log(r["per_round"][i]) for r in rows) for i in range(min(len(r["per_round"]) for r in rows))]


FASTER_THAN_REFERENCE = Claim(
    chapter="kernels", id="faster_than_reference",
    paper_statement="Each compiled kernel (fp_quantize, embedding_bag, expert_ffn) is faster than its pure-PyTorch "
                    "reference on every benchmarked case, forward and backward where it has one",
    paper_value="the book's promise of compiled kernels for the chapters' hot spots",
    criterion=f"Per interleaved timing round, the worst case's log speedup over the reference; its 95% t interval "
              f"lies above log {MARGIN} (at least {MARGIN - 1:.0%} faster on every case); refuted if it lies below",
    effects=[Effect("worst_case_log_speedup", "worst_case_log_speedup", null=math.log(MARGIN))],
    preconditions=[at_least("rounds", "rounds", 5, "at least 5 interleaved timing rounds"),
                   Precondition("quiet_machine", f"the copy ceiling's slowest round is within {QUIET}x of its fastest",
                                "copy_spread", lambda v: v <= QUIET)],
    examples=({"worst_case_log_speedup": [0.9, 1.0, 0.95, 1.1, 0.85], "rounds": 5, "copy_spread": 1.1},
              {"worst_case_log_speedup": [-0.1, 0.0, -0.05, 0.02, -0.2], "rounds": 5, "copy_spread": 1.1}),
)
