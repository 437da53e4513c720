"""Tiny causal language models: Hugging Face `LlamaForCausalLM` with small presets and a character- or
word-level tokenizer built with `tokenizers`, wrapped as `PreTrainedTokenizerFast`.

Everything round-trips through `save_pretrained` / `from_pretrained`, so code written against these models
runs unchanged on a real checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

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


def load(path: str | Path) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Model and tokenizer from a folder written by :func:`save` (or any Llama checkpoint folder)."""
    model = LlamaForCausalLM.from_pretrained(path)
    model.eval()
    return model, PreTrainedTokenizerFast.from_pretrained(path)
