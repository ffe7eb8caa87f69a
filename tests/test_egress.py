"""A container's network allowlist (sandbox/egress.py, sandbox/forward.py; docs/sandbox.md "Network"): no network of
its own, an HTTP proxy on a unix socket to the allowed domains alone, never to an address that is not public unless
the operator allows it.

The first tests drive the proxy itself with asyncio (the fast tier); the rest open containers under bubblewrap (as
root) whose code reaches a local HTTP server through it, with pip's, curl's and urllib's own proxy settings.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunningServer, start_server
from hotloop.sandbox import Sandbox
from hotloop.sandbox.egress import Egress, _Request, allowed, public
from sandbox_support import ensure_sandbox

ROOT = Path(__file__).resolve().parents[1]


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[int]:
    """A plain HTTP server on the host's loopback: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


# -- the proxy alone ---------------------------------------------------------------------------------------------


@pytest.mark.fast
def test_a_host_is_allowed_when_it_is_a_domain_or_under_one() -> None:
    domains = ["pypi.org", "*.pythonhosted.org", "localhost"]
    assert allowed("pypi.org", domains) and allowed("FILES.PyPI.org.", domains)
    assert allowed("files.pythonhosted.org", domains) and not allowed("pythonhosted.org", domains)
    assert not allowed("evilpypi.org", domains) and not allowed("pypi.org.evil.com", domains)
    assert allowed("localhost", domains) and not allowed("127.0.0.1", domains)


@pytest.mark.fast
def test_only_public_addresses_are_public() -> None:
    assert public("151.101.0.223") and public("2a04:4e42::223")
    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "169.254.169.254", "::1", "fe80::1%eth0", "0.0.0.0"):
        assert not public(address), address
    assert not public("::ffff:127.0.0.1") and not public("100.64.0.1")


@pytest.mark.fast
def test_requests_are_read_as_a_proxy_reads_them() -> None:
    connect = _Request.parse(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert connect is not None and (connect.method, connect.host, connect.port) == ("CONNECT", "pypi.org", 443)
    get = _Request.parse(b"GET http://a.org:8080/x?y=1 HTTP/1.1\r\nHost: a.org\r\nProxy-Connection: keep-alive\r\n\r\n")
    assert get is not None and (get.host, get.port, get.target) == ("a.org", 8080, "/x?y=1")
    assert get.origin_form() == b"GET /x?y=1 HTTP/1.1\r\nHost: a.org\r\nConnection: close\r\n\r\n"
    for bad in (
        b"GET /x HTTP/1.1\r\n\r\n",
        b"CONNECT a.org HTTP/1.1\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
        b"GET ftp://a/ HTTP/1.1",
    ):
        assert _Request.parse(bad) is None, bad


async def _ask(socket_path: Path, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(request)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


@pytest.mark.fast
def test_the_proxy_reaches_allowed_hosts_only_and_private_addresses_only_when_let(tmp_path: Path, origin: int) -> None:
    async def run() -> None:
        let = Egress(tmp_path / "let", ["localhost"], private=True)
        await let.start(os.getuid())
        answer = await _ask(let.path, f"GET http://localhost:{origin}/a HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"hello from /a")
        reader, writer = await asyncio.open_unix_connection(str(let.path))
        writer.write(f"CONNECT localhost:{origin} HTTP/1.1\r\n\r\n".encode())
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection Established\r\n\r\n"
        writer.write(b"GET /tunnel HTTP/1.0\r\n\r\n")  # through the tunnel, as an HTTPS client's TLS would go
        assert (await asyncio.wait_for(reader.read(), 10)).endswith(b"hello from /tunnel")
        writer.close()
        refused = await _ask(let.path, f"CONNECT example.org:{origin} HTTP/1.1\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403") and b"example.org is not among" in refused
        assert (await _ask(let.path, b"hello\r\n\r\n")).startswith(b"HTTP/1.1 400")
        gone = await _ask(let.path, b"CONNECT localhost:1 HTTP/1.1\r\n\r\n")
        assert gone.startswith(b"HTTP/1.1 502")
        await let.close()
        assert not let.directory.exists()

        strict = Egress(tmp_path / "strict", ["localhost"])  # the default: an allowed name at a private address
        await strict.start(os.getuid())
        answer = await _ask(strict.path, f"CONNECT localhost:{origin} HTTP/1.1\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 403") and b"not a public address" in answer
        await strict.close()

    asyncio.run(run())


# -- containers behind it ------------------------------------------------------------------------------------------


def test_a_container_reaches_its_allowed_domains_through_the_proxy_and_nothing_else(
    tmp_path: Path, origin: int
) -> None:
    ensure_sandbox()

    async def run() -> None:
        sandbox = Sandbox()
        live = await sandbox.open(tmp_path / "c", allowed_domains=["localhost"], private_egress=True)
        try:
            url = f"http://localhost:{origin}/from-the-container"
            runs = await live.shell(
                [
                    f"curl -sS {url}",
                    f"curl -sS -o /dev/null -w '%{{http_code}}' http://example.org:{origin}/",
                    f"curl -sS --noproxy '*' --max-time 3 http://127.0.0.1:{origin}/ || echo direct-refused",
                    "cat /etc/resolv.conf 2>&1 || true",
                ],
                timeout=20,
            )
            assert runs[0].stdout == "hello from /from-the-container", runs[0]
            assert runs[1].stdout == "403"  # not allowed: the proxy says so
            assert runs[2].stdout.strip().endswith("direct-refused")  # the host's loopback is not the container's
            code = f"import urllib.request\nprint(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
            ran = await live.python(code, timeout=20)
            assert ran.stdout.strip() == "hello from /from-the-container", ran
            assert live.allowed_domains == ("localhost",)
        finally:
            await live.close()
        assert not (sandbox.state_dir / "egress" / str(live.uid)).exists()

    asyncio.run(run())


def test_without_private_egress_an_allowed_name_at_a_private_address_is_refused(tmp_path: Path, origin: int) -> None:
    ensure_sandbox()

    async def run() -> None:
        live = await Sandbox().open(tmp_path / "c", allowed_domains=["localhost"], kernel=False)
        try:
            [one] = await live.shell([f"curl -sS http://localhost:{origin}/"], timeout=20)
            assert "not a public address" in one.stdout and "hello" not in one.stdout
        finally:
            await live.close()

    asyncio.run(run())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    ensure_sandbox()
    running = start_server(tmp_path_factory.mktemp("egress"), models=["hotloop-sim"], containers_egress_private=True)
    yield running
    running.stop()


def test_an_auto_container_and_an_api_container_keep_their_allowlist(served: RunningServer, origin: int) -> None:
    client = served.client()
    policy = {"type": "allowlist", "allowed_domains": ["localhost"]}
    tool = {"type": "shell", "environment": {"type": "container_auto", "network_policy": policy}}
    commands = [f"curl -sS http://localhost:{origin}/auto", "curl -sS -o /dev/null -w '%{http_code}' http://a.org/"]
    response = client.responses.create(
        model="hotloop-sim", input="run", tools=[tool], metadata={"sim_commands": json.dumps(commands)}
    )
    call, answer = response.output[0], response.output[1]
    assert [out.stdout for out in answer.output] == ["hello from /auto", "403"]  # type: ignore[union-attr]
    container = client.containers.retrieve(call.environment.container_id)  # type: ignore[union-attr]
    assert container.model_dump(exclude_none=True)["network_policy"] == policy

    made = client.containers.create(name="net", extra_body={"network_policy": policy})
    assert made.model_dump(exclude_none=True)["network_policy"] == policy
    ran = client.responses.create(
        model="hotloop-sim",
        input="run",
        tools=[{"type": "code_interpreter", "container": made.id}],
        include=["code_interpreter_call.outputs"],
        metadata={
            "sim_code": f"import urllib.request; print(urllib.request.urlopen('http://localhost:{origin}/api').read())"
        },
    )
    [run] = [item for item in ran.output if item.type == "code_interpreter_call"]
    assert run.outputs and "hello from /api" in run.outputs[0].logs  # type: ignore[union-attr]
    closed = client.containers.create(name="closed")
    assert closed.model_dump(exclude_none=True)["network_policy"] == {"type": "disabled"}
