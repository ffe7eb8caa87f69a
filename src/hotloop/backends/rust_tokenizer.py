"""A `tokenizer.json` run in Rust: `fastokens` where it loads and gives Hugging Face `tokenizers`' ids on a probe,
else `tokenizers` itself.

fastokens encodes 4-9x faster on one core. Neither engine's single-text `encode` lets go of the GIL for a text
under 32 KB (fastokens releases it only above that size; `tokenizers` never), so a worker thread encoding a 20 KB tool
output would hold up the event loop as if it ran there. Both engines' batch calls release it for any size, so a
long text (`LONG_TEXT`) goes through a batch of one: on a worker thread (chat/incremental.py) it leaves the event
loop free. fastokens' flat batch also hands back the ids as one buffer, so a long text's ids become an `array` with
no Python object per token (`encode_array`). A very long text (a file an agent read, a test log) is cut into pieces
that tokenize apart to its own ids (text_pieces.py), which the batch call encodes on every core at once.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from array import array
from pathlib import Path
from typing import Any

from hotloop.backends.text_pieces import PIECE_CHARS, cut_points, cuttable, pieces

log = logging.getLogger("hotloop.tokenizer")

# From this many characters on, a text is encoded by a batch call, which releases the GIL while it works.
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
# Texts cut at every place text_pieces.py allows, to check its rule on a tokenizer before it is used.
CUT_PROBE = [
    *PROBE,
    "x\nif a:\n  b = 1\n}\nelse\n0\n'\ns\nfoo'\nll = 2\n.\nA\n\n9\n\t9\n#\n7z\n<|im_end|>\nq\n",
    "line 1: ok\nline 2: FAILED test_x.py::test_y - AssertionError: 3 != 4\n===\n2 failed, 10 passed\nDone.\n",
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
        # Pieces a long text is encoded in at once: one per core, where the cut rule holds for this tokenizer.
        self.cores = _cores() if _cuts_hold(config, self._reference, name) else 1

    @classmethod
    def from_file(cls, path: Path, *, prefer_fast: bool = True) -> RustTokenizer:
        return cls(path.read_text(encoding="utf-8"), prefer_fast=prefer_fast, name=str(path))

    def encode(self, text: str) -> list[int]:
        ids: list[int]
        if len(text) >= LONG_TEXT:
            ids = self.encode_array(text).tolist()
        elif self._fast is not None:
            ids = self._fast.encode(text, add_special_tokens=False).ids
        else:
            ids = self._reference.encode(text, add_special_tokens=False).ids
        return ids

    def encode_array(self, text: str) -> array[int]:
        """The ids as an `array("i")`; a long text is encoded with the GIL released (the module's docstring)."""
        if len(text) < LONG_TEXT:
            return array("i", self.encode(text))
        batch = pieces(text, min(self.cores, len(text) // PIECE_CHARS))
        if self._fast is None:
            ids: array[int] = array("i")
            for encoding in self._reference.encode_batch(batch, add_special_tokens=False):
                ids.extend(encoding.ids)
            return ids
        flat, _ = self._fast.encode_batch_flat(batch, add_special_tokens=False)
        # The pieces' ids one after the other, little-endian uint32 (fastokens' documented layout); a C int is 32
        # bits wherever hotloop runs, and a vocabulary never reaches 2**31 ids.
        ids = array("i")
        ids.frombytes(flat)
        if sys.byteorder != "little":
            ids.byteswap()
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


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _cuts_hold(config_text: str, reference: Any, name: str) -> bool:
    """Whether texts may be cut into pieces for this tokenizer (text_pieces.py), its rule checked on the probes at
    every place it allows."""
    try:
        if not cuttable(json.loads(config_text)):
            return False
    except (ValueError, AttributeError, TypeError):
        return False

    def ids(text: str) -> list[int]:
        found: list[int] = reference.encode(text, add_special_tokens=False).ids
        return found

    for text in CUT_PROBE:
        whole = ids(text)
        if any(ids(text[:cut]) + ids(text[cut:]) != whole for cut in cut_points(text)):
            log.warning("%s: a text cut at a newline tokenizes differently; long texts stay whole", name)
            return False
    return True


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
