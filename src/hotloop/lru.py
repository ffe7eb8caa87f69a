"""A byte-bounded LRU: values by key, the least recently used evicted first while over a byte bound (the token,
safety-scan, resend and encoded-prompt caches). No I/O, no locking: callers use it from the event loop only."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """Values by key within `max_bytes`, as `size_of` counts them (called when a value is kept and when it is
    dropped, so it must not change meanwhile). A value bigger than the whole bound is not kept; `bytes` never exceeds
    `max_bytes` after a call returns; `evictions` counts the values dropped for space (a metric)."""

    def __init__(self, max_bytes: int, size_of: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evictions = 0
        self._size_of = size_of
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value under `key`, which becomes the most recently used; None when there is none."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The value under `key` without touching its recency."""
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        """Keep `value` under `key` as the most recently used, replacing what the key held."""
        if self._size_of(value) > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= self._size_of(old)
        self.add(key, value)

    def add(self, key: K, value: V) -> None:
        """`put` for a content-addressed key, whose value never changes: a key already held is left as it is."""
        if key in self._entries:
            return
        size = self._size_of(value)
        if size > self.max_bytes:
            return
        self._entries[key] = value
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.bytes -= self._size_of(dropped)
            self.evictions += 1

    def values(self) -> Iterator[V]:
        """The values, least recently used first."""
        return iter(self._entries.values())


class Figures:
    """What the metrics read of a cache kept in a `ByteLRU` (its `_lru`): its size, its bound, its evictions, its
    entries."""

    _lru: ByteLRU[Any, Any]

    @property
    def max_bytes(self) -> int:
        return self._lru.max_bytes

    @property
    def evictions(self) -> int:
        return self._lru.evictions

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def bytes(self) -> int:
        """The estimated bytes held (last in the class: the name shadows the `bytes` type)."""
        return self._lru.bytes
