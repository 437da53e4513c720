"""Invariants of the implicit PRM: telescoping, the Proposition by enumeration, θ = ref, padding, β-scale
invariance of min-step best-of-N, the direction of one CE step, and the bad inputs."""

import copy
import itertools
import json
import math

import numpy as np
import pytest
import torch

from icml25 import implicit_prm as ip
from icml25.core import arithmetic, models, tinylm, zoo
from icml25.core.generation import encode_completions, select_rows, sequence_logprobs
from icml25.core.seeding import one_thread

TOK = tinylm.char_tokenizer(arithmetic.ALPHABET)
PROMPTS = ["3+4*2|", "7-1|", "2*2*2-1|"]
COMPLETIONS = ["3+4=7;7*2=4;A4", "7-1=5;A5", "2*2=4;4*2=8;8-1=7;A7"]


@pytest.fixture(scope="module")
def pair():
    ref = tinylm.make_model("nano", TOK, seed=0)
    policy = tinylm.make_model("nano", TOK, seed=1)
    return policy.eval(), ref.eval()


def test_step_rewards_telescope_to_the_outcome_reward(pair):
    policy, ref = pair
    beta = 0.3
    prm = ip.ImplicitPRM(policy, ref, TOK, beta)
    steps = prm.step_rewards(PROMPTS, COMPLETIONS)
    with torch.no_grad():
        expected = beta * (sequence_logprobs(policy, TOK, PROMPTS, COMPLETIONS)
                           - sequence_logprobs(ref, TOK, PROMPTS, COMPLETIONS))
    assert [len(s) for s in steps] == [len(arithmetic.split_steps(c)) for c in COMPLETIONS]
    np.testing.assert_allclose([s.sum() for s in steps], expected.numpy(), atol=1e-5)
    np.testing.assert_allclose(prm.outcome_rewards(PROMPTS, COMPLETIONS), expected.numpy(), atol=1e-5)


def test_cumsum_gather_diff_equals_segment_sums(pair):
    policy, ref = pair
    batch = encode_completions(TOK, PROMPTS, COMPLETIONS)
    rewards = ip.token_log_ratios(policy, ref, batch).detach()
    ends = ip.step_ends(TOK, batch)
    for a, b in zip(ip.process_rewards(rewards, ends), ip.process_rewards_by_segments(rewards, ends)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_theta_equal_ref_gives_zero_rewards_and_the_objectives_values_at_zero(pair):
    _, ref = pair
    policy = copy.deepcopy(ref)
    prm = ip.ImplicitPRM(policy, ref, TOK, beta=0.5)
    assert all(np.all(np.abs(s) < 1e-6) for s in prm.step_rewards(PROMPTS, COMPLETIONS))
    batch = encode_completions(TOK, PROMPTS, COMPLETIONS)
    for label in (0, 1):
        batch["labels"] = torch.full((len(PROMPTS),), label)
        assert math.isclose(ip.ce_loss(policy, ref, batch, 0.5).item(), math.log(2), abs_tol=1e-6)
    pairs = encode_completions(TOK, PROMPTS[:2] * 2, COMPLETIONS[:2] + COMPLETIONS[1:3])
    assert math.isclose(ip.dpo_loss(policy, ref, pairs, 0.5).item(), math.log(2), abs_tol=1e-6)
    # NCA at r = 0: -log σ(0) - ½ log σ(0) - ½ log σ(0) = 2 log 2; KTO at r = 0 with z = 0: 1 - σ(0) = ½
    assert math.isclose(ip.nca_loss(policy, ref, pairs, 0.5).item(), 2 * math.log(2), abs_tol=1e-6)
    batch["kl"] = encode_completions(TOK, PROMPTS, COMPLETIONS[1:] + COMPLETIONS[:1])
    assert math.isclose(ip.kto_loss(policy, ref, batch, 0.5).item(), 0.5, abs_tol=1e-6)


def test_proposition_holds_exactly_on_an_enumerable_model():
    policy, ref = ip.TabularLM(3, 3, seed=1), ip.TabularLM(3, 3, seed=2)
    # both are normalised distributions over the 27 sequences
    assert math.isclose(sum(math.exp(ref.logprob(y)) for y in ref.sequences()), 1.0, rel_tol=1e-9)
    for beta in (0.1, 0.7, 2.0):
        for y in itertools.product(range(3), repeat=3):
            for t in range(4):
                lhs = ip.implicit_q(policy, ref, y, t, beta)
                rhs = ip.expected_exp_reward(policy, ref, y, t, beta)
                assert math.isclose(lhs, rhs, abs_tol=1e-9), (y, t, beta, lhs, rhs)
    # and it is not a tautology: a different policy's q differs from this one's right side
    other = ip.TabularLM(3, 3, seed=3)
    assert not math.isclose(ip.implicit_q(other, ref, (0, 1, 2), 2, 0.7),
                            ip.expected_exp_reward(policy, ref, (0, 1, 2), 2, 0.7), abs_tol=1e-3)


def test_padding_and_prompt_tokens_do_not_change_rewards(pair):
    policy, ref = pair
    alone = ip.ImplicitPRM(policy, ref, TOK, 0.5, batch_size=1).step_rewards(PROMPTS, COMPLETIONS)
    together = ip.ImplicitPRM(policy, ref, TOK, 0.5).step_rewards(PROMPTS, COMPLETIONS)
    for a, b in zip(alone, together):
        np.testing.assert_allclose(a, b, atol=1e-5)
    batch = encode_completions(TOK, PROMPTS, COMPLETIONS)
    ratios = ip.token_log_ratios(policy, ref, batch).detach()
    outside = batch["completion_mask"][:, 1:] == 0
    assert outside.any() and torch.all(ratios[outside] == 0)


def test_min_step_best_of_n_is_invariant_to_a_positive_beta_scale(pair):
    policy, ref = pair
    problems = [arithmetic.parse_prompt(p) for p in PROMPTS]
    texts = [[COMPLETIONS[i], arithmetic.corrupt_step(problems[i], 0, np.random.default_rng(i)) + "A0",
              problems[i].solution, COMPLETIONS[(i + 1) % 3]] for i in range(3)]
    answers = np.array([[-1 if (a := arithmetic.final_answer(t)) is None else a for t in row] for row in texts])
    correct = np.array([[arithmetic.is_correct(p, t) for t in row] for p, row in zip(problems, texts)])
    labels = [[arithmetic.step_labels(p, t) for t in row] for p, row in zip(problems, texts)]
    cands = ip.Candidates(problems, texts, answers, correct, labels)
    picks = []
    for beta in (0.05, 0.5, 5.0):
        scores = ip.prm_scores(ip.step_rewards_grid(ip.ImplicitPRM(policy, ref, TOK, beta), cands), beta)
        best = scores["prm_min"].argmax(1)
        picks.append((best.tolist(), ip.best_of_n(cands, scores, 4)["prm_min"], scores["prm_min_q"].argmax(1).tolist()))
    assert all(p == picks[0] for p in picks)


@pytest.mark.parametrize("label", [0, 1])
def test_one_ce_step_moves_log_likelihood_toward_the_label(pair, label):
    _, ref = pair
    policy = copy.deepcopy(ref).train()
    batch = encode_completions(TOK, PROMPTS[:1], COMPLETIONS[:1])
    batch["labels"] = torch.tensor([label])
    with torch.no_grad():
        before = float(sequence_logprobs(policy, TOK, PROMPTS[:1], COMPLETIONS[:1]))
    opt = torch.optim.SGD(policy.parameters(), lr=0.05)
    ip.ce_loss(policy, ref, batch, beta=0.5).backward()
    opt.step()
    with torch.no_grad():
        after = float(sequence_logprobs(policy, TOK, PROMPTS[:1], COMPLETIONS[:1]))
    assert (after - before) * (1 if label else -1) > 1e-4


def test_bad_inputs_raise_clear_errors(pair):
    policy, ref = pair
    other = tinylm.make_model("nano", tinylm.char_tokenizer("abc"), seed=0)
    with pytest.raises(ValueError, match="different vocabularies"):
        ip.ImplicitPRM(other, ref, TOK, 0.5)
    with pytest.raises(ValueError, match="no step delimiter"):
        ip.ImplicitPRM(policy, ref, TOK, 0.5).step_rewards(["3+4|"], ["A7"])
    assert len(ip.ImplicitPRM(policy, ref, TOK, 0.5).step_rewards(["3+4|"], ["A7"], on_missing="whole")[0]) == 1
    with pytest.raises(ValueError, match="beta"):
        ip.ImplicitPRM(policy, ref, TOK, 0.0)
    one_each = ip.Rollouts([arithmetic.parse_prompt("3+4|")], [0], ["3+4=7;A7"], [True])
    with pytest.raises(ValueError, match="no pairs"):
        next(ip.pair_batches(TOK, one_each, 4, 0))
    with pytest.raises(ValueError, match="valid settings"):
        ip.config("ci", betta=0.1)
    with pytest.raises(ValueError, match="aggregation"):
        ip.aggregate_steps(np.zeros(2), "mean")
    with pytest.raises(ValueError, match="objective"):
        ip.train_implicit_prm(ref, TOK, one_each, "ipo", 0.5, 1, 2, 1e-3, 0)


def test_roc_auc_matches_pair_counting():
    rng = np.random.default_rng(0)
    s, y = rng.integers(0, 5, 40).astype(float), rng.random(40) < 0.4
    pairs = [(a > b) + 0.5 * (a == b) for a, b in itertools.product(s[y], s[~y])]
    assert math.isclose(ip.roc_auc(s, y), float(np.mean(pairs)), rel_tol=1e-12)
    s[0] = -np.inf  # a response without tokens: ranked last, as a very low finite score would be
    assert ip.roc_auc(s, y) == ip.roc_auc(np.where(np.isinf(s), -1e9, s), y)


def test_selectors_and_rollout_subsets():
    correct = np.array([True, False, False, True])
    answers = np.array([3, 5, 5, 3])
    assert ip.majority_pick(answers, correct) == 0.5  # a 2-2 tie: half right in expectation
    assert ip.majority_pick(answers, correct, np.array([1.0, 0.1, 0.1, 1.0])) == 1.0
    assert ip.argmax_pick(np.array([0.0, 2.0, 2.0, 1.0]), correct) == 0.0
    data = ip.Rollouts([arithmetic.parse_prompt("3+4|"), arithmetic.parse_prompt("1+1|")], [0, 0, 1, 1, 0],
                       ["a", "b", "c", "d", "e"], [True, False, True, True, False])
    first = data.first(1)
    assert first.completions == ["a", "c"] and first.prompt_index == [0, 1]
    assert sorted(ip.preference_pairs(data)) == [(0, 1), (0, 4)]


def _step_once(loss_fn, batch, ref, rows):
    policy = copy.deepcopy(ref).train()
    with torch.no_grad():
        before = ip.implicit_reward(policy, ref, batch, 1.0)
    loss_fn(policy, ref, batch, 1.0).backward()
    torch.optim.SGD(policy.parameters(), lr=0.05).step()
    with torch.no_grad():
        return (ip.implicit_reward(policy, ref, batch, 1.0) - before)[rows]


def test_kto_and_nca_steps_raise_right_responses_and_lower_wrong_ones(pair):
    _, ref = pair
    # KTO: row 0 desirable, row 1 undesirable; the reference point has no gradient
    batch = encode_completions(TOK, PROMPTS[:2], COMPLETIONS[:2])
    batch["labels"] = torch.tensor([1, 0])
    batch["kl"] = encode_completions(TOK, PROMPTS[:2], COMPLETIONS[1::-1])
    moved = _step_once(ip.kto_loss, batch, ref, [0, 1])
    assert moved[0] > 0 > moved[1]
    # NCA and DPO: row 0 chosen, row 1 rejected, for the same prompt
    pairs = encode_completions(TOK, PROMPTS[:1] * 2, [COMPLETIONS[0], "3+4=1;1*2=2;A2"])
    for loss in (ip.nca_loss, ip.dpo_loss):
        moved = _step_once(loss, pairs, ref, [0, 1])
        assert moved[0] > moved[1]
    # NCA pulls the rejected reward down on its own, not only relative to the chosen one
    assert _step_once(ip.nca_loss, pairs, ref, [1]) < 0


def test_nca_equals_its_formula_on_given_rewards(pair, monkeypatch):
    r = torch.tensor([0.3, -1.2, 0.5, 2.0])  # chosen 0.3, -1.2; rejected 0.5, 2.0
    monkeypatch.setattr(ip.objectives, "implicit_reward", lambda *a: r)
    s = torch.sigmoid
    want = np.mean([-math.log(s(w)) - 0.5 * math.log(s(-w)) - 0.5 * math.log(s(-lo))
                    for w, lo in ((r[0], r[2]), (r[1], r[3]))])
    assert math.isclose(ip.nca_loss(None, None, {}, 1.0).item(), want, rel_tol=1e-6)


def test_score_variants_and_official_vote_weights():
    steps = np.array([0.5, -1.0, 2.0, -0.2])
    assert ip.aggregate_steps(steps, "min") == -1.0
    assert ip.aggregate_steps(steps, "min_q") == pytest.approx(-0.5)  # partial sums 0.5, -0.5, 1.5, 1.3
    assert ip.aggregate_steps(steps, "sum") == pytest.approx(1.3)
    # σ(score)-weighted votes: two wrong candidates with score -2 (weight 0.12 each) outvote a right one with score
    # -1.5 (0.18), but not one with score 0 (0.5)
    answers, correct = np.array([3, 3, 5]), np.array([False, False, True])
    problems = [arithmetic.parse_prompt("3+4|")]
    cands = ip.Candidates(problems, [["a", "b", "c"]], answers[None], correct[None], [[[True]] * 3])
    for top, expected in ((-1.5, 0.0), (0.0, 1.0)):
        got = ip.best_of_n(cands, {"s": np.array([[-2.0, -2.0, top]])}, 3, voted=("s",))
        assert got["s_vote"] == expected and got["s"] == 1.0 and got["majority"] == 0.0
    assert "s_vote" not in ip.best_of_n(cands, {"s": np.zeros((1, 3))}, 3)  # only the scores named in `voted`


def test_scores_are_in_the_official_units_log_ratio_times_coef(pair):
    policy, ref = pair
    problems = [arithmetic.parse_prompt(p) for p in PROMPTS]
    cands = ip.Candidates(problems, [[c] for c in COMPLETIONS], np.zeros((3, 1)), np.ones((3, 1), bool),
                          [[arithmetic.step_labels(p, c)] for p, c in zip(problems, COMPLETIONS)])
    for beta in (0.05, 2.0):
        scores = ip.prm_scores(ip.step_rewards_grid(ip.ImplicitPRM(policy, ref, TOK, beta), cands), beta)
        with torch.no_grad():
            raw = (sequence_logprobs(policy, TOK, PROMPTS, COMPLETIONS)
                   - sequence_logprobs(ref, TOK, PROMPTS, COMPLETIONS)).numpy()
        np.testing.assert_allclose(scores["prm_outcome"][:, 0], ip.VOTE_COEF * raw, rtol=1e-4, atol=1e-8)


def test_claim_measurements_are_paired_per_seed_differences():
    def arm(step, bo):
        return {"step_auc": 0.99, ip.STEP_AUC: step, "train": {"outcome_auc": 0.8, "step_auc": 0.7 + step / 10},
                "best_of": {"4": bo}}

    runs = {s: {"arms": {"ce": arm(0.6 + s, {"prm_min": 0.5, "majority": 0.4, "random": 0.3}),
                         "ce_n1": arm(0.5, {"prm_min": 0.35 + s, "majority": 0.4, "random": 0.3})},
                "position": {"step_auc": 0.99, ip.STEP_AUC: 0.55},
                "verifiers": {"4": {"exact": 0.7, "noisy": 0.45, "majority": 0.4, "random": 0.3}}}
            for s in (0, 1)}
    m = ip.claim_measurements(runs, 4)
    assert m["step_auc"] == [0.6, 1.6] and m["n1_minus_random"] == pytest.approx([0.05, 1.05])
    assert m["n1_minus_majority"] == pytest.approx([-0.05, 0.95])
    assert m["prm_minus_majority"] == pytest.approx([0.1, 0.1])
    assert m["oracle_minus_majority"] == pytest.approx([0.3, 0.3]) and m["noisy_minus_random"] == pytest.approx([0.15] * 2)
    assert m["train_step_auc"] == pytest.approx([0.76, 0.86]) and m["n1_train_step_auc"] == pytest.approx([0.75] * 2)
    assert m["n1_minus_main_step_auc"] == pytest.approx([-0.1, -1.1])  # held out, on the same candidates
    null = ip.null_measurements(runs, 4)
    assert null["step_auc"] == [0.55, 0.55] and null.keys() == m.keys()


def test_within_prompt_step_auc_ignores_which_prompt_is_harder():
    """Pooled over prompts, a score that only says which prompt is hard separates right from wrong steps; within
    each prompt it is at chance."""
    labels = [[True, False], [True, True], [False], [True, False]]  # prompts 0, 0, 1, 1
    hard = [np.array([0.0, 0.0]), np.array([0.0, 0.0]), np.array([-1.0]), np.array([-1.0, -1.0])]
    assert ip.within_prompt_step_auc(hard, labels, [0, 0, 1, 1]) == pytest.approx(0.5)
    assert ip.roc_auc([x for r in hard for x in r[:2]], [True, False, True, True, False, True, False]) > 0.5
    right = [np.array([1.0, -1.0]), np.array([1.0, 1.0]), np.array([-1.0]), np.array([1.0, -1.0])]
    assert ip.within_prompt_step_auc(right, labels, [0, 0, 1, 1]) == 1.0


def test_step_verifiers_and_the_position_null():
    problems = arithmetic.sample_problems(2, 0, max_ops=3)
    labels = [[[True, True], [True, False]], [[False], []]]
    cands = ip.Candidates(problems, [["a", "b"], ["c", "d"]], np.zeros((2, 2), int), np.zeros((2, 2), bool), labels)
    v = ip.verifier_scores(cands, 0.0, 0)
    assert v["exact"].tolist() == [[1.0, 0.0], [0.0, 0.0]] and np.array_equal(v["noisy"], v["exact"])
    flipped = ip.verifier_scores(cands, 1.0, 0)["noisy"]
    assert flipped.tolist() == [[0.0, 0.0], [1.0, 0.0]]
    rates = np.array([0.9, 0.4])
    assert [r.tolist() for row in ip.position_rewards(cands, rates) for r in row] == [[0.9, 0.4], [0.9, 0.4], [0.9], []]
    three = [[[True, True, True]]]
    assert ip.position_rewards(ip.Candidates(problems[:1], [["e"]], np.zeros((1, 1), int), np.ones((1, 1), bool),
                                             three), rates)[0][0].tolist() == [0.9, 0.4, 0.4]  # past the last: last


def test_position_rates_count_steps_up_to_the_first_error():
    problems = [arithmetic.parse_prompt(p) for p in PROMPTS]
    right = [p.solution for p in problems]  # 3, 2 and 4 steps (the answer step counts)
    wrong_first = "3+4=8;8*2=6;A6"  # step 1 wrong; the steps after it do not count
    assert arithmetic.step_labels(problems[0], wrong_first)[0] is False
    data = ip.Rollouts(problems, [0, 1, 2, 0], right + [wrong_first], [True, True, True, False])
    np.testing.assert_allclose(ip.position_rates(data), [3 / 4, 1.0, 1.0, 1.0])


def test_the_held_out_step_auc_within_problems_ignores_which_problem_is_harder():
    """Pooled over problems, a score that says only which problem is hard separates right from wrong steps; the
    within-problem step AUC that `step_signal` reads puts it at chance."""
    problems = arithmetic.sample_problems(2, 0, max_ops=3)
    labels = [[[True, False], [True, True]], [[False], [True, False]]]
    cands = ip.Candidates(problems, [["a", "b"], ["c", "d"]], np.zeros((2, 2), int), np.zeros((2, 2), bool), labels)
    hard = [[np.array([0.0, 0.0]), np.array([0.0, 0.0])], [np.array([-1.0]), np.array([-1.0, -1.0])]]
    m = ip.step_metrics(hard, cands)
    assert m["step_auc"] > 0.5 and m[ip.STEP_AUC] == pytest.approx(0.5)


def test_every_prm_trains_its_whole_budget_from_a_copy_of_the_frozen_reference(pair):
    """No stop rule: the step labels decide nothing about training, which runs every one of its `steps`."""
    _, ref = pair
    before = [p.detach().clone() for p in ref.parameters()]
    problems = [arithmetic.parse_prompt(p) for p in PROMPTS]
    data = ip.Rollouts(problems, [0, 1, 2], COMPLETIONS, [True, False, True])
    prm, run = ip.train_implicit_prm(ref, TOK, data, "ce", 0.5, steps=7, batch_size=3, lr=1e-3, seed=0)
    assert len(run.losses) == 7 and prm.reference is ref and prm.policy is not ref
    assert all(torch.equal(a, b) for a, b in zip(before, ref.parameters()))


def test_training_responses_are_the_reference_models_own_samples(pair, monkeypatch):
    """As in the paper (rollouts of the model the PRM starts from), π_ref samples the training responses; the
    generator only samples the test candidates."""
    _, ref = pair
    used = []
    monkeypatch.setattr(ip.training, "sample_rollouts", lambda model, *a: used.append(model))
    ip.training_rollouts(ip.ReferenceCache(ref, TOK), ip.config("smoke"), 0)
    assert used == [ref]


class _FixedRewards:
    """A PRM stand-in whose step rewards are given per completion."""

    def __init__(self, rewards):
        self.rewards = rewards

    def step_rewards(self, prompts, completions, on_missing="whole"):
        return [np.asarray(self.rewards[c], float) for c in completions]


def test_learning_metrics_read_outcomes_of_the_trained_responses_and_steps_over_every_response():
    """A PRM trained on every response: its outcome AUC reads them all, and so does its within-prompt step AUC; a PRM
    on one response per instruction: its outcome AUC reads the responses it was trained on (the first of each
    prompt)."""
    problems = [arithmetic.parse_prompt("3+4|"), arithmetic.parse_prompt("2*3|")]
    # prompt 0: "3+4=7;A7" right, "3+4=8;A8" wrong at step 1; prompt 1: "2*3=6;A5" wrong at step 2, "2*3=6;A6" right
    texts = ["3+4=7;A7", "2*3=6;A5", "3+4=8;A8", "2*3=6;A6"]
    data = ip.Rollouts(problems, [0, 1, 0, 1], texts, [True, False, False, True])
    prm = _FixedRewards({"3+4=7;A7": [1.0, 1.0], "2*3=6;A5": [2.0, -0.5], "3+4=8;A8": [-1.0, 0.0],
                         "2*3=6;A6": [-3.0, -3.0]})
    one, every = ip.learning_metrics(prm, data, responses=1), ip.learning_metrics(prm, data)
    assert one["outcome_auc"] == 1.0  # the trained rows: right (sum 2) above wrong (sum 1.5)
    assert every["outcome_auc"] == 0.5  # sums 2, -6 (right) against 1.5, -1 (wrong): 2 of 4 pairs
    # Steps up to the first error. Prompt 0: right 1, 1 against wrong -1, AUC 1; prompt 1: right 2, -3, -3 against
    # wrong -0.5, AUC 1/3; mean 2/3.
    assert every["step_auc"] == pytest.approx(2 / 3)


def test_a_one_response_prms_step_auc_reads_only_responses_unlike_the_one_it_trained_on():
    """Prompt 0 was sampled four times; the PRM trained on the first, which the second repeats word for word. Its
    step AUC reads the third and fourth alone: right 2 against wrong -1 and 0.5, AUC 1. Read with the copy (right 0,
    0 beside 2) it would be 2/3, and a PRM trained on all four is read on all four: right 0, 0, 0, 0, 2 against
    wrong -1, 0.5, AUC 6/10."""
    problems = [arithmetic.parse_prompt("3+4|")]
    texts = ["3+4=7;A7", "3+4=7;A7", "3+4=8;A8", "3+4=7;A8"]
    data = ip.Rollouts(problems, [0, 0, 0, 0], texts, [True, True, False, False])
    prm = _FixedRewards({"3+4=7;A7": [0.0, 0.0], "3+4=8;A8": [-1.0, 0.0], "3+4=7;A8": [2.0, 0.5]})
    assert ip.learning_metrics(prm, data, responses=1)["step_auc"] == 1.0
    assert ip.learning_metrics(prm, data)["step_auc"] == pytest.approx(0.6)


def test_a_prm_trained_on_every_response_per_prompt_is_read_on_them_all():
    """The experiment passes the main PRM's `responses_per_prompt`, not None: with every response trained on, the
    step AUC reads them all (excluding the trained texts would leave none to read, an undefined AUC)."""
    problems = [arithmetic.parse_prompt("3+4|")]
    texts = ["3+4=7;A7", "3+4=7;A7", "3+4=8;A8", "3+4=7;A8"]
    data = ip.Rollouts(problems, [0, 0, 0, 0], texts, [True, True, False, False])
    prm = _FixedRewards({"3+4=7;A7": [0.0, 0.0], "3+4=8;A8": [-1.0, 0.0], "3+4=7;A8": [2.0, 0.5]})
    for n in (4, 5):
        assert ip.learning_metrics(prm, data, responses=n) == pytest.approx(ip.learning_metrics(prm, data), nan_ok=True)
    assert ip.learning_metrics(prm, data, responses=4)["step_auc"] == pytest.approx(0.6)


def test_the_step_auc_reading_gives_its_standard_error_over_prompts():
    """Two prompts with within-prompt step AUCs 1 and 1/3: mean 2/3, standard error |1 - 1/3| / 2 over 2 prompts."""
    problems = [arithmetic.parse_prompt("3+4|"), arithmetic.parse_prompt("2*3|")]
    texts = ["3+4=7;A7", "2*3=6;A5", "3+4=8;A8", "2*3=6;A6"]
    data = ip.Rollouts(problems, [0, 1, 0, 1], texts, [True, False, False, True])
    prm = _FixedRewards({"3+4=7;A7": [1.0, 1.0], "2*3=6;A5": [2.0, -0.5], "3+4=8;A8": [-1.0, 0.0],
                         "2*3=6;A6": [-3.0, -3.0]})
    m = ip.learning_metrics(prm, data)
    assert m["step_auc_prompts"] == 2 and m["step_auc_se"] == pytest.approx(1 / 3)


def test_the_one_response_budget_record_is_from_calibration_seeds_and_its_summary_counts_the_gate():
    ci = ip.config("ci")
    assert {r["seed"] for r in ip.ONE_RESPONSE_BUDGET} <= set(ci.calibration_seeds)
    assert not {r["seed"] for r in ip.ONE_RESPONSE_BUDGET} & set(ci.seeds)
    assert all(r["lr"] == ci.lr for r in ip.ONE_RESPONSE_BUDGET)
    rows = [{"seed": s, "steps": b, "step_auc": a, "step_auc_se": 0.04}
            for s, b, a in ((0, 100, 0.9), (0, 200, 0.9), (1, 200, 0.79), (2, 200, 0.85), (3, 200, 0.81))]
    (summary,) = ip.budget_summary(rows, 0.8, 0.75)  # the one-seed budget is left out
    assert summary == {"steps": 200, "seeds": 4, "reach_bound": 3, "gate_holds": True, "lowest": 0.79,
                       "mean": pytest.approx(0.8375), "mean_se": pytest.approx(0.04)}
    assert not ip.budget_summary(rows, 0.8, 0.8)[0]["gate_holds"]


def test_one_response_is_gated_by_the_main_prms_step_regime_not_by_its_own():
    """The positive control is the main CE PRM's training step AUC; the one-response PRM's own is reported only."""
    good, _ = ip.ONE_RESPONSE.examples[:2]
    low_n1 = dict(good, n1_train_step_auc=[0.5] * 3)
    assert ip.ONE_RESPONSE.decide(low_n1, unit_floor=False)["verdict"] == "reproduced"
    no_control = ip.ONE_RESPONSE.decide(dict(good, train_step_auc=[0.85, 0.7, 0.7]), unit_floor=False)
    assert no_control["verdict"] == "inconclusive" and "prm_steps_learned" in no_control["reason"]


def test_the_main_prm_record_is_from_calibration_seeds_and_reads_the_main_prm():
    ci = ip.config("ci")
    assert {r["seed"] for r in ip.MAIN_PRM_CALIBRATION} == set(ci.calibration_seeds)
    assert all(r["steps"] == ci.train_steps and r["lr"] == ci.lr for r in ip.MAIN_PRM_CALIBRATION)
    cfg = ip.config("smoke")
    row = ip.main_prm_learning(cfg, 0)
    ref = ip.reference(cfg, cfg.model)
    prm, _ = ip.main_prm(cfg, 0, ip.training_rollouts(ref, cfg, 0), ref)
    m = ip.learning_metrics(prm, ip.training_rollouts(ref, cfg, 0))
    assert row["prompts"] == m["step_auc_prompts"]
    for key in ("outcome_auc", "step_auc", "step_auc_se"):
        assert row[key] == pytest.approx(round(m[key], 3), nan_ok=True)


def test_the_budget_probe_reads_the_one_response_prm_as_its_claim_does():
    """`one_response_learning` trains the experiment's one-response arm and reads it with `learning_metrics`."""
    cfg = ip.config("smoke")
    (row,) = ip.one_response_learning(cfg, 0, [cfg.train_steps])
    ref = ip.reference(cfg, cfg.model)
    data = ip.training_rollouts(ref, cfg, 0)
    prm, _ = ip.train_arm(cfg, 0, data.first(1), "ce", cfg.beta, ref)
    m = ip.learning_metrics(prm, data, 1)
    assert row["steps"] == cfg.train_steps and row["prompts"] == m["step_auc_prompts"]
    for key in ("outcome_auc", "step_auc", "step_auc_se"):  # NaN where a barely trained smoke model gives one class
        assert row[key] == pytest.approx(round(m[key], 3), nan_ok=True)


def test_arms_train_from_the_base_with_the_draft_as_a_contrast_at_arm_seeds():
    ci = ip.config("ci")
    assert [a.name for s in ci.seeds for a in ip.arms(ci, s)] == ["ce", "ce_n1"] * len(ci.seeds)
    cfg = ip.config("full", arm_seeds=[0])
    main = ip.arms(cfg, cfg.seeds[-1])
    assert [a.name for a in main] == ["ce", "ce_n1"] and all(a.base == ip.FULL_BASE for a in main)
    assert ip.config("ci").model == ip.BASE  # the zoo's target at ci: its numbers stay the zoo's
    extra = {a.name: a for a in ip.arms(cfg, cfg.arm_seeds[0])}
    assert {"dpo", "kto", "nca", "ce_from_draft"} <= set(extra)
    assert extra["ce_from_draft"].base == ip.GENERATOR and extra["ce_n1"].responses == 1
    assert {a.beta for a in extra.values() if a.name.startswith("ce_beta")} == set(cfg.betas) - {cfg.beta}


def test_cached_reference_log_probs_give_the_same_rewards_and_losses(pair):
    policy, ref = pair
    plain = ip.ImplicitPRM(policy, ref, TOK, 0.3)
    cache = ip.ReferenceCache(ref, TOK, batch_size=2)  # rows cached in batches of another width than they are read
    cached = ip.ImplicitPRM(policy, ref, TOK, 0.3, ref_cache=cache)
    cache.rows(PROMPTS[1:], COMPLETIONS[1:])
    for a, b in zip(plain.step_rewards(PROMPTS, COMPLETIONS), cached.step_rewards(PROMPTS, COMPLETIONS)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    batch = encode_completions(TOK, PROMPTS, COMPLETIONS)
    batch["labels"] = torch.tensor([1, 0, 1])
    with torch.no_grad():
        loss = ip.ce_loss(policy, ref, batch, 0.3)
        batch["ref_logprobs"] = cache.batch(PROMPTS, COMPLETIONS, batch["input_ids"].shape[1] - 1)
        assert math.isclose(ip.ce_loss(policy, ref, batch, 0.3).item(), loss.item(), abs_tol=1e-6)
    with pytest.raises(ValueError, match="another model"):
        ip.ImplicitPRM(policy, ref, TOK, 0.3, ref_cache=ip.ReferenceCache(policy, TOK))


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_the_implicit_reward_on_any_causal_lm(family_checkpoints, family):
    """GPT-2, Llama and Qwen2 checkpoints: θ = ref gives zero reward on every step; a different π_θ's step rewards
    sum to β times the sequence log-ratio (the Proposition's telescoping), with or without the reference cache; one
    CE step on a right response raises its outcome reward."""
    cfg = ip.config("smoke", model=str(family_checkpoints(TOK, seed=0)[family]))
    ref = ip.reference(cfg, cfg.model).reference  # the model knob's checkpoint as π_ref
    assert ref.config.model_type == family
    other, _ = models.load(family_checkpoints(TOK, seed=1)[family], device="cpu")
    same = ip.ImplicitPRM(copy.deepcopy(ref), ref, TOK, 0.5)
    assert all(np.all(np.abs(r) < 1e-6) for r in same.step_rewards(PROMPTS, COMPLETIONS))
    prm = ip.ImplicitPRM(other, ref, TOK, 0.5, ref_cache=ip.ReferenceCache(ref, TOK))
    with torch.no_grad():
        log_ratio = (sequence_logprobs(other, TOK, PROMPTS, COMPLETIONS)
                     - sequence_logprobs(ref, TOK, PROMPTS, COMPLETIONS)).numpy()
    steps = prm.step_rewards(PROMPTS, COMPLETIONS)
    assert [len(r) for r in steps] == [len(arithmetic.split_steps(c)) for c in COMPLETIONS]
    np.testing.assert_allclose([r.sum() for r in steps], 0.5 * log_ratio, rtol=1e-4, atol=1e-5)
    problems = [arithmetic.parse_prompt(p) for p in PROMPTS]
    data = ip.Rollouts(problems, [0], COMPLETIONS[:1], [True])
    trained, run = ip.train_implicit_prm(ref, TOK, data, "ce", 0.5, steps=1, batch_size=1, lr=1e-2, seed=0)
    assert trained.outcome_rewards(PROMPTS[:1], COMPLETIONS[:1])[0] > 0 and len(run.losses) == 1


def test_the_cached_seed_runs_equal_the_direct_ones_and_are_read_back():
    """What the builder's warm-up caches for a seed is what running it here gives, and the next call reads it back."""
    cfg = ip.config("smoke", seeds=[200], n_test=8)
    res, _ = ip.seed_results(cfg, 200)
    again, now_again = ip.seed_results(cfg, 200)
    assert not now_again and json.dumps(again) == json.dumps(res)
    with one_thread():  # the cache computes on one thread: the same numbers as computing it here
        direct = zoo.as_json(ip.run_seed(cfg, 200))
    assert json.dumps(direct) == json.dumps(res)
    assert set(res["arms"]) == {"ce", "ce_n1"} and set(res["verifiers"]) == {str(n) for n in cfg.best_of}
    m = ip.claim_measurements({200: res}, cfg.claim_n)
    assert all(len(v) == 1 for v in m.values())


def test_a_base_outside_the_zoo_is_run_in_place_every_time(monkeypatch):
    calls = []
    monkeypatch.setattr(ip.experiment, "run_seed", lambda cfg, seed: calls.append(seed) or {"arms": {}})
    for _ in range(2):
        assert ip.seed_results(ip.config("smoke", model="some/checkpoint"), 3) == ({"arms": {}}, True)
    assert calls == [3, 3]


def test_best_of_n_keeps_a_score_apart_from_its_own_oracle():
    """The exact step verifier's picks and the any-correct oracle are two selectors: a verifier that always picks the
    wrong candidate scores 0 while the oracle scores 1 (they were once averaged under one name, reading 0.5), and a
    score named like one of best_of_n's own selectors is refused."""
    problems = arithmetic.sample_problems(1, 0, max_ops=3)
    correct = np.array([[True, False, False, False]])
    cands = ip.Candidates(problems, [["a", "b", "c", "d"]], np.array([[3, 4, 4, 5]]), correct, [[[]] * 4])
    wrong = np.array([[0.0, 1.0, 0.0, 0.0]])
    out = ip.best_of_n(cands, {"exact": wrong}, 4)
    assert out["exact"] == 0.0 and out["oracle"] == 1.0
    with pytest.raises(ValueError, match="clash"):
        ip.best_of_n(cands, {"oracle": wrong}, 4)


def test_batches_cut_from_the_rows_encoded_once_are_the_batches_encoded_anew():
    """Training batches select rows of the data tokenized once and cut them to their longest row: the same tensors
    `encode_completions` gives the selection (so the training run is the same)."""
    data = ip.Rollouts([arithmetic.parse_prompt(p) for p in PROMPTS], [0, 1, 2, 0], COMPLETIONS + ["3+4=7;A7"],
                       [False, False, True, True])
    encoded = encode_completions(TOK, data.prompts, data.completions)
    for idx in ([1], [1, 3], [2, 0, 2], [3, 1, 0, 2]):
        batch, anew = select_rows(encoded, idx), encode_completions(TOK, [data.prompts[i] for i in idx],
                                                          [data.completions[i] for i in idx])
        assert batch.keys() == anew.keys()
        assert all(torch.equal(batch[k], anew[k]) and batch[k].dtype == anew[k].dtype for k in anew)
