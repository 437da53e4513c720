"""RSD's method entry points on any causal LM: draft and target of different architecture families (tiny random
GPT-2, Llama, Qwen2 checkpoints sharing one tokenizer, saved and loaded back through `models.load`) keep the
decoder's limits (δ above every reward = target only, δ = 0 = draft only), speculative decoding's exactness and
the FLOP bookkeeping of each family's config."""

import pytest

from icml25 import rsd
from icml25.core import arithmetic, flops, generation, models, reasoners, tinylm, train

TOK = tinylm.char_tokenizer(arithmetic.ALPHABET)
PAIRS = [("gpt2", "llama"), ("llama", "qwen2"), ("qwen2", "gpt2")]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    train_set = arithmetic.sample_problems(2000, 0)
    for k, family in enumerate(("gpt2", "llama", "qwen2")):
        path = tmp_path_factory.mktemp(family)
        # a few steps of training make greedy choices clear-cut (a random model's near-ties flip with rounding)
        # and make solutions of several steps
        model = tinylm.random_model(family, TOK, k).train()
        train.train(model, train.lm_batches(TOK, [p.prompt for p in train_set], [p.solution for p in train_set],
                                            32, k), steps=60, lr=1e-2)
        tinylm.save(model, TOK, path)
        out[family] = models.load(path, device="cpu", alphabet=arithmetic.ALPHABET)
    return out


@pytest.fixture(scope="module")
def problems():
    return reasoners.test_problems(12)


@pytest.mark.parametrize("draft_family,target_family", PAIRS)
def test_rsd_limits_hold_for_any_pair_of_families(checkpoints, problems, draft_family, target_family):
    (draft, tok), (target, target_tok) = checkpoints[draft_family], checkpoints[target_family]
    high = rsd.decode(draft, tok, target, target_tok, problems, rsd.OraclePRM(), rsd.threshold_rule(1.01),
                      patience=None)
    alone = rsd.decode_single(target, target_tok, problems, role="target")
    assert high.completions == alone.completions and high.tokens["draft_accepted"] == 0
    assert high.flops["target"] == alone.flops["target"]
    zero = rsd.decode(draft, tok, target, target_tok, problems, rsd.OraclePRM(), rsd.threshold_rule(0.0),
                      patience=None)
    drafted = rsd.decode_single(draft, tok, problems, role="draft")
    assert zero.completions == drafted.completions and zero.target_calls == 0
    assert zero.flops["draft"] == drafted.flops["draft"]
    assert sum(len(s) for s in zero.steps) > len(problems)  # some solutions took several steps


@pytest.mark.parametrize("draft_family,target_family", PAIRS)
def test_speculative_decoding_equals_the_targets_greedy_output(checkpoints, problems, draft_family, target_family):
    (draft, tok), (target, _) = checkpoints[draft_family], checkpoints[target_family]
    ids = generation.generate(target, tok, [p.prompt for p in problems], rsd.MAX_NEW_TOKENS).token_ids
    runs = [rsd.speculative_decode(draft, target, tok, p.prompt, gamma=3) for p in problems]
    assert [r["token_ids"] for r in runs] == ids
    cost = rsd.speculative_cost(draft, target, tok, problems, ids, gamma=3)
    assert (cost["rounds"], cost["accepted"]) == (sum(r["rounds"] for r in runs), sum(r["accepted"] for r in runs))


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_a_learned_prm_of_any_family_scores_steps_and_costs_its_configs_flops(checkpoints, problems, family):
    model, tok = checkpoints[family]
    prm = rsd.LearnedPRM(model, tok)
    r = prm.score(problems[:4], [""] * 4, [p.steps()[0] for p in problems[:4]])
    assert ((r >= 0) & (r <= 1)).all()
    draft, _ = checkpoints["llama"]
    d = rsd.decode(draft, tok, draft, tok, problems[:4], prm, rsd.threshold_rule(0.5))
    reads = [rsd._ntok(tok, p.prompt + c) for p, c in zip(problems[:4], d.completions)]
    assert d.flops["prm"] >= sum(flops.forward_flops(model.config, 1) for _ in reads) > 0
    assert rsd.generated_flops(d, draft, draft, model) > rsd.generated_flops(d, draft, draft)
