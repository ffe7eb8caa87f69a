"""The agent loop's own hotloop (bench/target.py): `hotloop serve` in a child process by default, its settings
passed as HOTLOOP_* variables (server_process.py), and only those: the caller's own HOTLOOP_* stay out of it."""

from __future__ import annotations

import httpx
import pytest

from hotloop.bench.server_process import bench_settings, settings_env
from hotloop.bench.target import own_hotloop
from hotloop.config import Upstream, load_settings


@pytest.mark.fast
def test_the_bench_settings_reach_a_serve_process_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream(backend="tokens", url="http://127.0.0.1:9/v1", dialect="sglang", retries=0)
    values = bench_settings(upstream, context_window=8192, mcp_allowed_urls=["http://127.0.0.1:7/mcp"])
    for name, value in settings_env(values).items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.models == ["upstream"] and settings.default_model == "upstream"
    assert settings.upstreams == {"upstream": upstream}
    assert settings.sim_context_window == 8192 and settings.mcp_allowed_urls == ["http://127.0.0.1:7/mcp"]
    assert settings.ws_ping_interval_s == 0


def test_the_child_hotloop_has_the_bench_settings_and_not_the_shells(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTLOOP_API_KEYS", "a-key-of-the-shell")
    with own_hotloop(context_window=8192) as url:
        # no key asked for; the simulator's window is the one given (the Codex catalog shows it)
        reply = httpx.get(f"{url}/models", params={"client_version": "0.50.0"}, timeout=30)
        assert reply.status_code == 200
        [model] = reply.json()["models"]
        assert (model["slug"], model["context_window"]) == ("hotloop-sim", 8192)
