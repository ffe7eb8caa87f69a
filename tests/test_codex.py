"""End to end: the real Codex CLI (`codex exec`, pinned in tests/codex/package.json) against hotloop-sim.

The test installs Codex into tests/codex/node_modules with npm when it is missing (the npm registry must be
reachable the first time). Each run starts its own server with `sim_tool_calls=2`, so hotloop-sim calls two of
Codex's tools before answering with text, and checks on the server side that Codex answered both calls with
`function_call_output` items over the transport its config selects (WebSocket or HTTP/SSE).

Codex 0.171.0 refuses the sim's arguments before running anything (its `number` fields are parsed as unsigned
integers and the sim gives them two decimals; `request_user_input` is refused in Default mode), so the outputs are
Codex's refusal messages, not shell output: the test checks the loop, not a command's result
(docs/protocol-notes.md, "Codex CLI").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import hotloop.pipeline.turn as turn_module
from conftest import RunningServer, start_server
from hotloop.wire.request import CreateRequest
from metrics_support import Scrape, metrics_url

CODEX_DIR = Path(__file__).parent / "codex"
CODEX_BIN = CODEX_DIR / "node_modules" / ".bin" / "codex"
CODEX_TIMEOUT_S = 60
NPM_TIMEOUT_S = 300
API_KEY_ENV = "HOTLOOP_CODEX_TEST_KEY"

# Codex offers many tools; hotloop-sim calls a random one. Turning the extra ones off leaves exec_command,
# write_stdin and request_user_input (the last cannot be turned off in 0.171.0).
CONFIG = """\
model_provider = "hotloop"
model = "hotloop-sim"
web_search = "disabled"

[model_providers.hotloop]
name = "hotloop"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{env_key}"
supports_websockets = {websockets}

[features]
goals = false
multi_agent = false
view_image = false
"""


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The pinned Codex CLI, installed by npm into tests/codex on first use (never globally)."""
    if not CODEX_BIN.exists():
        npm = shutil.which("npm")
        assert npm is not None, "npm is needed to install the Codex CLI (tests/codex/package.json)"
        subprocess.run(
            [npm, "install", "--prefix", str(CODEX_DIR), "--no-audit", "--no-fund"],
            check=True,
            timeout=NPM_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    assert CODEX_BIN.exists(), f"npm did not install {CODEX_BIN}"
    return CODEX_BIN


Seen = list[tuple[bool, CreateRequest]]


@pytest.fixture
def seen_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    """Every create request the server validates, with whether it came over WebSocket (servers run in-process)."""
    seen: Seen = []
    original = turn_module.check_request

    def recording(request: CreateRequest, *, websocket: bool) -> None:
        seen.append((websocket, request))
        original(request, websocket=websocket)

    monkeypatch.setattr(turn_module, "check_request", recording)
    yield seen


def run_codex(codex: Path, server: RunningServer, tmp: Path, *, websockets: bool) -> subprocess.CompletedProcess[str]:
    home = tmp / "codex_home"
    work = tmp / "work"
    home.mkdir()
    work.mkdir()
    config = CONFIG.format(base_url=server.base_url, env_key=API_KEY_ENV, websockets=str(websockets).lower())
    (home / "config.toml").write_text(config)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "CODEX_"))}
    env.update({"CODEX_HOME": str(home), API_KEY_ENV: "test-key", "NO_COLOR": "1"})
    command = [
        str(codex),
        "exec",
        "--json",
        "--ephemeral",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--color",
        "never",
        "-C",
        str(work),
        "List the files in this directory.",
    ]
    return subprocess.run(
        command, env=env, cwd=work, capture_output=True, text=True, timeout=CODEX_TIMEOUT_S, stdin=subprocess.DEVNULL
    )


def events_of(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def input_items(request: CreateRequest) -> list[dict[str, Any]]:
    return [item for item in request.input if isinstance(item, dict)] if isinstance(request.input, list) else []


@pytest.mark.timeout(CODEX_TIMEOUT_S + NPM_TIMEOUT_S)
@pytest.mark.parametrize("websockets", [True, False], ids=["websocket", "http"])
def test_codex_exec_runs_the_sim_tool_loop(
    codex_bin: Path, seen_requests: Seen, tmp_path: Path, websockets: bool
) -> None:
    server = start_server(tmp_path / "data", models=["hotloop-sim"], sim_tool_calls=2)
    try:
        result = run_codex(codex_bin, server, tmp_path, websockets=websockets)
        scrape = Scrape(httpx.get(metrics_url(server), timeout=10).text)
    finally:
        server.stop()
    report = f"codex exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, report

    # Codex reached the end of its turn with a text answer (hotloop-sim answers text after two calls).
    events = events_of(result.stdout)
    messages = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
    assert messages and messages[-1]["text"], report
    assert events[-1]["type"] == "turn.completed", report

    # Server side: every request came over the configured transport, and Codex answered the sim's calls.
    assert seen_requests, report
    assert {websocket for websocket, _ in seen_requests} == {websockets}, report
    answered = {
        item["call_id"]
        for _, request in seen_requests
        for item in input_items(request)
        if item.get("type") == "function_call_output"
    }
    assert len(answered) >= 2, report
    assert all(request.model == "hotloop-sim" and request.store is False for _, request in seen_requests), report

    used, unused = ("websocket", "sse") if websockets else ("sse", "websocket")
    completed = scrape.value("hotloop_responses_total", model="hotloop-sim", status="completed", transport=used)
    assert completed >= 3, report  # two tool-call responses and the answer (plus Codex's warmup on WebSocket)
    for status in ("completed", "failed", "incomplete", "cancelled"):
        assert scrape.value("hotloop_responses_total", model="hotloop-sim", status=status, transport=unused) == 0
        assert scrape.value("hotloop_responses_total", model="hotloop-sim", status=status, transport="http") == 0
    for status in ("failed", "incomplete", "cancelled"):
        assert scrape.value("hotloop_responses_total", model="hotloop-sim", status=status, transport=used) == 0, report
