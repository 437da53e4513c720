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
# # RSD on the arithmetic reasoners: accuracy against FLOPs
#
# The chapter's own pair writes step-by-step solutions such as `3+4=7;7*2=4;A4`: a **draft** (`rsd-draft`, a small
# model) and a **target** (`rsd-target`, at least 8× the draft's FLOPs per token), both trained on the same mix of
# 1-5-operation chains, so the draft is weaker by capacity, not by never having seen long chains. Each is trained
# until a declared teacher-forced exact match on validation problems (the target's checked after every step near
# its mark and averaged over its last three checks, the draft's every ten steps: its band is wide; `rsd.pair`),
# and the calibration below is declared as preconditions. RSD lets the draft write each step (up to `;`), scores it with a PRM, and calls the target for that
# step only when the reward is below δ. δ is the paper's: the largest threshold that meets a budget on target calls
# (a share of the steps, the knob `budget`), set per PRM and seed on a held-out calibration split (the draft's steps
# after correct prefixes of problems no other part uses), not on the test. Three PRMs decide every claim:
#
# * **oracle**: the exact step verifier (a program: zero FLOPs; it says 0 or 1);
# * **noisy oracle**: the oracle with each verdict flipped with probability ε (ε = 0.1: ROC AUC 1 − ε = 0.9, above
#   the quality bar of 0.8 that every graded PRM must pass); it stands in for a PRM of that quality, so its FLOPs
#   are those of a PRM of the draft's size, as the learned PRM's are;
# * **learned PRM**: a copy of the draft fine-tuned on the draft's own sampled solutions, every step labelled by the
#   exact checker, with a value head read at each step's last token (as the paper's PRM scores a step at its end)
#   and a class-weighted cross-entropy (right and wrong steps carry half the loss each); the paper's PRM, too, is a
#   model of its draft's family and size. It gives graded scores, and its FLOPs are counted.
#
# FLOPs are counted two ways, side by side: **prefill counted** (`icml25.core.flops`, as if each model kept a KV
# cache: a model pays for every token the first time it reads it, i.e. the prompt and the steps the *other* model
# wrote, and for every token it writes; a discarded draft step is paid for), and **written or scored tokens
# only** (2N per token a model writes, or the PRM scores; no prefill, no attention), a coarser count. Baselines
# on the same problems: draft only, target only, token-level speculative decoding (its output equals the
# target's), random acceptance at RSD's acceptance rate, and, at equal FLOPs, draft best-of-N reranked by each
# PRM, draft majority vote and target best-of-N.
#
# The pair comes from the knobs `draft_model` and `target_model`: the chapter's zoo pair at smoke and ci, any causal LM
# checkpoint pair sharing one tokenizer otherwise (a step ends at the delimiter whatever number of tokens spells
# it). `full` scale (documented, not run here): Qwen2.5-Math-1.5B-Instruct drafting for Qwen2.5-Math-7B-Instruct,
# `n_test=500`, more seeds (`rsd.config("full")`), ten thresholds, best-of-16, a PRM fine-tuned from the draft on
# its rollouts.
#
# **Changed after the verdicts on seeds 200-207 were seen** (each change is in the chapter's ledger, and the
# verdicts below are on fresh seeds; the changes were checked on calibration seeds 0-4 only):
#
# * the budget on target calls: with a 0/1 PRM, δ is either 1 (reject exactly the zeros) or 0 (accept every
#   step), and on some of those seeds the draft's wrong steps on the calibration split outnumbered the old budget,
#   so δ = 0 and "RSD" was the draft alone. The budget now leaves room for the zeros of a draft at its mark, and
#   every claim carries a precondition that the budget holds the PRM's low rewards (its δ sends some steps to the
#   target on the calibration split), so a seed where it does not cannot pass for RSD;
# * the learned PRM: trained from scratch (a model smaller than the draft) it reached a step AUC of about 0.8
#   and ranked one problem's samples no better than chance, so every learned-PRM claim was inconclusive on its
#   quality preconditions. It now starts from the draft's weights;
# * the pair's stop rule validates less often (coarser near the mark for the draft), to cut the warm-up's cost;
#   the marks and bands are unchanged.
#
# **Changed after the verdicts on seeds 300-307 were seen** (ledgered; decided on seeds 1300-1307):
#
# * the budget's boundary case: on two of those seeds the draft's wrong steps on the calibration split still
#   outnumbered the budget, so the oracle's δ was 0 and RSD was the draft alone again. When the lowest reward alone
#   exceeds the budget, the rule now sends each step scored that lowest reward to the target with the probability
#   that spends the budget (`rsd.floor_share`): the use of the budget that the paper's "largest δ within the
#   budget" makes when rewards do not tie. A graded PRM's rewards do not tie, so its rule is unchanged;
# * random acceptance at RSD's rate now runs with every PRM, as a control for best-of-N (below).
#
# **Changed after the verdicts on seeds 1300-1307 were seen** (ledgered; decided on fresh seeds 1600-1607):
#
# * the test problems: every seed used to be tested on the same problems, so the seeds replicated the pair's
#   training but not the test set, and a claim's interval left out the variation between test sets. Each seed now
#   draws its own test problems (the same held-out stream, which no training or calibration uses).
#
# **Changed after the verdicts on seeds 1600-1607 were seen** (ledgered; verdicts below on fresh seeds 1700-1707):
#
# * the learned PRM's training. On those seeds it reached its quality bar on too few seeds, so its four claims were
#   inconclusive. Measured on calibration seeds 0-4 only (the table below): the old design's held-out step AUC
#   stopped rising early on four of them while its AUC on its own training rollouts stayed close to it, so it
#   underfit; labelling every step of a rollout at once and training longer on the same rollouts, it overfit
#   them; on four times as many rollouts the two AUCs agree. The PRM now reads a value head at each step's last token (instead of a query
#   token after one step), is trained on every step of each rollout in one pass with right and wrong steps
#   weighted evenly, sees four times as many rollouts, and trains a fixed number of steps on a decaying schedule
#   (no stop at a lucky evaluation); the learning rate, data and length were chosen on the calibration seeds by
#   their lowest seed. The bar (ROC AUC ≥ 0.8 on at least 75% of seeds) and every claim are unchanged.
#
# **Changed after the verdicts on seeds 1700-1707 and a referee's run on fresh seeds 1800-1807 were seen** (ledgered
# before any verdict of the new design; decided on fresh seeds 2100-2107):
#
# * `threshold_matters`' baseline. It was random acceptance at RSD's rate; the referee found that a router that
#   never reads a step (by the problem's length and the step's index) also beats random acceptance, so beating it
#   does not show that the PRM's reward matters (its numbers are at the end of the page). The baseline is now the
#   strongest content-blind router of those tried on calibration seeds 0-4 (the table below): the *position
#   router*, which sends to the target the steps at the positions (a problem's number of operations, the step's
#   index) where the checker found the draft wrong most often on the calibration split, calling the target on the
#   share of the test's steps on which RSD called it. It learns from the checker's labels of other steps, as the
#   learned PRM does, but never reads the step it routes; the strongest label-free router (by length alone) and
#   random acceptance are reported beside it. The claim now declares a smallest effect, a quarter of the exact
#   verifier's gain over random acceptance on the calibration seeds (the fraction was fixed after a first pass on
#   calibration seed 0 and before seeds 1-4 ran; the ledger's note says "before those seeds ran", which is true of
#   seeds 1-4 only), so a small edge over the router is refuted on size rather than counted.
#
# **Changed after the verdicts on seeds 2100-2107 and a second referee's run on fresh seeds 2600-2607 were seen**
# (ledgered before any verdict of the new design; decided on fresh seeds 2800-2807; both designed on calibration
# seeds 0-4 only):
#
# * best-of-N's chain score. On those seeds `beats_parallel_noisy` and `_learned` were inconclusive because the
#   reranker failed its ranking precondition (a chain's minimum step reward did not rank one problem's right
#   samples above its wrong ones well enough on enough seeds). The diagnosis on the calibration seeds (the numbers
#   and tables below): it was not too few samples (nearly every problem has right and wrong ones among 16); it was
#   the aggregation for the noisy oracle, and the PRM for the learned one. Many of the draft's right answers come
#   through a wrong step (answers are mod-10 digits), and the minimum step reward scores those as low as a wrong
#   answer, so even the exact checker barely clears the bar with it. Which chain score the paper's best-of-N reads
#   we could not verify; each PRM's best-of-N
#   now reads the chain score (of the minimum, product, mean and last step reward, the usual ones) that ranked a
#   problem's samples best on the calibration seeds, the strongest baseline each PRM gives. The learned PRM ranks a
#   problem's samples little better than chance under every chain score: its step AUC comes mostly from *where* a
#   step is, and among the steps at one position of one problem it is much lower. The bar is unchanged;
# * the efficiency claims' operating point. At the chapter's target-call budget RSD lost accuracy on most seeds with
#   both graded PRMs, so "fewer FLOPs" was measured at an accuracy the paper does not claim; the paper's claim is
#   fewer FLOPs *at* the target's accuracy. Each graded PRM's budget is now the smallest of a declared grid at which
#   RSD, run end to end on the held-out calibration problems, keeps the target's accuracy there within the claims'
#   margin (the tables below); the claim is then decided on the test at that budget, so it asks whether a PRM can
#   keep the target's accuracy at fewer FLOPs. The other claims keep the chapter's budget.
#
# **Fixed after the first build on seeds 2800-2807 was seen** (no declaration changed): the search for the
# efficiency claims' budget stopped after the grid's first budget whatever its accuracy, so that build ran both
# efficiency claims at the smallest budget on every seed instead of the declared rule. The search was fixed and the
# same seeds re-run; every verdict of both builds is inconclusive on the pair's calibration (the draft's accuracy
# band), which the fix does not touch.
#
# **Changed after the verdicts on seeds 2800-2807 were seen** (ledgered before any verdict of the new rules;
# verdicts on fresh seeds 3900-3907; chosen on calibration seeds 0-4 and 10-19 only, by the models' accuracy
# bands and cost, with no claim run on them):
#
# * the pair's stop rules. On those seeds every claim was inconclusive because the draft landed inside its accuracy
#   band on too few seeds (and `beats_parallel_learned` also failed its ranking precondition, on every seed: the
#   learned PRM is unchanged here). The draft had run into its step cap before reaching its mark on the seeds where
#   it fell short, and it did so on most of the chapter's calibration seeds too; the target had stopped on one
#   lucky validation. The draft's cap is doubled (its learning-rate schedule stretched with it; its mark unchanged)
#   and the target now stops when the mean of its last three validations reaches a slightly higher mark. Every
#   cap, learning rate and stop rule tried is in `rsd.PAIR_CALIBRATION`, printed below; the bands, the criteria and
#   the preconditions are unchanged.
#
# **Changed after the verdicts on seeds 3900-3907 and a referee's re-run on 4900-4907 were seen** (ledgered before
# any verdict of the change; the verdicts below are on fresh seeds 5900-5907):
#
# * the noisy oracle's cost. It stands in for a PRM of AUC 0.9, yet it was charged no FLOPs, as a program;
#   the referee found efficiency_noisy's FLOP ratio undecided on both seed sets when the noisy oracle is charged as a
#   PRM of the draft's size (the learned PRM's), so more seeds could have reproduced the efficiency claim on a
#   verifier that costs nothing. It is now charged as a draft-sized PRM reading what a PRM reads, in RSD and in
#   best-of-N reranked by it; the exact oracle stays a free program (it decides no efficiency claim). Nothing else
#   changed.
#
# **Changed after the verdicts on seeds 5900-5907 were seen** (ledgered before any verdict; the verdicts below are on
# fresh seeds 6900-6907):
#
# * `efficiency_noisy`'s power line. Charged as a draft-sized PRM, its FLOP ratio came out refuted on those seeds
#   but undecided on the two seed sets before (the table below), an estimate about one half-width from the bar, so
#   its label turned on which eight seeds were drawn. The diagnosis below (on those 24 seeds, no new verdict) finds
#   where the spread comes from and that no number of problems per seed lets eight seeds decide a ratio 0.1 from
#   the bar; the claim now carries that spread as its power line, and its measurement is unchanged.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # not used directly: the training seeds of the draft/target pairs are `seeds`
draft_model = None  # a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
target_model = None  # likewise, sharing the draft's tokenizer; None: the scale's value
seeds = None  # draft/target training seeds (the verdict seeds); None: the scale's, apart from its calibration seeds
n_test = None  # held-out problems; None: the scale's value
deltas = None  # thresholds swept for the learned PRM (a figure, not a claim); None: the scale's value
budget = None  # the budget on target calls (share of steps) that sets each PRM's δ on the calibration split
n_calibration = None  # problems of the held-out calibration split that sets δ
epsilon = None  # flip rate of the noisy oracle
gamma = None  # draft tokens per round of token-level speculative decoding
bon_n = None  # largest N of draft best-of-N and majority vote
target_bon_n = None  # largest N of target best-of-N
patience = None  # rounds without a newly finished problem before a batch stops (the official code's patience)

# %%
import numpy as np
from IPython.display import Markdown, display

from icml25 import rsd
from icml25.core import check, plot
from icml25.core.claims import mean_sd, units_needed

plot.use_style()
cfg = rsd.config(scale, draft_model=draft_model, target_model=target_model, seeds=seeds, n_test=n_test, deltas=deltas,
                 budget=budget, n_calibration=n_calibration, epsilon=epsilon, gamma=gamma, bon_n=bon_n,
                 target_bon_n=target_bon_n, patience=patience)
cfg

# %% [markdown]
# How the pair's stop rules were chosen, on calibration seeds only (`rsd.PAIR_CALIBRATION`), before any verdict seed
# of these rules ran: each model trained once per cap, learning rate and seed, each stop rule read on the same run
# (training does not depend on when it is validated), and the greedy accuracy on the seed's test problems where the
# rule stopped (what the band reads); seconds are one thread with two runs at once on a shared machine, so rough.
# The rules the ci scale trains are in bold, their runs per seed below:

# %%
display(Markdown(rsd.pair_calibration_table()))
display(Markdown(rsd.pair_runs_table()))
old_rules = [r for r in rsd.PAIR_CALIBRATION if r["before"]]
display(Markdown("Before the change: " + "; ".join(
    f"the {r['model']} reached its mark before its cap on {sum(v[0] < r['steps'] for v in r['runs'].values())} of "
    f"{len(r['runs'])} calibration seeds and landed in its band on "
    f"{sum(lo <= v[2] <= hi for v in r['runs'].values())}"
    for r, (lo, hi) in ((r, rsd.DRAFT_ACCURACY if r['model'] == 'draft' else rsd.TARGET_ACCURACY)
                        for r in old_rules)) + "."))

# %% [markdown]
# How the learned PRM's training was chosen, on calibration seeds 0-4 only (`rsd.PRM_CALIBRATION`: every setting
# tried, with the held-out step AUC of each seed and its training seconds, one thread on a shared machine), before
# any verdict seed of this design ran:

# %%
display(Markdown(rsd.prm_calibration_table()))

# %% [markdown]
# How `threshold_matters`' baseline was chosen, on calibration seeds 0-4 only (`rsd.ROUTER_CALIBRATION`), before
# any verdict seed of this design ran: each router that never reads a step, at the rate of target calls of RSD with
# the noisy oracle and with the learned PRM on the same test problems (the pairs of the previous design's
# calibration; the learned PRM trained with the chapter's settings). The declared baseline is the most accurate:

# %%
display(Markdown(rsd.router_calibration_table()))
rc = rsd.ROUTER_CALIBRATION
display(Markdown(
    f"The exact verifier's threshold gains {np.mean(rc['oracle_minus_random']):.3f} over random acceptance at its "
    f"own rate on these seeds (mean); a quarter of that, {rsd.ROUTER_MIN_EFFECT:.3f}, is the smallest effect of "
    f"`threshold_matters`. The spread of RSD minus the position router there (sd "
    + ", ".join(f"{p} {rsd.ROUTER_DESIGN_SD[p]:.3f}" for p in rsd.GRADED) + ") plans its power line."))

# %% [markdown]
# How best-of-N's chain score was chosen, on calibration seeds 0-4 only (`rsd.BON_CALIBRATION`; the pairs and
# learned PRMs of those seeds trained by the chapter's current recipe, the 16 draft samples of each seed's test
# problems), before any verdict seed of this design ran: for each PRM and chain score, the within-problem ranking
# AUC against the samples' final answers (what best-of-N needs) and against their process (every step right). The
# declared chain score of each PRM, in bold, is the one with the highest mean AUC against the final answers:

# %%
display(Markdown(rsd.bon_calibration_table()))
bc = rsd.BON_CALIBRATION
display(Markdown(
    f"On these seeds a share {mean_sd(bc['problems_with_both'])} of the test problems have both right and wrong "
    f"samples among {bc['n']} (mean ± sd over the seeds), so the ranking is not starved of pairs; a share "
    f"{mean_sd(bc['right_with_wrong_step'])} of the right samples reach the right answer through a step the checker "
    "finds wrong, which a process verifier rightly scores low: that caps the minimum and the product of step "
    "rewards (for the exact checker they are 1 only on a chain with every step right), while the mean and the last "
    "(answer) step reward still separate right from wrong answers. The learned PRM's step AUC on these samples is "
    f"{mean_sd(bc['learned_step_auc'])} over all steps, {mean_sd(bc['learned_step_auc_within_position'])} among "
    "the steps at the same position of the same problem, and "
    f"{mean_sd(bc['learned_first_error_auc_within_position'])} there for a step after a right prefix: it knows "
    "where a step lies more than whether this one is right, which a reranker of one problem's samples cannot use "
    f"(the bar is {rsd.PRM_RANK_MIN})."))

# %% [markdown]
# **The implicit PRM, calibration only** (issue 50: it decides no claim here and is trained in no warm-up). Yuan et
# al.'s implicit PRM on this draft (`rsd.implicit`): π_θ starts as a copy of the draft, π_ref is the frozen draft,
# and π_θ learns with the cross-entropy of their Eq. 5 from the final-answer labels alone of the learned PRM's
# rollouts. A step is read as its own reward β·Σ over its tokens of log π_θ/π_ref ("single", the declared reading)
# or as the partial sum up to it ("accumulative", the reading the official step-error script thresholds), scored
# σ(reward). Every setting tried on the calibration seeds (`rsd.IMPLICIT_PRM_CALIBRATION`, measured once, not by
# the build), each cell the held-out step AUC against the checker's labels / the within-problem ranking AUC of the
# record's best chain score, the readings of the bars `prm_quality` and `prm_ranks` that every graded PRM's claims
# ask; the record the declared rule keeps (`rsd.kept_setting`) in bold:

# %%
display(Markdown(rsd.implicit_calibration_table()))
display(Markdown(rsd.implicit_learns_text()))

# %% [markdown]
# How the efficiency claims' budget is set, per seed and graded PRM, without the test: RSD runs end to end on the
# held-out calibration problems at each budget of the grid `keep_budgets`, and the smallest budget at which it keeps
# the target's accuracy there, within the claims' margin, is kept (`rsd.accuracy_keeping_budget`). On calibration
# seeds 0-4, before any verdict seed of this design ran, RSD's accuracy and FLOPs there at each budget were
# (`rsd.KEEP_CALIBRATION`):

# %%
display(Markdown(rsd.keep_calibration_table()))

# %% [markdown]
# **Why `efficiency_noisy`'s label turned on the seeds drawn** (after the verdicts on seeds 5900-5907 were seen). On
# the seeds of the three seed sets it was decided or re-decided on, RSD with the noisy oracle was run again at
# every budget of the grid, on each seed's calibration problems and its test problems (`rsd.KEEP_SPREAD`; every
# seed gives the claim's own per-seed ratio back). A seed's FLOP ratio at the kept budget varies over seeds because
# the budget lands at different steps of the grid (*where the budget lands*: the seeds' mean ratio curve read at
# each seed's kept budget) or because a pair costs more or less at the same budget (*a seed's cost at its budget*);
# and, for one pair, because other test problems or other calibration problems could have been drawn (each
# resampled: `rsd.keep_spread`); what is left is *between pairs* (`rsd.spread_components`; shares of the
# variance over the seeds, the last three adding up to it). The seeds needed are those a paired t test needs to
# tell a ratio that far from the claim's bar as the bar lies from 1 (a power line):

# %%
display(Markdown(rsd.keep_spread_table()))
ks = {s: v for runs in rsd.KEEP_SPREAD["sets"].values() for s, v in runs.items()}
parts = rsd.spread_components(list(ks.values()), rsd.KEEP_SPREAD["budgets"])
flop = rsd.EFFICIENCY["noisy"].effects[0]
gap = abs(flop.min_effect - flop.null)
need_pairs = units_needed(parts["pairs"] ** 0.5, gap)
display(Markdown(
    f"Pooled over the {len(ks)} seeds, where the budget lands carries {parts['landing'] / parts['total']:.0%} of the "
    f"variance and a seed's cost at its budget {parts['at_budget'] / parts['total']:.0%}: a kept budget of "
    f"{min(s['budget'] for s in ks.values()):g}-{max(s['budget'] for s in ks.values()):g} moves the ratio by far "
    "more than the pairs' costs at one budget differ. The test problems drawn carry "
    f"{parts['test_problems'] / parts['total']:.0%}, the calibration problems drawn "
    f"{parts['calibration_problems'] / parts['total']:.0%} (the budget search compares RSD's accuracy with the "
    "target's within a margin of "
    f"{rsd.ACCURACY_MARGIN:g} on {rsd.KEEP_SPREAD['n_calibration']} problems, and the "
    "accuracy is nearly flat in the budget once the low rewards go to the target, so a resample keeps the seed's "
    f"own budget on a share {mean_sd([s['same_budget'] for s in ks.values()])} of draws), and the pairs themselves "
    f"{parts['pairs'] / parts['total']:.0%}. At this spread (sd {rsd.EFFICIENCY_DESIGN_SD['noisy']:.3f}) a ratio "
    f"{gap:g} from the bar needs {flop.planned_units} seeds; more calibration problems could at most take out their "
    f"part, leaving the pairs' own, which alone needs {need_pairs}"
    + (f", more than the book's {n_book} seeds: no design of the measurement decides such a ratio on {n_book} seeds, "
       "so the measurement is unchanged and `efficiency_noisy` carries this sd as its power line (its record below "
       f"names the {flop.planned_units} seeds it plans for). A label decided on {n_book} seeds is one that another "
       f"draw of {n_book} can turn whenever the ratio lies within about {gap:g} of the bar."
       if need_pairs > (n_book := len(rsd.config("ci").seeds)) else ".")))

# %% [markdown]
# ## Running everything
#
# `rsd.reasoning_experiment(cfg, seed)` runs, for one draft/target pair: its calibration, the single-model
# baselines, speculative decoding's cost (exact, from one teacher-forced draft pass), each PRM's δ for the budget,
# RSD at it with each PRM and random acceptance at each of their acceptance rates, the learned PRM's δ sweep, the
# soft-ω ablation and the hard threshold at the soft rule's rate, and the parallel baselines (their samples too).
# With the zoo's pair its result is cached (`rsd.reasoning_results`, addressed by the knobs,
# the seed, the models' zoo addresses and the code), so the book's builder runs it in its warm-up.

# %%
results = []
for s in cfg.seeds:
    r, ran_now = rsd.reasoning_results(cfg, s)
    results.append(r)
    print(f"seed {s} ({'computed now' if ran_now else 'loaded from the cache (computed in the warm-up)'}): target {r['baselines']['target']['accuracy']:.3f}, draft {r['baselines']['draft']['accuracy']:.3f}, "
          f"draft/target cost per token {r['calibration']['cost_ratio']:.3f}, PRM AUC "
          + ", ".join(f"{k} {v:.3f}" for k, v in r["prm_auc"].items()))
    for name in rsd.PRMS:
        x = r["rsd"][name]
        floor = f", ties at δ routed with p={r['floor_share'][name]:.2f}" if r["floor_share"][name] else ""
        print(f"   RSD δ={r['delta'][name]:.3f} (routes {r['calibration_routed'][name]:.2f} of the calibration steps{floor}) "
              f"{r['prm_names'][name]:22s} acc={x['accuracy']:.3f} FLOPs={x['flop_ratio']:.2f}x "
              f"(written only {x['generated_flop_ratio']:.2f}x) accepted={x['acceptance_rate']:.2f}")

# %%
cal = [r["calibration"] for r in results]
display(Markdown(f"**The pair on the verdict seeds** ({cfg.seeds[0]}-{cfg.seeds[-1]}): " + "; ".join(
    f"the {name} is right on " + ", ".join(f"{c[f'{name}_accuracy']:.3f}" for c in cal)
    + f" of the test mix, inside its band ({lo:.0%}-{hi:.0%}) on {sum(c[f'{name}_in_band'] for c in cal):.0f} of "
    f"{len(cal)} seeds" for name, (lo, hi) in (("draft", rsd.DRAFT_ACCURACY), ("target", rsd.TARGET_ACCURACY)))
    + "."))

# %%
auc = [r["prm_auc"]["learned"] for r in results]
display(Markdown(
    f"**The learned PRM on the verdict seeds.** Step ROC AUC on held-out draft rollouts "
    + ", ".join(f"{a:.3f}" for a in auc) + f" (seeds {cfg.seeds[0]}-{cfg.seeds[-1]}): {sum(a >= rsd.PRM_AUC_MIN for a in auc)} "
    f"of {len(auc)} seeds reach the bar of {rsd.PRM_AUC_MIN}, lowest {min(auc):.3f}; the noisy oracle's "
    f"{mean_sd([r['prm_auc']['noisy'] for r in results])} (mean ± sd)."))

# %%
rsd.plot_accuracy_vs_flops(results, cfg);

# %%
rsd.plot_accountings(results, cfg);

# %%
m = rsd.claim_measurements(results)
eff = m["efficiency"]
at_budget = lambda p, key: mean_sd([  # noqa: E731
    r["rsd"][p][key] - (r["baselines"]["target"]["accuracy"] if key == "accuracy" else 0) for r in results])
display(Markdown(
    f"**What we see.** At the δ of a {cfg.budget:.0%} target-call budget, RSD costs " + "; ".join(
        f"{at_budget(p, 'flop_ratio')}× target-only FLOPs with the {results[0]['prm_names'][p]} "
        f"({at_budget(p, 'generated_flop_ratio')}× counting written tokens only), "
        f"accuracy {at_budget(p, 'accuracy')} against the target's" for p in rsd.PRMS)
    + ". At the budget that kept the target's accuracy on the calibration problems (the efficiency claims'), "
    + "; ".join(f"{mean_sd(eff[p][f'flop_ratio_{p}'])}× with the {results[0]['prm_names'][p]} "
                f"({mean_sd(eff[p][f'generated_flop_ratio_{p}'])}× written only), accuracy "
                f"{mean_sd(eff[p][f'accuracy_gap_{p}'])} against the target's, budget "
                f"{mean_sd(eff[p][f'keep_budget_{p}'])}" for p in rsd.GRADED)
    + f". Target-only is right on {mean_sd([r['baselines']['target']['accuracy'] for r in results])}; token-level speculative decoding "
    f"costs {mean_sd([r['baselines']['speculative']['flop_ratio'] for r in results])}× (mean ± sd over seeds)."))

# %% [markdown]
# The efficiency claims' operating point on each verdict seed: the budget that kept the target's accuracy on the
# calibration problems, and RSD at it on the test.

# %%
display(Markdown(rsd.keep_budget_table(results)))

# %% [markdown]
# Where the target is called: the share of problems on which RSD called the target at least once, by number of
# operations. Draft and target saw the same mix, so a longer chain is called on more often only because it has more
# steps to get wrong.

# %%
ops = sorted(results[0]["rsd"]["learned"]["target_call_share"])
fig, ax = plot.subplots()
for k, name in enumerate(rsd.PRMS):
    share = np.array([[r["rsd"][name]["target_call_share"][o] for o in ops] for r in results])
    ax.errorbar(ops, share.mean(0), yerr=share.std(0), marker=rsd.PRM_MARKERS[name], capsize=3,
                color=plot.PALETTE[k], label=results[0]["prm_names"][name])
ax.set(title="Problems on which RSD calls the target", xlabel="operations in the problem",
       ylabel="share of problems (mean ± sd over seeds)", ylim=(0, 1.05))
ax.legend();

# %%
rsd.plot_acceptance(results, cfg);

# %% [markdown]
# ## The ω-shape ablation
#
# The paper's theory says the hard step ω(r) = 1{r ≥ δ} is the optimal weighting; its ablation compares other
# shapes. Here: soft weights ω(r) = r (keep a draft step with probability equal to its reward), with the learned
# PRM (for a 0/1 PRM the two shapes coincide). The claim `hard_beats_soft_learned` below compares them at the same
# rate of target calls: the hard threshold at the δ whose acceptance rate on the calibration split equals the soft
# rule's there (the mean reward), against the soft rule, both on the test.

# %%
rows = [("hard ω, δ=" + f"{d['delta']}", d) for d in results[0]["sweep"]]
display(Markdown("| rule (learned PRM) | accuracy | FLOPs / target | accepted steps |\n|---|---|---|---|\n" + "\n".join(
    f"| {label} | {mean_sd([r['sweep'][i]['accuracy'] for r in results])} | "
    f"{mean_sd([r['sweep'][i]['flop_ratio'] for r in results])} | "
    f"{mean_sd([r['sweep'][i]['acceptance_rate'] for r in results])} |" for i, (label, _) in enumerate(rows))
    + "".join(f"\n| {label} | {mean_sd([r[key]['accuracy'] for r in results])} | "
              f"{mean_sd([r[key]['flop_ratio'] for r in results])} | "
              f"{mean_sd([r[key]['acceptance_rate'] for r in results])} |"
              for label, key in (("soft ω(r) = r", "soft"), ("hard ω at the soft rule's calibrated rate",
                                                              "hard_at_soft_rate")))))

# %% [markdown]
# ## The parallel baseline, and what the target adds to it
#
# The paper's claim is that RSD beats *parallel decoding* (abstract: "significant better accuracy than parallel
# decoding method on average (up to +3.5)"). We read its parallel baseline as best-of-N of the draft, reranked by
# the same PRM, at comparable compute, and the `beats_parallel` claims test that. We could not check this against
# the paper's table: the copies of the paper we could read stop before its experiments, and the official code
# (`BaohaoLiao/RSD`) has no parallel-decoding script (its evaluation helper reranks or votes over the samples of
# one model). Best-of-N of the draft never calls the target, while RSD does, so part of RSD's margin is access to
# a much stronger model rather than its routing rule. The control below separates the two: random acceptance at
# RSD's own acceptance rate is a decoder with the same access to the target (about the same target calls and
# FLOPs) but no PRM in the routing. Per seed, RSD − best-of-N = (RSD − random at RSD's rate) + (random − best-of-N):
# the first term is what the routing rule adds, the second what target access alone adds.
#
# Each PRM reranks by its declared chain score (chosen on the calibration seeds, above). How well every chain score
# ranks one problem's samples on the verdict seeds' test problems (within-problem AUC against the final answers,
# mean ± sd over seeds; the declared one in bold):

# %%
display(Markdown(rsd.ranking_table(results)))
display(Markdown(
    f"On these seeds a share {mean_sd([r['samples']['problems_with_both'] for r in results])} of the test problems "
    f"have both right and wrong samples among {cfg.bon_n}, and a share "
    f"{mean_sd([r['samples']['right_with_wrong_step'] for r in results])} of the right samples reach the right "
    "answer through a step the checker finds wrong (mean ± sd over seeds)."))

# %%
bp = m["beats_parallel"]
display(Markdown("| PRM | RSD − best-of-N | RSD − random at RSD's rate (routing) "
                 "| random − best-of-N (target access) |\n|---|---|---|---|\n" + "\n".join(
    f"| {results[0]['prm_names'][p]} | {mean_sd(bp[p][f'rsd_minus_bon_{p}'])} | "
    f"{mean_sd([r['rsd'][p]['accuracy'] - r['random'][p]['accuracy'] for r in results])} | "
    f"{mean_sd(bp[p][f'random_minus_bon_{p}'])} |" for p in rsd.PRMS)
    + "\n\nAccuracy differences, mean ± sd over seeds; best-of-N at the smallest N whose FLOPs reach RSD's."))

# %% [markdown]
# ## Claim checks
#
# The criteria were declared in `icml25.rsd` before any of this ran, one claim per PRM; one paired unit is one
# draft/target training seed, and the verdict seeds are apart from the seeds the design was calibrated on. Every
# claim carries the pair's calibration as preconditions, and the noisy and learned PRMs' quality (ROC AUC ≥ 0.8),
# and that each PRM's rule uses the budget (on the calibration split it sends some steps to the target),
# so a pair or a PRM that cannot show the effect makes the verdict inconclusive rather than refuted; best-of-N needs
# its reranker to rank one problem's samples (within-problem AUC ≥ 0.7) and its largest N to reach RSD's FLOPs.
# `threshold_matters` compares RSD with the position router at RSD's rate of target calls. With the 0/1 oracle it
# would hold by construction (the oracle keeps exactly the right steps, so no router can keep more), so it is no
# claim. With the noisy oracle it is close to one: its errors are flips at a fixed rate on every step, independent
# of how hard the step is, so it reads 90% of the draft's errors wherever they are, while the router knows only
# where they are likely. A real PRM errs more on hard steps; the learned PRM is the chapter's PRM with such errors,
# and its claim is the one that asks whether a PRM's reading of the step matters. The pairs and runs of the verdict
# seeds are computed in the book's
# warm-up.

# %% [markdown]
# **The oracle's efficiency is a check, not a claim.** With greedy decoding and the 0/1 oracle at δ = 1, a problem
# the target gets right keeps a right prefix, and every step the oracle rejects is replaced by the target's own
# greedy step, so RSD cannot lose a problem the target solves; its FLOPs then follow from the cost ratio and the
# draft's step error. Its row below checks the pipeline (a negative accuracy gap would be a bug).

# %%
o = eff["oracle"]
display(Markdown(f"Oracle RSD (check): FLOPs {mean_sd(o['flop_ratio_oracle'])}x target-only (written only "
                 f"{mean_sd(o['generated_flop_ratio_oracle'])}x), accuracy minus the target's "
                 f"{mean_sd(o['accuracy_gap_oracle'])}, lowest seed {min(o['accuracy_gap_oracle']):+.3f}."))

# %%
verdicts = {}
for prm in rsd.GRADED:
    e = eff[prm]
    verdicts[f"efficiency_{prm}"] = check(
        rsd.EFFICIENCY[prm], measured=e, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
        our_value=f"FLOPs {mean_sd(e[f'flop_ratio_{prm}'])}x (written only {mean_sd(e[f'generated_flop_ratio_{prm}'])}x), "
                  f"accuracy gap {mean_sd(e[f'accuracy_gap_{prm}'])}")
    plot.show_verdicts(verdicts[f"efficiency_{prm}"])

# %%
for prm in rsd.PRMS:
    b = m["beats_parallel"][prm]
    verdicts[f"beats_parallel_{prm}"] = check(
        rsd.BEATS_PARALLEL[prm], measured=b, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
        our_value=f"RSD − best-of-N (N={b['bon_n']}) {mean_sd(b[f'rsd_minus_bon_{prm}'])}")
    plot.show_verdicts(verdicts[f"beats_parallel_{prm}"])

# %% [markdown]
# The routing rules at each RSD's rate of target calls, on the test (accuracy differences, mean ± sd over seeds):
# the declared baseline (the position router), the label-free length router and random acceptance. The oracle's
# row is context, not a claim.

# %%
tm = m["threshold_matters"]
display(Markdown(rsd.router_comparison_table(results)))

# %%
for prm in rsd.GRADED:
    t = tm[prm]
    verdicts[f"threshold_matters_{prm}"] = check(
        rsd.THRESHOLD_MATTERS[prm], measured=t, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
        scale=scale, our_value=f"threshold − position router {mean_sd(t[f'threshold_minus_router_{prm}'])} "
                               f"(− length router {mean_sd(t[f'threshold_minus_length_router_{prm}'])}, "
                               f"− random {mean_sd(t[f'threshold_minus_random_{prm}'])})")
    plot.show_verdicts(verdicts[f"threshold_matters_{prm}"])

# %%
router_gain = {p: tm[p][f"router_minus_random_{p}"] for p in rsd.GRADED}
display(Markdown(
    "**What we see.** At each RSD's rate of target calls, the position router (which never reads a step) minus "
    "random acceptance is " + "; ".join(
        f"{mean_sd(router_gain[p])} at the {results[0]['prm_names'][p]}'s rate" for p in rsd.GRADED)
    + (": part of what \"the threshold beats random acceptance\" measured is where the draft errs, which a router "
       "knows without reading the step" if all(np.mean(g) > 0 for g in router_gain.values()) else "")
    + ". RSD minus the router is " + "; ".join(
        f"{mean_sd(tm[p][f'threshold_minus_router_{p}'])} with the {results[0]['prm_names'][p]}" for p in rsd.GRADED)
    + f" (mean ± sd over seeds; the claims' smallest effect is {rsd.ROUTER_MIN_EFFECT:.3f})."))

# %%
h = m["hard_beats_soft"]
verdicts["hard_beats_soft_learned"] = check(
    rsd.HARD_BEATS_SOFT, measured=h, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
    our_value=f"hard at the soft rule's rate − soft {mean_sd(h['hard_minus_soft_learned'])}")
plot.show_verdicts(verdicts["hard_beats_soft_learned"])

# %%
display(Markdown("| claim | verdict |\n|---|---|\n" + "\n".join(
    f"| `{k}` | {v.label} |" for k, v in verdicts.items())))

# %% [markdown]
# **A self-check of this round (after the verdicts on seeds 6900-6907 were recorded; nothing changed after it).** The
# session that added `efficiency_noisy`'s power line re-ran the chapter's warm-up and claims on fresh seeds with only
# the seeds edited, to see whether each label replicates; as its author it has a stake, so this is no referee's
# verdict. Its numbers, as measured, are in `rsd.REFEREE_7900` and printed below.

# %%
r7 = rsd.REFEREE_7900
interval = lambda t: f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"  # noqa: E731
differ = [k for k, (a, b) in r7["labels"].items() if a != b]
display(Markdown(
    f"On seeds {r7['seeds']} {r7['same_verdicts']} of {r7['verdicts']} labels came out as on {r7['verdict_seeds']}"
    + (": " + ", ".join(f"`{k}` {r7['labels'][k][0]} there, {r7['labels'][k][1]} here" for k in differ) if differ else "")
    + f" (the draft in its band on {r7['draft_in_band']} of 8 seeds, the target on {r7['target_in_band']}, the "
    f"learned PRM's quality bar on {r7['prm_quality_seeds']}). Each claim's first effect, on {r7['verdict_seeds']} then "
    f"{r7['seeds']}: " + "; ".join(f"`{k}` {interval(a)}, {interval(b)}" for k, (a, b) in r7["intervals"].items())
    + f". `efficiency_noisy`'s written-only ratio {interval(r7['efficiency_noisy_written'][0])} and "
    f"{interval(r7['efficiency_noisy_written'][1])}, its kept budgets {r7['efficiency_noisy_budgets'][0][0]:g}-"
    f"{r7['efficiency_noisy_budgets'][0][1]:g} and {r7['efficiency_noisy_budgets'][1][0]:g}-"
    f"{r7['efficiency_noisy_budgets'][1][1]:g}: its FLOP ratio's lower bound lay "
    f"{r7['intervals']['efficiency_noisy'][0][1] - rsd.EFFICIENCY['noisy'].effects[0].min_effect:+.3f} and "
    f"{r7['intervals']['efficiency_noisy'][1][1] - rsd.EFFICIENCY['noisy'].effects[0].min_effect:+.3f} from the bar, "
    "so the label held on these two draws; its power line says that a label this close to the bar need not hold "
    "on the next."))

# %% [markdown]
# **A referee of the design before the noisy oracle's cost changed (after the verdicts on seeds 3900-3907 were
# recorded; the noisy oracle's cost is the one change made after it).** A referee with no stake re-ran the chapter's build on fresh seeds 4900-4907, with only its seeds edited,
# and probed each verdict: the FLOP accountings, what the learned PRM's score knows beyond a step's position, and
# whether the reproduced claims hold by construction. Its numbers, as measured, are in `rsd.REFEREE_4900` and
# printed below (pairs are the two seed sets, 3900-3907 then 4900-4907).

# %%
r4 = rsd.REFEREE_4900
interval = lambda t: f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"  # noqa: E731
ratio = lambda t: f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"  # noqa: E731
display(Markdown(
    f"On seeds {r4['seeds']} {r4['same_verdicts']} of {r4['verdicts']} labels came out the same (the draft in its "
    f"band on {r4['draft_in_band']} of 8 seeds, the target on {r4['target_in_band']}; the learned PRM's quality "
    f"precondition on {r4['prm_quality_seeds']} of 8, the 75% bar itself). Best-of-N at equal FLOPs: oracle "
    f"{interval(r4['beats_parallel_oracle'])}, noisy {interval(r4['beats_parallel_noisy'])}, learned "
    f"{interval(r4['beats_parallel_learned'])} (its ranking precondition on {r4['prm_ranks_seeds']} of 8 seeds). "
    f"`threshold_matters`: noisy {interval(r4['threshold_matters_noisy'])}, learned "
    f"{interval(r4['threshold_matters_learned'])}, refuted against the declared smallest effect, not against 0: within one "
    f"step position the learned score still ranks the steps (AUC {ratio(r4['learned_auc_within_position'][0])} and "
    f"{ratio(r4['learned_auc_within_position'][1])}), and a little of it added to the position router's prior beats "
    f"the router by {interval(r4['position_plus_learned_minus_router'][0])} and "
    f"{interval(r4['position_plus_learned_minus_router'][1])}, less than that effect. On the greedy steps the threshold "
    f"acts on, the learned PRM reaches the 0.8 its quality precondition reads on sampled rollouts on only "
    f"{r4['prm_greedy_quality_seeds'][0]} and {r4['prm_greedy_quality_seeds'][1]} of 8 seeds. "
    f"`hard_beats_soft_learned` {interval(r4['hard_beats_soft_learned'])} is not automatic: with the position router's "
    f"scores in place of the PRM's, hard minus soft is {interval(r4['router_scores_hard_minus_soft'])}. "
    f"`efficiency_learned`: FLOP ratio {ratio(r4['efficiency_learned_flops'])}, written tokens only "
    f"{ratio(r4['efficiency_learned_written'])}; without the PRM's FLOPs {ratio(r4['efficiency_learned_flops_without_prm'][0])} "
    f"and {ratio(r4['efficiency_learned_flops_without_prm'][1])}: the refutation rests on the target's prefill of "
    f"the draft's text, at the budgets of 0.5 or more this PRM needs to keep the target's accuracy. "
    f"`efficiency_noisy`: FLOP ratio {ratio(r4['efficiency_noisy_flops'])}, accuracy gap "
    f"{interval(r4['efficiency_noisy_gap'])}; its verifier is a program and costs nothing, and charged like a draft-sized "
    f"PRM the ratio is {ratio(r4['efficiency_noisy_flops_prm_charged'][0])} and "
    f"{ratio(r4['efficiency_noisy_flops_prm_charged'][1])}. No code bug touching a verdict was found."))

# %% [markdown]
# **A referee's reading of the previous design (after the verdicts on seeds 1700-1707 were recorded, outside every
# criterion, before `threshold_matters` changed).** A referee with no stake re-decided every claim on fresh seeds
# with the chapter's own functions and probed the decisive ones; its numbers, as measured, are in
# `rsd.REFEREE_1800` and printed below. Its length router (longest problems' later steps first) is one of the
# label-free routers of the calibration table above.

# %%
r = rsd.REFEREE_1800
display(Markdown(
    f"On seeds {r['seeds']} every verdict came out {'the same' if r['same_verdicts'] else 'differently'}. "
    f"`threshold_matters_learned`: a length router that never reads a step passes the criterion "
    f"({interval(r['length_router_threshold_minus_random'])} over random acceptance), which only the PRM-quality "
    f"precondition keeps from counting; a PRM trained on shuffled labels does not "
    f"({interval(r['shuffled_label_prm_threshold_minus_random'])}); at the same budget the learned PRM's RSD beats the "
    f"length router's by {interval(r['learned_minus_length_router_rsd'])}. `efficiency_learned`: with the oracle "
    f"PRM the same pipeline keeps the target's accuracy ({interval(r['oracle_accuracy_gap'])}) at "
    f"{r['oracle_flop_ratio']:.2f}x "
    f"the FLOPs, and the learned rule sends {r['learned_target_step_share']:.0%} of the steps to the target against "
    f"the oracle's {r['oracle_target_step_share']:.0%}: the refutation is this learned PRM's, not the method's. "
    f"`beats_parallel_oracle`: against best-of-N reranked by the answer key (pass@N, the best any reranker could "
    f"do) RSD's edge is {interval(r['rsd_minus_pass_at_n'])}, not decided."))

# %% [markdown]
# **A second referee, on the previous design (after the verdicts on seeds 2100-2107 were recorded; before the
# changes for best-of-N and efficiency above).** Another referee with no stake re-decided every claim on fresh
# seeds with the chapter's own functions, ran null PRMs and PRMs of other noise through the same threshold
# pipeline, and checked that the router and RSD spend the same rate of target calls; its numbers, as measured, are
# in `rsd.REFEREE_2600` and printed below.

# %%
r2 = rsd.REFEREE_2600
display(Markdown(
    f"On seeds {r2['seeds']} {r2['same_verdicts']} of {r2['verdicts']} verdicts came out the same; "
    f"`hard_beats_soft_learned` came out reproduced there ({interval(r2['hard_minus_soft_learned'])}). "
    f"`threshold_matters_learned`: RSD minus the position router {interval(r2['threshold_minus_router_learned'])}, "
    f"the router itself {interval(r2['router_minus_random_learned_rate'])} over random acceptance; PRMs with "
    f"shuffled scores ({interval(r2['shuffled_prm_minus_router'])}) and random scores "
    f"({interval(r2['random_scores_minus_router'])}) fail the criterion. `threshold_matters_noisy` "
    f"({interval(r2['threshold_minus_router_noisy'])}) holds for this noisy oracle, the exact checker with rare "
    f"flips, but not for every PRM of its AUC: a graded score with Gaussian noise at AUC 0.90 gives "
    f"{interval(r2['gaussian_auc_090_minus_router'])}, on the bar (and flips at ε = 0.2, AUC about 0.80, give "
    f"{interval(r2['flips_02_minus_router'])}, short of it); so that claim checks the pipeline more "
    f"than it shows that a real PRM's reward matters. On the greedy steps the threshold acts on, the learned PRM's "
    f"step AUC spans {r2['learned_auc_on_split'][0]:.2f}-{r2['learned_auc_on_split'][1]:.2f} over the seeds (its "
    f"quality precondition reads sampled rollouts), the position router's "
    f"{r2['router_auc_on_split'][0]:.2f}-{r2['router_auc_on_split'][1]:.2f}. Router and RSD spent the same rate "
    f"of target calls on every seed (largest gap {r2['largest_rate_gap']:.4f})."))
