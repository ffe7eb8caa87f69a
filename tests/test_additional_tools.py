"""`additional_tools` input items (protocol.md §1.11; openai-python's beta `AdditionalTools`, which Codex sends):
the tools they list are callable from where the item stands, rendered there as a developer message, so the prompt
before it is kept; a malformed list is refused with a 400 naming `input`, and nothing is stored."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from conftest import RunningServer, stored_counts
from hotloop.backends.base import GenerationRequest
from test_tool_search import WEATHER, record_generations

JSON = dict[str, Any]


def added(*tools: JSON) -> JSON:
    return {"type": "additional_tools", "role": "developer", "tools": list(tools)}


@pytest.fixture
def generations(monkeypatch: pytest.MonkeyPatch) -> list[GenerationRequest]:
    return record_generations(monkeypatch)


def test_added_tools_are_callable_and_extend_the_prompt(
    client: openai.OpenAI, generations: list[GenerationRequest]
) -> None:
    first = client.responses.create(model="hotloop-sim", input="Hello.", metadata={"sim_tool_calls": "0"})
    assert [item.type for item in first.output] == ["message"]
    second = client.responses.create(
        model="hotloop-sim",
        previous_response_id=first.id,
        input=[added(WEATHER), {"role": "user", "content": "Weather in Paris?"}],
        metadata={"sim_tool_calls": "1"},
    )
    [call] = second.output
    assert call.type == "function_call" and call.name == "get_weather"
    # Offered from here on, not in the system message: the second prompt starts with the first one's ids.
    assert [spec.name for spec in generations[0].tools] == []
    assert [spec.name for spec in generations[1].tools] == ["get_weather"]
    before, after = list(generations[0].prompt_tokens), list(generations[1].prompt_tokens)
    assert after[: len(before)] == before and len(after) > len(before)
    assert second.usage is not None and second.usage.input_tokens_details.cached_tokens >= len(before)
    listed = client.responses.input_items.list(second.id, order="asc").data
    assert listed[0].type == "additional_tools"


def test_a_namespace_in_added_tools_is_called_in_its_namespace(client: openai.OpenAI) -> None:
    namespace = {"type": "namespace", "name": "crm", "description": "CRM.", "tools": [WEATHER]}
    response = client.responses.create(
        model="hotloop-sim",
        input=[{"role": "user", "content": "Go."}, added(namespace)],
        metadata={"sim_tool_calls": "1"},
    )
    [call] = response.output
    assert call.type == "function_call" and (call.name, call.namespace) == ("get_weather", "crm")


@pytest.mark.parametrize(
    "tools",
    [
        [{"type": "function"}],
        [{"type": "teleport"}],
        [{"type": "file_search", "vector_store_ids": ["vs_1"]}],
        [{"type": "code_interpreter", "container": {"type": "auto"}}],
        [{"type": "function", "name": "f", "parameters": "x"}],
    ],
    ids=["no-name", "refused-type", "server-run-file-search", "server-run-code", "bad-parameters"],
)
def test_a_malformed_added_tool_is_refused(server: RunningServer, client: openai.OpenAI, tools: list[JSON]) -> None:
    before = stored_counts(server)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="hotloop-sim", input=[{"role": "user", "content": "x"}, added(*tools)])
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "input" and "additional_tools" in error["message"]
    assert stored_counts(server) == before
