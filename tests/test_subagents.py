"""Subagents inside one multi-agent response (protocol.md §1.12, pipeline/agents/): the root spawns subagents as
`multi_agent_call`s, each runs its own loop on the same engine, their items stream into the one response with their
`agent`, their answers reach the root as `agent_message`s, and `wait_agent` gives them to it. Every frame is
openai-python's `BetaResponsesServerEvent`, every item a `BetaResponseOutputItem`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import RunningServer, start_server
from test_inject import MULTI, typed, until
from wsutil import WS


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("agents"), models=["hotloop-sim"], ws_inject_wait_s=5.0)
    yield running
    running.stop()


def _names(output: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["type"], (item.get("agent") or {}).get("agent_name", "")) for item in output]


def _create(ws: WS, metadata: dict[str, str], **extra: Any) -> str:
    body = {"model": "hotloop-sim", "input": "Plan the trip.", "multi_agent": MULTI, "metadata": metadata, **extra}
    ws.create(**body)
    return str(typed(ws.recv())["response"]["id"])


def test_two_subagents_answer_the_root_in_one_response(agents: RunningServer) -> None:
    seen: list[dict[str, Any]] = []
    with WS(agents.ws_url) as ws:
        _create(ws, {"sim_subagents": "2", "sim_tool_calls": "0", "sim_output_tokens": "6"})
        final = until(ws, seen, lambda f: f["type"] in ("response.completed", "response.failed"))["response"]
    assert final["status"] == "completed", final.get("error")
    numbers = [frame["sequence_number"] for frame in seen]
    assert numbers == list(range(1, 1 + len(numbers)))
    output = final["output"]
    print(json.dumps(_names(output)))
    spawns = [item for item in output if item["type"] == "multi_agent_call" and item["action"] == "spawn_agent"]
    assert len(spawns) == 2
    answers = [item for item in output if item["type"] == "agent_message" and item["recipient"] == "/root"]
    assert sorted(item["author"] for item in answers) == ["/root/worker_1", "/root/worker_2"]
    waits = [item for item in output if item["type"] == "multi_agent_call_output" and item["action"] == "wait_agent"]
    assert waits and "From /root/worker_" in waits[0]["output"][0]["text"]
    assert output[-1]["type"] == "message" and output[-1]["phase"] == "final_answer"
    assert output[-1]["agent"] == {"agent_name": "/root"}
    sub = [item for item in output if (item.get("agent") or {}).get("agent_name", "").startswith("/root/worker")]
    assert {item["type"] for item in sub} >= {"multi_agent_call", "multi_agent_call_output", "message"}


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_agents_sdk_runs_subagents_tools_by_inject(agents: RunningServer, streamed: bool) -> None:
    """`OpenAIHostedMultiAgentModel` (Agents SDK 0.24), unmodified: two subagents each call a function tool, the
    SDK runs it (it pauses at any agent's call) and injects the output, which reaches the subagent that called;
    the root then calls one tool of its own and answers. Four tool runs, one response."""
    from agents import Runner, set_tracing_disabled
    from agents.extensions.experimental.hosted_multi_agent import OpenAIHostedMultiAgentModel
    from openai import AsyncOpenAI

    from test_agents_sdk import Recorder, make_agent, responses_count

    set_tracing_disabled(True)
    before = responses_count(agents, "websocket")
    client = AsyncOpenAI(base_url=agents.base_url, api_key="test-key", max_retries=0)
    model = OpenAIHostedMultiAgentModel("hotloop-sim", client)
    recorder = Recorder()
    agent, _ = make_agent(recorder, model=model, k=2, metadata={"sim_subagents": "2"})
    try:
        if streamed:
            result: Any = Runner.run_streamed(agent, "What is the weather, and what is 2 + 3?")
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, "What is the weather, and what is 2 + 3?")
    finally:
        await model.close()
        await client.close()
    assert len(recorder.calls) == 4, recorder.calls  # one per subagent, two of the root's
    assert isinstance(result.final_output, str) and result.final_output.strip()
    assert responses_count(agents, "websocket") - before == 1
