r"""IBCircuit: circuit discovery with the information bottleneck (ICML 2025), at the level of attention heads.

Each head $h$ gets a learnable mask $\lambda_h = \sigma(w_h)$. Its output $H$ is replaced by a noisy mix of
itself and its batch statistics (the paper's noise injection),

$$Z = \lambda H + (1-\lambda)\,\mu + (1-\lambda)\,\sigma\,\varepsilon,\qquad \varepsilon \sim \mathcal N(0, I),$$

so $\lambda = 1$ keeps the head and $\lambda = 0$ replaces it by noise carrying no information about the input.
With the base weights frozen, the masks minimise

$$\mathcal L = \underbrace{\mathrm{KL}\big(p(y\mid x)\,\|\,p_{\lambda}(y\mid x)\big)}_{\text{faithfulness}}
  + \beta\,\underbrace{\mathbb E\,\mathrm{KL}\big(\mathcal N(\lambda H + (1-\lambda)\mu, (1-\lambda)^2\sigma^2)
  \,\|\,\mathcal N(\mu, \sigma^2)\big)}_{\text{compression, an upper bound on } I(Z; X)},$$

the second in closed form, $\tfrac12[(1-\lambda)^2 + \lambda^2 (H-\mu)^2/\sigma^2 - 1] - \log(1-\lambda)$ per
element (exact; the official code drops the $-1$). Heads are ranked by $\lambda$. No corrupted prompts are needed.

The testbed: tiny 2-layer, 6-head transformers trained here on a synthetic Indirect Object Identification task
and a synthetic Greater-Than task, small enough that all $2^{12}$ head subsets can be scored exactly under mean
ablation (config knob `model` = "tiny"); baselines are attribution patching, single-head activation patching, ACDC (edge pruning by KL on the
head-level graph), greedy head pruning by KL and a random ranking. :class:`HeadModel` shows any Hugging Face causal
LM (GPT-2, Llama, Qwen...) through the same per-head interface, so IBCircuit, mean ablation and the patching
baselines run on it unchanged; the exhaustive ground truth and ACDC's edge graph need the tiny transformer.

The package is split by idea: `head_models` (the tiny transformer and any Hugging Face LM, per head), `tasks`
(IOI and Greater-Than), `circuits` (mean ablation, the exhaustive ground truth, ranking measures), `bottleneck`
(IBCircuit: the noise injection and the loss above), `baselines` (patching, greedy pruning, random),
`edge_pruning` (ACDC), `experiment` (configuration, runs, summaries), `claims` and `figures`.
"""

from .baselines import *  # noqa: F401,F403
from .bottleneck import *  # noqa: F401,F403
from .circuits import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .edge_pruning import *  # noqa: F401,F403
from .experiment import *  # noqa: F401,F403
from .figures import *  # noqa: F401,F403
from .head_models import *  # noqa: F401,F403
from .tasks import *  # noqa: F401,F403
