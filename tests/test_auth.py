"""API keys over HTTP (protocol.md §0, §1.1): 401 without a valid Bearer, and responses belong to their key."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from conftest import RunningServer, stored_counts
from http_support import check_sequence, error_of, parse_sse, sdk_json
from schema import check_event, check_response

SIM = "hotloop-sim"


def client_for(server: RunningServer, headers: dict[str, str]) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers=headers, timeout=60)


def _create(server: RunningServer, key: str, **body: Any) -> dict[str, Any]:
    with server.http(api_key=key) as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x", **body})
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()
    check_response(response)
    return response


def endpoints(response_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [
        ("POST", "/responses", {"model": SIM, "input": "x"}),
        ("POST", "/responses", {"model": SIM, "input": "x", "stream": True}),
        ("POST", "/responses/input_tokens", {"model": SIM, "input": "x"}),
        ("GET", "/responses", None),
        ("GET", f"/responses/{response_id}", None),
        ("DELETE", f"/responses/{response_id}", None),
        ("GET", f"/responses/{response_id}/input_items", None),
        ("POST", f"/responses/{response_id}/cancel", None),
        ("GET", "/models", None),
        ("GET", f"/models/{SIM}", None),
    ]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic a2V5LWE6"},
        {"Authorization": "key-a"},
        {"Authorization": "Bearer key-a-but-longer"},
        {"Authorization": "Bearer key-"},
    ],
    ids=["none", "wrong", "empty", "basic", "no-scheme", "longer", "prefix"],
)
def test_missing_or_wrong_key(keyed_server: RunningServer, headers: dict[str, str]) -> None:
    response = _create(keyed_server, "key-a")
    before = stored_counts(keyed_server)
    with client_for(keyed_server, headers) as http:
        for method, path, body in endpoints(response["id"]):
            reply = http.request(method, path, json=body)
            error_of(reply, 401, "invalid_api_key", None)
    assert stored_counts(keyed_server) == before


def test_sdk_wrong_key(keyed_server: RunningServer) -> None:
    client = keyed_server.client(api_key="not-a-key")
    for call in (
        client.models.list,
        lambda: client.responses.create(model=SIM, input="x"),
        lambda: client.responses.create(model=SIM, input="x", stream=True),
        lambda: client.responses.retrieve("resp_x"),
    ):
        with pytest.raises(openai.AuthenticationError) as info:
            call()
        assert info.value.status_code == 401 and info.value.code == "invalid_api_key"


def test_health_needs_no_key(keyed_server: RunningServer) -> None:
    root = keyed_server.base_url.removesuffix("/v1")
    assert httpx.get(f"{root}/healthz").status_code == 200


def test_valid_keys_work(keyed_server: RunningServer) -> None:
    for key in ("key-a", "key-b"):
        client = keyed_server.client(api_key=key)
        assert [model.id for model in client.models.list()] == [SIM]
        assert client.models.retrieve(SIM).id == SIM
        response = sdk_json(client.responses.create(model=SIM, input="hi"))
        check_response(response)
        assert response["status"] == "completed"
        assert sdk_json(client.responses.retrieve(response["id"])) == response
        events = [sdk_json(event) for event in client.responses.create(model=SIM, input="hi", stream=True)]
        for event in events:
            check_event(event)
        assert check_sequence(events)["status"] == "completed"
    with keyed_server.http(api_key="key-a") as http:
        error_of(http.get("/responses"), 426, "upgrade_required", None)


def test_responses_belong_to_their_key(keyed_server: RunningServer) -> None:
    response = _create(keyed_server, "key-a", tools=[{"type": "function", "name": "f"}])
    call_id = response["output"][0]["call_id"]
    message_id = response["output"][0]["id"]
    before = stored_counts(keyed_server)
    with keyed_server.http(api_key="key-b") as other:
        rid = response["id"]
        error_of(other.get(f"/responses/{rid}"), 404, "response_not_found", "response_id")
        error_of(other.delete(f"/responses/{rid}"), 404, "response_not_found", "response_id")
        error_of(other.get(f"/responses/{rid}/input_items"), 404, "response_not_found", "response_id")
        error_of(other.post(f"/responses/{rid}/cancel"), 404, "response_not_found", "response_id")
        body = {"model": SIM, "input": "x", "previous_response_id": rid}
        error_of(other.post("/responses", json=body), 400, "previous_response_not_found", "previous_response_id")
        stream = {**body, "stream": True}
        error_of(other.post("/responses", json=stream), 400, "previous_response_not_found", "previous_response_id")
        ref = {"model": SIM, "input": [{"type": "item_reference", "id": message_id}]}
        error_of(other.post("/responses", json=ref), 400, "item_not_found", "input")
        output = {"model": SIM, "input": [{"type": "function_call_output", "call_id": call_id, "output": "x"}]}
        error_of(other.post("/responses", json=output), 400, "function_call_not_found", "input")
    assert stored_counts(keyed_server) == before
    with pytest.raises(openai.NotFoundError):
        keyed_server.client(api_key="key-b").responses.retrieve(response["id"])
    # The owner still has it, untouched by the other key's attempts.
    with keyed_server.http(api_key="key-a") as owner:
        got = owner.get(f"/responses/{response['id']}")
        assert got.status_code == 200 and got.json() == response
        follow = owner.post(
            "/responses",
            json={
                "model": SIM,
                "previous_response_id": response["id"],
                "input": [{"type": "function_call_output", "call_id": call_id, "output": "ok"}],
                "stream": True,
            },
        )
        assert follow.status_code == 200
        assert check_sequence(parse_sse(follow.text))["status"] == "completed"
        ref = owner.post("/responses", json={"model": SIM, "input": [{"type": "item_reference", "id": message_id}]})
        assert ref.status_code == 200, ref.text


def test_background_cancel_is_per_key(keyed_server: RunningServer) -> None:
    response = _create(keyed_server, "key-a", background=True, metadata={"sim_tps": "20"})
    with keyed_server.http(api_key="key-b") as other:
        error_of(other.post(f"/responses/{response['id']}/cancel"), 404, "response_not_found", "response_id")
        error_of(other.delete(f"/responses/{response['id']}"), 404, "response_not_found", "response_id")
    with keyed_server.http(api_key="key-a") as owner:
        reply = owner.post(f"/responses/{response['id']}/cancel")
        assert reply.status_code == 200 and reply.json()["status"] == "cancelled"
