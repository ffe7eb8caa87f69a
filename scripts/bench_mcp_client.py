"""hotloop's MCP clients alone, side by side: sequential `tools/call`s through `Clients.call_tool` with the lean client
(`mcp_client = "lean"`) and the SDK's (`"sdk"`), in turn, against a real `MCPServer` (the `mcp` SDK, streamable HTTP
through uvicorn) in a process of its own, whose tool answers at once. The server times each `tools/call` request
itself (request received → last body byte sent, its SDK included); a call's time beyond that is the client's dispatch
plus loopback.

    .venv/bin/python scripts/bench_mcp_client.py [--mode json|sse] [--calls 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any, Literal

from hotloop.bench.server_process import free_port
from hotloop.mcp import Clients, Endpoint

WARM = 30  # calls first: the session, its connections, the code paths


def serve(port: int, json_response: bool) -> None:
    """The MCP server, with GET /stats answering (and clearing) its own median time per tools/call."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """The text."""
        return text

    app = server.streamable_http_app(json_response=json_response)
    times: list[float] = []

    async def timed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/stats":
            median = statistics.median(times) * 1000 if times else None
            body = json.dumps({"calls": len(times), "median_ms": median}).encode()
            times.clear()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started, call = time.perf_counter(), False

        async def receiving() -> Any:
            nonlocal call
            message = await receive()
            call = call or (message["type"] == "http.request" and b'"tools/call"' in message.get("body", b""))
            return message

        async def sending(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body") and call:
                times.append(time.perf_counter() - started)

        await app(scope, receiving, sending)

    uvicorn.run(timed, host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def calls(kind: Literal["lean", "sdk"], url: str, count: int) -> list[float]:
    pool = Clients(allowed=lambda _: True, client=kind)
    endpoint = Endpoint(url)
    try:
        for _ in range(WARM):
            await pool.call_tool("bench", endpoint, "echo", {"text": "hi"})
        stats(url)  # the warm-up's times cleared
        seconds: list[float] = []
        for _ in range(count):
            started = time.perf_counter()
            result = await pool.call_tool("bench", endpoint, "echo", {"text": "hello"})
            seconds.append(time.perf_counter() - started)
            assert result.output == "hello", result
        return seconds
    finally:
        await pool.close()


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.replace("/mcp", "/stats")) as reply:
        answer: dict[str, Any] = json.loads(reply.read())
    return answer


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            stats(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("json", "sse"), default="json", help="the server answers with")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server's own process
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.mode == "json")
        return
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--mode", args.mode])
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_ready(url)
        print(f"{'round':>5} {'client':>6} {'call ms':>8} {'server ms':>9} {'beyond ms':>9}  ({args.mode} answers)")
        for round_ in range(1, args.rounds + 1):
            for kind in ("sdk", "lean"):
                seconds = asyncio.run(calls(kind, url, args.calls))
                call_ms = statistics.median(seconds) * 1000
                server_ms = stats(url)["median_ms"]
                print(f"{round_:>5} {kind:>6} {call_ms:8.3f} {server_ms:9.3f} {call_ms - server_ms:9.3f}", flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
