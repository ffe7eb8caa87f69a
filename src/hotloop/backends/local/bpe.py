"""SmolLM2's byte-level BPE tokenizer rebuilt from the GGUF's own vocabulary and merges, run in Rust.

It gives exactly llama.cpp's token ids for the `smollm` pre-tokenizer (digits one by one, then the GPT-2 split;
tests/test_tokenizer.py checks this on random text) at several times its speed, which matters because tokenizing
a turn's new input is the largest per-turn cost left once rendering is incremental. Hugging Face `tokenizers`
builds it; `fastokens` (backends/rust_tokenizer.py) runs it where it is installed: 4-9x faster on one core, and
its encode releases the GIL, so a long text tokenized on a worker thread leaves the event loop free. The built
tokenizer is cached as JSON beside the user's cache, keyed by the GGUF file's size and modification time: reading
49k tokens and merges out of the GGUF takes seconds, loading the JSON a fraction of one.
"""

from __future__ import annotations

import logging
import re
from array import array
from pathlib import Path
from typing import Any

import platformdirs

from hotloop.backends.rust_tokenizer import RustTokenizer
from hotloop.chat.specs import Tokenizer

log = logging.getLogger("hotloop.tokenizer")
# llama.cpp token types that are control tokens, matched before the BPE (`special=True` in llama.cpp).
_CONTROL, _USER_DEFINED = 3, 4


def _cache_path(gguf: Path) -> Path:
    stat = gguf.stat()
    return Path(platformdirs.user_cache_dir("hotloop")) / f"{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}.json"


def _build(gguf: Path) -> Any:
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(str(gguf))

    def strings(name: str) -> list[str]:
        field = reader.fields[name]
        return [bytes(field.parts[index]).decode("utf-8") for index in field.data]

    model = reader.fields["tokenizer.ggml.model"]
    pre = reader.fields["tokenizer.ggml.pre"]
    kinds = (bytes(model.parts[model.data[0]]).decode(), bytes(pre.parts[pre.data[0]]).decode())
    if kinds != ("gpt2", "smollm"):
        raise ValueError(f"unsupported tokenizer {kinds}")
    tokens = strings("tokenizer.ggml.tokens")
    merges = [(left, right) for left, _, right in (merge.partition(" ") for merge in strings("tokenizer.ggml.merges"))]
    types_field = reader.fields["tokenizer.ggml.token_type"]
    types = [int(types_field.parts[index][0]) for index in types_field.data]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    specials = [token for token, kind in zip(tokens, types, strict=True) if kind in (_CONTROL, _USER_DEFINED)]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in specials])
    return tokenizer


def load_bpe(gguf: Path, *, prefer_fast: bool = True) -> RustTokenizer | None:
    """The Rust tokenizer for this GGUF, or None when it cannot be built (then llama.cpp tokenizes)."""
    path = _cache_path(gguf)
    try:
        return RustTokenizer.from_file(path, prefer_fast=prefer_fast)
    except Exception:  # no cache yet (or a stale, unreadable one): build it
        pass
    try:
        config = _build(gguf).to_str()
        tokenizer = RustTokenizer(config, prefer_fast=prefer_fast, name=str(gguf))
    except Exception:
        log.warning("could not rebuild the GGUF tokenizer; llama.cpp tokenizes instead", exc_info=True)
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config, encoding="utf-8")
    except OSError:
        log.info("could not cache the tokenizer at %s", path)
    return tokenizer


# Characters outside the Basic Multilingual Plane and the emoji blocks: llama.cpp's Unicode tables and the Rust
# regex classify some of them (rare scripts, unassigned code points) differently, so such text goes to llama.cpp.
# So do six C0 control characters that have no token: llama.cpp splits words at them before dropping them, the
# Rust side merges across (`=\x06.` is two tokens there, one here); an exhaustive scan of the BMP finds no other.
_RARE = re.compile("[\x04\x06\x13\x14\x16\x1d\U00010000-\U0001efff\U0001fb00-\U0010ffff]")
# The search for them runs in slices of this many characters: one regex call holds the GIL throughout, and a long
# text is tokenized on a worker thread so that the event loop can run meanwhile (chat/incremental.py).
_RARE_SLICE = 1 << 17


_RARE_ASCII = b"\x04\x06\x13\x14\x16\x1d"


def _has_rare(text: str) -> bool:
    if text.isascii():  # most tool output: only the six control characters can be there (~4 µs on 8 KB, not ~50)
        raw = text.encode("ascii")
        return len(raw.translate(None, _RARE_ASCII)) != len(raw)
    if len(text) <= _RARE_SLICE:
        return _RARE.search(text) is not None
    return any(_RARE.search(text, start, start + _RARE_SLICE) for start in range(0, len(text), _RARE_SLICE))


class BPETokenizer:
    """The `Tokenizer` interface over the Rust tokenizer (special tokens recognised, no BOS added), with the
    llama.cpp tokenizer for the rare text where the two could differ."""

    def __init__(self, tokenizer: RustTokenizer, reference: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._reference = reference
        self.max_token_chars = tokenizer.max_token_chars

    def encode(self, text: str) -> list[int]:
        if _has_rare(text):
            return self._reference.encode(text)
        return self._tokenizer.encode(text)

    def encode_array(self, text: str) -> array[int]:
        """The ids as an `array("i")`, a long text's with the GIL released (llama.cpp's through ctypes)."""
        if _has_rare(text):
            return array("i", self._reference.encode(text))
        return self._tokenizer.encode_array(text)

    def decode(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens)
