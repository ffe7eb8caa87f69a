"""The benchmark's own server: uvicorn (uvloop, httptools, websockets-sansio) in a thread, hotloop-sim only."""

from __future__ import annotations

import tempfile
import threading
import time
from types import TracebackType

from hotloop.config import Settings


class InProcessServer:
    """A hotloop server on 127.0.0.1 (a free port) with a temporary data directory; a context manager."""

    def __init__(self, log_level: str = "warning") -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hotloop-bench-")
        self.settings = Settings(
            data_dir=self._tmp.name,
            models=["hotloop-sim"],
            default_model="hotloop-sim",
            host="127.0.0.1",
            port=0,
            log_level=log_level,
        )
        self.base_url = ""
        self._server: object | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> InProcessServer:
        import uvicorn

        from hotloop.transports.app import create_app

        settings = self.settings
        config = uvicorn.Config(
            create_app(settings),
            host="127.0.0.1",
            port=0,
            loop="uvloop",
            http="httptools",
            ws="websockets-sansio",
            ws_max_size=settings.max_body_bytes,
            ws_per_message_deflate=False,
            ws_ping_interval=None,
            ws_ping_timeout=None,
            log_level=settings.log_level,
            lifespan="on",
        )
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=server.run, name="hotloop-bench-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    def stop(self) -> None:
        import uvicorn

        if isinstance(self._server, uvicorn.Server):
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._tmp.cleanup()

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
