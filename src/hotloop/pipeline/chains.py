"""Recent stored chains kept in memory, so an HTTP continuation (`previous_response_id`) of a `store: true`
response on this replica skips the store read and renders only its new input, as a WebSocket continuation does.

Only chains stored from their first response enter: a `store: false` response, or a stored child of one, carries
context that never leaves its connection (protocol.md §3.8.5). An entry answers only its owner; LRU with a fixed
number of entries.
"""

from __future__ import annotations

from collections import OrderedDict

from hotloop.pipeline.context import ChainState


class ChainCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, ChainState] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, response_id: str, owner: str) -> ChainState | None:
        state = self._entries.get(response_id)
        if state is None or state.owner != owner:
            self.misses += 1
            return None
        self._entries.move_to_end(response_id)
        self.hits += 1
        return state

    def put(self, state: ChainState) -> None:
        if self.max_entries <= 0 or not state.stored_chain:
            return
        self._entries[state.response.id] = state
        self._entries.move_to_end(state.response.id)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, response_id: str) -> None:
        self._entries.pop(response_id, None)

    def __len__(self) -> int:
        return len(self._entries)
