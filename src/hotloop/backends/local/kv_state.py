"""KV state snapshots of recent chains for the in-process model, so a continuation prefills only its new tokens.

llama.cpp holds one context: whatever was evaluated last. A snapshot is that context's KV cells for sequence 0
(llama.cpp's own serialization, `llama_state_seq_get_data`) taken when another chain is about to overwrite it,
keyed by the tokens it holds. A later prompt restores the snapshot sharing its longest prefix and evaluates
only the rest. No I/O and no locking here: the backend calls this with its model lock held.

Snapshots are one per branch tip: a snapshot whose tokens are a prefix of a newer one is dropped (restoring the
newer one and truncating it gives the same cells). The store is an LRU bounded in bytes (SmolLM2-135M: about
23 KB per token, so 46 MB for a 2,000-token chain).
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from hotloop.observability.metrics import CacheSize, KVReading

# The sequence llama-cpp-python evaluates everything in.
SEQ = 0
# Chains shorter than this are not worth a snapshot: recomputing them costs about as much as restoring.
MIN_SNAPSHOT_TOKENS = 32


class Snapshot:
    __slots__ = ("data", "tokens")

    def __init__(self, tokens: np.ndarray, data: Any) -> None:
        self.tokens = tokens  # int32, the positions the cells hold
        self.data = data  # a ctypes byte array, handed back to llama.cpp as it is (no copy)

    @property
    def nbytes(self) -> int:
        return int(ctypes.sizeof(self.data)) + int(self.tokens.nbytes)


def shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the common prefix of two token arrays (vectorized: one pass in C)."""
    limit = min(len(a), len(b))
    mismatch = np.flatnonzero(a[:limit] != b[:limit])
    return int(mismatch[0]) if mismatch.size else limit


class KVStateCache:
    """Snapshots keyed by their tokens, least recently used first, within `max_bytes` (0: none kept)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, Snapshot] = OrderedDict()  # id(snapshot) -> snapshot
        self.bytes = 0
        self.evictions = 0
        self.hits = self.misses = self.restores = 0
        self.reused_tokens = self.prefilled_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def best(self, tokens: np.ndarray) -> tuple[Snapshot | None, int]:
        """The snapshot sharing the longest prefix with `tokens`, and that length (marked recently used)."""
        found, length = None, 0
        for snapshot in self._entries.values():
            shared = shared_prefix(snapshot.tokens, tokens)
            if shared > length:
                found, length = snapshot, shared
        if found is not None:
            self._entries.move_to_end(id(found))
        return found, length

    def covers(self, tokens: np.ndarray) -> bool:
        """Whether some snapshot holds all of `tokens` (saving them again would add nothing)."""
        return any(shared_prefix(s.tokens, tokens) == len(tokens) for s in self._entries.values())

    def put(self, snapshot: Snapshot) -> None:
        """Keep `snapshot`, dropping those it extends, then the least recently used beyond the bound."""
        if snapshot.nbytes > self.max_bytes:
            return
        for key, old in list(self._entries.items()):
            if shared_prefix(old.tokens, snapshot.tokens) == len(old.tokens):  # the new one holds it all
                self._drop(key)
        self._entries[id(snapshot)] = snapshot
        self.bytes += snapshot.nbytes
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
            self.evictions += 1

    def discard(self, snapshot: Snapshot) -> None:
        if id(snapshot) in self._entries:
            self._drop(id(snapshot))

    def clear(self) -> None:
        for key in list(self._entries):
            self._drop(key)

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).nbytes

    def count(self, reused: int, prefilled: int, *, restored: bool) -> None:
        """Account one prompt: the tokens it reused and the tokens it evaluated."""
        self.hits += reused > 0
        self.misses += reused == 0
        self.restores += restored
        self.reused_tokens += reused
        self.prefilled_tokens += prefilled

    def reading(self, model: str) -> KVReading:
        size = CacheSize(self.bytes, self.max_bytes, len(self._entries), self.evictions)
        live = self.hits - self.restores
        return KVReading(model, live, self.restores, self.misses, self.reused_tokens, self.prefilled_tokens, size)


def save(llama: Any) -> Snapshot:
    """Snapshot the tokens `llama` holds (its first `n_tokens`) and their KV cells."""
    import llama_cpp

    ctx = llama._ctx.ctx
    size = int(llama_cpp.llama_state_seq_get_size(ctx, SEQ))
    data = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, data, size, SEQ))
    if written != size:
        raise RuntimeError(f"llama.cpp wrote {written} of {size} bytes of KV state")
    tokens = np.array(llama.input_ids[: llama.n_tokens], dtype=np.int32)
    return Snapshot(tokens, data)


def restore(llama: Any, snapshot: Snapshot) -> None:
    """Replace `llama`'s context with the snapshot's cells; its logits are stale until the next `eval`."""
    import llama_cpp

    llama._ctx.kv_cache_seq_rm(-1, 0, -1)
    llama.n_tokens = 0
    size = ctypes.sizeof(snapshot.data)
    if int(llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, snapshot.data, size, SEQ)) != size:
        raise RuntimeError("llama.cpp could not restore a KV state snapshot")
    count = len(snapshot.tokens)
    llama.input_ids[:count] = snapshot.tokens
    llama.n_tokens = count
    llama._requires_eval = True  # sampling needs logits of a live decode


def as_tokens(tokens: Sequence[int]) -> np.ndarray:
    return np.asarray(tokens, dtype=np.int32)
