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


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 5000), D=st.integers(1, 20), B=st.integers(0, 12), K=st.integers(0, 9),
       seed=st.integers(0, 2**31))
def test_the_sparse_gradient_holds_the_touched_rows_of_the_dense_one(N, D, B, K, seed):
    """sparse=True: a COO gradient of exactly the touched rows, equal bit for bit to the dense gradient (which
    passes gradcheck) and close to stock sparse=True; N up to 5000 takes the radix sort through two digits."""
    values, indices, weights = bag_inputs(N, D, B, K, seed)
    dy = torch.randn(B, D, generator=torch.Generator().manual_seed(seed))
    y_dense, g_dense, w_dense = forward_and_grads(embedding_bag, values, indices, weights, dy)
    values.grad = weights.grad = None
    y = embedding_bag(values, indices, weights, sparse=True)
    y.backward(dy)
    assert values.grad.is_sparse
    g = values.grad.coalesce()  # (autograd's accumulation may drop the kernel's coalesced flag)
    assert g.indices().flatten().tolist() == sorted(set(indices.flatten().tolist()))
    torch.testing.assert_close(g.to_dense(), g_dense, rtol=0, atol=0)
    torch.testing.assert_close(weights.grad, w_dense, rtol=0, atol=0)
    torch.testing.assert_close(y.detach(), y_dense, rtol=0, atol=0)
    if K:  # (stock F.embedding_bag refuses bags of no entries)
        values.grad = None
        F.embedding_bag(indices, values, mode="sum", per_sample_weights=weights.detach(), sparse=True).backward(dy)
        torch.testing.assert_close(g.to_dense(), values.grad.to_dense(), rtol=1e-5, atol=1e-5)


def test_the_sparse_reference_equals_the_dense_reference():
    values, indices, weights = bag_inputs(300, 6, 8, 5, seed=4)
    dy = torch.randn(8, 6, generator=torch.Generator().manual_seed(4))
    _, dense, _ = forward_and_grads(embedding_bag_reference, values, indices, weights, dy)
    values.grad = None
    embedding_bag_reference(values, indices, weights, sparse=True).backward(dy)
    assert values.grad.is_sparse
    torch.testing.assert_close(values.grad.to_dense(), dense)


def test_a_sparse_gradient_trains_with_sparse_adam():
    values, indices, weights = bag_inputs(50, 4, 6, 3, seed=5)
    opt = torch.optim.SparseAdam([values], lr=0.1)
    before = values.detach().clone()
    embedding_bag(values, indices, weights.detach(), sparse=True).pow(2).sum().backward()
    opt.step()
    moved = (values.detach() != before).any(1)
    assert moved.tolist() == torch.zeros(50, dtype=torch.bool).index_fill_(0, indices.flatten(), True).tolist()


def test_bad_input_is_named():
    values, indices, weights = bag_inputs(5, 4, 3, 2, seed=0)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        embedding_bag(values, indices + 5, weights)
    with pytest.raises(ValueError, match="indices"):
        embedding_bag(values, indices.int(), weights)
    with pytest.raises(ValueError, match="shape|weights"):
        embedding_bag(values, indices, weights[:, :1])


@pytest.mark.parametrize("sparse", [False, True])
def test_a_gradient_of_several_huge_pages_equals_the_reference(sparse):
    # 2^17 rows of 64 floats: 32 MiB, so the compiled backward writes the dense gradient on fresh (huge) pages,
    # which must read as zeros wherever no bag touched a row (the sparse one, of the touched rows, is smaller)
    values, indices, weights = bag_inputs(2**17, 64, 32, 8, seed=6)
    dy = torch.randn(32, 64, generator=torch.Generator().manual_seed(6))
    _, g_ref, w_ref = forward_and_grads(embedding_bag_reference, values, indices, weights, dy)
    values.grad = weights.grad = None
    embedding_bag(values, indices, weights, sparse=sparse).backward(dy)
    g = values.grad.to_dense() if sparse else values.grad
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights.grad, w_ref, rtol=1e-5, atol=1e-5)
    untouched = torch.ones(2**17, dtype=torch.bool).index_fill_(0, indices.flatten(), False)
    assert int(untouched.sum()) > 2**16 and not g[untouched].any()


def test_an_index_out_of_range_is_named_with_and_without_a_graph():
    values, indices, weights = bag_inputs(5, 4, 3, 2, seed=0)
    for bad, shown in ((torch.tensor([[0, -5], [3, 1], [2, 2]]), r"got \[-5, 3\]"),
                       (indices.clone().fill_(7), r"got \[7, 7\]")):
        with pytest.raises(ValueError, match=r"\[0, 5\); " + shown):
            embedding_bag(values, bad, weights)
        with torch.no_grad(), pytest.raises(ValueError, match=r"\[0, 5\)"):
            embedding_bag(values, bad, weights)
    with pytest.raises(ValueError, match=r"\[0, 0\)"):
        embedding_bag(values[:0], indices, weights)


def test_the_second_derivative_keeps_every_term():
    """gradgradcheck in float64: the gradient of the gradient equals finite differences of it. Before, the first
    gradient had no graph, so a second-order term in a loss silently vanished (gradgradcheck failed)."""
    values, indices, weights = bag_inputs(6, 5, 4, 7, seed=4, dtype=torch.float64)
    assert torch.autograd.gradgradcheck(embedding_bag, (values, indices, weights))


def test_a_gradient_penalty_equals_stock_embedding_bags():
    """A loss with the gradient inside it (a gradient penalty, create_graph=True) differentiates as stock's would:
    d/dw of ||dy/dV||^2 is nonzero and equals the reference's."""
    got = []
    for fn in (embedding_bag, embedding_bag_reference):
        values, indices, weights = bag_inputs(9, 4, 5, 3, seed=5, dtype=torch.float64)
        (grad_values,) = torch.autograd.grad(fn(values, indices, weights).square().sum(), values, create_graph=True)
        got.append(torch.autograd.grad(grad_values.square().sum(), (values, weights)))
    assert got[0][1].abs().sum() > 0
    for ours, reference in zip(*got):
        torch.testing.assert_close(ours, reference)


def test_a_second_derivative_of_the_sparse_gradient_is_refused():
    values, indices, weights = bag_inputs(9, 4, 5, 3, seed=6)
    y = embedding_bag(values, indices, weights, sparse=True)
    with pytest.raises(RuntimeError, match="sparse=True.*no second derivative"):
        torch.autograd.grad(y.sum(), weights, create_graph=True)


@pytest.mark.parametrize("N", [2**12, 2**16])  # one counting pass (N <= B*K), two radix passes (N > B*K)
def test_the_backward_is_bit_identical_on_one_thread_and_several(N):
    """The sort by row is shared among the threads from 2^13 slots on, in the serial pass's order, so the sums, and
    their rounding, do not depend on the number of threads; and they equal the reference."""
    values, indices, weights = bag_inputs(N, 16, 512, 32, seed=7)
    dy = torch.randn(512, 16, generator=torch.Generator().manual_seed(8))
    threads = torch.get_num_threads()
    try:
        grads = []
        for n in (1, 3):
            torch.set_num_threads(n)
            for sparse in (False, True):
                values.grad = weights.grad = None
                embedding_bag(values, indices, weights, sparse=sparse).backward(dy)
                grads.append((values.grad.to_dense(), weights.grad.clone()))
    finally:
        torch.set_num_threads(threads)
    one, several = grads[:2], grads[2:]
    for (v1, w1), (v2, w2) in zip(one, several):
        assert v1.equal(v2) and w1.equal(w2)
    _, ref_v, ref_w = forward_and_grads(embedding_bag_reference, values, indices, weights, dy)
    torch.testing.assert_close(one[0][0], ref_v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(one[1][1], ref_w, rtol=1e-5, atol=1e-5)
