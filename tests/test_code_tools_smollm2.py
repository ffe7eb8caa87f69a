"""The real model (smollm2-135m through llama.cpp) with the tools the server runs in a container: `code_interpreter`
and a hosted `shell`, each forced by `tool_choice` (the grammar then holds the model to a valid call), so the code
and commands the model wrote really run in the sandbox (docs/code-interpreter.md). What the model writes is never
asserted, only the shape: a call that ran, with its code and container, its answer, and a stream that ends. Short:
`max_output_tokens` bounds the whole response (the generations after the first may call again; `auto` then).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import RunningServer, start_server
from http_support import check_sequence, stream_create
from openai_types_support import openai_typed
from test_sandbox import available  # noqa: F401  (the fixture: root, bubblewrap installed, the sandbox runs here)

MODEL = "smollm2-135m"
MAX_OUTPUT_TOKENS = 48

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def served(available: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:  # noqa: F811
    running = start_server(tmp_path_factory.mktemp("code-smollm2"), models=[MODEL], default_model=MODEL)
    yield running
    running.stop()


def _streamed(served: RunningServer, body: dict[str, Any]) -> dict[str, Any]:
    """The response, streamed to its end: every event valid and numbered, one terminal event last; its status one
    a short response may have."""
    body = {"model": MODEL, "max_output_tokens": MAX_OUTPUT_TOKENS, "temperature": 0, **body}
    with served.http() as http:
        events = stream_create(http, body)
    final = check_sequence(events)
    for event in events:
        openai_typed("event", event)
    assert final["status"] in ("completed", "incomplete"), final.get("error")
    if final["status"] == "incomplete":
        assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    return final


def test_forced_code_interpreter_runs_the_models_code(served: RunningServer) -> None:
    final = _streamed(
        served,
        {
            "input": "What is 2 + 3? Compute it with Python.",
            "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}],
            "tool_choice": {"type": "code_interpreter"},
            "include": ["code_interpreter_call.outputs"],
        },
    )
    call = final["output"][0]
    assert call["type"] == "code_interpreter_call" and call["status"] in ("completed", "failed"), call
    assert isinstance(call["code"], str) and call["container_id"].startswith("cntr_")
    assert call["outputs"] is not None  # what it printed, or its traceback: the run happened
    # The next generation read the run's output: an answer, or another call (`auto` now), unless the budget ran out.
    assert len(final["output"]) > 1 or final["status"] == "incomplete"


def test_forced_hosted_shell_runs_the_models_commands(served: RunningServer) -> None:
    final = _streamed(
        served,
        {
            "input": "Run `ls` in the shell.",
            "tools": [{"type": "shell", "environment": {"type": "container_auto"}}],
            "tool_choice": {"type": "shell"},
        },
    )
    call, answer = final["output"][0], final["output"][1]
    assert call["type"] == "shell_call" and call["status"] == "completed", call
    assert call["action"]["commands"] and all(isinstance(command, str) for command in call["action"]["commands"])
    assert call["environment"]["type"] == "container_reference"
    assert call["environment"]["container_id"].startswith("cntr_")
    assert answer["type"] == "shell_call_output" and answer["call_id"] == call["call_id"]
    assert answer["status"] == "completed" and len(answer["output"]) == len(call["action"]["commands"])
    for entry in answer["output"]:
        assert entry["outcome"]["type"] in ("exit", "timeout")
    for item in (call, answer):
        openai_typed("output", item)
