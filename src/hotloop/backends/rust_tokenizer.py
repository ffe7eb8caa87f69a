"""A `tokenizer.json` run in Rust: `fastokens` where it loads and gives Hugging Face `tokenizers`' ids on a probe,
else `tokenizers` itself.

fastokens encodes 4-9x faster on one core and releases the GIL while it works, so a long text tokenized on a
worker thread (chat/incremental.py) leaves the event loop free. `tokenizers`' single-text `encode` holds the GIL;
its `encode_batch` does not, so the fallback sends long texts through a batch of one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("hotloop.tokenizer")

# Above this many characters the `tokenizers` fallback encodes through `encode_batch`, which releases the GIL.
LONG_TEXT = 2048

# Text the two engines must agree on before fastokens is used: code, prose, digits, whitespace runs, accents, CJK,
# emoji, and the template's special tokens (matched whole).
PROBE = [
    "def f(x):\n    return x ** 2  # square\n\n\n\tif x != 1_000_000: pass\r\n",
    "The quick brown fox — jumps over 12345 lazy dogs; it's 3.14, they'll say. ünïcödé 日本語 😀👍🏽",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n  hi  <|im_end|>\n",
    '{"name": "shell", "arguments": {"cmd": ["rg", "-n", "TODO"]}}\n' + " " * 40 + "x\n" + "#" * 100,
    "",
]


class RustTokenizer:
    """hotloop's `Tokenizer` over a tokenizer.json: special tokens in text are matched, none are added."""

    def __init__(self, config: str, *, prefer_fast: bool = True, name: str = "tokenizer.json") -> None:
        """`config`: the tokenizer.json text; `name` only labels log lines."""
        from tokenizers import Tokenizer

        self._reference: Any = Tokenizer.from_str(config)
        self._fast: Any = _fastokens(config, self._reference, name) if prefer_fast else None
        self.engine = "fastokens" if self._fast is not None else "tokenizers"
        self.max_token_chars = _max_token_chars(config)

    @classmethod
    def from_file(cls, path: Path, *, prefer_fast: bool = True) -> RustTokenizer:
        return cls(path.read_text(encoding="utf-8"), prefer_fast=prefer_fast, name=str(path))

    def encode(self, text: str) -> list[int]:
        ids: list[int]
        if self._fast is not None:
            ids = self._fast.encode(text, add_special_tokens=False).ids
        elif len(text) < LONG_TEXT:
            ids = self._reference.encode(text, add_special_tokens=False).ids
        else:
            ids = self._reference.encode_batch([text], add_special_tokens=False)[0].ids
        return ids

    def decode(self, tokens: list[int]) -> str:
        text: str = self._reference.decode(tokens, skip_special_tokens=False)
        return text


def _fastokens(config: str, reference: Any, name: str) -> Any | None:
    """fastokens over the same file, or None when it is not installed, cannot load it, or disagrees on the probe."""
    try:
        import fastokens
    except ImportError:
        return None
    try:
        fast = fastokens.Tokenizer.from_json_str(config)
        agrees = all(
            fast.encode(text, add_special_tokens=False).ids == reference.encode(text, add_special_tokens=False).ids
            for text in PROBE
        )
    except Exception:
        log.info("fastokens cannot run %s; using tokenizers", name, exc_info=True)
        return None
    if not agrees:
        log.warning("fastokens and tokenizers disagree on %s; using tokenizers", name)
        return None
    return fast


def _max_token_chars(config_text: str) -> int:
    """The most characters of text one token can stand for, for a cheap lower bound on a text's token count
    (characters / this); 0 when no safe bound is known (a normalizer may fold several characters into one).

    A byte-level vocabulary spells each byte as one character, so a token's length is its byte count, which is at
    least the number of characters it covers; added tokens are matched as their literal text.
    """
    try:
        config = json.loads(config_text)
        if config.get("normalizer") is not None:
            return 0
        vocab = config["model"]["vocab"]
        words = vocab.keys() if isinstance(vocab, dict) else (entry[0] for entry in vocab)
        added = (token["content"] for token in config.get("added_tokens") or ())
        return max(len(word) for word in (*words, *added))
    except (ValueError, KeyError, TypeError, AttributeError):
        return 0
