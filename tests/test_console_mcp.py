"""The console's MCP panel: the state's `mcp` section after a real MCP loop (mcp_support.py's server on loopback),
a call visible while it runs, and the panel and playground log in a headless Chromium."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cdp import Browser, ensure_chromium
from conftest import RunningServer, start_server
from mcp_support import McpServers, approved, mcp_tool

SLEEP_S = 1.5  # long enough for the page's 1 s poll to see the call running


@pytest.fixture(scope="module")
def hotloop(tmp_path_factory: pytest.TempPathFactory, mcp_servers: McpServers) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("console-mcp"), models=["hotloop-sim"], mcp_allowed_urls=[mcp_servers.base + "/"]
    )
    yield running
    running.stop()


@pytest.fixture
def http(hotloop: RunningServer) -> Iterator[httpx.Client]:
    with hotloop.http() as client:
        yield client


def sleep_body(servers: McpServers) -> dict[str, Any]:
    """A stateless history whose approved request makes hotloop call the sleep tool first."""
    return {
        "model": "hotloop-sim",
        "input": approved([("sleep", {"seconds": SLEEP_S})]),
        "tools": [mcp_tool(servers, allowed_tools=["sleep"], require_approval="always")],
        "store": False,
        "metadata": {"sim_tool_calls": "0"},
    }


def state(http: httpx.Client) -> dict[str, Any]:
    reply = http.get("/console/state")
    assert reply.status_code == 200
    result: dict[str, Any] = reply.json()
    return result


def test_the_state_shows_the_calls_of_an_mcp_loop(http: httpx.Client, mcp_servers: McpServers) -> None:
    before = state(http)["mcp"]
    reply = http.post("/responses", json={"model": "hotloop-sim", "input": "Echo.", "tools": [mcp_tool(mcp_servers)]})
    assert reply.status_code == 200, reply.text
    made = [item for item in reply.json()["output"] if item["type"] == "mcp_call"]
    assert len(made) == 2
    text = http.get("/console/state").text
    after = json.loads(text)["mcp"]
    newest = after["calls"][:2]
    assert [(call["server_label"], call["name"], call["status"], call["error"]) for call in newest] == [
        ("tools", "echo", "completed", None)
    ] * 2
    assert all(call["owner"] == "(no keys)" and 0 <= call["seconds"] < 5 for call in newest)
    assert newest[0]["started_at"] >= newest[1]["started_at"]  # newest first
    completed = after["calls_by_outcome"]["completed"] - before["calls_by_outcome"].get("completed", 0)
    listed = after["lists_by_outcome"]["listed"] - before["lists_by_outcome"].get("listed", 0)
    assert completed == 2 and listed == 1
    for call in made:  # names, status and timing only: what the model sent and the tool answered stays out
        assert call["arguments"] not in text and json.dumps(call["arguments"]) not in text
        assert json.loads(call["arguments"])["text"] not in text and call["output"] not in text
    assert not any(name.startswith("mcp_") for name in json.loads(text)["gauges"])  # shown in the panel instead


def test_a_running_call_is_in_the_state_while_it_runs(
    hotloop: RunningServer, http: httpx.Client, mcp_servers: McpServers
) -> None:
    replies: list[httpx.Response] = []
    with hotloop.http() as other:
        thread = threading.Thread(target=lambda: replies.append(other.post("/responses", json=sleep_body(mcp_servers))))
        thread.start()
        deadline = time.monotonic() + 5
        running: dict[str, Any] = {}
        while not running and time.monotonic() < deadline:
            calls = state(http)["mcp"]["calls"]
            running = next((call for call in calls if call["status"] == "in_progress"), {})
            time.sleep(0.05)
        thread.join(10)
    assert running["name"] == "sleep" and 0 <= running["seconds"] < SLEEP_S  # the time so far
    assert replies[0].status_code == 200, replies[0].text
    ended = state(http)
    assert ended["mcp"]["calls"][0]["name"] == "sleep" and ended["mcp"]["calls"][0]["status"] == "completed"
    assert ended["mcp"]["calls"][0]["seconds"] >= SLEEP_S
    assert "slept" not in json.dumps(ended)  # the tool's output


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    ensure_chromium()
    chromium = Browser(tmp_path_factory.mktemp("chromium"))
    yield chromium
    chromium.close()


def send_from_page(browser: Browser, create: dict[str, Any]) -> None:
    """A `response.create` on the playground's own socket, so its events reach the page's log as a chat's do."""
    browser.evaluate("document.getElementById('pg-status').textContent = ''")
    message = json.dumps(json.dumps({"type": "response.create", **create}))
    browser.evaluate(
        "(playground.ws && playground.ws.readyState === WebSocket.OPEN ? Promise.resolve(playground.ws)"
        f" : openSocket()).then((ws) => ws.send({message}))"
    )


def test_the_panel_and_the_playground_show_mcp_calls(
    browser: Browser, hotloop: RunningServer, mcp_servers: McpServers
) -> None:
    rows = "document.querySelector('#mcp-calls tbody').textContent"
    log = "document.getElementById('pg-log').textContent"
    browser.goto(f"http://127.0.0.1:{hotloop.port}/")
    browser.wait_for("document.getElementById('status').textContent.startsWith('live')")
    send_from_page(browser, sleep_body(mcp_servers))
    browser.wait_for(f"{rows}.includes('sleepin_progress')", timeout=5)  # the row while the call runs
    browser.wait_for("document.getElementById('pg-status').textContent.startsWith('completed')")
    assert "⚙ tools.sleep → completed" in browser.evaluate(log)
    browser.wait_for(f"{rows}.includes('sleepcompleted')")

    # the panel lists every call this server ran (the module's other tests' too): two more rows for this response
    echoes = f"{rows}.split('echocompleted').length - 1"
    before = browser.evaluate(echoes)
    send_from_page(browser, {"model": "hotloop-sim", "input": "Echo.", "tools": [mcp_tool(mcp_servers)]})
    browser.wait_for("document.getElementById('pg-status').textContent.startsWith('completed')")
    assert browser.evaluate(log).count("⚙ tools.echo → completed") == 2
    browser.wait_for(f"{echoes} === {before + 2}")
    assert "completed" in browser.evaluate("document.getElementById('mcp-totals').textContent")

    asking = mcp_tool(mcp_servers, require_approval="always")
    send_from_page(browser, {"model": "hotloop-sim", "input": "Ask first.", "tools": [asking]})
    browser.wait_for("document.getElementById('pg-status').textContent.startsWith('completed')")
    assert "⚙ tools.echo awaits approval (mcpr_" in browser.evaluate(log)
