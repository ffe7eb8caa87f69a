"""The benchmark's own server: hotloop in a thread on 127.0.0.1 (a free port), a temporary data directory, and
hotloop-sim only, or one upstream model (`hotloop bench agent-loop --upstream`), and the MCP servers a request
may name (`--mcp`: the bench's own); a context manager."""

from __future__ import annotations

import tempfile
from types import TracebackType

import msgspec

from hotloop.config import Settings, Upstream
from hotloop.transports.server import ThreadedServer

UPSTREAM_MODEL = "upstream"


class InProcessServer:
    def __init__(
        self,
        log_level: str = "warning",
        upstream: Upstream | None = None,
        context_window: int | None = None,
        mcp_allowed_urls: list[str] | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hotloop-bench-")
        model = "hotloop-sim" if upstream is None else UPSTREAM_MODEL
        settings = Settings(
            data_dir=self._tmp.name,
            models=[model],
            default_model=model,
            upstreams={} if upstream is None else {UPSTREAM_MODEL: upstream},
            host="127.0.0.1",
            port=0,
            log_level=log_level,
            ws_ping_interval_s=0,  # no pings in the middle of a measurement
            mcp_allowed_urls=list(mcp_allowed_urls or ()),
        )
        if context_window:
            settings = msgspec.structs.replace(settings, sim_context_window=context_window)
        self._server = ThreadedServer(settings)

    @property
    def base_url(self) -> str:
        return self._server.base_url

    def start(self) -> InProcessServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self._tmp.cleanup()

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
