"""Recent stored chains kept in memory, so an HTTP continuation (`previous_response_id`) of a `store: true`
response on this replica skips the store read and renders only its new input, as a WebSocket continuation does.

Only chains stored from their first response enter: a `store: false` response, or a stored child of one, carries
context that never leaves its connection (protocol.md §3.8.5). An entry answers only its owner. LRU, bounded in
entries (`chain_cache_entries`) and in bytes (`chain_cache_bytes`); an evicted chain is loaded from the store.
"""

from __future__ import annotations

from hotloop.pipeline.state.context import ChainState
from hotloop.pipeline.state.state_lru import StateLRU


class ChainCache:
    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self._states: StateLRU[str] = StateLRU(max_bytes, max_entries)
        self.hits = 0
        self.misses = 0

    def get(self, response_id: str, owner: str) -> ChainState | None:
        state = self._states.peek(response_id)
        if state is None or state.owner != owner:
            self.misses += 1
            return None
        self._states.touch(response_id)
        self.hits += 1
        return state

    def put(self, state: ChainState) -> None:
        if self.max_entries > 0 and state.stored_chain:
            self._states.put(state.response.id, state)

    def forget(self, response_id: str) -> None:
        self._states.pop(response_id)

    def clear(self) -> int:
        """Drop every entry (the deletion feed had a gap: any of them may have been deleted); how many."""
        dropped = len(self._states)
        fresh: StateLRU[str] = StateLRU(self._states.max_bytes, self._states.max_entries)
        fresh.evictions = self._states.evictions  # a Prometheus counter: it never goes back
        self._states = fresh
        return dropped

    @property
    def bytes(self) -> int:
        return self._states.bytes

    @property
    def max_bytes(self) -> int:
        return self._states.max_bytes

    @property
    def evictions(self) -> int:
        return self._states.evictions

    def __len__(self) -> int:
        return len(self._states)
