"""The lexical half of a search: BM25 over chunks' terms, the same on every store.

A chunk's terms are computed once, when its file is ingested (`terms`: its words lower-cased, common words left
out, a light suffix stripping so "tides" finds "tide", each hashed to 32 bits with CRC-32, stable across processes),
and kept with the chunk: a replica builds a store's index from those, never from the text again. The index is the
store's (term, chunk, count) postings sorted by term, so a query term's postings are one slice; BM25's inverse
document frequencies and length normalisation are taken at query time from them."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

K1, B = 1.2, 0.75  # BM25's usual constants
_WORD = re.compile(r"\w+")
# Common English words that carry no topic: left out of the index and the queries.
# fmt: off
STOP = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from", "has", "have",
    "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "so", "than", "that", "the",
    "their", "them", "then", "there", "these", "they", "this", "to", "was", "we", "what", "when", "where", "which",
    "while", "who", "why", "will", "with", "you", "your"
))
# fmt: on
Terms = npt.NDArray[np.uint32]
CACHED_WORDS = 500_000  # distinct words whose hashes a process keeps; the cache starts again past it
_HASHES: dict[str, int] = {}  # word → its term's CRC-32, -1 for a common word


def words(text: str) -> list[str]:
    """The words a query or a chunk is searched by: lower-cased, common words left out."""
    return [word for word in _WORD.findall(text.lower()) if word not in STOP]


def stem(word: str) -> str:
    """A light suffix stripping (plurals and possessives only): enough for "tides" to find "tide", never so much
    that unrelated words meet."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> Terms:
    """A text's terms, one per occurrence, in order. Each distinct word is stemmed and hashed once per process
    (`_HASHES`): a file's chunks repeat their words (twice over with `auto`'s overlap), and files share most of them."""
    found = _WORD.findall(text.lower())
    if len(_HASHES) > CACHED_WORDS:
        _HASHES.clear()
    for word in set(found).difference(_HASHES):
        _HASHES[word] = -1 if word in STOP else zlib.crc32(stem(word).encode())
    hashes = np.fromiter(map(_HASHES.__getitem__, found), dtype=np.int64, count=len(found))
    return hashes[hashes >= 0].astype(np.uint32)


def query_terms(text: str) -> Terms:
    return np.unique(terms(text))


class LexicalIndex:
    """BM25 over a store's chunks, rows in the store's order (pipeline/filesearch/index.py)."""

    def __init__(self, chunk_terms: Sequence[Terms]) -> None:
        lengths = np.fromiter((len(found) for found in chunk_terms), dtype=np.int64, count=len(chunk_terms))
        self.size = len(chunk_terms)
        self.lengths = lengths.astype(np.float32)
        self.average = float(lengths.mean()) if self.size and lengths.sum() else 1.0
        # Every (term, chunk) pair with its count, sorted by term: a term's postings are one contiguous slice.
        rows = np.repeat(np.arange(self.size, dtype=np.int64), lengths)
        flat = np.concatenate(chunk_terms) if self.size else np.zeros(0, np.uint32)
        pairs = np.unique(flat.astype(np.uint64) << np.uint64(32) | rows.astype(np.uint64), return_counts=True)
        keys, counts = pairs
        self.term_of = (keys >> np.uint64(32)).astype(np.uint32)
        self.chunk_of = (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
        self.counts = counts.astype(np.float32)

    def scores(self, query: Terms) -> npt.NDArray[np.float32]:
        """Each chunk's BM25 score for `query` (0 where it has none of its terms)."""
        out = np.zeros(self.size, dtype=np.float32)
        for term in query:
            first = int(np.searchsorted(self.term_of, term, side="left"))
            last = int(np.searchsorted(self.term_of, term, side="right"))
            if first == last:
                continue
            chunks = self.chunk_of[first:last]
            count = self.counts[first:last]
            idf = np.log(1.0 + (self.size - (last - first) + 0.5) / ((last - first) + 0.5))
            norm = K1 * (1.0 - B + B * self.lengths[chunks] / self.average)
            out[chunks] += idf * count * (K1 + 1.0) / (count + norm)
        return out
