"""Who is asking and what their connection remembers: the connection-local cache of protocol.md §3.8."""

from __future__ import annotations

import hashlib

from hotloop.pipeline.context import ChainState

Lane = str | None  # None is the default lane


def owner_of(api_key: str | None, keys_configured: bool) -> str:
    """The store's owner tag: a hash of the key (never the key), or "" for a server without keys."""
    if not keys_configured or api_key is None:
        return ""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


class Session:
    """One client context: an HTTP request (no cache) or a WebSocket connection (a cache entry per lane)."""

    def __init__(self, owner: str, *, caching: bool) -> None:
        self.owner = owner
        self.caching = caching
        self._lanes: dict[Lane, ChainState] = {}

    def cached(self, response_id: str) -> ChainState | None:
        """A lane's latest response by id, from any lane (a fork, §3.5)."""
        for state in self._lanes.values():
            if state.response.id == response_id:
                return state
        return None

    def latest(self, lane: Lane) -> ChainState | None:
        return self._lanes.get(lane)

    def remember(self, lane: Lane, state: ChainState) -> None:
        """A new response on a lane replaces that lane's entry (§3.8.4)."""
        if self.caching:
            self._lanes[lane] = state

    def evict(self, lane: Lane, response_id: str) -> None:
        """A failed continuation evicts its parent from the requesting lane only (§3.8.3)."""
        state = self._lanes.get(lane)
        if state is not None and state.response.id == response_id:
            del self._lanes[lane]

    def forget(self, response_id: str) -> None:
        """A deleted response is no longer continuable anywhere (§1.8)."""
        for lane, state in list(self._lanes.items()):
            if state.response.id == response_id:
                del self._lanes[lane]

    def clear(self) -> None:
        self._lanes.clear()

    def contexts(self) -> list[ChainState]:
        return list(self._lanes.values())
