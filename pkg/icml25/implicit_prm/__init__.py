"""Free Process Rewards without Process Labels (Yuan et al., ICML 2025): the implicit process reward model.

Parameterise an *outcome* reward as a log-likelihood ratio between a trained model π_θ and a frozen reference
π_ref (the paper's Eq. 1 / Eq. 2)::

    r_θ(y) = β · log π_θ(y) / π_ref(y)

and train it on response-level labels only (cross-entropy, Eq. 5, or DPO). The Proposition then makes the
partial sums of the token log-ratios a *process* reward for free::

    q_θ^t = Σ_{i ≤ t} β · log π_θ(y_i | y_<i) / π_ref(y_i | y_<i)  =  β · log E_{π_ref(y | y_≤t)} exp(r_θ(y) / β)

so a step's reward is r_t = q^t − q^{t−1}, read at the step boundaries (here the arithmetic task's `;`).
Responses are scored by their worst step (min over t of r_t), their worst partial sum (min over t of q^t) or the
outcome reward, and best-of-N picks the highest-scoring candidate, or votes with each vote weighted by σ(reward) as
the official evaluation does (rewards there are the log-ratios times a fixed 0.001, `VOTE_COEF`).

As in the paper, π_θ starts as a copy of π_ref and both are the same capable model (here the zoo's target
reasoner); the responses it is trained on and the candidates it reranks come from a weaker generator (the draft).

Everything here takes Hugging Face causal LMs, so the same code runs on a real policy/reference pair.

The package is split by idea: `reward` (token log-ratios, Eq. 1 and the Proposition's step rewards, the
`ImplicitPRM`), `objectives` (cross-entropy, Eq. 5, DPO, NCA, KTO), `proposition` (the Proposition checked
exactly on an enumerable model), `rollouts` (problems, outcome-labelled rollouts, test candidates), `training`
(the training loop, π_ref's log-prob cache, the zoo PRM), `evaluation` (step AUC, first-error
localisation, best-of-N, step verifiers of known quality), `scales` (models and settings), `experiment` (the
arms and one seed's run), `calibration` (on the calibration seeds: the one-response PRM's training budget, and the
main PRM's step AUC, `one_response`'s positive control) and `claims`. The implicit reward itself (log-ratios,
step rewards, the `ImplicitPRM`, the CE loss, outcome-labelled rollouts and training π_θ from π_ref) lives in
:mod:`icml25.core.implicit_reward`, which rsd shares; `reward`, `objectives`, `rollouts` and `training` import it.
"""

from .calibration import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .evaluation import *  # noqa: F401,F403
from .experiment import *  # noqa: F401,F403
from .objectives import *  # noqa: F401,F403
from .proposition import *  # noqa: F401,F403
from .reward import *  # noqa: F401,F403
from .rollouts import *  # noqa: F401,F403
from .scales import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
