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
# # Efficiency-aware fine-tuning: does training on the fastest correct code make a model write faster code?
#
# The EffiCoder pipeline in miniature. For every training task, four generators propose a candidate program:
# three templated "LLMs" of different quality (one biased towards naive solutions, one uniform over solutions,
# one bug-prone) and a small LM, briefly trained on unverified programs and sampled at temperature 1. Every
# candidate runs in the sandbox of [the first notebook](01_measure). Three fine-tuning sets follow:
#
# - **(A) random**: one candidate per task, unverified (plain distillation of the generators);
# - **(B) random correct**: a random candidate among those that pass all tests;
# - **(C) fastest correct**: EffiCoder's target, the correct candidate with the lowest ET (ties: TMU, then MU,
#   then the text; the paper does not say how it combines time and memory, so this rule is our reading). Times
#   within a declared tolerance of each other count as tied, and the candidates near the fastest are measured
#   again in fresh sandboxes and compared on their medians, so timing noise does not decide the training set (the
#   section "What changed after the referee" says why).
#
# A tiny Llama is trained from scratch on each (prompt: the family and its constant $c$; completion: the program,
# one token per line), then writes programs greedily for held-out (family, $c$) pairs. We report
# $\text{pass@1}$ and, over the solved tasks, the normalised
# $\mathrm{NET} = \frac1{|S|}\sum_{i\in S} \mathrm{ET}_i / \mathrm{ET}_i^{\text{canonical}}$ (likewise NMU, NTMU).
# Finally B is mixed into C at increasing fastest-correct shares, to see whether the efficiency of the
# training data predicts the efficiency of the generated code (the paper's motivation, its correlation figure).
#
# **Parameters** (`full`: constants 3-22, 40 held-out tasks, a ~56k-parameter model for 1500 steps, five
# mixing shares and five seeds).

# %% tags=["parameters"]
scale = "ci"
seed = 0
seeds = None  # seeds of the whole pipeline (split, generators, training); None: the scale's value
families = None  # task families; None: the scale's value
n_test = None  # held-out (family, c) tasks; None: the scale's value
steps = None  # fine-tuning steps per model; None: the scale's value
mix_shares = None  # shares of fastest-correct programs mixed into the random-correct set; None: the scale's value
model = None  # the code LM: a tinylm preset (trained from scratch), a save_pretrained folder or a Hub id; None: the scale's value

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from icml25 import efficient_code as E
from icml25.core import check, plot
from icml25.core.claims import POWER

plot.use_style()
cfg = E.config(scale, seeds=seeds, families=families, n_test=n_test, steps=steps, mix_shares=mix_shares,
               model=model)
cfg

# %% [markdown]
# ## Running the pipeline
#
# `run_seed` does everything for one seed: split the tasks, generate and execute candidates (a program that
# several generators write for the same task is executed once), build the datasets, fine-tune one model per
# distinct dataset (share 0 is B and share 1 is C, so they are not trained twice) and evaluate. `E.experiment`
# runs it for every seed and measures the ET noise floor (below); the book's builder runs it in its warm-up and
# caches the result, so this notebook reads it back (a changed knob computes it here).

# %%
runs, et_noise, statuses = E.experiment(cfg)
print(f"{sum(statuses.values())} distinct (task, program) executions:", statuses)

# %%
fig, ax = plot.subplots()
for name, color in zip(["random", "random_correct", "fastest_correct"], plot.PALETTE):
    for i, s in enumerate(cfg.seeds):
        ax.plot(runs[s][name].losses, color=color, alpha=1.0 if i == 0 else 0.3, label=name if i == 0 else None)
ax.set(title="Fine-tuning loss on the three datasets", xlabel="optimizer step", ylabel="loss (nats / token)",
       yscale="log")
ax.legend();

# %% [markdown]
# ## pass@1 and normalised cost of the generated code
#
# Means over seeds, error bars ± one standard deviation. NET/NMU/NTMU of 1 means "as efficient as the canonical
# solution"; NET is on a log scale because a loop against a closed form is a factor of thousands.

# %%
names = ["random", "random_correct", "fastest_correct"]
metric = {name: {k: np.array([getattr(runs[s][name].evaluation, k) for s in cfg.seeds])
                 for k in ("pass_at_1", "net", "nmu", "ntmu")} for name in names}
fig, axes = plt.subplots(1, 4, figsize=(15, 4))
for ax, (k, label) in zip(axes, [("pass_at_1", "pass@1 (fraction of held-out tasks)"), ("net", "NET (×canonical)"),
                                 ("nmu", "NMU (×canonical)"), ("ntmu", "NTMU (×canonical)")]):
    vals = [metric[n][k] for n in names]
    ax.bar(range(3), [np.nanmean(v) for v in vals], yerr=[np.nanstd(v) for v in vals], capsize=4,
           color=plot.PALETTE[:3], label=[n.replace("_", " ") for n in names])
    ax.set_xticks(range(3), ["A random", "B random\ncorrect", "C fastest\ncorrect"], fontsize=8)
    solved = k != "pass_at_1" and np.isfinite(np.concatenate(vals)).any()  # log scale needs one solved task
    ax.set(title=label.split(" (")[0], ylabel=label, yscale="log" if solved else "linear")
axes[0].legend(fontsize=7)
fig.suptitle(f"Generated code on {cfg.n_test} held-out tasks (mean ± sd over {len(cfg.seeds)} seeds)")
fig.tight_layout()
for n in names:
    print(f"{n:16s} " + "  ".join(f"{k}={np.nanmean(v):.3g}±{np.nanstd(v):.2g}" for k, v in metric[n].items()))

# %% [markdown]
# ## Training-data efficiency against generated-code efficiency
#
# Each point is one model: a fastest-correct share $p$ and a seed. The x-axis is the mean NET of the training
# programs (against the canonical solutions of the training tasks), the y-axis the mean NET of what the model
# writes on the held-out tasks.

# %%
shares = [f"mix={p:g}" for p in cfg.mix_shares]
x = np.array([[runs[s][k].train_net for k in shares] for s in cfg.seeds])
y = np.array([[runs[s][k].evaluation.net for k in shares] for s in cfg.seeds])
ok = np.isfinite(x) & np.isfinite(y)
fig, ax = plot.subplots()
for j, (p, color) in enumerate(zip(cfg.mix_shares, plot.PALETTE)):
    ax.scatter(x[ok[:, j], j], y[ok[:, j], j], color=color, s=40, label=f"fastest-correct share {p:g}")
scale_kind = "log" if ok.any() else "linear"  # a model that solves nothing has no NET
ax.set(xscale=scale_kind, yscale=scale_kind, title="Training-set NET against generated NET",
       xlabel="training-set NET (×canonical)", ylabel="generated-code NET (×canonical)")
ax.legend();

# %% [markdown]
# ## Claim checks
#
# `faster` compares the two models on the same held-out tasks: per seed, the mean over the tasks both solve of
# log(ET of C's program / ET of B's). It also declares a noise floor: the canonical solutions of the first seed's
# held-out tasks are measured again in fresh sandboxes, and the median change of ET must stay below the 10% the
# criterion counts as the smallest effect.

# %%
pb, pc = metric["random_correct"]["pass_at_1"], metric["fastest_correct"]["pass_at_1"]
nb, nc = metric["random_correct"]["net"], metric["fastest_correct"]["net"]
faster = check(E.FASTER, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
               measured={"log_et_ratio": E.paired_log_et_ratios(runs, cfg.seeds, "fastest_correct",
                                                                "random_correct"),
                         "pass_at_1_change": list(np.subtract(pc, pb)),
                         "et_noise": et_noise,
                         "pass_fastest_per_seed": pc, "pass_random_correct_per_seed": pb,
                         "net_fastest_per_seed": nc, "net_random_correct_per_seed": nb},
               our_value=f"NET {np.nanmean(nc):.3g} ± {np.nanstd(nc):.2g} (C) vs {np.nanmean(nb):.3g} ± "
                         f"{np.nanstd(nb):.2g} (B); pass@1 {np.mean(pc):.2f} ± {np.std(pc):.2f} vs "
                         f"{np.mean(pb):.2f} ± {np.std(pb):.2f}")
plot.show_verdicts(faster)

# %% [markdown]
# The correlation is judged per seed, by Spearman's rank correlation of the log NETs across the fastest-correct
# shares: ratios spanning several orders of magnitude would let one task dominate a Pearson r on raw means. The
# same statistic on the same models with the generated NETs shuffled among the shares of each seed is the null
# control: a criterion that passes there would be passing on noise. Each seed's null is ρ under every order of its
# generated NETs (the exact permutation distribution). The real mean must lie beyond the mean of one draw per seed
# from those distributions (a Monte Carlo test over many such draws), and the null's own verdict box shows the
# criterion on one such draw: neither the mean of each distribution (0 by symmetry on every seed, so it added
# nothing to the interval above 0) nor one random order compared once (a coin toss of its own), as before.

# %%
x_typical = np.array([[runs[s][k].train_net_geo for k in shares] for s in cfg.seeds])  # geometric-mean NETs
passes = np.array([[runs[s][k].evaluation.pass_at_1 for k in shares] for s in cfg.seeds])
measured = {"spearman_rho": E.spearman_per_seed(x, y), "min_pass_at_1": float(passes.min()),
            "train_net_spread": [float(np.nanmax(row) / np.nanmin(row)) for row in x_typical]}
if measured["spearman_rho"]:  # the null comparison needs ranked seeds to compare
    corr = check(E.CORRELATION, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
                 measured=measured, null=dict(measured, spearman_rho=E.spearman_null_per_seed(x, y)),
                 our_value=f"Spearman ρ per seed {[round(v, 2) for v in measured['spearman_rho']]} over "
                           f"{len(cfg.mix_shares)} shares")
    plot.show_verdicts(corr)
    c, drawn = corr.record["null"]["comparisons"][0], corr.record["null"]["effects"][0]
    display(Markdown(
        f"**Against its null:** mean ρ {c['real_mean']:+.3f} against {c['null_mean']:+.3f} for the permuted NETs, "
        f"one-sided Monte Carlo p = {c['p_value']:.4f} over {c['null_draws']} draws of one order per seed "
        f"({'beaten' if c['beats_null'] else 'not beaten'}); on one such draw the criterion comes out "
        f"{drawn['verdict']} (mean ρ {drawn['estimate']:+.3f} [{drawn['ci_low']:+.3f}, {drawn['ci_high']:+.3f}])."))
else:
    print("no seed has three models that solve a task, so nothing is ranked: correlation is not checked here")

# %%
r = E.REFEREE_1000
ival = lambda t: f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"  # noqa: E731
display(Markdown(
    f"**Referee on fresh seeds {r['seeds']}** (no stake; the chapter's code with only its seeds changed, built "
    f"twice; after this book's verdicts were recorded, and nothing changed after it): faster came out "
    f"{' and '.join(r['faster'])} (pass@1 change {' and '.join(ival(t) for t in r['pass_at_1_change'])}; log ET "
    f"ratio {' and '.join(ival(t) for t in r['log_et_ratio'])}), correlation {' and '.join(r['correlation'])} "
    f"(mean ρ {' and '.join(ival(t) for t in r['spearman_rho'])}). So a reproduced label for faster is not one "
    f"that replicates: with the spread of the seed sets seen, eight seeds clear the pass@1 margin with probability "
    f"about {r['p_reproduce_faster']:.2f}. Part of that spread is the build itself: the fastest candidate is chosen "
    f"by measured CPU time, near-ties fall differently between builds, and one seed's pass@1 change moves by about "
    f"{r['same_seed_pass_change_sd']:.3f} between two builds of the same seed."))

# %% [markdown]
# ## What changed after the referee
#
# The diagnosis ran on calibration seeds only, before any verdict under the new design; the numbers below are its
# record (`E.CALIBRATION_54`), the tolerance and run count the pipeline's declared constants.

# %%
d = E.CALIBRATION_54
moved = ", ".join(f"{v:+.2f}" for v in d["pass_after_change"])
display(Markdown(
    f"On calibration seeds {d['seeds']}, measuring the same candidates a second time chose another program for one "
    f"training task on {d['choice_changed_old']} of {d['n_seeds']} seeds, and the fastest-correct model's pass@1 "
    f"then moved by {moved}: a different training set trains a different model. The selection now counts times "
    f"within {E.pipeline.TIE_TOLERANCE:.0%} of the lowest as tied (then TMU, then MU, with the same tolerance, then "
    f"the program text) and compares the candidates within {E.pipeline.CONTENDER:g}× the fastest on their medians "
    f"of {E.pipeline.SELECTION_RUNS} fresh sandbox runs; measured twice, it chose another program on "
    f"{d['choice_changed_new']} of {d['n_seeds']} seeds.\n\n"
    f"That was not the larger part of the spread. With one model per arm, the pass@1 change had mean "
    f"{d['pass_change_mean']:+.3f} and sd {d['pass_change_sd']:.3f} over seeds; its {d['held_out']} held-out tasks "
    f"alone give one model pair's change an sd of {d['task_sd']:.3f}, and three initialisations of the same two "
    f"training sets differ by {d['init_sd']:.3f}, as much as seeds do. Averaging three initialisations per arm "
    f"(three times the fine-tuning) left {d['three_init_sd']:.3f} over seeds, so the warm-up's time goes to seeds: "
    f"at the calibration mean the {E.PASS_MARGIN} margin needs about {E.planned_seeds()} seeds "
    f"({POWER:.0%} power), the warm-up affords {len(E.VERDICT_SEEDS)}, and those clear it only if "
    f"the true change is at least {E.detectable_change(len(E.VERDICT_SEEDS)):+.3f}. This scale can therefore "
    f"reproduce faster only if fine-tuning on the fastest programs helps correctness by about that much; otherwise "
    f"its honest label is inconclusive, with the power line in the claim box above."))

# %%
b = E.BUILDS_1100
display(Markdown(
    f"**Two builds of the verdict seeds {b['seeds']}** (the design ledgered before either; the second with every "
    f"measurement and fine-tuning run again): faster came out {' and '.join(b['faster'])} (pass@1 change "
    f"{' and '.join(ival(t) for t in b['pass_at_1_change'])}; log ET ratio "
    f"{' and '.join(ival(t) for t in b['log_et_ratio'])}), and {b['same_pass_change_seeds']} of the seeds gave the "
    f"same pass@1 change in both. Correlation came out {' and '.join(b['correlation'])} (mean ρ "
    f"{' and '.join(ival(t) for t in b['spearman_rho'])}; {' and '.join(b['correlation_why'])}). The pass@1 change "
    f"spread over these seeds by sd {' and '.join(f'{v:.3f}' for v in b['pass_change_sd'])}, against "
    f"{d['pass_change_sd']:.3f} on the calibration seeds; at the larger of these spreads {len(E.VERDICT_SEEDS)} "
    f"seeds clear the margin only if the true change is at least "
    f"{E.detectable_change(len(E.VERDICT_SEEDS), {'pass_change_sd': max(b['pass_change_sd'])}):+.3f}, and the "
    f"estimates lay {min(t[0] for t in b['pass_at_1_change']) - E.PASS_MARGIN:+.3f} to "
    f"{max(t[0] for t in b['pass_at_1_change']) - E.PASS_MARGIN:+.3f} from the margin: this design leaves the "
    f"non-inferiority undecided at any number of seeds the book can run."))

# %%
r = E.REFEREE_1200
seen = [t[0] for t in (*b["pass_at_1_change"], *r["pass_at_1_change"])]
display(Markdown(
    f"**A referee with no stake** re-decided both claims on fresh seeds {r['seeds']} after these builds, with only "
    f"the seeds changed, and again at a tie tolerance of {r['tolerance'][1]:.0%}: faster came out "
    f"{' and '.join(r['faster'])} (pass@1 change {' and '.join(ival(t) for t in r['pass_at_1_change'])}; log ET "
    f"ratio {' and '.join(ival(t) for t in r['log_et_ratio'])}), correlation {' and '.join(r['correlation'])} "
    f"(mean ρ {' and '.join(ival(t) for t in r['spearman_rho'])}). "
    + ("So both labels repeat. " if {*r["faster"], *b["faster"]} == {b["faster"][0]}
       and {*r["correlation"], *b["correlation"]} == {b["correlation"][0]} else "The labels differ from the builds'. ")
    + "It found two weaknesses. Correlation's null control was degenerate (the mean of Spearman's ρ over every "
    "order of one seed's values is 0 by symmetry, so its null added nothing to the interval above 0): after this "
    "referee, the null became each seed's whole permutation distribution, drawn from (above). The other stays: where "
    "a family's variants tie on every criterion within the tolerance (gen_sum's), the program text decides and "
    "memory hardly acts. "
    + (f"All {len(seen)} pass@1 changes estimated under this design lie below 0 (largest {max(seen):+.3f}), so at "
       "this scale the paper's gain in correctness is not seen." if max(seen) < 0 else "")))

# %% [markdown]
# ## What we see
#
# The numbers above are computed when the notebook runs; the claim boxes give the verdicts. At this scale the
# mechanism is blunt: a tiny LM trained on one program per task learns, per family, the solution that dominates
# its training set, and greedy decoding writes that one. Dataset C holds the fastest *correct candidate* of each
# task, which is the canonical efficient solution only where a generator proposed it. What this cannot show:
# whether a 7B model *generalises* efficiency to new kinds of problems, as the paper's EffiBench results suggest,
# rather than copying the solution style it was given for the same kind of problem.
