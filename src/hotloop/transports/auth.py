"""API keys (protocol.md §1.1): a Bearer token on every request and upgrade; browsers send it as a subprotocol."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers

from hotloop.errors import Unauthorized

BROWSER_KEY_PREFIX = "openai-insecure-api-key."


def presented_key(headers: Headers) -> str | None:
    """The key a client sent: `Authorization: Bearer …`, else a browser's `openai-insecure-api-key.<key>`."""
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    for protocol in headers.get("sec-websocket-protocol", "").split(","):
        protocol = protocol.strip()
        if protocol.startswith(BROWSER_KEY_PREFIX):
            return protocol[len(BROWSER_KEY_PREFIX) :]
    return None


def authenticate(headers: Headers, keys: list[str]) -> str | None:
    """The accepted key (None when no keys are configured); raises `Unauthorized` (401 `invalid_api_key`)."""
    key = presented_key(headers)
    if not keys:
        return None
    if key is None:
        raise Unauthorized("You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.")
    # Compare against every key in constant time so timing does not reveal which prefix matched.
    matched = [candidate for candidate in keys if hmac.compare_digest(candidate.encode(), key.encode())]
    if not matched:
        raise Unauthorized()
    return matched[0]


def selected_subprotocol(headers: Headers) -> str | None:
    """The plain protocol a browser offered beside its key (browsers require the server to pick one)."""
    for protocol in headers.get("sec-websocket-protocol", "").split(","):
        protocol = protocol.strip()
        if protocol and not protocol.startswith(BROWSER_KEY_PREFIX):
            return protocol
    return None
