r"""Scaling Laws for Floating-Point Quantization Training (Sun et al., ICML 2025).

Training with the inputs of every linear layer's GEMMs rounded to a low-precision float format ExMy (E exponent
bits, M mantissa bits, one scaling factor per block of B elements) follows one law (the paper's unified law):

$$L(N, D, E, M, B) = \frac{n}{N^\alpha} + \frac{d}{D^\beta} + \epsilon
    + \frac{D^\beta}{N^\alpha}\,\frac{\log_2 B}{\gamma\,(E+0.5)^\delta\,(M+0.5)^\nu}.$$

The package is split by idea: `law` (the law with the paper's Table 2 constants and what follows from it:
critical data size, optimal exponent/mantissa split, cost-optimal precision), `quantize` (a `QLinear` that
quantises what the paper quantises, on the compiled kernel `icml25.ops.fp_quantize`), `language` (a synthetic
Markov language), `experiment` (a tiny LM trained on it: one small model, many tokens per parameter, every
format paired with full precision on the same seed), `fit` (the least-squares fit of the law to our own runs),
`claims` (with the paired statistics they take) and `calibration` (the `ci` length of the long runs, measured on
calibration seeds).
"""

from .calibration import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .experiment import *  # noqa: F401,F403
from .fit import *  # noqa: F401,F403
from .language import *  # noqa: F401,F403
from .law import *  # noqa: F401,F403
from .quantize import *  # noqa: F401,F403
