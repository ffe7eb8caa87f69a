"""SmolLM2's byte-level BPE tokenizer rebuilt from the GGUF's own vocabulary and merges, run by Hugging Face
`tokenizers` (Rust).

It gives exactly llama.cpp's token ids for the `smollm` pre-tokenizer (digits one by one, then the GPT-2 split;
tests/test_tokenizer.py checks this on random text) at several times its speed, which matters because tokenizing
a turn's new input is the largest per-turn cost left once rendering is incremental. The built tokenizer is cached
as JSON beside the user's cache, keyed by the GGUF file's size and modification time: reading 49k tokens and
merges out of the GGUF takes seconds, loading the JSON a fraction of one.
"""

from __future__ import annotations

import itertools
import logging
import re
from pathlib import Path
from typing import Any

import platformdirs

from hotloop.backends.base import Tokenizer

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


def load_bpe(gguf: Path) -> Any | None:
    """The `tokenizers.Tokenizer` for this GGUF, or None when it cannot be built (then llama.cpp tokenizes)."""
    from tokenizers import Tokenizer

    path = _cache_path(gguf)
    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # no cache yet (or a stale, unreadable one): build it
        pass
    try:
        tokenizer = _build(gguf)
    except Exception:
        log.warning("could not rebuild the GGUF tokenizer; llama.cpp tokenizes instead", exc_info=True)
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.save(str(path))
    except OSError:
        log.info("could not cache the tokenizer at %s", path)
    return tokenizer


# Characters outside the Basic Multilingual Plane and the emoji blocks: llama.cpp's Unicode tables and the Rust
# regex classify some of them (rare scripts, unassigned code points) differently, so such text goes to llama.cpp.
# So do six C0 control characters that have no token: llama.cpp splits words at them before dropping them, the
# Rust side merges across (`=\x06.` is two tokens there, one here); an exhaustive scan of the BMP finds no other.
_RARE = re.compile("[\x04\x06\x13\x14\x16\x1d\U00010000-\U0001efff\U0001fb00-\U0010ffff]")


# Long texts (a big tool output) are cut into this many parts, tokenized in parallel on the Rust side.
PARALLEL_CHARS = 2048
PARALLEL_PARTS = 4


def split_at_lines(text: str, parts: int) -> list[str]:
    """Cut `text` after newlines that sit between two non-space characters, near equal sizes.

    The pre-tokenizer always splits on both sides of such a newline (GPT-2's `\\s+` alternatives take it alone,
    digits and control tokens never span it), so tokenizing the parts gives exactly the ids of the whole.
    """
    cuts: list[int] = []
    step = len(text) // parts
    for target in range(step, len(text) - step // 2, step):
        at = text.find("\n", max(target, cuts[-1] if cuts else 0))
        while 0 < at < len(text) - 1 and (text[at - 1].isspace() or text[at + 1].isspace()):
            at = text.find("\n", at + 1)
        if at <= 0 or at >= len(text) - 1:
            break
        cuts.append(at + 1)
    bounds = [0, *cuts, len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds) if end > start]


class BPETokenizer:
    """The `Tokenizer` interface over a `tokenizers.Tokenizer` (special tokens recognised, no BOS added), with the
    llama.cpp tokenizer for the rare text where the two could differ."""

    def __init__(self, tokenizer: Any, reference: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._reference = reference

    def encode(self, text: str) -> list[int]:
        if _RARE.search(text):
            return self._reference.encode(text)
        if len(text) < PARALLEL_CHARS:
            ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
            return ids
        encodings = self._tokenizer.encode_batch(split_at_lines(text, PARALLEL_PARTS), add_special_tokens=False)
        return [token for encoding in encodings for token in encoding.ids]

    def decode(self, tokens: list[int]) -> str:
        text: str = self._tokenizer.decode(tokens, skip_special_tokens=False)
        return text
