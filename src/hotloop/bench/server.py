"""The benchmark's own server in this process: hotloop in a thread on 127.0.0.1 (a free port), a temporary data
directory, and the agent loop's settings (server_process.py `bench_settings`); a context manager. The overhead
scenario's server, and the agent loop's with --in-process-server (its client then shares the GIL with it)."""

from __future__ import annotations

import tempfile
from types import TracebackType

from hotloop.bench.server_process import bench_settings
from hotloop.config import Settings, Upstream
from hotloop.transports.server import ThreadedServer


class InProcessServer:
    def __init__(
        self,
        log_level: str = "warning",
        upstream: Upstream | None = None,
        context_window: int | None = None,
        mcp_allowed_urls: list[str] | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hotloop-bench-")
        values = bench_settings(upstream, context_window, mcp_allowed_urls or ())
        values.update(data_dir=self._tmp.name, host="127.0.0.1", port=0, log_level=log_level)
        self._server = ThreadedServer(Settings(**values))

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
