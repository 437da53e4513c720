"""Any Hugging Face causal language model, by name or folder, ready for this package's decoding code.

`load(name_or_path)` returns `(model, tokenizer)` through the Auto classes (`AutoModelForCausalLM`,
`AutoTokenizer`), so a chapter written against the zoo's tiny Llamas runs unchanged on a GPT-2, Llama, Qwen,
Gemma... checkpoint. The tokenizer pads on the left (every row's next token in the last column, as
:mod:`icml25.core.generation` expects) and always has a pad token: the end-of-sequence token when it has one
(Llama and Qwen tokenizers ship without a pad token), else a new `<pad>` token with the embedding matrix grown to
match. `name_or_path` is one of

- a folder written by `save_pretrained` (model and tokenizer),
- a zoo entry's name (`"arith-target"`): the zoo trains or loads it at `scale` and `seed` on the CPU, so the
  smoke and ci numbers are the ones the zoo's training produces,
- a Hugging Face Hub id (`"Qwen/Qwen2.5-Math-1.5B-Instruct"`), read from the local Hub cache; it is downloaded
  only when `local_files_only` is False (default: whatever `HF_HUB_OFFLINE` says).

Bad input is refused with an error that names the model and what is missing: an unknown name offline, a folder
without `config.json` or without tokenizer files, and (with `alphabet=`) a tokenizer that cannot write the task's
characters.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase,
                          PreTrainedTokenizerFast)

PAD = "<pad>"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


class ModelNotFound(ValueError):
    """The name or folder given does not lead to a causal LM checkpoint (the message says what is missing)."""


def default_device() -> str:
    """"cuda" when a GPU is visible, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _looks_like_path(name: str) -> bool:
    """A folder on disk, or written like one (a Hub id is `name` or `owner/name`)."""
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


def _checkpoint_folder(path: Path) -> Path:
    if not path.is_dir():
        raise ModelNotFound(f"model {str(path)!r}: no such folder")
    if not (path / "config.json").exists():
        raise ModelNotFound(f"model {str(path)!r}: the folder has no config.json, so it is not a Hugging Face "
                            "checkpoint (write one with model.save_pretrained)")
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        raise ModelNotFound(f"model {str(path)!r}: the folder has no tokenizer (none of {', '.join(TOKENIZER_FILES)}"
                            "; write one with tokenizer.save_pretrained)")
    return path


def resolve(name_or_path: str | Path, scale: str = "ci", seed: int = 0) -> str:
    """Where `name_or_path` is read from: a checkpoint folder (a zoo entry's, trained now if it is not cached)
    or a Hub id, unchanged. Raises :class:`ModelNotFound` for a folder that is not a checkpoint."""
    from . import zoo

    name = str(name_or_path)
    if name in zoo.names():
        return str(zoo.ensure(name, scale, seed)[0])
    if isinstance(name_or_path, Path) or _looks_like_path(name):
        return str(_checkpoint_folder(Path(name).expanduser()))
    return name


def with_pad_token(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str = "model") -> None:
    """Give `tokenizer` a pad token if it has none, or one the model cannot embed (a tokenizer class may add its
    family's default pad token to a vocabulary that lacks it): its end-of-sequence token, else a new `<pad>` with
    the model's embeddings resized to the new vocabulary. Make it pad on the left, and tell the model's config."""
    rows = model.get_input_embeddings().num_embeddings
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id >= rows:
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id < rows:
            tokenizer.pad_token = tokenizer.eos_token
        else:
            tokenizer.add_special_tokens({"pad_token": PAD})
            model.resize_token_embeddings(len(tokenizer))
    tokenizer.padding_side = "left"
    model.config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def untokenizable(tokenizer: PreTrainedTokenizerBase, alphabet: str) -> list[str]:
    """The characters of `alphabet` that `tokenizer` cannot write: encoding one gives the unknown token or
    nothing, or decoding it does not give the character back."""
    missing = []
    for ch in dict.fromkeys(alphabet):
        ids = tokenizer(ch, add_special_tokens=False)["input_ids"]
        if not ids or (tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids) or \
                tokenizer.decode(ids, skip_special_tokens=True) != ch:
            missing.append(ch)
    return missing


def check_alphabet(tokenizer: PreTrainedTokenizerBase, alphabet: str, name: str = "model") -> None:
    """Raise a `ValueError` naming the model and the characters of `alphabet` its tokenizer cannot write."""
    missing = untokenizable(tokenizer, alphabet)
    if missing:
        raise ValueError(f"model {name!r}: its tokenizer cannot write {len(missing)} character(s) of the task's "
                         f"alphabet: {''.join(missing)!r} (each must encode to known tokens that decode back to it)")


GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")  # a saved `tokenizers` pipeline, as is


def _tokenizer(source: str, offline: bool) -> PreTrainedTokenizerBase:
    """The folder's or Hub id's tokenizer by the Auto class; a folder whose tokenizer was saved as a generic
    `tokenizers` pipeline (as the zoo's are) is read back as exactly that pipeline, since the Auto class would
    otherwise rebuild some families' own tokenizer (Qwen2's) from the vocabulary alone and lose its model."""
    config = Path(source) / "tokenizer_config.json"
    if config.exists() and json.loads(config.read_text()).get("tokenizer_class") in GENERIC_TOKENIZERS:
        return PreTrainedTokenizerFast.from_pretrained(source, local_files_only=offline)
    return AutoTokenizer.from_pretrained(source, local_files_only=offline)


def load(name_or_path: str | Path, device: str | torch.device | None = None, dtype: torch.dtype | str | None = None,
         *, alphabet: str | None = None, scale: str = "ci", seed: int = 0,
         local_files_only: bool | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer, in eval mode on `device` (default :func:`default_device`; a zoo entry
    defaults to the CPU it was trained on), in `dtype` (default float32 on the CPU, the checkpoint's own dtype on
    a GPU). `alphabet`: characters the task writes, checked with :func:`check_alphabet`. `scale`, `seed`: which
    zoo model a zoo name means."""
    from . import zoo

    name = str(name_or_path)
    is_zoo = name in zoo.names()
    source = resolve(name_or_path, scale, seed)
    device = torch.device(device if device is not None else "cpu" if is_zoo else default_device())
    if dtype is None:
        dtype = "auto" if device.type == "cuda" else torch.float32
    offline = _offline() if local_files_only is None else local_files_only
    try:
        tokenizer = _tokenizer(source, offline)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=offline)
    except OSError as e:
        where = "in the local Hugging Face cache (offline: nothing is downloaded)" if offline else "on the Hub"
        raise ModelNotFound(f"model {name!r}: not a checkpoint folder, not a zoo model ({', '.join(zoo.names())}) "
                            f"and not found {where}: {str(e).splitlines()[0]}") from e
    with_pad_token(model, tokenizer, name)
    if alphabet is not None:
        check_alphabet(tokenizer, alphabet, name)
    return model.to(device).eval(), tokenizer


def get(name_or_path: str | Path, scale: str = "ci", seed: int = 0, device: str | torch.device | None = None,
        *, alphabet: str | None = None):
    """A chapter's model as a :class:`icml25.core.zoo.ZooModel`, whatever its source: a zoo entry's name gives
    :func:`icml25.core.zoo.get` (trained in place at `scale` from `seed`, or read from the cache, so smoke and ci
    numbers are the zoo's); any other name or folder is loaded with :func:`load` (on `device`, default
    :func:`default_device`), with `info` saying where it came from. A chapter's `model` notebook parameter goes
    through here, so a real checkpoint takes the zoo model's place."""
    from . import tinylm, zoo

    name = str(name_or_path)
    if name in zoo.names():
        z = zoo.get(name, scale, seed)
        if alphabet is not None:
            check_alphabet(z.tokenizer, alphabet, name)
        return z if device is None else zoo.ZooModel(z.model.to(device), z.tokenizer, z.info, z.path, z.trained_now)
    model, tokenizer = load(name_or_path, device=device, alphabet=alphabet, local_files_only=None)
    return zoo.ZooModel(model, tokenizer, {"checkpoint": name, "n_params": tinylm.n_params(model)},
                        Path(resolve(name_or_path, scale, seed)), trained_now=False)


def decoder_blocks(model: PreTrainedModel) -> torch.nn.ModuleList:
    """The decoder blocks of any causal LM, first to last: `model.model.layers` in Llama, Qwen, Mistral and Gemma,
    `model.transformer.h` in GPT-2, and otherwise the one `ModuleList` with `config.num_hidden_layers` entries
    (hooks and edits placed on these work whatever the family)."""
    n = model.config.num_hidden_layers
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if not lists:
        raise ValueError(f"{type(model).__name__}: no list of {n} decoder blocks found")
    return lists[0]
