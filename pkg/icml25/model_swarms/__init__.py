"""Model Swarms (Feng et al., ICML 2025): LLM experts move through weight space like a particle swarm.

Each particle i is an expert's LoRA weights with a position x_i, a velocity v_i and a personal best p_i; the swarm
shares a global best g and a global worst g_w. One iteration, for every particle (Eqs. 1-2 of the paper, in the
form of the official `search.py`):

    r_w, r_p, r_s, r_b ~ U(0, 1)                              (one draw per particle per iteration)
    a, b, c, d = r_w·φ_v, r_p·φ_p, r_s·φ_g, r_b·φ_w;  S = a + b + c + d
    v_i ← (a·v_i + b·(p_i − x_i) + c·(g − x_i) + d·(x_i − g_w)) / S                       (velocity, Eq. 1)
    x_i ← x_i + λ·v_i                                                                      (position, Eq. 2)

then every particle is scored by the utility f, the bests are updated, and λ ← max(λ·φ_λ, λ_min). Every velocity
term is a difference of positions and the swarm starts from crossovers w·x_a + (1 − w)·x_b, so each particle stays
in the affine hull of the initial experts: the search carries each particle's coefficients over the experts next
to its parameters, which is what the tests check and what the trajectory plots draw.

Experts here are rank-r LoRA adapters on the output projection of the last decoder block's MLP of the base model
(config knob `model`: at smoke and ci the zoo's arithmetic model `arith-draft`, trained on arithmetic modulo 10;
any Hugging Face causal LM otherwise, GPT-2's Conv1D layers included), each fine-tuned on one operator "domain"
of arithmetic modulo 7, a task the base model does not know; the target is a mix of all three operators modulo
7. All experts start from one shared draw of A (B = 0), as LoRA adapters fine-tuned from one seed do, so that
their factors live in a common basis and averaging them is not destructive by construction. Because the adapters
touch only that MLP, everything below it is frozen: it is computed once per problem set (`features`) and all particles are evaluated in one batched pass
over those cached features (`utilities`). The factors A and B of each adapter are coordinates of the flat
parameter vector, so every linear combination moves A and B separately, as the official `merge.py` does.

The package is split by idea: `scales` (settings per scale), `search` (Eqs. 1-2), `baselines` (the composition
baselines and search controls), `toy` (a 2-D utility to draw), `tasks` (arithmetic modulo 7), `lora` (the
experts' parameterisation), `scoring` (cached features, batched scores, expert training), `claims`, `experiment`
(the setup, utilities, tuning and one seed's runs) and `runs` (notebook 02's runs, cached for the book's warm-up).
"""

from .baselines import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .claims import _key  # noqa: F401  (notebook 02 names the effects with it)
from .experiment import *  # noqa: F401,F403
from .lora import *  # noqa: F401,F403
from .runs import *  # noqa: F401,F403
from .scales import *  # noqa: F401,F403
from .scoring import *  # noqa: F401,F403
from .search import *  # noqa: F401,F403
from .tasks import *  # noqa: F401,F403
from .toy import *  # noqa: F401,F403
