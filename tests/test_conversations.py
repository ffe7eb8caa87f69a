"""The Conversations API with the official openai SDK, on every store; and `conversation` on response.create."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest

from conftest import RunningServer, start_server
from store_support import KINDS, drop_namespace, namespace, store_url
from wsutil import WS


@pytest.fixture(scope="module", params=KINDS)
def conv_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    kind, ns = request.param, namespace()
    tmp = tmp_path_factory.mktemp(f"conv-{kind}")
    running = start_server(tmp, store_url=store_url(kind, ns, tmp), api_keys=["key-a", "key-b"], models=["hotloop-sim"])
    yield running
    running.stop()
    asyncio.run(drop_namespace(kind, ns))


def _message(text: str, role: str = "user") -> dict[str, str]:
    return {"type": "message", "role": role, "content": text}


def test_create_retrieve_update_and_delete(conv_server: RunningServer) -> None:
    client = conv_server.client("key-a")
    conversation = client.conversations.create(items=[_message("first")], metadata={"topic": "demo"})
    assert conversation.id.startswith("conv_") and conversation.object == "conversation"
    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "demo"}
    updated = client.conversations.update(conversation.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}
    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "changed"}
    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted is True and deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(conversation.id)


def test_items_add_list_page_retrieve_and_delete(conv_server: RunningServer) -> None:
    client = conv_server.client("key-a")
    conversation = client.conversations.create(items=[_message("one"), _message("two", "assistant")])
    added = client.conversations.items.create(conversation.id, items=[_message("three"), _message("four")])
    assert [item.content[0].text for item in added.data] == ["three", "four"]  # type: ignore[union-attr]
    newest_first = client.conversations.items.list(conversation.id)
    texts = [item.content[0].text for item in newest_first.data]  # type: ignore[union-attr]
    assert texts == ["four", "three", "two", "one"]
    page = client.conversations.items.list(conversation.id, order="asc", limit=2)
    assert [item.content[0].text for item in page.data] == ["one", "two"] and page.has_more  # type: ignore[union-attr]
    rest = client.conversations.items.list(conversation.id, order="asc", after=page.data[-1].id)  # type: ignore[union-attr]
    assert [item.content[0].text for item in rest.data] == ["three", "four"] and not rest.has_more  # type: ignore[union-attr]
    item_id = page.data[1].id  # type: ignore[union-attr]
    assert client.conversations.items.retrieve(item_id, conversation_id=conversation.id).id == item_id
    after_delete = client.conversations.items.delete(item_id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id
    remaining = client.conversations.items.list(conversation.id, order="asc")
    assert [item.content[0].text for item in remaining.data] == ["one", "three", "four"]  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(item_id, conversation_id=conversation.id)


def test_responses_read_and_extend_a_conversation(conv_server: RunningServer) -> None:
    client = conv_server.client("key-a")
    conversation = client.conversations.create(items=[_message("You answer briefly.", "developer")])
    first = client.responses.create(model="hotloop-sim", conversation=conversation.id, input="Hello there")
    assert first.status == "completed" and first.conversation is not None
    assert first.conversation.id == conversation.id
    second = client.responses.create(model="hotloop-sim", conversation={"id": conversation.id}, input="And again")
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + 5  # the first turn is in the second's context
    items = client.conversations.items.list(conversation.id, order="asc").data
    roles = [(item.type, getattr(item, "role", None)) for item in items]
    assert roles == [
        ("message", "developer"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[2].id == first.output[0].id  # the output items are stored as they were sent
    with WS(conv_server.ws_url, api_key="key-a") as ws:
        events = ws.turn(model="hotloop-sim", conversation=conversation.id, input="Over the socket")
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["conversation"] == {"id": conversation.id}
    assert len(client.conversations.items.list(conversation.id, limit=100).data) == 7


def test_conversation_errors_name_the_parameter_and_store_nothing(conv_server: RunningServer) -> None:
    http = conv_server.http("key-a")
    conversation = http.post("/conversations", json={}).json()
    cid = conversation["id"]
    cases = [
        ("/conversations", {"items": "nope"}, "items"),
        ("/conversations", {"items": [_message("x")] * 21}, "items"),
        ("/conversations", {"metadata": {"k": 1}}, "metadata"),
        ("/conversations", {"items": [{"type": "item_reference", "id": "msg_x"}]}, "items[0]"),
        (f"/conversations/{cid}/items", {}, "items"),
        (f"/conversations/{cid}/items", {"items": [{"type": "message", "role": "user"}]}, "items[0].content"),
        (f"/conversations/{cid}", {}, "metadata"),
    ]
    for path, body, param in cases:
        reply = http.post(path, json=body)
        assert reply.status_code == 400, (path, body, reply.text)
        assert reply.json()["error"]["param"] == param
    assert http.get(f"/conversations/{cid}/items").json()["data"] == []
    both = http.post("/responses", json={"input": "x", "conversation": cid, "previous_response_id": "resp_x"})
    assert both.status_code == 400 and both.json()["error"]["param"] == "conversation"
    missing = http.post("/responses", json={"input": "x", "conversation": "conv_missing"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "conversation"
    seeded = http.post("/conversations", json={"items": [{**_message("seed"), "id": "msg_seed"}]}).json()["id"]
    reused = http.post("/responses", json={"input": [{**_message("again"), "id": "msg_seed"}], "conversation": seeded})
    assert reused.status_code == 400 and reused.json()["error"]["param"] == "input[0].id"
    assert len(http.get(f"/conversations/{seeded}/items").json()["data"]) == 1  # nothing generated, nothing added
    wrong_type = http.post("/responses", json={"input": "x", "conversation": 7})
    assert wrong_type.status_code == 400 and wrong_type.json()["error"]["param"] == "conversation"


def test_another_key_never_sees_a_conversation(conv_server: RunningServer) -> None:
    owner = conv_server.http("key-a")
    other = conv_server.http("key-b")
    cid = owner.post("/conversations", json={"items": [_message("private")]}).json()["id"]
    item_id = owner.get(f"/conversations/{cid}/items").json()["data"][0]["id"]
    assert other.get(f"/conversations/{cid}").status_code == 404
    assert other.post(f"/conversations/{cid}", json={"metadata": {}}).status_code == 404
    assert other.get(f"/conversations/{cid}/items").status_code == 404
    assert other.post(f"/conversations/{cid}/items", json={"items": [_message("x")]}).status_code == 404
    assert other.get(f"/conversations/{cid}/items/{item_id}").status_code == 404
    assert other.delete(f"/conversations/{cid}/items/{item_id}").status_code == 404
    assert other.post("/responses", json={"input": "x", "conversation": cid}).status_code == 404
    assert other.delete(f"/conversations/{cid}").status_code == 404
    assert len(owner.get(f"/conversations/{cid}/items").json()["data"]) == 1
