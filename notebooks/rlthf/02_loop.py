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
# # The RLTHF loop: how much human effort buys full-human quality?
#
# Each iteration: train the RM on the current labels, sort the margins, find elbow, knee and reflection point
# (`01_curve`), ask humans about up to $B$ not-yet-asked pairs in the band [knee, reflection), flip the AI labels
# past the reflection point, and build the next training set from
#
# * AI labels before $(1-\beta)\cdot$knee (back-off $\beta$: cleaner but less coverage),
# * every human label, counted $\alpha$ times (amplification $\alpha$),
# * the flipped labels.
#
# $\alpha$ falls from $\alpha_0$ to 1 and $\beta$ from $\beta_0$ to 0 over the iterations (the paper says both
# start high and decrease; its values were not found). The arms, each scored by RM accuracy on clean test labels:
#
# | arm | labels |
# |---|---|
# | AI-only | AI labels for every pair |
# | random (one shot) | a random share $b$ of pairs relabelled by humans, no loop |
# | **RLTHF loop, random queries** | the loop below, with each iteration's human queries drawn at random from all not-yet-asked pairs (the targeting baseline: same flips, back-off and amplification) |
# | **RLTHF** | the loop above, $b/I$ human labels per iteration |
# | RLTHF without α/β | the loop with $\alpha = 1$, $\beta = 0$ |
# | self-improvement | the loop without humans (flips and back-off only) |
# | full human | human labels for every pair |

# %% tags=["parameters"]
scale = "ci"
seed = 0  # not used: the runs use `seeds`
seeds = None  # verdict seeds; None: the scale's value
sweep_seeds = None  # the seeds that also run every budget (the figures); None: the scale's value
targeting_seeds = None  # extra seeds for the targeting claim (computed in the builder's warm-up)
lapse_slip = None  # the other labeller's share of random lapses (needs_humans_lapses)
budgets = None  # total human budgets (share of pairs); None: the scale's value
n_iterations = None  # RLTHF iterations
alpha0 = None  # initial amplification of human labels
beta0 = None  # initial back-off from the knee
claim_budget = None  # the budget at which the claims are checked (paper: 6-7%)
dpo_beta = None  # β of the downstream DPO loss
dpo_candidates = None  # candidate responses per held-out prompt of the DPO policy
# full scale: more seeds, 20000 pairs, budgets 1%–50% (icml25.rlthf.config("full"))

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from tqdm.auto import tqdm

from icml25 import rlthf
from icml25.core import check, plot

plot.use_style()
cfg = rlthf.config(scale, seeds=seeds, sweep_seeds=sweep_seeds, targeting_seeds=targeting_seeds,
                   lapse_slip=lapse_slip, budgets=budgets, n_iterations=n_iterations, alpha0=alpha0, beta0=beta0,
                   claim_budget=claim_budget, dpo_beta=dpo_beta, dpo_candidates=dpo_candidates)
cfg

# %%
results = {s: rlthf.run_seed(cfg, s) for s in tqdm(cfg.seeds, desc="seed")}
lapses = [rlthf.lapse_arms(cfg, s) for s in tqdm(cfg.seeds, desc="lapsing labeller")]
targeting, computed_now = rlthf.targeting_results(cfg)
print(f"targeting runs of {len(targeting)} more seeds: {'computed now' if computed_now else 'read from the cache'}")
measured = rlthf.claim_measurements(list(results.values()), cfg.claim_budget, lapses, list(targeting.values()))
sweep = [results[s] for s in rlthf.swept(cfg)]
table = rlthf.final_table(sweep)
claim_table = rlthf.final_table(list(results.values()), cfg.claim_budget)
measured

# %% [markdown]
# ## Accuracy against human budget, and per iteration

# %%
pct = 100 * np.array(cfg.budgets)
colors = dict(zip(rlthf.ARMS, plot.PALETTE))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
for arm in ("random", "random_queries", "rlthf", "rlthf_no_alpha_beta"):
    ax1.errorbar(pct, table[arm].mean(0), yerr=table[arm].std(0), marker="o", capsize=3, color=colors[arm],
                 label=rlthf.LABELS[arm])
for arm, ls in (("ai_only", ":"), ("self_improve", "-."), ("full_human", "--")):
    m, s = table[arm][:, 0].mean(), table[arm][:, 0].std()
    ax1.axhline(m, color=colors[arm], ls=ls, label=f"{rlthf.LABELS[arm]} ({m:.1f} ± {s:.1f})")
ax1.set(title=f"Final RM accuracy (mean ± sd over {len(sweep)} sweep seeds)", xlabel="human budget (% of pairs)",
        ylabel="preference accuracy on clean test labels (%)")
ax1.legend(fontsize=8)
j = list(cfg.budgets).index(cfg.claim_budget)
b = cfg.budgets[j]
iters = np.arange(cfg.n_iterations + 1)
for arm in ("rlthf", "random_queries", "rlthf_no_alpha_beta", "self_improve"):
    curves = np.array([r[arm][b] for r in results.values()])
    ax2.errorbar(iters, curves.mean(0), yerr=curves.std(0), marker="o", capsize=3, color=colors[arm],
                 label=rlthf.LABELS[arm])
for arm, ls in (("random", ":"), ("full_human", "--")):
    ax2.axhline(claim_table[arm][:, 0].mean(), color=colors[arm], ls=ls, label=rlthf.LABELS[arm])
ax2.set(title=f"Per iteration at a {100 * b:.0f}% human budget ({len(results)} seeds)", xlabel="iteration (0: RM on AI labels)",
        ylabel="preference accuracy on clean test labels (%)")
ax2.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Is the band where the wrong labels are?
#
# The AI-label error rate inside RLTHF's band [knee, reflection) and outside it, at each iteration (the band is
# recomputed from each iteration's reward model), at the claim budget; mean ± sd over seeds.

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for key, color, label in (("band_error", plot.PALETTE[1], "inside the band"),
                          ("outside_error", plot.PALETTE[0], "outside the band")):
    vals = np.array([r[key][b] for r in results.values()])
    ax.errorbar(np.arange(cfg.n_iterations), np.nanmean(vals, 0), yerr=np.nanstd(vals, 0), marker="o", capsize=3,
                color=color, label=label)
ax.set(title=f"Wrong AI labels inside and outside the band ({100 * b:.0f}% budget)",
       xlabel="iteration (band from that iteration's RM)", ylabel="AI labels that are wrong (%)")
ax.legend()
plt.show()

# %% [markdown]
# ## Claim checks
#
# One paired unit per seed; all arms of a seed share its world. Preconditions of every claim: the full-human reward
# model beats the AI-only one by at least 5 points on every seed (there is something to fix); for `near_full` and
# `targeting`, also that it reaches 85% (the reward model can learn the task).

# %%
def fmt(arm):
    return f"{claim_table[arm][:, 0].mean():.1f} ± {claim_table[arm][:, 0].std():.1f}"


def mean(key):
    return f"{np.mean(measured[key]):+.2f}"


v = check(rlthf.NEAR_FULL, measured=measured, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          our_value=f"at {100 * b:.0f}% human labels: RLTHF {fmt('rlthf')} vs full human {fmt('full_human')}")
plot.show_verdicts(v)

# %% [markdown]
# `targeting` reads the verdict seeds together with the `targeting_seeds`, whose two loops run in the builder's
# warm-up. Below the claim box: how many seeds it read, how many its power line asks for, and what a seed costs.

# %%
v = check(rlthf.TARGETING, measured=measured, seeds=[*cfg.seeds, *map(int, targeting)],
          calibration_seeds=cfg.calibration_seeds, scale=scale,
          our_value=f"at {100 * b:.0f}%: RLTHF minus the loop with random queries {mean('rlthf_minus_random_queries')} "
                    f"points over {len(measured['rlthf_minus_random_queries'])} seeds")
plot.show_verdicts(v)

# %%
e, need = v.record["effect"], v.record.get("units_needed")
per_seed = np.median([x["seconds"] for x in targeting.values()])
sign = ("Its sign is clear: the interval excludes 0." if e["ci_low"] > e["null"] else
        "Its sign is not settled either: the interval reaches 0.")
ask = (f"Its power line asks for about {need} seeds, the number at which its interval would, at the observed spread, "
       f"decide whether the effect reaches the smallest effect of {e['min_effect']:+g} "
       f"point{'' if abs(e['min_effect']) == 1 else 's'}. A targeting seed (both "
       f"loops and the two reference reward models) took {per_seed:.1f} s on one thread in the warm-up (median of "
       f"{len(targeting)}), so that many would add about {need * per_seed / 60:.0f} minutes of one-thread warm-up "
       f"for this one claim, against {len(targeting) * per_seed / 60:.1f} minutes for its targeting seeds now. The "
       f"book's `{scale}` build does not spend that on one claim, so at this scale the size of the effect is "
       f"left undecided. {sign}") if need else ""
display(Markdown(f"`targeting` read {e['n']} seeds: the {len(cfg.seeds)} verdict seeds and {len(targeting)} "
                 f"targeting seeds (verdict: {v.label}; {e['estimate']:+.2f} [{e['ci_low']:+.2f}, "
                 f"{e['ci_high']:+.2f}] points). {ask}"))

# %% [markdown]
# **Two labellers.** Whether the loop can improve without humans depends on how the AI labeller errs. A purely
# systematic bias is learned by the reward model, so no flip rule finds it; random lapses are what a flip rule
# removes. Neither error model is the paper's (its labeller is an LLM), so the claim is decided on both: the same
# world, bias and 75% accuracy, without and with 12% random lapses.

# %%
lap = {k: np.array([x[k] for x in lapses]) for k in ("ai_only", "self_improve", "full_human")}
v1 = check(rlthf.NEEDS_HUMANS, measured=measured, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
           scale=scale, our_value=f"systematic labeller: self-improvement {fmt('self_improve')} vs AI-only "
                                  f"{fmt('ai_only')}")
v2 = check(rlthf.NEEDS_HUMANS_LAPSES, measured=measured, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
           scale=scale, our_value=f"lapsing labeller: self-improvement {lap['self_improve'].mean():.1f} vs AI-only "
                                  f"{lap['ai_only'].mean():.1f}")
plot.show_verdicts(v1, v2)

# %% [markdown]
# ## Downstream: DPO on the curated labels
#
# The paper's second use of the labels: the final reward model labels the whole set and a policy is trained on it
# by DPO. Here a prompt's policy chooses among `dpo_candidates` candidate responses,
# $\pi_\theta(y\mid x) \propto \pi_{\text{ref}}(y\mid x)\, e^{h_\theta(y)}$ with $\pi_{\text{ref}}$ uniform,
# trained by the DPO loss $-\log\sigma\big(\beta\,[h_\theta(y_c) - h_\theta(y_r)]\big)$ on each arm's labels
# (the loops' sets labelled by their final reward model, the others by their own labels), and judged by its exact
# win rate against $\pi_{\text{ref}}$ under the true reward on held-out prompts. Claim `rlthf.dpo_matches`: the
# policy from RLTHF's labels is no more than 2 win-rate points below the one from full human labels; its
# preconditions are that DPO on full human labels wins at least 60% against $\pi_{\text{ref}}$ and at least 2 points
# more than DPO on AI labels (the labels matter downstream).

# %%
fig, ax = plt.subplots(figsize=(7, 3.8))
dpo = np.array([[measured[f"dpo_{arm}"][i] for arm in rlthf.DPO_ARMS] for i in range(len(results))])
ax.bar([rlthf.LABELS[a] for a in rlthf.DPO_ARMS], dpo.mean(0), yerr=dpo.std(0), capsize=3,
       color=[colors[a] for a in rlthf.DPO_ARMS])
ax.axhline(50, color="k", lw=0.8, ls=":")
ax.set_xticks(range(len(rlthf.DPO_ARMS)), [rlthf.LABELS[a] for a in rlthf.DPO_ARMS], rotation=20, ha="right")
ax.set(title=f"DPO policies trained on each arm's labels ({100 * b:.0f}% human budget)",
       ylabel=f"win rate vs π_ref (%; mean ± sd, {len(cfg.seeds)} seeds)", ylim=(40, 100))
plt.show()

# %%
v = check(rlthf.DPO_MATCHES, measured=measured, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
          our_value="DPO win rate vs π_ref: " + ", ".join(
              f"{rlthf.LABELS[a]} {np.mean(measured[f'dpo_{a}']):.1f}" for a in rlthf.DPO_ARMS))
plot.show_verdicts(v)

# %% [markdown]
# ## What we see

# %%
display(Markdown(
    f"At a {100 * b:.0f}% human budget RLTHF's reward model reaches {fmt('rlthf')}% against {fmt('full_human')}% "
    f"with every label from humans and {fmt('ai_only')}% with AI labels only. The same loop with randomly chosen "
    f"queries reaches {fmt('random_queries')}% (one-shot random annotation: {fmt('random')}%), so targeting the band "
    f"adds {np.mean(measured['rlthf_minus_random_queries']):.1f} points on average over choosing at random inside "
    f"the same loop ({len(measured['rlthf_minus_random_queries'])} seeds). Inside the band {np.mean(measured['ai_error_in_band']):.0f}% of the AI labels are wrong at the "
    f"first iteration, against {np.mean(measured['ai_error_outside_band']):.0f}% outside it. Without humans the loop "
    f"ends at {fmt('self_improve')}% against {fmt('ai_only')}% for the AI-only reward model with the systematic "
    f"labeller, and at {lap['self_improve'].mean():.1f}% against {lap['ai_only'].mean():.1f}% with the lapsing one "
    f"(verdicts: {v1.label}, {v2.label}). Downstream, the DPO "
    f"policy from RLTHF's curated labels wins {np.mean(measured['dpo_rlthf']):.1f}% against π_ref, against "
    f"{np.mean(measured['dpo_full_human']):.1f}% from full human labels, {np.mean(measured['dpo_ai_only']):.1f}% "
    f"from AI labels and {np.mean(measured['dpo_random_queries']):.1f}% from the random-query loop's labels."))
