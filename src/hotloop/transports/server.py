"""Running the app: uvicorn configured from the settings (uvloop, httptools, websockets-sansio), in the foreground
(`hotloop serve`) or on a thread (the benchmark's own server, the tests' servers), with a graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any

import uvicorn

from hotloop.config import Settings
from hotloop.pipeline.service import Service
from hotloop.transports.app import create_app
from hotloop.transports.stack import uvicorn_options

log = logging.getLogger("hotloop.shutdown")
CUT_WAIT_S = 5.0  # for cut responses to store themselves and send their terminal event
IDLE_CLOSE_WAIT_S = 1.0  # for idle WebSockets to close themselves once every response has ended
CLOSE_WAIT_S = 5.0  # for WebSocket clients to answer the server's close frame
POLL_S = 0.02
TICK_S = 1.0  # the main loop's tick while connections are open: the Date header's refresh
# The youngest generation's threshold in a serving process (CPython's default is 700 allocations): with the start-up
# heap frozen, a collection of it is cheap, and a turn allocates a few thousand objects that die young.
GC_YOUNG_THRESHOLD = 10_000


def server_config(settings: Settings, **overrides: Any) -> uvicorn.Config:
    return uvicorn.Config(create_app(settings), **{**uvicorn_options(settings), **overrides})


class Server(uvicorn.Server):
    """uvicorn with hotloop's shutdown (docs/operations.md): on SIGTERM (or `should_exit`) stop listening, refuse
    new creates (503), let in-flight responses finish within `shutdown_grace_s`, fail the rest (`server_error`),
    close every WebSocket with 1001, and only then let uvicorn close the HTTP connections and run the lifespan
    shutdown, which drains the usage ledger and closes the store. A SIGTERM shutdown exits 0.

    Its main loop ticks once a second while a connection is open, not uvicorn's ten times, and not at all while
    none is: those wake-ups were most of an idle server's CPU. The first connection to open wakes it and refreshes
    the Date header first, so the Date a response carries is as fresh as with uvicorn's ticks. Setting
    `should_exit` (a signal's handler, or a thread stopping the server) wakes it at once, so a shutdown starts as
    soon as before."""

    _should_exit = False
    _wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def __init__(self, config: uvicorn.Config, *, own_process: bool = False) -> None:
        super().__init__(config)
        self.server_state.connections = _Connections(self._first_connection)
        self._dated_at = 0.0
        self.own_process = own_process  # `hotloop serve`'s process (or a worker's): its heap is ours to settle

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # the lifespan has built the service: models, tokenizers, caches
        if self.own_process and self.started:
            settle_heap()

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and self._wake is not None:
            loop, event = self._wake
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing left to wake
                loop.call_soon_threadsafe(event.set)

    def _first_connection(self) -> None:
        """On the event loop, as the first connection opens: a Date a second stale or more is refreshed before its
        first request is read, and the main loop starts ticking again."""
        if time.time() - self._dated_at >= TICK_S:
            self._refresh_headers()
        if self._wake is not None:
            self._wake[1].set()

    def _refresh_headers(self) -> None:
        """uvicorn's `on_tick` header refresh (the Date header, then the configured headers)."""
        self._dated_at = time.time()
        date = [(b"date", formatdate(self._dated_at, usegmt=True).encode())] if self.config.date_header else []
        self.server_state.default_headers = date + self.config.encoded_headers

    async def main_loop(self) -> None:
        """uvicorn's `main_loop` at one tick a second while connections are open (`on_tick` refreshes the Date
        header on every tenth count), and none while they are not."""
        event = asyncio.Event()
        self._wake = (asyncio.get_running_loop(), event)
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), TICK_S if self.server_state.connections else None)
            if not self._should_exit:
                event.clear()
            self._dated_at = time.time()  # on_tick refreshes the Date header now
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # stop accepting; uvicorn's own shutdown below closes them again (a no-op)
        service = _service_of(self.config.app)
        if service is not None and not self.force_exit:
            await self.drain(service)
        await super().shutdown(sockets)

    async def drain(self, service: Service) -> None:
        drain = service.drain
        drain.begin()  # creates now get 503; idle WebSockets close 1001 at once, busy ones when their work ends
        grace = service.settings.shutdown_grace_s
        if not await self._wait(lambda: not drain.turns, grace):
            cut = drain.cut()
            log.warning("shutdown: %d response(s) still running after %gs: failed with server_error", cut, grace)
            await self._wait(lambda: not drain.turns, CUT_WAIT_S)
        # WebSockets close themselves once idle (1001); any still open a moment later are closed here, before
        # uvicorn's own shutdown would close them with 1012.
        slots = service.connection_slots
        if not await self._wait(lambda: slots.open == 0, IDLE_CLOSE_WAIT_S):
            for connection in list(drain.connections):
                await connection.going_away()
            await self._wait(lambda: slots.open == 0, CLOSE_WAIT_S)

    async def _wait(self, done: Any, timeout: float) -> bool:
        """Poll `done()` until it holds, `timeout` passes or a second Ctrl-C forces the exit."""
        deadline = time.monotonic() + max(0.0, timeout)
        while not done() and not self.force_exit and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        return bool(done())

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            # uvicorn re-raises the signal it handled once it has shut down; after a completed drain a SIGTERM
            # is a clean exit (status 0), not a death by signal.
            captured: list[int] = getattr(self, "_captured_signals", [])
            captured[:] = [sig for sig in captured if sig != signal.SIGTERM]


def settle_heap() -> None:
    """Once a serving process has started: what start-up left alive (models, tokenizers, compiled patterns, the
    modules) goes to the collector's permanent generation, and the youngest generation is collected less often.

    Otherwise CPython's cycle collector walks that whole heap on every full collection: one took 96-111 ms in the
    middle of a 50-session load, every session's next event waiting behind it (the load's p99 overhead was that
    pause), and collections were ~9% of the server's CPU (docs/benchmarks-history.md). Objects made later are
    collected as before; only cycles among the frozen ones are never freed, and start-up makes none that matter."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


class _Connections(set[Any]):
    """uvicorn's set of open connections (every protocol adds itself as its connection opens), telling the server
    when the first one opens."""

    def __init__(self, first: Callable[[], None]) -> None:
        super().__init__()
        self._first = first

    def add(self, connection: Any) -> None:
        if not self:
            self._first()
        super().add(connection)


def _service_of(app: Any) -> Service | None:
    state = getattr(app, "state", None)
    service = getattr(state, "service", None)
    return service if isinstance(service, Service) else None


class ThreadedServer:
    """The server on a daemon thread; `start()` returns once it listens (port 0 picks a free port)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server = Server(server_config(settings))
        self.thread = threading.Thread(target=self.server.run, name="hotloop-server", daemon=True)
        self.port = 0

    def start(self, timeout: float = 60) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/v1"

    def stop(self, timeout: float = 30) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
