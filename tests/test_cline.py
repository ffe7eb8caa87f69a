"""End to end: the real Cline CLI (`cline`, pinned in tests/cline/package.json) runs hotloop-sim's commands through
its `openai-native` provider, hosted tools and all.

The test installs Cline into tests/cline/node_modules with npm when it is missing (the npm registry must be reachable
the first time). Cline sends `{"type": "web_search"}` and `{"type": "image_generation", "output_format": "png"}` on
every request, whatever the task (issue 36: before `drop_tool_types` listed `image_generation`, every run ended in
`finishReason: error` on the 400). The server is hotloop-sim with `sim_tool_calls`: it prefers Cline's shell tool
(`run_commands`, a `commands` array) and fills it with a real command, so Cline runs two commands before the sim
answers with text. The test checks that they ran (the marker files in Cline's working directory, their output in the
`function_call_output` items Cline sends back), that the run ended without error, and that every request carried both
hosted tools, each left out and counted in `hotloop_tools_dropped_total`.

Cline is configured with `cline auth` under a temporary HOME, and both commands get `--data-dir`: its isolated local
state, which also keeps it on its in-process backend (no background hub daemon left running).
docs/protocol-notes.md, "Cline CLI", records what Cline sends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import hotloop.pipeline.prepare as turn_module
from conftest import start_server
from hotloop.wire.request import CreateRequest
from metrics_support import Scrape, metrics_url
from npm_support import NPM_TIMEOUT_S, events_of, input_items, npm_installed, run_cli

CLINE_DIR = Path(__file__).parent / "cline"
CLINE_TIMEOUT_S = 90
API_KEY = "hotloop-cline-test-key"
COMMANDS = 2  # sim_tool_calls: shell commands before the answer
# What Cline 3.0.65 sends on every request with openai-native, whatever the task: hosted tools hotloop does not run.
HOSTED = {
    "web_search": {"type": "web_search"},
    "image_generation": {"type": "image_generation", "output_format": "png"},
}


@pytest.fixture(scope="session")
def cline_bin() -> Path:
    """The pinned Cline CLI, installed by npm into tests/cline on first use (never globally)."""
    return npm_installed(CLINE_DIR, "cline")


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CreateRequest]]:
    """The create requests the in-process server received, in order."""
    seen: list[CreateRequest] = []
    check_request = turn_module.check_request

    def recording_check(request: CreateRequest, *, websocket: bool) -> None:
        seen.append(request)
        check_request(request, websocket=websocket)

    monkeypatch.setattr(turn_module, "check_request", recording_check)
    yield seen


def run_cline(cline: Path, home: Path, work: Path, *args: str) -> str:
    """One `cline` command in `work` with HOME at `home` (never the real ~); its stdout."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "CLINE_"))}
    # --data-dir keeps Cline on its local backend already; this says so even for `auth`.
    env.update({"HOME": str(home), "CLINE_SESSION_BACKEND_MODE": "local", "NO_COLOR": "1"})
    return run_cli("cline", [str(cline), *args], env, work, CLINE_TIMEOUT_S)


@pytest.mark.timeout(2 * CLINE_TIMEOUT_S + NPM_TIMEOUT_S)
def test_cline_runs_the_sims_commands_with_its_hosted_tools_dropped(
    cline_bin: Path, requests: list[CreateRequest], tmp_path: Path
) -> None:
    work, home, state = tmp_path / "work", tmp_path / "home", tmp_path / "cline_state"
    work.mkdir()
    home.mkdir()
    server = start_server(tmp_path / "data", models=["hotloop-sim"], sim_tool_calls=COMMANDS, api_keys=[API_KEY])
    try:
        provider = ["-p", "openai-native", "-k", API_KEY, "-m", "hotloop-sim", "-b", server.base_url]
        run_cline(cline_bin, home, work, "auth", *provider, "--data-dir", str(state))
        # Act mode with every tool auto-approved (the default, said out loud): the command runs unattended.
        prompt = "Run a shell command that prints hello, then say that you are done."
        flags = ["--json", "--auto-approve", "true", "--data-dir", str(state), "-c", str(work)]
        stdout = run_cline(cline_bin, home, work, *flags, "--timeout", str(CLINE_TIMEOUT_S - 10), prompt)
        scrape = Scrape(httpx.get(metrics_url(server), timeout=10).text)
    finally:
        server.stop()
    events = events_of(stdout)
    check_run(events, stdout)

    # Cline ran the sim's commands (its own events, the files they wrote in its working directory) and sent their
    # output back.
    markers = [f"hotloop-sim-{n}\n" for n in range(1, COMMANDS + 1)]
    ran = [
        event["event"]["output"]
        for event in events
        if event.get("type") == "agent_event"
        and event["event"]["type"] == "content_end"
        and event["event"].get("toolName") == "run_commands"
    ]
    assert [[(run["result"], run["success"]) for run in output] for output in ran] == [
        [(marker, True)] for marker in markers
    ], stdout
    for n, marker in enumerate(markers, 1):
        assert (work / f"hotloop_sim_{n}.txt").read_text() == marker, stdout
    outputs = [
        json.dumps(item["output"])
        for request in requests
        for item in input_items(request)
        if item.get("type") == "function_call_output"
    ]
    for marker in markers:
        assert any(marker.strip() in output for output in outputs), outputs

    # Every request carried Cline's hosted tools beside its functions; each was left out and counted, per turn.
    assert len(requests) >= COMMANDS + 1 and all(request.model == "hotloop-sim" for request in requests)
    for request in requests:
        tools = request.tools or []
        assert all(shape in tools for shape in HOSTED.values()), [tool.get("type") for tool in tools]
        assert any(tool.get("name") == "run_commands" for tool in tools)
    for kind in HOSTED:
        assert scrape.value("hotloop_tools_dropped_total", type=kind) == len(requests)
    for status in ("failed", "incomplete", "cancelled"):
        assert scrape.total("hotloop_responses_total", status=status) == 0, scrape.text


def check_run(events: list[dict[str, Any]], stdout: str) -> None:
    """Cline's `--json` stream: no error event, and a `run_result` that completed after the commands and the
    answer (one iteration each)."""
    assert not [event for event in events if event.get("type") == "error"], stdout
    errors = [event for event in events if event.get("type") == "agent_event" and event["event"]["type"] == "error"]
    assert not errors, stdout
    [result] = [event for event in events if event.get("type") == "run_result"]
    assert result["finishReason"] == "completed" and result["iterations"] == COMMANDS + 1, result
    assert result["model"] == {"id": "hotloop-sim", "provider": "openai-native"} and result["text"], result
