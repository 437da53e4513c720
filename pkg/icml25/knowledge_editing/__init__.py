"""Lifelong knowledge editing at real-world scale (WikiBigEdit; Thede et al., ICML 2025), in miniature: a
lifelong editing benchmark on a synthetic fact world, the editors it compares, and its evaluation protocol.

A fact world of triples (s, r) → o over word tokens, questions asked with training templates and with held-out
rephrase and persona templates, edits (s, r) → o′ ≠ o arriving in time windows, locality probes on hard
neighbours (same subject or same relation, never edited) and two-hop chains (s, r₁) → o, (o, r₂) → o₂ whose
answers are recomputed after every edit. The base model is trained on the facts, on half the subjects' two-hop
chains, answered in two tokens (the bridge, then the answer), and on reading a context line: copying its object when
it states the asked fact, answering from its own memory when it is about another fact (so retrieval has a reader
that can ignore a wrong hit). One base model is edited; a seed is one edit stream.

Editors:

* ROME (Meng et al., 2022) on the down-projection W of one MLP, with key k* (the down-projection's input at the
  edited token, averaged over the training templates), a value v* optimised so the model answers o′, and the key
  second moment C = E[k kᵀ] over every token of generic text in the fact world's language:

      (1)  W′ = W + (v* − W k*) (C⁻¹ k*)ᵀ / ((C⁻¹ k*)ᵀ k*)

  so W′ k* = v*, rank(W′ − W) = 1, and W′ k = W k for every k with kᵀ C⁻¹ k* = 0. ROME's edited token is the
  subject's last token; the chapter edits at the (layer, token) that causal tracing picks on the base model
  (:func:`traced_site`), as ROME chose its site.
* A MEMIT-style batched multi-layer update, Eq. (3) in :func:`memit_edit`.
* Continual fine-tuning of every weight on each window's edits, and LoRA (PEFT) fine-tuning followed by merging
  into the running model:

      (2)  W_merged = (1 − α) W_prev + α W_ft

* Retrieval augmentation: a memory with one line "s r o′" per edit; a question retrieves a line (by sentence-
  embedding similarity, all-MiniLM-L6-v2: its top line, relevant or not; or by keyword match, only a line with the
  question's subject and relation), which is prepended to the prompt, and the model judges whether it answers the
  question.

The package is split by idea: `sites` (where an edit writes), `values` (the value step), `rome` (Eq. 1),
`tracing` (causal tracing), `memit` (Eq. 3), `finetune` (fine-tuning and Eq. 2), `retrieval`, `benchmark` (the
edit stream, the probes and their scoring), `claims`, `experiment` (configuration and the lifelong runs) and
`figures`. The fact world and the base model are :mod:`icml25.knowledge_editing_world`, apart so that the zoo's
address of the base model sees only their code.
"""

from ..knowledge_editing_world import (ALL_TEMPLATES, BASE_PRESETS, PERSONA_TEMPLATES,  # noqa: F401
                                       REPHRASE_TEMPLATES, TEMPLATE_WORDS, TRAIN_TEMPLATES, TWO_HOP_TEMPLATE, Edit,
                                       FactWorld, build_base, chain_split, context_example, held_out_context, irrelevant_line,
                                       question, tokenizer_for, train_base, training_examples, two_hop_question,
                                       two_hop_steps, with_context)
from .benchmark import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .experiment import *  # noqa: F401,F403
from .figures import *  # noqa: F401,F403
from .finetune import *  # noqa: F401,F403
from .memit import *  # noqa: F401,F403
from .retrieval import *  # noqa: F401,F403
from .rome import *  # noqa: F401,F403
from .sites import *  # noqa: F401,F403
from .tracing import *  # noqa: F401,F403
from .values import *  # noqa: F401,F403
