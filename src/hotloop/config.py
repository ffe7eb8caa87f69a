"""Server settings: defaults, then a TOML file, then `HOTLOOP_*` environment variables, then command-line flags."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec
import platformdirs

MiB = 1024 * 1024

# What `drop_tool_types` defaults to: the hosted tool types unmodified clients send on every request, whatever the
# task, and that nothing a server can say stops (protocol.md §1.4; docs/protocol-notes.md, "What clients send by
# default"): Codex CLI's `web_search`; Cline's `web_search` and `image_generation` (openai-native provider).
# Kept here, at the bottom of the house, so that pipeline/tools.py reads the same tuple.
DEFAULT_DROPPED_TOOL_TYPES = ("web_search", "image_generation")


class Upstream(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A served model that another engine runs (docs/backends.md): one `[upstreams.<name>]` table."""

    backend: Literal["openai-chat", "tokens"] = "openai-chat"
    # One base URL (ending in /v1 for the OpenAI-style APIs); `urls`: several replicas (backends/upstream/routing.py).
    url: str = ""
    urls: list[str] = msgspec.field(default_factory=list)
    upstream_model: str = ""  # the engine's name for the model (default: the served name)
    api_key: str = ""
    context_window: int = 131_072
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0  # longest silence between two chunks of the upstream's stream
    retries: int = 2  # attempts after the first, only before the first token
    max_connections: int = 256
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # Which reasoning items go back to the model (the tool chain in progress, since the last user message; all;
    # none); `openai-chat`: in which field of the assistant message (docs/backends.md).
    reasoning_replay: Literal["chain", "all", "none"] = "chain"
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    # How `reasoning.effort` reaches the engine: its `reasoning_effort` (vLLM with gpt-oss, OpenAI), Qwen3-style
    # `chat_template_kwargs.enable_thinking` (off only for effort "none"), Ollama's `think`, or not at all.
    reasoning_effort: Literal["reasoning_effort", "enable_thinking", "think", "off"] = "reasoning_effort"
    # `tokens` (backends/upstream/tokens.py): the engine's token-ID API, the tokenizer and template, the tool-call
    # format.
    dialect: Literal["vllm", "sglang", "llamacpp"] = "vllm"
    tokenizer: str = ""  # a tokenizer.json or a model directory; empty: SmolLM2's
    chat_template: str = ""  # a Jinja file; empty: the tokenizer's directory's (tokenizer_config.json)
    tool_parser: Literal["hermes", "json", "none"] = "hermes"
    # `tokens`: the model's reasoning in its output: `<think>…</think>` (Qwen3, DeepSeek-R1, GLM), gpt-oss's
    # harmony channels (which carry its tool calls too, and make hotloop render the prompt in harmony), or none.
    reasoning_parser: Literal["think", "harmony", "none"] = "none"
    sglang_incremental_output: bool = False  # the SGLang server runs with --incremental-streaming-output
    # Replica routing: a replica with this many requests in flight is saturated (0: no cap); this many failures
    # in a row mark it down for down_cooldown_s.
    replica_max_in_flight: int = 0
    replica_failures: int = 2
    down_cooldown_s: float = 5.0

    def base_urls(self) -> list[str]:
        return [self.url] if self.url else list(self.urls)


class McpServer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A remote MCP server the operator configures by label (docs/mcp.md): one `[mcp_servers.<label>]` table. A
    request names it by `server_label` alone; its headers (credentials) never leave this file."""

    url: str
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    transport: Literal["streamable_http", "sse", "auto"] = "auto"  # auto: SSE when the path ends in /sse


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str = ""
    secret_key_file: str = ""
    store_url: str = ""
    retention_ttl_s: float = 0.0
    retention_max_bytes: int = 0
    workers: int = 0
    api_keys: list[str] = msgspec.field(default_factory=list)
    allow_unauthenticated: bool = False
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    models: list[str] = msgspec.field(default_factory=lambda: ["smollm2-135m", "hotloop-sim"])
    default_model: str = "smollm2-135m"
    max_body_bytes: int = 16 * MiB
    files_max_bytes: int = 512 * MiB
    containers_max_per_key: int = 100
    containers_max_files: int = 1000
    containers_sweep_s: float = 10.0
    code_interpreter: bool = True
    code_timeout_s: float = 60.0
    containers_live_max: int = 32
    containers_egress_private: bool = False
    skills_max_per_key: int = 1000
    file_search_workers: int = 2
    file_search_embeddings_url: str = ""
    file_search_embeddings_model: str = ""
    file_search_embeddings_api_key: str = ""
    file_search_embeddings_dimensions: int = 0
    strict_params: bool = False
    sse_done: bool = True
    stream_flush_ms: float = 5.0
    reasoning_events: Literal["openai", "openresponses", "none"] = "openai"
    websocket: bool = True
    ws_deflate: bool = False
    ws_lanes: bool = True
    ws_max_age_s: float = 3600.0
    ws_max_active: int = 16
    ws_max_named_lanes: int = 32
    ws_max_queued: int = 256
    ws_ping_interval_s: float = 20.0
    max_connections: int = 4096
    max_connections_per_key: int = 512
    rate_limit_rpm: int = 0
    rate_limit_tpm: int = 0
    shutdown_grace_s: float = 10.0
    backend_timeout_s: float = 60.0
    sim_ttft_ms: float = 20.0
    sim_tps: float = 1000.0
    sim_output_tokens: int = 32
    sim_tool_calls: int = 2
    sim_parallel_calls: int = 1
    sim_seed: int = 0
    sim_reasoning_tokens: int = 0
    sim_prefer_tools: list[str] = msgspec.field(default_factory=list)
    sim_context_window: int = 131_072
    llama_threads: int = 0
    llama_n_ctx: int = 8192
    llama_kv_cache_bytes: int = 256 * MiB
    safety_secrets: str = "flag"
    safety_injection: str = "flag"
    ledger_flush_ms: float = 200.0
    ledger_batch: int = 256
    token_cache_bytes: int = 64 * MiB
    resend_cache_bytes: int = 64 * MiB
    chain_cache_entries: int = 4096
    chain_cache_bytes: int = 256 * MiB
    connection_cache_bytes: int = 64 * MiB
    metrics: bool = True
    otel_traces: bool = False
    otel_endpoint: str = ""
    otel_protocol: Literal["", "http/protobuf", "grpc"] = ""
    otel_content: bool = False
    console: bool = True
    console_sample_s: float = 10.0
    admin_key: str = ""
    log_level: str = "info"
    log_format: Literal["json", "text"] = "json"
    upstreams: dict[str, Upstream] = msgspec.field(default_factory=dict)
    mcp_allowed_urls: list[str] = msgspec.field(default_factory=list)
    mcp_servers: dict[str, McpServer] = msgspec.field(default_factory=dict)
    mcp_call_timeout_s: float = 60.0
    mcp_list_timeout_s: float = 20.0
    mcp_max_output_bytes: int = 1 * MiB
    mcp_session_idle_s: float = 300.0
    mcp_max_calls: int = 64
    # How long a multi-agent response waits on WebSocket for `response.inject` outputs before it ends with its
    # calls unanswered (pipeline/inject.py); 0: no bound but the connection's own.
    ws_inject_wait_s: float = 600.0
    # A multi-agent response's subagents (pipeline/agents/): how many one response may spawn in all, and how deep
    # (1: the root's subagents spawn none). `max_concurrent_subagents` bounds how many run at once.
    multi_agent_max_subagents: int = 32
    multi_agent_max_depth: int = 1
    # A custom tool's grammar still compiling after this is refused (pipeline/grammars.py): a hostile grammar
    # holds one compile slot this long at the door, never the event loop.
    grammar_compile_timeout_s: float = 2.0
    mcp_client: Literal["lean", "sdk"] = "lean"
    # Tool types left out of a request instead of refused (protocol.md §1.4): hosted tools this server does not run
    # that unmodified clients always send (DEFAULT_DROPPED_TOOL_TYPES).
    drop_tool_types: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_DROPPED_TOOL_TYPES))

    def resolved_workers(self) -> int:
        """`workers`, with 0 read as one per core this process may run on."""
        return self.workers or available_cores()

    def resolved_data_dir(self) -> Path:
        path = Path(self.data_dir) if self.data_dir else Path(platformdirs.user_data_dir("hotloop"))
        path.mkdir(parents=True, exist_ok=True)
        return path


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


HELP: dict[str, str] = {
    "host": "Address to listen on.",
    "port": "TCP port for HTTP and WebSocket mode (same port, same path).",
    "data_dir": "Where the SQLite store and the server secret live (default: the user's data dir).",
    "secret_key_file": "A file holding the server secret (32 bytes or more) that signs encrypted items, the same "
    "file on every replica (a Kubernetes Secret's volume); empty: data_dir/secret.key, created when missing.",
    "store_url": "Response store: sqlite:///path, redis://host:port/db?prefix=P or "
    "postgresql://user@host/db?schema=S (default: sqlite in data_dir; docs/stores.md).",
    "retention_ttl_s": "Stored responses older than this many seconds are deleted (0: kept until deleted).",
    "retention_max_bytes": "Byte budget of stored responses (JSON bytes); the oldest are deleted beyond it "
    "(0: no budget).",
    "workers": "Server processes accepting on the one port, under a supervisor (0: one per core; 1: a single "
    "process); they share the store and the "
    "data_dir secret (each has its own caches and metrics).",
    "api_keys": "Comma-separated API keys; empty accepts any credential or none.",
    "allow_unauthenticated": "Serve without api_keys on an address beyond loopback (0.0.0.0, ::, a LAN address, a "
    "host name other than localhost): without it such a server refuses to start; with it, it starts and logs a "
    "warning each time. Loopback needs neither.",
    "allowed_hosts": "While bound to a loopback address: Host names (name or name:port) answered besides localhost, "
    "127.0.0.1, [::1] and the bind address; others get 421 (* allows any).",
    "allowed_origins": "Origins (scheme://host:port) whose pages may open a WebSocket or send state-changing "
    "requests, besides the server's own; others get 403 (* allows any).",
    "models": "Comma-separated models to serve: smollm2-135m, hotloop-sim, or a name defined in `upstreams`.",
    "default_model": "Model used when a request names none.",
    "max_body_bytes": "Largest HTTP body or WebSocket frame accepted (413 / close 1009 beyond).",
    "files_max_bytes": "The largest file POST /v1/files takes (OpenAI: 512 MB), and the largest container file "
    "(uploaded, or written by a container's code); larger ones get 413 and nothing is stored.",
    "containers_max_per_key": "Most live containers (/v1/containers) one API key may hold; a create beyond gets 400 "
    "containers_limit_reached (deleted and expired ones do not count).",
    "containers_max_files": "Most files one container holds (uploaded, copied or written by its code); beyond: 400 "
    "container_files_limit_reached. Each file holds at most files_max_bytes.",
    "skills_max_per_key": "Most skills (/v1/skills) one API key may hold, each with up to 1000 versions of at most "
    "50 MB; a create beyond gets 400 skills_limit_reached.",
    "containers_sweep_s": "Seconds between two sweeps of each replica that delete the containers idle past their "
    "expires_after, with their files (an expired one reads as gone at once).",
    "code_interpreter": "Run the code_interpreter tool's code and a hosted shell's commands in containers "
    "(docs/code-interpreter.md); off, or where the sandbox cannot start (docs/sandbox.md), both are refused by name "
    "(400 unsupported_tool) with the reason.",
    "code_timeout_s": "Wall-clock seconds one code_interpreter run may take (its CPU time is bounded alike); past it "
    "the kernel is stopped, the call ends failed, and the container's next run starts a fresh kernel. It also bounds "
    "each command of a hosted shell (a call's timeout_ms may only shorten it): past it, its outcome is a timeout.",
    "containers_live_max": "Containers whose sandbox (a process tree with its kernel) each server worker keeps live; "
    "past it the least recently used one is closed (its files stay in the store; its kernel's variables go).",
    "containers_egress_private": "Let a container whose network_policy allows domains reach them at addresses that "
    "are not public (loopback, private, link-local): off, an allowed name that resolves to one is refused, since the "
    "server's own stores may listen there (docs/sandbox.md, 'Network'). On for a package mirror on your network.",
    "file_search_workers": "Processes that ingest vector stores' files (extract, chunk, embed) on this replica (shared "
    "out over its server workers), one file at a time each, at a lower priority than the server; 0: none here.",
    "file_search_embeddings_url": "An OpenAI-compatible /v1 base URL whose /embeddings file_search embeds with (vLLM, "
    "llama.cpp, TEI, Ollama); empty: the embedded model (wordllama-l2-supercat-256).",
    "file_search_embeddings_model": "The model named to file_search_embeddings_url.",
    "file_search_embeddings_api_key": "The key sent to file_search_embeddings_url (never logged).",
    "file_search_embeddings_dimensions": "`dimensions` asked of file_search_embeddings_url; 0: the model's own.",
    "strict_params": "Reject unknown request fields with 400 unknown_parameter instead of ignoring them.",
    "sse_done": "End SSE streams with `data: [DONE]`.",
    "stream_flush_ms": "WebSocket and SSE: a delta event that follows the last written delta by less than this many "
    "milliseconds waits until then, so the deltas of a fast model share a write; other events never wait (0: "
    "every delta is written in the loop iteration that made it).",
    "reasoning_events": "How a reasoning item's raw text streams: openai (response.reasoning_text.*: openai-python's "
    "types, Codex's live reasoning), openresponses (response.reasoning.*) or none (the text in output_item.done "
    "only; protocol.md §2.6).",
    "websocket": "Serve WebSocket mode on GET /v1/responses (off: upgrades get 426).",
    "ws_deflate": "Accept permessage-deflate when a client offers it.",
    "ws_lanes": "Run named `stream_id` lanes concurrently (off: one FIFO per connection).",
    "ws_max_age_s": "WebSocket connection age limit in seconds.",
    "ws_max_active": "Most responses generating at once on one connection.",
    "ws_max_named_lanes": "Most distinct named stream_ids over a connection's life.",
    "ws_max_queued": "Most waiting response.create events per connection (beyond: close 1008).",
    "ws_ping_interval_s": "Seconds between server pings (0 disables).",
    "max_connections": "Most open WebSocket connections on this server, all workers together (beyond: the upgrade "
    "gets 429; 0: no limit).",
    "max_connections_per_key": "Most open WebSocket connections per API key, all workers together (0: no limit).",
    "rate_limit_rpm": "Per-key requests per minute, HTTP and WebSocket creates, all workers together (0: no limit).",
    "rate_limit_tpm": "Per-key input plus output tokens per minute, all workers together (0: no limit).",
    "shutdown_grace_s": "On SIGTERM, seconds in-flight responses get to finish before they fail (server_error).",
    "backend_timeout_s": "Longest wait for the model's next token before the response fails (0: no limit).",
    "sim_ttft_ms": "hotloop-sim: time to first token in milliseconds.",
    "sim_tps": "hotloop-sim: output tokens per second.",
    "sim_prefer_tools": "hotloop-sim: names of tools it calls before any other when a request offers them.",
    "sim_output_tokens": "hotloop-sim: length of a text answer in tokens.",
    "sim_tool_calls": "hotloop-sim: K, the function calls it makes in a conversation before answering.",
    "sim_parallel_calls": "hotloop-sim: calls per response when parallel_tool_calls is true.",
    "sim_seed": "hotloop-sim: seed; same seed and input give the same output.",
    "sim_context_window": "hotloop-sim: its context window in tokens (a longer prompt is refused, or truncated or "
    "compacted when the request asks).",
    "sim_reasoning_tokens": "hotloop-sim: a reasoning model's thinking, in tokens, before each answer or call "
    "(0: none); streamed as a reasoning item.",
    "llama_threads": "smollm2-135m: CPU threads for llama.cpp (0: all cores).",
    "llama_n_ctx": "smollm2-135m: context window in tokens.",
    "llama_kv_cache_bytes": "smollm2-135m: byte bound of the KV state snapshots of recent chains (LRU; 0: "
    "only the live context is reused; docs/models.md).",
    "safety_secrets": "Secrets detector on new input: off, flag (recorded) or block (content-filter failure).",
    "safety_injection": "Prompt-injection heuristic on tool outputs: off, flag or block.",
    "ledger_flush_ms": "Usage ledger: longest wait before a batch of records is written to the store.",
    "ledger_batch": "Usage ledger: most records written in one batch.",
    "token_cache_bytes": "Bound of the content-addressed token cache for HTTP requests that resend history.",
    "resend_cache_bytes": "Bound of the recent inputs of requests that resend their whole history, by key: a "
    "request that starts with one is prepared from it (0: none).",
    "chain_cache_entries": "Stored chains kept in memory for HTTP continuations on this process (0: none).",
    "chain_cache_bytes": "Byte bound of the in-memory chain cache; least recently used chains go first.",
    "connection_cache_bytes": "Byte bound of all WebSocket connection caches on this process together (LRU).",
    "metrics": "Serve Prometheus metrics on GET /metrics.",
    "otel_traces": "OpenTelemetry traces over OTLP to the standard OTEL_EXPORTER_OTLP_* variables' collector (also on "
    "when otel_endpoint or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set; docs/tracing.md).",
    "otel_endpoint": "OTLP collector for traces (http/protobuf: its base URL, e.g. http://127.0.0.1:4318; grpc: "
    "host:port or a URL); empty: the standard variables'.",
    "otel_protocol": "OTLP protocol for traces: http/protobuf or grpc (empty: OTEL_EXPORTER_OTLP_PROTOCOL, else "
    "http/protobuf).",
    "otel_content": "Put prompts and outputs on the response spans (gen_ai.input.messages, gen_ai.output.messages).",
    "console": "Serve the web console at / (its live numbers at GET /v1/console/state).",
    "console_sample_s": "Seconds between two points of the console's time series (an hour of them is kept).",
    "admin_key": "Key for the console's live numbers when api_keys are set (they show every key's usage).",
    "log_level": "Log level of hotloop and uvicorn: debug, info, warning, error.",
    "log_format": "json (one object per line, with request, connection and response ids) or text.",
    "upstreams": "Models served by other engines, one `[upstreams.<name>]` table each (docs/backends.md); "
    "HOTLOOP_UPSTREAMS takes the same tables as JSON.",
    "mcp_allowed_urls": "URL prefixes of the MCP servers a request may name in `server_url` (scheme, host and port "
    "exact, path a prefix); empty: none, only `mcp_servers` (docs/mcp.md).",
    "mcp_servers": "MCP servers requests name by `server_label` alone, one `[mcp_servers.<label>]` table each "
    "(url, headers, transport); HOTLOOP_MCP_SERVERS takes the same tables as JSON.",
    "mcp_call_timeout_s": "Longest an MCP tool call may take; then the model sees it failed.",
    "mcp_list_timeout_s": "Longest listing an MCP server's tools may take; then the create fails with 424.",
    "drop_tool_types": "Tool types a request may send that are left out instead of refused with 400 "
    "unsupported_tool (default: web_search, which Codex and Cline always send, and image_generation, which Cline "
    "always sends); a tool_choice naming one is still refused. Drops are logged once per connection (HTTP: per "
    "key and set of types) and counted per turn in hotloop_tools_dropped_total.",
    "mcp_max_output_bytes": "An MCP tool's output beyond this many bytes is cut, with a note saying so.",
    "mcp_session_idle_s": "An MCP session unused this long is closed.",
    "grammar_compile_timeout_s": "Longest a custom tool's grammar may compile when a request first brings it; past "
    "it the request is 400 naming the grammar, and the same grammar is refused at once later.",
    "ws_inject_wait_s": "Longest a multi-agent response (multi_agent.enabled, WebSocket) waits for response.inject "
    "outputs for its client's calls; then it ends completed with the calls unanswered, as a response over HTTP does "
    "(0: no bound but the connection's age limit).",
    "multi_agent_max_subagents": "Most subagents one multi-agent response may spawn; a spawn_agent past it is "
    "answered with an error the model reads.",
    "multi_agent_max_depth": "How deep a multi-agent response's subagents may nest (1: only the root spawns).",
    "mcp_max_calls": "Most MCP calls and server-run tool searches in one response when the request sets no "
    "max_tool_calls.",
    "mcp_client": "The client for streamable HTTP MCP servers: lean (hotloop's own, on its keep-alive HTTP/1.1 "
    "pool) or sdk (the official `mcp` SDK's); legacy SSE servers always get the SDK's (docs/mcp.md).",
}


def _coerce(name: str, raw: str) -> Any:
    field_type = Settings.__annotations__[name]
    if field_type.startswith("dict"):
        return json.loads(raw)  # a table (upstreams) as JSON; msgspec.convert checks its fields
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
