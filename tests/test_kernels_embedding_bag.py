"""embedding_bag: the compiled forward and sort-by-row backward equal torch's embedding_bag and the reference,
with repeated indices inside and across bags, empty bags, and gradcheck in float64."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.ops import backend
from icml25.ops.embedding_bag import embedding_bag, embedding_bag_reference


def test_kernels_are_built_so_these_tests_cover_them():
    assert backend() == "compiled"


def bag_inputs(N, D, B, K, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(N, D, generator=gen, dtype=dtype, requires_grad=True)
    indices = torch.randint(0, N, (B, K), generator=gen)  # N small relative to B*K: many repeats
    weights = torch.randn(B, K, generator=gen, dtype=dtype, requires_grad=True)
    return values, indices, weights


def forward_and_grads(fn, values, indices, weights, dy):
    values.grad = weights.grad = None
    y = fn(values, indices, weights)
    y.backward(dy)
    return y.detach(), values.grad.clone(), weights.grad.clone()


def stock(values, indices, weights):
    return F.embedding_bag(indices, values, mode="sum", per_sample_weights=weights)


@settings(max_examples=60, deadline=None)
@given(N=st.integers(1, 40), D=st.integers(1, 33), B=st.integers(1, 20), K=st.integers(1, 12),
       seed=st.integers(0, 2**31))
def test_equals_torch_embedding_bag_forward_and_backward(N, D, B, K, seed):
    values, indices, weights = bag_inputs(N, D, B, K, seed)
    dy = torch.randn(B, D, generator=torch.Generator().manual_seed(seed))
    for expected, actual in zip(forward_and_grads(stock, values, indices, weights, dy),
                                forward_and_grads(embedding_bag, values, indices, weights, dy)):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_repeats_inside_and_across_bags_add_up():
    values = torch.eye(3, requires_grad=True)
    indices = torch.tensor([[1, 1, 2], [1, 0, 1]])
    weights = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    y = embedding_bag(values, indices, weights)
    assert y.tolist() == [[0, 3, 3], [5, 10, 0]]
    y.backward(torch.tensor([[1.0, 10.0, 100.0], [1000.0, 0.0, 0.0]]))
    assert values.grad[1].tolist() == [3 + 10 * 1000, 30, 300]  # row 1: twice in each bag, weights 1+2 and 4+6
    assert weights.grad.tolist() == [[10, 10, 100], [0, 1000, 0]]


def test_empty_bags_give_zeros_and_zero_gradients():
    values, indices, weights = bag_inputs(5, 4, 3, 0, seed=0)
    y = embedding_bag(values, indices, weights)
    assert y.shape == (3, 4) and not y.any()
    y.sum().backward()
    assert values.grad is not None and not values.grad.any() and weights.grad.shape == (3, 0)


def test_untouched_rows_get_exactly_zero_gradient():
    values, indices, weights = bag_inputs(100, 8, 4, 3, seed=1)
    embedding_bag(values, indices, weights).sum().backward()
    untouched = torch.ones(100, dtype=torch.bool).index_fill_(0, indices.flatten(), False)
    assert not values.grad[untouched].any() and values.grad[~untouched].abs().sum(1).gt(0).all()


def test_gradcheck_float64():
    values, indices, weights = bag_inputs(6, 5, 4, 7, seed=2, dtype=torch.float64)
    assert torch.autograd.gradcheck(embedding_bag, (values, indices, weights))


def test_equals_the_reference():
    values, indices, weights = bag_inputs(1000, 16, 64, 32, seed=3)
    torch.testing.assert_close(embedding_bag(values, indices, weights),
                               embedding_bag_reference(values, indices, weights))


def test_bad_input_is_named():
    values, indices, weights = bag_inputs(5, 4, 3, 2, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        embedding_bag(values, indices + 5, weights)
    with pytest.raises(ValueError, match="indices"):
        embedding_bag(values, indices.int(), weights)
    with pytest.raises(ValueError, match="shape|weights"):
        embedding_bag(values, indices, weights[:, :1])
