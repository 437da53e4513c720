"""expert_ffn: the grouped compiled kernel equals the naive per-expert loop (outputs and every gradient, 1e-5 in
float32) for a SwiGLU MoE and for AoE's per-expert gate input, and passes gradcheck in float64; a second derivative
is refused by name. The benchmark's two other loops (the Mixtral-style loop of expert_ffn_beats_the_loop and the
sorted loop planned as faster_than_reference's expert reference) compute the same function. Its benchmark and claim
are tested in test_kernels_bench.py."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.ops import backend
from icml25.ops.bench import expert_loop, expert_sorted_loop
from icml25.ops.expert_ffn import Experts, Routing, expert_ffn, expert_ffn_reference


def test_kernels_are_built_so_these_tests_cover_them():
    assert backend() == "compiled"


def moe_inputs(T, d, h, n, k, seed, d_low=None, dtype=torch.float32):
    """Random tokens, experts and a top-k routing (distinct experts per token, softmax weights)."""
    gen = torch.Generator().manual_seed(seed)

    def param(*shape):
        return (torch.randn(*shape, generator=gen, dtype=dtype) / shape[-2] ** 0.5).requires_grad_()

    x = torch.randn(T, d, generator=gen, dtype=dtype).requires_grad_()
    logits = torch.randn(T, n, generator=gen, dtype=dtype)
    top, index = logits.topk(k, dim=-1)
    routing = Routing(index, top.softmax(-1).requires_grad_())
    experts = Experts(param(n, d_low or d, h), param(n, d, h), param(n, h, d))
    gate = None if d_low is None else param(T, n, d_low)
    return x, routing, experts, gate


def outputs_and_grads(fn, x, routing, experts, gate, dy):
    leaves = [x, routing.weight, *experts] + ([gate] if gate is not None else [])
    for t in leaves:
        t.grad = None
    y = fn(x, routing, experts, gate)
    y.backward(dy)
    return [y.detach()] + [t.grad.clone() for t in leaves]


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 40), d=st.integers(1, 12), h=st.integers(1, 12), n=st.integers(1, 6), data=st.data(),
       aoe=st.booleans(), seed=st.integers(0, 2**31))
def test_equals_the_per_expert_loop(T, d, h, n, data, aoe, seed):
    k = data.draw(st.integers(1, n))
    x, routing, experts, gate = moe_inputs(T, d, h, n, k, seed, d_low=data.draw(st.integers(1, 5)) if aoe else None)
    dy = torch.randn(T, d, generator=torch.Generator().manual_seed(seed + 1))
    for expected, actual in zip(outputs_and_grads(expert_ffn_reference, x, routing, experts, gate, dy),
                                outputs_and_grads(expert_ffn, x, routing, experts, gate, dy)):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d_low", [None, 3])
def test_gradcheck_float64(d_low):
    x, routing, experts, gate = moe_inputs(9, 4, 5, 4, 2, seed=0, d_low=d_low, dtype=torch.float64)

    def f(x, weight, w_gate, w_up, w_out, *gate):
        return expert_ffn(x, Routing(routing.index, weight), Experts(w_gate, w_up, w_out), *gate)

    assert torch.autograd.gradcheck(f, (x, routing.weight, *experts) + ((gate,) if gate is not None else ()))


def test_an_idle_expert_gets_zero_gradient_and_duplicates_add_up():
    x, routing, experts, _ = moe_inputs(6, 4, 3, 3, 2, seed=1)
    index = torch.tensor([[0, 0]] * 6)  # expert 0 twice per token, experts 1 and 2 idle
    weight = torch.full((6, 2), 0.5, requires_grad=True)
    y = expert_ffn(x, Routing(index, weight), experts)
    y.sum().backward()
    torch.testing.assert_close(y, expert_ffn_reference(x, Routing(index[:, :1], torch.ones(6, 1)), experts))
    assert not experts.up.grad[1:].any() and experts.up.grad[0].any()


def test_the_stock_per_expert_loop_of_the_benchmark_equals_the_reference_with_gradients():
    for d_low in (None, 3):
        x, routing, experts, gate = moe_inputs(20, 6, 5, 4, 2, seed=2, d_low=d_low)
        dy = torch.randn(20, 6, generator=torch.Generator().manual_seed(2))
        for expected, actual in zip(outputs_and_grads(expert_ffn_reference, x, routing, experts, gate, dy),
                                    outputs_and_grads(expert_loop, x, routing, experts, gate, dy)):
            torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("n, k, d_low", [(4, 2, None), (6, 1, None), (3, 3, None), (4, 2, 3), (5, 3, 2)])
def test_the_sorted_loop_equals_the_naive_reference_with_gradients(n, k, d_low):
    """`bench.expert_sorted_loop` (one argsort, one gather, one in-place index_add_) is the naive loop's function:
    float64 outputs and every gradient agree to rounding, for a SwiGLU MoE and AoE's gate input, k from 1 to n."""
    x, routing, experts, gate = moe_inputs(11, 4, 5, n, k, seed=n + k, d_low=d_low, dtype=torch.float64)
    dy = torch.randn(11, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    for expected, actual in zip(outputs_and_grads(expert_ffn_reference, x, routing, experts, gate, dy),
                                outputs_and_grads(expert_sorted_loop, x, routing, experts, gate, dy)):
        torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)


def test_the_sorted_loop_skips_an_idle_expert_and_adds_duplicates():
    """Every token to expert 0 twice with weight 1/2 (experts 1 and 2 idle): the output is expert 0's, exactly as
    the naive loop gives it, and the idle experts get zero gradients."""
    x, _, experts, _ = moe_inputs(6, 4, 3, 3, 2, seed=1, dtype=torch.float64)
    index, weight = torch.tensor([[0, 0]] * 6), torch.full((6, 2), 0.5, dtype=torch.float64)
    y = expert_sorted_loop(x, Routing(index, weight), experts)
    y.sum().backward()
    expected = expert_ffn_reference(x, Routing(index[:, :1], torch.ones(6, 1, dtype=torch.float64)), experts)
    torch.testing.assert_close(y, expected, rtol=1e-15, atol=1e-15)
    assert not experts.up.grad[1:].any() and experts.up.grad[0].any()


def test_bad_shapes_are_named():
    x, routing, experts, _ = moe_inputs(5, 4, 3, 3, 2, seed=0)
    with pytest.raises(ValueError, match=r"experts.out has shape \[3, 4, 4\]"):
        expert_ffn(x, routing, experts._replace(out=torch.zeros(3, 4, 4)))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        expert_ffn(x, routing._replace(index=routing.index + 3), experts)


@pytest.mark.parametrize("d_low", [None, 3])
@pytest.mark.parametrize("T, d", [(64, 8), (2048, 16)])  # the gathers and sums on one thread, then on several
def test_experts_split_among_threads_equal_the_loop(d_low, T, d):
    # two or more groups per thread: each thread runs whole experts (the parallel path of the kernel); from
    # kParallelValues values on (T k d >= 2^15) the gathers and weighted sums are shared among the threads too
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x, routing, experts, gate = moe_inputs(T, d, 6, 8, 2, seed=3, d_low=d_low)
        dy = torch.randn(T, d, generator=torch.Generator().manual_seed(3))
        for expected, actual in zip(outputs_and_grads(expert_ffn_reference, x, routing, experts, gate, dy),
                                    outputs_and_grads(expert_ffn, x, routing, experts, gate, dy)):
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(threads)


def test_a_second_derivative_is_refused_by_name():
    """The kernel's backward writes with mm(out=), which autograd cannot differentiate: a gradient penalty through
    it is refused with torch's message for a once-differentiable function, before any value is computed."""
    x, routing, experts, _ = moe_inputs(6, 4, 3, 3, 2, seed=2)
    (grad_x,) = torch.autograd.grad(expert_ffn(x, routing, experts).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice a function that was marked with @once_differentiable"):
        grad_x.sum().backward()
