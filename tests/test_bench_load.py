"""`hotloop bench load`: a tiny run through the CLI against its own server process (structure, not speed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import start_server
from hotloop.bench.load import LoadConfig, Session, largest_under, summarize
from hotloop.cli import main
from simengine_support import SimEngineProcess

TINY = ["--turns", "3", "--tps", "5000", "--ttft-ms", "2", "--tool-ms", "5", "--context-tokens", "2000"]


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
        assert run["client_cpu_s"] > 0 and run["wall_s"] > 0 and run["turns_per_s"] > 0
    assert result["largest_connections_under_target"] in (None, 4)
    table = capsys.readouterr().out
    assert "overhead p50/p99 ms" in table and "largest connection count" in table


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
        assert runs[0]["server_cpu_s"] is None  # a server it did not start and no --server-pid: no CPU figures
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
