"""Tiny causal language models: Hugging Face `LlamaForCausalLM` with small presets and a character- or
word-level tokenizer built with `tokenizers`, wrapped as `PreTrainedTokenizerFast`.

Everything round-trips through `save_pretrained` / `from_pretrained` (read back with
:func:`icml25.core.models.load`, the loader of any checkpoint), so code written against these models runs
unchanged on a real checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, GPT2Config, LlamaConfig, LlamaForCausalLM, MixtralConfig,
                          PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast, Qwen2Config, Qwen3Config)

from .seeding import seeded

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)


@dataclass(frozen=True)
class Preset:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int


# Parameter counts are for a ~20-symbol vocabulary with tied embeddings.
PRESETS = {
    "nano": Preset(32, 1, 2, 96),  # ~15k parameters
    "tiny": Preset(32, 2, 2, 96),  # ~27k
    "micro": Preset(48, 2, 4, 128),  # ~56k
    "small": Preset(64, 2, 4, 192),  # ~107k
    "base": Preset(128, 4, 4, 384),  # ~860k
}


def _wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS,
                                   unk_token=UNK, padding_side="left")


def char_tokenizer(alphabet: str) -> PreTrainedTokenizerFast:
    """One token per character of `alphabet` (plus the four special tokens); decoding concatenates."""
    if len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet has repeated characters: {alphabet!r}")
    vocab = {s: i for i, s in enumerate(SPECIALS)} | {ch: len(SPECIALS) + i for i, ch in enumerate(alphabet)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return _wrap(tok)


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    """One token per whitespace-separated word of `words`; decoding joins with spaces."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return _wrap(tok)


def bpe_tokenizer(corpus: list[str], vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer learnt from `corpus`, the way GPT-2, Llama-3 and Qwen tokenizers are built: it
    has an end-of-sequence token and, like theirs, no pad token (so merged tokens can span a step delimiter)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS)


#: small random configs of the architecture families the tests cover; `qwen3` has head_dim != hidden / heads and
#: `mixtral` routes each token to 2 of 4 experts
FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "mixtral")


def family_config(family: str, vocab_size: int, hidden: int = 32, layers: int = 2, heads: int = 4,
                  kv_heads: int = 2, ff: int = 64, max_len: int = 128, **overrides) -> PretrainedConfig:
    """A tiny config of `family` (one of :data:`FAMILIES`), grouped-query attention where the family has it."""
    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=ff, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_len)
    families = {
        "gpt2": lambda: GPT2Config(**(dict(vocab_size=vocab_size, n_positions=max_len, n_embd=hidden, n_layer=layers,
                                           n_head=heads, n_inner=ff) | overrides)),
        "llama": lambda: LlamaConfig(**(common | {"tie_word_embeddings": True} | overrides)),
        "qwen2": lambda: Qwen2Config(**(common | overrides)),
        "qwen3": lambda: Qwen3Config(**(common | {"head_dim": 2 * hidden // heads} | overrides)),
        "mixtral": lambda: MixtralConfig(**(common | {"num_local_experts": 4, "num_experts_per_tok": 2} | overrides)),
    }
    if family in families:
        return families[family]()
    raise ValueError(f"unknown family {family!r}; valid families: {', '.join(FAMILIES)}")


def random_model(family: str, tokenizer: PreTrainedTokenizerFast, seed: int, **config) -> PreTrainedModel:
    """A freshly initialised tiny causal LM of `family` for `tokenizer`'s vocabulary, initialised from `seed`."""
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    cfg = family_config(family, len(tokenizer), **(ids | config))
    with seeded(seed, "init", family):
        return AutoModelForCausalLM.from_config(cfg).eval()


def make_model(preset: str, tokenizer: PreTrainedTokenizerFast, seed: int, max_len: int = 128,
               **overrides) -> LlamaForCausalLM:
    """A freshly initialised tiny Llama of `preset` size for `tokenizer`'s vocabulary, initialised from `seed`;
    `overrides` replace any LlamaConfig setting, the preset's own included (e.g. `num_hidden_layers=3`)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    p = PRESETS[preset]
    settings = dict(hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
                    num_hidden_layers=p.num_hidden_layers, num_attention_heads=p.num_attention_heads,
                    num_key_value_heads=p.num_attention_heads) | overrides
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=max_len, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **settings)
    with seeded(seed, "init", preset):
        return LlamaForCausalLM(config)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, path: str | Path) -> None:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
