"""Structured JSON logs from a real `hotloop serve`: ids on every line, no keys and no content at any level."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from process_support import ServerProcess
from wsutil import WS

KEY = "sk-test-logging-key-0123456789"
SECRET_TEXT = "PURPLE-ELEPHANT-CONTENT"


def _lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_json_logs_carry_ids_and_never_keys_or_content(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, api_keys=[KEY], log_level="info", log_format="json")  # info: the default
    with server:
        headers = {"Authorization": f"Bearer {KEY}"}
        reply = httpx.post(f"{server.base_url}/responses", json={"input": SECRET_TEXT}, headers=headers)
        assert reply.status_code == 200
        wrong = {"Authorization": "Bearer wrong-key"}
        denied = httpx.post(f"{server.base_url}/responses", json={"input": SECRET_TEXT}, headers=wrong)
        assert denied.status_code == 401
        with WS(server.ws_url, api_key=KEY) as ws:
            events = ws.turn(input=SECRET_TEXT)
    output = server.output()
    assert KEY not in output and "wrong-key" not in output and SECRET_TEXT not in output
    lines = _lines(output)  # every line is one JSON object
    request_id = reply.headers["x-request-id"]
    assert request_id.startswith("req_")
    http_lines = [line for line in lines if line.get("request_id") == request_id]
    assert any(line.get("status") == 200 and line.get("path") == "/v1/responses" for line in http_lines)
    finished = [line for line in lines if line["message"] == "response finished"]
    by_id = {line["response_id"]: line for line in finished}
    http_done, ws_done = by_id[reply.json()["id"]], by_id[events[-1]["response"]["id"]]
    assert http_done["request_id"] == request_id and http_done["transport"] == "http"
    assert ws_done["connection_id"].startswith("conn_") and ws_done["transport"] == "websocket"
    assert ws_done["status"] == "completed" and ws_done["output_tokens"] > 0


def test_debug_text_logs_redact_keys(tmp_path: Path) -> None:
    """At debug level uvicorn traces WebSocket handshakes and frames (content, by choice of the operator); the
    Authorization header and a browser's key subprotocol are still redacted."""
    server = ServerProcess(tmp_path, api_keys=[KEY], log_level="debug", log_format="text")
    with server:
        headers = {"Authorization": f"Bearer {KEY}"}
        assert httpx.post(f"{server.base_url}/responses", json={"input": "hi"}, headers=headers).status_code == 200
        with WS(server.ws_url, api_key=KEY) as ws:
            ws.turn(input="over the socket")
        browser_key = f"openai-insecure-api-key.{KEY}"
        with WS(server.ws_url, subprotocols=[browser_key, "hotloop-console"]) as ws:  # type: ignore[list-item]
            ws.turn(input="from a browser")
    output = server.output()
    assert "response finished" in output and not output.lstrip().startswith("{")
    assert "[redacted]" in output  # the handshake lines were logged, without the key
    assert KEY not in output
