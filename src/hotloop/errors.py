"""The one family of errors a turn can raise; each transport maps it to the wire in one place (protocol.md §6)."""

from __future__ import annotations

import math
from typing import NamedTuple


class HotloopError(Exception):
    """An error a client sees: HTTP status, OpenAI error type, machine-readable code and the offending param."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_value"

    def __init__(
        self, message: str, *, param: str | None = None, code: str | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def payload(self) -> dict[str, str | None]:
        """The `error` object of protocol.md §1.9: all four keys always present."""
        return {"message": self.message, "type": self.type, "param": self.param, "code": self.code}


class InvalidParam(HotloopError):
    """A request field fails validation (400); `param` names the field."""


class InvalidJSON(HotloopError):
    code = "invalid_json"


class MissingParam(HotloopError):
    code = "missing_required_parameter"


class UnsupportedParam(HotloopError):
    code = "unsupported_parameter"


class PreviousResponseNotFound(HotloopError):
    code = "previous_response_not_found"

    def __init__(self, response_id: str, *, param: str = "previous_response_id") -> None:
        super().__init__(f"Previous response with id '{response_id}' not found.", param=param)


class McpServerNotAllowed(HotloopError):
    """A request's MCP `server_url` is outside the operator's allowlist (`mcp_allowed_urls`): no connection is made."""

    code = "mcp_server_not_allowed"


class McpListFailed(HotloopError):
    """424: an MCP server's tools could not be listed; nothing is generated or stored (protocol.md §1.10)."""

    status = 424
    type = "external_connector_error"
    code = "mcp_list_tools_failed"

    def __init__(self, label: str, why: str) -> None:
        super().__init__(f"Error retrieving tool list from MCP server: '{label}'. {why}", param="tools")


class NotFound(HotloopError):
    status = 404
    code = "response_not_found"


class ModelNotFound(HotloopError):
    status = 404
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model '{model}' does not exist or you do not have access to it.", param="model")


class Unauthorized(HotloopError):
    status = 401
    code = "invalid_api_key"

    def __init__(self, message: str = "Incorrect API key provided.") -> None:
        super().__init__(message)


class InvalidHost(HotloopError):
    """421: a `Host` this loopback server does not answer to (DNS rebinding; protocol.md §1.1)."""

    status = 421
    code = "invalid_host"

    def __init__(self, host: str) -> None:
        super().__init__(f"The Host header '{host}' is not an allowed host of this server (allowed_hosts).")


class OriginNotAllowed(HotloopError):
    """403: a WebSocket upgrade or a state-changing request from a foreign web page (protocol.md §1.1)."""

    status = 403
    code = "origin_not_allowed"

    def __init__(self, origin: str) -> None:
        super().__init__(f"Requests from the origin '{origin}' are not allowed (allowed_origins).")


class RequestTooLarge(HotloopError):
    status = 413
    code = "request_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeds the limit of {limit} bytes.")


class ConnectionLimit(HotloopError):
    code = "websocket_connection_limit_reached"


class RateLimited(HotloopError):
    """429 for a per-key limit (protocol.md §1.9): `type` names the limit (`requests` or `tokens`), the message says
    "try again in Ns" (Codex parses it) and `retry_after_s` becomes the `Retry-After` header."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, kind: str, retry_after_s: float, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.type = kind
        # Whole seconds, rounded up: a client that waits this long is admitted.
        self.headers = {"retry-after": str(max(1, math.ceil(round(retry_after_s, 3)))), **(headers or {})}


class ServerBusy(HotloopError):
    """503 for a create whose work cannot start in time (e.g. its grammars wait behind others' compiles)."""

    status = 503
    type = "server_error"
    code = "server_is_overloaded"


class ServerShuttingDown(HotloopError):
    """503 for a create that arrives while the server drains on SIGTERM; clients retry it elsewhere or later."""

    status = 503
    type = "server_error"
    code = "server_is_overloaded"

    def __init__(self) -> None:
        super().__init__("The server is shutting down and accepts no new responses; retry on a new connection.")
        self.headers = {"connection": "close"}  # over HTTP: the client's next request goes to a new connection


class ServerError(HotloopError):
    status = 500
    type = "server_error"
    code = "server_error"


class StoreUnavailable(HotloopError):
    status = 503
    type = "server_error"
    code = "store_unavailable"


class UpgradeRequired(HotloopError):
    """426: GET /v1/responses without an upgrade, or any upgrade while WebSocket mode is off (protocol.md §1.9)."""

    status = 426
    code = "upgrade_required"


class Failure(NamedTuple):
    """How a response's failure reads to a client: the HTTP status of a non-streaming reply, the error type (of
    the reply's body and of the in-band `error` event) and the param."""

    status: int
    type: str
    param: str | None


# A response that failed after it was accepted (protocol.md §1.9, §2.9), by its error code. A safety block, or an
# input longer than the upstream engine's real context, is the client's input, never a 500; an upstream engine's
# 429 is a 429, which OpenAI clients retry with backoff. Every other code is a server error.
FAILURES: dict[str, Failure] = {
    "store_unavailable": Failure(503, "server_error", None),
    "content_filter": Failure(400, "invalid_request_error", "input"),
    "context_length_exceeded": Failure(400, "invalid_request_error", "input"),
    "rate_limit_exceeded": Failure(429, "requests", None),
}
SERVER_FAILURE = Failure(500, "server_error", None)


def failure_of(code: str) -> Failure:
    return FAILURES.get(code, SERVER_FAILURE)
