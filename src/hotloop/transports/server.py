"""Running the app: uvicorn configured from the settings (uvloop, httptools, websockets-sansio), in the foreground
(`hotloop serve`) or on a thread (the benchmark's own server, the tests' servers)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from hotloop.config import Settings
from hotloop.transports.app import create_app

# Seconds in-flight requests get to finish after SIGTERM before uvicorn cancels them.
GRACEFUL_SHUTDOWN_S = 10


def server_config(settings: Settings, **overrides: Any) -> uvicorn.Config:
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": "httptools",
        "ws": "websockets-sansio",
        "ws_max_size": settings.max_body_bytes,
        "ws_per_message_deflate": settings.ws_deflate,
        "ws_ping_interval": settings.ws_ping_interval_s or None,
        "ws_ping_timeout": settings.ws_ping_interval_s or None,
        "log_level": settings.log_level,
        "lifespan": "on",
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
    }
    return uvicorn.Config(create_app(settings), **{**options, **overrides})


class ThreadedServer:
    """The server on a daemon thread; `start()` returns once it listens (port 0 picks a free port)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server = uvicorn.Server(server_config(settings))
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
