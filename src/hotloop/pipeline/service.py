"""The long-lived parts a turn uses: settings, models, store, secret, usage ledger, live sessions and background
responses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from urllib.parse import urlsplit

from hotloop.chat.incremental import Encoder, PromptRenderer, TokenCache
from hotloop.config import Settings
from hotloop.mcp import Clients
from hotloop.metering.ledger import Ledger
from hotloop.models import ModelRegistry
from hotloop.observability.history import FAMILIES as HISTORY_FAMILIES
from hotloop.observability.history import History
from hotloop.observability.metrics import CacheSize, Metrics
from hotloop.observability.tracing import Tracing
from hotloop.pipeline.containers.runtime import CodeRuntime
from hotloop.pipeline.containers.service import Containers
from hotloop.pipeline.filesearch.runtime import FileSearch, embeddings_of
from hotloop.pipeline.mcp.declare import allowed, same_server
from hotloop.pipeline.mcp.recent import RecentCalls
from hotloop.pipeline.resend import ResendCache
from hotloop.pipeline.skills.service import Skills
from hotloop.pipeline.state.chain_cache import ChainCache
from hotloop.pipeline.state.drain import Drain
from hotloop.pipeline.state.limits import ConnectionSlots, RateLimiter
from hotloop.pipeline.state.session import Lane, Session
from hotloop.pipeline.state.shared_limits import LimitTable, SharedConnectionSlots, SharedRateLimiter
from hotloop.pipeline.state.state_lru import StateLRU
from hotloop.safety import SafetyStage
from hotloop.sandbox import Sandbox
from hotloop.stores.base import Store

LEDGER_DRAIN_TIMEOUT_S = 30.0
# How stale another worker's scrape-time readings may be (observability/mirror.py): a second after a response
# finishes; an idle worker looks every ten seconds, so an idle server stays nearly silent.
METRICS_SYNC_S = 1.0
METRICS_IDLE_SYNC_S = 10.0
log = logging.getLogger("hotloop.store")
metrics_log = logging.getLogger("hotloop.metrics")


def _mcp_allowed(settings: Settings, url: str) -> bool:
    """A URL (or a redirect's) an MCP session may reach: the allowlist's, or a configured server's."""
    return allowed(url, settings.mcp_allowed_urls) or any(
        same_server(url, server.url) for server in settings.mcp_servers.values()
    )


class CacheCounter:
    __slots__ = ("hits", "misses")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0


class Service:
    def __init__(
        self,
        settings: Settings,
        models: ModelRegistry,
        store: Store,
        secret: bytes,
        ledger: Ledger | None = None,
        limits: LimitTable | None = None,
    ) -> None:
        """`limits`: the workers' shared limit table, under a supervisor (else each limit is this process's)."""
        self.settings = settings
        self.started_at = time.time()
        self.models = models
        self.store = store
        self.secret = secret
        # One usage record per response, written to the store in batches by a background task.
        self.ledger = ledger or Ledger(store.append_usage, settings.ledger_batch, settings.ledger_flush_ms)
        self.sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self.background: dict[str, asyncio.Task[None]] = {}
        # Long texts are tokenized here, off the event loop (the tokenizers release the GIL: chat/incremental.py).
        self.tokenize_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="hotloop-tokenize")
        self.renderer = PromptRenderer(
            TokenCache(settings.token_cache_bytes), encoder=Encoder(executor=self.tokenize_pool)
        )
        self.resent = ResendCache(settings.resend_cache_bytes)  # resent histories recognized (pipeline/resend.py)
        self.chains = ChainCache(settings.chain_cache_entries, settings.chain_cache_bytes)
        self.connection_cache = CacheCounter()  # previous_response_id found in the connection's own cache
        # Every WebSocket connection's lane entries together, LRU under one byte bound (docs/reliability.md).
        self.connection_states: StateLRU[tuple[int, Lane]] = StateLRU(settings.connection_cache_bytes)
        # Admission (docs/operations.md): per-key rate limits, WebSocket connection slots, the shutdown drain.
        self.limits = limits
        rates = (settings.rate_limit_rpm, settings.rate_limit_tpm)
        caps = (settings.max_connections, settings.max_connections_per_key)
        self.rate_limiter = RateLimiter(*rates) if limits is None else SharedRateLimiter(limits, *rates)
        self.connection_slots = ConnectionSlots(*caps) if limits is None else SharedConnectionSlots(limits, *caps)
        self.drain = Drain()
        # The MCP servers' sessions, reused by key and server (pipeline/mcp/, docs/mcp.md).
        self.mcp = Clients(
            allowed=partial(_mcp_allowed, settings),
            call_timeout_s=settings.mcp_call_timeout_s,
            list_timeout_s=settings.mcp_list_timeout_s,
            max_output_bytes=settings.mcp_max_output_bytes,
            idle_s=settings.mcp_session_idle_s,
            client=settings.mcp_client,
        )
        self.mcp_calls = RecentCalls()  # the console's view of the calls
        # Raises ValueError for a bad setting, so the server refuses to start (docs/safety.md).
        self.safety = SafetyStage.from_actions(
            {"secrets": settings.safety_secrets, "injection": settings.safety_injection}
        )
        self.metrics = Metrics()
        # Vector stores' ingestion and search (pipeline/filesearch/, docs/file-search.md).
        self.file_search = FileSearch(store, settings.file_search_workers, self.metrics, embeddings_of(settings))
        # Containers (the Containers API, and the code runtime's view of them): pipeline/containers/.
        self.containers = Containers(store, settings)
        self.skills = Skills(store, settings)  # the Skills API's skills, which containers mount: pipeline/skills/
        # The code runtime: containers' sandboxes on this worker (pipeline/containers/runtime.py).
        self.code = CodeRuntime(
            self.containers,
            self.skills,
            Sandbox(max_containers=settings.containers_live_max),
            settings.resolved_data_dir() / "containers",
        )
        # OpenTelemetry traces (docs/tracing.md): None while off, so a turn only checks for None.
        self.tracing = Tracing.configured(
            settings.otel_endpoint, settings.otel_protocol, settings.otel_traces, settings.otel_content
        )
        self._metrics_sync: asyncio.Task[None] | None = None
        # The console's last hour (observability/history.py), read from the server's metrics every step.
        self.history = History(max(0.05, settings.console_sample_s))
        self._history_task: asyncio.Task[None] | None = None
        self.metrics.watch(self._cache_readings, self._gauge_readings, self._cache_sizes)
        self.metrics.watch_replicas(models.replica_readings)
        self.metrics.watch_kv(models.kv_readings)

    def _cache_readings(self) -> dict[str, tuple[int, int]]:
        stats = self.renderer.stats
        return {
            "connection": (self.connection_cache.hits, self.connection_cache.misses),
            "chain": (self.chains.hits, self.chains.misses),
            "render_state": (stats.chain_hits, stats.full_renders),
            "tokens": (stats.cache_hits, stats.cache_misses),
            "safety": (self.safety.cache_hits, self.safety.cache_misses),
            "resend": (self.resent.hits, self.resent.misses),
        }

    def _cache_sizes(self) -> dict[str, CacheSize]:
        tokens, states, resent = self.renderer.cache, self.connection_states, self.resent
        return {
            "resend": CacheSize(resent.bytes, resent.max_bytes, len(resent), resent.evictions),
            "chain": CacheSize(self.chains.bytes, self.chains.max_bytes, len(self.chains), self.chains.evictions),
            "connection": CacheSize(states.bytes, states.max_bytes, len(states), states.evictions),
            "tokens": CacheSize(tokens.bytes, tokens.max_bytes, len(tokens), tokens.evictions),
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
        session = Session(owner, caching=caching, budget=self.connection_states)
        if caching:
            self.sessions.add(session)
        return session

    def end_session(self, session: Session) -> None:
        """A WebSocket's session ends with its connection: its lanes leave the budget and it leaves the live sessions
        now, not whenever the collector gets to the connection's objects."""
        session.clear()
        self.sessions.discard(session)

    def forget(self, response_id: str) -> None:
        """Drop a deleted response from every connection's cache in this process."""
        self.chains.forget(response_id)
        for session in list(self.sessions):
            session.forget(response_id)

    def forget_reloadable(self) -> None:
        """The deletion feed is back after a gap, so deletions may have been missed: drop every cached chain the
        store can reload (the chain cache, connections' fully stored lanes), so the store decides whether it still
        exists. Connection lanes of chains not fully stored are kept: the store could not give them back."""
        chains = self.chains.clear()
        lanes = sum(session.forget_stored() for session in list(self.sessions))
        log.warning(
            "deletion feed was down, deletions may have been missed: dropped %d cached chains and %d connection"
            " cache entries",
            chains,
            lanes,
        )

    def no_code(self) -> str | None:
        """Why this worker runs no code_interpreter code (the tool is then refused by name), or None."""
        if not self.settings.code_interpreter:
            return "this server runs no code (its code_interpreter setting is off)"
        if urlsplit(self.settings.store_url).scheme in ("redis", "rediss"):
            return "this server's store (Redis) keeps no containers"
        return self.code.refusal()

    def start(self) -> None:
        """Start the background parts (the ledger's writer, the store's sweeper and deletion feed); called once the
        event loop runs."""
        self.ledger.start()
        # A response deleted or expired on any replica leaves this one's caches; after a gap in the feed, every
        # cached chain that might have been deleted does.
        self.store.start(self.forget, self.forget_reloadable)
        self.file_search.start()
        self.containers.start()
        loop = asyncio.get_running_loop()
        if self.settings.code_interpreter:  # the sandbox's probe (a bwrap run), off the event loop, before a request
            loop.run_in_executor(None, self.code.refusal)
        if self.metrics.mirror is not None:
            self._metrics_sync = loop.create_task(self._sync_metrics(), name="hotloop-metrics")
        if self.settings.console:
            self._history_task = loop.create_task(self._sample_history(), name="hotloop-history")

    async def _sample_history(self) -> None:
        while True:
            try:
                self.history.sample(self.metrics.samples(HISTORY_FAMILIES), time.time())
            except Exception:  # a reading that fails once must not stop the next ones
                metrics_log.exception("could not sample the console's time series")
            await asyncio.sleep(self.history.step_s)

    async def _sync_metrics(self) -> None:
        """Keep this worker's scrape-time readings fresh for the scrapes other workers answer: a second after
        anything finishes; while nothing does, every ten seconds (each wake-up costs an idle server CPU)."""
        metrics = self.metrics
        while True:
            before = metrics.finished
            await asyncio.sleep(METRICS_SYNC_S)
            try:
                metrics.sync()
            except Exception:  # a reading that fails once must not stop the next ones
                metrics_log.exception("could not sync the metrics readings")
            if metrics.finished == before:  # an idle second: sleep until a response finishes
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(metrics.finishing().wait(), METRICS_IDLE_SYNC_S)

    async def close(self) -> None:
        for periodic in (self._metrics_sync, self._history_task):
            if periodic is not None:
                periodic.cancel()
        for task in list(self.background.values()):
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background.values(), return_exceptions=True)
        await self.file_search.stop()
        await self.containers.stop()
        await self.code.stop()
        await self.models.close()
        await self.mcp.close()
        # Every response has ended (background ones just recorded their cancellation): write the ledger out
        # before the store it writes to closes.
        await self.ledger.drain(timeout=LEDGER_DRAIN_TIMEOUT_S)
        await self.store.close()
        self.tokenize_pool.shutdown(wait=False, cancel_futures=True)
        if self.tracing is not None:  # the spans still buffered go out (the exporter's own timeout bounds it)
            await asyncio.to_thread(self.tracing.shutdown)
        if self.metrics.mirror is not None:
            self.metrics.sync()  # the last readings: a stopped worker's counters stay in the totals
        if self.limits is not None:
            self.limits.close()
