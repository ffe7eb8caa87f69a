"""The long-lived parts a turn uses: settings, models, store, secret, usage ledger, live sessions and background
responses."""

from __future__ import annotations

import asyncio
import weakref

from hotloop.config import Settings
from hotloop.metering.ledger import Ledger
from hotloop.models import ModelRegistry
from hotloop.observability.metrics import Metrics
from hotloop.pipeline.chains import ChainCache
from hotloop.pipeline.session import Session
from hotloop.pipeline.tokens import PromptRenderer, TokenCache
from hotloop.safety import SafetyStage
from hotloop.stores.base import Store

LEDGER_DRAIN_TIMEOUT_S = 30.0


class CacheCounter:
    __slots__ = ("hits", "misses")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0


class Service:
    def __init__(
        self, settings: Settings, models: ModelRegistry, store: Store, secret: bytes, ledger: Ledger | None = None
    ) -> None:
        self.settings = settings
        self.models = models
        self.store = store
        self.secret = secret
        # One usage record per response, written to the store in batches by a background task.
        self.ledger = ledger or Ledger(store.append_usage, settings.ledger_batch, settings.ledger_flush_ms)
        self.sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self.background: dict[str, asyncio.Task[None]] = {}
        self.renderer = PromptRenderer(TokenCache(settings.token_cache_bytes))
        self.chains = ChainCache(settings.chain_cache_entries)
        self.connection_cache = CacheCounter()  # previous_response_id found in the connection's own cache
        # Raises ValueError for a bad setting, so the server refuses to start (docs/safety.md).
        self.safety = SafetyStage.from_actions(
            {"secrets": settings.safety_secrets, "injection": settings.safety_injection}
        )
        self.metrics = Metrics()
        self.metrics.watch(self._cache_readings, self._gauge_readings)

    def _cache_readings(self) -> dict[str, tuple[int, int]]:
        stats = self.renderer.stats
        return {
            "connection": (self.connection_cache.hits, self.connection_cache.misses),
            "chain": (self.chains.hits, self.chains.misses),
            "render_state": (stats.chain_hits, stats.full_renders),
            "tokens": (stats.cache_hits, stats.cache_misses),
            "safety": (self.safety.cache_hits, self.safety.cache_misses),
        }

    def _gauge_readings(self) -> dict[str, float]:
        return {
            "ledger_backlog": self.ledger.backlog,
            "token_cache_bytes": self.renderer.cache.bytes,
            "chain_cache_entries": len(self.chains),
            "render_fallbacks": self.renderer.stats.fallbacks,
            "safety_cache_bytes": self.safety.cache_bytes,
            "safety_bytes_scanned": self.safety.bytes_scanned,
            "websocket_sessions": len(self.sessions),
        }

    def session(self, owner: str, *, caching: bool) -> Session:
        session = Session(owner, caching=caching)
        if caching:
            self.sessions.add(session)
        return session

    def forget(self, response_id: str) -> None:
        """Drop a deleted response from every connection's cache in this process."""
        self.chains.forget(response_id)
        for session in list(self.sessions):
            session.forget(response_id)

    def start(self) -> None:
        """Start the background parts (the ledger's writer); called once the event loop runs."""
        self.ledger.start()

    async def close(self) -> None:
        for task in list(self.background.values()):
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background.values(), return_exceptions=True)
        await self.models.close()
        # Every response has ended (background ones just recorded their cancellation): write the ledger out
        # before the store it writes to closes.
        await self.ledger.drain(timeout=LEDGER_DRAIN_TIMEOUT_S)
        await self.store.close()
