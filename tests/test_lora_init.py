import math

import numpy as np
import pytest
import torch
from torch import nn

from icml25 import lora_init as li
from icml25.core import tinylm
from icml25.core.seeding import seeded


def layer(mode, n_in=64, n_out=48, rank=4, alpha=8.0, scale=1.0, seed=0):
    with seeded(0, "test-layer"):
        base = nn.Linear(n_in, n_out)
    ref = nn.Linear(n_in, n_out)
    ref.load_state_dict(base.state_dict())
    lora = li.LoRALinear(base, rank, alpha)
    li.init_lora(lora, mode, scale, torch.Generator().manual_seed(seed))
    return lora, ref


def test_init_a_leaves_output_unchanged_and_a_has_zero_gradient():
    lora, ref = layer("A")
    x = torch.randn(32, 64)
    assert torch.equal(lora(x), ref(x))
    (lora(x) ** 2).sum().backward()
    assert torch.count_nonzero(lora.lora_A.weight.grad) == 0
    assert lora.lora_B.weight.grad.abs().sum() > 0


def test_init_ab_has_both_gradients_and_expected_noise_norm():
    x = torch.randn(32, 64)
    lora, ref = layer("AB")
    (lora(x) ** 2).sum().backward()
    assert lora.lora_A.weight.grad.abs().sum() > 0 and lora.lora_B.weight.grad.abs().sum() > 0
    # E‖(α/r) B A‖² = (α/r)² n_out n_in r var_A var_B, uniform variances bound²/3
    n_in, n_out, r, scaling = 64, 48, 4, 2.0
    expected = scaling ** 2 * n_out * n_in * r * (1 / n_in / 3) * (1 / r / 3)
    norms = [float(layer("AB", seed=s)[0].delta_weight().detach().pow(2).sum()) for s in range(200)]
    assert np.mean(norms) == pytest.approx(expected, rel=0.1)
    assert not torch.allclose(lora(x), ref(x))


def test_init_ab_plus_reproduces_pretrained_output_and_shifts_weight():
    ab, _ = layer("AB")
    lora, ref = layer("AB+")
    x = torch.randn(32, 64)
    assert torch.allclose(lora(x), ref(x), atol=1e-6)
    assert torch.equal(lora.lora_A.weight, ab.lora_A.weight) and torch.equal(lora.lora_B.weight, ab.lora_B.weight)
    assert torch.allclose(lora.base_layer.weight - ref.weight, -lora.delta_weight(), atol=1e-7)


def test_merged_weight_gives_unmerged_output_and_low_rank():
    lora, _ = layer("AB", scale=3.0)
    x = torch.randn(16, 64)
    merged = x @ lora.merged_weight().T + lora.base_layer.bias
    assert torch.allclose(merged, lora(x), atol=1e-5)
    assert torch.linalg.matrix_rank(lora.delta_weight()) <= lora.rank


def test_only_lora_factors_train_and_adapter_round_trips(tmp_path):
    tok = tinylm.char_tokenizer("0123456789+-*=;|A")
    model = li.add_lora(tinylm.make_model("nano", tok, 0), li.LLAMA_TARGETS, 2, 2)
    assert set(li.lora_layers(model)) and all(n.endswith(("q_proj", "v_proj")) for n in li.lora_layers(model))
    assert all(("lora_A" in n or "lora_B" in n) for n, p in model.named_parameters() if p.requires_grad)
    li.init_model(model, "AB+", 1.0, seed=3)
    ids = torch.tensor([[5, 6, 7, 8]])
    out = model(input_ids=ids).logits
    li.save_adapter(model, tmp_path / "adapter.safetensors")
    fresh = li.add_lora(tinylm.make_model("nano", tok, 0), li.LLAMA_TARGETS, 2, 2)
    li.init_model(fresh, "A", 1.0, seed=9)
    assert not torch.allclose(fresh(input_ids=ids).logits, out)
    li.load_adapter(fresh, tmp_path / "adapter.safetensors")
    assert torch.allclose(fresh(input_ids=ids).logits, out, atol=1e-6)


def test_ab_plus_starts_at_pretrained_llama():
    tok = tinylm.char_tokenizer("0123456789+-*=;|A")
    base = tinylm.make_model("nano", tok, 0)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    want = base(input_ids=ids).logits
    model = li.add_lora(tinylm.make_model("nano", tok, 0), li.LLAMA_TARGETS, 2, 2)
    li.init_model(model, "AB+", 1.0, seed=1)
    assert torch.allclose(model(input_ids=ids).logits, want, atol=1e-5)


def test_modular_problems_are_consistent():
    for prompt, solution in li.modular_problems(50, 0):
        digits, ops = [int(c) for c in prompt[:-1:2]], prompt[1:-1:2]
        assert all(d < li.MODULUS for d in digits)
        acc = digits[0]
        for op, d in zip(ops, digits[1:]):
            acc = {"+": acc + d, "-": acc - d, "*": acc * d}[op] % li.MODULUS
        assert solution.endswith(f"A{acc}")


def test_paired_interval():
    lo, hi = li.paired_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)
    assert lo == pytest.approx(2 - half) and hi == pytest.approx(2 + half)


def test_bad_inputs():
    with pytest.raises(ValueError, match="positive"):
        li.LoRALinear(nn.Linear(4, 4), 0, 1.0)
    with pytest.raises(ValueError, match="positive"):
        li.add_lora(nn.Sequential(nn.Linear(4, 4)), ("0",), -1, 1.0)
    lora, _ = layer("A")
    with pytest.raises(ValueError, match="valid modes: A, AB, AB\\+"):
        li.init_lora(lora, "B", 1.0, torch.Generator())
    with pytest.raises(ValueError, match="no nn.Linear"):
        li.add_lora(nn.Sequential(nn.Linear(4, 4)), ("q_proj",), 2, 1.0)
