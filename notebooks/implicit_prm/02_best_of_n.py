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
# # Does an outcome-trained implicit PRM find bad steps and pick good answers?
#
# The recipe: sample solutions from a generator (the zoo's draft reasoner), label each only by whether its final
# answer is right, and train $\pi_\theta$, initialised from $\pi_{\mathrm{ref}}$ = the zoo's target reasoner (as in
# the paper, where both are the same instruct model and the candidates come from other generators), with the
# cross-entropy loss
#
# $$\mathcal L_{\mathrm{CE}} = -\,l\log\sigma\big(r_\theta(\mathbf y)\big) - (1-l)\log\big(1-\sigma(r_\theta(\mathbf y))\big),
# \qquad r_\theta(\mathbf y) = \beta\log\frac{\pi_\theta(\mathbf y)}{\pi_{\mathrm{ref}}(\mathbf y)},$$
#
# or with DPO on (right, wrong) pairs of the same prompt, $-\log\sigma(r_\theta(\mathbf y_w) - r_\theta(\mathbf y_l))$.
# Then read step rewards $r_t$ off the token log-ratios (previous notebook) and test three things on fresh problems:
#
# 1. **Step signal**: do the step rewards separate right from wrong steps, as judged by the exact verifier the
#    PRM never saw? (ROC AUC over steps up to and including the first error; and how often the lowest-reward
#    step is the first wrong one.)
# 2. **Best-of-N**: with $N$ candidates per problem, is the answer picked by the PRM (highest min-step reward)
#    right more often than a random candidate or a majority vote over final answers?
# 3. **Data efficiency**: does CE still help with one response per instruction, where DPO has no pairs at all?
#
# Two things make the verdicts evidence. A **positive control** scores the same candidates with an implicit PRM that
# certainly knows the task: $\pi_\theta$ = the zoo's *target* reasoner, $\pi_{\mathrm{ref}}$ = the draft, no training.
# It is the upper bound of this setup, and a precondition of every claim is that it is detected (if even it fails,
# the evaluation cannot see a working PRM). And every trained PRM must have **learned what it was trained on**: its
# outcome reward separates right from wrong *training* responses (AUC at least `implicit_prm.LEARNED_AUC`).
# Every PRM trains until its step rewards separate right from wrong steps of its *training* responses (step AUC at
# least `implicit_prm.LEARNED_STEP_AUC` on its first `check_responses` training responses, checked every
# `eval_every` steps, at most `train_steps`): the step labels decide only when training stops, never a gradient.
# The training-set preconditions are measured on all its training responses, not only those the stop rule checks. The best-of-N claims need their PRM to have reached that
# regime; the step-signal claim does not (step signal from outcome labels is what it tests).
# Besides CE the notebook trains the other objectives of the paper (DPO, KTO, NCA), CE at three β, and CE started
# from the draft (a model too small to learn the task) on `arm_seeds`. At `ci` that list is empty: a PRM from the
# target costs about ten times a draft-based one per step on one CPU core, so the ci build trains only the two CE
# PRMs the claims read (and the positive control, which needs no training); `smoke` runs the extra arms to exercise
# the code and `full` runs them on every seed.
#
# $\pi_{\mathrm{ref}}$ is frozen, so its token log-probs of the candidates and of the training responses are
# computed once per seed and shared by every PRM from the same base (`implicit_prm.ReferenceCache`): each training
# step and each evaluation runs only $\pi_\theta$.
#
# **Parameters.** `seeds` vary the training prompts, the sampled training responses, the PRM's training batches
# and the test problems and candidates; the zoo models are those of `ref_seed`. At `full` scale:
# 4000 prompts × 8 responses, 1000 training steps, 500 test problems × 64 candidates, 5 seeds.

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # seeds of the experiment; None: the scale's value
beta = None  # β of the implicit reward
n_prompts = None  # training instructions
responses_per_prompt = None  # sampled responses per instruction for the main CE PRM
train_steps = None  # most optimizer steps of every PRM
eval_every = None  # steps between the training-set step-AUC checks that stop training
check_responses = None  # training responses (the first ones) the stopping check measures
lr = None  # learning rate of every PRM
n_test = None  # held-out problems
n_candidates = None  # candidates sampled per held-out problem
best_of = None  # the N of best-of-N
objectives = None  # objectives trained at `arm_seeds` (ce, dpo, kto, nca)
betas = None  # β values of the CE sweep at `arm_seeds`
arm_seeds = None  # seeds at which the objectives and the β sweep run
model = None  # the PRMs' π_ref and π_θ's start: a zoo name, a save_pretrained folder or a Hub id; None: the scale's

# %%
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from icml25 import implicit_prm
from icml25.core import check, models, plot, zoo

plot.use_style()
cfg = implicit_prm.config(scale, seeds=seeds, beta=beta, n_prompts=n_prompts,
                          responses_per_prompt=responses_per_prompt, train_steps=train_steps, eval_every=eval_every,
                          check_responses=check_responses, lr=lr, n_test=n_test,
                          n_candidates=n_candidates, best_of=best_of, objectives=objectives, betas=betas,
                          arm_seeds=arm_seeds, model=model)
cfg

# %% [markdown]
# ## The experiment
#
# `run_seed` samples `n_candidates` solutions per test problem from the draft at temperature 1, scores
# them with the positive control, takes the main CE PRM (from the zoo, so the first notebook reuses it), trains the
# CE PRM on one response per instruction and, at `arm_seeds`, the other objectives, β values and the draft-based
# PRM on the *same* instructions, and scores everything on the same candidates.

# %%
gen, base = zoo.get(implicit_prm.GENERATOR, scale, cfg.ref_seed), models.get(cfg.model, scale, cfg.ref_seed)
runs = {s: implicit_prm.run_seed(cfg, s) for s in cfg.seeds[:1]}  # the first seed also trains the extra arms

# %%
runs |= {s: implicit_prm.run_seed(cfg, s) for s in cfg.seeds[1:]}
print(f"π_ref ({cfg.model}): {base.info['n_params']:,} parameters; generator ({implicit_prm.GENERATOR}): "
      f"{gen.info['n_params']:,}; sampled training responses are right "
      f"{np.mean([r['train_accuracy'] for r in runs.values()]):.0%} of the time")
stops = pd.DataFrame({a: {s: r["stopped_at"].get(a) for s, r in runs.items()} for a in runs[cfg.seeds[0]]["stopped_at"]})
display(stops.rename_axis("seed").style.format(precision=0, na_rep="–").set_caption(
    f"optimizer steps each PRM trained (it stops at training-set step AUC ≥ {implicit_prm.LEARNED_STEP_AUC}, "
    f"at most {cfg.train_steps})"))

# %%
fig, ax = plot.subplots()
for i, (s, run) in enumerate(runs.items()):
    loss = np.convolve(run["losses"]["ce"], np.ones(5) / 5, mode="valid") if len(run["losses"]["ce"]) >= 5 \
        else np.array(run["losses"]["ce"])
    ax.plot(loss, color=plot.PALETTE[0], alpha=1.0 if i == 0 else 0.4,
            label="CE loss (5-step mean)" if i == 0 else None)
p = np.mean([r["train_accuracy"] for r in runs.values()])
ax.axhline(-(p * np.log(p) + (1 - p) * np.log(1 - p)), color=plot.PALETTE[1], ls="--",
           label="loss of predicting the base rate")
ax.axhline(np.log(2), color="grey", ls=":", label="log 2 (θ = ref)")
ax.set(title="Training the implicit PRM on outcome labels", xlabel="optimizer step", ylabel="CE loss (nats)")
ax.legend();

# %% [markdown]
# The loss starts at $\log 2$ (θ = ref gives $r_\theta = 0$). Getting below the dashed line means the reward
# ranks responses better than knowing only the base rate of right answers. Whether the PRM learned its training set
# is measured directly below (training-set outcome AUC), and is a precondition of every claim.
#
# ## 1. Step signal: trained PRMs against the positive control

# %%
def per_seed(arm, key, where=None):
    return np.array([(r["arms"][arm] if where is None else r["arms"][arm][where])[key] for r in runs.values()])


shown = ["control", "ce", "ce_n1"]
names = {"control": "positive control\n(target / draft)", "ce": f"CE, {cfg.responses_per_prompt} resp./instr.",
         "ce_n1": "CE, 1 resp./instr."}
fig, axes = plot.subplots(1, 2)
x = np.arange(len(shown))
for j, (where, label) in enumerate([("train", "training responses"), (None, "held-out candidates")]):
    v = np.array([per_seed(a, "step_auc", where) for a in shown])
    axes[0].bar(x + 0.4 * j - 0.2, v.mean(1), 0.4, yerr=v.std(1), capsize=3, color=plot.PALETTE[j], label=label)
axes[0].axhline(0.5, color="grey", ls=":", label="chance")
axes[0].set_xticks(x, [names[a] for a in shown])
axes[0].set(title="Step-level ROC AUC", ylabel=f"AUC (mean ± sd, {len(cfg.seeds)} seeds)", ylim=(0, 1.05))
axes[0].legend(fontsize=8)
v = np.array([per_seed(a, "outcome_auc", "train") for a in shown])
axes[1].bar(x, v.mean(1), yerr=v.std(1), capsize=3, color=plot.PALETTE[2], label="training-set outcome AUC")
axes[1].axhline(implicit_prm.LEARNED_AUC, color=plot.PALETTE[1], ls="--", label="precondition: learned")
axes[1].set_xticks(x, [names[a] for a in shown])
axes[1].set(title="Did the PRM learn its training set?", ylabel="AUC of r_θ(y) vs outcome label", ylim=(0, 1.05))
axes[1].legend(fontsize=8);

# %% [markdown]
# ## 2. Best-of-N
#
# For each $N$ the candidates are cut into disjoint groups of $N$ and each selector picks one answer per group:
# a random candidate, the majority answer, the candidate with the highest min-step reward (`prm_min`, the official
# "single" reward with min), the highest minimum partial sum $\min_t q^t$ (`prm_min_q`, "accumulative" with min)
# or outcome reward (`prm_outcome`), majority voting with each vote weighted by $\sigma(\text{score})$ as the
# official evaluation weights an implicit PRM's votes, with its scores in the official units (log-ratios × 0.001)
# (`_vote`), the untrained baseline that picks the candidate
# $\pi_{\mathrm{ref}}$ itself finds most likely (`ref_likelihood`), and the oracle (is any candidate right).

# %%
Ns, N = list(cfg.best_of), max(cfg.best_of)
selectors = ["random", "majority", "prm_min", "prm_min_vote", "ref_likelihood", "oracle"]
fig, axes = plot.subplots(1, 2, sharey=True)
for ax, arm in zip(axes, ("ce", "control")):
    for k, c in zip(selectors, plot.PALETTE):
        a = np.array([[r["arms"][arm]["best_of"][n][k] for n in Ns] for r in runs.values()])
        ax.errorbar(Ns, a.mean(0), yerr=a.std(0), marker="o", capsize=3, color=c, label=k,
                    ls=":" if k == "oracle" else "-")
    ax.set(xscale="log", title=f"Best-of-N, {names[arm].replace(chr(10), ' ')}", xlabel="N (candidates per problem)",
           ylim=(0, 1.02))
    ax.set_xticks(Ns, [str(n) for n in Ns])
axes[0].set_ylabel(f"accuracy (mean ± sd, {len(cfg.seeds)} seeds)")
axes[1].legend(ncols=2, fontsize=8);

# %% [markdown]
# ## 3. Every arm: objectives, β, responses per instruction
#
# One row per PRM (mean over the seeds it ran at): held-out step AUC, best-of-N accuracy of each score and of
# σ-weighted voting, and the training-set outcome AUC that says whether it learned. Majority voting and random
# choice are the same for every row (same candidates).

# %%
keys = ["prm_min", "prm_min_q", "prm_outcome", "prm_min_vote", "prm_outcome_vote"]
rows = {}
for arm in dict.fromkeys(a for r in runs.values() for a in r["arms"]):
    have = [r for r in runs.values() if arm in r["arms"]]
    rows[arm] = {"seeds": len(have), "held-out step AUC": np.mean([r["arms"][arm]["step_auc"] for r in have]),
                 "train step AUC": np.mean([r["arms"][arm]["train"]["step_auc"] for r in have]),
                 "train outcome AUC": np.mean([r["arms"][arm]["train"]["outcome_auc"] for r in have]),
                 **{f"{k} @{N}": np.mean([r["arms"][arm]["best_of"][N][k] for r in have]) for k in keys}}
base = {k: np.mean([r["arms"]["ce"]["best_of"][N][k] for r in runs.values()]) for k in ("random", "majority")}
table = pd.DataFrame(rows).T
display(table.style.format(precision=3).set_caption(
    f"Best-of-{N}: majority voting {base['majority']:.3f}, random {base['random']:.3f} (mean over seeds)"))

# %% [markdown]
# ## Claim checks
#
# The criteria, effects and preconditions were fixed in `icml25.implicit_prm` before any of these numbers existed.
# Each effect is one paired value per seed (the PRM and the baseline on the same candidates).

# %%
measured = implicit_prm.claim_measurements(runs, N)
mean = {k: float(np.mean(v)) for k, v in measured.items()}
v_step = check(implicit_prm.STEP_SIGNAL, seeds=cfg.seeds, scale=scale,
               measured={k: measured[k] for k in ("step_auc", "train_outcome_auc", "control_step_auc")},
               our_value=f"held-out step AUC {mean['step_auc']:.2f} (control {mean['control_step_auc']:.2f})")
plot.show_verdicts(v_step)

# %%
v_best = check(implicit_prm.BEST_OF_N, seeds=cfg.seeds, scale=scale,
               measured={k: measured[k] for k in ("prm_minus_majority", "train_outcome_auc", "train_step_auc",
                                                  "control_minus_majority")},
               our_value=f"best-of-{N}: CE PRM − majority {mean['prm_minus_majority']:+.3f} "
                         f"(control {mean['control_minus_majority']:+.3f})")
plot.show_verdicts(v_best)

# %%
v_one = check(implicit_prm.ONE_RESPONSE, seeds=cfg.seeds, scale=scale,
              measured={k: measured[k] for k in ("n1_minus_random", "n1_train_outcome_auc", "n1_train_step_auc",
                                                 "control_minus_random")},
              our_value=f"best-of-{N}: CE on 1 response − random {mean['n1_minus_random']:+.3f}")
plot.show_verdicts(v_one)

# %% [markdown]
# ## Why: what did outcome training change?
#
# A diagnostic, not a claim. Within each problem, does the trained reward $r_\theta(\mathbf y)$ rank the
# candidates the way the reference's own likelihood $\log\pi_{\mathrm{ref}}(\mathbf y)$ does? (Each problem's
# mean removed, so problem difficulty does not count.) A reward that only re-ranked candidates by likelihood would
# match `ref_likelihood`.

# %%
corr = per_seed("ce", "corr_within_problem")
print(f"within-problem corr(r_θ(y), log π_ref(y)): {corr.mean():+.2f} ± {corr.std():.2f} "
      f"(per seed: {', '.join(f'{c:+.2f}' for c in corr)})")

# %% [markdown]
# ## What we see
#
# Generated from this run's measurements.

# %%
ce, ctl = table.loc["ce"], table.loc["control"]
best_arm = table[f"prm_min @{N}"].drop("control").idxmax()
display(Markdown(
    f"- **Verdicts:** `step_signal` {v_step.label}, `best_of_n` {v_best.label}, `one_response` {v_one.label}.\n"
    f"- **Learning:** the CE PRM (from `{cfg.model}`) trained {', '.join(str(r['stopped_at']['ce']) for r in runs.values())} "
    f"steps (per seed; at most {cfg.train_steps}); its training-set outcome AUC is {ce['train outcome AUC']:.2f} "
    f"(precondition ≥ {implicit_prm.LEARNED_AUC}), its training-set step AUC {ce['train step AUC']:.2f} "
    f"(precondition of the best-of-N claims ≥ {implicit_prm.LEARNED_STEP_AUC}) and its held-out step AUC "
    f"{ce['held-out step AUC']:.2f}.\n"
    f"- **Positive control** (target / draft, untrained): held-out step AUC {ctl['held-out step AUC']:.2f}, "
    f"best-of-{N} {ctl[f'prm_min @{N}']:.3f} against majority voting {base['majority']:.3f} and random "
    f"{base['random']:.3f}: the upper bound of this setup.\n"
    f"- **CE PRM, best-of-{N}:** min-step {ce[f'prm_min @{N}']:.3f}, min over q_t {ce[f'prm_min_q @{N}']:.3f}, "
    f"outcome {ce[f'prm_outcome @{N}']:.3f}, σ-weighted voting {ce[f'prm_min_vote @{N}']:.3f}.\n"
    f"- **Best trained arm** by min-step best-of-{N}: `{best_arm}` "
    f"({table.loc[best_arm, f'prm_min @{N}']:.3f}, on {int(table.loc[best_arm, 'seeds'])} seed(s))."))

# %% [markdown]
# The Proposition guarantees only that the step rewards are *consistent* with the outcome reward; whether outcome
# training makes them *informative* depends on the learned $\pi_\theta$ picking up which steps cause wrong answers,
# rather than some other change of its distribution. The positive control shows what an informative log-ratio does
# on exactly these candidates; the gap between it and the trained PRMs is what outcome training at this scale did
# not learn. A verdict decided with both preconditions met says something about the method at this scale; one with
# a failed precondition says only that the experiment could not decide.
