"""A request's `{"type": "mcp"}` tools: validated once per chain (pipeline/tools.py), then checked against the
operator's allowlist and configured servers on every request (`endpoints`), before any connection is made.

Filters follow openai-python's `types.responses.tool.Mcp`: `allowed_tools` is a list of names or
`{tool_names, read_only}`; `require_approval` is `"always"`, `"never"` or `{always: filter, never: filter}`. A filter
matches a tool when every condition it states holds (its name is listed; its `readOnlyHint` equals `read_only`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import msgspec

from hotloop.config import McpServer, Settings
from hotloop.errors import InvalidParam, McpServerNotAllowed, UnsupportedParam
from hotloop.mcp import Endpoint, transport_for
from hotloop.wire.items import McpListedTool

# Fields of an MCP tool this server cannot serve: a connector or tunnel is OpenAI's own infrastructure.
UNAVAILABLE = ("connector_id", "tunnel_id")
# What an echoed (and stored) MCP tool never carries: credentials.
SECRET_FIELDS = ("authorization", "headers")


class Filter(msgspec.Struct, frozen=True):
    names: frozenset[str] | None = None  # None: any name
    read_only: bool | None = None  # None: either

    def matches(self, tool: McpListedTool) -> bool:
        if self.names is not None and tool.name not in self.names:
            return False
        if self.read_only is None:
            return True
        return bool((tool.annotations or {}).get("readOnlyHint")) is self.read_only


class Declared(msgspec.Struct, frozen=True):
    """One MCP tool of a request, as sent (its secrets kept here only, never echoed)."""

    index: int  # its place in `tools`, for the params of errors
    label: str
    url: str | None
    headers: tuple[tuple[str, str], ...]
    authorization: str | None
    allowed: Filter | None  # None: every listed tool
    ask: Filter | None  # tools that need approval
    skip: Filter | None  # tools that never need approval
    ask_rest: bool  # a tool neither filter matches needs approval (OpenAI's default: ask)
    description: str | None
    deferred: bool = False  # `defer_loading`: its tools are listed, and loaded only by a tool_search (§1.11)

    def offered(self, tool: McpListedTool) -> bool:
        return self.allowed is None or self.allowed.matches(tool)

    def needs_approval(self, tool: McpListedTool) -> bool:
        if self.skip is not None and self.skip.matches(tool):
            return False
        if self.ask is not None and self.ask.matches(tool):
            return True
        return self.ask_rest


def declare(raw: dict[str, Any], index: int) -> tuple[dict[str, Any], Declared]:
    """The tool as echoed (without credentials) and as declared; raises `InvalidParam` naming the field."""
    param = f"tools[{index}]"
    for field in UNAVAILABLE:
        if raw.get(field) is not None:
            raise UnsupportedParam(
                f"'{field}' is not available on this server; give a server_url.", param=f"{param}.{field}"
            )
    label = raw.get("server_label")
    if not isinstance(label, str) or not label:
        raise InvalidParam(
            "An mcp tool needs a string 'server_label'.", param=f"{param}.server_label", code="invalid_type"
        )
    url = _optional_str(raw, "server_url", param)
    authorization = _optional_str(raw, "authorization", param)
    description = _optional_str(raw, "server_description", param)
    headers = raw.get("headers")
    if headers is not None and (not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values())):
        raise InvalidParam("'headers' must map names to strings.", param=f"{param}.headers", code="invalid_type")
    ask, skip, ask_rest = _approval(raw.get("require_approval"), f"{param}.require_approval")
    declared = Declared(
        index=index,
        label=label,
        url=url,
        headers=tuple((str(k), v) for k, v in (headers or {}).items()),
        authorization=authorization,
        allowed=_allowed(raw.get("allowed_tools"), f"{param}.allowed_tools"),
        ask=ask,
        skip=skip,
        ask_rest=ask_rest,
        description=description,
        deferred=raw.get("defer_loading") is True,
    )
    return {k: v for k, v in raw.items() if k not in SECRET_FIELDS}, declared


def _optional_str(raw: dict[str, Any], field: str, param: str) -> str | None:
    value = raw.get(field)
    if value is not None and not isinstance(value, str):
        raise InvalidParam(f"'{field}' must be a string.", param=f"{param}.{field}", code="invalid_type")
    return value


def _filter(raw: Any, param: str) -> Filter:
    if isinstance(raw, list):
        raw = {"tool_names": raw}
    if not isinstance(raw, dict):
        raise InvalidParam(
            "A tool filter is a list of names or {tool_names, read_only}.", param=param, code="invalid_type"
        )
    names, read_only = raw.get("tool_names"), raw.get("read_only")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise InvalidParam("'tool_names' must be a list of strings.", param=f"{param}.tool_names", code="invalid_type")
    if read_only is not None and not isinstance(read_only, bool):
        raise InvalidParam("'read_only' must be a boolean.", param=f"{param}.read_only", code="invalid_type")
    return Filter(frozenset(names) if names is not None else None, read_only)


def _allowed(raw: Any, param: str) -> Filter | None:
    return None if raw is None else _filter(raw, param)


def _approval(raw: Any, param: str) -> tuple[Filter | None, Filter | None, bool]:
    """(ask filter, skip filter, ask the rest)."""
    if raw is None or raw == "always":
        return None, None, True
    if raw == "never":
        return None, None, False
    if not isinstance(raw, dict):
        raise InvalidParam("require_approval is 'always', 'never' or {always, never}.", param=param)
    always, never = raw.get("always"), raw.get("never")
    ask = _filter(always, f"{param}.always") if always is not None else None
    skip = _filter(never, f"{param}.never") if never is not None else None
    # A tool matched by neither filter is asked about: OpenAI's default, and the safe side.
    return ask, skip, True


def endpoint(declared: Declared, settings: Settings) -> Endpoint:
    """Where a declared server is reached: a configured server by its label (its headers first), or a request's
    `server_url` inside the allowlist; raises `McpServerNotAllowed` (400) before any connection."""
    param = f"tools[{declared.index}].server_url"
    configured = settings.mcp_servers.get(declared.label)
    url = declared.url
    if url is None:
        if configured is None:
            raise InvalidParam(
                f"MCP server '{declared.label}' needs a server_url (no server of that label is configured).",
                param=param,
                code="missing_required_parameter",
            )
        url = configured.url
    elif (configured is None or not same_server(url, configured.url)) and not allowed(url, settings.mcp_allowed_urls):
        raise McpServerNotAllowed("The MCP server URL is not allowed on this server (mcp_allowed_urls).", param=param)
    headers = dict(configured.headers) if configured is not None and same_server(url, configured.url) else {}
    headers.update(declared.headers)
    if declared.authorization:
        headers["Authorization"] = f"Bearer {declared.authorization}"
    return Endpoint(url=url, headers=tuple(sorted(headers.items())), transport=_transport(url, configured))


def _transport(url: str, configured: McpServer | None) -> Any:
    if configured is not None and configured.transport != "auto":
        return configured.transport
    return transport_for(url)


def same_server(url: str, other: str) -> bool:
    return url.rstrip("/") == other.rstrip("/")


def allowed(url: str, prefixes: list[str]) -> bool:
    """Whether `url` is inside one of `prefixes`: scheme, host and port the same, the path under the prefix's (on a
    segment boundary, so `http://h/a` does not admit `http://h/ab` nor `http://h.evil`)."""
    try:
        target = urlsplit(url)
        port = target.port
    except ValueError:
        return False
    if target.scheme not in ("http", "https") or not target.hostname or target.username or target.password:
        return False
    for prefix in prefixes:
        try:
            base = urlsplit(prefix)
            base_port = base.port
        except ValueError:
            continue
        if (base.scheme, base.hostname, _port(base.scheme, base_port)) != (
            target.scheme,
            target.hostname,
            _port(target.scheme, port),
        ):
            continue
        root = base.path.rstrip("/")
        if target.path == root or target.path.startswith(root + "/") or not root:
            return True
    return False


def _port(scheme: str, port: int | None) -> int:
    return port if port is not None else (443 if scheme == "https" else 80)
