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
# # MPO with tiny language models
#
# The reference policy is the zoo's arithmetic *draft* model sampled at a temperature above 1, on problems of a
# few operations. Three single-objective policies are fine-tuned from it for conflicting rewards on the final
# answer — it is **correct**, it is a **large** digit (≥ 5), it is **even** — and MPO mixes them. Everything is
# estimated from samples.
#
# Why the temperature: a policy fine-tuned on π_ref's own samples can only learn what varies among them. The draft
# at temperature 1 is nearly fixed in the parity of its answer and guesses on long problems, so an earlier version
# of this chapter trained single-objective policies that did not learn their objectives (`singles_learn` failed).
# The tempered draft (its output layer divided by `lm_temperature`, exactly π_draft^{1/T} per token) varies on every
# objective; the regime was chosen on the calibration seeds from the singles' own gains alone.
#
# **Parameters.** At `full` scale: 512 training prompts × 16 samples, 1000 fine-tuning steps, 4096 test prompts,
# a BSMD pool of 64 reference samples per prompt, more seeds (`lm_seeds` of `mpo.config("full")`).

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # verdict seeds of the whole pipeline (fine-tuning data, BSMD, evaluation samples); None: lm_seeds
lm_prompts = None  # training prompts (reference samples per prompt: lm_samples)
lm_samples = None
lm_finetune_steps = None  # reward-weighted fine-tuning steps per single-objective policy
lm_batch_size = None
lm_lr = None
lm_beta = None  # β of the single-objective policies and of the max-min objective
lm_temperature = None  # π_ref = the model at this sampling temperature
lm_max_ops = None  # problems of 1 to lm_max_ops operations (training and test)
lm_eval_prompts = None  # held-out prompts, one sample each per method
lm_calib_prompts = None  # calibration prompts on which the headroom control chooses its grid mix
model = None  # π_ref: a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
lm_bsmd_steps = None
lm_bsmd_m = None  # reference samples per prompt in BSMD's pool
step_scale = None  # multiplier of the textbook mirror-descent step

# %%
import numpy as np
from IPython.display import Markdown, display

from icml25 import mpo
from icml25.core import check, plot

plot.use_style()
cfg = mpo.config(scale, lm_seeds=seeds, lm_prompts=lm_prompts, lm_samples=lm_samples,
                 lm_finetune_steps=lm_finetune_steps, lm_batch_size=lm_batch_size, lm_lr=lm_lr, lm_beta=lm_beta,
                 lm_temperature=lm_temperature, lm_max_ops=lm_max_ops, lm_eval_prompts=lm_eval_prompts,
                 lm_calib_prompts=lm_calib_prompts, lm_bsmd_steps=lm_bsmd_steps, lm_bsmd_m=lm_bsmd_m,
                 step_scale=step_scale, model=model)
cfg

# %% [markdown]
# ## From sequences to tokens
#
# The single-objective policies are trained to approximate $\pi_k \propto \pi_{\text{ref}} e^{r_k/\beta}$ by
# reward-weighted likelihood on reference samples (weights $e^{r/\beta}$ normalised within each prompt's samples).
# MPO's weights come from BSMD exactly as in the tabular notebook, with sequence log-probabilities
# $\log \pi_k(y|x) - \log \pi_{\text{ref}}(y|x)$ of a pool of reference samples.
#
# Every method is sampled on the same held-out prompts with the same random numbers: each token is drawn by the
# Gumbel-max trick from noise that is the same for every method at a given prompt and position, so where two
# policies agree they make the same choice, and a method's gain over $\pi_{\text{ref}}$ is a paired difference on
# coupled samples (its standard error, from the per-prompt differences, is part of each run).
#
# Sampling the sequence-level mix $\pi_\lambda \propto \prod_k \pi_k^{\lambda_k}$ exactly would need the
# normaliser over all continuations; like the paper's language-model experiments we decode **per token**,
# $p(y_t) \propto \prod_k \pi_k(y_t \mid x, y_{<t})^{\lambda_k}$, which is an approximation. Each method is scored on
# the **raw rewards** (the rewards we wrote down, not the policies' implied $\tilde r_k$): on held-out prompts, the
# same for every method, the gain $\mathbb{E}_\pi[r_k] - \mathbb{E}_{\pi_{\text{ref}}}[r_k]$ of each objective; for
# 0/1 rewards and independent samples that is $2\,\mathrm{winrate}_k(\pi \text{ vs } \pi_{\text{ref}}) - 1$, so the
# worst objective's gain is the paper's *minimum win rate* on a rescaled axis.

# %%
runs, computed_now = mpo.language_model_runs(cfg)
print(f"{len(runs)} seeds of Setting B, "
      f"{'computed now' if computed_now else 'loaded from the cache (computed in the warm-up)'}")
names = list(runs[0].raw_rewards)
for s, r in zip(cfg.lm_seeds, runs):
    print(f"seed {s}: MPO λ̄ = {np.round(r.lam, 3)} over {mpo.LM_OBJECTIVES}; the headroom control's grid mix "
          f"λ = {np.round(r.grid_lam, 2)}; within-prompt sd of each reward among π_ref's samples "
          f"{np.round(r.reference_spread, 2)}")

# %% [markdown]
# ## Per-objective results
#
# Left: the implied rewards $\mathbb{E}[\tilde r_k]$ that MPO balances (on the first `mpo.IMPLIED_REWARD_PROMPTS`
# test prompts); right: the raw rewards (accuracy and the rates of large and even answers). Mean ± sd over seeds.

# %%
fig, axes = plot.subplots(1, 2, figsize=(13, 4.4))
width = 0.8 / len(mpo.LM_OBJECTIVES)
for ax, table, ylabel in ((axes[0], "per_objective", "E[r̃_k] = β E[log π_k/π_ref] (nats × β)"),
                          (axes[1], "raw_rewards", "mean raw reward (rate)")):
    for k, obj in enumerate(mpo.LM_OBJECTIVES):
        vals = np.array([[getattr(r, table)[n][k] for n in names] for r in runs])
        ax.bar(np.arange(len(names)) + (k - 1) * width, vals.mean(0), width, yerr=vals.std(0), capsize=2, label=obj)
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set(title="Implied rewards per objective" if table == "per_objective" else "Raw rewards per objective",
           ylabel=ylabel)
    ax.legend(title="objective", fontsize=8)

# %%
gains = np.array([[r.min_gain(n) for n in names] for r in runs])
fig, ax = plot.subplots()
ax.bar(names, 100 * gains.mean(0), yerr=100 * gains.std(0), capsize=3, color=plot.PALETTE[: len(names)])
ax.axhline(0, color="k", lw=0.8)
ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right")
ax.set(title="Worst objective's raw-reward gain over π_ref",
       ylabel=f"min_k (E_π[r_k] − E_ref[r_k]) (points; mean ± sd, {len(runs)} seeds)");

# %% [markdown]
# ## The smallest effect, and a control that the balance can be seen here
#
# An earlier version of `balanced_lm` asked only that MPO's advantage be above zero. Its verdict on lm_seeds
# 500-507 was inconclusive with both differences near zero, and a re-run on 600-607 came out refuted: with a true
# difference of about zero and no smallest effect, the label was decided by chance. Both were seen before this
# version was declared, which is decided on fresh seeds.
#
# **The smallest effect** comes from the paper: the margin by which MPO's minimum win rate beats the best compared
# method's, the smaller of its two β (`mpo.PAPER_MIN_WIN_RATES`, `mpo.smallest_paper_margin`). The figures are the
# chapter's research note's; we could read the paper's abstract but not its tables, and there is no official code,
# so they are **not verified**. The rule — the smaller reported margin — does not depend on our data. A win rate
# against $\pi_{\text{ref}}$ with ties counted half is $W = (1 + \mathbb{E}_\pi[r] - \mathbb{E}_{\pi_{\text{ref}}}[r])/2$ for a
# 0/1 reward and independent draws, so a margin $\Delta W$ of minimum win rates is $2\Delta W$ of worst-objective
# gains (`mpo.gain_from_win_rate`). That assumes the paper's win rates are against the reference policy and count
# ties half; the paper's are judged by reward models on free text, ours by 0/1 rewards, so the conversion carries
# the size of the margin over, not its meaning. A difference is reproduced when its interval lies above 0 and its
# estimate reaches the smallest effect, refuted when the interval lies wholly below it.
#
# **The headroom control** asks whether a balance worth that margin exists in this world at all. On held-out
# calibration prompts of each seed (neither training nor test prompts) every per-token mix of a grid over the
# simplex, weights in multiples of 1/`mpo.HEADROOM_GRID` (the single policies and the uniform mix among them), is
# sampled with common noise, and the one with the best worst-objective gain is then scored on the test prompts with
# the other methods. The precondition `headroom`: on average over the seeds it beats the better of the uniform mix
# and the best single policy by at least the smallest effect. If not, no mix MPO could find would show the paper's
# margin here and the verdict is inconclusive, not refuted. It reuses the single policies (no training).

# %%
margins = {b: r["MPO"] - max(v for n, v in r.items() if n != "MPO") for b, r in mpo.PAPER_MIN_WIN_RATES.items()}
hc = mpo.HEADROOM_CALIBRATION


def points(xs):
    return ", ".join(f"{100 * x:+.1f}" for x in xs)


display(Markdown(
    "The paper's minimum win rates (research note, unverified): "
    + "; ".join(f"β = {b}: MPO {r['MPO']} vs " + ", ".join(f"{n} {v}" for n, v in r.items() if n != "MPO")
                + f" (margin over the best other {margins[b]:.1f} points)" for b, r in mpo.PAPER_MIN_WIN_RATES.items())
    + f". The smaller margin, {100 * mpo.smallest_paper_margin():.1f} points of win rate, is a smallest effect of "
    f"{mpo.MIN_EFFECT:g} in worst-objective gain. "
    f"On the calibration seeds {hc['seeds']}, before any verdict under this design, the control measured a headroom "
    f"of {points(hc['headroom'])} points per seed (the grid mix over the uniform mix alone: "
    f"{points(hc['grid_minus_uniform'])}); even choosing the grid's mix on the test prompts themselves, an "
    f"optimistic bound, gives {points(hc['test_oracle_headroom'])}, because the best worst-objective gain of any "
    f"grid mix is only {points(hc['test_max_min_gain'])} points: the single policies gain a few points on their own "
    f"objective and lose on the others, so the uniform mix is already about as balanced as a mix gets. A hotter "
    f"π_ref (T = {hc['hot_temperature']}, seeds {hc['hot_seeds']}), whose singles learn more, was no better "
    f"(headroom {points(hc['hot_headroom'])}, optimistic bound {points(hc['hot_test_oracle_headroom'])}). No regime "
    "with conflicting objectives that a tiny draft can learn was found within the chapter's budget, so the regime "
    "is unchanged and the control is kept: it says on the verdict seeds whether this world can show the margin."))

# %% [markdown]
# ## Claim check
#
# `mpo.balanced_lm`, one paired unit per seed: MPO's worst-objective gain exceeds the best single-objective
# policy's and the uniform per-token mix's, by the smallest effect above (95% t intervals). Its preconditions: each
# single-objective policy raises its own raw reward over $\pi_{\text{ref}}$ by at least `mpo.SINGLE_GAIN` on
# average over the seeds (the fine-tuning regime learns every objective), the evaluation resolves that bar (the
# standard error of each mean gain is at most half of it), and the headroom control. One seed's gain is measured
# too noisily for a per-seed bar: an earlier version asked for the bar on three quarters of the seeds, and that
# count was mostly evaluation noise.

# %%
meas = mpo.lm_measurements(runs)
v = check(mpo.BALANCED_LM, seeds=cfg.lm_seeds, calibration_seeds=cfg.calibration_seeds, scale=scale, measured=meas,
          our_value=f"worst-objective gain over π_ref: MPO {100 * np.mean(meas['mpo_min_gain']):.1f} points; MPO − "
                    f"best single {100 * np.mean(meas['mpo_minus_best_single']):.1f}, MPO − uniform mix "
                    f"{100 * np.mean(meas['mpo_minus_uniform']):.1f} ({len(runs)} seeds, {cfg.lm_eval_prompts} "
                    "test prompts each)")
plot.show_verdicts(v)

# %% [markdown]
# ## What we see

# %%
display(Markdown(
    f"MPO's weights per seed: {'; '.join(str(np.round(r.lam, 2)) for r in runs)} over {mpo.LM_OBJECTIVES}. "
    "Each single-objective policy's gain on its own objective, mean over seeds ± its standard error: "
    + "; ".join(f"{o} {100 * np.mean(meas[k]):.1f} ± {100 * np.sqrt(np.sum(np.square(meas[k + '_se']))) / len(runs):.1f}"
                f" points (per seed {', '.join(f'{100 * g:.1f}' for g in meas[k])})"
                for o, k in zip(mpo.LM_OBJECTIVES, mpo.OWN_GAIN_KEYS))
    + f"; one seed's gain has a standard error of about {100 * np.mean([meas[k + '_se'] for k in mpo.OWN_GAIN_KEYS]):.1f} points. "
    f"MPO's worst-objective gain minus the best single "
    f"policy's is {100 * np.mean(meas['mpo_minus_best_single']):.1f} points and minus the uniform mix's "
    f"{100 * np.mean(meas['mpo_minus_uniform']):.1f} points (means over seeds). The headroom control's grid mix "
    f"beat the better comparator by {points(meas['headroom'])} points per seed (mean "
    f"{100 * np.mean(meas['headroom']):+.1f}; the bar is {100 * mpo.MIN_EFFECT:.1f}), and the uniform mix alone by "
    f"{points(meas['grid_minus_uniform'])}. Two approximations stand between "
    "this experiment and the theory: the per-token mix is not the sequence-level π_λ that BSMD optimises, and the "
    "fine-tuned policies are only rough versions of π_ref exp(r_k/β)/Z, so their implied rewards r̃_k are not the "
    "raw rewards the claim scores."))

# %% [markdown]
# ## A self-check and a referee on other seeds
#
# **After the verdict on lm_seeds 700-707 was recorded, nothing changed after it.** The chapter's own functions
# re-decided `balanced_lm` at ci with only the seeds changed, to a second fresh set, to see whether the label
# replicates; then a referee with no stake did the same on a third. Their numbers, as measured, are in
# `mpo.REFEREE_800` and `mpo.REFEREE_900`, printed below.

# %%
def interval(v):
    return f"{v[0]:+.4f} [{v[1]:+.4f}, {v[2]:+.4f}]"


def referee_text(r, who):
    return (
        f"{who}, seeds {r['seeds']}: {r['verdict']} (on the book's seeds {r['verdict_seeds']}: {r['book_verdict']}), "
        f"so the label {'held' if r['verdict'] == r['book_verdict'] else 'did not hold'}. Failed preconditions: "
        f"{', '.join(r['failed'])} (the weakest single's mean own gain {r['singles_learn']:.4f}, bar "
        f"{mpo.SINGLE_GAIN:g}; headroom {r['headroom']:+.4f}, bar {mpo.MIN_EFFECT:g}; the grid mix over the uniform "
        f"mix alone {r['grid_minus_uniform']:+.4f}). MPO − best single {interval(r['mpo_minus_best_single'])}, MPO − "
        f"uniform mix {interval(r['mpo_minus_uniform'])}: without the preconditions both effects would be "
        f"{r['effects_alone']} on size.")


display(Markdown("\n\n".join([
    referee_text(mpo.REFEREE_800, "Self-check"), referee_text(mpo.REFEREE_900, "Referee with no stake"),
    "In this build: " + ", ".join(f"{e['name']} {e['verdict']}" for e in v.record["effects"]) + "."])))
