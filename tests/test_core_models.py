"""The tiny-LM core: tokenizers, save/load, KV-cached generation, log-probabilities, training, zoo (FLOPs are
tested in test_models_flops)."""

import torch
import pytest

from icml25.core import arithmetic, generation, models, tinylm, train, zoo
from icml25.core.seeding import torch_generator

TOK = tinylm.char_tokenizer(arithmetic.ALPHABET)


@pytest.fixture(scope="module")
def model():
    return tinylm.make_model("micro", TOK, seed=0).eval()


def test_char_tokenizer_round_trip():
    for p in arithmetic.sample_problems(50, 0):
        text = p.prompt + p.solution
        ids = TOK(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text) and TOK.decode(ids) == text
    with pytest.raises(ValueError, match="repeated"):
        tinylm.char_tokenizer("aba")


def test_word_tokenizer_round_trip():
    tok = tinylm.word_tokenizer("the cat sat on mat".split())
    ids = tok("the cat sat on the mat", add_special_tokens=False)["input_ids"]
    assert len(ids) == 6 and tok.decode(ids) == "the cat sat on the mat"


def test_save_then_from_pretrained_gives_identical_logits(model, tmp_path):
    tinylm.save(model, TOK, tmp_path)
    loaded, tok = models.load(tmp_path, device="cpu")
    ids = torch.tensor([TOK("3+4*2|3+4=7;", add_special_tokens=False)["input_ids"]])
    assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert tok.get_vocab() == TOK.get_vocab()


def test_same_seed_same_weights_and_unknown_preset_named():
    a, b = tinylm.make_model("nano", TOK, 3), tinylm.make_model("nano", TOK, 3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    c = tinylm.make_model("nano", TOK, 4)
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)
    with pytest.raises(ValueError, match="valid presets"):
        tinylm.make_model("huge", TOK, 0)


def test_overrides_replace_preset_settings():
    m = tinylm.make_model("nano", TOK, 0, num_hidden_layers=2, intermediate_size=64)
    assert (m.config.num_hidden_layers, m.config.intermediate_size, m.config.hidden_size) == (2, 64, 32)
    assert len(m.model.layers) == 2


PROMPTS = ["3+4|", "1+2*3-4*5|", "9|", "7*7*7|3"]


def test_kv_cached_generation_equals_uncached_greedy(model):
    cached = generation.generate(model, TOK, PROMPTS, 30)
    plain = generation.generate(model, TOK, PROMPTS, 30, use_cache=False)
    assert cached.token_ids == plain.token_ids


def test_batched_generation_equals_one_prompt_at_a_time(model):
    batched = generation.generate(model, TOK, PROMPTS, 20, stop=[";"])
    alone = [generation.generate(model, TOK, [p], 20, stop=[";"]).token_ids[0] for p in PROMPTS]
    assert batched.token_ids == alone


def test_stepwise_decoding_stops_exactly_at_the_delimiter(model):
    g = torch_generator(0, "test")
    out = generation.generate(model, TOK, PROMPTS * 8, 40, stop=[";"], temperature=1.5, generator=g)
    delim, eos = TOK.convert_tokens_to_ids(";"), TOK.eos_token_id
    for ids, stopped in zip(out.token_ids, out.stopped):
        stops = [i for i, t in enumerate(ids) if t in (delim, eos)]
        if stopped:
            assert stops == [len(ids) - 1]
        else:
            assert stops == [] and len(ids) == 40


def test_sampling_is_reproducible_from_the_generator(model):
    a = generation.generate(model, TOK, PROMPTS, 15, temperature=1.0, generator=torch_generator(5))
    b = generation.generate(model, TOK, PROMPTS, 15, temperature=1.0, generator=torch_generator(5))
    assert a.token_ids == b.token_ids
    with pytest.raises(ValueError, match="Generator"):
        generation.generate(model, TOK, PROMPTS, 5, temperature=1.0)


def test_sequence_logprobs_match_a_plain_token_by_token_sum(model):
    prompts, completions = ["3+4|", "1*2-3|"], ["3+4=7;A7", "1*2=2;"]
    got = generation.sequence_logprobs(model, TOK, prompts, completions)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids = TOK(p + c, add_special_tokens=False)["input_ids"]
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
        ref = sum(logp[t - 1, ids[t]] for t in range(len(p), len(ids)))
        assert torch.allclose(got[i], ref, atol=1e-5)


def _plain_encoding(prompts, completions, add_eos):
    """encode_completions written the plain way: each row tokenized alone, padded cell by cell."""
    rows = [(TOK(p, add_special_tokens=False)["input_ids"],
             TOK(c, add_special_tokens=False)["input_ids"] + ([TOK.eos_token_id] if add_eos else []))
            for p, c in zip(prompts, completions)]
    width = max(len(p) + len(c) for p, c in rows)
    out = {k: torch.zeros(len(rows), width, dtype=torch.long) for k in ("attention_mask", "completion_mask")}
    out["input_ids"] = torch.full((len(rows), width), TOK.pad_token_id, dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        for t, token in enumerate(p + c):
            out["input_ids"][i, t], out["attention_mask"][i, t] = token, 1
            out["completion_mask"][i, t] = int(t >= len(p))
    return out


@pytest.mark.parametrize("add_eos", [False, True])
def test_encode_completions_equals_a_plain_row_by_row_encoding(add_eos):
    prompts, completions = ["3+4|", "1*2-3|", "9|"], ["3+4=7;A7", "", "A9"]
    got, ref = generation.encode_completions(TOK, prompts, completions, add_eos), _plain_encoding(prompts, completions,
                                                                                                 add_eos)
    assert got.keys() == ref.keys()
    assert all(got[k].dtype == torch.long and torch.equal(got[k], ref[k]) for k in ref)


def test_lm_batches_are_the_plain_encoding_of_the_rows_drawn():
    """Tokenizing each pair once when first drawn gives the batches that encoding every draw anew gives."""
    problems = arithmetic.sample_problems(30, 0)
    prompts, completions = [p.prompt for p in problems], [p.solution for p in problems]
    g = torch_generator(0, "lm_batches")
    batches = train.lm_batches(TOK, prompts, completions, 16, 0)
    for _ in range(6):  # 96 draws from 30 pairs: most batches reuse pairs tokenized before
        idx = torch.randint(len(prompts), (16,), generator=g).tolist()
        got, ref = next(batches), _plain_encoding([prompts[i] for i in idx], [completions[i] for i in idx], True)
        assert all(torch.equal(got[k], ref[k]) for k in ref)


def _tiny_run(seed):
    problems = arithmetic.sample_problems(200, seed)
    m = tinylm.make_model("nano", TOK, seed)
    b = train.lm_batches(TOK, [p.prompt for p in problems], [p.solution for p in problems], 16, seed)
    return m, train.train(m, b, steps=15, lr=1e-2)


def test_same_seed_gives_same_weights_and_loss_curve():
    (m1, r1), (m2, r2) = _tiny_run(0), _tiny_run(0)
    assert r1.losses == r2.losses
    assert all(torch.equal(x, y) for x, y in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert r1.losses[-1] < r1.losses[0]
    assert _tiny_run(1)[1].losses != r1.losses


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    lrs = [train.lr_at(s, 100, 1.0, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert train.lr_at(100, 100, 1.0, 10) == pytest.approx(0.1)


BUILDS = []


@zoo.register("test-tiny", {s: {"steps": 3} for s in ("smoke", "ci", "full")})
def _build_tiny(cfg, seed):
    BUILDS.append(seed)
    m, r = _tiny_run(seed)
    return m, TOK, {"losses": r.losses}


def test_zoo_trains_once_then_loads_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    BUILDS.clear()
    first = zoo.get("test-tiny", "smoke", 7)
    second = zoo.get("test-tiny", "smoke", 7)
    assert BUILDS == [7] and first.trained_now and not second.trained_now
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(first.model(ids).logits, second.model(ids).logits)
    assert second.info["losses"] == first.info["losses"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]  # no half-written entry remains
    zoo.get("test-tiny", "smoke", 8)
    assert BUILDS == [7, 8]  # another seed is another entry
    with pytest.raises(ValueError, match="registered models"):
        zoo.get("no-such-model")


def test_zoo_results_are_computed_once_per_settings_and_code(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    calls = []

    def compute():
        calls.append(torch.get_num_threads())
        return {"losses": (1.0, 0.5), "lr": 0.01}

    first = zoo.results("test-search", {"steps": 3}, compute, sources=(train,))
    second = zoo.results("test-search", {"steps": 3}, compute, sources=(train,))
    assert first == ({"losses": [1.0, 0.5], "lr": 0.01}, True)  # read back as JSON, computed now
    assert second == (first[0], False) and calls == [1]  # on one thread, once
    assert zoo.results("test-search", {"steps": 4}, compute, sources=(train,))[1] and len(calls) == 2
    assert zoo.results("test-search", {"steps": 3}, compute, sources=(train, generation))[1]  # other code
    assert not [p for p in (tmp_path / "results").iterdir() if p.name.startswith(".tmp")]


def test_zoo_trains_on_one_thread_whatever_the_caller_uses(tmp_path, monkeypatch):
    seen = []

    @zoo.register("test-threads", {s: {} for s in ("smoke", "ci", "full")})
    def _build(cfg, seed):
        seen.append(torch.get_num_threads())
        return _tiny_run(seed)[0], TOK, {}

    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        zoo.get("test-threads", "smoke", 0)
        assert seen == [1] and torch.get_num_threads() == 2  # one thread inside, the caller's setting restored
    finally:
        torch.set_num_threads(before)


def test_a_zoo_key_covers_every_part_of_a_split_chapter_and_only_its_module_elsewhere(monkeypatch):
    """rsd's learned PRM is registered in rsd/prms.py but trained with code from other parts (its scales): a change
    there must change the address, or a stale model would be reused; a core entry's key stays its module's."""
    import icml25.rsd
    from icml25.core import reasoners, zoo

    assert [m.__name__ for m in zoo.chapter_modules(icml25.rsd.prms)][:1] == ["icml25.rsd"]
    assert icml25.rsd.scales in zoo.chapter_modules(icml25.rsd.prms)
    assert zoo.chapter_modules(reasoners) == [reasoners]
    before, core = zoo.key("rsd-prm", "smoke", 0), zoo.key("arith-draft", "smoke", 0)
    real = zoo.inspect.getsource
    monkeypatch.setattr(zoo.inspect, "getsource",
                        lambda m: real(m) + ("# changed" if m is icml25.rsd.scales else ""))
    assert zoo.key("rsd-prm", "smoke", 0) != before
    assert zoo.key("arith-draft", "smoke", 0) == core  # a chapter's change leaves the shared models where they are


def test_a_zoo_key_covers_the_implicit_reward_that_implicit_prms_prm_trains_with(monkeypatch):
    """implicit_prm's PRM is trained by `core.implicit_reward` (its loss, batches and training loop), which lives
    outside the chapter's package: a change there must change the PRM's address, or a stale PRM would be reused."""
    import icml25.implicit_prm  # noqa: F401  (registers the chapter's PRM, "implicit-prm")
    from icml25.core import implicit_reward, zoo

    name = "implicit-prm"
    before = zoo.key(name, "smoke", 0)
    real = zoo.inspect.getsource
    monkeypatch.setattr(zoo.inspect, "getsource",
                        lambda m: real(m) + ("# changed" if m is implicit_reward else ""))
    assert zoo.key(name, "smoke", 0) != before
