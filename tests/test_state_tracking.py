"""Invariants of the S_n word problem, the parity argument, the parallel scan, the labels and the probes."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats

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


@pytest.mark.parametrize("n", [3, 5])
def test_label_at_position_t_is_the_state_after_action_t(n):
    tok = st.make_tokenizer(n)
    perm_ids, par_ids = st.token_ids(tok, n)
    # one word per permutation (120 in S5) and two parity words, all distinct
    assert len(set(perm_ids.tolist()) | set(par_ids.tolist())) == math.factorial(n) + 2
    acts = st.sample_actions(n, 4, 6, _g(2))
    ids = st.model_inputs(acts, tok, n)
    assert ids.shape == (4, 7) and (ids[:, 0] == tok.bos_token_id).all()
    words = tok.convert_ids_to_tokens(ids[0, 1:].tolist())
    assert words == [st.perm_word(st.elements(n)[int(a)]) for a in acts[0]]

    class Oracle(torch.nn.Module):  # a "model" whose logits at input position i name s_i (s_0 = identity)
        def forward(self, input_ids, **_):
            states = torch.cat([torch.zeros(acts.shape[0], 1, dtype=torch.long), st.state_sequence(acts, n)], 1)
            logits = torch.full((*input_ids.shape, len(tok)), -10.0)
            logits.scatter_(2, perm_ids[states].unsqueeze(-1), 10.0)
            return type("Out", (), {"logits": logits})()

    pred = st.predict_states(Oracle(), acts, tok, n)
    assert torch.equal(pred, st.state_sequence(acts, n))
    assert float(st.state_loss(Oracle(), acts, tok, n)) < 1e-6


def test_s5_story_by_hand():
    # in S5, 21345 then 13245 (both transpositions, odd) give 23145, a 3-cycle (even); then 21345 gives 32145
    els = st.elements(5)
    idx = {p: i for i, p in enumerate(els)}
    word = [(1, 0, 2, 3, 4), (0, 2, 1, 3, 4), (1, 0, 2, 3, 4)]
    states = st.state_sequence(torch.tensor([[idx[a] for a in word]]), 5)[0].tolist()
    assert [st.perm_word(els[s]) for s in states] == ["21345", "23145", "32145"]
    assert [st.parity(els[s]) for s in states] == [1, 0, 1]
    assert st.parity_of_states(torch.tensor(states), 5).tolist() == [1, 0, 1]


def test_parity_consistency_and_chance():
    assert st.parity_chance(3) == pytest.approx(2 / 5)
    assert st.parity_chance(5) == pytest.approx(59 / 119)
    states = torch.tensor([[0, 1, 2, 3]])
    par = st.parity_table(3)
    same = [k for k in range(6) if k != 0 and par[k] == par[0]][0]
    other = [k for k in range(6) if par[k] != par[1]][0]
    pred = torch.tensor([[same, other, 2, 3]])  # one parity-keeping error, one parity-breaking error
    assert st.parity_consistent_errors(pred, states, 3) == (0.5, 2)
    assert st.parity_consistent_errors(pred, states, 3, where=np.array([True, False, True, True])) == (1.0, 1)
    assert math.isnan(st.parity_consistent_errors(states, states, 3)[0])


def test_error_signature_reads_only_errors_where_the_model_tracks():
    par = st.parity_table(3)
    states = torch.zeros(10, 2, dtype=torch.long)  # the identity (even) everywhere
    even_wrong = [k for k in range(6) if k != 0 and par[k] == 0][0]
    odd = [k for k in range(6) if par[k] == 1][0]
    pred = states.clone()
    pred[:3, 0] = even_wrong  # position 1: right 7 of 10 times, three parity-keeping errors
    pred[:, 1] = odd  # position 2: always wrong (at chance), parity-breaking errors
    acc = st.accuracy_by_position(pred, states)
    z, n_err = st.error_signature(pred, states, acc, 3, min_errors=3)
    assert (z, n_err) == (pytest.approx(1.0), 3)  # the ten errors at position 2 are not read
    assert math.isnan(st.error_signature(pred, states, acc, 3, min_errors=4)[0])
    pred[:3, 0] = odd  # parity-breaking errors where the model tracks: below chance
    z, _ = st.error_signature(pred, states, acc, 3, min_errors=3)
    assert z == pytest.approx((0 - 0.4) / 0.6)


def test_classification_rule_is_the_unanimous_vote_of_the_voting_signatures():
    assert st.VOTING == ("probes",)
    assert st.classify([0.0]) == "AA-like" and st.classify([1.0]) == "PAA-like"
    assert st.classify([st.AA_BAND]) == "AA-like" and st.classify([st.PAA_BAND]) == "PAA-like"
    assert st.classify([0.5]) == "mixed" and st.classify([float("nan")]) == "mixed"  # abstains, unreadable
    assert st.classify([0.0, 0.1]) == "AA-like" and st.classify([1.0, 0.9]) == "PAA-like"
    assert st.classify([0.0, 0.9]) == "mixed"  # votes that disagree
    assert st.classify([1.0, 0.5]) == "mixed"  # an abstention withholds the label


def test_the_voting_signatures_pass_the_positive_control_on_the_calibration_seeds_and_the_others_fail_it():
    forced, plain = st.POSITIVE_CONTROL["parity_aux"], st.POSITIVE_CONTROL["plain"]
    assert len(forced["probes"]) == len(plain["probes"]) == len(st.CALIBRATION_SEEDS)
    labels = [st.classify([forced[k][i] for k in st.VOTING]) for i in range(len(forced["probes"]))]
    assert labels.count("PAA-like") >= st.POSITIVE_CONTROL_SHARE * len(labels)
    for name in st.SIGNATURES:
        paa_votes = sum(st.vote(v) == "PAA" for v in forced[name])
        votes_both_ways = paa_votes > 0 and any(st.vote(v) == "AA" for v in plain[name])
        # a signature votes in the rule exactly when it votes PAA on the forced runs and AA on some plain run
        assert (name in st.VOTING) == (votes_both_ways and paa_votes >= st.POSITIVE_CONTROL_SHARE * len(labels))


def test_probe_signature_is_zero_when_parity_follows_the_state_and_one_when_it_leads():
    c = st.parity_chance(3)
    acc_s = np.array([0.3, 0.5, 1.0])
    aa = {"state": acc_s, "parity": acc_s + (1 - acc_s) * c}  # parity read off a partly decodable state
    assert st.probe_signature(aa, 3) == pytest.approx(0.0, abs=1e-12)
    paa = {"state": acc_s, "parity": np.array([0.5, 1.0, 1.0])}  # parity perfect at layer 1, state half-resolved
    assert st.probe_signature(paa, 3) == pytest.approx(1.0)
    resolved = {"state": np.ones(3), "parity": np.ones(3)}
    assert math.isnan(st.probe_signature(resolved, 3))


def test_pooled_probe_is_the_official_split_and_reaches_100_on_one_hot_states_and_chance_on_noise():
    rng = np.random.default_rng(3)
    labels = rng.integers(6, size=(500, 4))
    one_hot = np.eye(6)[labels] + 0.01 * rng.standard_normal((500, 4, 6))
    noise = rng.standard_normal((500, 4, 16))
    acc, by_t = st.pooled_probe(one_hot, labels)
    assert acc == 1.0 and by_t.shape == (4,) and (by_t == 1.0).all()
    acc_noise, _ = st.pooled_probe(noise, labels)
    assert abs(acc_noise - 1 / 6) < 0.05
    # the official split: the first min(1000, 0.8 N T) rows of the story-major flattening fit, the rest score
    from sklearn.linear_model import LogisticRegression
    x, y = noise.reshape(-1, 16), labels.reshape(-1)
    ref = LogisticRegression(max_iter=5000).fit(x[:1000], y[:1000]).score(x[1000:], y[1000:])
    assert acc_noise == pytest.approx(ref)


def test_curriculum_length_climbs_in_equal_stages_then_holds():
    lengths = [st.curriculum_length(k, 100, 2, 5, 0.4) for k in range(100)]
    assert lengths[0] == 2 and lengths[39] == 5 and set(lengths[40:]) == {5}
    assert [lengths.count(v) for v in (2, 3, 4)] == [10, 10, 10]
    assert lengths == sorted(lengths)
    assert st.curriculum_length(0, 100, 4, 4, 0.5) == 4 and st.curriculum_length(0, 100, 2, 4, 0.0) == 4


def test_resolving_layer():
    probe = np.array([[1.0, 0.2, 0.1, 0.1],
                      [1.0, 0.95, 0.3, 0.2],
                      [1.0, 1.0, 0.92, 0.4]])
    got = st.resolving_layer(probe, 0.9)
    assert got[:3].tolist() == [0.0, 1.0, 2.0] and np.isnan(got[3])


@pytest.mark.parametrize("n", [3, 5])
def test_corruption_keeps_or_flips_parity(n):
    acts = st.sample_actions(n, 50, 5, _g(4))
    par = st.parity_table(n)
    for same in (True, False):
        bad = st.corrupt(acts, 2, same, n, _g(5))
        assert (bad[:, 2] != acts[:, 2]).all()
        assert ((par[bad[:, 2]] == par[acts[:, 2]]) == same).all()
        assert torch.equal(bad[:, [0, 1, 3, 4]], acts[:, [0, 1, 3, 4]])


def test_patching_map_exact_cells():
    cfg = Config("smoke", dict(st.config("smoke"), steps=60, start_length=1, train_length=3, lr=1e-2))
    model, tok, _ = st.train_tracker(cfg, 0, "plain")  # its answers depend on a_1 (the map averages such pairs)
    clean = st.sample_actions(3, 64, 3, _g(6))
    bad = st.corrupt(clean, 0, False, 3, _g(7))
    for mode in st.PATCH_MODES:
        nld = st.patching_map(model, tok, 3, clean, bad, mode)
        assert nld.shape == (3, 3)  # embeddings + 2 blocks, 3 tokens
        # the embedding of a_1 alone carries the whole corruption; the other embeddings are identical in both runs
        assert nld[0, 0] == pytest.approx(1.0) and (mode == "prefix" or np.allclose(nld[0, 1:], 0.0))
        # after the last block only the last token's residual reaches the answer
        assert nld[-1, -1] == pytest.approx(1.0) and (mode == "prefix" or np.allclose(nld[-1, :-1], 0.0))
    with pytest.raises(ValueError, match="patching mode"):
        st.patching_map(model, tok, 3, clean, bad, "suffix")


def test_mean_ablation_replaces_only_the_component_along_the_direction():
    h, mean = torch.randn(5, 3, 8, generator=_g(20)), torch.randn(8, generator=_g(21))
    w = torch.randn(8, generator=_g(22))
    w = w / w.norm()
    out = st.ablate_direction(h, w, mean)
    assert torch.allclose(out @ w, torch.full((5, 3), float(mean @ w)), atol=1e-5)  # the component is the mean's
    change = out - h  # and nothing else moves: the change is parallel to w
    assert torch.allclose(change, (change @ w)[..., None] * w, atol=1e-5)


def test_ablating_a_direction_orthogonal_to_the_hidden_states_changes_nothing_and_the_parity_direction_does():
    tok = st.make_tokenizer(3)
    model = tinylm.random_model("llama", tok, 0, hidden=32, layers=2, max_len=16, initializer_range=0.5)
    acts = st.sample_actions(3, 64, 4, _g(23))
    base = st.ablated_accuracy(model, tok, 3, acts, 0)
    # at the embeddings every residual lies in the span of the few token embeddings: a direction orthogonal to
    # that span (and to their mean) has no component to replace, so the model's answers are exactly unchanged
    emb = model.get_input_embeddings().weight.detach()
    basis = torch.linalg.qr(emb.T).Q  # [d, vocab]: the span of the embeddings
    w = torch.randn(emb.shape[1], generator=_g(24))
    w = w - basis @ (basis.T @ w)
    w = w / w.norm()
    assert np.array_equal(st.ablated_accuracy(model, tok, 3, acts, 0, w, emb.mean(0)), base)
    # the parity probe's direction after block 1 is a unit vector; the drop is the accuracy at t <= T the model
    # loses when it is mean-ablated there, on the "eval" stories, the probe fitted on the "probe" stories
    cfg = Config("smoke", dict(st.config("smoke"), n_layers=2, train_length=4, n_eval=64, n_probe=64))
    direction, mean = st.parity_direction(model, tok, 3, st.eval_actions(cfg, 64, 4, "probe"), 1)
    assert direction.shape == (32,) and float(direction.norm()) == pytest.approx(1.0)
    eval_acts = st.eval_actions(cfg, 64, 4, "eval")
    expected = (st.ablated_accuracy(model, tok, 3, eval_acts, 1).mean()
                - st.ablated_accuracy(model, tok, 3, eval_acts, 1, direction, mean).mean())
    got = st.parity_ablation_drops(model, tok, cfg)
    assert got.parity == pytest.approx(float(expected))
    assert -1.0 <= got.random <= 1.0  # a random direction, same code
    assert len(got.matched) == len(got.matched_variance_ratio) == cfg.n_ablation_controls
    assert got.parity_minus_matched == pytest.approx(got.parity - float(np.mean(got.matched)))
    assert 0.0 < got.parity_variance_share < 1.0
    with pytest.raises(ValueError, match="ablation layer"):
        st.ablated_accuracy(model, tok, 3, acts, 2, direction, mean)  # after the last block is the final norm's


def _anisotropic_rows(sds, n=4000, seed=30):
    return torch.randn(n, len(sds), generator=_g(seed)) * torch.tensor(sds)


def test_variance_matched_controls_carry_the_variance_avoid_the_parity_signal_and_say_when_none_can():
    sds = [3.0, 3.0, 4.0, 4.0] + [0.5] * 12
    x = _anisotropic_rows(sds)
    axis = torch.eye(len(sds))
    w, avoid = axis[0], axis[:, 5:6]
    controls, ratios = st.variance_matched_controls(x, w, 6, _g(31), exclude=avoid)
    assert len(controls) == 6 and all(u.shape == (1, len(sds)) for u in controls)  # one direction carries 9
    dirs = torch.cat(controls)
    assert torch.allclose(dirs.norm(dim=1), torch.ones(6), atol=1e-5)
    assert torch.allclose(dirs @ w, torch.zeros(6), atol=1e-5) and torch.allclose(dirs @ avoid[:, 0], torch.zeros(6),
                                                                                   atol=1e-5)
    assert np.allclose(ratios, 1.0, atol=1e-3)  # each carries the variance along w, 9
    assert [st.variance_along(x, u) for u in controls] == pytest.approx([st.variance_along(x, w)] * 6, rel=1e-3)
    assert len({tuple(np.round(u.numpy().ravel(), 3)) for u in controls}) == 6  # random draws, not one direction
    # a direction carrying more variance than any one direction orthogonal to it: each control is a subspace of
    # the fewest dimensions that carry it (here 36 needs three of the 16s), orthonormal, orthogonal to w
    lead = _anisotropic_rows([6.0] + [4.0] * 4 + [1.0] * 3, seed=32)
    controls, ratios = st.variance_matched_controls(lead, torch.eye(8)[0], 3, _g(33))
    assert all(u.shape == (3, 8) for u in controls) and np.allclose(ratios, 1.0, atol=1e-3)
    for u in controls:
        assert torch.allclose(u @ u.T, torch.eye(3), atol=1e-5) and torch.allclose(u[:, 0], torch.zeros(3), atol=1e-5)
    # when the whole complement carries less, no control matches, and the ratios say by how much the nearest
    # misses (the precondition variance_matched then fails)
    lone = _anisotropic_rows([6.0] + [1.0] * 7, seed=34)
    _, ratios = st.variance_matched_controls(lone, torch.eye(8)[0], 3, _g(35))
    assert (ratios < 1 - st.VARIANCE_TOLERANCE).all()
    # nor when every direction there carries more than the target (least variance 0.25 here, target 0.1): the
    # nearest control is the least-variance direction, and it overshoots
    _, ratios = st.variance_matched_controls(x, w, 3, _g(37), exclude=avoid, target=0.1)
    assert (ratios > 1 + st.VARIANCE_TOLERANCE).all()


def test_a_direction_the_readout_uses_costs_more_than_its_variance_matched_controls_and_an_ignored_one_does_not():
    # synthetic residual rows whose readout is the sign along axis 1; axis 0 carries as much variance, unread
    sds = [3.0, 3.0, 4.0, 4.0] + [0.5] * 12
    x = _anisotropic_rows(sds)
    axis = torch.eye(len(sds))
    truth = x[:, 1] > 0

    def drops(w):
        dirs, ratios = st.variance_matched_controls(x, w, 8, _g(36))

        def drop(u):
            return float(((st.ablate_direction(x, u, x.mean(0))[:, 1] > 0) != truth).float().mean())

        return st.AblationDrops(parity=drop(w), matched=[drop(u) for u in dirs], random=math.nan,
                                parity_variance_share=math.nan, matched_variance_ratio=ratios.tolist())

    used, ignored = drops(axis[1]), drops(axis[0])
    assert max(st.largest_miss(d.matched_variance_ratio) for d in (used, ignored)) < 1e-3
    # the read direction: ablating it leaves the readout at chance; its controls, orthogonal to it, cost nothing
    assert used.parity > 0.4 and used.matched == [0.0] * 8
    assert used.parity_minus_matched > st.ABLATION_MIN_EFFECT
    # the unread high-variance direction costs nothing itself; controls of its variance can reach the read axis
    assert ignored.parity == 0.0 and ignored.matched_mean > 0 and ignored.parity_minus_matched < 0


def test_leace_is_the_closed_form_and_leaves_the_two_classes_one_mean():
    # a small exact case: six rows in 3 dimensions, a binary concept; LEACE is the rank-one oblique projection
    # r(x) = x - delta delta^T S^+ (x - mean) / (delta^T S^+ delta), delta the classes' mean difference
    x = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.0, 2.0, 0.0], [3.0, 1.0, 1.0], [1.0, 3.0, 2.0],
                      [4.0, 2.0, 3.0]], dtype=torch.float64)
    z = torch.tensor([0, 0, 0, 1, 1, 1])
    eraser = st.leace_eraser(x, z)
    out = eraser(x)
    delta = x[z == 1].mean(0) - x[z == 0].mean(0)
    cov_pinv = torch.linalg.pinv(torch.cov(x.T))
    expected = x - torch.outer((x - x.mean(0)) @ cov_pinv @ delta, delta) / (delta @ cov_pinv @ delta)
    assert torch.allclose(out, expected, atol=1e-9)
    assert torch.allclose(out[z == 1].mean(0), out[z == 0].mean(0), atol=1e-9)  # one mean for both classes
    assert torch.allclose(out.mean(0), x.mean(0), atol=1e-9)  # the mean row is kept
    change = out - x  # every row moves along delta alone
    assert torch.allclose(change - torch.outer(change @ delta, delta) / (delta @ delta), torch.zeros_like(x),
                          atol=1e-9)


def test_after_leace_a_fresh_probe_cannot_read_a_concept_it_read_before():
    # rows whose binary concept is read along a mix of axes, with correlated noise; the probe reads it before
    g = _g(40)
    z = torch.randint(2, (4000,), generator=g)
    mix = torch.randn(12, 12, generator=g)
    x = (torch.randn(4000, 12, generator=g) @ mix + torch.outer(2.0 * z - 1, torch.randn(12, generator=g) * 1.5))
    features, labels = x.reshape(1000, 4, 12).numpy(), z.reshape(1000, 4).numpy()
    assert st.pooled_probe(features, labels)[0] > 0.95
    eraser = st.leace_eraser(x[:2000], z[:2000])  # fitted on one split, read on the other
    held = eraser(x[2000:].double()).float()
    assert st.pooled_probe(held.reshape(500, 4, 12).numpy(), z[2000:].reshape(500, 4).numpy())[0] <= 0.6
    # ablating the best probe's direction alone is not enough when the concept lies along several correlated axes
    w = torch.linalg.lstsq(x - x.mean(0), (z - z.float().mean()).float()[:, None]).solution[:, 0]
    ablated = st.ablate_direction(x[2000:], w / w.norm(), x.mean(0))
    assert st.pooled_probe(ablated.reshape(500, 4, 12).numpy(), z[2000:].reshape(500, 4).numpy())[0] > 0.6


def test_variance_matched_controls_match_a_given_change_and_the_erasure_s_controls_match_it_in_a_model():
    x = _anisotropic_rows([3.0, 3.0, 4.0, 4.0] + [0.5] * 12)
    w = torch.eye(16)[0]
    controls, ratios = st.variance_matched_controls(x, w, 4, _g(41), target=5.0)
    assert np.allclose(ratios, 1.0, atol=1e-3) and [st.variance_along(x, u) for u in controls] == pytest.approx(
        [5.0] * 4, rel=1e-3)
    assert all(torch.allclose(u @ w, torch.zeros(len(u)), atol=1e-5) for u in controls)
    # in a model: the erasure and its controls after block 1 of a random tiny Llama
    tok = st.make_tokenizer(3)
    model = tinylm.random_model("llama", tok, 0, hidden=32, layers=2, max_len=16, initializer_range=0.5)
    cfg = Config("smoke", dict(st.config("smoke"), n_layers=2, train_length=4, n_eval=64, n_probe=64))
    got = st.parity_erasure_drops(model, tok, cfg)
    assert len(got.matched) == len(got.parity_after_controls) == len(got.matched_change_ratio) == cfg.n_ablation_controls
    assert got.change_mismatch < 1e-3 and 0.0 < got.change_share < 1.0
    assert got.erased_minus_matched == pytest.approx(got.erased - float(np.mean(got.matched)))
    # the drop is the accuracy lost with the erasure applied at the actions' positions after block 1
    fit = st.eval_actions(cfg, cfg.n_probe, 4, "probe")
    x = st.residual_rows(model, tok, 3, fit, 1)
    eraser = st.leace_eraser(x, st.parity_of_states(st.state_sequence(fit, 3), 3).reshape(-1))
    acts = st.eval_actions(cfg, cfg.n_eval, 4, "eval")
    expected = (st.edited_accuracy(model, tok, 3, acts, 1).mean()
                - st.edited_accuracy(model, tok, 3, acts, 1, lambda h: eraser(h.double()).float(), first=1).mean())
    assert got.erased == pytest.approx(float(expected))


def _erasure_and_complement(x, z):
    """A plain reference: LEACE's mean squared change on rows `x` with binary concept `z`, in its closed form
    (delta delta^T S^+ (x - mean) / delta^T S^+ delta), and what mean-ablating the whole complement of the classes'
    mean difference delta removes (the stream's variance off delta)."""
    x = x.double()
    delta = x[z == 1].mean(0) - x[z == 0].mean(0)
    cov_pinv = torch.linalg.pinv(torch.cov(x.T))
    centred = x - x.mean(0)
    moved = torch.outer(centred @ cov_pinv @ delta, delta) / (delta @ cov_pinv @ delta)
    off = centred - torch.outer(centred @ delta, delta) / (delta @ delta)
    return float(moved.pow(2).sum(1).mean()), float(off.pow(2).sum(1).mean()), delta / delta.norm()


@pytest.mark.parametrize("noise_sds, reachable", [((1.0,) * 7, False), ((0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5), True)])
def test_the_erasure_s_controls_match_it_exactly_unless_the_complement_of_the_parity_carries_less(noise_sds,
                                                                                                 reachable):
    # rows whose two classes lie +-3 apart along axis 0 (with unit noise there), plus 7 noise axes: LEACE moves the
    # rows along delta by at most the variance there (Cauchy-Schwarz), so when delta carries most of the stream (unit
    # noise: 10 of 17) no subspace orthogonal to delta carries the erasure's change, and the nearest control is that
    # whole complement, missing by exactly what it lacks; with wider noise axes one of them carries enough and the
    # controls match the change
    g = _g(50)
    z = torch.randint(2, (4000,), generator=g)
    x = torch.randn(4000, 8, generator=g) * torch.tensor([1.0, *noise_sds])
    x[:, 0] += 6.0 * z - 3.0
    change, complement, dhat = _erasure_and_complement(x, z)
    eraser = st.leace_eraser(x, z)
    assert float((x.double() - eraser(x.double())).pow(2).sum(1).mean()) == pytest.approx(change, rel=1e-9)
    assert change <= st.variance_along(x, dhat)
    controls, ratios = st.variance_matched_controls(x, dhat, 3, _g(51), target=change)
    assert all(torch.allclose(u @ dhat.float(), torch.zeros(len(u)), atol=1e-5) for u in controls)
    if reachable:
        assert complement > change and st.largest_miss(ratios) < 1e-6
    else:
        assert complement < (1 - st.VARIANCE_TOLERANCE) * change
        assert all(len(u) == 7 for u in controls)  # the whole complement of delta
        assert ratios == pytest.approx([complement / change] * 3, rel=1e-6)
        assert st.largest_miss(ratios) == pytest.approx(1 - complement / change, rel=1e-5)


def test_far_above_chance_reads_the_positions_past_one_step_beyond_t():
    acc = np.array([1.0, 1.0, 1.0, 0.9, 0.5, 0.3])  # T = 3: positions 5 and 6 count, not 4
    assert st.far_above_chance(acc, 3, 3) == pytest.approx(0.4 - 1 / 6)
    assert math.isnan(st.far_above_chance(np.ones(2), 1, 3))  # T = 1, 2T = 2: no position past T + 1


def test_patching_signature_reads_the_last_token_after_the_early_layer():
    same = np.zeros((3, 4))
    different = np.zeros((3, 4))
    different[1, -1], same[1, -1] = 0.8, 0.1
    assert st.patching_signature({"same": same, "different": different}, 1) == pytest.approx(0.7)
    assert st.patching_signature({"same": same, "different": different}, 0) == 0.0


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


def test_a_short_training_run_lowers_the_state_loss_and_the_aux_loss_adds_the_early_parity_term():
    cfg = Config("smoke", dict(st.config("smoke"), steps=30, n_layers=2))
    _, _, plain = st.train_tracker(cfg, 0, "plain")
    assert plain["parity_weight"] == 0.0 and len(plain["losses"]) == 30
    assert np.mean(plain["losses"][-5:]) < math.log(6)
    _, _, aux = st.train_tracker(cfg, 0, "parity_aux")
    assert aux["parity_weight"] == cfg.parity_weight
    # same initialisation and data: the first step's loss differs exactly by the weighted parity term
    tok = st.make_tokenizer(3)
    model = tinylm.make_model(cfg.preset, tok, 0, max_len=4 * cfg.train_length + 1, num_hidden_layers=2)
    acts = st.sample_actions(3, 8, 4, _g(8))
    with torch.no_grad():
        total = st.state_loss(model, acts, tok, 3, parity_weight=0.5, parity_layer=1)
        state = st.state_loss(model, acts, tok, 3)
        _, par_ids = st.token_ids(tok, 3)
        # the parity is read after block 1 of 2, through the final norm and the head
        after_block = model(input_ids=st.model_inputs(acts, tok, 3), output_hidden_states=True).hidden_states[1]
        logits = model.lm_head(model.model.norm(after_block))[:, 1:, par_ids]
        parity = torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                   st.parity_of_states(st.state_sequence(acts, 3), 3).flatten())
    assert float(total) == pytest.approx(float(state + 0.5 * parity), rel=1e-5)


def test_precondition_gates_the_mechanism_label():
    assert st.label_run(st.LEARNED_ACCURACY, [0.0, 0.0, 0.0]) == "AA-like"
    assert st.label_run(st.LEARNED_ACCURACY, [1.0, 1.0, 1.0]) == "PAA-like"
    assert st.label_run(st.LEARNED_ACCURACY - 0.01, [1.0, 1.0, 1.0]) == "not learned"


def _report(condition, seed, learned, label, sig, fill):
    probes = {"state": np.full(2, fill), "parity": np.full(2, fill), "state_by_t": np.full((2, 3), fill)}
    return st.RunReport(condition, seed, np.ones(6), 1.0 if learned else 0.5, learned,
                        {"errors": sig, "probes": sig, "patching": float("nan")},
                        {"errors": 0.0, "probes": 0.0, "patching": 0.0}, 100, probes,
                        {"same": np.zeros((2, 3)), "different": np.full((2, 3), fill)}, long_accuracy=fill,
                        label=label, null_label="AA-like" if learned else "not learned", losses=[],
                        ablation=st.AblationDrops(parity=fill, matched=[fill / 2, fill / 2], random=0.0,
                                                  parity_variance_share=fill, matched_variance_ratio=[1.0, 1.05]),
                        erasure=st.ErasureDrops(erased=fill, matched=[fill / 4, fill / 4], parity_after=0.5 + fill / 10,
                                                parity_after_controls=[0.99, 0.98], change_share=fill / 2,
                                                matched_change_ratio=[1.0, 0.97], matched_dimensions=[1, 1],
                                                erased_errors=(100, round(100 * fill)),
                                                matched_errors=[(60, 6), (40, 4)], n_predictions=400),
                        parity_readable=sig)


def test_summarise_and_maps_use_only_the_runs_that_learned():
    reports = [_report("plain", 0, True, "AA-like", 0.1, 0.2), _report("plain", 1, False, "not learned", 0.9, 0.6),
               _report("parity_aux", 0, True, "PAA-like", 0.9, 0.8),
               _report("parity_aux", 1, True, "mixed", 0.5, 0.4)]
    m = st.summarise(reports)
    # the label counts of two_mechanisms read the learned plain runs alone (parity_aux runs are planted)
    assert (m["n_not_learned"], m["n_unsteered"], m["n_aa"], m["n_paa"], m["n_mixed_label"]) == (1, 1, 1, 0, 0)
    assert m["long_accuracy_aa"] == [0.2] and m["long_accuracy_paa"] == [0.8]
    assert len(m["labels"]) == 4 and "plain/s1:not learned" in m["labels"]
    assert m["n_signatures_read"] == [1, 1, 1]
    plain_map, k = st.mean_map(reports, "plain", lambda r: r.probes["state_by_t"])
    assert k == 1 and np.allclose(plain_map, 0.2)
    aux_map, k = st.mean_map(reports, "parity_aux", lambda r: r.patching["different"])
    assert k == 2 and np.allclose(aux_map, 0.6)
    none_map, k = st.mean_map([reports[1]], "plain", lambda r: r.probes["state_by_t"])
    assert k == 0 and none_map.shape == (2, 3) and np.isnan(none_map).all()
    # paired by seed: only seed 0 has both runs learned, and its runs are AA-like (plain) and PAA-like
    assert m["n_pairs"] == 1 and m["steer_probes_diff"] == [pytest.approx(0.8)]
    assert math.isnan(m["steer_patching_diff"][0])
    assert m["n_mixed_seeds"] == 1 and m["aa_minus_paa_long_accuracy"] == [pytest.approx(0.2 - 0.8)]
    assert m["mixed_aa_conditions"] == ["plain"] and math.isnan(m["far_above_chance"])  # no far accuracy given
    assert len(m["steer_ablation_diff"]) == 1 and set(m["ablation_drop"]) == set(m["control_ablation_drop"]) == set(
        st.CONDITIONS)
    # steerable reads the learned parity_aux runs: the parity erasure's drop minus its controls' mean drop
    assert m["n_forced"] == 2 and m["erased_minus_matched"]["parity_aux"] == [pytest.approx(0.6),
                                                                      pytest.approx(0.3)]
    assert m["parity_probe_min"] == 0.5 and m["change_mismatch"] == pytest.approx(0.03)
    assert m["parity_after_erasure"] == pytest.approx(0.58)
    # reported, not decisive: the wrong-parity share of the errors after the erasure minus after the pooled controls
    assert m["wrong_parity_contrast_by_run"]["parity_aux"] == [pytest.approx(0.8 - 0.1), pytest.approx(0.4 - 0.1)]
    assert m["edit_errors_min"] == 100
    assert m["erased_wrong_parity"]["plain"] == [pytest.approx(0.2)]
    # steerable decides, per seed with both runs learned (seed 0 only), on the parity flips beyond the controls
    # (rates over the 400 predictions) in the parity_aux run minus in the plain run
    assert m["flip_excess"]["plain"] == [pytest.approx(20 / 400 - 10 / 800)]
    assert m["flip_excess"]["parity_aux"] == [pytest.approx(80 / 400 - 10 / 800), pytest.approx(40 / 400 - 10 / 800)]
    assert m["flip_excess_aux_minus_plain"] == [pytest.approx(80 / 400 - 20 / 400)]
    assert m["seed_matched"] == [1.0] and m["n_kept_pairs"] == 1 and m["steerable_seeds"][0]["kept"]
    # its edit preconditions read the learned runs of both conditions (the unlearned plain run is not read)
    assert m["parity_after_erasure_both"] == pytest.approx(0.58)
    plain_kept = dataclasses.replace(reports[0], erasure=dataclasses.replace(reports[0].erasure, parity_after=0.7,
                                                                             matched_change_ratio=[1.0, 1.2]))
    lost = dataclasses.replace(reports[1], erasure=dataclasses.replace(reports[1].erasure, parity_after=0.9))
    m2 = st.summarise([plain_kept, lost, *reports[2:]])
    assert m2["parity_after_erasure_both"] == pytest.approx(0.7) and m2["parity_after_erasure"] == pytest.approx(0.58)
    assert m2["change_mismatch"] == pytest.approx(0.2)
    # seed 0's plain run now has a control 20% off: its seed is left out of steerable's statistic (no unit)
    assert m2["seed_matched"] == [0.0] and m2["n_kept_pairs"] == 0 and m2["flip_excess_aux_minus_plain"] == []
    assert m2["steerable_seeds"] == [{"seed": 0, "kept": False, "plain_ratio": pytest.approx(1.2),
                                      "parity_aux_ratio": pytest.approx(0.97)}]
    # the ablation of the parity probe's direction is described, each condition's
    assert m["parity_minus_matched"]["parity_aux"] == [pytest.approx(0.4), pytest.approx(0.2)]
    assert m["steer_ablation_diff"] == [pytest.approx(0.8 - 0.2)]
    assert m["is_aa"] == [1.0] and m["is_paa"] == [0.0]
    # the positive control reads the learned parity_aux runs only: one PAA-like, one mixed
    assert m["forced_is_paa"] == [1.0, 0.0] and m["null"]["forced_is_paa"] == [1.0, 0.0]
    # the null control reads the same learned plain runs
    assert m["null"]["is_aa"] == [1.0] and m["null"]["is_paa"] == [0.0]
    # only the voting signature (probes) counts as read; errors and patching are shown, not voted
    assert m["null"]["n_signatures_read"] == [1, 1, 1] and m["null"]["n_not_learned"] == 1
    for claim in st.CLAIMS:  # a run did not learn: every claim is inconclusive, naming the precondition
        got = claim.decide(m)
        assert got["verdict"] == "inconclusive" and "all_learned" in got["reason"]


def test_shuffled_parity_is_a_balanced_colouring_that_is_not_the_parity_nor_a_homomorphism():
    for n in (3, 5):
        colouring, sign = st.shuffled_parity(n), st.parity_table(n)
        assert int(colouring.sum()) == len(sign) // 2
        assert not torch.equal(colouring, sign) and not torch.equal(colouring, 1 - sign)
        table = st.cayley_table(n)
        # a homomorphism onto Z2 would satisfy c(a·b) = c(a) + c(b) mod 2 for every pair; this one does not
        assert not torch.equal(colouring[table], (colouring[:, None] + colouring[None, :]) % 2)
    # errors that keep ε (an even element applied on the right) read as PAA against ε, not against the colouring
    acts = st.sample_actions(3, 200, 4, _g(9))
    states = st.state_sequence(acts, 3)
    pred = st.cayley_table(3)[states, 3]  # s_t · (231), a 3-cycle: wrong, same parity
    assert st.parity(st.elements(3)[3]) == 0 and (pred != states).all()
    assert st.error_signature(pred, states, np.ones(4), 3, 1)[0] == pytest.approx(1.0)
    assert st.error_signature(pred, states, np.ones(4), 3, 1, st.shuffled_parity(3))[0] < st.PAA_BAND


def test_two_mechanisms_is_checked_beside_its_null_and_a_null_with_paa_runs_makes_it_inconclusive():
    good, _ = st.TWO_MECHANISMS.examples
    assert st.TWO_MECHANISMS.needs_null
    # contract v2: each share must beat the null's (a permutation test), so a null that labels nothing passes it
    unlabelled = dict(good, is_aa=[0.0] * 8, is_paa=[0.0] * 8)
    assert st.TWO_MECHANISMS.decide(good, null=unlabelled)["verdict"] == "reproduced"
    assert st.TWO_MECHANISMS.decide(good, null=good)["verdict"] == "inconclusive"


def test_a_rule_that_labels_no_forced_parity_run_paa_leaves_the_label_claims_inconclusive():
    for claim in (st.TWO_MECHANISMS, st.AA_GENERALISES):
        good = claim.examples[0]
        null = dict(good, is_aa=[0.0] * len(good.get("is_aa", [])), is_paa=[0.0] * len(good.get("is_aa", [])))
        kw = {"null": null, "unit_floor": False} if claim.needs_null else {"unit_floor": False}
        assert claim.decide(good, **kw)["verdict"] == "reproduced"
        half = dict(good, forced_is_paa=[1.0, 0.0])  # exactly the declared share
        assert claim.decide(half, **kw)["verdict"] == "reproduced"
        blind = dict(good, forced_is_paa=[0.0, 0.0, 1.0])  # the rule sees one planted parity-first run of three
        got = claim.decide(blind, **kw)
        assert got["verdict"] == "inconclusive" and "rule_sees_forced_parity" in got["reason"]


def _family_trackers(family_checkpoints):
    from icml25.core import models

    tok = st.make_tokenizer(3)
    # weights drawn wide (std 0.5, not 0.02) so that a random model's answer depends on its input
    for family, path in family_checkpoints(tok, hidden=32, layers=2, max_len=16, initializer_range=0.5).items():
        z = models.get(path, device="cpu")
        yield family, z.model, z.tokenizer


def test_probes_and_patching_run_on_gpt2_llama_and_qwen2_and_keep_their_exact_properties(family_checkpoints):
    clean = st.sample_actions(3, 96, 4, _g(10))
    bad = st.corrupt(clean, 0, False, 3, _g(11))
    for family, model, tok in _family_trackers(family_checkpoints):
        h = st.hidden_states(model, clean, tok, 3)
        assert h.shape == (3, 96, 4, 32), family  # embeddings + 2 blocks, one row per action
        # the embedding layer at the first action's row holds that action (plus GPT-2's constant position-1
        # embedding): a probe decodes it perfectly, so rows and actions are aligned (row t is a_t, not bos)
        acc, _ = st.pooled_probe(h[0, :, :1].numpy(), clean[:, :1].numpy())
        assert acc == 1.0, family
        for mode in st.PATCH_MODES:
            nld = st.patching_map(model, tok, 3, clean, bad, mode)
            assert nld.shape == (3, 4) and not np.isnan(nld).any(), family
            # the corrupted a_1 alone (embeddings, token 1) carries the whole effect: patching it reproduces the
            # corrupted run's output; so does patching every token's residual after any layer (prefix, t = T)
            assert nld[0, 0] == pytest.approx(1.0), (family, mode)
            assert nld[-1, -1] == pytest.approx(1.0), (family, mode)
            if mode == "window":  # other tokens' embeddings are the same in both runs
                assert np.allclose(nld[0, 1:], 0.0), family
                assert np.allclose(nld[-1, :-1], 0.0), family  # after the last block only the last token counts
            else:
                assert np.allclose(nld[:, -1], 1.0), family


def test_a_checkpoint_of_any_family_is_fine_tuned_on_the_task_through_the_model_knob(family_checkpoints):
    tok = st.make_tokenizer(3)
    for family, path in family_checkpoints(tok, hidden=32, layers=2, max_len=16).items():
        cfg = st.config("smoke", model=str(path), steps=60, train_length=2, start_length=2, lr=1e-2)
        start = st.initial_model(cfg, 0, tok)  # the checkpoint itself: same family, same weights
        saved = tinylm.random_model(family, tok, 0, hidden=32, layers=2, max_len=16)
        assert start.config.model_type == family
        assert all(torch.equal(a, b) for a, b in zip(start.state_dict().values(), saved.state_dict().values()))
        z = st.get_tracker(cfg, 0, "plain")
        assert z.trained_now and z.model.config.model_type == family
        losses = z.info["losses"]
        assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.2, family


def test_s5_runs_through_the_zoo_and_the_whole_pipeline():
    cfg = st.s5_config("smoke")
    assert cfg.group_n == 5 and all(cfg[k] == st.S5_PRESETS["smoke"][k] for k in st.TRAIN_KEYS)
    z = st.get_tracker(cfg, 0, "plain")
    assert z.path is not None and z.path.name.startswith("st-s5-plain-smoke-s0-")  # the S5 zoo entry
    assert z.model.get_input_embeddings().num_embeddings == len(st.make_tokenizer(5))
    r = st.measure_run(cfg, 0, "plain")
    length = st.eval_length(cfg)
    assert r.accuracy.shape == (length,) and r.trained_accuracy == r.accuracy[cfg.train_length - 1]
    assert r.learned == (r.trained_accuracy >= st.LEARNED_ACCURACY)
    assert r.label == st.label_run(r.trained_accuracy, list(r.signatures.values()))
    layers = cfg.n_layers + 1
    assert r.probes["state"].shape == (layers,) and r.probes["state_by_t"].shape == (layers, cfg.train_length)
    assert {k: v.shape for k, v in r.patching.items()} == {"same": (layers, cfg.train_length),
                                                          "different": (layers, cfg.train_length)}
    # the exact cells of the patching map hold in S5 as in S3, on a model whose answer depends on its input (a
    # random tiny Llama with wide weights; the smoke run's answer may not depend on a_1 yet)
    tok = st.make_tokenizer(5)
    model = tinylm.random_model("llama", tok, 0, hidden=32, layers=2, max_len=8, initializer_range=0.5)
    clean = st.sample_actions(5, 64, 3, _g(12))
    bad = st.corrupt(clean, 0, False, 5, _g(13))
    nld = st.patching_map(model, tok, 5, clean, bad)
    assert nld[0, 0] == pytest.approx(1.0) and np.allclose(nld[0, 1:], 0.0)
    assert nld[-1, -1] == pytest.approx(1.0) and np.allclose(nld[-1, :-1], 0.0)


def test_the_stacked_forward_is_the_llama_forward_run_by_run():
    cfg = st.config("smoke")
    tok = st.make_tokenizer(3)
    trackers = [st.initial_model(cfg, seed, tok) for seed in (0, 1, 2)]
    params = st.stack_trackers(trackers)
    acts = st.sample_actions(3, 5, 4, _g(14))
    ids = st.model_inputs(acts, tok, 3)
    words = torch.cat(st.token_ids(tok, 3))
    got, lens = st.stacked_logits(params, ids.expand(3, -1, -1), trackers[0].config, trackers[0].model.rotary_emb,
                                  words, lens_layer=1, lens_ids=words)
    for i, model in enumerate(trackers):
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
            assert torch.allclose(got[i], out.logits[..., words], atol=1e-5)
            early = model.lm_head(model.model.norm(out.hidden_states[1]))  # the logit lens after block 1
            assert torch.allclose(lens[i], early[..., words], atol=1e-5)


def test_batched_training_gives_each_run_the_model_a_separate_run_trains():
    # each run from its own initialisation, on its own seed's stories, with its own loss and its own clipping
    cfg = Config("smoke", dict(st.config("smoke"), steps=12, train_length=4, start_length=2, ramp=0.5))
    runs = [(0, "plain"), (1, "parity_aux"), (0, "parity_aux")]
    batched = st.train_trackers(cfg, runs)
    for (seed, condition), (model, _, info) in zip(runs, batched):
        ref, _, ref_info = st.train_tracker(cfg, seed, condition)
        assert info["parity_weight"] == ref_info["parity_weight"]
        assert np.allclose(info["losses"], ref_info["losses"], atol=1e-4)
        for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
            assert torch.allclose(a, b, atol=1e-4), (seed, condition, name)


def test_a_design_is_trained_together_and_a_run_does_not_depend_on_the_order_it_is_asked_for():
    cfg = Config("smoke", dict(st.config("smoke"), steps=3, seeds=[0, 1]))
    assert st.design_runs(cfg, 1, "plain") == [(s, c) for s in (0, 1) for c in st.CONDITIONS]
    assert st.design_runs(cfg, 7, "plain") == [(7, "plain")]
    first = st.trained_run(cfg, 1, "parity_aux")[0]
    st.trackers._TRAINED.clear()
    st.trained_run(cfg, 0, "plain")
    again = st.trained_run(cfg, 1, "parity_aux")[0]  # from the same design, trained in the other order of asking
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    with pytest.raises(ValueError, match="condition"):
        st.train_trackers(cfg, [(0, "sequential")])


def test_the_builder_s_warm_up_trains_the_design_and_the_notebook_only_loads_it(tmp_path, monkeypatch):
    from icml25.book import build

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    assert build.shared_models(build.discover(["state_tracking"]), "smoke") == [(st.WARM_UP, None)]
    calls = []
    real = st.train_trackers
    monkeypatch.setattr(st.trackers, "train_trackers",
                        lambda cfg, runs: calls.append((cfg.group_n, runs)) or real(cfg, runs))
    st.trackers._TRAINED.clear()
    build._train_shared(st.WARM_UP, "smoke", None)  # what the warm-up runs
    seeds = st.config("smoke").seeds
    # once per design; the S5 run takes the first verdict seed, as the notebook's default `seed` does
    assert calls == [(3, [(s, c) for s in seeds for c in st.CONDITIONS]), (5, [(seeds[0], "plain")])]
    st.trackers._TRAINED.clear()
    for c in st.CONDITIONS:  # the notebook's path (`measure_all` -> `get_tracker`) loads what the warm-up trained
        z = st.get_tracker(st.config("smoke"), seeds[0], c)
        assert not z.trained_now and z.path.name.startswith(f"st-s3-{c}-smoke-")
    z = st.get_tracker(st.s5_config("smoke"), seeds[0], "plain")
    assert not z.trained_now and len(calls) == 2
    assert st.train_design(st.config("full")) == []  # a checkpoint (not the zoo's tiny Llama): nothing to warm


def test_the_zoo_key_covers_every_part_that_trains_the_trackers():
    """The zoo addresses the `st-…` entries by every part of the chapter's package (`zoo.chapter_modules`), so
    changing any part whose code trains them trains the trackers again."""
    import inspect

    from icml25.core import zoo

    training = {inspect.getmodule(f) for f in (st.trained_run, st.train_trackers, st.train_tracker, st.state_loss,
                                               st.initial_model, st.sample_actions, st.state_sequence,
                                               st.cayley_table)}
    for name in ("st-s3-plain", "st-s5-parity_aux"):
        entry = zoo._entry(name)
        assert training <= set(zoo.chapter_modules(inspect.getmodule(entry.build)))


def test_other_parity_chance_is_three_fifths_for_s3_from_the_group():
    # counted from the group itself: of the wrong states of any true state, the share with the other parity
    for n in st.SUPPORTED_N:
        table = st.parity_table(n)
        g = len(st.elements(n))
        shares = [sum(int(table[w] != table[s]) for w in range(g) if w != s) / (g - 1) for s in range(g)]
        assert shares == pytest.approx([st.other_parity_chance(n)] * g)
    assert st.other_parity_chance(3) == pytest.approx(0.6)


def _s3_predictions() -> tuple[torch.Tensor, torch.Tensor]:
    """Hand-built S3 states and predictions (states picked by parity, so the case does not depend on the indexing
    of st.elements(3)): 8 predictions, 4 errors: (0,1) even->other even (same parity); (0,2) odd->even (other);
    (1,1) odd->other odd (same); (1,3) even->odd (other); (0,0), (0,3), (1,0), (1,2) right."""
    table = st.parity_table(3)
    even = [k for k in range(6) if int(table[k]) == 0]
    odd = [k for k in range(6) if int(table[k]) == 1]
    states = torch.tensor([[even[0], even[0], odd[0], odd[0]], [even[1], odd[1], odd[2], even[2]]])
    pred = torch.tensor([[even[0], even[1], even[0], odd[0]], [even[1], odd[2], odd[2], odd[0]]])
    return states, pred


def test_wrong_parity_share_on_a_hand_built_case():
    states, pred = _s3_predictions()
    errors, other = st.wrong_parity_errors(pred, states, 3)
    assert (errors, other) == (4, 2) and st.wrong_parity_share(errors, other) == 0.5
    assert math.isnan(st.wrong_parity_share(*st.wrong_parity_errors(states, states, 3)))
    # a run's contrast: the erasure's share minus the controls' pooled share (3 of 20 errors, not the mean of shares)
    e = st.ErasureDrops(erased=0.5, matched=[0.6, 0.6], parity_after=0.5, parity_after_controls=[1.0, 1.0],
                        change_share=0.3, matched_change_ratio=[1.0, 1.0], matched_dimensions=[2, 2],
                        erased_errors=(errors, other), matched_errors=[(10, 3), (10, 0)])
    assert e.matched_wrong_parity == pytest.approx(0.15) and e.wrong_parity_contrast == pytest.approx(0.35)
    assert e.fewest_errors == 4


def test_parity_flip_rate_on_a_hand_built_case():
    states, pred = _s3_predictions()  # 4 errors, 2 of them with the other parity
    errors, other = st.wrong_parity_errors(pred, states, 3)
    # the rate is over every prediction, right or wrong: 2 of 8, where the share of errors is 2 of 4
    assert st.wrong_parity_rate(other, states.numel()) == 0.25 and st.wrong_parity_share(errors, other) == 0.5
    assert math.isnan(st.wrong_parity_rate(0, 0))
    # controls pooled: 3 + 1 wrong-parity predictions over 2 × 8 (each control makes 8 predictions)
    e = st.ErasureDrops(erased=0.5, matched=[0.6, 0.6], parity_after=0.5, parity_after_controls=[1.0, 1.0],
                        change_share=0.3, matched_change_ratio=[1.0, 1.0], matched_dimensions=[2, 2],
                        erased_errors=(errors, other), matched_errors=[(5, 3), (2, 1)], n_predictions=8)
    assert e.erased_flip_rate == 0.25 and e.matched_flip_rate == 0.25 and e.flip_excess == 0.0
    # a run whose erasure causes few errors has a small rate however they split (the shares say 1.0 vs 0.0)
    few = st.ErasureDrops(erased=0.01, matched=[0.01], parity_after=0.5, parity_after_controls=[0.9],
                          change_share=0.03, matched_change_ratio=[1.0], matched_dimensions=[1],
                          erased_errors=(1, 1), matched_errors=[(1, 0)], n_predictions=100)
    assert few.wrong_parity_contrast == 1.0 and few.flip_excess == pytest.approx(0.01)
    assert math.isnan(st.ErasureDrops(erased=0, matched=[0], parity_after=0.5, parity_after_controls=[0.9],
                                      change_share=0, matched_change_ratio=[1.0], matched_dimensions=[1]).flip_excess)


def _matched_pair(seed, plain_ratios, aux_ratios, plain_flips, aux_flips):
    """A seed's two learned runs whose controls change the stream by `*_ratios` of the erasure's change, and whose
    erasure flips `*_flips` of 100 predictions to the other parity (its controls none)."""
    def run(condition, ratios, flips):
        unread = dict.fromkeys(st.SIGNATURES, math.nan)
        return st.RunReport(condition, seed, np.ones(2), 1.0, True, unread, unread, 0, {}, {}, long_accuracy=1.0,
                            label="mixed", null_label="mixed", losses=[], parity_readable=1.0,
                            erasure=st.ErasureDrops(erased=0.1, matched=[0.0] * len(ratios), parity_after=0.5,
                                                    parity_after_controls=[1.0] * len(ratios), change_share=0.3,
                                                    matched_change_ratio=ratios, matched_dimensions=[1] * len(ratios),
                                                    erased_errors=(flips, flips),
                                                    matched_errors=[(0, 0)] * len(ratios), n_predictions=100))
    return [run("plain", plain_ratios, plain_flips), run("parity_aux", aux_ratios, aux_flips)]


def test_steerable_leaves_out_a_seed_whose_controls_cannot_match():
    # seed 1's parity_aux controls reach 0.83 of the erasure's change (the whole complement carries less), seed 2's
    # plain controls overshoot by 0.11: both seeds are left out, whatever their flips; seed 0 misses by 0.09 at most
    rows = [*_matched_pair(0, [1.0, 0.91], [1.09, 1.0], 5, 45), *_matched_pair(1, [1.0, 1.0], [0.83, 0.83], 0, 99),
            *_matched_pair(2, [1.11, 1.0], [1.0, 1.0], 99, 0)]
    m = st.summarise(rows)
    assert m["seed_matched"] == [1.0, 0.0, 0.0] and m["n_kept_pairs"] == 1
    assert m["flip_excess_aux_minus_plain"] == [pytest.approx(0.40)]
    assert [(r["seed"], r["kept"], r["plain_ratio"], r["parity_aux_ratio"]) for r in m["steerable_seeds"]] == [
        (0, True, 0.91, 1.09), (1, False, 1.0, 0.83), (2, False, 1.11, 1.0)]
    variance_matched = next(p for p in st.STEERABLE.preconditions if p.id == "variance_matched")
    # 1 of 3 seeds kept is below the declared share (75%): the precondition fails
    assert not variance_matched.evaluate("steerable", m)["holds"]
    # 8 of 10 kept meets it, 7 of 10 does not; a seed left out counts against the share, not as missing data
    assert variance_matched.evaluate("steerable", {"seed_matched": [1.0] * 8 + [0.0] * 2})["holds"]
    assert not variance_matched.evaluate("steerable", {"seed_matched": [1.0] * 7 + [0.0] * 3})["holds"]
    assert not variance_matched.evaluate("steerable", {"seed_matched": []})["holds"]
    # the kept seeds are the units: 8 kept of 10 decide, and paired_seeds counts the kept seeds alone
    kept = {"n_not_learned": 0, "parity_probe_min": 0.99, "parity_after_erasure_both": 0.55,
            "seed_matched": [1.0] * 8 + [0.0] * 2, "n_kept_pairs": 8,
            "flip_excess_aux_minus_plain": [0.35, 0.4, 0.3, 0.45, 0.38, 0.33, 0.42, 0.36]}
    assert st.STEERABLE.decide(kept)["verdict"] == "reproduced"
    assert st.STEERABLE.decide(dict(kept, n_kept_pairs=2))["verdict"] == "inconclusive"


def test_steerable_decides_on_the_paired_flip_contrast():
    # per seed, the parity_aux run's flip excess minus the plain run's, a paired t interval over the seeds
    aux = [0.40, 0.35, 0.45, 0.38, 0.30, 0.42, 0.36, 0.41]
    plain = [0.05, 0.02, 0.08, 0.04, 0.03, 0.06, 0.01, 0.07]
    diff = [a - p for a, p in zip(aux, plain)]
    base = {"n_not_learned": 0, "n_kept_pairs": 8, "parity_probe_min": 0.99, "parity_after_erasure_both": 0.55,
            "seed_matched": [1.0] * 8}
    got = st.STEERABLE.decide(dict(base, flip_excess_aux_minus_plain=diff))
    assert got["verdict"] == "reproduced"
    eff = got["effects"][0]
    mean, sd = np.mean(diff), np.std(diff, ddof=1)
    half = stats.t.ppf(0.975, len(diff) - 1) * sd / math.sqrt(len(diff))
    assert eff["ci_low"] == pytest.approx(mean - half) and eff["ci_high"] == pytest.approx(mean + half)
    # the plain runs flipping as much as the parity_aux runs: the contrast is refuted (wholly below +0.2)
    same = [0.01, -0.02, 0.0, 0.02, -0.01, 0.01, 0.03, -0.03]
    assert st.STEERABLE.decide(dict(base, flip_excess_aux_minus_plain=same))["verdict"] == "refuted"
    for key, bad in (("n_kept_pairs", 2), ("parity_after_erasure_both", 0.61), ("seed_matched", [1.0] * 5 + [0.0] * 3),
                     ("parity_probe_min", st.PARITY_READABLE - 0.01)):
        got = st.STEERABLE.decide(dict(base, flip_excess_aux_minus_plain=diff, **{key: bad}))
        assert got["verdict"] == "inconclusive"
    assert [e["verdict"] for e in map(st.STEERABLE.decide, st.STEERABLE.examples)] == [
        "reproduced", "refuted", "refuted"]
    assert st.STEERABLE.decide(st.STEERABLE.examples[1])["verdict"] == "refuted"
