# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The task: tracking a permutation, and two ways to compute it
#
# Li, Guo and Andreas ask *how* a transformer keeps track of a changing world state. Their test bed is the
# simplest state-tracking problem that is still hard in general: $n$ objects in $n$ slots, and a story of
# actions, each a permutation that shuffles the slots. After every action the model must say where every object
# is. Any finite automaton's state tracking reduces to such products, so this is state tracking in its purest form.
# This notebook builds the task and the two algorithms the paper finds inside trained models; the next notebook
# trains models and looks inside them.

# %% tags=["parameters"]
scale = "ci"
seed = 0
group_n = None  # 3 (S3, 6 states) or 5 (S5, 120 states); None: the scale's value
train_length = None  # actions per training sequence; None: the scale's value

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from icml25 import state_tracking as st
from icml25.core import plot
from icml25.core.seeding import torch_generator

plot.use_style()
cfg = st.config(scale, group_n=group_n, train_length=train_length)
cfg

# %% [markdown]
# ## Actions, states and the product
#
# An action $a$ is a permutation written by its 1-based digits: `213` moves the object in slot 2 to slot 1 and the
# object in slot 1 to slot 2. Starting from the identity arrangement, the state after $t$ actions is the product
#
# $$ s_t = a_1 \cdot a_2 \cdots a_t, \qquad s_t[j] = s_{t-1}[a_t[j]] . $$
#
# The model reads $a_1, \dots, a_T$ and is trained to write $s_t$ at the position of $a_t$ (the paper's
# *direct-state supervision*). Here is one short story in $S_3$, with objects A, B, C:

# %%
n = cfg.group_n
els = st.elements(n)
acts = st.sample_actions(n, 1, 6, torch_generator(seed, "demo"))[0]
states = st.state_sequence(acts[None], n)[0]
objects = "ABCDE"[:n]
print(f"{'t':>2}  {'action':>6}  {'state':>6}  arrangement  parity")
for t, (a, s) in enumerate(zip(acts.tolist(), states.tolist()), 1):
    arrangement = "".join(objects[i] for i in els[s])
    print(f"{t:>2}  {st.perm_word(els[a]):>6}  {st.perm_word(els[s]):>6}  {arrangement:>11}  "
          f"{st.PARITY_WORDS[st.parity(els[s])]}")

# %% [markdown]
# ## Parity: a shortcut that always exists
#
# Every permutation is even or odd (an even or odd number of swaps), and parity is a homomorphism onto
# $\mathbb{Z}_2$, so the parity of the state is the sum of the actions' parities (paper Eq. 1):
#
# $$ \varepsilon(s_t) = \sum_{i \le t} \varepsilon(a_i) \bmod 2 . $$
#
# A model can compute this running parity without tracking the full state, and knowing it halves the candidate
# states (3 of the 6 in $S_3$). This is the first stage of the **PAA** (parity-associative) mechanism. Below,
# for many random stories, how often the state is even as $t$ grows, and a check of Eq. 1 on all of them.

# %%
many = st.sample_actions(n, 2000, cfg.train_length, torch_generator(seed, "parity-demo"))
s_many = st.state_sequence(many, n)
eq1 = (st.parity_of_states(s_many, n) == st.parity_table(n)[many].cumsum(1) % 2).float().mean()
print(f"Eq. 1 holds at {eq1:.0%} of {s_many.numel()} (story, t) pairs")
t = np.arange(1, cfg.train_length + 1)
counts = torch.stack([(s_many == k).float().mean(0) for k in range(len(els))]).numpy()
fig, ax = plot.subplots()
for k in range(len(els)):
    ax.plot(t, counts[k], marker="o", ms=3, color=plot.PALETTE[st.parity(els[k])], alpha=0.8,
            label=f"{st.PARITY_WORDS[st.parity(els[k])]} states" if k in (0, 1) else None)
ax.axhline(1 / len(els), color="grey", ls="--", lw=1, label="uniform 1/|G|")
ax.set(title=f"States are uniform after one action (S{n}, 2000 stories)", xlabel="position t (actions read)",
       ylabel="fraction of stories in state", ylim=(0, None))
ax.legend();

# %% [markdown]
# Every state is equally likely from $t=1$ on (the first action is already uniform), so neither the state nor
# its parity can be guessed from the position: the model has to compute them.
#
# ## The associative scan (AA)
#
# Because the product is associative, $s_t$ need not be computed one action at a time (depth $t$). The
# Hillis–Steele scan composes blocks: in round $r$ each position $t$ multiplies its block by the block ending
# $2^{r}$ earlier, $x_t \leftarrow x_{t-2^r} \cdot x_t$, so after $\lceil \log_2 T \rceil$ rounds $x_t = s_t$.
# A transformer layer can do one round (attend to one earlier position and compose), so an **AA** model needs
# depth growing like $\log t$: the layer at which $s_t$ becomes decodable climbs a staircase with $t$.
# `st.parallel_prefix_product` is that scan; it agrees with the sequential fold:

# %%
scan, rounds = st.parallel_prefix_product(many, n)
print(f"parallel scan == sequential fold on all {len(many)} stories: {torch.equal(scan, s_many)}; "
      f"rounds = {rounds} = ceil(log2 {cfg.train_length})")
blocks = st.scan_blocks(cfg.train_length)
fig, ax = plot.subplots(figsize=(7, 3.8))
for r, row in enumerate(blocks):
    for tt, (lo, hi) in enumerate(row):
        ax.plot([lo - 0.35, hi + 0.35], [r + tt / (2.2 * len(row))] * 2, color=plot.PALETTE[r % 8], lw=1.6,
                label=f"after round {r}" if tt == 0 else None)
ax.set(title=f"Hillis–Steele scan: the block of actions x_t covers (T = {cfg.train_length})",
       xlabel="action index covered by the block (1 … t)", ylabel="scan round (≈ layer)",
       yticks=range(len(blocks)), xticks=range(1, cfg.train_length + 1))
ax.legend(loc="lower right", fontsize=8);

# %% [markdown]
# Each horizontal bar is one position $t$ (stacked within a round): after round 0 it holds only $a_t$, after
# each round its block doubles, and in the last round every block reaches back to $a_1$, i.e. $x_t = s_t$.
#
# **What the next notebook tests.** The two candidate mechanisms leave different traces, and the next notebook
# reads three of them in every trained run: an AA model's parity is decodable only where its state is, while a PAA
# model's parity is decodable early at every position (probes); a PAA model sends the parity of an action to
# later tokens before the rest of the state (activation patching); and a PAA model's errors keep the parity, while
# an AA model's errors pick a wrong state regardless of parity (chance of keeping it: 2 of the 5 wrong states in
# $S_3$, 0.4; 59 of 119 in $S_5$). This notebook checks no claim; the claims are checked in
# [the mechanisms notebook](02_mechanisms).
