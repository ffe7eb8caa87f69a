"""Server settings: defaults, then a TOML file, then `HOTLOOP_*` environment variables, then command-line flags."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import platformdirs

MiB = 1024 * 1024


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str = ""
    api_keys: list[str] = msgspec.field(default_factory=list)
    models: list[str] = msgspec.field(default_factory=lambda: ["smollm2-135m", "hotloop-sim"])
    default_model: str = "smollm2-135m"
    max_body_bytes: int = 16 * MiB
    strict_params: bool = False
    sse_done: bool = True
    websocket: bool = True
    ws_deflate: bool = False
    ws_lanes: bool = True
    ws_max_age_s: float = 3600.0
    ws_max_active: int = 16
    ws_max_named_lanes: int = 32
    ws_max_queued: int = 256
    ws_ping_interval_s: float = 20.0
    sim_ttft_ms: float = 20.0
    sim_tps: float = 1000.0
    sim_output_tokens: int = 32
    sim_tool_calls: int = 2
    sim_parallel_calls: int = 1
    sim_seed: int = 0
    llama_threads: int = 0
    llama_n_ctx: int = 8192
    safety_secrets: str = "flag"
    safety_injection: str = "flag"
    ledger_flush_ms: float = 200.0
    ledger_batch: int = 256
    token_cache_bytes: int = 64 * MiB
    chain_cache_entries: int = 4096
    metrics: bool = True
    log_level: str = "info"

    def resolved_data_dir(self) -> Path:
        path = Path(self.data_dir) if self.data_dir else Path(platformdirs.user_data_dir("hotloop"))
        path.mkdir(parents=True, exist_ok=True)
        return path


HELP: dict[str, str] = {
    "host": "Address to listen on.",
    "port": "TCP port for HTTP and WebSocket mode (same port, same path).",
    "data_dir": "Where the SQLite store and the server secret live (default: the user's data dir).",
    "api_keys": "Comma-separated API keys; empty accepts any credential or none.",
    "models": "Comma-separated models to serve: smollm2-135m, hotloop-sim.",
    "default_model": "Model used when a request names none.",
    "max_body_bytes": "Largest HTTP body or WebSocket frame accepted (413 / close 1009 beyond).",
    "strict_params": "Reject unknown request fields with 400 unknown_parameter instead of ignoring them.",
    "sse_done": "End SSE streams with `data: [DONE]`.",
    "websocket": "Serve WebSocket mode on GET /v1/responses (off: upgrades get 426).",
    "ws_deflate": "Accept permessage-deflate when a client offers it.",
    "ws_lanes": "Run named `stream_id` lanes concurrently (off: one FIFO per connection).",
    "ws_max_age_s": "WebSocket connection age limit in seconds.",
    "ws_max_active": "Most responses generating at once on one connection.",
    "ws_max_named_lanes": "Most distinct named stream_ids over a connection's life.",
    "ws_max_queued": "Most waiting response.create events per connection (beyond: close 1008).",
    "ws_ping_interval_s": "Seconds between server pings (0 disables).",
    "sim_ttft_ms": "hotloop-sim: time to first token in milliseconds.",
    "sim_tps": "hotloop-sim: output tokens per second.",
    "sim_output_tokens": "hotloop-sim: length of a text answer in tokens.",
    "sim_tool_calls": "hotloop-sim: K, the function calls it makes in a conversation before answering.",
    "sim_parallel_calls": "hotloop-sim: calls per response when parallel_tool_calls is true.",
    "sim_seed": "hotloop-sim: seed; same seed and input give the same output.",
    "llama_threads": "smollm2-135m: CPU threads for llama.cpp (0: all cores).",
    "llama_n_ctx": "smollm2-135m: context window in tokens.",
    "safety_secrets": "Secrets detector on new input: off, flag (recorded) or block (content-filter failure).",
    "safety_injection": "Prompt-injection heuristic on tool outputs: off, flag or block.",
    "ledger_flush_ms": "Usage ledger: longest wait before a batch of records is written to the store.",
    "ledger_batch": "Usage ledger: most records written in one batch.",
    "token_cache_bytes": "Bound of the content-addressed token cache for HTTP requests that resend history.",
    "chain_cache_entries": "Stored chains kept in memory for HTTP continuations on this process (0: none).",
    "metrics": "Serve Prometheus metrics on GET /metrics.",
    "log_level": "uvicorn log level.",
}


def _coerce(name: str, raw: str) -> Any:
    field_type = Settings.__annotations__[name]
    if field_type.startswith("list"):
        return [part.strip() for part in raw.split(",") if part.strip()]
    if field_type == "bool":
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if field_type == "int":
        return int(raw)
    if field_type == "float":
        return float(raw)
    return raw


def load_settings(config_file: str | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Merge the layers; raises `ValueError` naming the bad setting."""
    values: dict[str, Any] = {}
    if config_file:
        with open(config_file, "rb") as handle:
            values.update(tomllib.load(handle))
    for name in Settings.__struct_fields__:
        raw = os.environ.get(f"HOTLOOP_{name.upper()}")
        if raw is not None:
            try:
                values[name] = _coerce(name, raw)
            except ValueError as exc:
                raise ValueError(f"HOTLOOP_{name.upper()}: {exc}") from None
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value) if isinstance(value, str) else value
    try:
        return msgspec.convert(values, Settings)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid setting: {exc}") from None
