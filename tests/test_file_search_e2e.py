"""`file_search` end to end on real vector stores (no fake search): files uploaded and ingested, then searched by
the model inside a response, driven by unmodified clients: openai-python over HTTP (`include` the results, a
continuation, a stream), WebSocket mode, the OpenAI Agents SDK's `FileSearchTool`, and smollm2 (the real local
model, offered the search as a function)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest
from agents import Agent, FileSearchTool, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.items import MessageOutputItem, ToolCallItem
from openai import AsyncOpenAI
from openai.types.responses import ResponseFileSearchToolCall, ResponseOutputMessage

from conftest import RunningServer, start_server
from websocket_sdk_support import run_turn, ws_client

set_tracing_disabled(True)  # no trace export: the SDK would otherwise try to reach api.openai.com
DOCS = {
    "kettle.md": "Descale the kettle with citric acid every month; limescale slows the boil.",
    "router.txt": "Reset the router by holding the pinhole button for ten seconds, then wait for the green light.",
    "garden.txt": "Tomatoes need six hours of sun and deep watering twice a week in summer.",
}
QUESTION = "How do I descale the kettle?"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, str, dict[str, str]]]:
    running = start_server(tmp_path_factory.mktemp("fs-e2e"), models=["hotloop-sim", "smollm2-135m"])
    client = running.client()
    store = client.vector_stores.create(name="house")
    batch = client.vector_stores.file_batches.upload_and_poll(
        vector_store_id=store.id, files=[(name, text.encode()) for name, text in DOCS.items()], poll_interval_ms=100
    )
    assert batch.file_counts.completed == len(DOCS)
    ids = {entry.id: entry.id for entry in client.vector_stores.files.list(store.id)}
    names = {client.files.retrieve(file_id).filename: file_id for file_id in ids}
    yield running, store.id, names
    running.stop()


def _tool(store_id: str) -> dict[str, object]:
    return {"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}


def _parts(response: object) -> tuple[ResponseFileSearchToolCall, ResponseOutputMessage]:
    call, message = response.output  # type: ignore[attr-defined]
    assert isinstance(call, ResponseFileSearchToolCall) and isinstance(message, ResponseOutputMessage)
    return call, message


def test_the_model_searches_the_store_and_cites_the_file(served: tuple[RunningServer, str, dict[str, str]]) -> None:
    running, store_id, names = served
    client = running.client()
    response = client.responses.create(
        model="hotloop-sim", input=QUESTION, tools=[_tool(store_id)], include=["file_search_call.results"]
    )
    call, message = _parts(response)
    assert call.status == "completed" and call.queries == [QUESTION.rstrip("?")]  # the sim searches its words
    assert call.results is not None and call.results[0].filename == "kettle.md"
    assert call.results[0].file_id == names["kettle.md"] and "citric acid" in (call.results[0].text or "")
    [citation] = message.content[0].annotations  # type: ignore[union-attr]
    assert (citation.type, citation.file_id, citation.filename) == ("file_citation", names["kettle.md"], "kettle.md")
    # Without `include`, the results stay on the server: null here, kept for the continuation and the replay.
    plain = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[_tool(store_id)])
    assert _parts(plain)[0].results is None
    stored = client.responses.retrieve(plain.id, include=["file_search_call.results"])
    assert _parts(stored)[0].results is not None
    follow = client.responses.create(
        model="hotloop-sim", input="And the router?", previous_response_id=plain.id, tools=[_tool(store_id)]
    )
    assert follow.output[0].type == "file_search_call" and follow.status == "completed"


def test_a_stream_and_websocket_mode_carry_the_search(served: tuple[RunningServer, str, dict[str, str]]) -> None:
    running, store_id, _ = served
    with running.client().responses.stream(
        model="hotloop-sim", input=QUESTION, tools=[_tool(store_id)], include=["file_search_call.results"]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    for kind in ("in_progress", "searching", "completed"):
        assert f"response.file_search_call.{kind}" in kinds
    assert "response.output_text.annotation.added" in kinds
    assert _parts(final)[0].results[0].filename == "kettle.md"  # type: ignore[index]

    with ws_client(running).responses.connect() as conn:
        response, events = run_turn(conn, model="hotloop-sim", input=QUESTION, tools=[_tool(store_id)], store=False)
    assert response.status == "completed" and _parts(response)[0].status == "completed"
    assert any(event.type == "response.file_search_call.completed" for event in events)


def test_the_agents_sdk_file_search_tool(served: tuple[RunningServer, str, dict[str, str]]) -> None:
    running, store_id, names = served

    async def run() -> None:
        client = AsyncOpenAI(base_url=running.base_url, api_key="test-key", max_retries=0)
        agent = Agent(
            name="librarian",
            instructions="Answer from the files.",
            model=OpenAIResponsesModel(model="hotloop-sim", openai_client=client),
            tools=[FileSearchTool(vector_store_ids=[store_id], max_num_results=2, include_search_results=True)],
        )
        result = await Runner.run(agent, QUESTION)
        calls = [item.raw_item for item in result.new_items if isinstance(item, ToolCallItem)]
        assert len(calls) == 1 and isinstance(calls[0], ResponseFileSearchToolCall)
        assert calls[0].results is not None and calls[0].results[0].file_id == names["kettle.md"]
        [message] = [item for item in result.new_items if isinstance(item, MessageOutputItem)]
        assert message.raw_item.content[0].annotations[0].file_id == names["kettle.md"]  # type: ignore[union-attr]
        assert "[1]" in result.final_output
        await client.close()

    asyncio.run(run())


def test_smollm2_gets_the_search_as_a_function(served: tuple[RunningServer, str, dict[str, str]]) -> None:
    running, store_id, _ = served
    response = running.client().responses.create(
        model="smollm2-135m",
        input=QUESTION,
        tools=[_tool(store_id)],
        tool_choice={"type": "file_search"},
        include=["file_search_call.results"],
        max_output_tokens=64,
    )
    call = response.output[0]
    assert isinstance(call, ResponseFileSearchToolCall) and call.status == "completed" and call.queries
    assert call.results is not None  # the real search ran on what the model asked
    assert response.status in ("completed", "incomplete")


def test_another_keys_store_fails_the_call_not_the_response(tmp_path_factory: pytest.TempPathFactory) -> None:
    running = start_server(tmp_path_factory.mktemp("fs-keys"), api_keys=["key-a", "key-b"], models=["hotloop-sim"])
    try:
        mine = running.client(api_key="key-a").vector_stores.create(name="a's")
        other = running.client(api_key="key-b")
        response = other.responses.create(model="hotloop-sim", input=QUESTION, tools=[_tool(mine.id)])
        assert response.output[0].type == "file_search_call" and response.output[0].status == "failed"
        with pytest.raises(openai.NotFoundError):
            other.vector_stores.search(mine.id, query="kettle")
    finally:
        running.stop()
