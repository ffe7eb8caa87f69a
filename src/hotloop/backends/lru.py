"""A byte-bounded LRU of values that know their size: the encoded prompts and conversations of recent chains
(prompt_json.py, chat_json.py)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteLRU(Generic[V]):
    """Values by key, least recently used evicted first while over `max_bytes`; a value bigger than the bound is
    not kept, and `bytes` never exceeds `max_bytes` after a call returns."""

    def __init__(self, max_bytes: int, size_of: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evictions = 0  # values dropped for space
        self._size_of = size_of
        self._entries: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str | None) -> V | None:
        return self._entries.get(key) if key else None

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: str, value: V) -> None:
        size = self._size_of(value)
        if size > self.max_bytes:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= self._size_of(old)
        self._entries[key] = value
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.bytes -= self._size_of(dropped)
            self.evictions += 1
