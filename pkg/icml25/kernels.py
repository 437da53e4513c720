"""The Kernels appendix: what the compiled kernels claim about themselves, checked on the machine that built the
book (the kernels and their references live in `icml25.ops`; the benchmark in `icml25.ops.bench`)."""

from .core.claims import Claim

FASTER_THAN_REFERENCE = Claim(
    chapter="kernels", id="faster_than_reference",
    paper_statement="Each compiled kernel (fp_quantize, embedding_bag, expert_ffn) is faster than its pure-PyTorch "
                    "reference on every benchmarked case, forward and backward where it has one",
    paper_value="the book's promise of compiled kernels for the chapters' hot spots (issue 3)",
    criterion="On every row of the benchmark table, the compiled kernel's wall time is below the reference's "
              "(speedup over the reference > 1)",
    test=lambda m: all(s > 1 for s in m["vs_reference"]),
)
