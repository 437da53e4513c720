"""The real pool: classifiers of different size trained from each seed, answering held-out handwritten digits
(or, with `pool_models`, causal LMs answering arithmetic), with learned quality estimators and a positive control."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..core.seeding import derive_seed, numpy_rng
from .benchmark import Estimates, Pool, make_estimates
from .experiment import cell_gain, evaluate
from .scales import CHAPTER
from .benchmark import _check_finite


# Member labels name the model and the image it reads (8×8 pixels or a 4×4 average-pooled copy); five at ci,
# eleven at full, as the paper's largest RouterBench pool; run_real_pool puts them in cost order. Every member is
# refitted for every seed on that seed's training images (and the MLPs from that seed's initialisation), so a seed
# resamples the models, not only the split.
_POOLED = "4×4"
REAL_MEMBERS = {
    5: ("naive Bayes 4×4", "logistic 4×4", "logistic 8×8", "MLP-32 8×8", "RBF SVM 8×8"),
    11: ("naive Bayes 4×4", "logistic 4×4", "MLP-8 4×4", "naive Bayes 8×8", "logistic 8×8", "MLP-32 8×8",
         "MLP-128 8×8", "kNN-5 8×8", "RBF SVM 8×8", "MLP-64×64 8×8", "kNN-1 8×8"),
}


def _member(label: str, seed: int):
    """A fresh scikit-learn classifier for a member label (the MLPs are seeded)."""
    from sklearn.naive_bayes import GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC

    name = label.split(" ")[0]
    if name == "naive":
        return GaussianNB()
    if name == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))
    if name.startswith("MLP-"):
        hidden = tuple(int(h) for h in name[4:].split("×"))
        return make_pipeline(StandardScaler(), MLPClassifier(hidden, max_iter=300, random_state=seed))
    if name.startswith("kNN-"):
        return KNeighborsClassifier(int(name[4:]))
    if name == "RBF":
        return make_pipeline(StandardScaler(), SVC(C=10.0, random_state=seed))
    raise ValueError(f"unknown member {label!r}")


def member_flops(label: str, model, n_features: int, n_classes: int = 10) -> float:
    """Multiply-adds ×2 (and the 64 adds of 4×4 pooling) of one prediction: a linear map is 2·d·C, an MLP its
    layers' 2·d_in·d_out, naive Bayes 4·d·C, a kNN 3·d per stored image, an RBF SVM 3·d per support vector plus
    its one-vs-one sums."""
    pooling = 64.0 if _POOLED in label else 0.0
    est = model[-1] if hasattr(model, "steps") else model
    name = label.split(" ")[0]
    if name == "naive":
        core = 4.0 * n_features * n_classes
    elif name == "logistic":
        core = 2.0 * n_features * n_classes
    elif name.startswith("MLP-"):
        core = float(sum(2 * w.size for w in est.coefs_))
    elif name.startswith("kNN-"):
        core = 3.0 * n_features * est.n_samples_fit_
    else:
        core = 3.0 * n_features * len(est.support_) + 2.0 * len(est.support_) * (n_classes - 1)
    return pooling + core


def pool_pixels(x: np.ndarray) -> np.ndarray:
    """8×8 digit images (N, 64) averaged over 2×2 blocks: (N, 16)."""
    return x.reshape(-1, 4, 2, 4, 2).mean((2, 4)).reshape(-1, 16)


def confidence(model, x: np.ndarray) -> np.ndarray:
    """A member's post-hoc signal on its own answer: the gap between its two highest class scores
    (probabilities where it has them, else decision values)."""
    scores = model.predict_proba(x) if hasattr(model, "predict_proba") and not _is_svm(model) else \
        model.decision_function(x)
    top = np.sort(scores, axis=1)
    return top[:, -1] - top[:, -2]


def _is_svm(model) -> bool:
    return type(model[-1] if hasattr(model, "steps") else model).__name__ == "SVC"


@dataclass(frozen=True)
class RealRuns:
    """What running every member on every held-out image gave: `correct` (N, K) in {0, 1}, `flops` (N, K) of a
    prediction, `confidence` (N, K) the member's post-hoc signal, `context` (N, F) what is known before any member
    runs (the image's principal components), and the member labels."""

    correct: np.ndarray
    flops: np.ndarray
    confidence: np.ndarray
    context: np.ndarray
    labels: tuple[str, ...]


@functools.cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 handwritten digits (images (N, 64), labels), read once per process, read-only."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def run_real_pool(seed: int, n_members: int = 5, n_fit: int = 400) -> RealRuns:
    """Draw `n_fit` training images under `seed`, fit every member of REAL_MEMBERS[n_members] (seeded) on them,
    and run each on the remaining images of scikit-learn's 1,797 handwritten digits; members come back in the
    order of their cost."""
    from sklearn.decomposition import PCA

    if n_members not in REAL_MEMBERS:
        raise ValueError(f"n_members must be one of {sorted(REAL_MEMBERS)}, got {n_members}")
    x, y = _digits()
    order = numpy_rng(seed, CHAPTER, "digits").permutation(len(y))
    fit, held = order[:n_fit], order[n_fit:]
    cols = []
    for label in REAL_MEMBERS[n_members]:
        view = pool_pixels if _POOLED in label else (lambda a: a)
        with warnings.catch_warnings():  # the MLPs train a fixed 300 epochs, converged or not
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = _member(label, derive_seed(seed, CHAPTER, label) % 2**31).fit(view(x[fit]), y[fit])
        pred = model.predict(view(x[held]))
        cost = member_flops(label, model, view(x[:1]).shape[1])
        cols.append(((pred == y[held]).astype(float), np.full(len(held), cost), confidence(model, view(x[held]))))
    by_cost = np.argsort([c[1][0] for c in cols], kind="stable")  # the strategies expect the cost order
    correct, flop, conf = (np.stack([c[i] for i in by_cost], axis=1) for c in zip(*cols))
    context = PCA(8, random_state=0).fit(x[fit]).transform(x[held])
    return RealRuns(correct, flop, conf, context, tuple(REAL_MEMBERS[n_members][i] for i in by_cost))


#: the memory pool's members (`run_memory_pool`): 1-nearest-neighbour classifiers storing 15·2^k images each, from
#: disjoint draws. Chosen on calibration seeds 0-4 among 15 candidate pools for its positive control, because
#: the paper's effect needs a pool whose accuracy keeps rising along the (linear) cost axis: in the classifier pool
#: the largest member takes most of that axis while adding a few points over members costing a tenth of it.
MEMORY_SIZES = (15, 30, 60, 120, 240)


def nearest_margin(stored_x: np.ndarray, stored_y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-nearest-neighbour answers for `x` and their post-hoc signal: the distance to the nearest stored image of
    another class minus the distance to the nearest stored image (how clearly the memory agrees on the answer)."""
    d = np.sqrt(cdist(x, stored_x, "sqeuclidean"))
    nearest = d.argmin(1)
    answer = stored_y[nearest]
    other = np.where(stored_y[None, :] != answer[:, None], d, np.inf).min(1)
    return answer, other - d[np.arange(len(x)), nearest]


def run_memory_pool(seed: int, sizes=MEMORY_SIZES) -> RealRuns:
    """A pool of 1-nearest-neighbour classifiers on the 8×8 digits, member k storing its own disjoint draw of
    `sizes[k]` training images under `seed` (a larger memory answers better and costs more, and disjoint memories
    err on different images); each answers the images no member stores. Cost: 3·64 FLOPs per stored image
    (difference, square, add); post-hoc signal: `nearest_margin`; context: the held-out image's first eight
    principal components (fitted on the stored images). Members come in cost order (`sizes` ascending)."""
    from sklearn.decomposition import PCA

    if list(sizes) != sorted(sizes) or len(sizes) < 2:
        raise ValueError(f"sizes must be at least two, ascending; got {list(sizes)}")
    x, y = _digits()
    order = numpy_rng(seed, CHAPTER, "digits").permutation(len(y))
    ends = np.cumsum([0, *sizes])
    if ends[-1] >= len(y):
        raise ValueError(f"the memories store {ends[-1]} images; the digits have {len(y)}")
    held = order[ends[-1]:]
    cols = [nearest_margin(x[order[a:b]], y[order[a:b]], x[held]) for a, b in zip(ends[:-1], ends[1:])]
    correct = np.stack([(answer == y[held]).astype(float) for answer, _ in cols], 1)
    margin = np.stack([m for _, m in cols], 1)
    flops = np.broadcast_to(3.0 * x.shape[1] * np.asarray(sizes, float), correct.shape).copy()
    context = PCA(8, random_state=0).fit(x[order[:ends[-1]]]).transform(x[held])
    return RealRuns(correct, flops, margin, context, tuple(f"1-NN, {n} images" for n in sizes))


def fit_quality_estimator(runs: RealRuns, train: np.ndarray, post_hoc: bool) -> np.ndarray:
    """Per member, a logistic regression of its correctness on the context (ex ante) and, post hoc, also on its
    own confidence, fitted on the training rows; returns the (N, K) predicted probability of a correct answer.
    A member that is always (or never) right on the training rows gets its training accuracy."""
    n, k = runs.correct.shape
    out = np.empty((n, k))
    for m in range(k):
        x = runs.context if not post_hoc else np.column_stack([runs.context, runs.confidence[:, m]])
        y = runs.correct[:, m]
        if len(np.unique(y[train])) < 2:
            out[:, m] = y[train].mean()
            continue
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500)).fit(x[train], y[train])
        out[:, m] = clf.predict_proba(x)[:, 1]
    return out


def real_estimates(runs: RealRuns, seed: int, train_fraction: float = 0.2, with_train: bool = False):
    """Split the held-out images (the seed draws the split), fit the ex-ante and post-hoc estimators on the
    training part, and return the test part's pool and estimates (and, `with_train`, the training part's, on
    which λ is fitted). Costs are in units of the most expensive member's FLOPs (as the synthetic pool's largest model costs 1), so `lambda_grid` spans the trade-off."""
    _check_finite("runs.correct", runs.correct)
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    train = numpy_rng(seed, CHAPTER, "real split").random(len(runs.correct)) < train_fraction
    pre = fit_quality_estimator(runs, train, post_hoc=False)
    post = fit_quality_estimator(runs, train, post_hoc=True)
    cov = np.atleast_2d(np.cov((pre - post)[train].T))
    cost = runs.flops / runs.flops[train].mean(0).max()
    split = lambda rows: (Pool(runs.correct[rows], cost[rows], np.zeros(int(rows.sum()), int)),
                          Estimates(pre[rows], post[rows], cost[rows], cov))
    return (split(~train), split(train)) if with_train else split(~train)


def lm_context(problem) -> list[float]:
    """What is known of an arithmetic query before any LM answers it: its number of operations, of each operation,
    and its prompt's length."""
    return [len(problem.ops), *(problem.ops.count(op) for op in "+-*"), len(problem.prompt)]


def run_lm_pool(names, n_queries: int, seed: int, scale: str = "ci") -> RealRuns:
    """Every causal LM of `names` (zoo names, `save_pretrained` folders or Hub ids, through
    :func:`icml25.core.models.get`; they must write the arithmetic alphabet) answers `n_queries` arithmetic problems
    drawn under `seed`, greedily: `correct` is whether its final answer is right, `flops` the forward FLOPs of its
    prompt and answer with a KV cache (:func:`icml25.core.flops.forward_flops` of its own config), `confidence`
    the mean log-probability of its answer's tokens (its post-hoc signal), `context` :func:`lm_context`. Members
    come back in the order of their mean cost, as :func:`run_real_pool`'s."""
    import torch

    from ..core import arithmetic, flops, generation, models, reasoners

    if len(names) < 2:
        raise ValueError(f"a pool needs at least two models, got {list(names)}")
    problems = arithmetic.sample_problems(n_queries, seed, stream="cascade-lm")
    prompts = [p.prompt for p in problems]
    cols = []
    for name in names:
        z = models.get(name, scale, seed, alphabet=arithmetic.ALPHABET)
        answers = reasoners.solve(z.model, z.tokenizer, problems)
        batch = generation.encode_completions(z.tokenizer, prompts, answers)
        with torch.no_grad():
            logp = generation.token_logprobs(z.model, batch)
        n_answer = batch["completion_mask"][:, 1:].sum(-1).clamp(min=1)
        n_tokens = batch["attention_mask"].sum(-1)
        cols.append((np.array([arithmetic.is_correct(p, a) for p, a in zip(problems, answers)], float),
                     np.array([flops.forward_flops(z.model.config, int(t)) for t in n_tokens], float),
                     (logp.sum(-1) / n_answer).cpu().numpy().astype(float)))
    by_cost = np.argsort([c[1].mean() for c in cols], kind="stable")
    correct, flop, conf = (np.stack([c[i] for i in by_cost], axis=1) for c in zip(*cols))
    return RealRuns(correct, flop, conf, np.array([lm_context(p) for p in problems], float),
                    tuple(str(names[i]) for i in by_cost))


def real_pool_cell(seed: int, cfg) -> tuple[RealRuns, dict]:
    """One seed of the real pool (`cfg.real_pool`: the "memories" of `run_memory_pool` or the "classifiers" of
    `run_real_pool`; with `cfg.pool_models`, those LMs): fit the members, run them, fit the estimators, sweep every strategy; and the positive control (`positive_control`) on the same members."""
    if cfg.pool_models:
        runs = run_lm_pool(cfg.pool_models, cfg.lm_queries, seed, cfg.scale)
    elif cfg.real_pool == "memories":
        runs = run_memory_pool(seed)
    else:
        runs = run_real_pool(seed, cfg.real_members, cfg.real_n_fit)
    cell = evaluate(*real_estimates(runs, seed, cfg.train_fraction, with_train=True), seed, cfg)
    return runs, cell | {"positive_control": positive_control(runs, seed, cfg)}


def positive_control(runs: RealRuns, seed: int, cfg, noise: str = "low") -> dict:
    """The real pool with the paper's synthetic estimators (`make_estimates` at `noise`) in place of the learned
    ones: the members' true correctness and costs, so what it shows is whether this pool leaves cascade routing
    room to gain at all."""
    cost = runs.flops / runs.flops.mean(0).max()
    pool = Pool(runs.correct, cost, np.zeros(len(runs.correct), int))
    return evaluate(*make_estimates(pool, noise, seed, cfg.train_fraction, with_train=True), seed, cfg)


def real_claim_measurements(runs: list[RealRuns], cells: list[dict]) -> dict[str, list[float]]:
    """Per seed: the gain of cascade routing over the better baseline, the best member's accuracy, the headroom
    (any member right − best member right), routing's AUC over blind interpolation, and the positive control's
    gain."""
    return {"real_gain": [cell_gain(c) for c in cells],
            "best_member_accuracy": [float(r.correct.mean(0).max()) for r in runs],
            "pool_headroom": [float(r.correct.max(1).mean() - r.correct.mean(0).max()) for r in runs],
            "routing_over_interpolation": [c["auc"]["routing"] - c["interpolation_auc"] for c in cells],
            "positive_control_gain": [cell_gain(c["positive_control"]) for c in cells]}
