"""A container's way out to the domains its `network_policy` allows (docs/sandbox.md, "Network"): the container
has no network of its own (a new network namespace: loopback only), and this HTTP proxy, on a unix socket bound into
it, is the one thing it can reach outside. forward.py, inside, serves the proxy at 127.0.0.1:3128 and `HTTP_PROXY`
/ `HTTPS_PROXY` name it, so pip, curl, requests and urllib go through it unchanged.

- `CONNECT host:port` (HTTPS and any TCP) and absolute-form requests (`GET http://host/…`, plain HTTP) to a host
  the allowlist matches; anything else gets a 403 saying so, a request that is not HTTP a 400.
- **Allowed**: a host that is an allowed domain or under one (`pypi.org` allows `files.pypi.org` too); `*.d`
  allows only what is under `d`.
- **Never the server's own neighbourhood**: a host whose address is not a public one (loopback, private,
  link-local, the cloud's metadata address, …) is refused even when its name is allowed, unless the operator lets
  containers reach private addresses (`private=True`): an allowed name could resolve to 127.0.0.1, and there the
  server's Redis and PostgreSQL listen. The address checked is the one connected to.
- Bounded: so many connections at once, a request head of so many bytes read within so many seconds, an idle
  connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

SOCKET = "proxy.sock"  # in the directory bound into the container
INSIDE = "/run/hotloop-egress"  # where that directory is inside
PORT = 3128  # forward.py's, on the container's loopback
MAX_CONNECTIONS = 64
MAX_HEAD = 16 * 1024
HEAD_SECONDS = 10.0
IDLE_SECONDS = 300.0
CONNECT_SECONDS = 10.0
CHUNK = 1 << 16


def allowed(host: str, domains: Sequence[str]) -> bool:
    """Whether `host` is one of `domains` or under one (`*.d`: only under `d`); case and a final dot ignored."""
    host = host.lower().rstrip(".")
    for domain in domains:
        domain = domain.lower().rstrip(".")
        if domain.startswith("*."):
            if host.endswith(domain[1:]):
                return True
        elif host == domain or host.endswith("." + domain):
            return True
    return False


def public(address: str) -> bool:
    """Whether an address is one on the internet at large (not loopback, private, link-local, reserved, …)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global


class Egress:
    """One container's proxy: `start()` before its first process, `close()` after its last."""

    def __init__(self, directory: Path, domains: Sequence[str], *, private: bool = False) -> None:
        self.directory = directory  # bound into the container at INSIDE
        self.domains = tuple(domains)
        self.private = private
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()

    @property
    def path(self) -> Path:
        return self.directory / SOCKET

    async def start(self, uid: int) -> None:
        """Listen on the socket, which only `uid` (the container's) may connect to."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(self.directory, uid, uid)
        os.chmod(self.directory, 0o700)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=MAX_HEAD)
        os.chown(self.path, uid, uid)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.directory.rmdir()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._open) >= MAX_CONNECTIONS:
            await _refuse(writer, 503, f"this container has {MAX_CONNECTIONS} connections open already")
            return
        self._open.add(task)
        try:
            await self._proxy(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass
        finally:
            self._open.discard(task)
            writer.close()

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
        request = _Request.parse(head)
        if request is None:
            await _refuse(writer, 400, "not an HTTP proxy request")
            return
        if not allowed(request.host, self.domains):
            await _refuse(writer, 403, f"{request.host} is not among this container's allowed_domains")
            return
        try:
            upstream = await asyncio.wait_for(self._connect(request.host, request.port), CONNECT_SECONDS)
        except PermissionError as refused:
            await _refuse(writer, 403, str(refused))
            return
        except (OSError, TimeoutError) as failed:
            await _refuse(writer, 502, f"{request.host}:{request.port} could not be reached ({failed})")
            return
        up_reader, up_writer = upstream
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                up_writer.write(request.origin_form())
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    async def _connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `host`, to the first address it resolves to that may be reached (PermissionError: none
        may)."""
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        reachable = [address for address in addresses if self.private or public(address)]
        if not reachable:
            raise PermissionError(f"{host} resolves to {', '.join(sorted(set(addresses)))}: not a public address")
        return await asyncio.open_connection(reachable[0], port, limit=CHUNK)


class _Request:
    def __init__(self, method: str, host: str, port: int, target: str, version: str, headers: list[bytes]) -> None:
        self.method, self.host, self.port, self.target, self.version = method, host, port, target, version
        self.headers = headers

    @classmethod
    def parse(cls, head: bytes) -> _Request | None:
        lines = head.split(b"\r\n")
        try:
            method, target, version = lines[0].decode("ascii").split(" ")
        except (UnicodeDecodeError, ValueError):
            return None
        headers = [line for line in lines[1:] if line]
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            return cls._made(method, host, port, "", version, headers)
        parts = urlsplit(target)
        try:
            number = parts.port or 80
        except ValueError:
            return None
        if parts.scheme.lower() != "http" or not parts.hostname:
            return None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls._made(method, parts.hostname, str(number), path, version, headers)

    @classmethod
    def _made(
        cls, method: str, host: str, port: str, target: str, version: str, headers: list[bytes]
    ) -> _Request | None:
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or "@" in host:
            return None
        return cls(method, host, int(port), target, version, headers)

    def origin_form(self) -> bytes:
        """The request as the origin server takes it: its path, no proxy headers, the connection closed after."""
        kept = [h for h in self.headers if not h.lower().startswith((b"proxy-", b"connection:", b"keep-alive:"))]
        lines = [f"{self.method} {self.target} {self.version}".encode(), *kept, b"Connection: close"]
        return b"\r\n".join(lines) + b"\r\n\r\n"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await asyncio.wait_for(reader.read(CHUNK), IDLE_SECONDS):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, TimeoutError):
        writer.close()


async def _refuse(writer: asyncio.StreamWriter, status: int, why: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}
    body = f"hotloop sandbox: {why}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
