import copy

import pytest
import torch

from icml25 import knowledge_editing as ke
from icml25.core import tinylm


def _world_and_model(seed=0):
    world = ke.FactWorld.sample(12, 3, seed)
    tok = ke.tokenizer_for(world)
    model = tinylm.make_model("nano", tok, seed, max_len=16, num_hidden_layers=2).requires_grad_(False)
    return world, tok, model


def _covariance(model, tok, world, layer=0):
    prompts = [ke.question(s, r, ke.TRAIN_TEMPLATES[0]) for s, r in world.facts]
    keys = ke.keys_at(model, tok, prompts, [0] * len(prompts), layer)
    return ke.key_covariance(keys)


def test_rome_update_maps_key_to_value_with_rank_one_and_spares_C_orthogonal_keys():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(5, 8, generator=g)
    K = torch.randn(50, 8, generator=g)
    C = ke.key_covariance(K)
    k_star, v_star = torch.randn(8, generator=g), torch.randn(5, generator=g)
    dW = ke.rome_update(W, C, k_star, v_star)
    assert torch.allclose((W + dW) @ k_star, v_star, atol=1e-4)
    assert torch.linalg.matrix_rank(dW) == 1
    u = torch.linalg.solve(C, k_star)
    k = torch.randn(8, generator=g)
    k = k - (k @ u) / (u @ u) * u  # kᵀ C⁻¹ k* = 0
    assert torch.allclose((W + dW) @ k, W @ k, atol=1e-4)


def test_rome_edit_on_a_model_sets_the_value_and_sequential_edits_compound():
    world, tok, model = _world_and_model()
    C = _covariance(model, tok, world)
    e1 = ke.Edit("e1", "r0", world.answer("e1", "r0"), "e5" if world.answer("e1", "r0") != "e5" else "e6")
    e2 = ke.Edit("e2", "r1", world.answer("e2", "r1"), "e7" if world.answer("e2", "r1") != "e7" else "e8")
    W0 = model.model.layers[0].mlp.down_proj.weight.clone()
    both, w_both = copy.deepcopy(model), copy.deepcopy(world)
    d1 = ke.rome_edit(both, tok, w_both, e1, C, 0, steps=5, lr=0.5)["delta"]
    assert torch.linalg.matrix_rank(d1, rtol=1e-4) == 1
    ke.rome_edit(both, tok, w_both, e2, C, 0, steps=5, lr=0.5)
    only2, w_only2 = copy.deepcopy(model), copy.deepcopy(world)
    ke.rome_edit(only2, tok, w_only2, e2, C, 0, steps=5, lr=0.5)
    assert not torch.allclose(both.model.layers[0].mlp.down_proj.weight, only2.model.layers[0].mlp.down_proj.weight)
    assert torch.equal(model.model.layers[0].mlp.down_proj.weight, W0)  # the copies were edited, not the original
    assert w_both.answer("e1", "r0") == e1.new and w_both.edited == {("e1", "r0"), ("e2", "r1")}


def test_no_op_edit_leaves_locality_at_one():
    world, tok, model = _world_and_model()
    C = _covariance(model, tok, world)
    prompts = [ke.question(s, r, ke.TRAIN_TEMPLATES[0]) for s, r in list(world.facts)[:10]]
    ids = tok(prompts, return_tensors="pt")["input_ids"]
    before = model(input_ids=ids).logits[:, -1].argmax(-1)
    down = model.model.layers[0].mlp.down_proj
    k = ke.keys_at(model, tok, prompts[:1], [0], 0)[0]
    with torch.no_grad():
        down.weight += ke.rome_update(down.weight, C, k, down.weight @ k)  # v* = W k*: nothing to change
    after = model(input_ids=ids).logits[:, -1].argmax(-1)
    assert (before == after).float().mean() == 1.0


def test_retrieval_memory():
    mem = ke.LexicalMemory()
    q = ke.question("e3", "r1", ke.REPHRASE_TEMPLATES[0])
    assert mem.augment(q) == q  # empty memory: the base model sees the same prompt
    edits = [ke.Edit(f"e{i}", f"r{i % 3}", "e0", f"e{i + 1}") for i in range(1, 6)]
    for e in edits:
        mem.add(e)
    assert len(mem) == len(edits)
    for e in edits:
        assert mem.retrieve(ke.question(e.subject, e.relation, ke.TRAIN_TEMPLATES[1])) == (e.subject, e.relation, e.new)


def test_merge_endpoints_and_scaling():
    g = torch.Generator().manual_seed(1)
    prev, ft = {"w": torch.randn(4, 4, generator=g)}, {"w": torch.randn(4, 4, generator=g)}
    assert torch.equal(ke.merge(prev, ft, 0.0)["w"], prev["w"])
    assert torch.allclose(ke.merge(prev, ft, 1.0)["w"], ft["w"])
    m = ke.merge(prev, ft, 0.25)["w"]
    assert torch.allclose((m - prev["w"]).norm(), 0.25 * (ft["w"] - prev["w"]).norm())
    with pytest.raises(ValueError, match="alpha"):
        ke.merge(prev, ft, 1.5)


def test_generator_never_edits_locality_probes_and_recomputes_two_hop():
    world = ke.FactWorld.sample(30, 3, 0)
    windows = ke.edit_stream(world, 3, 5, 0)
    edited = {(e.subject, e.relation) for w in windows for e in w.edits}
    assert len(edited) == 15
    assert all(p not in edited for w in windows for p in w.locality)
    assert all(e.new != e.old for w in windows for e in w.edits)
    e = windows[0].edits[0]
    other = next(r for r in world.relations)
    before = world.two_hop(e.subject, e.relation, other)
    world.apply(e)
    assert world.two_hop(e.subject, e.relation, other) == world.answer(e.new, other)
    assert before == world.answer(e.old, other)


def test_bad_edits_raise():
    world, tok, model = _world_and_model()
    C = _covariance(model, tok, world)
    cur = world.answer("e1", "r0")
    with pytest.raises(ValueError, match="equals the current object"):
        ke.rome_edit(model, tok, world, ke.Edit("e1", "r0", cur, cur), C, 0, 1, 0.5)
    with pytest.raises(ValueError, match="unknown subject"):
        world.apply(ke.Edit("e99", "r0", "e1", "e2"))
    with pytest.raises(ValueError, match="out of range"):
        ke.mlp(model, 5)


def test_answer_accuracy_is_one_on_the_models_own_answers_and_training_runs():
    world = ke.FactWorld.sample(8, 2, 0)
    model, tok, losses = ke.train_base(world, 0, steps=3, batch_size=8)
    assert len(losses) == 3 and all(l > 0 for l in losses)
    pairs = list(world.facts)
    enc = tok([ke.question(s, r, ke.TRAIN_TEMPLATES[0]) for s, r in pairs], return_tensors="pt", padding=True)
    own = tok.convert_ids_to_tokens(model(**enc).logits[:, -1].argmax(-1).tolist())
    assert ke.answer_accuracy(model, tok, pairs, own, ke.TRAIN_TEMPLATES[0]) == 1.0
    truth = [world.facts[p] for p in pairs]
    assert 0.0 <= ke.answer_accuracy(model, tok, pairs, truth, ke.TRAIN_TEMPLATES[0]) <= 1.0
