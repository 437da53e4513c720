"""The shared routed MoE: routing identities, the dispatched layer against a naive loop (with gradients), the
load-balancing loss on uniform routing, and its FLOP and parameter accounting."""

import pytest
import torch

from icml25.core import moe


def test_softmax_all_topk_renormalise_equals_softmax_of_subset():
    logits = torch.randn(50, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    routing, probs = moe.top_k_softmax(logits, 3)
    torch.testing.assert_close(routing.weight, torch.softmax(logits.gather(1, routing.index), dim=-1))
    torch.testing.assert_close(probs.sum(-1), torch.ones(50, dtype=torch.float64))


@pytest.mark.parametrize("router_hidden", [0, 6])
def test_moe_layer_equals_naive_loop_with_gradients(router_hidden):
    layer = moe.MoEFFN(8, 4, 2, 12, alpha=0.01, seed=3, router_hidden=router_hidden).double()
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64, requires_grad=True)
    fast, slow = layer(x), moe.moe_reference(layer, x)
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-6)
    grad = torch.randn_like(fast)
    params = [x, layer.w_gate, layer.w_up, layer.w_out]
    for a, b in zip(torch.autograd.grad(fast, params, grad), torch.autograd.grad(slow, params, grad)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_uniform_routing_gives_alpha_times_k():
    n, k, T, alpha = 8, 2, 16, 0.01
    probs = torch.full((T, n), 1.0 / n)
    index = torch.stack([torch.arange(T) % n, (torch.arange(T) + 1) % n], 1)
    assert float(moe.load_balancing_loss(probs, index, alpha)) == pytest.approx(alpha * k)


def test_aux_loss_sums_the_routed_layers_of_a_model():
    layers = torch.nn.Sequential(moe.MoEFFN(8, 4, 2, 12, alpha=0.1, seed=0), moe.MoEFFN(8, 4, 2, 12, alpha=0.1, seed=1))
    layers(torch.randn(5, 8, generator=torch.Generator().manual_seed(0)))
    total = float(moe.aux_loss(layers).detach())
    assert total == pytest.approx(float((layers[0].aux_loss + layers[1].aux_loss).detach())) and total > 0
    assert moe.aux_loss(torch.nn.Linear(2, 2)) == 0


def test_flops_and_parameters_count_the_router_and_the_selected_experts():
    d, n, k, h = 16, 6, 2, 24
    layer = moe.MoEFFN(d, n, k, h)
    assert layer.n_params() == d * n + n * 3 * d * h
    assert layer.flops_per_token() == 2 * (d * n + k * 3 * d * h)
    mlp = moe.MoEFFN(d, n, k, h, router_hidden=10)
    assert mlp.flops_per_token() == 2 * (d * 10 + 10 * n + k * 3 * d * h)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="top_k=9"):
        moe.top_k_softmax(torch.randn(3, 8), 9)
    with pytest.raises(ValueError, match="top_k=5"):
        moe.MoEFFN(16, 4, 5, 24)
    with pytest.raises(ValueError, match="router_hidden"):
        moe.MoEFFN(16, 4, 2, 24, router_hidden=-1)
