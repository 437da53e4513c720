"""Invariants of the S_n word problem, the parity argument, the parallel scan, the labels and the probes."""

import itertools
import math

import numpy as np
import pytest
import torch

from icml25 import state_tracking as st
from icml25.core import tinylm
from icml25.core.config import Config


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("n", [3, 5])
def test_group_sizes_and_parity_classes(n):
    els = st.elements(n)
    assert len(els) == math.factorial(n) and len(set(els)) == len(els)
    assert els[0] == tuple(range(n))  # index 0 is the identity
    assert sum(st.parity(p) == 0 for p in els) == math.factorial(n) // 2
    # S3: 6 states, 3 even; S5: 120, 60 even
    assert {3: (6, 3), 5: (120, 60)}[n] == (len(els), sum(1 - st.parity(p) for p in els))


@pytest.mark.parametrize("n", [3, 5])
def test_group_axioms(n):
    els = st.elements(n)
    ident = els[0]
    sample = els if n == 3 else els[::7]
    for a in sample:
        assert st.compose(ident, a) == a and st.compose(a, ident) == a
        assert any(st.compose(a, b) == ident for b in els)  # an inverse exists
        for b, c in itertools.product(sample, repeat=2):
            assert st.compose(st.compose(a, b), c) == st.compose(a, st.compose(b, c))


def test_compose_moves_objects_like_the_paper():
    # '213' (1-based) swaps the objects in the first two slots
    assert st.compose(("A", "B", "C"), (1, 0, 2)) == ("B", "A", "C")
    assert st.perm_word((1, 0, 2)) == "213"
    # S3 is not abelian, so the order of composition matters
    a, b = (1, 0, 2), (0, 2, 1)
    assert st.compose(a, b) != st.compose(b, a)


@pytest.mark.parametrize("n", [3, 5])
def test_parity_is_a_homomorphism_and_counts_cycles(n):
    els = st.elements(n)
    sample = els if n == 3 else els[::5]
    for p in els:
        assert st.parity(p) == (n - st.n_cycles(p)) % 2
    for a, b in itertools.product(sample, repeat=2):
        assert st.parity(st.compose(a, b)) == (st.parity(a) + st.parity(b)) % 2


@pytest.mark.parametrize("n", [3, 5])
def test_cayley_table_matches_compose(n):
    els, table = st.elements(n), st.cayley_table(n)
    for i, k in [(0, 0), (1, 2), (len(els) - 1, 3), (4, len(els) - 2)]:
        assert els[int(table[i, k])] == st.compose(els[i], els[k])


def test_state_sequence_by_enumeration_of_a_small_word():
    els = st.elements(3)
    idx = {p: i for i, p in enumerate(els)}
    word = [(1, 0, 2), (0, 2, 1), (1, 0, 2), (2, 0, 1)]
    expected, state = [], tuple(range(3))
    for a in word:  # apply the actions one by one to the arrangement
        state = tuple(state[j] for j in a)
        expected.append(idx[state])
    got = st.state_sequence(torch.tensor([[idx[a] for a in word]]), 3)[0].tolist()
    assert got == expected
    assert els[got[1]] == (1, 2, 0)  # hand-checked: 012 -> 102 -> 120


@pytest.mark.parametrize("n", [3, 5])
def test_states_and_parity_of_random_words(n):
    acts = st.sample_actions(n, 64, 13, _g(1))
    states = st.state_sequence(acts, n)
    par = st.parity_table(n)
    # eps(s_t) = sum_i eps(a_i) mod 2 (Eq. 1)
    assert torch.equal(st.parity_of_states(states, n), par[acts].cumsum(1) % 2)
    # the parallel prefix product equals the sequential fold, in ceil(log2 T) rounds
    scan, rounds = st.parallel_prefix_product(acts, n)
    assert torch.equal(scan, states) and rounds == math.ceil(math.log2(13))


def test_scan_blocks_cover_the_prefix_after_the_last_round():
    blocks = st.scan_blocks(10)
    assert len(blocks) == 1 + math.ceil(math.log2(10))
    assert blocks[0][4] == (5, 5) and blocks[1][4] == (4, 5) and blocks[2][4] == (2, 5)
    assert all(lo == 1 for lo, _ in blocks[-1])


def test_label_at_position_t_is_the_state_after_action_t():
    tok = st.make_tokenizer(3)
    acts = st.sample_actions(3, 4, 6, _g(2))
    ids = st.model_inputs(acts, tok, 3)
    assert ids.shape == (4, 7) and (ids[:, 0] == tok.bos_token_id).all()
    words = tok.convert_ids_to_tokens(ids[0, 1:].tolist())
    assert words == [st.perm_word(st.elements(3)[int(a)]) for a in acts[0]]

    class Oracle(torch.nn.Module):  # a "model" whose logits at input position i name s_i (s_0 = identity)
        def forward(self, input_ids, **_):
            perm_ids, _ = st.token_ids(tok, 3)
            states = torch.cat([torch.zeros(acts.shape[0], 1, dtype=torch.long), st.state_sequence(acts, 3)], 1)
            logits = torch.full((*input_ids.shape, len(tok)), -10.0)
            logits.scatter_(2, perm_ids[states].unsqueeze(-1), 10.0)
            return type("Out", (), {"logits": logits})()

    pred = st.predict_states(Oracle(), acts, tok, 3)
    assert torch.equal(pred, st.state_sequence(acts, 3))
    assert float(st.state_loss(Oracle(), acts, tok, 3)) < 1e-6


def test_parity_consistency_and_chance():
    assert st.parity_chance(3) == pytest.approx(2 / 5)
    assert st.parity_chance(5) == pytest.approx(59 / 119)
    states = torch.tensor([[0, 1, 2, 3]])
    par = st.parity_table(3)
    same = [k for k in range(6) if k != 0 and par[k] == par[0]][0]
    other = [k for k in range(6) if par[k] != par[1]][0]
    pred = torch.tensor([[same, other, 2, 3]])  # one parity-keeping error, one parity-breaking error
    assert st.parity_consistent_errors(pred, states, 3) == (0.5, 2)
    assert math.isnan(st.parity_consistent_errors(states, states, 3)[0])


def test_classification_rule():
    c = st.parity_chance(3)
    assert st.classify(c, 100, 3, 30) == "AA-like"
    assert st.classify(1.0, 100, 3, 30) == "PAA-like"
    assert st.classify(c + 0.5 * (1 - c), 100, 3, 30) == "intermediate"
    assert st.classify(1.0, 5, 3, 30) == "unclassified"


def _reference_probe(x, y, n_classes, n_train, ridge):
    """A plain numpy least-squares probe for one (layer, position)."""
    mu, sd = x[:n_train].mean(0), x[:n_train].std(0, ddof=1) + 1e-6
    z = (x - mu) / sd
    a = np.hstack([z, np.ones((len(z), 1))])
    w = np.linalg.solve(a[:n_train].T @ a[:n_train] + ridge * n_train * np.eye(a.shape[1]),
                        a[:n_train].T @ np.eye(n_classes)[y[:n_train]])
    return float(((a[n_train:] @ w).argmax(1) == y[n_train:]).mean())


def test_probes_match_reference_and_reach_100_on_one_hot_states_and_chance_on_noise():
    g = _g(3)
    labels = torch.randint(6, (2, 3, 400), generator=g)
    one_hot = torch.nn.functional.one_hot(labels, 6).float() + 0.01 * torch.randn(2, 3, 400, 6, generator=g)
    noise = torch.randn(2, 3, 400, 16, generator=g)
    acc_onehot = st.ridge_probe_accuracy(one_hot, labels, 6, 300, 1e-2)
    acc_noise = st.ridge_probe_accuracy(noise, labels, 6, 300, 1e-2)
    assert acc_onehot.shape == (2, 3) and (acc_onehot == 1.0).all()
    assert abs(float(acc_noise.mean()) - 1 / 6) < 0.08
    for i, j in [(0, 0), (1, 2)]:
        ref = _reference_probe(noise[i, j].numpy().astype(np.float64), labels[i, j].numpy(), 6, 300, 1e-2)
        assert float(acc_noise[i, j]) == pytest.approx(ref, abs=0.011)


def test_resolving_layer():
    probe = np.array([[1.0, 0.2, 0.1, 0.1],
                      [1.0, 0.95, 0.3, 0.2],
                      [1.0, 1.0, 0.92, 0.4]])
    got = st.resolving_layer(probe, 0.9)
    assert got[:3].tolist() == [0.0, 1.0, 2.0] and np.isnan(got[3])


def test_corruption_keeps_or_flips_parity():
    acts = st.sample_actions(3, 50, 5, _g(4))
    par = st.parity_table(3)
    for same in (True, False):
        bad = st.corrupt(acts, 2, same, 3, _g(5))
        assert (bad[:, 2] != acts[:, 2]).all()
        assert ((par[bad[:, 2]] == par[acts[:, 2]]) == same).all()
        assert torch.equal(bad[:, [0, 1, 3, 4]], acts[:, [0, 1, 3, 4]])


def test_patching_at_the_embeddings_restores_everything():
    cfg = st.config("smoke")
    tok = st.make_tokenizer(3)
    model = tinylm.make_model("nano", tok, 0, max_len=16, num_hidden_layers=2)
    model.eval()
    clean = st.sample_actions(3, 16, 6, _g(6))
    nld = st.prefix_patching(model, tok, 3, clean, st.corrupt(clean, 5, False, 3, _g(7)), 5)
    assert nld.shape == (3,)  # embeddings + 2 blocks; patching the whole sequence restores the clean run
    assert np.allclose(nld, 1.0, atol=1e-3)
    assert cfg.group_n == 3


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="S_3"):
        st.elements(4)
    with pytest.raises(ValueError, match="positive"):
        st.sample_actions(3, 2, 0, _g())
    with pytest.raises(ValueError, match="positive"):
        st.scan_blocks(-1)
    with pytest.raises(ValueError, match="condition"):
        st.get_tracker(st.config("smoke"), 0, "sequential")
    with pytest.raises(ValueError, match="valid settings"):
        st.config("ci", n_heads=3)
    with pytest.raises(ValueError, match="valid scales"):
        st.config("huge")


def test_a_short_training_run_lowers_the_state_loss():
    cfg = Config("smoke", dict(st.config("smoke"), steps=30, parity_steps=8, n_layers=1))
    model, tok, info = st.train_tracker(cfg, 0, "parity_curriculum")
    assert info["parity_steps"] == 8 and len(info["losses"]) == 8 + 30  # the parity stage comes before
    assert np.mean(info["losses"][-5:]) < math.log(6)
    _, _, plain = st.train_tracker(cfg, 0, "plain")
    assert plain["parity_steps"] == 0 and len(plain["losses"]) == 30


def test_precondition_gates_the_mechanism_label():
    c = st.parity_chance(3)
    assert st.label_run(st.LEARNED_ACCURACY, c, 100, 3, 30) == "AA-like"
    assert st.label_run(st.LEARNED_ACCURACY, 1.0, 100, 3, 30) == "PAA-like"
    assert st.label_run(st.LEARNED_ACCURACY - 0.01, 1.0, 100, 3, 30) == "not learned"


def _report(condition, seed, learned, label, parity_consistency, fill):
    probes = {"state": np.full((2, 3), fill), "parity": np.full((2, 3), fill)}
    return st.RunReport(condition, seed, np.ones(6), 1.0 if learned else 0.5, learned, parity_consistency, 100,
                        probes, early_parity=fill, long_accuracy=fill, label=label, losses=[],
                        informative_errors=0.8)


def test_summarise_and_probe_maps_use_only_the_runs_that_learned():
    reports = [_report("plain", 0, True, "AA-like", 0.4, 0.2), _report("plain", 1, False, "not learned", 0.9, 0.6),
               _report("parity_curriculum", 0, True, "PAA-like", 1.0, 0.8),
               _report("parity_curriculum", 1, True, "intermediate", 0.7, 0.4)]
    m = st.summarise(reports)
    assert m["parity_consistency_plain"] == [0.4] and m["parity_consistency_curriculum"] == [1.0, 0.7]
    assert (m["n_not_learned"], m["n_aa"], m["n_paa"], m["n_intermediate"]) == (1, 1, 1, 1)
    assert m["long_accuracy_aa"] == [0.2] and m["long_accuracy_paa"] == [0.8]
    assert len(m["labels"]) == 4 and "plain/s1:not learned" in m["labels"]
    plain_map, k = st.mean_probe_map(reports, "plain", "state")
    assert k == 1 and np.allclose(plain_map, 0.2)
    curriculum_map, k = st.mean_probe_map(reports, "parity_curriculum", "parity")
    assert k == 2 and np.allclose(curriculum_map, 0.6)
    none_map, k = st.mean_probe_map([reports[1]], "plain", "state")
    assert k == 0 and none_map.shape == (2, 3) and np.isnan(none_map).all()
    # paired by seed: only seed 0 has both runs learned, and its runs are AA-like (plain) and PAA-like
    assert m["n_pairs"] == 1 and m["steer_consistency_diff"] == [pytest.approx(0.6)]
    assert m["n_mixed_seeds"] == 1 and m["aa_minus_paa_long_accuracy"] == [pytest.approx(0.2 - 0.8)]
    assert m["is_aa"] == [1.0, 0.0, 0.0] and m["is_paa"] == [0.0, 1.0, 0.0]
    for claim in st.CLAIMS:  # a run did not learn: every claim is inconclusive, naming the precondition
        got = claim.decide(m)
        assert got["verdict"] == "inconclusive" and "all_learned" in got["reason"]


def test_informative_error_share_counts_errors_where_the_model_still_tracks():
    states = torch.zeros(4, 3, dtype=torch.long)
    pred = torch.tensor([[0, 0, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]])
    acc = st.accuracy_by_position(pred, states)  # 1.0, 0.75, 0.25 by position
    # 4 errors: one at position 2 (accuracy 0.75, tracking) and three at position 3 (0.25, at chance)
    assert st.informative_error_share(pred, states, acc) == pytest.approx(0.25)
    assert np.isnan(st.informative_error_share(states, states, np.ones(3)))


