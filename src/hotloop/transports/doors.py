"""The doors (protocol.md §1.1): a web page the developer visits must not drive a server on their machine.

- **Host** (DNS rebinding: a page's own name made to resolve to 127.0.0.1): while the server binds a loopback
  address, a request whose `Host` is not an allowed host gets 421 `invalid_host`. Allowed by default: `localhost`,
  `127.0.0.1`, `[::1]` and the bind address, on any port; `allowed_hosts` adds names (`name` or `name:port`);
  `*` turns the check off. A server bound to another address is reached by names this one cannot know: the check
  is off there (a proxy in front decides).
- **Origin** (cross-site WebSocket hijacking, cross-site POSTs): a WebSocket upgrade or a state-changing request
  (POST, PUT, PATCH, DELETE) that carries an `Origin` other than the server's own (the scheme, host and port it was
  reached at) or one in `allowed_origins` gets 403 `origin_not_allowed`; `*` allows every origin. Clients that
  send no `Origin` (the SDKs, Codex, curl) are not affected, and neither is the console (same origin).

A pure ASGI middleware: it answers before any route, body or upgrade is read.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from hotloop.config import Settings
from hotloop.errors import HotloopError, InvalidHost, OriginNotAllowed
from hotloop.transports.asgi import error_response

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def split_host(value: str) -> tuple[str, str | None]:
    """`name:port` → (name, port); an IPv6 literal keeps its brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[: end + 1], value[end + 1 :]
        return host, rest[1:] if rest.startswith(":") else None
    host, colon, port = value.rpartition(":")
    return (host, port) if colon and port.isdigit() else (value, None)


class Doors:
    """The Host and Origin rules of one server, decided from a request's headers (no I/O)."""

    def __init__(self, bind_host: str, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()) -> None:
        hosts = [entry.strip().lower() for entry in allowed_hosts]
        self.any_host = "*" in hosts or not is_loopback(bind_host.strip("[]"))
        self.hosts = frozenset({*LOOPBACK_NAMES, _bracketed(bind_host.lower()), *hosts})
        origins = [entry.strip().lower().rstrip("/") for entry in allowed_origins]
        self.any_origin = "*" in origins
        self.origins = frozenset(origins)

    @classmethod
    def of(cls, settings: Settings) -> Doors:
        return cls(settings.host, settings.allowed_hosts, settings.allowed_origins)

    def host_allowed(self, host: str | None) -> bool:
        if self.any_host:
            return True
        if not host:
            return False  # HTTP/1.1 requires it; a loopback server need not guess
        name, port = split_host(host)
        return name in self.hosts or (port is not None and f"{name}:{port}" in self.hosts)

    def origin_allowed(self, origin: str, host: str | None, scheme: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if self.any_origin or origin in self.origins:
            return True
        own = f"{'https' if scheme in ('https', 'wss') else 'http'}://{(host or '').lower()}"
        return bool(host) and origin == own

    def refusal(self, scope: Scope) -> HotloopError | None:
        """Why this request may not come in, or None."""
        headers = _headers(scope)
        host = headers.get("host")
        if not self.host_allowed(host):
            return InvalidHost(host or "")
        origin = headers.get("origin")
        if origin is None:
            return None
        guarded = scope["type"] == "websocket" or scope.get("method", "GET") in STATE_CHANGING
        if guarded and not self.origin_allowed(origin, host, scope.get("scheme", "http")):
            return OriginNotAllowed(origin)
        return None


def _headers(scope: Scope) -> dict[str, str]:
    wanted = {b"host": "host", b"origin": "origin"}
    found: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = wanted.get(name)
        if key is not None and key not in found:
            found[key] = value.decode("latin-1")
    return found


class DoorsMiddleware:
    """Refuse, before any route runs, what `Doors` refuses; everything else passes untouched."""

    def __init__(self, app: ASGIApp, doors: Doors) -> None:
        self.app = app
        self.doors = doors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.doors.refusal(scope) if scope["type"] in ("http", "websocket") else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await WebSocket(scope, receive, send).send_denial_response(error_response(refusal))
        else:
            await error_response(refusal)(scope, receive, send)
