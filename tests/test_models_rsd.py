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


# --- the pair from the config knobs, and step boundaries under a BPE tokenizer ---------------------------------

BLANK_LINE = "\n\n"  # the official code's step separator


def test_the_pair_comes_from_the_draft_model_and_target_model_knobs(checkpoints, family_checkpoints):
    paths = family_checkpoints(TOK)
    cfg = rsd.config("smoke", draft_model=str(paths["gpt2"]), target_model=str(paths["qwen2"]))
    draft, target = rsd.draft_and_target(cfg, 0)
    assert (draft.model.config.model_type, target.model.config.model_type) == ("gpt2", "qwen2")
    assert draft.info["checkpoint"] == str(paths["gpt2"])
    assert [rsd.config(s).draft_model for s in ("smoke", "ci")] == [rsd.DRAFT_MODEL] * 2
    assert [rsd.config(s).target_model for s in ("smoke", "ci")] == [rsd.TARGET_MODEL] * 2


def test_a_drafts_learned_prm_is_trained_on_that_drafts_rollouts(family_checkpoints):
    path = family_checkpoints(TOK)["llama"]
    cfg = rsd.config("smoke", draft_model=str(path))
    draft = models.get(path, device="cpu")
    prm = rsd.learned_prm(cfg, 0, draft)
    c = rsd.config("smoke")
    model, tok, _ = rsd.train_prm(draft, c.prm_preset, c.prm_problems, c.prm_steps, 0, lr=c.prm_lr)
    problems = reasoners.test_problems(6)
    steps = [p.steps()[0] for p in problems]
    assert prm.score(problems, [""] * 6, steps).tolist() == rsd.LearnedPRM(model.eval(), tok).score(
        problems, [""] * 6, steps).tolist()


class TextPRM:
    """A program PRM for any delimiter: a fixed function of the text so far (no model, no FLOPs)."""

    name, model = "text", None

    def score(self, problems, prefixes, steps):
        return [float(len(x) % 2 == 0) for x in prefixes]


def _reference_chain(model, tok, prompt: str, delimiter: str) -> str:
    """Step-wise greedy decoding without stop strings: each step is the shortest run of greedy tokens whose text
    holds the delimiter, cut just after it; the next step starts from the cut text."""
    text, written = "", 0
    while written < rsd.MAX_NEW_TOKENS:
        ids = generation.generate(model, tok, [prompt + text], rsd.MAX_NEW_TOKENS - written).token_ids[0]
        k = next((k for k in range(1, len(ids) + 1)
                  if delimiter in tok.decode(ids[:k], skip_special_tokens=True)), len(ids))
        step = rsd.cut_step(tok.decode(ids[:k], skip_special_tokens=True), delimiter)
        text, written = text + step, written + k
        if not step.endswith(delimiter):
            break
    return text


@pytest.fixture(scope="module")
def bpe_pair(family_checkpoints):
    """A GPT-2 draft and a Llama target sharing a byte-level BPE tokenizer learnt on chains written with `;`, so
    the blank-line delimiter takes two tokens; trained a few steps on chains whose steps end in a blank line, then
    run in float64 (so that batch-shape rounding cannot flip a near-tie between greedy choices)."""
    train_set = arithmetic.sample_problems(2000, 0)
    tok = tinylm.bpe_tokenizer([p.prompt + p.solution for p in train_set])
    chains = [p.solution.replace(arithmetic.STEP_DELIMITER, BLANK_LINE) for p in train_set]
    paths = family_checkpoints(tok)
    out = {}
    for k, family in enumerate(("gpt2", "llama")):
        model, tok = models.load(paths[family], device="cpu")
        train.train(model.train(), train.lm_batches(tok, [p.prompt for p in train_set], chains, 32, k), steps=100,
                    lr=1e-2)
        out[family] = (model.double().eval(), tok)
    return out


def test_steps_end_at_a_delimiter_of_several_bpe_tokens(bpe_pair):
    (draft, tok), (target, _) = bpe_pair["gpt2"], bpe_pair["llama"]
    assert len(tok(BLANK_LINE, add_special_tokens=False)["input_ids"]) == 2
    problems = reasoners.test_problems(12)
    for rule, model in ((rsd.threshold_rule(0.0), draft), (rsd.threshold_rule(1.01), target)):
        d = rsd.decode(draft, tok, target, tok, problems, TextPRM(), rule, patience=None, delimiter=BLANK_LINE)
        assert d.completions == [_reference_chain(model, tok, p.prompt, BLANK_LINE) for p in problems]
    d = rsd.decode(draft, tok, target, tok, problems, TextPRM(), rsd.threshold_rule(0.5), patience=None,
                   delimiter=BLANK_LINE)
    for completion, steps in zip(d.completions, d.steps):
        assert "".join(st.text for st in steps) == completion
        assert all(st.text.endswith(BLANK_LINE) and st.text.count(BLANK_LINE) == 1 for st in steps[:-1])
    assert sum(len(s) for s in d.steps) > len(problems)  # some solutions took several steps
    assert 0 < d.target_calls < sum(len(s) for s in d.steps)  # both models wrote steps
