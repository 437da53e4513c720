"""Generation with stop strings of several tokens, finished rows leaving the batch, and samples that do not depend
on when other rows finished: exact small cases on a scripted model, and equalities on random ones."""

from types import SimpleNamespace

import pytest
import torch

from icml25.core import arithmetic, generation, models, tinylm
from icml25.core.seeding import torch_generator

CHARS = tinylm.char_tokenizer(arithmetic.ALPHABET)
BPE = tinylm.bpe_tokenizer([p.prompt + p.solution for p in arithmetic.sample_problems(300, 0)])
BPE.pad_token = BPE.eos_token  # as models.load sets it


class _Rows:
    """The scripted model's KV cache: which script each batch row follows and how far it has got."""

    def __init__(self, scripts):
        self.scripts, self.step = scripts, 0

    def batch_select_indices(self, index):
        self.scripts = [self.scripts[i] for i in index.tolist()]


class Scripted(torch.nn.Module):
    """Writes a fixed token sequence per prompt (keyed by the prompt's last token), then end-of-sequence; records
    the batch size of every forward pass."""

    def __init__(self, tokenizer, scripts: dict[str, list[int]]):
        super().__init__()
        self.tokenizer, self.scripts, self.batch_sizes = tokenizer, scripts, []
        self.vocab = len(tokenizer)

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, input_ids, attention_mask, position_ids, cache=None, use_cache=True):
        if cache is None:
            last = self.tokenizer.convert_ids_to_tokens(input_ids[:, -1].tolist())
            cache = _Rows([self.scripts[t] for t in last])
        self.batch_sizes.append(input_ids.shape[0])
        logits = torch.zeros(input_ids.shape[0], 1, self.vocab)
        for r, script in enumerate(cache.scripts):
            logits[r, 0, script[cache.step] if cache.step < len(script) else self.tokenizer.eos_token_id] = 1.0
        cache.step += 1
        return SimpleNamespace(logits=logits, cache=cache)


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_a_stop_string_of_several_tokens_ends_the_row_where_it_is_complete():
    model = Scripted(CHARS, {"1": _ids(CHARS, "3+2=5;A5"), "2": _ids(CHARS, "4=5*3=5;"), "3": _ids(CHARS, "77")})
    out = generation.generate(model, CHARS, ["1", "2", "3"], 20, stop=["=5;"])
    assert out.texts == ["3+2=5;", "4=5*3=5;", "77"]
    assert out.stopped == [True, True, True]  # the third row ended on end-of-sequence
    assert [len(t) for t in out.token_ids] == [6, 8, 3]


def test_a_token_that_contains_the_stop_string_ends_the_row_and_the_text_is_cut_after_it():
    step = BPE.convert_ids_to_tokens(_ids(BPE, "3*1=3;"))
    assert "=3;" in step  # a merged token spans the delimiter
    model = Scripted(BPE, {"|": _ids(BPE, "3*1=3;3-4=9;")})
    out = generation.generate(model, BPE, ["3*1|"], 20, stop=[";"])
    assert out.texts == ["3*1=3;"] and out.token_ids == [_ids(BPE, "3*1=3;")]
    cut = generation.generate(model, BPE, ["3*1|"], 20, stop=["="])
    assert cut.texts == ["3*1="] and cut.token_ids == [_ids(BPE, "3*1=3;")]
    with pytest.raises(ValueError, match="non-empty"):
        generation.generate(model, BPE, ["3*1|"], 5, stop=[""])


def test_finished_rows_leave_the_batch():
    scripts = {str(d): _ids(CHARS, ";" if d < 7 else "12345;") for d in range(10)}
    prompts = [str(d) for d in range(10)] * 2  # 20 rows: 14 stop after one token, 6 write six
    model = Scripted(CHARS, scripts)
    out = generation.generate(model, CHARS, prompts, 10, stop=[";"])
    assert out.texts == [";" if int(p) < 7 else "12345;" for p in prompts]
    assert model.batch_sizes == [20, generation.MIN_ROWS, 8, 8, 8, 8]  # 6 rows go on, in a batch of 8
    model = Scripted(CHARS, scripts)
    generation.generate(model, CHARS, ["0", "7", "8", "1", "9", "2"], 10, stop=[";"])
    assert model.batch_sizes == [6] * 6  # a batch of at most MIN_ROWS rows is never compacted


@pytest.fixture(scope="module")
def random_models(tmp_path_factory):
    out = {}
    for family in ("gpt2", "llama", "qwen2"):
        path = tmp_path_factory.mktemp(family)
        # weights drawn wide (std 0.5) so that greedy continuations differ from prompt to prompt
        tinylm.save(tinylm.random_model(family, BPE, 1, initializer_range=0.5), BPE, path)
        out[family] = models.load(path, device="cpu")
    return out


def _until(ids, ends):
    for k, t in enumerate(ids):
        if t in ends:
            return ids[:k + 1]
    return ids


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_a_rows_tokens_do_not_depend_on_when_the_others_finished(random_models, family, temperature):
    """With a stop string rows finish at different steps and leave the batch; without it none does. Each row's
    tokens with the stop string are its tokens without it, up to the first token that completes the string."""
    model, tok = random_models[family]
    prompts = [p.prompt for p in arithmetic.sample_problems(40, 2)]
    gen = lambda: torch_generator(0, "gen") if temperature else None  # noqa: E731
    plain = generation.generate(model, tok, prompts, 24, temperature=temperature, generator=gen())
    # stop characters, fewest rows first, until more than half the rows but not all write one of them
    rows = {ch: {i for i, ids in enumerate(plain.token_ids) if generation.StopStrings.of(tok, [ch]).ids & set(ids)}
            for ch in arithmetic.ALPHABET}
    stop, covered = [], set()
    for ch in sorted(rows, key=lambda c: (len(rows[c]), c)):
        if len(covered) <= len(prompts) // 2 and len(covered | rows[ch]) < len(prompts) - generation.MIN_ROWS:
            stop.append(ch)
            covered |= rows[ch]
    stopped = generation.generate(model, tok, prompts, 24, stop=stop, temperature=temperature, generator=gen())
    assert len(prompts) // 2 < sum(stopped.stopped) < len(prompts) - generation.MIN_ROWS  # the batch shrank
    ends = generation.StopStrings.of(tok, stop).ids
    assert stopped.token_ids == [_until(ids, ends) for ids in plain.token_ids]


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_cached_generation_equals_uncached_on_every_family(random_models, family):
    model, tok = random_models[family]
    prompts = [p.prompt for p in arithmetic.sample_problems(16, 3)]
    cached = generation.generate(model, tok, prompts, 16, stop=[";"])
    assert cached.token_ids == generation.generate(model, tok, prompts, 16, stop=[";"], use_cache=False).token_ids
