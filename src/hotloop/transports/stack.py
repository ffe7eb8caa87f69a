"""The serving stack's options: uvicorn with uvloop, httptools and websockets-sansio, configured from the settings.

Its own module, importing nothing of the pipeline, so that `hotloop bench load --floor` (bench/floor.py) runs the
very same stack as `hotloop serve` (transports/server.py) without loading hotloop's app.
"""

from __future__ import annotations

from typing import Any

from hotloop.config import Settings
from hotloop.observability.logs import logging_config

# After the drain (transports/server.py) every response has ended and every WebSocket is closed; uvicorn then gets
# this long to close the remaining HTTP connections before it cancels their tasks.
GRACEFUL_SHUTDOWN_S = 5


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    return {
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
        "log_config": logging_config(settings),  # JSON lines with request ids (docs/logging.md)
    }
