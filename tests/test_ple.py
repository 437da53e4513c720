import itertools

import numpy as np
import pytest
import torch
from conftest import ARCHITECTURE_FAMILIES

from icml25 import ple
from icml25.core import arithmetic, models, tinylm
from icml25.core.train import lm_loss


@pytest.fixture(scope="module")
def tiny():
    tok = ple.principled_tokenizer()
    return tinylm.make_model("nano", tok, seed=0), tok


def fake_pairs(n=12, seed=0):
    rng = np.random.default_rng(seed)
    problems = arithmetic.sample_problems(n, seed, max_ops=3)
    plain = [ple.sloppy_solution(p, 0.5, rng) for p in problems]
    return ple.Pairs(problems, plain, [p.solution for p in problems],
                     np.array([ple.reward(p, y) for p, y in zip(problems, plain)]), np.ones(n))


def test_threshold_schedule_decays_geometrically():
    taus = ple.threshold_schedule(0.2, 0.9, 6)
    assert np.allclose(taus, 0.2 * 0.9 ** np.arange(6))
    assert np.all(np.diff(taus) < 0)
    assert np.allclose(ple.threshold_schedule(0.2, 1.0, 4), 0.2)


@pytest.mark.parametrize("tau0, alpha", [(0.2, 0.0), (0.2, 1.5), (0.2, -0.1), (-0.1, 0.9)])
def test_bad_schedule_raises(tau0, alpha):
    with pytest.raises(ValueError, match="tau0|alpha"):
        ple.threshold_schedule(tau0, alpha, 3)


def test_ranked_share_never_decreases_as_tau_falls():
    rng = np.random.default_rng(0)
    r, rp = rng.integers(0, 5, 200) / 4, rng.integers(0, 5, 200) / 4
    shares = [ple.route(r, rp, t).mean() for t in ple.threshold_schedule(0.9, 0.7, 15)]
    assert np.all(np.diff(shares) >= 0) and shares[-1] > shares[0]


def test_each_pair_gets_exactly_one_loss(tiny):
    model, tok = tiny
    pairs = fake_pairs()
    rank = ple.route(pairs.reward_plain, pairs.reward_principle, 0.3)
    assert 0 < rank.sum() < len(rank)
    b = next(ple._pair_batches(tok, pairs, rank, np.ones(len(rank), bool), torch.zeros(len(rank), 2), 32, 0))
    lp, lpp = ple.mean_logprob(model, b["plain"]), ple.mean_logprob(model, b["principle"])
    w = ple.sft_weights(b["r_plain"], b["r_principle"], 0.1)
    expected = sum(ple.ranking_with_anchor(lp[i], lpp[i]) if b["rank"][i] else
                   ple.weighted_sft_loss(lp[i:i + 1], lpp[i:i + 1], w[i:i + 1])[0] for i in range(32)) / 32
    assert torch.allclose(ple.ple_objective(0.1)(model, b), expected, atol=1e-5)


def test_sft_weights():
    w = ple.sft_weights(torch.tensor([0.2, 0.5, 0.9]), torch.tensor([0.8, 0.5, 0.1]), 0.1)
    assert torch.all(w > 0) and torch.allclose(w.sum(-1), torch.ones(3))
    assert torch.allclose(w[1], torch.tensor([0.5, 0.5]))
    assert w[0, 1] > w[0, 0] and w[2, 0] > w[2, 1]
    with pytest.raises(ValueError, match="temperature"):
        ple.sft_weights(torch.tensor([0.0]), torch.tensor([1.0]), 0.0)


def test_ranking_loss_zero_when_ranked_and_gradient_sign_otherwise():
    assert ple.ranking_loss(torch.tensor(-2.0), torch.tensor(-1.0)) == 0
    lp, lpp = torch.tensor(-1.0, requires_grad=True), torch.tensor(-2.0, requires_grad=True)
    loss = ple.ranking_loss(lp, lpp)
    loss.backward()
    assert loss > 0 and lp.grad > 0 and lpp.grad < 0  # descent lowers p̄(y|x) and raises p̄(y_p|x)


def test_training_inputs_never_contain_the_principle(tiny):
    _, tok = tiny
    pairs = fake_pairs()
    assert ple.with_principle(pairs.problems[0].prompt).startswith(ple.PRINCIPLE)
    p_id = tok.convert_tokens_to_ids(ple.PRINCIPLE)
    batches = ple._pair_batches(tok, pairs, np.zeros(12, bool), np.ones(12, bool), torch.zeros(12, 2), 16, 0)
    for _ in range(3):
        b = next(batches)
        assert not (b["plain"]["input_ids"] == p_id).any() and not (b["principle"]["input_ids"] == p_id).any()
    prompts, _ = ple.sft_demonstrations(20, 0.3, 0)
    assert not any(ple.PRINCIPLE in p for p in prompts)


def test_reward_is_fraction_of_verified_steps():
    p = arithmetic.Problem((3, 4, 2), ("+", "*"))
    assert ple.reward(p, p.solution) == 1.0 and ple.reward(p, "") == 0.0
    steps = p.steps()
    assert ple.reward(p, steps[0] + "1*2=2;" + steps[2]) == pytest.approx(2 / 3)


def test_ranking_keeps_the_sft_anchor_on_the_better_answer():
    # once ranked right the hinge is zero, but the anchor still raises p̄(y_p|x) (RRHF's L_rank + L_ft)
    lp, lpp = torch.tensor(-2.0, requires_grad=True), torch.tensor(-1.0, requires_grad=True)
    loss = ple.ranking_with_anchor(lp, lpp)
    loss.backward()
    assert loss.item() == pytest.approx(1.0) and lpp.grad < 0 and lp.grad == 0
    # ranked wrong: the hinge lowers p̄(y|x) and both terms raise p̄(y_p|x)
    lp, lpp = torch.tensor(-1.0, requires_grad=True), torch.tensor(-2.0, requires_grad=True)
    ple.ranking_with_anchor(lp, lpp).backward()
    assert lp.grad > 0 and lpp.grad == -2.0


def test_every_method_gets_the_same_sft_batches_and_their_loss(tiny):
    model, tok = tiny
    cfg = ple.config("smoke")
    a, b = ple.sft_batches(tok, cfg, 0, 1), ple.sft_batches(tok, cfg, 0, 1)
    for _ in range(2):
        x, y = next(a), next(b)
        assert torch.equal(x["input_ids"], y["input_ids"])
    pairs = fake_pairs()
    rank = np.zeros(12, bool)
    batch = next(ple.with_sft(ple._pair_batches(tok, pairs, rank, np.ones(12, bool), torch.zeros(12, 2), 8, 0),
                              ple.sft_batches(tok, cfg, 0, 0)))
    own = ple.ple_objective(0.1)
    assert torch.allclose(ple.plus_sft(own)(model, batch), own(model, batch) + lm_loss(model, batch["sft"]))


def test_summary_pairs_methods_by_seed_and_ignores_the_final_principle_reward():
    def run(method, seed, final_plain, final_principle=0.0):
        return ple.Run(method, seed, {"plain": 0.4, "principle": 0.6, "sem": 0.01},
                       {"plain": final_plain, "principle": final_principle})

    runs = {"ple": [run("ple", 0, 0.5), run("ple", 1, 0.6)], "sft": [run("sft", 0, 0.45), run("sft", 1, 0.5)],
            "raft": [run("raft", 0, 0.5), run("raft", 1, 0.7)], "dpo": [run("dpo", 0, 0.3), run("dpo", 1, 0.3)]}
    m = ple.summary(runs)
    assert m["ple_minus_sft"] == pytest.approx([0.05, 0.1]) and m["ple_minus_raft"] == pytest.approx([0.0, -0.1])
    assert m["share_of_gap_closed"] == pytest.approx([0.5, 1.0]) and m["initial_gap"] == pytest.approx([0.2, 0.2])
    # a principle-guided prompt that got worse changes nothing the claims read
    worse = {k: [ple.Run(r.method, r.seed, r.start, {"plain": r.final["plain"], "principle": -1.0}) for r in v]
             for k, v in runs.items()}
    assert ple.summary(worse) == m


def test_paired_permutation_p_enumerates_every_swap_of_a_seeds_two_values():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=8), rng.normal(size=8)
    d = x - y
    flips = np.array(list(itertools.product([1, -1], repeat=8)))
    assert ple.paired_permutation_p(x, y) == pytest.approx(np.mean((flips * d).mean(1) >= d.mean() - 1e-12))
    assert ple.paired_permutation_p(y + 1, y) == pytest.approx(1 / 256)
    assert ple.paired_permutation_p(y, y) == 1.0
    assert np.isnan(ple.paired_permutation_p([0.5], [0.1]))


def test_every_baseline_gets_its_share_of_the_gap_and_a_p_against_ple():
    def run(method, seed, final_plain):
        return ple.Run(method, seed, {"plain": 0.4, "principle": 0.6, "sem": 0.01}, {"plain": final_plain})

    runs = {"ple": [run("ple", s, 0.5 + 0.01 * s) for s in range(6)],
            "sft": [run("sft", s, 0.4) for s in range(6)], "raft": [run("raft", s, 0.6) for s in range(6)]}
    out = ple.gap_against_baselines(runs, ["sft", "raft"])
    assert out["sft"]["shares"] == pytest.approx([0.0] * 6) and out["raft"]["shares"] == pytest.approx([1.0] * 6)
    assert out["sft"]["p_ple_greater"] == pytest.approx(1 / 64) and out["raft"]["p_ple_greater"] == 1.0
    assert ple.summary(runs)["share_of_gap_closed"] == ple.share_of_gap_closed(runs["ple"])


def test_adding_the_principle_token_keeps_the_old_logits():
    old = tinylm.char_tokenizer(arithmetic.ALPHABET)
    model = tinylm.make_model("nano", old, seed=0)
    new_model, new_tok = ple.add_principle_token(model, old, seed=0)
    assert len(new_tok) == len(old) + 1
    torch.manual_seed(123)  # the global RNG must not matter
    again, _ = ple.add_principle_token(model, old, seed=0)
    assert torch.equal(again.get_input_embeddings().weight, new_model.get_input_embeddings().weight)
    ids = torch.tensor([old("3+4|")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, new_model(input_ids=ids).logits[..., :len(old)])


def test_unknown_method_raises():
    with pytest.raises(ValueError, match="valid methods"):
        ple.run_method("ppo", ple.config("smoke"), 0, [], {})


# --- any causal LM: the PLE losses on tiny GPT-2, Llama and Qwen2 checkpoints ---------------------------------


def _hf_completion_nll(model, tok, prompt: str, completion: str) -> float:
    """The plain reference: the model's own mean cross-entropy over the completion tokens (and eos), one row, no
    padding, the prompt masked with -100."""
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    c = tok(completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    labels = torch.tensor([[-100] * len(p) + c])
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([p + c]), labels=labels).loss)


@pytest.fixture(scope="module")
def family_models(family_checkpoints):
    paths = family_checkpoints(ple.principled_tokenizer())
    return {f: models.get(str(path), device="cpu") for f, path in paths.items()}


@pytest.mark.parametrize("family", ARCHITECTURE_FAMILIES)
def test_ple_losses_on_any_causal_lm(family_models, family):
    z = family_models[family]
    model, tok = z.model, z.tokenizer
    pairs = fake_pairs(8)
    batch = {"plain": ple._encode(tok, pairs.problems, pairs.plain),
             "principle": ple._encode(tok, pairs.problems, pairs.principle)}
    with torch.no_grad():
        lp, lpp = ple.mean_logprob(model, batch["plain"]), ple.mean_logprob(model, batch["principle"])
    # p̄(y|x) is minus the model's own mean completion cross-entropy, padding and prompt excluded
    ref_p = torch.tensor([-_hf_completion_nll(model, tok, p.prompt, y) for p, y in zip(pairs.problems, pairs.plain)])
    ref_pp = torch.tensor([-_hf_completion_nll(model, tok, p.prompt, y)
                           for p, y in zip(pairs.problems, pairs.principle)])
    assert torch.allclose(lp, ref_p, atol=1e-5) and torch.allclose(lpp, ref_pp, atol=1e-5)
    # the hinge is zero exactly where the better answer already has the higher length-normalised log-prob
    for a, b in ((lp, lpp), (lpp, lp)):
        hinge = ple.ranking_loss(a, b)
        assert torch.equal(hinge == 0, b >= a) and torch.allclose(hinge[b < a], (a - b)[b < a])
    # there, the ranking loss with the anchor is the plain NLL of the better answer (RRHF's L_ft alone)
    better_is_p = lpp >= lp
    anchored = ple.ranking_with_anchor(torch.where(better_is_p, lp, lpp), torch.where(better_is_p, lpp, lp))
    assert torch.allclose(anchored, torch.where(better_is_p, -ref_pp, -ref_p), atol=1e-5)
    # PLE with every pair routed to weighted SFT at equal rewards is the mean of the two NLLs
    b = dict(batch, rank=torch.zeros(8, dtype=torch.bool), r_plain=torch.ones(8), r_principle=torch.ones(8))
    with torch.no_grad():
        assert ple.ple_objective(0.1)(model, b) == pytest.approx(float(-(ref_p + ref_pp).mean() / 2), abs=1e-5)


@pytest.mark.parametrize("family", ARCHITECTURE_FAMILIES)
def test_principled_start_from_any_causal_lm(family_checkpoints, family):
    # a checkpoint whose tokenizer lacks the principle: the marker is added without changing the old logits, and
    # the start model is built from the folder through the `model` knob
    old = tinylm.char_tokenizer(arithmetic.ALPHABET)
    path = family_checkpoints(old)[family]
    base = models.get(str(path), device="cpu")
    new_model, new_tok = ple.add_principle_token(base.model, base.tokenizer, seed=0)
    assert len(new_tok) == len(old) + 1 and new_tok.convert_tokens_to_ids(ple.PRINCIPLE) == len(old)
    ids = torch.tensor([old("3+4|")["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(base.model(input_ids=ids).logits, new_model(input_ids=ids).logits[..., :len(old)],
                              atol=1e-6)
    cfg = ple.config("smoke", model=str(path))
    policy, tok = ple.start_model(cfg)
    assert tok(ple.with_principle("3+4|"), add_special_tokens=False)["input_ids"][0] == len(old)
    assert policy.get_input_embeddings().num_embeddings == len(old) + 1
