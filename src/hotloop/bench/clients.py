"""One small client per mode (http-full, http-chain, ws) behind a common interface: send new items, time the turn;
the event tracking and the WebSocket opening they share with mode `inject` (bench/inject_loop.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

if TYPE_CHECKING:
    import httpx
    from websockets.asyncio.client import ClientConnection

MODES = ("http-full", "http-chain", "ws")
TIMING_HEADER = "x-responsesapi-include-timing-metrics"
TIMING_EVENT = "hotloop:timing_metrics"
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
FIRST_OUTPUT = frozenset(
    {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
    }
)

# A typed client tool's call streams no deltas (wire/builder.py): it comes whole, its `output_item.added` first.
ITEM_ADDED = "response.output_item.added"
TYPED_CALLS = frozenset({"shell_call", "apply_patch_call", "local_shell_call", "computer_call"})

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class BenchError(RuntimeError):
    """The server answered something a benchmark turn cannot use (an HTTP error, an error event, no terminal)."""


@dataclass
class TurnResult:
    """One turn as the client saw it; times are seconds from the moment the request was handed to the socket."""

    response_id: str
    status: str
    # to the first output delta (text, call arguments, MCP call arguments or custom input), or a typed call's item
    ttft_s: float | None
    turn_s: float  # to the terminal event
    input_tokens: int
    output_tokens: int
    output: list[dict[str, Any]]
    timings: dict[str, Any] | None  # the `hotloop:timing_metrics` event's `timings`, as sent
    cached_tokens: int = 0  # usage.input_tokens_details.cached_tokens (an upstream engine's prefix cache)


class Tracker:
    """Follows one response's events: first delta, timing metrics, terminal."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.ttft: float | None = None
        self.timings: dict[str, Any] | None = None
        self.result: TurnResult | None = None

    def feed(self, kind: str, data: bytes | str) -> bool:
        """Take one event (its type and JSON); True once the terminal event has arrived."""
        if self.ttft is None and first_output(kind, data):
            self.ttft = time.perf_counter() - self.start
            return False
        if kind == TIMING_EVENT:
            event = _decode(data)
            timings = event.get("timings")
            self.timings = timings if isinstance(timings, dict) else {"event": event}
            return False
        if kind == "error":
            raise BenchError(f"error event: {data!r}"[:2000])
        if kind not in TERMINAL:
            return False
        elapsed = time.perf_counter() - self.start
        response = _decode(data)["response"]
        usage = response.get("usage") or {}
        self.result = TurnResult(
            response_id=response["id"],
            status=response["status"],
            ttft_s=self.ttft,
            turn_s=elapsed,
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            output=list(response.get("output") or []),
            timings=self.timings,
            cached_tokens=int((usage.get("input_tokens_details") or {}).get("cached_tokens", 0)),
        )
        return True


def first_output(kind: str, data: bytes | str) -> bool:
    """Whether the event is a generation's first output: a delta, or the `output_item.added` of a typed call (its
    item decoded only then: a few items a turn)."""
    if kind in FIRST_OUTPUT:
        return True
    if kind != ITEM_ADDED:
        return False
    item = _decode(data).get("item")
    return isinstance(item, dict) and item.get("type") in TYPED_CALLS


class ModeClient(Protocol):
    """A conversation over one transport: each `turn` sends only what is new and returns the timed result."""

    mode: str

    async def turn(self, new_items: list[dict[str, Any]]) -> TurnResult: ...

    async def close(self) -> None: ...


class _HttpClient:
    """SSE over one keep-alive HTTP/1.1 connection (httpx)."""

    mode = ""

    def __init__(self, base_url: str, request: dict[str, Any], api_key: str | None) -> None:
        import httpx

        headers = {TIMING_HEADER: "true", "content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.request = request
        self.http: httpx.AsyncClient = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(300.0),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )

    async def _post(self, body: dict[str, Any]) -> TurnResult:
        content = _encode(body)
        start = time.perf_counter()
        tracker = Tracker(start)
        async with self.http.stream("POST", "/responses", content=content) as reply:
            if reply.status_code != 200:
                raise BenchError(f"HTTP {reply.status_code}: {(await reply.aread())[:2000]!r}")
            kind = ""
            async for line in reply.aiter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind:
                    tracker.feed(kind, line[6:])
                    kind = ""
        if tracker.result is None:
            raise BenchError("the SSE stream ended without a terminal event")
        return tracker.result

    async def close(self) -> None:
        await self.http.aclose()


class HttpFullClient(_HttpClient):
    """`http-full`: store=false, the whole history resent every turn."""

    mode = "http-full"

    def __init__(self, base_url: str, request: dict[str, Any], api_key: str | None = None) -> None:
        super().__init__(base_url, request, api_key)
        self.history: list[dict[str, Any]] = []

    async def turn(self, new_items: list[dict[str, Any]]) -> TurnResult:
        self.history.extend(new_items)
        result = await self._post({**self.request, "input": self.history, "store": False, "stream": True})
        self.history.extend(result.output)
        return result


class HttpChainClient(_HttpClient):
    """`http-chain`: store=true, previous_response_id and only the new items."""

    mode = "http-chain"

    def __init__(self, base_url: str, request: dict[str, Any], api_key: str | None = None) -> None:
        super().__init__(base_url, request, api_key)
        self.previous: str | None = None

    async def turn(self, new_items: list[dict[str, Any]]) -> TurnResult:
        body = {**self.request, "input": new_items, "store": True, "stream": True}
        if self.previous:
            body["previous_response_id"] = self.previous
        result = await self._post(body)
        self.previous = result.response_id
        return result


class WsClient:
    """`ws`: one WebSocket, store=false (unless the request fields say otherwise), previous_response_id and only
    the new items."""

    mode = "ws"

    def __init__(self, connection: ClientConnection, request: dict[str, Any]) -> None:
        self.connection = connection
        self.request = request
        self.previous: str | None = None

    @classmethod
    async def open(cls, base_url: str, request: dict[str, Any], api_key: str | None = None) -> WsClient:
        return cls(await ws_connect(base_url, api_key), request)

    async def turn(self, new_items: list[dict[str, Any]]) -> TurnResult:
        body = {"type": "response.create", "store": False, **self.request, "input": new_items}
        if self.previous:
            body["previous_response_id"] = self.previous
        frame = _encode(body).decode()
        start = time.perf_counter()
        tracker = Tracker(start)
        await self.connection.send(frame)
        while True:
            raw = await self.connection.recv()
            kind = _decode(raw).get("type", "") if len(raw) < 512 else kind_of(raw)
            if tracker.feed(kind, raw):
                break
        assert tracker.result is not None
        self.previous = tracker.result.response_id
        return tracker.result

    async def close(self) -> None:
        await self.connection.close()


async def ws_connect(base_url: str, api_key: str | None = None) -> ClientConnection:
    """A WebSocket to `base_url`'s /responses, asking for the timing metrics event."""
    from websockets.asyncio.client import connect

    url = base_url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/responses"
    headers = {TIMING_HEADER: "true"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return await connect(
        url, additional_headers=headers, max_size=None, compression=None, open_timeout=30, ping_interval=None
    )


def kind_of(raw: str | bytes) -> str:
    """The `type` of a large frame, read from its start (the server encodes `type` first) or by decoding it."""
    head = raw[:200] if isinstance(raw, str) else raw[:200].decode(errors="replace")
    marker = '"type":"'
    at = head.find(marker)
    if at >= 0:
        end = head.find('"', at + len(marker))
        if end > 0:
            return head[at + len(marker) : end]
    kind = _decode(raw).get("type", "")
    return str(kind)


async def open_client(mode: str, base_url: str, request: dict[str, Any], api_key: str | None = None) -> ModeClient:
    """A fresh conversation in `mode` whose every request carries the fields in `request` (model, tools, …)."""
    if mode == "http-full":
        return HttpFullClient(base_url, request, api_key)
    if mode == "http-chain":
        return HttpChainClient(base_url, request, api_key)
    if mode == "ws":
        return await WsClient.open(base_url, request, api_key)
    raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
