r"""Memory Layers at Scale (Berges et al., ICML 2025): a product-key memory that adds capacity, not FLOPs.

A memory layer is a trainable key-value lookup with $N$ values. Scoring a query against all $N$ keys would cost
$O(N d)$; the *product key* trick (Lample et al., 2019) makes the keys a Cartesian product of two sets of
$\sqrt N$ half-keys, so the top-$k$ of all $N$ scores is found among $k^2$ candidates:

$$ s(q, (i, j)) = \langle q_1, K^1_i \rangle + \langle q_2, K^2_j \rangle, \qquad
   \operatorname{top}_k \{ s(q, n) \}_{n \le N} \subseteq \operatorname{top}_k(q_1 K^1) \times \operatorname{top}_k(q_2 K^2)
   \qquad (1) $$

and the layer returns a softmax-weighted sum of the $k$ selected values (an *embedding bag*),
$y = \sum_{n \in I} \operatorname{softmax}(s)_n V_n$ (2). The paper's Memory+ block gates it like a SwiGLU,
$\text{out} = W_2\,(y \odot \operatorname{SiLU}(W_1 x))$ (3), uses several heads (one bag of $H k$ values), shares
one value pool among the few layers whose feed-forward block it replaces, and trains the values with a higher
learning rate. Equation numbers are this chapter's.

Everything here is laptop-sized: a two-layer Llama with d = 32 (at `ci`) whose second (last) FFN the memory
replaces (the paper puts its memories in intermediate layers of a deep model; with two layers the last is the only
one with attention context before and after), and a synthetic *fact world* (subjects, relations, objects; a fact
is the sequence ``s r o``, scored on ``o``) with many relations per subject, so that a fact cannot be read off one
embedding, against a control task (the core's modular arithmetic, scored on held-out problems) where a small rule
suffices. Whether the dense model is bounded by its parameters, not by its training, is measured (it trains for the
budget, half of it and a quarter) and the capacity claims are judged only where it has plateaued: a small gain from
half to full steps that is no larger than the gain before it.

The package is split by idea: `product_keys` (Eqs. 1-3), `models` (the ladder's models and their FLOPs),
`data` (the fact world and the control task), `experiment` (configuration, training, learning-rate search, runs),
`claims` and `calibration` (the dense model's recall against its training budget on calibration seeds: what a
plateaued dense baseline would cost).
"""

from .calibration import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from .experiment import *  # noqa: F401,F403
from .models import *  # noqa: F401,F403
from .product_keys import *  # noqa: F401,F403
