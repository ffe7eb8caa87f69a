"""A content-addressed cache of per-item scan results: an item resent unchanged costs a hash and a lookup.

A classifier's expensive work on one item (regexes, entropy, scoring) is a pure function of the item's text, so
its result is cached under a BLAKE2b digest of that text, the classifier's name and its version. The chain's
state (which secrets were already reported, the injection pressure) is folded over the results afterwards, so a
cached result gives exactly what a fresh scan gives. The cache is an LRU bounded by an estimate of the bytes it
holds; it holds no secret (only fingerprints and redacted excerpts, what findings already carry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from hotloop.lru import ByteLRU, Figures

DEFAULT_MAX_BYTES = 16 * 1024 * 1024

# Bytes counted per entry on top of its result's own estimate: the 16-byte key object (49), the OrderedDict's
# entry and links (~100), the result's container.
ENTRY_OVERHEAD = 192


def content_key(texts: Sequence[str]) -> tuple[bytes, int]:
    """A 16-byte BLAKE2b digest of `texts` and their size in UTF-8 bytes.

    Each text is length-prefixed, so `["ab", "c"]` and `["a", "bc"]` (two parts of one message, scanned apart)
    differ.
    """
    digest = hashlib.blake2b(digest_size=16, person=b"hotloop.safety")
    digest.update(len(texts).to_bytes(8, "little"))
    size = 0
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        size += len(data)
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest(), size


def result_key(content: bytes, classifier: str, version: int) -> bytes:
    """The cache key of one classifier's result on the texts whose `content_key` is `content`."""
    return content + f"{classifier}\0{version}".encode()


class ScanCache(Figures):
    """Per-item scan results by key, least recently used first out, at most `max_bytes` (0: caches nothing).

    Not thread-safe: the stage runs on the event loop's thread.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache size must be >= 0, got {max_bytes}")
        self._lru: ByteLRU[bytes, tuple[Any, int]] = ByteLRU(max_bytes, itemgetter(1))  # key -> (result, size)
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self._lru.max_bytes > 0

    def get(self, key: bytes) -> tuple[bool, Any]:
        """(True, result) on a hit, which becomes the most recently used; (False, None) on a miss."""
        entry = self._lru.get(key)
        if entry is None:
            self.misses += 1
            return False, None
        self.hits += 1
        return True, entry[0]

    def put(self, key: bytes, result: Any, size: int) -> None:
        """Store `result` (about `size` bytes besides the entry's overhead), evicting the least recently used; a key
        already held keeps its result (the same texts, classifier and version give the same one)."""
        self._lru.add(key, (result, size + ENTRY_OVERHEAD))

    def __contains__(self, key: bytes) -> bool:
        return key in self._lru

    def values(self) -> list[Any]:
        """The cached results, least recently used first (for tests and debugging)."""
        return [result for result, _ in self._lru.values()]
