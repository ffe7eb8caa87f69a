"""The doors (transports/doors.py, protocol.md §1.1): a web page cannot drive a server on the developer's machine.

The rules first, as pure functions of a request's headers; then a real server with real clients: the SDKs and
plain clients (no `Origin`) keep working, a browser-style cross-origin upgrade or POST is refused with 403, a
foreign `Host` (DNS rebinding) with 421, and nothing is stored for either.
"""

from __future__ import annotations

import functools
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from cdp import Browser, ensure_chromium
from conftest import RunningServer, start_server, stored_counts
from hotloop.transports.doors import Doors
from http_support import error_of
from wsutil import WS, final, user

SIM = "hotloop-sim"
EVIL = "http://evil.example"


def _scope(kind: str = "http", method: str = "POST", **headers: str) -> dict[str, Any]:
    raw = [(name.encode(), value.encode()) for name, value in headers.items()]
    return {"type": kind, "method": method, "scheme": "http" if kind == "http" else "ws", "headers": raw}


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8000", "localhost:1234", "LOCALHOST", "[::1]:8000", "127.0.0.1", "localhost."[:-1]]
)
@pytest.mark.fast
def test_loopback_names_on_any_port_come_in(host: str) -> None:
    assert Doors("127.0.0.1").refusal(_scope(host=host)) is None


@pytest.mark.fast
@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "", "[::2]:80"])
def test_other_hosts_are_421_while_bound_to_loopback(host: str) -> None:
    refusal = Doors("127.0.0.1").refusal(_scope(host=host))
    assert refusal is not None and (refusal.status, refusal.code) == (421, "invalid_host")


@pytest.mark.fast
def test_allowed_hosts_and_the_bind_address() -> None:
    doors = Doors("127.0.0.2", ["hotloop.test", "proxy.test:9000"])
    for host in ("127.0.0.2:8000", "hotloop.test", "hotloop.test:1", "proxy.test:9000"):
        assert doors.refusal(_scope(host=host)) is None, host
    assert doors.refusal(_scope(host="proxy.test:9001")) is not None
    assert Doors("::1").refusal(_scope(host="[::1]:8000")) is None
    assert Doors("127.0.0.1", ["*"]).refusal(_scope(host="evil.example")) is None
    # A server bound beyond loopback is reached by names it cannot know: no Host check there.
    assert Doors("0.0.0.0").refusal(_scope(host="evil.example")) is None


@pytest.mark.fast
def test_origin_rules() -> None:
    doors = Doors("127.0.0.1", allowed_origins=["http://localhost:5173"])
    own = {"host": "127.0.0.1:8000"}
    assert doors.refusal(_scope(**own)) is None  # no Origin: the SDKs, Codex, curl
    assert doors.refusal(_scope(origin="http://127.0.0.1:8000", **own)) is None  # the console: same origin
    assert doors.refusal(_scope(origin="http://localhost:5173/", **own)) is None  # configured
    assert doors.refusal(_scope(method="GET", origin=EVIL, **own)) is None  # a GET changes nothing
    for scope in (
        _scope(origin=EVIL, **own),
        _scope(method="DELETE", origin=EVIL, **own),
        _scope(origin="null", **own),  # a sandboxed frame or a file:// page
        _scope(origin="https://127.0.0.1:8000", **own),  # another scheme is another origin
        _scope(origin="http://127.0.0.1:8001", **own),  # another port too
        _scope("websocket", method="GET", origin=EVIL, **own),
    ):
        refusal = doors.refusal(scope)
        assert refusal is not None and (refusal.status, refusal.code) == (403, "origin_not_allowed"), scope
    # A browser sends the page's origin with an upgrade too: the console's is the server's own.
    assert doors.refusal(_scope("websocket", origin="http://127.0.0.1:8000", **own)) is None
    assert Doors("127.0.0.1", allowed_origins=["*"]).refusal(_scope(origin=EVIL, **own)) is None


# -- a real server ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def doors_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("doors"),
        models=[SIM],
        default_model=SIM,
        allowed_hosts=["hotloop.test"],
        allowed_origins=["http://localhost:5173"],
    )
    yield running
    running.stop()


def _own_origin(server: RunningServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def test_the_sdk_and_plain_clients_keep_working(doors_server: RunningServer) -> None:
    client = doors_server.client()
    assert client.responses.create(model=SIM, input="hi").status == "completed"
    with client.responses.connect() as connection:  # the SDK's WebSocket mode sends no Origin
        connection.response.create(model=SIM, input="hi", store=False)
        for event in connection:
            if event.type in ("response.completed", "response.failed", "error"):
                break
    assert event.type == "response.completed"
    with WS(doors_server.ws_url) as ws:
        assert final(ws.turn(model=SIM, input=user("hi"), store=False))["status"] == "completed"


def test_a_cross_origin_post_is_403_and_stores_nothing(doors_server: RunningServer) -> None:
    before = stored_counts(doors_server)
    with doors_server.http() as http:
        for path in ("/responses", "/responses/compact", "/conversations"):
            reply = http.post(path, json={"model": SIM, "input": "hi"}, headers={"Origin": EVIL})
            error_of(reply, 403, "origin_not_allowed", None)
            assert "access-control-allow-origin" not in reply.headers  # CORS stays off
        deleted = http.delete("/responses/resp_x", headers={"Origin": EVIL})
        error_of(deleted, 403, "origin_not_allowed", None)
        # Same origin (the console) and a configured origin come in.
        for origin in (_own_origin(doors_server), "http://localhost:5173"):
            reply = http.post(
                "/responses", json={"model": SIM, "input": "hi", "store": False}, headers={"Origin": origin}
            )
            assert reply.status_code == 200, reply.text
        # A GET changes nothing and, without CORS headers, a foreign page cannot read it.
        listed = http.get("/models", headers={"Origin": EVIL})
        assert listed.status_code == 200 and "access-control-allow-origin" not in listed.headers
    assert stored_counts(doors_server) == before


def test_a_cross_origin_websocket_upgrade_is_403(doors_server: RunningServer) -> None:
    """A browser sends the page's Origin with every upgrade (cross-site WebSocket hijacking)."""
    with pytest.raises(InvalidStatus) as refused:
        connect(doors_server.ws_url, origin=EVIL)  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    assert b"origin_not_allowed" in refused.value.response.body
    for origin in (_own_origin(doors_server), "http://localhost:5173"):
        with WS(doors_server.ws_url, origin=origin) as ws:
            assert final(ws.turn(model=SIM, input=user("hi"), store=False))["status"] == "completed"


def test_a_foreign_host_is_421_over_http_and_websocket(doors_server: RunningServer, tmp_path: Path) -> None:
    """DNS rebinding: the page's own name resolves to 127.0.0.1, so its requests carry that name as Host."""
    before = stored_counts(doors_server)
    with doors_server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "hi"}, headers={"Host": "evil.example"})
        error_of(reply, 421, "invalid_host", None)
        error_of(http.get("/", headers={"Host": "evil.example:8000"}), 421, "invalid_host", None)
        assert http.get("/models", headers={"Host": f"hotloop.test:{doors_server.port}"}).status_code == 200
        assert http.get("/models", headers={"Host": f"localhost:{doors_server.port}"}).status_code == 200
    assert _upgrade_status(doors_server.port, "evil.example") == 421
    assert _upgrade_status(doors_server.port, f"hotloop.test:{doors_server.port}") == 101
    assert stored_counts(doors_server) == before


def _upgrade_status(port: int, host: str) -> int:
    """The status line of a WebSocket upgrade sent with this Host (clients set Host from the URL themselves)."""
    request = (
        f"GET /v1/responses HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        reply = sock.recv(4096).decode("latin-1")
    return int(reply.split(" ", 2)[1])


def test_the_defaults_refuse_both(tmp_path: Path) -> None:
    """With no settings at all (the laptop case): the same refusals, and the console's own origin comes in."""
    server = start_server(tmp_path, models=[SIM], default_model=SIM)
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as http:
            error_of(
                http.post("/responses", json={"input": "hi"}, headers={"Origin": EVIL}), 403, "origin_not_allowed", None
            )
            error_of(http.get("/models", headers={"Host": "hotloop.test"}), 421, "invalid_host", None)
            reply = http.post("/responses", json={"input": "hi"}, headers={"Origin": _own_origin(server)})
            assert reply.status_code == 200, reply.text
    finally:
        server.stop()


# -- a real browser --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    ensure_chromium()
    browser = Browser(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.close()


FOREIGN_PAGE = """<!doctype html><script>
window.result = {ws: "pending", post: "pending"};
const ws = new WebSocket("ws://127.0.0.1:PORT/v1/responses");
ws.onopen = () => { window.result.ws = "open"; };
ws.onclose = (event) => { if (window.result.ws === "pending") window.result.ws = "refused"; };
// A "simple" cross-site POST: browsers send it without asking the server first (no CORS preflight).
fetch("http://127.0.0.1:PORT/v1/responses", {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"},
  body: JSON.stringify({model: "hotloop-sim", input: "sent by another site"})})
  .then(() => { window.result.post = "sent"; }, () => { window.result.post = "failed"; });
</script>"""


def test_a_page_from_another_origin_cannot_drive_the_server(chromium: Browser, tmp_path: Path) -> None:
    """Chromium on a page of another origin (another port of 127.0.0.1): its WebSocket is refused before it
    opens, and its no-cors POST reaches the server but stores nothing; the console's own page still connects."""
    server = start_server(tmp_path / "data", models=[SIM], default_model=SIM)
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(FOREIGN_PAGE.replace("PORT", str(server.port)))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    foreign = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        before = stored_counts(server)
        chromium.goto(f"http://127.0.0.1:{foreign.server_address[1]}/index.html")
        chromium.wait_for("window.result && window.result.ws !== 'pending' && window.result.post !== 'pending'")
        assert chromium.evaluate("window.result.ws") == "refused"
        assert chromium.evaluate("window.result.post") == "sent"  # the browser sent it; the server refused it
        # The fetch resolved once the server had answered it, and a create the server runs is stored before its
        # answer: nothing of that POST can be stored later.
        assert stored_counts(server) == before
        # The server's own page (the console) is same-origin: its socket opens.
        chromium.goto(f"http://127.0.0.1:{server.port}/")
        script = f"new Promise((ok) => {{ const w = new WebSocket('ws://127.0.0.1:{server.port}/v1/responses');"
        script += " w.onopen = () => ok('open'); w.onclose = () => ok('refused'); })"
        assert chromium.evaluate(script) == "open"
    finally:
        foreign.shutdown()
        server.stop()
