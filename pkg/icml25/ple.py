"""PLE — Progressively Label Enhancement for LLM alignment (Liu, Xu & Geng, ICML 2025), in miniature.

For each query x the policy answers twice: y ~ π(·|x) and y_p ~ π(·|p⊕x), where p is a *principle* prepended
to the query. A reward model scores both. A dynamic threshold decides how the pair is used (Algorithm 1):

* r(y_p) − r(y) > τ_i  →  **ranking loss**: teach π, conditioned on the plain x, to rank y_p above y;
* otherwise            →  **reward-weighted SFT** on both answers (again conditioned on the plain x);
* τ_{i+1} = α·τ_i      →  large-margin pairs are ranked first, and the threshold falls so that more pairs are
                          ranked later; every generated sample is used somewhere.

Our world: the zoo's arithmetic draft model, fine-tuned once so that the principle marker `P` goes with careful
(clean) solutions while plain prompts go with sloppy ones (some steps corrupted), so π(·|P⊕x) is better than
π(·|x). The reward is the fraction of verified steps (the exact step verifier of `icml25.core.arithmetic`).
The training inputs of every method never contain `P`: the principle is only used to *generate*.

The paper's exact ranking loss and SFT weights were not retrieved; ours (documented at each function) are a
reconstruction: an RRHF-style hinge on length-normalised log-likelihoods and softmax(reward / T) pair weights.
The released code (palm-biaoliu/PLE) differs again: weighted DPO on best-vs-worst of 8 samples over a
percentile schedule, without principle prompting.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .core import arithmetic, tinylm, zoo
from .core.claims import Claim
from .core.config import make_config
from .core.generation import encode_completions, generate, token_logprobs
from .core.seeding import numpy_rng, seeded, torch_generator
from .core.train import lm_batches, train

PRINCIPLE = "P"  # the principle marker: one new token, associated with careful solutions during fine-tuning
ALPHABET = arithmetic.ALPHABET + PRINCIPLE
METHODS = ("sft", "raft", "context_distillation", "dpo", "ple")
ABLATIONS = ("ranking_only", "weighted_sft_only", "constant_tau")
LABELS = {"sft": "SFT-only", "raft": "RAFT (SFT on the better answer)",
          "context_distillation": "context distillation (SFT on y_p)", "dpo": "DPO on all pairs", "ple": "PLE",
          "ranking_only": "PLE: ranking only", "weighted_sft_only": "PLE: weighted SFT only",
          "constant_tau": "PLE: constant τ (α = 1)"}

_MAX_NEW = 48

# The principled starting model: the zoo's arithmetic draft fine-tuned on demonstrations in which `P⊕x` is
# followed by the clean solution and the plain x by a sloppy one (each step corrupted with `sloppiness`).
# The premise of the method, π(·|P⊕x) better than π(·|x), is measured at the start of every run (`Run.gap[0]`).
START = {
    "smoke": dict(n_train=500, steps=20, batch_size=32, lr=3e-3, sloppiness=0.5),
    "ci": dict(n_train=4000, steps=300, batch_size=64, lr=3e-3, sloppiness=0.5),
    "full": dict(n_train=20000, steps=1000, batch_size=64, lr=3e-3, sloppiness=0.5),
}

config = make_config({
    "smoke": dict(seeds=[0], ablation_seeds=[0], n_iterations=2, n_queries=32, train_steps=4, batch_size=16,
                  lr=1e-3, tau0=0.2, alpha=0.9, sft_temperature=0.1, dpo_beta=0.1, n_eval=32,
                  methods=list(METHODS), ablations=[]),
    "ci": dict(seeds=[0, 1, 2], ablation_seeds=[0], n_iterations=3, n_queries=96, train_steps=10, batch_size=32,
               lr=1e-3, tau0=0.2, alpha=0.9, sft_temperature=0.1, dpo_beta=0.1, n_eval=200,
               methods=list(METHODS), ablations=list(ABLATIONS)),
    "full": dict(seeds=[0, 1, 2, 3, 4], ablation_seeds=[0, 1, 2, 3, 4], n_iterations=8, n_queries=512,
                 train_steps=40, batch_size=64, lr=1e-3, tau0=0.2, alpha=0.9, sft_temperature=0.1, dpo_beta=0.1,
                 n_eval=1000, methods=list(METHODS), ablations=list(ABLATIONS)),
})

BEATS_SFT = Claim(
    chapter="ple", id="beats_sft",
    paper_statement="PLE aligns better than SFT and RAFT (and PPO, DPO) on dialogue and summarisation",
    paper_value="higher reward-model score and win rate than every baseline (HH, TL;DR)",
    criterion="PLE's final held-out reward without the principle (mean over seeds) exceeds SFT-only's and is at "
              "least RAFT's",
    test=lambda m: m["ple"] > m["sft"] and m["ple"] >= m["raft"],
)
CLOSES_GAP = Claim(
    chapter="ple", id="closes_gap",
    paper_statement="training on principle-guided answers moves the plain-query policy towards the principle-guided "
                    "one",
    paper_value="qualitative (the method's premise)",
    criterion="the gap reward(P⊕x) − reward(x) shrinks more under PLE than under SFT-only (from the start to the "
              "last iteration, mean over seeds)",
    test=lambda m: m["ple_gap_reduction"] > m["sft_gap_reduction"],
)


# --- the threshold schedule and the routing ------------------------------------------------------------------

def threshold_schedule(tau0: float, alpha: float, n_iterations: int) -> np.ndarray:
    """τ_i = τ₀·α^i for i = 0..n_iterations−1 (Algorithm 1: τ ← α·τ after every iteration)."""
    if not tau0 >= 0:
        raise ValueError(f"initial threshold tau0 must be >= 0, got {tau0}")
    if not 0 < alpha <= 1:
        raise ValueError(f"decay factor alpha must lie in (0, 1], got {alpha}")
    if n_iterations < 1:
        raise ValueError(f"n_iterations must be >= 1, got {n_iterations}")
    return tau0 * alpha ** np.arange(n_iterations)


def route(reward_plain: np.ndarray, reward_principle: np.ndarray, tau: float) -> np.ndarray:
    """True where a pair goes to the ranking loss (r(y_p) − r(y) > τ), False where it goes to weighted SFT.

    Every pair gets exactly one of the two losses."""
    margin = np.asarray(reward_principle, float) - np.asarray(reward_plain, float)
    return margin > tau


def sft_weights(reward_plain: torch.Tensor, reward_principle: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per-pair weights [B, 2] of (y, y_p) in the weighted SFT loss: softmax(r / T) over the two answers.

    Positive, summing to 1, equal for equal rewards, larger for the higher reward (our reconstruction)."""
    if temperature <= 0:
        raise ValueError(f"sft temperature must be > 0, got {temperature}")
    return torch.softmax(torch.stack([reward_plain, reward_principle], -1) / temperature, -1)


def mean_logprob(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """p̄(y|x): the length-normalised log-likelihood of each completion ([B], differentiable)."""
    return token_logprobs(model, batch).sum(-1) / batch["completion_mask"][:, 1:].sum(-1).clamp(min=1)


def ranking_loss(logp_plain: torch.Tensor, logp_principle: torch.Tensor) -> torch.Tensor:
    """Per-pair hinge max(0, p̄(y|x) − p̄(y_p|x)): zero once y_p is ranked above y given the plain x."""
    return torch.relu(logp_plain - logp_principle)


def weighted_sft_loss(logp_plain: torch.Tensor, logp_principle: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-pair −(w_y·p̄(y|x) + w_yp·p̄(y_p|x)) with `weights` from :func:`sft_weights`."""
    return -(weights[:, 0] * logp_plain + weights[:, 1] * logp_principle)


def dpo_loss(logp_chosen, logp_rejected, ref_chosen, ref_rejected, beta: float) -> torch.Tensor:
    """Per-pair DPO loss −log σ(β[(log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l))]).

    The log-probabilities are sums over the completion's tokens."""
    return -torch.nn.functional.logsigmoid(beta * ((logp_chosen - ref_chosen) - (logp_rejected - ref_rejected)))


# --- the world: principle prompting, reward, the principled starting model ------------------------------------

def with_principle(prompt: str) -> str:
    """p⊕x: the principle marker prepended to the query."""
    return PRINCIPLE + prompt


def reward(problem: arithmetic.Problem, completion: str) -> float:
    """The reward model: the fraction of verified steps, over the longer of the answer and the reference."""
    labels = arithmetic.step_labels(problem, completion)
    return sum(labels) / max(len(labels), len(problem.steps()))


def sloppy_solution(problem: arithmetic.Problem, sloppiness: float, rng: np.random.Generator) -> str:
    """The reference solution with each step made lazy with probability `sloppiness`: an operation step copies
    its left operand as the result (`7*2=7;`), the answer step gets a wrong digit. Copying is an error a small
    model can learn whatever its arithmetic skill, so the plain prompt really does learn to be sloppy."""
    out = []
    for i, step in enumerate(problem.steps()):
        if rng.random() >= sloppiness:
            out.append(step)
        elif step.startswith(arithmetic.ANSWER_MARK):
            out.append(arithmetic.corrupt_step(problem, i, rng))
        else:
            out.append(f"{step.split('=')[0]}={step[0]}{arithmetic.STEP_DELIMITER}")
    return "".join(out)


def principled_tokenizer():
    return tinylm.char_tokenizer(ALPHABET)


def add_principle_token(model, tokenizer, seed: int):
    """A copy of `model` whose vocabulary gains the principle token (existing token ids unchanged); the new
    embedding row is drawn under `seed` (resizing draws from torch's global RNG)."""
    new = principled_tokenizer()
    old_vocab, new_vocab = tokenizer.get_vocab(), new.get_vocab()
    if any(new_vocab.get(t) != i for t, i in old_vocab.items()):
        raise ValueError("the base model's tokenizer is not the arithmetic character tokenizer")
    model = copy.deepcopy(model)
    with seeded(seed, "principle-token"):
        model.resize_token_embeddings(len(new), mean_resizing=False)
    return model, new


@zoo.register("ple-start", START)
def _build_start(cfg, seed: int):
    base = zoo.get("arith-draft", cfg.scale, seed)
    model, tok = add_principle_token(base.model, base.tokenizer, seed)
    problems = arithmetic.sample_problems(cfg.n_train, seed, stream="ple-sft")
    rng = numpy_rng(seed, "ple-sloppy")
    prompts, completions = [], []
    for p in problems:
        prompts += [with_principle(p.prompt), p.prompt]
        completions += [p.solution, sloppy_solution(p, cfg.sloppiness, rng)]
    result = train(model, lm_batches(tok, prompts, completions, cfg.batch_size, seed), cfg.steps, lr=cfg.lr,
                   desc=f"ple-start (seed {seed})")
    return model, tok, {"losses": result.losses, "base_path": str(base.path.name)}


def sft_demonstrations(n: int, sloppiness: float, seed: int) -> tuple[list[str], list[str]]:
    """The SFT set as the plain-prompt policy sees it: half clean, half sloppy answers, no principle marker."""
    problems = arithmetic.sample_problems(n, seed, stream="ple-sft-more")
    rng = numpy_rng(seed, "ple-sft-more")
    return ([p.prompt for p in problems],
            [p.solution if i % 2 == 0 else sloppy_solution(p, sloppiness, rng) for i, p in enumerate(problems)])


# --- one iteration's data ---------------------------------------------------------------------------------------

@dataclass
class Pairs:
    """One iteration's generated data: queries, the plain and principle-guided answers and their rewards."""

    problems: list[arithmetic.Problem]
    plain: list[str]
    principle: list[str]
    reward_plain: np.ndarray
    reward_principle: np.ndarray

    @property
    def margin(self) -> np.ndarray:
        return self.reward_principle - self.reward_plain


def sample_answers(model, tok, prompts: Sequence[str], generator: torch.Generator) -> list[str]:
    """One sampled (temperature 1) answer per prompt."""
    return generate(model, tok, list(prompts), _MAX_NEW, temperature=1.0, generator=generator).texts


def generate_pairs(model, tok, problems: Sequence[arithmetic.Problem], generator: torch.Generator) -> Pairs:
    """y ~ π(·|x) and y_p ~ π(·|p⊕x) for every query (one batched sampling call), scored by the reward model."""
    answers = sample_answers(model, tok, [p.prompt for p in problems] + [with_principle(p.prompt) for p in problems],
                             generator)
    plain, guided = answers[:len(problems)], answers[len(problems):]
    return Pairs(list(problems), plain, guided, np.array([reward(p, y) for p, y in zip(problems, plain)]),
                 np.array([reward(p, y) for p, y in zip(problems, guided)]))


@torch.no_grad()
def expected_step_reward(model, tok, prompts: Sequence[str], problems: Sequence[arithmetic.Problem]) -> np.ndarray:
    """Per problem, the mean over reference steps of π(step_k | prompt, correct steps < k), in one teacher-forced pass.

    This is the reward (fraction of verified steps) the policy expects when each step is judged given the correct
    prefix: a cheap, noise-free stand-in for the reward of sampled answers (which also compound early errors)."""
    batch = encode_completions(tok, prompts, [p.solution for p in problems])
    logp = token_logprobs(model, batch)  # [B, T-1], zero outside the completion
    out = np.empty(len(problems))
    for i, p in enumerate(problems):
        row = logp[i][batch["completion_mask"][i, 1:].bool()]
        lengths = [len(s) for s in p.steps()]
        out[i] = float(torch.stack([c.sum() for c in torch.split(row, lengths)]).exp().mean())
    return out


def evaluate(model, tok, problems: Sequence[arithmetic.Problem]) -> dict[str, float]:
    """Mean held-out expected reward without (`plain`) and with (`principle`) the principle marker."""
    return {"plain": float(expected_step_reward(model, tok, [p.prompt for p in problems], problems).mean()),
            "principle": float(expected_step_reward(model, tok, [with_principle(p.prompt) for p in problems],
                                                    problems).mean())}


# --- the training step of every method ----------------------------------------------------------------------

def _encode(tok, problems, completions):
    """Training inputs: always the *plain* query (the principle marker never enters training)."""
    return encode_completions(tok, [p.prompt for p in problems], completions, add_eos=True)


def _pair_batches(tok, pairs: Pairs, rank: np.ndarray, chosen_is_principle: np.ndarray, refs: torch.Tensor,
                  batch_size: int, seed: int):
    g = torch_generator(seed, "ple-pairs")
    n = len(pairs.problems)
    while True:
        idx = torch.randint(n, (batch_size,), generator=g).numpy()
        probs = [pairs.problems[i] for i in idx]
        yield {"plain": _encode(tok, probs, [pairs.plain[i] for i in idx]),
               "principle": _encode(tok, probs, [pairs.principle[i] for i in idx]),
               "rank": torch.as_tensor(rank[idx]),
               "r_plain": torch.as_tensor(pairs.reward_plain[idx], dtype=torch.float32),
               "r_principle": torch.as_tensor(pairs.reward_principle[idx], dtype=torch.float32),
               "chosen_is_principle": torch.as_tensor(chosen_is_principle[idx]),
               "refs": refs[idx]}


def ple_objective(sft_temperature: float):
    """The PLE loss of a batch: ranking loss on pairs routed to ranking, weighted SFT on the rest."""
    def loss(model, b):
        lp, lpp = mean_logprob(model, b["plain"]), mean_logprob(model, b["principle"])
        w = sft_weights(b["r_plain"], b["r_principle"], sft_temperature)
        per_pair = torch.where(b["rank"], ranking_loss(lp, lpp), weighted_sft_loss(lp, lpp, w))
        return per_pair.mean()
    return loss


def _sft_on(choose_principle: bool | None):
    """SFT (mean token NLL) on y_p (`True`), on y (`False`) or on the pair's better answer (`None`)."""
    def loss(model, b):
        pick = b["chosen_is_principle"] if choose_principle is None else torch.full_like(b["rank"], choose_principle)
        lp, lpp = mean_logprob(model, b["plain"]), mean_logprob(model, b["principle"])
        return -torch.where(pick, lpp, lp).mean()
    return loss


def _dpo(beta: float):
    def loss(model, b):
        lp = token_logprobs(model, b["plain"]).sum(-1)
        lpp = token_logprobs(model, b["principle"]).sum(-1)
        c = b["chosen_is_principle"]
        ref_p, ref_pp = b["refs"][:, 0], b["refs"][:, 1]
        return dpo_loss(torch.where(c, lpp, lp), torch.where(c, lp, lpp),
                        torch.where(c, ref_pp, ref_p), torch.where(c, ref_p, ref_pp), beta).mean()
    return loss


@torch.no_grad()
def _reference_logprobs(model, tok, pairs: Pairs) -> torch.Tensor:
    lp = token_logprobs(model, _encode(tok, pairs.problems, pairs.plain)).sum(-1)
    lpp = token_logprobs(model, _encode(tok, pairs.problems, pairs.principle)).sum(-1)
    return torch.stack([lp, lpp], -1)


def method_tau(method: str, cfg) -> np.ndarray | None:
    """The threshold schedule a PLE variant uses (None for methods without one)."""
    if method in ("ple", "ranking_only"):
        return threshold_schedule(cfg.tau0, cfg.alpha, cfg.n_iterations)
    if method == "constant_tau":
        return threshold_schedule(cfg.tau0, 1.0, cfg.n_iterations)
    if method == "weighted_sft_only":
        return np.full(cfg.n_iterations, np.inf)
    return None


def train_iteration(model, tok, method: str, pairs: Pairs, tau: float | None, cfg, seed: int) -> dict:
    """One iteration of `method` on `pairs` (in place); returns the share of pairs routed to ranking."""
    better = pairs.reward_principle >= pairs.reward_plain
    rank = route(pairs.reward_plain, pairs.reward_principle, tau) if tau is not None else np.zeros(len(better), bool)
    keep = rank if method == "ranking_only" else np.ones(len(rank), bool)
    if not keep.any():
        return {"ranked_share": float(rank.mean())}
    sub = Pairs([p for p, k in zip(pairs.problems, keep) if k], [y for y, k in zip(pairs.plain, keep) if k],
                [y for y, k in zip(pairs.principle, keep) if k], pairs.reward_plain[keep],
                pairs.reward_principle[keep])
    refs = _reference_logprobs(model, tok, sub) if method == "dpo" else torch.zeros(len(sub.problems), 2)
    loss_fn = {"raft": _sft_on(None), "context_distillation": _sft_on(True), "dpo": _dpo(cfg.dpo_beta)}.get(
        method, ple_objective(cfg.sft_temperature))
    batches = _pair_batches(tok, sub, rank[keep], better[keep], refs, cfg.batch_size, seed)
    train(model, batches, cfg.train_steps, lr=cfg.lr, loss_fn=loss_fn, desc=method)
    return {"ranked_share": float(rank.mean())}


@dataclass
class Run:
    """One method's trajectory: held-out rewards at the start and after every iteration, ranked shares."""

    method: str
    seed: int
    plain: list[float] = field(default_factory=list)
    principle: list[float] = field(default_factory=list)
    ranked_share: list[float] = field(default_factory=list)

    @property
    def gap(self) -> np.ndarray:
        return np.array(self.principle) - np.array(self.plain)


def start_model(scale: str, seed: int):
    """The principled starting model (zoo entry `ple-start`, trained once per scale and seed)."""
    z = zoo.get("ple-start", scale, seed)
    return z.model, z.tokenizer


def run_method(method: str, cfg, seed: int, eval_problems: Sequence[arithmetic.Problem]) -> Run:
    """Iterate `method` from the principled starting model for `cfg.n_iterations` iterations."""
    if method not in METHODS + ABLATIONS:
        raise ValueError(f"unknown method {method!r}; valid methods: {', '.join(METHODS + ABLATIONS)}")
    model, tok = start_model(cfg.scale, seed)
    taus = method_tau(method, cfg)
    run = Run(method, seed)
    ev = evaluate(model, tok, eval_problems)
    run.plain.append(ev["plain"]), run.principle.append(ev["principle"])
    sft_prompts, sft_completions = sft_demonstrations(cfg.n_queries * cfg.n_iterations,
                                                      START[cfg.scale]["sloppiness"], seed)
    g = torch_generator(seed, "ple-generate", method)
    for i in range(cfg.n_iterations):
        if method == "sft":
            batches = lm_batches(tok, sft_prompts, sft_completions, cfg.batch_size, seed + 1000 * i)
            train(model, batches, cfg.train_steps, lr=cfg.lr, desc="sft")
        else:
            queries = arithmetic.sample_problems(cfg.n_queries, seed, stream=f"ple-queries-{i}")
            pairs = generate_pairs(model, tok, queries, g)
            stats = train_iteration(model, tok, method, pairs, None if taus is None else float(taus[i]), cfg,
                                    seed + 1000 * i)
            run.ranked_share.append(stats["ranked_share"])
        ev = evaluate(model, tok, eval_problems)
        run.plain.append(ev["plain"]), run.principle.append(ev["principle"])
    return run


def run_all(cfg) -> dict[str, list[Run]]:
    """The config's methods at `cfg.seeds` and its ablations at `cfg.ablation_seeds`, on the same held-out queries."""
    eval_problems = arithmetic.sample_problems(cfg.n_eval, 0, stream="ple-eval")
    runs = {m: [run_method(m, cfg, s, eval_problems) for s in cfg.seeds] for m in cfg.methods}
    return runs | {m: [run_method(m, cfg, s, eval_problems) for s in cfg.ablation_seeds] for m in cfg.ablations}


def summary(runs: dict[str, list[Run]]) -> dict[str, float]:
    """The claims' measurements: final plain reward per method and the gap reduction of PLE and SFT."""
    out = {m: float(np.mean([r.plain[-1] for r in rs])) for m, rs in runs.items()}
    for m in ("ple", "sft"):
        if m in runs:
            out[f"{m}_gap_reduction"] = float(np.mean([r.gap[0] - r.gap[-1] for r in runs[m]]))
    return out
