"""The measurements of a trained run: accuracy by position, parity-consistent errors, pooled linear probes of
state and parity at every layer, layer × token activation patching (the probes and patching as in the official
code), the concept erasure (LEACE) of the parity at one layer beside erasures of the same size that carry no parity
signal, and the mean ablation of the parity probe's direction there beside directions of the same variance."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from concept_erasure import LeaceEraser, LeaceFitter
from sklearn.linear_model import LogisticRegression

from ..core import models
from ..core.seeding import torch_generator
from .group import elements, parity_table
from .task import parity_of_states, sample_actions, state_sequence
from .training import model_inputs, predict_states, token_ids

def eval_actions(cfg, n_seq: int, length: int, stream: str) -> torch.Tensor:
    """Held-out action sequences, the same for every model (seeded by `stream`, not by the training seed)."""
    return sample_actions(cfg.group_n, n_seq, length, torch_generator(0, "state_tracking", stream))


def accuracy_by_position(pred: torch.Tensor, states: torch.Tensor) -> np.ndarray:
    """Fraction of sequences whose predicted s_t is right, for t = 1 … T."""
    return (pred == states).float().mean(0).numpy()


def parity_chance(n: int) -> float:
    """Parity-consistency of an error drawn uniformly from the wrong states: (n!/2 − 1)/(n! − 1)."""
    g = len(elements(n))
    return (g / 2 - 1) / (g - 1)


def parity_consistent_errors(pred: torch.Tensor, states: torch.Tensor, n: int,
                             where: torch.Tensor | None = None,
                             colouring: torch.Tensor | None = None) -> tuple[float, int]:
    """Among wrong predictions (at the positions `where`, a boolean mask over t; all when None), the fraction
    with the true state's parity ε(s_t) (its class under `colouring`, when given); and the number of errors."""
    wrong = pred != states
    if where is not None:
        wrong = wrong & torch.as_tensor(where)
    n_err = int(wrong.sum())
    if n_err == 0:
        return float("nan"), 0
    same = parity_of_states(pred, n, colouring) == parity_of_states(states, n, colouring)
    return float((same & wrong).sum() / n_err), n_err


def other_parity_chance(n: int) -> float:
    """The share of wrong states with the other parity than the true state's, for an error drawn uniformly from
    the n! − 1 wrong states: (n!/2)/(n! − 1), 3/5 for S3 (three of the five wrong states are of the other parity)."""
    return 1 - parity_chance(n)


def wrong_parity_errors(pred: torch.Tensor, states: torch.Tensor, n: int) -> tuple[int, int]:
    """The wrong predictions among `pred` (against the true `states`, same shape) and how many of them have the
    other parity ε than the true state: (errors, wrong-parity errors). Their ratio is the wrong-parity share."""
    wrong = pred != states
    other = parity_of_states(pred, n) != parity_of_states(states, n)
    return int(wrong.sum()), int((wrong & other).sum())


def wrong_parity_share(errors: int, wrong_parity: int) -> float:
    """The share of `errors` whose predicted state has the other parity (NaN without errors)."""
    return wrong_parity / errors if errors else float("nan")


def wrong_parity_rate(wrong_parity: int, predictions: int) -> float:
    """The rate of predictions, over all `predictions` made (right or wrong), whose predicted state has the other
    parity than the true one (NaN without predictions): unlike :func:`wrong_parity_share`, it counts how many such
    errors an edit causes, not only which parity its errors have."""
    return wrong_parity / predictions if predictions else float("nan")


@torch.no_grad()
def hidden_states(model, actions: torch.Tensor, tokenizer, n: int) -> torch.Tensor:
    """Residual stream at the position of every action: [layers + 1, batch, T, d] (layer 0 = embeddings)."""
    out = model(input_ids=model_inputs(actions, tokenizer, n), output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, :, 1:].float()


def pooled_probe(features: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """One logistic-regression probe for one layer, pooled over positions as in the official code: features
    [N, T, d] and labels [N, T] are flattened story by story, the probe is fitted on the first min(1000, 0.8 N T)
    rows and scored on the rest. Returns (held-out accuracy, held-out accuracy at each position t = 1 … T)."""
    n_seq, length, d = features.shape
    x, y = features.reshape(-1, d), labels.reshape(-1)
    split = min(1000, int(0.8 * len(x)))
    probe = LogisticRegression(max_iter=5000).fit(x[:split], y[:split])
    right = probe.predict(x[split:]) == y[split:]
    pos = np.arange(split, len(x)) % length
    return float(right.mean()), np.array([right[pos == t].mean() for t in range(length)])


def probe_maps(model, tokenizer, cfg, actions: torch.Tensor,
               colouring: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """State and parity probes at every layer (pooled over positions): {"state", "parity"}: [L+1] held-out
    accuracy; {"state_by_t", "parity_by_t"}: [L+1, T], the same probes' accuracy at each position. With
    `colouring`, the "parity" probe reads that 2-colouring of the state instead of ε."""
    n = cfg.group_n
    h = hidden_states(model, actions, tokenizer, n).numpy()  # [L+1, N, T, d]
    states = state_sequence(actions, n)
    out = {}
    for name, lab in (("state", states), ("parity", parity_of_states(states, n, colouring))):
        scores = [pooled_probe(layer, lab.numpy()) for layer in h]
        out[name] = np.array([s for s, _ in scores])
        out[f"{name}_by_t"] = np.stack([by_t for _, by_t in scores])
    return out


def resolving_layer(probe_map: np.ndarray, threshold: float) -> np.ndarray:
    """For each position t, the first layer whose probe accuracy reaches `threshold` (NaN if none does): the
    depth at which s_t becomes linearly decodable. AA predicts it grows like log t (one scan round per layer)."""
    reached = probe_map >= threshold  # [layers, T]
    first = reached.argmax(0).astype(float)
    first[~reached.any(0)] = np.nan
    return first


def corrupt(actions: torch.Tensor, position: int, same_parity: bool, n: int, generator: torch.Generator,
            colouring: torch.Tensor | None = None):
    """Replace a_position by a different action of the same (or the other) parity (class under `colouring`)."""
    par = parity_table(n) if colouring is None else colouring
    out = actions.clone()
    for i in range(actions.shape[0]):
        a = int(actions[i, position])
        pool = [k for k in range(len(elements(n))) if k != a and (par[k] == par[a]) == same_parity]
        out[i, position] = pool[int(torch.randint(len(pool), (1,), generator=generator))]
    return out


PATCH_MODES = ("window", "prefix")


def _residual(output):
    """The residual stream in a module's output: a decoder block of some families returns a tuple whose first
    entry it is (GPT-2), others the tensor itself (Llama, Qwen2 in current transformers)."""
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def patching_map(model, tokenizer, n: int, clean: torch.Tensor, corrupted: torch.Tensor,
                 mode: str = "window") -> np.ndarray:
    """Activation patching over layers × tokens, as in the official code: the clean run, with the residual stream
    at layer ℓ (0 = embeddings) and token t replaced by the corrupted run's (`mode="window"`: token t alone;
    `"prefix"`: tokens 1 … t), scored at the last position by

        NLD(ℓ, t) = (LD(x; h_ℓ,t ← h'_ℓ,t) − LD(x)) / (LD(x') − LD(x)),   clipped to [0, 1],

    where LD = p(y') − p(y), y and y' are the clean and corrupted runs' predicted final states and p the softmax
    over the state words. Averaged over the pairs whose two predictions differ. Returns [L+1, T]."""
    if mode not in PATCH_MODES:
        raise ValueError(f"unknown patching mode {mode!r}; valid: {', '.join(PATCH_MODES)}")
    perm_ids, _ = token_ids(tokenizer, n)
    modules = [model.get_input_embeddings(), *models.decoder_blocks(model)]

    def probs(input_ids):
        return model(input_ids=input_ids).logits[:, -1][:, perm_ids].softmax(-1)

    x, x_c = model_inputs(clean, tokenizer, n), model_inputs(corrupted, tokenizer, n)
    saved = []  # each module's corrupted output (hooks, not hidden_states: the last of those is after the norm)
    handles = [mod.register_forward_hook(lambda _m, _i, o: saved.append(_residual(o).detach())) for mod in modules]
    try:
        p_corr = probs(x_c)
    finally:
        for h in handles:
            h.remove()
    p_clean = probs(x)
    rows = torch.arange(clean.shape[0])
    y, y_c = p_clean.argmax(-1), p_corr.argmax(-1)
    keep = y != y_c

    def ld(p):
        return p[rows, y_c] - p[rows, y]

    base, new = ld(p_clean), ld(p_corr)
    out = np.zeros((len(modules), clean.shape[1]))
    for i, (module, source) in enumerate(zip(modules, saved)):
        for t in range(1, clean.shape[1] + 1):  # input index t holds a_t (index 0 is bos)
            lo = t if mode == "window" else 1

            def hook(_m, _inp, output, source=source, lo=lo, t=t):
                hidden = _residual(output).clone()
                hidden[:, lo:t + 1] = source[:, lo:t + 1]
                return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

            handle = module.register_forward_hook(hook)
            try:
                nld = ((ld(probs(x)) - base) / (new - base)).clamp(0, 1)
            finally:
                handle.remove()
            out[i, t - 1] = float(nld[keep].mean()) if keep.any() else float("nan")
    return out


def ablate_direction(hidden: torch.Tensor, direction: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """Mean ablation of one direction, or of a subspace: the component of `hidden` [..., d] along the unit vector
    `direction` [d] (in the span of the orthonormal rows of `direction` [m, d]) is replaced by that of `mean` [d];
    every component orthogonal to it is left as it was: h ← h − ((h − μ)·w) w, or h ← h − ((h − μ) Uᵀ) U."""
    basis = direction if direction.ndim == 2 else direction[None]
    return hidden - ((hidden - mean) @ basis.T) @ basis


@torch.no_grad()
def residual_rows(model, tokenizer, n: int, actions: torch.Tensor, layer: int) -> torch.Tensor:
    """The residual stream after `layer` (0 = embeddings) at every position of the stories `actions`, one row per
    (story, position): [N T, d]."""
    h = hidden_states(model, actions, tokenizer, n)[layer]
    return h.reshape(-1, h.shape[-1])


@torch.no_grad()
def parity_direction(model, tokenizer, n: int, actions: torch.Tensor, layer: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The parity probe's direction at `layer` (0 = embeddings): a logistic regression of ε(s_t) on the residual
    stream at every position of the stories `actions` (held out from training), its weight vector normalised;
    and the mean residual stream there. Returns (unit direction [d], mean [d])."""
    x = residual_rows(model, tokenizer, n, actions, layer).numpy()
    y = parity_of_states(state_sequence(actions, n), n).reshape(-1).numpy()
    w = torch.tensor(LogisticRegression(max_iter=5000).fit(x, y).coef_[0], dtype=torch.float32)
    return w / w.norm(), torch.tensor(x.mean(0), dtype=torch.float32)


def variance_along(x: torch.Tensor, direction: torch.Tensor) -> float:
    """The variance of the rows of `x` [N, d] along the unit `direction` w [d], wᵀ Σ w (Σ their covariance), or in
    the span of the orthonormal rows of `direction` U [m, d], tr(U Σ Uᵀ): what mean ablation of it removes."""
    basis = direction.double() if direction.ndim == 2 else direction.double()[None]
    return float(((x.double() - x.double().mean(0)) @ basis.T).pow(2).sum(1).mean())


def _tilted_basis(alpha: float, log_lam: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
    """An orthonormal basis (in Σ''s eigenbasis, [r, m]) of the span of Σ'^{α/2} G, G's columns given by `coeffs`
    [r, m] in that eigenbasis: α = 0 keeps the random span of G, α > 0 tilts it toward the high-variance principal
    components (to the top m as α grows), α < 0 toward the low-variance ones."""
    scale = np.exp(alpha / 2 * (log_lam - log_lam.max()))
    return np.linalg.qr(scale[:, None] * coeffs)[0]


def variance_matched_controls(x: torch.Tensor, direction: torch.Tensor, k: int, generator: torch.Generator,
                              exclude: torch.Tensor | None = None, target: float | None = None
                              ) -> tuple[list[torch.Tensor], np.ndarray]:
    """`k` random control subspaces, orthogonal to `direction` w and to the columns of `exclude` [d, j], each
    carrying the variance of the rows of `x` [N, d] that w carries (:func:`variance_along`: mean-ablating the
    control removes as much of the residual stream as mean-ablating w does), or `target` when given (the mean
    squared change another edit makes, :func:`parity_erasure_drops`).

    Each control has the fewest dimensions m whose top principal variances in that orthogonal complement sum to
    wᵀ Σ w (one, when some direction there carries that much), and is the span of m Gaussian draws there, tilted
    toward the complement's high-variance principal components as span(Σ'^{α/2} G) (Σ' the covariance of `x`
    projected on the complement), with α solved by bisection: as α runs from low to high the span's variance runs
    from the m least to the m greatest principal variances, so the match exists whenever the complement's top m
    carry enough and its m least do not carry more; otherwise (the whole complement carries less than the target,
    or a target below its least principal variance) the control is the nearest reachable, and the returned ratios
    (each control's variance over the target) say by how much it misses. Returns (orthonormal bases, each [m, d];
    ratios [k])."""
    x = x.double()
    d = x.shape[1]
    w = direction.double()[:, None]
    avoid = w if exclude is None else torch.cat([w, exclude.double()], dim=1)
    basis = torch.linalg.qr(avoid).Q  # orthonormal basis of the span the controls must avoid
    proj = torch.eye(d, dtype=torch.float64) - basis @ basis.T
    xc = (x - x.mean(0)) @ proj
    lam, vecs = torch.linalg.eigh(xc.T @ xc / len(xc))
    keep = lam > lam.max() * 1e-9  # the complement's principal components (the avoided span has λ = 0)
    lam, vecs = lam[keep].numpy(), vecs[:, keep]
    log_lam = np.log(lam)
    target = variance_along(x, direction) if target is None else target
    top = np.cumsum(lam[::-1])
    m = int(min(np.searchsorted(top, target) + 1, len(lam)))

    def variance(q):
        return float((lam[:, None] * q ** 2).sum())

    out, ratios = [], []
    for _ in range(k):
        coeffs = (vecs.T @ (proj @ torch.randn(d, m, generator=generator).double())).numpy()
        lo, hi = -30.0, 30.0
        for _ in range(80):  # bisection on α: the tilted span's variance runs from the least to the greatest
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if variance(_tilted_basis(mid, log_lam, coeffs)) < target else (lo, mid)
        u = (vecs @ torch.tensor(_tilted_basis((lo + hi) / 2, log_lam, coeffs))).T.float()  # [m, d]
        out.append(u)
        ratios.append(variance_along(x, u) / target)
    return out, np.array(ratios)


def edited_accuracy(model, tokenizer, n: int, actions: torch.Tensor, layer: int, edit=None,
                    first: int = 0) -> np.ndarray:
    """Accuracy by position of the model's states on `actions` with `edit` (a map of residual rows [..., d])
    applied to the residual stream after `layer` (0 = embeddings) at the input positions from `first` on (0: every
    position, the bos token's included; 1: the actions' positions), the rest of the model re-run on the edited
    stream; without `edit`, the model as it is (:func:`edited_predictions`)."""
    pred = edited_predictions(model, tokenizer, n, actions, layer, edit, first)
    return accuracy_by_position(pred, state_sequence(actions, n))


@torch.no_grad()
def edited_predictions(model, tokenizer, n: int, actions: torch.Tensor, layer: int, edit=None,
                       first: int = 0) -> torch.Tensor:
    """The model's predicted states [N, T] on `actions` with `edit` applied after `layer` at the input positions
    from `first` on, as :func:`edited_accuracy` reads them."""
    blocks = models.decoder_blocks(model)
    if not 0 <= layer < len(blocks):  # the last entry of hidden_states is after the final norm, not a block's output
        raise ValueError(f"ablation layer {layer} must be 0 (embeddings) … {len(blocks) - 1}")
    module = [model.get_input_embeddings(), *blocks][layer]

    def hook(_m, _inp, output):
        hidden = _residual(output).clone()
        hidden[:, first:] = edit(hidden[:, first:])
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    handle = module.register_forward_hook(hook) if edit is not None else None
    try:
        return predict_states(model, actions, tokenizer, n)
    finally:
        if handle is not None:
            handle.remove()


def ablated_accuracy(model, tokenizer, n: int, actions: torch.Tensor, layer: int,
                     direction: torch.Tensor | None = None, mean: torch.Tensor | None = None) -> np.ndarray:
    """:func:`edited_accuracy` with `direction` mean-ablated (:func:`ablate_direction`) at every position; without
    `direction`, the model as it is."""
    return edited_accuracy(model, tokenizer, n, actions, layer,
                           None if direction is None else lambda h: ablate_direction(h, direction, mean))


def largest_miss(ratios) -> float:
    """The largest relative miss of controls matched to a target: max |ratio − 1| over their ratios to it."""
    return float(np.max(np.abs(np.asarray(ratios) - 1)))


@dataclass
class AblationDrops:
    """What mean-ablating one direction after block `parity_layer` costs a run: the mean state accuracy at the
    trained positions t <= T lost, for the parity probe's direction and for its controls."""
    parity: float  # the parity probe's direction
    matched: list  # each variance-matched control (:func:`variance_matched_controls`)
    random: float  # a fixed random unit direction, the same for every run
    parity_variance_share: float  # the share of the residual stream's variance along the parity direction
    matched_variance_ratio: list  # each matched control's variance over the parity direction's
    matched_dimensions: list = ()  # each matched control's dimensions (1 when one direction carries the variance)

    @property
    def matched_mean(self) -> float:
        return float(np.mean(self.matched))

    @property
    def parity_minus_matched(self) -> float:
        """The drop the parity direction causes beyond what a direction of the same variance causes."""
        return self.parity - self.matched_mean


def parity_class_difference(x: torch.Tensor, actions: torch.Tensor, n: int) -> torch.Tensor:
    """The difference of the mean residual row [d] of the odd and the even states of `actions` (rows of `x` in
    story-then-position order): the direction along which the parity classes' means differ."""
    odd = parity_of_states(state_sequence(actions, n), n).reshape(-1).bool()
    return x[odd].mean(0) - x[~odd].mean(0)


def parity_ablation_drops(model, tokenizer, cfg) -> AblationDrops:
    """How much the state computation rests on the parity direction at `cfg.parity_layer`: the parity probe's
    direction there (:func:`parity_direction`, fitted on the held-out "probe" stories) is mean-ablated and the
    mean state accuracy at the trained positions t ≤ T (held-out "eval" stories) falls by `parity`. A model that
    computes the parity there and uses it (PAA) loses accuracy; one whose parity is only a by-product of the state
    does not. Unlike the probe signature, this is not what the parity_aux loss supervises (that loss asks the
    parity to be readable at the layer, not the state to depend on it).

    But removing any direction that carries much of the residual stream's variance may cost accuracy, and the
    parity loss makes the parity direction carry much of it. So the same drop is measured for
    `cfg.n_ablation_controls` controls that carry the same variance on the "probe" stories and no parity signal
    (random subspaces orthogonal to the parity direction and to the parity classes' mean difference, of one
    dimension when one direction there carries that much, else of the fewest that do;
    :func:`variance_matched_controls`), and for a fixed random direction. The probe, the covariance, the mean and
    the unablated accuracy are computed once for all of them."""
    n, layer = cfg.group_n, cfg.parity_layer
    probe_acts = eval_actions(cfg, cfg.n_probe, cfg.train_length, "probe")
    direction, mean = parity_direction(model, tokenizer, n, probe_acts, layer)
    x = residual_rows(model, tokenizer, n, probe_acts, layer)
    matched, ratios = variance_matched_controls(
        x, direction, cfg.n_ablation_controls, torch_generator(0, "state_tracking", "matched directions"),
        exclude=parity_class_difference(x, probe_acts, n)[:, None])
    random = torch.randn(len(direction), generator=torch_generator(0, "state_tracking", "random direction"))
    acts = eval_actions(cfg, cfg.n_eval, cfg.train_length, "eval")
    base = ablated_accuracy(model, tokenizer, n, acts, layer).mean()

    def drop(w):
        return float(base - ablated_accuracy(model, tokenizer, n, acts, layer, w, mean).mean())

    total = float((x.double() - x.double().mean(0)).pow(2).sum(1).mean())
    return AblationDrops(parity=drop(direction), matched=[drop(u) for u in matched],
                         random=drop(random / random.norm()),
                         parity_variance_share=variance_along(x, direction) / total,
                         matched_variance_ratio=ratios.tolist(), matched_dimensions=[len(u) for u in matched])


def leace_eraser(x: torch.Tensor, concept: torch.Tensor) -> LeaceEraser:
    """LEACE, least-squares concept erasure (Belrose et al., 2023), fitted on the rows `x` [N, d] and a binary
    concept `concept` [N] (here the parity ε(s_t)): the affine map of least mean squared change E‖x − r(x)‖²
    after which no linear predictor of the concept beats a constant, in the paper's closed form

        r(x) = x − W⁺ P_{W Σ_xz} W (x − E[x]),   W = (Σ_xx^{1/2})⁺,

    P_{W Σ_xz} the orthogonal projection onto the column space of W Σ_xz (Σ_xx the covariance of x, Σ_xz its
    cross-covariance with z). For a binary concept Σ_xz ∝ δ, the difference of the two classes' mean rows, so r is
    the rank-one oblique projection r(x) = x − δ δᵀ Σ_xx⁺ (x − E[x]) / (δᵀ Σ_xx⁺ δ): it moves each row along δ
    alone, by what it reads along Σ_xx⁺ δ, and leaves the two classes with one mean.

    Fitted by the authors' `concept-erasure` package with the closed form as the paper states it (its options
    that depart from it are off: no shrinkage of Σ_xx, no trace constraint, and no truncation of a small W Σ_xz),
    in float64."""
    return LeaceFitter.fit(x.double(), concept.double()[:, None], shrinkage=False, constrain_cov_trace=False,
                           svd_tol=1e-12).eraser


@dataclass
class ErasureDrops:
    """What erasing the parity after block `parity_layer` costs a run, the mean state accuracy at the trained
    positions t <= T lost, beside controls that change the residual stream as much and carry no parity signal;
    and how well a logistic probe fitted again on held-out stories reads the parity after each; and how many of the
    state errors after each edit predict a state of the other parity than the true one."""
    erased: float  # the parity erased by LEACE (:func:`leace_eraser`)
    matched: list  # each control of the same mean squared change (:func:`variance_matched_controls`)
    parity_after: float  # the parity probe's held-out accuracy after the erasure
    parity_after_controls: list  # the same after each control
    change_share: float  # the erasure's mean squared change over the residual stream's variance there
    matched_change_ratio: list  # each control's mean squared change over the erasure's
    matched_dimensions: list  # each control's dimensions (1 when one direction carries the change)
    erased_errors: tuple = (0, 0)  # (errors, wrong-parity errors) at t <= T after the erasure
    matched_errors: list = ()  # the same after each control (:func:`wrong_parity_errors`)
    n_predictions: int = 0  # predictions at t <= T under each edit (stories × positions), every rate's denominator

    @property
    def matched_mean(self) -> float:
        return float(np.mean(self.matched))

    @property
    def erased_wrong_parity(self) -> float:
        """The share of the state errors at t <= T after the erasure whose predicted state has the other parity."""
        return wrong_parity_share(*self.erased_errors)

    @property
    def matched_wrong_parity(self) -> float:
        """The same share after the controls, their errors pooled (every control's errors counted alike)."""
        return wrong_parity_share(*(int(sum(c)) for c in zip(*self.matched_errors)))

    @property
    def wrong_parity_contrast(self) -> float:
        """steerable's statistic: the wrong-parity share of the errors after the erasure minus after its controls."""
        return self.erased_wrong_parity - self.matched_wrong_parity

    @property
    def erased_flip_rate(self) -> float:
        """The rate, over all predictions at t <= T, of predicted states with the other parity than the true state
        after the erasure (:func:`wrong_parity_rate`)."""
        return wrong_parity_rate(self.erased_errors[1], self.n_predictions)

    @property
    def matched_flip_rate(self) -> float:
        """The same rate after the controls, pooled (their wrong-parity predictions over all their predictions)."""
        return wrong_parity_rate(int(sum(w for _, w in self.matched_errors)),
                                 self.n_predictions * len(self.matched_errors))

    @property
    def flip_excess(self) -> float:
        """The parity flips the erasure causes beyond an edit of its size: the erasure's wrong-parity rate minus its
        controls' pooled rate. steerable contrasts it between a seed's parity_aux and plain runs."""
        return self.erased_flip_rate - self.matched_flip_rate

    @property
    def fewest_errors(self) -> int:
        """The fewer of the erasure's errors and the controls' pooled errors (each share's denominator)."""
        return min(self.erased_errors[0], int(sum(e for e, _ in self.matched_errors)))

    @property
    def erased_minus_matched(self) -> float:
        """The drop the parity's erasure causes beyond what an edit of the same size without parity signal causes."""
        return self.erased - self.matched_mean

    @property
    def change_mismatch(self) -> float:
        """The largest relative miss of a control's mean squared change (:func:`largest_miss`)."""
        return largest_miss(self.matched_change_ratio)

    @property
    def change_ratio(self) -> float:
        """The run's match ratio: the mean squared change over the erasure's of the control that misses it most
        (the whole complement's share of the change, below 1, where no control can match)."""
        ratios = np.asarray(self.matched_change_ratio, dtype=float)
        return float(ratios[np.argmax(np.abs(ratios - 1))])


def parity_erasure_drops(model, tokenizer, cfg) -> ErasureDrops:
    """How much the state computation rests on the parity at `cfg.parity_layer`: LEACE (:func:`leace_eraser`) is
    fitted there on the "probe" stories, applied to the residual stream after block `parity_layer` at every action's
    position (not the bos token's, whose constant row it was not fitted on), the rest of the model re-run, and the
    mean state accuracy at t ≤ T on the held-out "eval" stories falls by `erased`. Unlike the ablation of the parity
    probe's direction (:func:`parity_ablation_drops`), after which the parity stays readable from the rest of the
    stream, the erasure leaves no linear parity signal: whether it did is read on a third split, the "erasure
    check" stories, by a logistic probe fitted again after it (:func:`pooled_probe`, `parity_after`).

    The controls are edits of the same rank and size that carry no parity signal: `cfg.n_ablation_controls` mean
    ablations (:func:`ablate_direction`) of random subspaces orthogonal to the parity classes' mean difference δ
    (the direction the erasure moves the rows along; the classes have one mean along any such subspace, so no
    linear predictor of the parity reads anything from it), each removing the erasure's mean squared change
    E‖x − r(x)‖² on the "probe" stories (:func:`variance_matched_controls` with that target: one direction when one
    carries that much, else a subspace of the fewest dimensions that do), applied at the same positions.

    Beside the drops, each edit's state errors at t ≤ T on the "eval" stories are counted with how many of them
    predict a state of the other parity than the true one (:func:`wrong_parity_errors`): if later blocks read the
    parity there, erasing it sends the errors to the other parity more often than controls that leave the parity
    readable; if they did not, the errors' parity would not depend on which edit made them, and both shares would sit
    near the chance share of a uniform error (:func:`other_parity_chance`). The same counts over all predictions
    (:attr:`ErasureDrops.flip_excess`) say how many parity flips the erasure causes beyond its controls, which
    steerable compares between a seed's parity_aux and plain runs."""
    n, layer, length = cfg.group_n, cfg.parity_layer, cfg.train_length
    fit_acts = eval_actions(cfg, cfg.n_probe, length, "probe")
    x = residual_rows(model, tokenizer, n, fit_acts, layer)
    eraser = leace_eraser(x, parity_of_states(state_sequence(fit_acts, n), n).reshape(-1))
    x64 = x.double()
    change = float((x64 - eraser(x64)).pow(2).sum(1).mean())
    delta = parity_class_difference(x, fit_acts, n)
    controls, ratios = variance_matched_controls(
        x, delta / delta.norm(), cfg.n_ablation_controls, torch_generator(0, "state_tracking", "erasure controls"),
        target=change)
    mean = x.mean(0)
    edits = [lambda h: eraser(h.double()).float(), *(lambda h, u=u: ablate_direction(h, u, mean) for u in controls)]
    acts = eval_actions(cfg, cfg.n_eval, length, "eval")
    states = state_sequence(acts, n)
    base = edited_accuracy(model, tokenizer, n, acts, layer).mean()
    preds = [edited_predictions(model, tokenizer, n, acts, layer, edit, first=1) for edit in edits]
    drops = [float(base - accuracy_by_position(p, states).mean()) for p in preds]
    errors = [wrong_parity_errors(p, states, n) for p in preds]
    check = eval_actions(cfg, cfg.n_probe, length, "erasure check")
    h = hidden_states(model, check, tokenizer, n)[layer]
    parity = parity_of_states(state_sequence(check, n), n).numpy()
    readable = [pooled_probe(edit(h).numpy(), parity)[0] for edit in edits]
    total = float((x64 - x64.mean(0)).pow(2).sum(1).mean())
    return ErasureDrops(erased=drops[0], matched=drops[1:], parity_after=readable[0],
                        parity_after_controls=readable[1:], change_share=change / total,
                        matched_change_ratio=ratios.tolist(), matched_dimensions=[len(u) for u in controls],
                        erased_errors=errors[0], matched_errors=errors[1:], n_predictions=int(states.numel()))
