"""The web console: its page and live state over HTTP, and end to end in a headless Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdp import Browser, ensure_chromium
from conftest import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "docs" / "console.png"


def test_page_and_static_files_are_served(server: RunningServer) -> None:
    with server.http(api_key=None) as http:
        root = http.get(f"http://127.0.0.1:{server.port}/")
        script = http.get(f"http://127.0.0.1:{server.port}/console/console.js")
    assert root.status_code == 200 and root.headers["content-type"].startswith("text/html")
    assert 'id="playground"' in root.text
    assert script.status_code == 200 and "response.create" in script.text


def test_state_reports_responses_stages_caches_and_connections(server: RunningServer) -> None:
    from wsutil import WS

    with server.http() as http:
        before = http.get("/console/state").json()
        assert http.post("/responses", json={"input": "hello"}).status_code == 200
        with WS(server.ws_url) as ws:
            first = ws.turn(input="one")
            ws.turn(input="two", previous_response_id=first[-1]["response"]["id"])
            during = http.get("/console/state").json()
        after = http.get("/console/state").json()
    assert after["responses"]["total"] >= before["responses"]["total"] + 3
    assert after["responses"]["by_transport"]["websocket"] >= 2
    assert {"validate", "render", "post_inference"} <= set(after["stages"])
    render = after["stages"]["render"]
    assert render["count"] >= 3 and render["buckets"][-1] == [None, render["count"]]
    assert after["caches"]["connection"]["hit"] >= 1  # the second WebSocket turn continued from the cache
    assert "hotloop-sim" in after["models"]
    lanes = [lane for conn in during["connections"] for lane in conn["lanes"]]
    assert any(lane["lane"] == "default" and lane["items"] >= 4 for lane in lanes)


def test_state_needs_the_admin_key_when_keys_are_set(tmp_path: Path) -> None:
    running = start_server(tmp_path, api_keys=["key-a", "key-b"], admin_key="admin-secret", models=["hotloop-sim"])
    try:
        with running.http("key-a") as http:
            assert http.post("/responses", json={"input": "hi"}).status_code == 200
            denied = http.get("/console/state")
        with running.http(None) as http:
            anonymous = http.get("/console/state")
        with running.http("admin-secret") as http:
            state = http.get("/console/state")
    finally:
        running.stop()
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
    assert anonymous.status_code == 401
    assert state.status_code == 200
    ledger = state.json()["ledger"]
    assert [row["responses"] for row in ledger] == [1]
    assert "key-a" not in state.text and "admin-secret" not in state.text  # owners are hash prefixes


def test_state_is_refused_without_an_admin_key_and_the_console_can_be_off(tmp_path: Path) -> None:
    keyed = start_server(tmp_path / "a", api_keys=["key-a"], models=["hotloop-sim"])
    off = start_server(tmp_path / "b", console=False, models=["hotloop-sim"])
    try:
        with keyed.http("key-a") as http:
            refused = http.get("/console/state")
        with off.http() as http:
            page = http.get(f"http://127.0.0.1:{off.port}/")
            state = http.get("/console/state")
    finally:
        keyed.stop()
        off.stop()
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "console_disabled"
    assert page.status_code == 404 and state.status_code == 404


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    ensure_chromium()
    chromium = Browser(tmp_path_factory.mktemp("chromium"))
    yield chromium
    chromium.close()


def _number(browser: Browser, element: str) -> float:
    text = browser.evaluate(f"document.getElementById('{element}').textContent")
    try:
        return float(text)
    except ValueError:  # a dash before the first poll
        return -1.0


def test_console_in_chromium_shows_live_numbers_and_the_playground_streams(browser: Browser, tmp_path: Path) -> None:
    running = start_server(tmp_path, models=["hotloop-sim"], sim_ttft_ms=2.0, sim_tps=4000.0, console_sample_s=0.5)
    bench_command = [
        *(sys.executable, "-m", "hotloop", "bench", "agent-loop", "--base-url", running.base_url),
        *("--modes", "ws,http-chain", "--turns", "12", "--context-tokens", "4000", "--runs", "2", "--tool-ms", "20"),
        *("--ttft-ms", "2", "--tps", "4000", "--quiet", "--json", str(tmp_path / "bench.json")),
    ]
    try:
        browser.goto(f"http://127.0.0.1:{running.port}/")
        browser.wait_for("document.getElementById('status').textContent.startsWith('live')")
        start = _number(browser, "responses-total")
        bench = subprocess.Popen(bench_command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            # While the benchmark runs the page's own polling shows the traffic: a rate and a growing total.
            browser.wait_for("parseFloat(document.getElementById('rps').textContent) > 0", timeout=60)
            browser.wait_for(f"parseFloat(document.getElementById('responses-total').textContent) > {start + 5}")
            assert browser.evaluate("document.querySelectorAll('#stages .stage').length") >= 5
        finally:
            _, errors = bench.communicate(timeout=120)
        assert bench.returncode == 0, errors
        browser.wait_for("document.querySelector('#caches tbody tr') !== null")
        _check_time_series(browser, running)

        browser.evaluate("document.getElementById('pg-input').value = 'Hello from the console'")
        browser.evaluate("document.getElementById('pg-form').requestSubmit()")
        browser.wait_for("document.getElementById('pg-status').textContent.startsWith('completed')")
        first = browser.evaluate("document.querySelector('#pg-log .assistant').textContent")
        assert len(first) > 10  # a streamed answer, assembled from output_text deltas
        browser.evaluate("document.getElementById('pg-input').value = 'And again'")
        browser.evaluate("document.getElementById('pg-form').requestSubmit()")
        browser.wait_for("document.querySelectorAll('#pg-log .assistant').length === 2")
        browser.wait_for("document.getElementById('pg-status').textContent.startsWith('completed')")
        # The playground's socket shows up as a live connection whose default lane holds the two-turn chain.
        latest = browser.evaluate("document.getElementById('pg-status').textContent.split(' · ')[1]")
        browser.wait_for(f"document.querySelector('#connections tbody').textContent.includes('{latest[:14]}')")
        assert "· 4" in browser.evaluate("document.querySelector('#connections tbody').textContent")
        shot = SCREENSHOT if os.environ.get("HOTLOOP_UPDATE_SCREENSHOT") else tmp_path / "console.png"
        browser.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        running.stop()


def _check_time_series(browser: Browser, running: RunningServer) -> None:
    """The last hour's charts: the benchmark's turns and their API time drawn, and a failed response counted."""
    with running.http() as http:
        crash = {"input": "fail", "metadata": {"hotloop_sim_fault": "crash"}}
        failed = http.post("/responses", json=crash)
        assert failed.status_code == 500 and failed.json()["error"]["code"] == "server_error", failed.text
        points = http.get("/console/state").json()["history"]["points"]
    assert max(point["turns_per_s"] for point in points) > 0
    assert any(point["overhead_p99_ms"] for point in points)
    line = "document.querySelector('#chart-{}').querySelectorAll('polyline')[{}].getAttribute('points').split(' ')"
    browser.wait_for(f"{line.format('turns', 0)}.length >= 3")
    assert browser.evaluate(f"{line.format('overhead', 1)}.length") >= 2  # p99 beside p50
    # the failure shows in its chart: a point above the baseline, within a step or two
    browser.wait_for(f"{line.format('errors', 0)}.some((xy) => parseFloat(xy.split(',')[1]) < 58)", timeout=10)
    assert "max 1" in browser.evaluate("document.querySelector('#chart-errors .latest').textContent")


def test_the_playground_shows_reasoning_as_it_streams(browser: Browser, tmp_path: Path) -> None:
    """A reasoning model's thinking gets its own line, above the answer, filled from the reasoning deltas."""
    running = start_server(tmp_path, models=["hotloop-sim"], sim_ttft_ms=2.0, sim_tps=4000.0, sim_reasoning_tokens=6)
    try:
        browser.goto(f"http://127.0.0.1:{running.port}/")
        browser.evaluate("document.getElementById('pg-input').value = 'Think, then answer'")
        browser.evaluate("document.getElementById('pg-form').requestSubmit()")
        browser.wait_for("document.getElementById('pg-status').textContent.startsWith('completed')")
        thought = browser.evaluate("document.querySelector('#pg-log .reasoning').textContent")
        assert thought.startswith("Let me think:") and len(thought.split()) == 3 + 6  # the six thinking tokens
        order = browser.evaluate(
            "[...document.querySelectorAll('#pg-log > div')].map((div) => div.className).join(',')"
        )
        assert order == "user,reasoning,assistant", order
        assert len(browser.evaluate("document.querySelector('#pg-log .assistant').textContent")) > 10
    finally:
        running.stop()
