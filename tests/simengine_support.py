"""A real `hotloop sim-engine` process on a free port, with its test facilities (/stats, /sim/script), and what
the upstream backends' tests (test_openai_chat.py, test_tokens_backend.py) share."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

from conftest import RunningServer
from http_support import check_sequence
from process_support import free_port, wait_healthy

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
READ_TIMEOUT_S = 1.0  # hotloop's read timeout on the engine: what a stalled upstream costs


class SimEngineProcess:
    def __init__(self, **flags: Any) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "hotloop", "sim-engine", "--port", str(self.port)]
        for name, value in flags.items():
            command += ["--" + name.replace("_", "-"), str(value)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout: float = 60) -> SimEngineProcess:
        output = self.process.stdout.read if self.process.stdout else str
        wait_healthy("sim-engine", f"http://127.0.0.1:{self.port}/health", self.process, output, timeout)
        return self

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.http.get("/stats").json()
        return stats

    def reset(self) -> None:
        self.http.post("/stats/reset").raise_for_status()

    def script(self, *steps: dict[str, Any]) -> None:
        """What the next requests do instead of the normal, one step each (status, stall_after, die_after, tps …)."""
        self.http.post("/sim/script", json=list(steps)).raise_for_status()

    def wait_stats(self, check: Any, timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if check(stats) or time.monotonic() > deadline:
                return stats
            time.sleep(0.02)

    def assert_one_cancelled(self) -> None:
        """The test's one stream ended cancelled (its client hung up): none completed, none still active."""
        stats = self.wait_stats(lambda s: s["cancelled"] == 1 and s["active"] == 0, timeout=5)
        assert stats["cancelled"] == 1 and stats["active"] == 0 and stats["completed"] == 0

    def stop(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


def agent_engine() -> Iterator[SimEngineProcess]:
    """A module fixture's engine: fast, two parallel calls per response, a text answer after two calls."""
    process = SimEngineProcess(tps=5000, prefill_us_per_token=1, parallel_calls=2, tool_calls=2).wait_ready()
    try:
        yield process
    finally:
        process.stop()


def reset_client(server: RunningServer, engine: SimEngineProcess) -> Iterator[httpx.Client]:
    """A fixture's client of hotloop, with the engine's counters and script reset first."""
    engine.reset()
    with server.http() as client:
        yield client


def failed_error(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The error of a streamed response that failed (SSE: an `error` event, then `response.failed`)."""
    final = check_sequence(events)
    assert final["status"] == "failed" and events[-2]["type"] == "error"
    error: dict[str, Any] = final["error"]
    return error


def hang_up_mid_stream(server: RunningServer, body: dict[str, Any]) -> None:
    """Stream a create and go away at the first text delta, while the engine is generating."""
    with server.http() as client, client.stream("POST", "/responses", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("event: response.output_text.delta"):
                break
