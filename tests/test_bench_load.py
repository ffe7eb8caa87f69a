"""`hotloop bench load`: a tiny run through the CLI against its own server process (structure, not speed)."""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import start_server
from hotloop.bench.clients import TIMING_EVENT, WsClient, kind_of
from hotloop.bench.floor import due_times
from hotloop.bench.load import Session, largest_under, summarize
from hotloop.bench.load_config import LoadConfig
from hotloop.bench.recording import record_rollout
from hotloop.bench.server_process import FloorProcess
from hotloop.cli import main
from hotloop.config import Settings
from hotloop.transports.stack import uvicorn_options
from simengine_support import SimEngineProcess

TINY = ["--turns", "3", "--tps", "5000", "--ttft-ms", "2", "--tool-ms", "5", "--context-tokens", "2000"]
TINY += ["--idle-s", "0.2"]


def test_against_its_own_server_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "load.json"
    argv = ["bench", "load", "--connections", "4", *TINY, "--ramp-s", "0.05", "--store", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["scenario"] == "load" and result["environment"]["commit"]
    assert result["config"]["connections"] == [4] and result["config"]["store"] is True
    assert [run["connections"] for run in result["runs"]] == [4]
    for run in result["runs"]:
        assert run["errors"] == 0 and run["error_messages"] == []
        assert run["turns"] == run["turns_expected"] == run["connections"] * 3
        over, server = run["overhead_ms"], run["server_ms"]
        assert 0 < over["p50"] <= over["p99"] <= over["max"]
        assert 0 < server["p50"] <= server["p99"]  # from every turn's hotloop:timing_metrics event
        assert run["ttft_ms"]["p50"] >= 2  # the simulated time to first token
        # measured on the server process, not on this one
        assert run["server_cpu_s"] > 0 and run["server_peak_rss_mib"] > 20
        assert run["server_cpu_ms_per_turn"] == pytest.approx(run["server_cpu_s"] * 1000 / run["turns"])
        assert run["server_cpu_ms_per_turn"] > 0
        assert run["server_idle_cpu_ms_per_s"] >= 0  # measured before the load, with no traffic
        assert run["client_cpu_s"] > 0 and run["wall_s"] > 0 and run["turns_per_s"] > 0
    assert result["largest_connections_under_target"] in (None, 4)
    table = capsys.readouterr().out
    assert "overhead p50/p99 ms" in table and "largest connection count" in table and "CPU ms/turn" in table
    _check_cores(result, table)


def _check_cores(result: dict[str, Any], table: str) -> None:
    """With two cores or more, the server and the load generator ran on different ones, as the OS reported them
    during the run; each side's busy share is of its own cores, and the run says which side was the limit."""
    available = sorted(os.sched_getaffinity(0))
    for run in result["runs"]:
        cores = run["cores"]
        assert run["client_cpu_share"] > 0 and run["server_cpu_share"] > 0
        assert run["limit"] in ("server", "load generator", "neither")
        assert f"limit: {run['limit']}" in table
        if len(available) < 2:
            assert result["config"]["pin"] == "off" and cores["server"] == cores["client"] == available
            continue
        assert result["config"]["pin"] == "auto"
        assert cores["server"] and cores["client"] and not set(cores["server"]) & set(cores["client"])
        assert sorted(cores["server"] + cores["client"]) == available
        assert result["config"]["workers"] == len(cores["server"])  # the report: one worker per server core
    assert os.sched_getaffinity(0) == set(available)  # this process has all its cores back


def test_in_front_of_an_upstream_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--upstream: the server process serves a real `hotloop sim-engine` process as its one model; the engine
    reports its own time per request (llama.cpp's `timings`), so the overhead is the turn less that time."""
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=2, tool_calls=100).wait_ready()
    try:
        out = tmp_path / "load.json"
        argv = ["bench", "load", "--connections", "3", *TINY, "--ramp-s", "0.05", "--quiet", "--json", str(out)]
        argv += ["--upstream", f"http://127.0.0.1:{engine.port}", "--dialect", "llamacpp"]
        assert main(argv) == 0
        stats = engine.stats()
    finally:
        engine.stop()
    result = json.loads(out.read_text())
    [run] = result["runs"]
    assert run["errors"] == 0 and run["turns"] == 9
    assert stats["requests"] >= 9 + 3  # every turn (and the warm-up session's) reached the engine
    assert 0 < run["overhead_ms"]["p50"] <= run["overhead_ms"]["p99"]
    assert result["config"]["upstream"]["upstream"] == f"http://127.0.0.1:{engine.port}"
    assert "hotloop in front of http://127.0.0.1:" in capsys.readouterr().out
    assert main(["bench", "load", "--upstream", "http://x", "--base-url", "http://y/v1", "--quiet"]) == 1


def test_sweep_against_a_running_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_server(tmp_path, api_keys=["the-key"], models=["hotloop-sim"])
    try:
        argv = ["bench", "load", "--sweep", "1,3", "--rollouts", "2", *TINY, "--quiet", "--base-url", server.base_url]
        assert main([*argv, "--api-key", "wrong-key"]) == 1
        assert "warm-up session failed" in capsys.readouterr().err
        out = tmp_path / "ok.json"
        assert main([*argv, "--api-key", "the-key", "--json", str(out)]) == 0
        runs = json.loads(out.read_text())["runs"]
        # two rollouts of 3 turns on each connection
        assert [(run["connections"], run["errors"], run["turns"]) for run in runs] == [(1, 0, 6), (3, 0, 18)]
        # a server it did not start and no --server-pid: no CPU figures
        assert runs[0]["server_cpu_s"] is None and runs[0]["server_cpu_ms_per_turn"] is None
        assert runs[0]["server_idle_cpu_ms_per_s"] is None
    finally:
        server.stop()


def test_summary_counts_failed_sessions_and_finds_the_largest_count() -> None:
    config = LoadConfig(connections=3, turns=2)
    ok = Session(0, overhead_ms=[1.0, 2.0], server_ms=[0.5, 0.6], ttft_ms=[20.0, 21.0])
    slow = Session(1, overhead_ms=[3.0, 9.0], server_ms=[0.5, 0.7], ttft_ms=[20.0, 25.0])
    failed = Session(2, error="ConnectionClosedError: no close frame received or sent")
    run = summarize(config, [ok, slow, failed], wall_s=2.0)
    assert run["turns"] == 4 and run["turns_expected"] == 6 and run["errors"] == 1
    assert run["error_messages"] == [failed.error]
    assert run["overhead_ms"]["p50"] == 2.5 and run["overhead_ms"]["p99"] == 9.0
    assert run["turns_per_s"] == 2.0
    empty = summarize(LoadConfig(connections=1), [Session(0, error="x")], wall_s=1.0)
    assert math.isnan(empty["overhead_ms"]["p99"])
    runs = [
        {"connections": 10, "errors": 0, "overhead_ms": {"p99": 3.0}},
        {"connections": 50, "errors": 0, "overhead_ms": {"p99": 4.9}},
        {"connections": 100, "errors": 1, "overhead_ms": {"p99": 4.0}},  # errors disqualify
        {"connections": 200, "errors": 0, "overhead_ms": {"p99": 12.0}},
    ]
    assert largest_under(runs, 5.0) == 50
    assert largest_under(runs, 1.0) is None


def test_floor_runs_the_same_scenario_and_reports_the_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--floor: after each hotloop run, the same load against the floor server (bench/floor.py, its own process)."""
    out = tmp_path / "load.json"
    argv = ["bench", "load", "--connections", "3", *TINY, "--ramp-s", "0.05", "--floor", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    [run] = json.loads(out.read_text())["runs"]
    floor = run["floor"]
    assert floor["errors"] == 0 and floor["turns"] == floor["turns_expected"] == run["turns"] == 9
    assert floor["chars_per_token"] == run["chars_per_token"]  # hotloop's, so the tool outputs are sized alike
    assert floor["server_cpu_ms_per_turn"] > 0 and floor["server_peak_rss_mib"] > 10
    assert floor["ttft_ms"]["p50"] >= 2  # the same model pacing
    assert floor["server_ms"]["p50"] > 0  # the floor's own share, in the timing event it sends
    ratios = run["vs_floor"]
    assert ratios["server_cpu_ms_per_turn"] == pytest.approx(
        run["server_cpu_ms_per_turn"] / floor["server_cpu_ms_per_turn"]
    )
    # Each ratio is positive, or NaN where the floor's figure is not above zero (a tiny run's overhead can be).
    assert all(value > 0 or math.isnan(value) for value in ratios.values()), ratios
    assert ratios["server_cpu_ms_per_turn"] > 0
    table = capsys.readouterr().out
    assert "3 floor" in table and "hotloop / floor" in table and "server CPU ms/turn" in table
    assert main(["bench", "load", "--floor", "--upstream", "http://127.0.0.1:9/v1", "--quiet"]) == 1


def test_the_floor_replays_hotloops_frames_with_fresh_ids(tmp_path: Path) -> None:
    """Frame for frame what hotloop sent (the same types and sizes, the same usage), with new ids that chain."""
    server = start_server(tmp_path, models=["hotloop-sim"])
    config = LoadConfig(connections=1, turns=3, tps=5000, ttft_ms=2, tool_ms=0, context_tokens=2000)
    try:
        recorded = asyncio.run(record_rollout(server.base_url, config))
    finally:
        server.stop()
    with FloorProcess(recorded) as floor:
        replayed = asyncio.run(record_rollout(floor.base_url, config, cpt=recorded.chars_per_token))
        unknown = asyncio.run(_create_after(floor.base_url, "resp_not_from_this_socket"))
    assert json.loads(unknown)["error"]["code"] == "previous_response_not_found"
    assert len(replayed.turns) == len(recorded.turns) == 3
    previous = None
    for ours, theirs in zip(replayed.turns, recorded.turns, strict=True):
        assert [kind_of(frame) for frame in ours] == [kind_of(frame) for frame in theirs]
        sizes = [(kind_of(frame), len(frame)) for frame in ours if kind_of(frame) != TIMING_EVENT]
        assert sizes == [(kind_of(frame), len(frame)) for frame in theirs if kind_of(frame) != TIMING_EVENT]
        response, original = (json.loads(turn[-1])["response"] for turn in (ours, theirs))
        assert response["usage"] == original["usage"] and response["id"] != original["id"]
        assert response["previous_response_id"] == previous
        previous = response["id"]


def test_the_floor_is_configured_like_hotloops_server(tmp_path: Path) -> None:
    import uvicorn

    from hotloop.transports.server import server_config

    settings = Settings(data_dir=str(tmp_path), port=0, log_level="warning", ws_ping_interval_s=0)
    options = uvicorn_options(settings)
    ours, theirs = uvicorn.Config(lambda *_: None, **options), server_config(settings)
    for name in options:
        assert getattr(ours, name) == getattr(theirs, name), name


async def _create_after(base_url: str, previous: str) -> str | bytes:
    client = await WsClient.open(base_url, {})
    try:
        await client.connection.send(json.dumps({"type": "response.create", "previous_response_id": previous}))
        return await client.connection.recv()
    finally:
        await client.close()


def test_the_floors_deltas_keep_hotloop_sims_clock() -> None:
    assert due_times(3, 20.0, 1000.0, 3) == pytest.approx([0.020, 0.021, 0.022])  # a delta per token
    assert due_times(2, 20.0, 1000.0, 5) == pytest.approx([0.020, 0.024])  # merged deltas: the last still on time
    assert due_times(1, 5.0, 1000.0, 1) == [0.005]
    with pytest.raises(ValueError):
        due_times(0, 5.0, 1000.0, 1)
