"""Where the agent loop's client finds hotloop: a fresh hotloop of its own, in a child process (as Codex or the
Agents SDK reach a server: their GIL is not the server's) or with `--in-process-server` in a thread of this process
(the client then shares the GIL with it); and, for a far client (`--client-rtt-ms`), the latency proxy in front."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from hotloop.config import Upstream


@contextlib.contextmanager
def own_hotloop(
    in_process: bool = False,
    upstream: Upstream | None = None,
    context_window: int | None = None,
    mcp_allowed_urls: Sequence[str] = (),
) -> Iterator[str]:
    """A fresh hotloop for one invocation (server_process.py `bench_settings`); yields its base URL. The child is
    `hotloop serve` with one worker: one process, as the in-process server is one thread."""
    if in_process:
        from hotloop.bench.server import InProcessServer

        with InProcessServer(
            upstream=upstream, context_window=context_window, mcp_allowed_urls=list(mcp_allowed_urls)
        ) as server:
            yield server.base_url
        return
    from hotloop.bench.server_process import ServerProcess, bench_settings

    settings = bench_settings(upstream, context_window, mcp_allowed_urls)
    with ServerProcess(prefix="hotloop-bench-", workers=1, **settings) as server:
        yield server.base_url


@contextlib.contextmanager
def far_client(base_url: str, rtt_ms: float) -> Iterator[str]:
    """The URL a client `rtt_ms` away from `base_url` talks to: `base_url` itself at 0 (direct, so that R = 0 is
    the figure without --client-rtt-ms), else the latency proxy (its own process) holding each chunk R/2 each way."""
    if rtt_ms <= 0:
        yield base_url
        return
    from hotloop.bench.clients import BenchError
    from hotloop.bench.latency_proxy import LatencyProxyProcess

    parts = urlsplit(base_url)
    if parts.scheme != "http" or parts.hostname is None:
        raise BenchError(f"--client-rtt-ms proxies plain HTTP: not {base_url}")
    port = parts.port or 80
    with LatencyProxyProcess(port, rtt_ms / 2, target_host=parts.hostname) as proxy:
        yield urlunsplit(("http", f"127.0.0.1:{proxy.port}", parts.path, parts.query, ""))


def root_url(base_url: str, path: str) -> str:
    """`path` at the root of `base_url`'s server (/healthz beside /v1)."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
