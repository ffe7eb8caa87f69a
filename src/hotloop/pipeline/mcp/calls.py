"""The MCP calls of one response (protocol.md §1.10): when a generation ends with calls to MCP tools, the server
runs them (those of one step at once), their `mcp_call` items end as each returns, and the turn generates again
with the calls and outputs appended to its prompt (pipeline/turn.py).

A call never fails the response: a server that errs, answers late or too much is an `mcp_call` with an error (or
a cut output) that the model reads. A steer stops the calls in flight; a cancelled turn cancels them.

An output is third-party text, so the safety stage reads it before the model does, as it reads a client's tool
outputs (docs/safety.md): a finding is recorded (`findings`, the response's `hotloop_safety_output` metadata), and
an output its policy blocks is withheld: the call ends with an error saying so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from concurrent.futures import Executor
from typing import Any

import msgspec

from hotloop.mcp import CallError, CallResult, Clients, Endpoint, NotAllowed
from hotloop.observability.metrics import Metrics
from hotloop.pipeline.mcp.recent import CallRecord, RecentCalls
from hotloop.safety import SafetyStage
from hotloop.safety.base import Finding
from hotloop.safety.stage import SUMMARY_MAX
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.events import Event
from hotloop.wire.items import McpCall

# JSON-RPC's codes for what the server refused before calling (MCP reuses them).
INVALID_PARAMS = -32602
REQUEST_CANCELLED = -32800
NOT_RUN = CallError(
    type="mcp_protocol_error", code=REQUEST_CANCELLED, message="Not run: the response reached max_tool_calls."
)
STEERED = CallError(type="mcp_protocol_error", code=REQUEST_CANCELLED, message="Stopped: the response was steered.")
OUTPUT_SAFETY_KEY = "hotloop_safety_output"  # the response's metadata: what the safety stage found in outputs
WITHHELD = "The tool's output was withheld: this server's safety policy blocks what it found in it."


class Calls:
    """The MCP calls one response runs: at most `limit` (its `max_tool_calls`, or the server's bound), which its
    server-run tool searches share (`spend`, searches.py)."""

    def __init__(
        self,
        clients: Clients,
        owner: str,
        endpoints: dict[str, Endpoint],
        limit: int,
        metrics: Metrics,
        recent: RecentCalls,
        safety: SafetyStage,
        offered: frozenset[tuple[str, str]],
        pool: Executor | None = None,
    ) -> None:
        self.clients = clients
        self.owner = owner
        self.endpoints = endpoints
        self.limit = limit
        self.metrics = metrics
        self.recent = recent
        self.safety = safety
        self.offered = offered  # (server label, tool) of the MCP tools the request offers
        self.pool = pool  # where the safety stage reads a long output, off the event loop
        self.findings: list[tuple[int, Finding]] = []  # (output index, finding) of the outputs read so far
        self.made = 0

    def summary(self) -> str:
        """The `hotloop_safety_output` value: `classifier:rule@i` per finding, `i` the output's index."""
        return "; ".join(f"{f.classifier}:{f.rule}@{index}" for index, f in self.findings)[:SUMMARY_MAX]

    @property
    def exhausted(self) -> bool:
        return self.made >= self.limit

    @property
    def room(self) -> int:
        """The built-in calls the response may still run."""
        return max(0, self.limit - self.made)

    def spend(self, count: int) -> None:
        """`count` built-in calls run besides the MCP calls (the server's tool searches)."""
        self.made += count

    async def run(
        self, builder: ResponseBuilder, indexes: list[int], steered: asyncio.Event
    ) -> AsyncGenerator[Event, None]:
        """Run the calls at `indexes` of the response's output at once; their items end in output order (a
        response's `output_item.done` events come in index order), each as soon as it and those before it have
        returned. Past the limit a call is not run; a steer (`steered` set) stops the calls still running."""
        output = builder.response.output
        room = self.room
        running: list[tuple[int, asyncio.Task[CallResult] | None, CallRecord | None]] = []
        for position, index in enumerate(indexes):
            item = output[index]
            assert isinstance(item, McpCall)
            if position >= room:
                running.append((index, None, None))
                continue
            self.made += 1
            yield builder.mcp_call_running(index)
            record = self.recent.begin(item.id, item.server_label, item.name, self.owner)
            running.append((index, asyncio.ensure_future(self._screened(index, item)), record))
        steer = asyncio.ensure_future(steered.wait())
        try:
            for index, task, began in running:
                result = await _result(task, steer)
                if began is not None:
                    self._count(result, began)
                for event in _finished(builder, index, result):
                    yield event
        finally:
            steer.cancel()
            for _, task, _ in running:
                if task is not None:
                    task.cancel()

    async def _screened(self, index: int, item: McpCall) -> CallResult:
        result = await self._call(item)
        if result.output is None:
            return result
        read = await self.safety.scan_async(None, [msgspec.structs.replace(item, output=result.output)], self.pool)
        self.findings += [(index, finding) for finding in read.findings]
        if read.verdict != "block":
            return result
        content = [{"type": "text", "text": WITHHELD}]
        return CallResult(error=CallError(type="mcp_tool_execution_error", content=content), seconds=result.seconds)

    async def _call(self, item: McpCall) -> CallResult:
        try:
            arguments = json.loads(item.arguments or "{}")
        except ValueError as exc:
            return CallResult(
                error=CallError(type="mcp_protocol_error", code=INVALID_PARAMS, message=f"Invalid arguments: {exc}")
            )
        if not isinstance(arguments, dict):
            return CallResult(
                error=CallError(
                    type="mcp_protocol_error", code=INVALID_PARAMS, message="Arguments must be a JSON object."
                )
            )
        endpoint = self.endpoints.get(item.server_label)
        if endpoint is None:  # a call to a server this request does not declare (a resent item's)
            message = f"No MCP server '{item.server_label}' in this request's tools."
            return CallResult(error=CallError(type="mcp_protocol_error", code=INVALID_PARAMS, message=message))
        if (item.server_label, item.name) not in self.offered:  # a resent approval of a tool `allowed_tools` leaves out
            message = f"The tool '{item.name}' is not offered by this request's tools (allowed_tools)."
            return CallResult(error=CallError(type="mcp_protocol_error", code=INVALID_PARAMS, message=message))
        try:
            return await self.clients.call_tool(self.owner, endpoint, item.name, arguments)
        except NotAllowed as exc:  # checked when declared: only a changed allowlist gets here
            return CallResult(error=CallError(type="http_error", code=403, message=str(exc)))

    def _count(self, result: CallResult, record: CallRecord) -> None:
        outcome = "completed" if result.error is None else result.error.type
        self.metrics.mcp_calls.labels(outcome).inc()
        self.metrics.mcp_call_seconds.observe(result.seconds)
        self.recent.end(record, result.seconds, None if result.error is None else result.error.type)


async def _result(task: asyncio.Task[CallResult] | None, steer: asyncio.Future[Any]) -> CallResult:
    """A call's result; `NOT_RUN` for one past the limit, `STEERED` for one a steer stopped."""
    if task is None:
        return CallResult(error=NOT_RUN)
    if not steer.done():
        await asyncio.wait((task, steer), return_when=asyncio.FIRST_COMPLETED)
    if task.done() and not task.cancelled():
        return task.result()
    task.cancel()
    return CallResult(error=STEERED)


def _finished(builder: ResponseBuilder, index: int, result: CallResult) -> list[Event]:
    error = error_body(result.error) if result.error is not None else None
    return builder.mcp_call_finished(index, result.output, error)


def error_body(error: CallError) -> dict[str, Any]:
    """The `mcp_call.error` object as openai-python types it (`McpToolCallError`)."""
    if error.type == "mcp_tool_execution_error":
        return {"type": error.type, "content": error.content}
    return {"type": error.type, "code": error.code if error.code is not None else 0, "message": error.message or ""}
