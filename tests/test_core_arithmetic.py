import numpy as np
import pytest

from icml25.core import arithmetic as ar


def test_worked_example_from_the_docstring():
    p = ar.parse_prompt("3+4*2-5|")
    assert p.solution == "3+4=7;7*2=4;4-5=9;A9"
    assert p.answer == 9 and p.n_steps == 3


def test_left_to_right_mod_10_by_enumeration():
    for a in range(10):
        for op in ar.OPS:
            for b in range(10):
                expected = {"+": a + b, "-": a - b, "*": a * b}[op] % 10
                assert ar.Problem((a, b), (op,)).answer == expected


def test_verifier_accepts_every_correct_solution():
    for p in ar.sample_problems(300, seed=1, min_ops=1, max_ops=6):
        assert ar.parse_prompt(p.prompt) == p
        assert all(ar.step_labels(p, p.solution))
        assert ar.is_correct(p, p.solution)
        assert "".join(ar.split_steps(p.solution)) == p.solution


def test_verifier_rejects_every_corrupted_step():
    rng = np.random.default_rng(0)
    for p in ar.sample_problems(200, seed=2):
        k = int(rng.integers(0, p.n_steps + 1))
        steps = p.steps()
        steps[k] = ar.corrupt_step(p, k, rng)
        labels = ar.step_labels(p, "".join(steps))
        assert labels[k] is False and sum(labels) == len(labels) - 1
        if k == p.n_steps:  # a corrupted answer step is a wrong outcome
            assert not ar.is_correct(p, "".join(steps))


def test_malformed_completions_have_no_answer():
    p = ar.parse_prompt("1+1|")
    for bad in ["", "1+1=2;", "1+1=2;A", "1+1=2;AA", "1+1=2;A23"]:
        assert ar.final_answer(bad) is None and not ar.is_correct(p, bad)


def test_sampling_is_reproducible_and_seed_dependent():
    assert ar.sample_problems(50, 3) == ar.sample_problems(50, 3)
    assert ar.sample_problems(50, 3) != ar.sample_problems(50, 4)
    assert ar.sample_problems(50, 3, stream="train") != ar.sample_problems(50, 3, stream="test")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        ar.parse_prompt("3++4|")
    with pytest.raises(ValueError, match="valid operators"):
        ar.apply(1, "/", 2)
