"""The agent-loop scenario's tools as an MCP server (`hotloop bench agent-loop --mcp`): the official `mcp` SDK's
`MCPServer` over streamable HTTP (uvicorn, 127.0.0.1), in its own process, so that hotloop calls it as it would a
remote one. It offers the scenario's three tools with the function tools' schemas; each call sleeps the tool time
and returns the scenario's tool text of the size the bench set for that call (`POST /bench/round`), so that the
context grows as it does when the client runs the tool. What it measured comes back from `GET /bench/stats`: the
calls, each call's own wall time (in the tool), and the wall time of every HTTP request by the JSON-RPC method it
carried (request received → last body byte sent: the server's own time, its SDK included).

    python -m hotloop.bench.mcp_tools --port 9000 --tool-ms 50 [--json-response]

By default each POST is answered with an event stream, as MCPServer does; the SDK's client stops reading it at the
response and so cannot reuse the connection: every request opens a new one. `--json-response` (MCPServer's
`json_response`) answers with a JSON body, which the client reads to its end and keeps the connection.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from hotloop import clock
from hotloop.bench.scenario import tool_text
from hotloop.bench.server_process import ChildServer

LABEL = "bench"  # the tool's server_label: the model sees `bench.shell`
PATH = "/mcp"
Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class ToolState:
    """The outputs of the current round and what the server measured since it began."""

    def __init__(self, tool_ms: float) -> None:
        self.tool_s = tool_ms / 1000.0
        self.round(0, [])

    def round(self, seed: int, sizes: list[int]) -> None:
        # Turn `i`'s text, as the client-run mode answers turn `i` (scenario.Rollout.tool_output).
        self.texts = [tool_text(seed * 100_003 + index, size) for index, size in enumerate(sizes)]
        self.calls = 0
        self.tool_ms: list[float] = []
        self.requests: dict[str, list[float]] = {}
        self.peers: set[tuple[str, int]] = set()  # the client's TCP connections: one (host, port) each

    def next_text(self) -> str:
        index = self.calls
        self.calls += 1
        if index < len(self.texts):
            return self.texts[index]
        return tool_text(index, 64)

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "tool_ms": self.tool_ms,
            "requests_ms": self.requests,
            "connections": len(self.peers),
        }


class RequestTimer:
    """ASGI middleware: the wall time of each POST to the MCP endpoint, by the JSON-RPC method(s) it carried."""

    def __init__(self, app: Any, state: ToolState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        body = bytearray()
        peer = scope.get("client")
        if peer:
            self.state.peers.add((peer[0], peer[1]))

        async def receiving() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def sending(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                elapsed = (time.perf_counter() - start) * 1000.0
                for method in _methods(bytes(body)):
                    self.state.requests.setdefault(method, []).append(elapsed)

        await self.app(scope, receiving, sending)


def _methods(body: bytes) -> list[str]:
    try:
        decoded = json.loads(body)
    except ValueError:
        return []
    messages = decoded if isinstance(decoded, list) else [decoded]
    return [m["method"] for m in messages if isinstance(m, dict) and isinstance(m.get("method"), str)] or ["response"]


def build_app(tool_ms: float, json_response: bool = False) -> tuple[Any, ToolState]:
    """The MCP server's ASGI app (streamable HTTP at PATH, the bench's routes beside it) and its state; with
    `json_response`, each POST is answered with a JSON body instead of an event stream."""
    state = ToolState(tool_ms)
    server = MCPServer("hotloop-bench-tools", log_level="WARNING")

    async def run(text: str) -> str:
        start = time.perf_counter()
        await clock.until(start + state.tool_s)  # the tool's time exactly, as the limit counts it
        state.tool_ms.append((time.perf_counter() - start) * 1000.0)
        return text

    @server.tool(structured_output=False)
    async def shell(
        command: Annotated[list[str], Field(description="The command to execute")],
        workdir: Annotated[str, Field(description="The working directory to execute the command in")],
        timeout_ms: Annotated[int, Field(ge=1000, le=120000)],
    ) -> str:
        """Runs a shell command and returns its output."""
        return await run(state.next_text())

    @server.tool(structured_output=False)
    async def apply_patch(input: Annotated[str, Field(description="The entire contents of the patch")]) -> str:
        """Edit files with a patch in the apply_patch format."""
        return await run(state.next_text())

    @server.tool(structured_output=False)
    async def update_plan(plan: list[dict[str, str]], explanation: str = "") -> str:
        """Updates the task plan: each step with its status (one step in_progress at a time)."""
        return await run(state.next_text())

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    @server.custom_route("/bench/round", methods=["POST"])
    async def new_round(request: Request) -> Response:
        body = await request.json()
        state.round(int(body.get("seed", 0)), [int(size) for size in body.get("sizes", [])])
        return JSONResponse({"outputs": len(state.texts)})

    @server.custom_route("/bench/stats", methods=["GET"])
    async def stats(request: Request) -> Response:
        return JSONResponse(state.stats())

    return RequestTimer(
        server.streamable_http_app(streamable_http_path=PATH, json_response=json_response), state
    ), state


class McpToolProcess(ChildServer):
    """This module's server in its own process (same interpreter and environment); `url` is its MCP endpoint."""

    def __init__(self, tool_ms: float, json_response: bool = False) -> None:
        super().__init__("hotloop-bench-mcp-")
        command = [
            sys.executable,
            "-m",
            "hotloop.bench.mcp_tools",
            "--port",
            str(self.port),
            "--tool-ms",
            f"{tool_ms:g}",
        ]
        self._spawn([*command, *(["--json-response"] if json_response else [])], dict(os.environ))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bench"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hotloop.bench.mcp_tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tool-ms", type=float, default=50.0, help="each call's time (ms)")
    parser.add_argument("--json-response", action="store_true", help="answer POSTs with JSON, not an event stream")
    args = parser.parse_args(argv)
    app, _ = build_app(args.tool_ms, args.json_response)
    logging.basicConfig(level=logging.WARNING)
    uvicorn.run(
        app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, timeout_graceful_shutdown=1
    )


if __name__ == "__main__":
    main()
