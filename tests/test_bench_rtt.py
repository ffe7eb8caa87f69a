"""A far client (`hotloop bench agent-loop --client-rtt-ms`): the latency proxy (bench/latency_proxy.py) in its own
process holds each chunk R/2 each way, keeps order, passes a WebSocket session to a real hotloop and closes both
ways; the agent loop run at several R reports each and pays about a round trip a turn."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from conftest import start_server
from hotloop.bench.clients import WsClient
from hotloop.bench.latency_proxy import DelayLine, LatencyProxyProcess
from hotloop.cli import main

SLACK_MS = 30.0  # a loaded 2-core machine wakes timers late; the proxy never sends early


@pytest.mark.fast
def test_a_delay_line_lets_each_chunk_go_its_delay_after_it_came_in_order() -> None:
    line = DelayLine(0.010)
    line.push(1.000, b"a")
    line.push(1.002, b"b")
    line.push(1.002, None)  # the end of the stream, after the data before it
    assert line.next_due == pytest.approx(1.010)
    assert line.pop_due(1.009) == []
    assert line.pop_due(1.010) == [b"a"]
    assert line.pop_due(1.5) == [b"b", None]
    assert line.next_due is None


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()  # the client's end of stream, answered with ours


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
def proxy(echo_port: int) -> Iterator[LatencyProxyProcess]:
    with LatencyProxyProcess(echo_port, 20.0) as running:  # R = 40 ms
        yield running


async def test_a_round_trip_through_the_proxy_takes_the_rtt(proxy: LatencyProxyProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        times.append((time.perf_counter() - start) * 1000.0)
    writer.close()
    assert min(times) >= 40.0, times
    assert sorted(times)[2] < 40.0 + SLACK_MS, times


async def test_many_small_chunks_keep_their_order_and_the_ends_follow_the_data(proxy: LatencyProxyProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    sent = b"".join(f"{index:05d};".encode() for index in range(3000))
    for at in range(0, len(sent), 6):  # one small write each, as fast as they go
        writer.write(sent[at : at + 6])
        if at % 600 == 0:
            await asyncio.sleep(0)
    start = time.perf_counter()
    writer.write_eof()  # a half-close: the echo server reads it after the data, and closes
    echoed = await reader.read()  # up to the echo server's end of stream, through the proxy
    waited = (time.perf_counter() - start) * 1000.0
    assert echoed == sent
    assert waited >= 40.0  # our end went one way, the server's came back: each held R/2
    writer.close()


def _sockets(pid: int) -> int:
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("socket:"))


async def _settled_sockets(pid: int, expected: int) -> int:
    """The process's sockets once they come to `expected` (2 s at most): closing takes a loop turn or two."""
    for _ in range(100):
        if (count := _sockets(pid)) == expected:
            return count
        await asyncio.sleep(0.02)
    return _sockets(pid)


async def test_a_websocket_session_to_hotloop_passes_and_closes_both_ways(tmp_path: Path) -> None:
    server = start_server(tmp_path, models=["hotloop-sim"])
    try:
        with LatencyProxyProcess(server.port, 10.0) as proxy:
            idle = await _settled_sockets(proxy.pid, 1)  # the listening socket (wait_ready's probe closed)
            client = await WsClient.open(f"http://127.0.0.1:{proxy.port}/v1", {"model": "hotloop-sim"})
            assert _sockets(proxy.pid) == idle + 2  # the client's socket and the one to hotloop
            message = {"type": "message", "role": "user", "content": "hello"}
            first = await client.turn([message])
            second = await client.turn([{**message, "content": "and again"}])
            assert first.status == second.status == "completed" and first.timings is not None
            assert second.turn_s >= 0.020  # a round trip at least
            await client.close()
            assert client.connection.close_code == 1000  # the close handshake went through, both frames
            # the proxy closes both sockets once both ends have passed
            assert await _settled_sockets(proxy.pid, idle) == idle
    finally:
        server.stop()


def _rtt_run(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "rtt.json"
    argv = ["bench", "agent-loop", "--turns", "3", "--context-tokens", "2000", "--runs", "1", "--quiet"]
    argv += ["--client-rtt-ms", "0,20", "--json", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text())


def test_the_agent_loop_at_two_rtts_pays_a_round_trip_a_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "rtt.png"
    result = _rtt_run(tmp_path, "--modes", "ws,http-chain", "--plot", str(plot))
    assert result["config"]["client_rtt_ms"] == [0, 20]
    near, far = result["client_rtt"]
    assert (near["client_rtt_ms"], near["via_proxy"], far["via_proxy"]) == (0, False, True)
    assert far["measured_rtt_ms"] >= 20.0
    for point in (near, far):
        assert set(point["modes"]) == {"ws", "http-chain"} and "e2e http-chain/ws" in point["ratios"]
        for m in point["modes"].values():
            assert m["round_trips"] == 3
            assert m["physical_plus_rtts_ms"] == pytest.approx(m["physical_ms"] + 3 * point["client_rtt_ms"])
            assert m["e2e_ms"] >= m["physical_plus_rtts_ms"]
    # each turn's request went out and its events came back through the proxy: a round trip on top of the model
    for turn in far["result"]["modes"]["ws"]["runs"][0]["turns"]:
        assert turn["turn_ms"] >= turn["model_ms"] + 20.0
    assert far["modes"]["ws"]["e2e_ms"] - near["modes"]["ws"]["e2e_ms"] >= 0.9 * 3 * 20
    assert "R=20 ms: e2e http-chain/ws" in result["ratios"]
    assert plot.read_bytes().startswith(b"\x89PNG")
    table = capsys.readouterr().out
    assert "limit+trips*R" in table and "http-chain" in table


def test_the_loop_in_the_server_pays_one_round_trip(tmp_path: Path) -> None:
    result = _rtt_run(tmp_path, "--modes", "ws", "--mcp", "--tool-ms", "5")
    far = result["client_rtt"][1]
    mcp = far["modes"]["mcp"]
    assert mcp["round_trips"] == 1 and far["modes"]["ws"]["round_trips"] == 3
    assert mcp["e2e_ms"] >= mcp["physical_ms"] + 20.0
    assert "e2e mcp/ws" in far["ratios"]
    # the MCP server stays next to hotloop: its two calls ran inside the one response
    assert far["result"]["modes"]["mcp"]["runs"][0]["mcp"]["server_calls"] == 2


def test_the_loop_as_one_response_still_pays_a_round_trip_a_turn(tmp_path: Path) -> None:
    """Mode inject: one response, but the create and each inject wait for the events they start: a round trip
    each, through the proxy."""
    result = _rtt_run(tmp_path, "--modes", "ws,inject", "--tool-ms", "5")
    far = result["client_rtt"][1]
    inject = far["modes"]["inject"]
    assert inject["round_trips"] == 3 and inject["e2e_ms"] >= inject["physical_plus_rtts_ms"]
    run = far["result"]["modes"]["inject"]["runs"][0]
    assert run["inject"]["responses_created"] == 1
    for turn in run["turns"]:
        assert turn["turn_ms"] >= turn["model_ms"] + 20.0
    assert "e2e inject/ws" in far["ratios"] and "R=20 ms: e2e inject/ws" in result["ratios"]


@pytest.mark.parametrize("value", ["", "20,x", "-5"])
def test_bad_rtts_are_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "agent-loop", "--client-rtt-ms", value])
    assert exited.value.code == 2
    assert "round-trip time" in capsys.readouterr().err


def test_help_documents_the_far_client_and_the_server_process(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "agent-loop", "--help"])
    text = capsys.readouterr().out
    assert "--client-rtt-ms" in text and "--in-process-server" in text
