"""The embedded model's tokenizer (a Llama-2 SentencePiece BPE, as `tokenizers` runs it) made fast for whole files.

Its `tokenizers` configuration has no pre-tokenizer: `encode` runs BPE over a file's whole text as one word, with no
word cache and every character's alignment tracked (~1 MB/s here, half of a file's ingestion). But no token of its
vocabulary holds "▁" (the normalized space) after another character (`word_bounded` checks it when loaded), so no
merge ever crosses the start of a run of "▁": the text's words, each such run and what follows it up to the next one,
tokenize alone to the same tokens. `WordTokens` cuts them with a regular expression, runs the model once per distinct
word (cached across files), and lays the tokens out with numpy: the same ids and character offsets as `encode`
(tests/test_filesearch.py compares them), 4-5 times faster cold
and ~15 times with the words cached.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

SPACE = "\u2581"  # SentencePiece's visible space: what the normalizer makes of " ", and prepends to the text
_WORDS = re.compile(f"{SPACE}+[^{SPACE}]*|[^{SPACE}]+")
CACHED_WORDS = 200_000  # distinct words a process keeps (a few tens of MB); the cache starts again past it

Ids = npt.NDArray[np.int32]
Spans = npt.NDArray[np.int64]  # (tokens, 2): each token's [start, end) characters in the text


def fits(tokenizer: Any) -> bool:
    """Whether `tokenizer` is one `WordTokens` tokenizes as it does: its normalizer prepends "▁" and replaces " "
    with it, it has no pre-tokenizer, its added tokens are matched in the raw text as they are, and no token of its
    vocabulary holds "▁" after another character (then words tokenize alone as they do together)."""
    normalizer = tokenizer.normalizer
    added = tokenizer.get_added_tokens_decoder().values()
    return (
        tokenizer.pre_tokenizer is None
        and normalizer is not None
        and normalizer.normalize_str("a b") == f"{SPACE}a{SPACE}b"
        and not any(token.normalized or token.lstrip or token.rstrip or token.single_word for token in added)
        and not any(SPACE in token.lstrip(SPACE) for token in tokenizer.get_vocab())
    )


class WordTokens:
    """The tokens of texts as `tokenizer.encode(text, add_special_tokens=False)` gives them, for a tokenizer that
    `fits` (WordLlama's: a BPE with byte fallback)."""

    def __init__(self, tokenizer: Any) -> None:
        from tokenizers import Tokenizer

        self._raw = Tokenizer(tokenizer.model)  # the model alone: words arrive normalized, each one word
        self._words: dict[str, tuple[int, ...]] = {}  # each distinct word's token ids
        self._advance, self._back = _widths(tokenizer.get_vocab())
        added = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()}
        self._added = added
        self._split = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True)))) if added else None

    def __call__(self, text: str) -> tuple[Ids, Spans]:
        """`encode` takes the added tokens (`<s>`, …) out of the raw text first and normalizes each piece between
        them alone (each gets its own "▁" in front): so is it done here."""
        if self._split is None or self._split.search(text) is None:
            return self._piece(text)
        parts: list[tuple[Ids, Spans]] = []
        at = 0
        for match in self._split.finditer(text):
            ids, spans = self._piece(text[at : match.start()])
            parts += [(ids, spans + at), (np.asarray([self._added[match[0]]], np.int32), np.asarray([match.span()]))]
            at = match.end()
        ids, spans = self._piece(text[at:])
        parts.append((ids, spans + at))
        return np.concatenate([ids for ids, _ in parts]), np.concatenate([spans for _, spans in parts])

    def _piece(self, text: str) -> tuple[Ids, Spans]:
        if not text:
            return np.zeros(0, np.int32), np.zeros((0, 2), np.int64)
        normalized = SPACE + text.replace(" ", SPACE)  # one character for one: offsets shift by the prepended one
        words = _WORDS.findall(normalized)
        self._learn(words)
        tokens = np.fromiter(chain.from_iterable(map(self._words.__getitem__, words)), np.int32)
        # Each token's characters from the vocabulary's widths (tokens cover the normalized text end to end).
        advance = self._advance[tokens]
        starts = np.cumsum(advance) - advance - self._back[tokens]
        ends = starts + np.maximum(advance, 1)
        # The prepended "▁" stands for the text's first character, as `encode`'s alignments have it.
        return tokens, np.stack((np.maximum(starts - 1, 0), np.maximum(ends - 1, 1)), axis=1)

    def _learn(self, words: list[str]) -> None:
        """The tokens of the words not seen yet, in one call of the model (its own batch, in Rust)."""
        if len(self._words) > CACHED_WORDS:
            self._words.clear()
        new = list(set(words).difference(self._words))
        for word, encoding in zip(new, self._raw.encode_batch(new, add_special_tokens=False), strict=True):
            self._words[word] = tuple(encoding.ids)


def _widths(vocabulary: dict[str, int]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each token's characters in the normalized text, and how far back it starts. A byte-fallback token (`<0xNN>`)
    is one byte of a character: the character's first byte advances one, its continuation bytes none, and every
    one of them spans the whole character (back one for a continuation), as `encode` gives their offsets."""
    advance = np.zeros(max(vocabulary.values()) + 1, np.int64)
    back = np.zeros_like(advance)
    for token, token_id in vocabulary.items():
        byte = _BYTE.fullmatch(token)
        if byte is None:
            advance[token_id] = len(token)
        elif 0x80 <= int(byte[1], 16) < 0xC0:
            back[token_id] = 1
        else:
            advance[token_id] = 1
    return advance, back


_BYTE = re.compile(r"<0x([0-9A-F]{2})>")
