"""`hotloop bench agent-loop --upstream`: hotloop in front of a real `hotloop sim-engine` process, through the CLI.

The engine paces itself (prefill of uncached tokens, decode at --tps); the report adds the engine's cached-token
ratio per turn, and each turn's model time is the engine's prefill of what its prefix cache missed plus decode.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from hotloop.cli import main
from simengine_support import SimEngineProcess

MODES = ["http-full", "http-chain", "ws"]


@pytest.mark.parametrize("backend", ["tokens", "openai-chat"])
def test_agent_loop_through_an_upstream_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=20, tool_calls=100).wait_ready()
    try:
        out = tmp_path / "loop.json"
        argv = ["bench", "agent-loop", "--upstream", engine.base_url, "--upstream-backend", backend]
        argv += ["--turns", "3", "--context-tokens", "2500", "--tps", "5000", "--prefill-us-per-token", "20"]
        argv += ["--tool-ms", "5", "--runs", "1", "--quiet", "--json", str(out)]
        assert main(argv) == 0
    finally:
        engine.stop()
    result = json.loads(out.read_text())
    assert result["config"]["upstream"] == engine.base_url and result["config"]["model"] == "upstream"
    for mode in MODES:
        run = result["modes"][mode]["runs"][0]
        turns = run["turns"]
        assert len(turns) == 3
        for before, after in itertools.pairwise(turns):
            # Every turn's prompt starts with the previous one: the engine had all of it cached.
            assert after["cached_tokens"] >= before["context_tokens"] - 1, (mode, turns)
        for turn in turns:
            uncached = turn["context_tokens"] - turn["cached_tokens"]
            expected = uncached * 20 / 1000 + (turn["output_tokens"] - 1) / 5000 * 1000
            assert turn["model_ms"] == pytest.approx(expected)
        assert run["e2e_ms"] >= run["physical_ms"] > 0
        ratios = [entry["cached_ratio"] for entry in result["modes"][mode]["per_turn_median"]]
        assert all(0 <= ratio <= 1 for ratio in ratios) and ratios[1] > 0.3
    table = capsys.readouterr().out
    assert "cached-token ratio per turn" in table and "hotloop in front of" in table


def test_forced_calls_and_sampling_reach_every_turn_warm_up_included(tmp_path: Path) -> None:
    # This engine calls a tool only when forced (a real model under `auto` may answer in text): the warm-up
    # rollout too must send tool_choice required, or the bench stops at its first turn.
    engine = SimEngineProcess(tps=5000, prefill_us_per_token=1, tool_calls=0).wait_ready()
    try:
        out = tmp_path / "loop.json"
        argv = ["bench", "agent-loop", "--upstream", engine.base_url, "--modes", "ws", "--turns", "3"]
        argv += ["--context-tokens", "1500", "--tool-ms", "1", "--runs", "1", "--quiet", "--json", str(out)]
        argv += ["--tool-choice", "required", "--temperature", "0", "--max-output-tokens", "64"]
        assert main(argv) == 0
    finally:
        engine.stop()
    config = json.loads(out.read_text())["config"]
    assert (config["tool_choice"], config["temperature"], config["max_output_tokens"]) == ("required", 0.0, 64)


def test_an_engine_that_reports_its_own_time_is_the_model_time(tmp_path: Path) -> None:
    # llama.cpp's server (and sim-engine's /completion) report `timings`: the turn's model time is then the engine's
    # own, measured, and the overhead is what hotloop and the hops added to it.
    engine = SimEngineProcess(tps=2000, prefill_us_per_token=5, tool_calls=100).wait_ready()
    try:
        out = tmp_path / "loop.json"
        argv = ["bench", "agent-loop", "--upstream", f"http://127.0.0.1:{engine.port}", "--dialect", "llamacpp"]
        argv += ["--modes", "ws", "--turns", "3", "--context-tokens", "1500", "--tool-ms", "1", "--runs", "1"]
        argv += ["--quiet", "--json", str(out)]
        assert main(argv) == 0
    finally:
        engine.stop()
    turns = json.loads(out.read_text())["modes"]["ws"]["runs"][0]["turns"]
    for turn in turns:
        assert turn["model_ms"] == turn["timings"]["engine"] > 0
        assert 0 < turn["overhead_ms"] == pytest.approx(turn["turn_ms"] - turn["timings"]["engine"])
        assert turn["timings"]["engine"] <= turn["timings"]["generate"]  # inside hotloop's wait for the engine


def test_upstream_with_base_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "agent-loop", "--upstream", "http://127.0.0.1:9/v1", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--quiet"]) == 1
    assert "--upstream" in capsys.readouterr().err


def test_help_documents_the_upstream_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "agent-loop", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for option in ("--upstream", "--upstream-backend", "--dialect", "--prefill-us-per-token"):
        assert option in text, option
