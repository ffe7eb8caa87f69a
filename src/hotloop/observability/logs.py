"""Structured logs: one JSON object per line, tagged with the request, connection and response they belong to.

Ids travel in context variables set by `RequestIds` (an ASGI middleware) and by the turn, so every log call in
between is tagged without passing ids around. Nothing here logs headers or bodies: API keys and message content
never reach a log line at any level (the access log names method, path and status only).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from contextvars import ContextVar
from typing import Any

import msgspec

from hotloop.config import Settings

request_id: ContextVar[str | None] = ContextVar("hotloop_request_id", default=None)
connection_id: ContextVar[str | None] = ContextVar("hotloop_connection_id", default=None)
response_id: ContextVar[str | None] = ContextVar("hotloop_response_id", default=None)
_IDS = (("request_id", request_id), ("connection_id", connection_id), ("response_id", response_id))
REQUEST_ID_HEADER = b"x-request-id"
_encode = msgspec.json.Encoder().encode


def new_request_id(prefix: str = "req") -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


# At debug level uvicorn's WebSocket protocol logs the handshake's headers, keys included: redact them there.
_SECRETS = re.compile(r"(?i)(authorization:\s*)[^\r\n\"]+|(openai-insecure-api-key\.)[^\s,\"']+")


class RedactSecrets(logging.Filter):
    """Replaces credentials in any log message (a header line, a subprotocol) before a handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "uthorization" in message or "insecure-api-key" in message or "UTHORIZATION" in message:
            record.msg = _SECRETS.sub(lambda m: (m.group(1) or m.group(2)) + "[redacted]", message)
            record.args = ()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _, status = record.args
            entry.update(message=f"{method} {path} {status}", client=client, method=method, path=path, status=status)
        else:
            entry["message"] = record.getMessage()
        for name, var in _IDS:
            value = var.get()
            if value is not None:
                entry[name] = value
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _encode(entry).decode()


def logging_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's `log_config`: hotloop's and uvicorn's loggers on stderr, as JSON or as uvicorn's plain text."""
    if settings.log_format == "json":
        formatter: dict[str, Any] = {"()": JsonFormatter}
        access: dict[str, Any] = {"()": JsonFormatter}
    else:
        formatter = {"()": "uvicorn.logging.DefaultFormatter", "fmt": "%(levelprefix)s %(name)s: %(message)s"}
        access = {
            "()": "uvicorn.logging.AccessFormatter",
            "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
        }
    level = settings.log_level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter, "access": access},
        "filters": {"redact": {"()": RedactSecrets}},
        "handlers": {
            name: {
                "class": "logging.StreamHandler",
                "formatter": name,
                "filters": ["redact"],
                "stream": "ext://sys.stderr",
            }
            for name in ("default", "access")
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
            "hotloop": {"handlers": ["default"], "level": level, "propagate": False},
        },
    }


class RequestIds:
    """ASGI middleware: a request id per HTTP request (also sent back as `x-request-id`), a connection id per
    WebSocket; both tag every log line written while the request or connection runs."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "websocket":
            token = connection_id.set(new_request_id("conn"))
            try:
                await self.app(scope, receive, send)
            finally:
                connection_id.reset(token)
            return
        if kind != "http":
            await self.app(scope, receive, send)
            return
        rid = new_request_id()
        token = request_id.set(rid)

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (REQUEST_ID_HEADER, rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)
