"""`models.load`: any causal LM folder or zoo entry through the Auto classes, with a pad token and left padding,
and clear errors for a name or folder that is not a checkpoint or a tokenizer that cannot write the task."""

import json

import pytest
import torch

from icml25.core import arithmetic, generation, models, tinylm, zoo

CORPUS = [p.prompt + p.solution for p in arithmetic.sample_problems(300, 0)]
BPE = tinylm.bpe_tokenizer(CORPUS)  # like GPT-2's, Llama-3's and Qwen's: an end-of-sequence token, no pad token
FAMILIES = ("gpt2", "llama", "qwen2", "qwen3")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = {}
    for family in FAMILIES:
        path = tmp_path_factory.mktemp(family)
        m = tinylm.random_model(family, BPE, 0)
        tinylm.save(m, BPE, path)
        out[family] = (m, path)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_checkpoint_loads_back_with_the_same_logits_and_a_left_pad_token(checkpoints, family):
    original, path = checkpoints[family]
    model, tok = models.load(path, device="cpu")
    assert type(model) is type(original) and not model.training and model.device.type == "cpu"
    assert tok.pad_token_id == tok.eos_token_id == BPE.eos_token_id and tok.padding_side == "left"
    assert model.config.pad_token_id == tok.pad_token_id
    ids = torch.tensor([tok(CORPUS[0], add_special_tokens=False)["input_ids"]])
    assert torch.equal(model(ids).logits, original(ids).logits)


def test_a_tokenizer_without_pad_or_eos_gets_a_new_pad_token_and_a_grown_embedding(tmp_path):
    tok = tinylm.bpe_tokenizer(CORPUS)
    tok.eos_token = None
    m = tinylm.random_model("llama", tok, 0)
    tinylm.save(m, tok, tmp_path)
    model, loaded = models.load(tmp_path, device="cpu")
    assert loaded.pad_token == models.PAD and len(loaded) == len(tok) + 1
    assert model.get_input_embeddings().weight.shape[0] >= len(loaded)
    assert loaded.convert_ids_to_tokens(loaded.pad_token_id) == models.PAD


def test_generation_runs_on_every_family_through_load(checkpoints):
    prompts = [p.prompt for p in arithmetic.sample_problems(12, 1)]
    for family, (_, path) in checkpoints.items():
        model, tok = models.load(path, device="cpu")
        batched = generation.generate(model, tok, prompts, 12, stop=[";"])
        alone = [generation.generate(model, tok, [p], 12, stop=[";"]).token_ids[0] for p in prompts]
        assert batched.token_ids == alone, family


def test_the_zoo_loads_through_load_and_a_zoo_name_loads_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("ICML25_CACHE", str(tmp_path))

    @zoo.register("test-load-by-name", {s: {} for s in ("smoke", "ci", "full")})
    def _build(cfg, seed):
        tok = tinylm.char_tokenizer(arithmetic.ALPHABET)
        return tinylm.make_model("nano", tok, seed), tok, {}

    z = zoo.get("test-load-by-name", "smoke", 3)
    model, tok = models.load("test-load-by-name", scale="smoke", seed=3)
    assert model.device.type == "cpu" and tok.get_vocab() == z.tokenizer.get_vocab()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), z.model.state_dict().values()))


def test_default_device_is_cuda_when_a_gpu_is_visible(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert models.default_device() == "cpu"


def test_an_unknown_name_offline_is_named_with_what_is_missing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelNotFound, match=r"'no-such-owner/no-such-model'.*local Hugging Face cache"):
        models.load("no-such-owner/no-such-model")
    with pytest.raises(models.ModelNotFound, match="arith-target"):  # a typo of a zoo name lists the zoo's names
        models.load("arith-tagret", local_files_only=True)


def test_a_folder_without_config_or_tokenizer_is_refused_by_name(tmp_path, checkpoints):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(models.ModelNotFound, match="empty.*no config.json"):
        models.load(empty)
    with pytest.raises(models.ModelNotFound, match="no such folder"):
        models.load(tmp_path / "missing")
    weights_only = tmp_path / "weights-only"
    checkpoints["llama"][0].save_pretrained(weights_only)
    assert json.loads((weights_only / "config.json").read_text())["model_type"] == "llama"
    with pytest.raises(models.ModelNotFound, match="weights-only.*no tokenizer"):
        models.load(weights_only)


def test_a_tokenizer_that_cannot_write_the_alphabet_is_refused_naming_the_characters(tmp_path):
    digits = tinylm.char_tokenizer("0123456789")
    tinylm.save(tinylm.make_model("nano", digits, 0), digits, tmp_path)
    with pytest.raises(ValueError, match=r"cannot write 7 character\(s\).*'\+-\*=;\|A'"):
        models.load(tmp_path, device="cpu", alphabet=arithmetic.ALPHABET)
    assert models.untokenizable(BPE, arithmetic.ALPHABET) == []
    models.load(tmp_path, device="cpu", alphabet="0123456789")


def test_get_reads_a_folder_as_a_zoo_model_and_a_zoo_name_as_the_zoo_s(checkpoints):
    original, path = checkpoints["llama"]
    z = models.get(path, device="cpu")
    ids = torch.tensor([[1, 2, 3, 4]])
    torch.testing.assert_close(z.model(ids).logits, original.eval()(ids).logits)
    assert z.info["checkpoint"] == str(path) and z.info["n_params"] == tinylm.n_params(original)
    assert z.path == path and not z.trained_now
    direct = zoo.get("arith-draft", "smoke", 0)
    via = models.get("arith-draft", "smoke", 0)
    assert via.path == direct.path and via.info == direct.info


def test_get_refuses_a_tokenizer_that_cannot_write_the_task_naming_the_model(checkpoints):
    with pytest.raises(ValueError, match=r"model 'arith-draft'.*alphabet"):
        models.get("arith-draft", "smoke", 0, alphabet="Ω")


@pytest.mark.parametrize("family", FAMILIES)
def test_decoder_blocks_are_the_family_s_own_block_list(checkpoints, family):
    model, _ = checkpoints[family]
    own = model.transformer.h if family == "gpt2" else model.model.layers
    assert models.decoder_blocks(model) is own and len(own) == model.config.num_hidden_layers


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_word_level_tokenizer_reads_back_as_saved_whatever_the_family(tmp_path, family):
    words = tinylm.word_tokenizer(["alpha", "beta", "gamma"])
    tinylm.save(tinylm.random_model(family, words, 0), words, tmp_path)
    _, tok = models.load(tmp_path, device="cpu")
    assert tok("alpha beta gamma")["input_ids"] == words("alpha beta gamma")["input_ids"]
    assert tok.unk_token_id not in tok("alpha beta gamma")["input_ids"]
