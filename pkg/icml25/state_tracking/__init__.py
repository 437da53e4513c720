"""(How) Do Language Models Track State? (Li, Guo & Andreas, ICML 2025), in miniature.

The task is the *word problem* of a permutation group: a sequence of actions a_1 … a_T, each a permutation of n
objects, and the state s_t = a_1 · a_2 · … · a_t after each action (a prefix product in S_n, starting from the
identity). A model reads the actions and must output s_t at every position t ("direct-state supervision").

The paper finds two mechanisms in trained transformers:

* **AA**, an associative scan: states of longer and longer blocks are composed layer by layer, like the
  Hillis–Steele parallel prefix product (:func:`parallel_prefix_product`), so the depth at which s_t becomes
  linearly decodable grows like log t; the parity of s_t is decodable only together with s_t.
* **PAA**, a parity-associative scan: the parity ε(s_t) = Σ_i ε(a_i) mod 2 (paper Eq. 1) is computed first (it is
  linearly decodable early at every t), then the state is resolved within its parity class, so the model's
  errors keep the right parity.

The package is split by idea: `group` (S_n, the parity ε), `task` (the word problem: actions, states, the scan),
`training` (tiny Llamas with per-token state supervision under a length curriculum and, as the steering
intervention, an auxiliary parity objective), `batched` (a design's runs trained in one optimisation), `settings`
(scales and their calibration), `trackers` (the trained runs in the zoo and the builder's warm-up),
`measurements` (errors, logistic-regression probes of state and parity at every layer pooled over positions, layer
× token activation patching of the first action, the last two as in the official code, the concept erasure
(LEACE) of the parity at the supervised layer, which decides steering, and the mean ablation of the parity probe's
direction there, reported), `signatures` (the three
signatures and the declared rule that votes them into a label), `experiment` (every run measured, the claims'
measurements) and `claims`.
"""

from .batched import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .experiment import *  # noqa: F401,F403
from .group import *  # noqa: F401,F403
from .measurements import *  # noqa: F401,F403
from .settings import *  # noqa: F401,F403
from .signatures import *  # noqa: F401,F403
from .task import *  # noqa: F401,F403
from .trackers import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
