import numpy as np
import pytest

from icml25.core.facts import sample_facts


def test_every_subject_has_every_relation_once():
    f = sample_facts(7, 3, seed=0, n_objects=11)
    pairs = set(zip(f.subject.tolist(), f.relation.tolist()))
    assert len(f) == 21 and pairs == {(s, r) for s in range(7) for r in range(3)}
    assert f.object.min() >= 0 and f.object.max() < 11 and not f.chained


def test_chained_world_draws_objects_from_the_subjects():
    f = sample_facts(50, 2, seed=1)
    assert f.chained and f.n_objects == 50
    assert set(f.object.tolist()) <= set(range(50))
    assert len(set(f.object.tolist())) > 25  # uniform over 50 subjects: 100 draws cover most of them


def test_same_seed_same_world_other_seed_other_world():
    a, b, c = sample_facts(30, 4, 3, 16), sample_facts(30, 4, 3, 16), sample_facts(30, 4, 4, 16)
    assert np.array_equal(a.object, b.object) and not np.array_equal(a.object, c.object)


@pytest.mark.parametrize("sizes", [(0, 3, None), (5, 0, None), (5, 3, 0)])
def test_bad_sizes_raise(sizes):
    with pytest.raises(ValueError, match="positive sizes"):
        sample_facts(sizes[0], sizes[1], 0, sizes[2])
