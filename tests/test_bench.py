"""`hotloop bench`: tiny agent-loop and overhead runs through the CLI entry point (structure, not speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import start_server
from hotloop.cli import main
from metrics_support import scrape

MODES = ["http-full", "http-chain", "ws"]
PNG = b"\x89PNG\r\n\x1a\n"


def test_agent_loop_all_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plot = tmp_path / "loop.json", tmp_path / "loop.png"
    argv = ["bench", "agent-loop", "--turns", "3", "--context-tokens", "3000", "--tps", "5000", "--ttft-ms", "2"]
    argv += ["--tool-ms", "5", "--runs", "1", "--modes", ",".join(MODES), "--json", str(out), "--plot", str(plot)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["scenario"] == "agent-loop"
    assert result["config"]["turns"] == 3 and result["environment"]["commit"]
    assert set(result["modes"]) == set(MODES)
    contexts = {}
    for mode in MODES:
        data = result["modes"][mode]
        assert len(data["runs"]) == 1 and len(data["per_turn_median"]) == 3
        run = data["runs"][0]
        turns = run["turns"]
        assert [t["turn"] for t in turns] == [0, 1, 2], mode
        for turn in turns:
            assert turn["ttft_ms"] is not None and 0 < turn["ttft_ms"] <= turn["turn_ms"]
            assert turn["model_ms"] >= 2 and turn["overhead_ms"] == pytest.approx(turn["turn_ms"] - turn["model_ms"])
        assert turns[0]["tool_ms"] >= 5 and turns[1]["tool_ms"] >= 5 and turns[2]["tool_ms"] == 0
        sizes = [t["context_tokens"] for t in turns]
        assert sizes[0] < sizes[1] < sizes[2], (mode, sizes)
        # model time + tool time is a floor that no mode can beat
        assert run["e2e_ms"] >= run["physical_ms"] > 0
        assert run["physical_ms"] == pytest.approx(sum(t["model_ms"] for t in turns) + 2 * 5)
        median = data["median"]
        assert median["turns_completed"] == 3 and median["e2e_over_physical"] >= 1
        # with the tools' time as the client spent it (never less than the nominal 5 ms): a floor all the same
        assert 1 <= median["e2e_over_measured_tools"] <= median["e2e_over_physical"]
        contexts[mode] = sizes
    # the same scripted rollout in every mode: the server renders the same prompts
    assert contexts["http-full"] == contexts["http-chain"] == contexts["ws"]
    assert {"e2e ws/http-full", "e2e ws/http-chain", "e2e ws/physical"} <= set(result["ratios"])
    assert plot.read_bytes().startswith(PNG)
    table = capsys.readouterr().out
    assert all(mode in table for mode in MODES) and "e2e/limit" in table


def test_agent_loop_with_a_reasoning_model(tmp_path: Path) -> None:
    """The thinking is model time (it is in `output_tokens`), and the prompts are the same whether the history is
    resent or chained: its reasoning items render into them alike."""
    out = tmp_path / "loop.json"
    argv = ["bench", "agent-loop", "--turns", "3", "--context-tokens", "3000", "--tps", "1000", "--ttft-ms", "2"]
    argv += ["--tool-ms", "1", "--runs", "1", "--modes", ",".join(MODES), "--reasoning-tokens", "20", "--quiet"]
    # hotloop in a thread of this process, as before issue 31: the structure is the same, and it starts faster
    assert main([*argv, "--json", str(out), "--in-process-server"]) == 0
    result = json.loads(out.read_text())
    contexts = {}
    for mode in MODES:
        turns = result["modes"][mode]["runs"][0]["turns"]
        assert all(t["output_tokens"] > 20 and t["model_ms"] >= 2 + 20 for t in turns), turns
        contexts[mode] = [t["context_tokens"] for t in turns]
    assert contexts["http-full"] == contexts["http-chain"] == contexts["ws"]


def test_a_long_session_past_the_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--compact-threshold`: a session of more tokens than the window runs to its end through compaction, and the
    report says how often it compacted, what those turns cost and the cache share after them."""
    out = tmp_path / "long.json"
    argv = ["bench", "agent-loop", "--turns", "16", "--context-tokens", "24000", "--tps", "5000", "--ttft-ms", "1"]
    argv += ["--tool-ms", "0", "--runs", "1", "--modes", "http-full,ws", "--compact-threshold", "6000"]
    assert main([*argv, "--context-window", "8192", "--quiet", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for mode in ("http-full", "ws"):
        median = result["modes"][mode]["median"]
        assert median["turns_completed"] == 16 and 2 <= median["compactions"] <= 10
        assert median["context_max_tokens"] < 8192 and 0 < median["cached_ratio_after_compaction"] < 1
        turns = result["modes"][mode]["runs"][0]["turns"]
        assert sum(t["compacted"] for t in turns) == median["compactions"]
    assert "compacting ms" in capsys.readouterr().out


def test_agent_loop_with_typed_tools_beside_function_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--tools function,typed`: each mode also runs with the typed shell and apply_patch tools; the client sees
    shell_call and apply_patch_call items, answers each with its own output item, and every turn completes."""
    out = tmp_path / "typed.json"
    argv = ["bench", "agent-loop", "--turns", "8", "--context-tokens", "3000", "--tps", "5000", "--ttft-ms", "1"]
    argv += ["--tool-ms", "1", "--runs", "1", "--modes", "http-full,ws", "--tools", "function,typed", "--quiet"]
    assert main([*argv, "--json", str(out), "--in-process-server"]) == 0
    result = json.loads(out.read_text())
    assert list(result["modes"]) == ["http-full", "http-full+typed", "ws", "ws+typed"]
    assert result["config"]["tools"] == ["function", "typed"]
    for mode in ("http-full", "ws"):
        assert result["modes"][mode]["calls"] == {"function_call:shell": 7}
        typed = result["modes"][f"{mode}+typed"]
        assert typed["median"]["turns_completed"] == 8
        turns = typed["runs"][0]["turns"]
        assert all(t["call"] in ("shell_call", "apply_patch_call") for t in turns[:-1]) and turns[-1]["call"] == ""
        assert set(typed["calls"]) == {"shell_call", "apply_patch_call"}, typed["calls"]
        # a typed call streams no deltas: its first output is the call's item, there all the same
        assert all(
            t["ttft_ms"] is not None and t["overhead_ms"] == pytest.approx(t["turn_ms"] - t["model_ms"]) for t in turns
        )
        sizes = [t["context_tokens"] for t in turns]
        assert sizes == sorted(sizes) and sizes[-1] > 2000, sizes
    # resent or chained, the typed items render into the same prompts
    contexts = {m: [t["context_tokens"] for t in result["modes"][m]["runs"][0]["turns"]] for m in result["modes"]}
    assert contexts["http-full+typed"] == contexts["ws+typed"]
    assert {"overhead ws+typed/ws", "e2e http-full+typed/http-full", "e2e ws+typed/http-full+typed"} <= set(
        result["ratios"]
    )
    assert "ws+typed: " in capsys.readouterr().out


def test_typed_answers_have_the_output_items_shapes() -> None:
    from hotloop.bench.scenario import answer

    shell = answer({"type": "shell_call", "call_id": "c1"}, "ok")
    assert shell == {
        "type": "shell_call_output",
        "call_id": "c1",
        "output": [{"stdout": "ok", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    }
    patch = answer({"type": "apply_patch_call", "call_id": "c2"}, "done")
    assert patch == {"type": "apply_patch_call_output", "call_id": "c2", "status": "completed", "output": "done"}
    assert answer({"type": "function_call", "call_id": "c3"}, "x")["type"] == "function_call_output"


def test_agent_loop_with_deferred_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--deferred 20`: the first turn's response searches the deferred tools (server-run) and then calls; the
    loop completes, and the report has the first turn's prompt with the tools deferred and inline."""
    out = tmp_path / "deferred.json"
    argv = ["bench", "agent-loop", "--turns", "3", "--context-tokens", "3000", "--tps", "5000", "--ttft-ms", "1"]
    argv += ["--tool-ms", "1", "--runs", "1", "--modes", "http-full,http-chain,ws", "--deferred", "20", "--quiet"]
    assert main([*argv, "--json", str(out), "--in-process-server"]) == 0
    result = json.loads(out.read_text())
    saved = result["deferred"]
    assert saved["tools"] == 20 and 0 < saved["input_tokens_deferred"] < saved["input_tokens_inline"]
    assert saved["saved_tokens"] == saved["input_tokens_inline"] - saved["input_tokens_deferred"] > 1000
    assert 0 < saved["saved_ratio"] < 1
    for mode in ("http-full", "http-chain", "ws"):
        data = result["modes"][mode]
        assert data["median"]["turns_completed"] == 3 and data["median"]["searches"] == 1
        turns = data["runs"][0]["turns"]
        assert [t["searches"] for t in turns] == [1, 0, 0] and turns[0]["loaded_tools"] >= 1
        assert all(t["call"].startswith("function_call:") for t in turns[:-1])
        # two generations in the first turn, each with its ttft: a floor all the same
        assert turns[0]["model_ms"] >= 2 * 1 and data["runs"][0]["e2e_ms"] >= data["runs"][0]["physical_ms"]
    table = capsys.readouterr().out
    assert f"{saved['input_tokens_deferred']} tokens deferred vs {saved['input_tokens_inline']} inline" in table


@pytest.mark.parametrize("json_response", [False, True], ids=["event-streams", "json-bodies"])
def test_agent_loop_in_the_server_over_mcp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], json_response: bool
) -> None:
    """`--mcp`: the same rollout with the tool as an MCP server hotloop calls inside one response, beside the
    client-run ws loop; the server really ran every call, listed its tools once, and the contexts match."""
    out = tmp_path / "mcp.json"
    argv = ["bench", "agent-loop", "--turns", "4", "--context-tokens", "3000", "--tps", "5000", "--ttft-ms", "2"]
    argv += ["--tool-ms", "5", "--runs", "2", "--modes", "ws", "--mcp", "--json", str(out)]
    assert main(argv + ["--mcp-json-response"] * json_response) == 0
    result = json.loads(out.read_text())
    assert list(result["modes"]) == ["ws", "mcp"] and result["config"]["mcp"] is True
    ws, mcp = result["modes"]["ws"], result["modes"]["mcp"]
    assert len(mcp["runs"]) == 2
    for run, client_run in zip(mcp["runs"], ws["runs"], strict=True):
        measured = run["mcp"]
        # three steps: three calls that reached the MCP server and ran its tool, inside one response
        assert measured["steps"] == 3 and measured["server_calls"] == 3 and measured["generations"] == 4
        assert run["turns"][0]["tool_ms"] >= 3 * 5
        assert run["e2e_ms"] >= run["physical_ms"] > 3 * 5
        assert measured["tools_list_requests"] == 1  # the continuation reused the chain's list
        # hotloop's lean client reads each answer to its end, a JSON body or an event stream: its connection is
        # kept (the SDK's client opened one a call on event streams)
        assert measured["tcp_connections"] <= 2
        assert 0 <= measured["list_cached_ms"] < measured["list_first_ms"]
        # The tool ran inside the server's requests and inside hotloop's calls. (hotloop's lean client has its answer
        # at the response event; the server's request clock runs on to its stream's end, so either may be longer.)
        assert measured["server_tool_ms"] <= min(measured["server_request_ms"], measured["mcp_call_ms"])
        assert measured["hotloop_per_step_ms"] == pytest.approx(
            measured["extension_per_step_ms"] + measured["dispatch_per_step_ms"]
        )
        timings = run["turns"][0]["timings"]
        assert {"mcp_list", "mcp_step", "mcp_call"} <= set(timings)
        # the MCP server returned the ws rollout's tool outputs: the context after the loop is about the ws one's
        last = client_run["turns"][-1]
        assert abs(measured["context_after_tokens"] - last["context_tokens"]) < 0.1 * last["context_tokens"]
    median = mcp["median"]
    assert median["turns_completed"] == 4 and median["e2e_over_physical"] >= 1
    assert {"e2e mcp/ws", "e2e mcp/physical", "e2e ws/physical"} <= set(result["ratios"])
    table = capsys.readouterr().out
    assert "loop in the server" in table and "prompt extension" in table


def test_mcp_needs_a_ws_rollout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "agent-loop", "--modes", "http-full", "--mcp", "--quiet"]) == 1
    assert "--modes must include ws" in capsys.readouterr().err
    assert main(["bench", "agent-loop", "--modes", "ws", "--mcp-json-response", "--quiet"]) == 1
    assert "an option of --mcp" in capsys.readouterr().err
    assert main(["bench", "agent-loop", "--modes", "ws", "--mcp", "--tools", "typed", "--quiet"]) == 1
    assert "not with --tools or --deferred" in capsys.readouterr().err


def test_agent_loop_as_one_multi_agent_response(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Mode `inject`: the ws rollout's loop as one multi-agent response, each tool output sent by
    `response.inject`. The server finished one response per inject rollout (its /metrics), the client saw one
    `response.created` and every call answered; the prompts and outputs are the ws loop's, and the report has the
    mode, its per-step figures and its ratios to ws."""
    out = tmp_path / "inject.json"
    server = start_server(tmp_path / "data", models=["hotloop-sim"])
    try:
        before = scrape(server).total("hotloop_responses_total", transport="websocket")
        argv = ["bench", "agent-loop", "--turns", "4", "--context-tokens", "3000", "--tps", "5000", "--ttft-ms", "2"]
        argv += ["--tool-ms", "5", "--runs", "2", "--modes", "ws,inject", "--base-url", server.base_url]
        assert main([*argv, "--json", str(out)]) == 0
        finished = scrape(server).total("hotloop_responses_total", transport="websocket") - before
    finally:
        server.stop()
    # The warm-up (2 turns a mode) and the 2 runs: a response a ws turn, ONE a whole inject rollout.
    assert finished == (2 + 2 * 4) + (1 + 2 * 1)
    result = json.loads(out.read_text())
    assert list(result["modes"]) == ["ws", "inject"]
    ws, inject = result["modes"]["ws"], result["modes"]["inject"]
    for run, beside in zip(inject["runs"], ws["runs"], strict=True):
        measured = run["inject"]
        assert measured["responses_created"] == 1 and measured["steps"] == 3 and measured["generations"] == 4
        assert measured["output_items"] == 3 + 3 + 1  # the calls, the injected outputs, the answer
        assert measured["ack_ms"] > 0 and "mcp_step" in measured["timings"]
        turns = run["turns"]
        assert [t["call"] for t in turns] == ["function_call:shell"] * 3 + [""]
        # the ws rollout's tool outputs; each generation's output tokens are its deltas, which sum to the usage
        assert [t["output_chars"] for t in turns] == [t["output_chars"] for t in beside["turns"]]
        assert measured["output_tokens_from"] == "deltas"
        assert sum(t["output_tokens"] for t in turns) == measured["output_tokens"]
        assert measured["input_tokens"] >= measured["input_tokens_ws"] > 0  # its prompts hold the ws turns' items
        for turn in turns:
            assert 0 < turn["ttft_ms"] <= turn["turn_ms"] and turn["model_ms"] >= 2
            assert turn["overhead_ms"] == pytest.approx(turn["turn_ms"] - turn["model_ms"])
        assert all(t["tool_ms"] >= 5 for t in turns[:-1]) and turns[-1]["tool_ms"] == 0
        assert run["e2e_ms"] >= run["physical_ms"] > 3 * 5
    median = inject["median"]
    assert median["turns_completed"] == 4 and median["e2e_over_physical"] >= 1
    assert median["overhead_tool_steps_ms"] is not None and median["to_first_output_overhead_ms"] is not None
    assert median["inject"]["responses_created"] == 1
    names = ["e2e inject/ws", "overhead inject/ws", "overhead per tool step inject/ws", "to first output inject/ws"]
    assert set(names) <= set(result["ratios"])
    assert result["ratios"]["e2e inject/ws"] == pytest.approx(median["e2e_ms"] / ws["median"]["e2e_ms"])
    table = capsys.readouterr().out
    assert "one multi-agent response (inject)" in table and "1 response created a run, 3 injects" in table


def test_inject_needs_a_ws_rollout_before_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "agent-loop", "--modes", "inject", "--quiet"]) == 1
    assert "--modes must list ws before it" in capsys.readouterr().err
    assert main(["bench", "agent-loop", "--modes", "inject,ws", "--quiet"]) == 1
    assert "--modes must list ws before it" in capsys.readouterr().err
    assert main(["bench", "agent-loop", "--modes", "ws,inject", "--deferred", "3", "--quiet"]) == 1
    assert "mode inject runs on hotloop-sim" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["bench", "overhead", "--modes", "ws,inject"])  # a loop mode, not a continuation's
    assert exited.value.code == 2


def test_overhead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plot = tmp_path / "overhead.json", tmp_path / "overhead.png"
    argv = ["bench", "overhead", "--context-tokens", "500,3000", "--samples", "3", "--quiet"]
    assert main([*argv, "--json", str(out), "--plot", str(plot)]) == 0
    result = json.loads(out.read_text())
    assert result["scenario"] == "overhead"
    assert [entry["context_tokens"] for entry in result["sizes"]] == [500, 3000]
    small, large = (entry["modes"] for entry in result["sizes"])
    for mode in MODES:
        assert len(small[mode]["samples"]) == 3 and len(large[mode]["samples"]) == 3
        assert 0 < small[mode]["median_ms"] <= small[mode]["p90_ms"]
        assert small[mode]["history_tokens"] < large[mode]["history_tokens"]
        assert large[mode]["samples"][0]["context_tokens"] > large[mode]["history_tokens"]
    assert "3000: ws/http-full" in result["ratios"]
    assert plot.read_bytes().startswith(PNG)
    assert "p90" in capsys.readouterr().out


@pytest.mark.parametrize("shape", ["message", "items"])
def test_overhead_history_shapes(tmp_path: Path, shape: str) -> None:
    out = tmp_path / "overhead.json"
    argv = ["bench", "overhead", "--context-tokens", "3000", "--samples", "2", "--history", shape, "--quiet"]
    assert main([*argv, "--modes", "http-full,ws", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["config"]["history"] == shape
    [size] = result["sizes"]
    for mode in ("http-full", "ws"):
        built = size["modes"][mode]["history_tokens"]
        assert 2000 < built < 4500, built  # about the size asked for, whatever the shape


def test_history_shapes_have_their_size_and_form() -> None:
    from hotloop.bench.scenario import shaped_history

    message = shaped_history("message", 10_000, 4.0)
    items = shaped_history("items", 10_000, 4.0)
    assert len(message) == 2 and len(message[1]["content"][0]["text"]) == (10_000 - 700) * 4
    assert len(items) > 80 and {item["role"] for item in items[1:]} == {"user", "assistant"}
    with pytest.raises(ValueError, match="unknown history shape"):
        shaped_history("tables", 1000)


@pytest.mark.parametrize("scenario", ["agent-loop", "overhead"])
def test_help_documents_every_option(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", scenario, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    options = ["--modes", "--json", "--plot", "--base-url", "--api-key", "--quiet", "--context-tokens"]
    loop = ["--turns", "--tps", "--ttft-ms", "--tool-ms", "--runs", "--mcp", "--tools", "--deferred"]
    options += loop if scenario == "agent-loop" else ["--samples"]
    for option in options:
        assert option in text, option


def test_bad_mode_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "agent-loop", "--modes", "http-full,grpc"])
    assert exited.value.code == 2
    assert "modes must be among" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["bench", "agent-loop", "--tools", "function,hosted"])
    assert exited.value.code == 2
    assert "tool sets must be among" in capsys.readouterr().err
