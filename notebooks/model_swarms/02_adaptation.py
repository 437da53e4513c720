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
# # Adapting LoRA experts with a swarm
#
# The paper's setting in miniature. The base model (parameter `model`) is the zoo's arithmetic `arith-draft` (a
# small Llama trained on arithmetic modulo 10) at smoke and ci, and Gemma-2-2B-it at full scale; any causal LM
# checkpoint can take its place. Six **experts** are rank-16 LoRA adapters on the output projection of the MLP of
# its last layer, each
# fine-tuned on one operator "domain" of arithmetic **modulo 7**, which the base model was never taught
# (problems using only `+`, only `-`, only `*`, or a pair of them). All experts start from one shared draw of $A$
# (with $B = 0$), as adapters fine-tuned from one seed do. The **target** is a held-out mix the experts never
# trained on: three-step problems modulo 7 with all three operators. The swarm searches the experts' weight
# space to maximise a **utility** computed on a dev set of only 200 examples:
#
# * *single-task*: the share of dev problems whose greedy solution is exactly right;
# * *multi-task*: the same over short (1-2), medium (3) and long (4-5 step) mixes together;
# * *reward*: the share of solution steps written correctly given a correct prefix (an exact step verifier
#   plays the reward model).
#
# Because the adapters only touch the last MLP, the frozen rest of the network runs once per problem set and all
# particles are scored in one batched pass (`icml25.model_swarms.top_logits`). Greedy decoding reproduces the
# reference solution exactly when every teacher-forced argmax is the reference token, so "exact solution"
# accuracy needs no generation. Each adapter's A and B factors are combined separately, as in the official code.
#
# The **baselines** get the swarm's budget of utility calls on the same dev set: the best single expert, the
# uniform soup, the greedy soup, task arithmetic, TIES and DARE (PEFT's merge utilities, their scaling and
# density drawn at random and chosen on dev), a LoraHub-style gradient-free search over expert weights (on the dev
# cross-entropy, its own objective, from zero weights), and two controls of our own (random search over affine
# combinations, hill climbing from the best expert). The
# **oracle** is a LoRA fine-tuned directly on the 200 dev examples: the ceiling of what the dev set can teach.

# %% tags=["parameters"]
scale = "ci"
seed = 0  # the seed whose search is drawn in detail
model = None  # a zoo name, a save_pretrained folder or a Hub id; None: the scale's value
seeds = None  # search seeds (dev sets and swarm randomness); None: the scale's value (8 at ci)
ablation_seeds = None  # seeds for the ablations; None: the scale's value
n_particles = None  # swarm size (6 experts + crossovers; official scripts: 20); None: the scale's value
max_iteration = None
patience = None  # stop after this many rounds without a new global best (official low-resource mode: 5)
n_dev = None  # dev examples the utility sees (paper: 200)
low_n_dev = None  # the smaller dev set of the low-data comparison
n_test = None
tune_configs = None  # draws from the official hyperparameter sweep tried on the tuning dev sets
# full scale: more seeds, 50 iterations, patience 10, 5000 test problems, rank-8 experts trained 500 steps on
# 10,000 problems each, 20 sweep draws.

# %%
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from icml25 import model_swarms as ms
from icml25.core import check, plot
from icml25.core.claims import mean_sd

plot.use_style()
cfg = ms.config(scale, model=model, seeds=seeds, ablation_seeds=ablation_seeds, n_particles=n_particles,
                max_iteration=max_iteration, patience=patience, n_dev=n_dev, n_test=n_test, tune_configs=tune_configs,
                low_n_dev=low_n_dev)
res, computed = ms.warm_up_runs(cfg)  # every run of this page, as the book's warm-up cached it
display(Markdown("The runs below were computed now." if computed else
                 "The runs below were loaded from the cache (computed in the warm-up), with the same settings and code."))
base_test, expert_test = res["base_test"], np.array(res["expert_test"])
own = pd.DataFrame(res["own_domain"]).T.assign(target=expert_test)
own.columns = ["base, own domain", "expert, own domain", "expert, target"]
display(own.round(3))
display(Markdown(f"Base model without adapter on the target's test set: {base_test:.3f} exact-solution accuracy."))

# %% [markdown]
# The first two columns are the precondition of every claim: each expert must beat the base model on its own
# domain, or there is nothing worth combining. The last column says how useful each expert is on the target.
#
# ## Hyperparameters chosen on dev
#
# The official run scripts sample inertia, cognitive, social and repel coefficients and the step length from
# fixed lists (restart patience 0.67, 20 particles). We draw `tune_configs` settings from those lists, run each on
# the dev sets of two tuning seeds (not the evaluation seeds) and score its global best on a second, held-out dev
# set of 200 problems; the best mean is used for every search below. The test set is not used.

# %%
hyper, scored = res["hyper"], res["scored"]
display(pd.DataFrame([{**h, "held-out dev accuracy": u} for h, u in scored]).round(3))
display(Markdown("Chosen: " + ", ".join(f"{k} = {v:g}" for k, v in hyper.items()) + "."))

# %% [markdown]
# ## The searches

# %%
runs = res["runs"]
detail = runs["single-task"][cfg.seeds.index(seed) if seed in cfg.seeds else 0]["search"]
fig, ax = plot.subplots()
ax.plot(np.array(detail["utilities"]), color="grey", alpha=0.35, lw=1)
ax.plot(detail["g_history"], lw=2.5, label="global best g")
ax.plot(detail["g_worst_history"], lw=2.5, label="global worst g_w")
ax.plot([], [], color="grey", label="particles")
ax.set(title=f"Single-task search (seed {seed if seed in cfg.seeds else cfg.seeds[0]})", xlabel="iteration",
       ylabel="dev exact-solution accuracy")
ax.legend();
print(f"{detail['n_iterations']} iterations, {detail['n_evaluations']} utility calls, "
      f"{detail['restarts']} restarts")

# %% [markdown]
# ## Dev and test accuracy against the baselines (single-task utility)

# %%
single = runs["single-task"]
methods = [m for m in single[0]["test"] if m != "oracle"]
table = pd.DataFrame({m: {"dev": np.mean([r["dev"][m] for r in single]),
                          "test": np.mean([r["test"][m] for r in single]),
                          "test sd": np.std([r["test"][m] for r in single]),
                          "utility calls": np.mean([r["calls"].get(m, 0) for r in single])} for m in methods + ["oracle"]}).T
display(table.round(3))
oracle = np.mean([r["test"]["oracle"] for r in single])
fig, axes = plot.subplots(1, 2, sharey=True, figsize=(11, 4.2))
for ax, split in zip(axes, ("dev", "test")):
    vals = [[r[split][m] for r in single] for m in methods]
    ax.bar(methods, [np.mean(v) for v in vals], yerr=[np.std(v) for v in vals], capsize=3,
           color=[plot.PALETTE[1] if m == "swarm" else plot.PALETTE[0] for m in methods])
    ax.axhline(base_test, ls="--", color="grey", label="base model, no adapter (test)")
    ax.axhline(oracle, ls=":", color=plot.PALETTE[2], label="oracle: LoRA trained on the dev set (test)")
    ax.set(title=f"{split} ({cfg.n_dev} problems)" if split == "dev" else "test",
           ylabel=f"exact-solution accuracy (mean ± sd, {len(cfg.seeds)} seeds)")
    ax.tick_params(axis="x", rotation=60)
axes[1].legend(loc="upper right", fontsize=8)
fig.suptitle("Single-task target: swarm vs composition baselines at an equal budget of utility calls");

# %% [markdown]
# ## The other utilities
#
# For the multi-task and reward utilities we compare the swarm's final global best with the best particle
# before the search (the starting point it has to beat) on their test sets.

# %%
fig, ax = plot.subplots()
xs = np.arange(len(ms.UTILITIES))
for j, (m, color) in enumerate((("initial best", plot.PALETTE[0]), ("swarm", plot.PALETTE[1]))):
    vals = [[r["test"][m] for r in runs[k]] for k in ms.UTILITIES]
    ax.bar(xs + 0.38 * (j - 0.5), [np.mean(v) for v in vals], 0.38, yerr=[np.std(v) for v in vals], capsize=3,
           color=color, label=m)
ax.set_xticks(xs, ["single-task\n(exact solutions)", "multi-task\n(exact solutions)", "reward\n(correct steps)"])
ax.set(title="Test utility before and after the search", ylabel=f"test utility (mean ± sd, {len(cfg.seeds)} seeds)")
ax.legend();

# %% [markdown]
# ## Weak to strong: where did the final global best start?
#
# For every run we take the particle whose position became the final $g$ and look up its rank among the
# particles' utilities before the search (0 = the initial best). The **null control** runs the same searches
# (seeds, particles, budget) on a utility that is pure noise: there, which particle ends best says nothing about
# the experts, so whatever share it gives is what the statistic shows by chance.

# %%
ranks = np.array([r["search"]["initial_rank"] for k in ms.UTILITIES for r in runs[k]])
null_ranks = np.array(res["null_initial_ranks"])
n_swarm = len(runs["single-task"][0]["search"]["utilities"][0])
fig, ax = plot.subplots()
bins = np.arange(n_swarm + 1) - 0.5
ax.hist([ranks, null_ranks], bins=bins, color=[plot.PALETTE[0], plot.PALETTE[7]], rwidth=0.85,
        label=["real utilities", "noise utility (null)"])
ax.axvline(n_swarm / 2 - 0.5, ls="--", color=plot.PALETTE[1], label="weaker half starts here")
ax.set(title="Initial rank of the particle that found the final global best", xlabel="initial rank (0 = best)",
       ylabel=f"runs (of {len(ranks)})")
ax.legend();

# %% [markdown]
# ## Ablations (single-task)
#
# The same search (chosen hyperparameters) without the repel term, with deterministic weights ($r = 1$), and
# without restarts.

# %%
ablation = res["ablation"]  # the variants: ms.ABLATIONS
fig, ax = plot.subplots()
ax.bar(list(ablation), [np.mean(v) for v in ablation.values()], yerr=[np.std(v) for v in ablation.values()],
       capsize=3, color=[plot.PALETTE[1]] + [plot.PALETTE[0]] * 3)
ax.set(title="Ablations of the search", ylabel=f"test accuracy (mean ± sd, {len(cfg.ablation_seeds)} seeds)")
ax.tick_params(axis="x", rotation=20)
for name, v in ablation.items():
    print(f"{name:22s} {mean_sd(v)}")

# %% [markdown]
# ## Claim checks
#
# Every effect is a per-seed paired difference of test accuracy (or, for weak-to-strong, one indicator per run,
# judged against the same searches on a noise utility). `beats_baselines` includes the two equal-budget search
# controls, so that a "dev-set search beats fixed merges" cannot pass for the swarm's dynamics; `low_data` compares
# the swarm with the oracle, a LoRA fine-tuned on the same dev examples, at 200 and at `low_n_dev` examples. The
# criteria, smallest effects and the null control were declared in `icml25.model_swarms` before these runs.

# %%
swarm_test = np.array([r["test"]["swarm"] for r in single])
gains = res["expert_gain_own_domain"]
m_beats = {ms._key(b): swarm_test - np.array([r["test"][b] for r in single]) for b in ms.BASELINES}
m_beats |= {"expert_gain_own_domain": gains,
            # dev accuracies are counts over n_dev problems, scored in float32: the gain is rounded to whole
            # problems (one problem came out as 0.004999995, below its own 1/200)
            "swarm_dev_gain": [round((r["dev"]["swarm"] - r["dev"]["initial best"]) * cfg.n_dev) / cfg.n_dev
                               for r in single]}
v_beats = check(ms.BEATS_BASELINES, measured=m_beats, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds,
                scale=scale, our_value=f"test: swarm {mean_sd(swarm_test)}; " + ", ".join(
                    f"{b} {mean_sd([r['test'][b] for r in single])}" for b in ms.BASELINES))
plot.show_verdicts(v_beats)

# %%
ind, null_ind = res["weak_to_strong"], res["null_weak_to_strong"]
v_w2s = check(ms.WEAK_TO_STRONG, measured={**ind, "expert_gain_own_domain": gains}, seeds=cfg.seeds, scale=scale,
              calibration_seeds=cfg.calibration_seeds, null=null_ind,
              our_value=f"{np.mean(ind['not_initial_best']):.0%} not the initial best, "
                        f"{np.mean(ind['from_weaker_half']):.0%} from the weaker half ({len(ranks)} runs); "
                        f"noise utility: {np.mean(null_ind['not_initial_best']):.0%} and "
                        f"{np.mean(null_ind['from_weaker_half']):.0%}")
plot.show_verdicts(v_w2s)

# %%
low = res["low"]
m_low = {"swarm_minus_oracle": swarm_test - np.array([r["test"]["oracle"] for r in single]),
         "swarm_minus_oracle_low": [r["swarm"] - r["oracle"] for r in low], "expert_gain_own_domain": gains}
v_low = check(ms.LOW_DATA, measured=m_low, seeds=cfg.seeds, calibration_seeds=cfg.calibration_seeds, scale=scale,
              our_value=f"swarm − oracle on test: {cfg.n_dev} dev examples {mean_sd(m_low['swarm_minus_oracle'])}, "
                        f"{cfg.low_n_dev} dev examples {mean_sd(m_low['swarm_minus_oracle_low'])}")
plot.show_verdicts(v_low)

# %% [markdown]
# ## What we see

# %%
def verdict_line(v):
    n3 = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731  (no interval: no spread, or too few units)
    e = "; ".join(f"{x['name']} {n3(x['estimate'])} [{n3(x['ci_low'])}, {n3(x['ci_high'])}]"
                  for x in v.record["effects"])
    return f"- `{v.claim.id}`: **{v.label}** ({e}). {v.record['reason']}."


best_base = max(ms.PAPER_BASELINES, key=lambda b: table.loc[b, "test"])
display(Markdown(
    f"Experts beat the base model on their own domains by {min(gains):.3f} to {max(gains):.3f} exact-solution "
    f"accuracy; on the target the best single expert reaches {expert_test.max():.3f} against the base's "
    f"{base_test:.3f}. On test the swarm reaches {table.loc['swarm', 'test']:.3f}, the strongest paper baseline "
    f"({best_base}) {table.loc[best_base, 'test']:.3f} and the oracle trained on the dev set {oracle:.3f}. "
    f"The swarm's global best scores {table.loc['swarm', 'dev']:.3f} on its {cfg.n_dev} dev problems and "
    f"{table.loc['swarm', 'test']:.3f} on test. On the noise utility the final global best was not the initial "
    f"best in {np.mean(null_ind['not_initial_best']):.0%} of runs and came from the weaker half in "
    f"{np.mean(null_ind['from_weaker_half']):.0%}, against {np.mean(ind['not_initial_best']):.0%} and "
    f"{np.mean(ind['from_weaker_half']):.0%} on the real utilities.\n\n"
    + "\n".join(verdict_line(v) for v in (v_beats, v_w2s, v_low))))
