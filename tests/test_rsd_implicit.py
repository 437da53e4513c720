"""rsd's implicit PRM: zero rewards at initialisation, step rewards that telescope to the outcome reward, rsd's step
boundaries, the FLOPs of both models, the PRM interface, its training data, and the calibration's bar reading."""

import copy

import numpy as np
import pytest
import torch

from icml25 import rsd
from icml25.core import arithmetic, flops, reasoners, tinylm, zoo
from icml25.core.generation import encode_completions, sequence_logprobs
from icml25.core.implicit_reward import ImplicitPRM, step_ends

TOK = tinylm.char_tokenizer(arithmetic.ALPHABET)


@pytest.fixture(scope="module")
def draft():
    return zoo.get("arith-draft", "smoke", 0)


@pytest.fixture(scope="module")
def problems():
    return reasoners.test_problems(8)


def implicit(policy, reference, beta=0.3) -> rsd.ImplicitStepPRM:
    return rsd.ImplicitStepPRM(ImplicitPRM(policy.eval(), reference.eval(), TOK, beta))


def chain_rows(problems, solutions):
    """Every (problem, prefix, step) of the solutions, as best-of-N scores them."""
    rows = ([], [], [])
    for p, sol in zip(problems, solutions):
        steps = arithmetic.split_steps(sol)
        for k, s in enumerate(steps):
            rows[0].append(p), rows[1].append("".join(steps[:k])), rows[2].append(s)
    return rows


def test_at_initialisation_every_step_reward_is_zero_and_every_score_one_half(draft, problems):
    prm = implicit(copy.deepcopy(draft.model), draft.model)
    rows = chain_rows(problems, [p.solution for p in problems])
    assert len(rows[0]) > len(problems)  # several steps per solution, the prefixes read
    for reading in rsd.READINGS:
        read = prm.read_as(reading)
        assert (read.rewards(*rows) == 0).all() and (read.score(*rows) == 0.5).all()


def test_step_rewards_telescope_to_the_outcome_reward(problems):
    policy, reference = tinylm.make_model("nano", TOK, seed=1), tinylm.make_model("nano", TOK, seed=0)
    prm, beta = implicit(policy, reference, 0.3), 0.3
    solutions = [p.solution for p in problems]
    rows = chain_rows(problems, solutions)
    r = prm.rewards(*rows)
    owner = np.repeat(np.arange(len(problems)), [len(arithmetic.split_steps(s)) for s in solutions])
    with torch.no_grad():
        prompts = [p.prompt for p in problems]
        outcome = beta * (sequence_logprobs(policy, TOK, prompts, solutions)
                          - sequence_logprobs(reference, TOK, prompts, solutions))
    np.testing.assert_allclose(np.bincount(owner, weights=r), outcome.numpy(), atol=1e-5)
    assert not np.allclose(r, 0)  # two different models: the check is not 0 = 0
    q = prm.read_as("accumulative").rewards(*rows)  # q^t: the partial sums of the step rewards
    np.testing.assert_allclose(q, np.concatenate([np.cumsum(r[owner == i]) for i in range(len(problems))]),
                               atol=1e-5)
    np.testing.assert_allclose(prm.score(*rows), 1 / (1 + np.exp(-rsd.SCORE_SCALE * r)), rtol=1e-6)


def test_the_implicit_rewards_step_ends_are_rsds_step_boundaries(draft):
    batch = encode_completions(TOK, ["3+4|"], ["3+4=7;A7"])
    assert step_ends(TOK, batch) == [[8, 10]]  # '|' at 3, ';' at 9 and '7' at 11 in input_ids; one less here
    problems, solutions = rsd.draft_rollouts(draft, 40, 0, "rsd-prm-eval", "rsd-prm-eval")
    assert sum(len(arithmetic.split_steps(s)) > 1 for s in solutions) > 10  # rollouts of several steps
    assert rsd.boundary_mismatches(draft.tokenizer, problems, solutions) == 0


def test_the_score_interface_matches_the_other_prms(draft, problems):
    prm = implicit(tinylm.make_model("nano", TOK, seed=1), draft.model)
    rows = (problems[:4], ["", "", problems[2].steps()[0], ""], [problems[0].steps()[0], "A3", "", "9"])
    r, oracle = prm.score(*rows), rsd.OraclePRM().score(*rows)
    assert r.shape == oracle.shape == (4,) and ((r >= 0) & (r <= 1)).all()
    assert r[2] == 0  # an empty step has no token to reward: it scores 0
    assert prm.read_as("accumulative").score(*rows)[2] == 0
    with pytest.raises(ValueError):
        prm.score(problems[:2], [""], ["A3", "A4"])
    with pytest.raises(ValueError, match="reading"):
        prm.read_as("sum")


def test_both_models_are_charged(draft, problems):
    target = zoo.get("arith-target", "smoke", 0)
    prm, noisy = implicit(copy.deepcopy(draft.model), draft.model), rsd.NoisyOraclePRM(0.1, 0, cost_model=draft.model)
    meters = [rsd.Meter.of(m, 1) for m in (prm.model, draft.model)]
    assert [m.call(0, 12, 5) for m in meters] == [2 * flops.forward_flops(draft.model.config, 17)] + \
        [flops.forward_flops(draft.model.config, 17)]
    runs = [rsd.decode(draft.model, draft.tokenizer, target.model, target.tokenizer, problems, p, rsd.threshold_rule(0))
            for p in (prm, noisy)]  # δ = 0 keeps every draft step: the same text for both
    assert runs[0].completions == runs[1].completions and runs[1].flops["prm"] > 0
    assert runs[0].flops["prm"] == 2 * runs[1].flops["prm"]
    charged = [rsd.generated_flops(runs[0], draft.model, target.model, m) for m in (None, draft.model, prm.model)]
    assert charged[2] - charged[0] == 2 * (charged[1] - charged[0]) > 0
    samples = rsd.sample(draft, problems, 2, 1.0, 0)
    assert np.array_equal(rsd.step_rewards(samples, problems, prm)[1],
                          2 * rsd.step_rewards(samples, problems, noisy)[1])


def test_it_learns_from_the_learned_prms_rollouts_by_their_outcome_only(draft):
    data = rsd.outcome_rollouts(draft, 30, 0)
    assert (data.problems, data.completions) == tuple(map(list, rsd.draft_rollouts(draft, 30, 0, "rsd-prm",
                                                                                    "rsd-prm-rollouts")))
    assert data.labels == [arithmetic.is_correct(p, s) for p, s in zip(data.problems, data.completions)]
    before = copy.deepcopy(draft.model.state_dict())
    prm, info = rsd.train_implicit(draft, 30, 0, beta=0.5, lr=1e-2, steps=3, batch_size=8)
    assert prm.prm.reference is draft.model and prm.prm.policy is not draft.model and len(info["losses"]) == 3
    assert all(torch.equal(before[k], v) for k, v in draft.model.state_dict().items())  # π_ref stays frozen
    assert any(not torch.equal(before[k], v) for k, v in prm.prm.policy.state_dict().items())


def test_learns_reads_each_bar_on_the_share_of_seeds():
    record = {"auc": {0: 0.85, 1: 0.79, 2: 0.9, 3: 0.81},
              "rank": {"min": {0: 0.9, 1: 0.9, 2: 0.5, 3: 0.5}, "mean": {0: 0.72, 1: 0.75, 2: 0.7, 3: 0.69}}}
    got = rsd.learns(record)  # mean chain: mean 0.715 beats min's 0.7; rank bar met on seeds 0, 1, 2
    assert got["chain"] == "mean"
    assert got["shares"] == {"step": 0.75, "rank": 0.75, "both": 0.5}
    assert (got["step"], got["rank"], got["both"]) == (True, True, False)


def test_the_kept_setting_is_measured_on_every_seed_and_meets_both_bars_most_often():
    def record(steps, auc, rank):
        return {"steps": steps, "auc": dict(enumerate(auc)), "rank": {"min": dict(enumerate(rank))}}

    partial = {"steps": 300, "auc": {0: 0.99}, "rank": {"min": {0: 0.99}}}  # one seed only: never kept
    one_seed_both = record(600, [0.9, 0.7, 0.7], [0.9, 0.9, 0.9])
    two_seeds_both = record(900, [0.9, 0.9, 0.7], [0.71, 0.71, 0.5])
    assert rsd.kept_setting([partial, one_seed_both, two_seeds_both]) is two_seeds_both
    cheaper = record(300, [0.9, 0.9, 0.7], [0.71, 0.71, 0.5])  # same merit, fewer steps
    assert rsd.kept_setting([two_seeds_both, cheaper]) is cheaper


def test_the_calibration_table_has_a_row_per_record_and_marks_the_kept_one():
    rows = rsd.implicit_calibration_table().splitlines()[2:]
    kept = rsd.kept_setting(rsd.IMPLICIT_PRM_CALIBRATION)
    assert len(rows) == len(rsd.IMPLICIT_PRM_CALIBRATION)
    marked = [row for row in rows if "(**kept**)" in row]
    assert len(marked) == 1 and marked[0].startswith(f"| {kept['beta']:g} | {kept['lr']:g} | {kept['steps']} | "
                                                     f"{kept['reading']} ")
    assert ("does not learn" in rsd.implicit_learns_text()) == (not (rsd.learns(kept)["step"]
                                                                     and rsd.learns(kept)["rank"]))


def test_the_referee_sentence_reads_its_record_by_the_same_rule():
    """The referee's longer run is judged by `learns`, as the calibration records are: the sentence's counts are
    the record's seeds at or above each bar, and the learned PRM's ranking it compares with is BON_CALIBRATION's."""
    ref = rsd.IMPLICIT_REFEREE_2400
    text = rsd.implicit_referee_text(rsd.kept_setting(rsd.IMPLICIT_PRM_CALIBRATION))
    n_step = sum(v >= rsd.PRM_AUC_MIN for v in ref["auc"].values())
    n_rank = sum(v >= rsd.PRM_RANK_MIN for v in ref["rank"]["mean"].values())
    assert f"on {n_step} of 5 (it {'meets' if n_step / 5 >= rsd.claims.SHARE else 'misses'} the step bar)" in text
    assert f"on {n_rank} of 5 (it {'meets' if n_rank / 5 >= rsd.claims.SHARE else 'misses'} the ranking bar" in text
    assert rsd.learns(ref)["step"] and not rsd.learns(ref)["rank"]  # as the referee reported: 4 of 5, 2 of 5
