"""A byte-bounded LRU of chain states: the HTTP chain cache and all WebSocket connection caches (docs/reliability.md).

A state's memory is mostly its context items and token ids, both append-only lists shared along its chain
(`Context`, `Rendered`), plus its own response and request. A shared list is charged once, at its whole size
(every view keeps it alive), so a cached agent loop of a hundred turns costs one context, not a hundred. Sizes
are estimates that grow with each turn's new items only (`Context.storage_bytes`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from hotloop.pipeline.state.context import ChainState

# A state's response, request, tools and safety states, beyond the items its turn added.
STATE_OVERHEAD = 2048
TOKEN_BYTES = 4  # array("i")

K = TypeVar("K", bound=Hashable)
Evicted = Callable[[], Callable[[Hashable], None] | None]  # a weak reference to whom to tell


class _Shared:
    """A list shared by cached states: how many hold it and what it was charged."""

    __slots__ = ("bytes", "refs")

    def __init__(self) -> None:
        self.refs = 0
        self.bytes = 0


class _Entry:
    __slots__ = ("on_evict", "own", "parts", "state")

    def __init__(self, state: ChainState, parts: list[tuple[int, int]], own: int, on_evict: Evicted | None) -> None:
        self.state = state
        self.parts = parts  # (id of a shared list, its bytes when this entry was put)
        self.own = own
        self.on_evict = on_evict


def charges(state: ChainState) -> tuple[list[tuple[int, int]], int]:
    """(shared lists by identity with their bytes, the state's own bytes)."""
    context = state.context
    parts = [(id(context.storage), context.storage_bytes)]
    if state.rendered is not None:
        tokens = state.rendered.tokens
        parts.append((id(tokens), len(tokens) * TOKEN_BYTES))
    return parts, STATE_OVERHEAD + context.added_bytes


class StateLRU(Generic[K]):
    """Chain states by key, least recently used evicted first while over `max_bytes` (or `max_entries`, if set).

    A state bigger than the whole bound is not kept. `bytes` never exceeds `max_bytes` after a call returns.
    """

    def __init__(self, max_bytes: int, max_entries: int = 0) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[K, _Entry] = OrderedDict()
        self._shared: dict[int, _Shared] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def peek(self, key: K) -> ChainState | None:
        entry = self._entries.get(key)
        return entry.state if entry is not None else None

    def touch(self, key: K) -> None:
        if key in self._entries:
            self._entries.move_to_end(key)

    def put(self, key: K, state: ChainState, on_evict: Evicted | None = None) -> bool:
        """Keep `state` under `key` (replacing what was there) as the most recent; False if it was not kept.

        `on_evict` is a weak reference (`weakref.WeakMethod`) to a callable told the key when this entry is evicted
        for space; an explicit `pop` or a replacement does not call it.
        """
        self.pop(key)
        if self.max_bytes <= 0:
            return False  # a cache turned off: nothing to evict, nothing counted
        parts, own = charges(state)
        if own + sum(size for _, size in parts) > self.max_bytes:
            self.evictions += 1
            return False
        self._entries[key] = _Entry(state, parts, own, on_evict)
        self.bytes += own
        for storage, size in parts:
            shared = self._shared.setdefault(storage, _Shared())
            shared.refs += 1
            if size > shared.bytes:  # the list grew since it was charged (or is new)
                self.bytes += size - shared.bytes
                shared.bytes = size
        return self._shrink(key)

    def pop(self, key: K) -> ChainState | None:
        """Remove an entry (a replaced or deleted response, a closed connection): not counted as an eviction."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self.bytes -= entry.own
        for storage, _ in entry.parts:
            shared = self._shared[storage]
            shared.refs -= 1
            if shared.refs == 0:
                self.bytes -= shared.bytes
                del self._shared[storage]
        return entry.state

    def _shrink(self, newest: K) -> bool:
        """Evict least recently used entries until within bounds; False if `newest` itself had to go."""
        kept = True
        while self._entries and (self.bytes > self.max_bytes or 0 < self.max_entries < len(self._entries)):
            key, entry = next(iter(self._entries.items()))
            self.pop(key)
            self.evictions += 1
            kept = kept and key != newest
            target = entry.on_evict() if entry.on_evict is not None else None
            if target is not None:
                target(key)
        return kept
