"""Stored responses over HTTP (protocol.md §1.8): retrieve, delete, input_items, store:false, background, cancel."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from conftest import RunningServer, stored_counts
from http_support import check_sequence, error_of, parse_sse, sdk_json, wait_status
from schema import check_response

SIM = "hotloop-sim"
SLOW = {"sim_tps": "5"}


def create(server: RunningServer, **body: Any) -> dict[str, Any]:
    response = sdk_json(server.client().responses.create(model=SIM, **body))
    check_response(response)
    return response


def test_retrieve_delete(server: RunningServer) -> None:
    client = server.client()
    response = create(server, input="remember me")
    retrieved = sdk_json(client.responses.retrieve(response["id"]))
    check_response(retrieved)
    assert retrieved == response
    before = stored_counts(server)
    with server.http() as http:
        deleted = http.delete(f"/responses/{response['id']}")
        assert deleted.status_code == 200
        assert deleted.json() == {"id": response["id"], "object": "response", "deleted": True}
        assert stored_counts(server)[0] == before[0] - 1
        error_of(http.get(f"/responses/{response['id']}"), 404, "response_not_found", "response_id")
        error_of(http.delete(f"/responses/{response['id']}"), 404, "response_not_found", "response_id")
        error_of(http.get(f"/responses/{response['id']}/input_items"), 404, "response_not_found", "response_id")
        counts = stored_counts(server)
        reply = http.post("/responses", json={"input": "again", "previous_response_id": response["id"]})
        error_of(reply, 400, "previous_response_not_found", "previous_response_id")
        assert stored_counts(server) == counts
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response["id"])


def test_sdk_delete(server: RunningServer) -> None:
    client = server.client()
    response = client.responses.create(model=SIM, input="x")
    check_response(sdk_json(response))
    assert client.responses.delete(response.id) is None
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.delete(response.id)
    assert info.value.code == "response_not_found"


def test_get_unknown(server: RunningServer) -> None:
    with server.http() as http:
        error_of(http.get("/responses/resp_doesnotexist0000000000000"), 404, "response_not_found", "response_id")
        error_of(http.post("/responses/resp_nope/cancel"), 404, "response_not_found", "response_id")


def test_input_items_pagination(server: RunningServer) -> None:
    texts = [f"message {index}" for index in range(5)]
    response = create(server, input=[{"role": "user", "content": text} for text in texts])
    client = server.client()
    listing = sdk_json(client.responses.input_items.list(response["id"]))
    ids = [item["id"] for item in listing["data"]]
    assert [item["content"][0]["text"] for item in listing["data"]] == texts[::-1]  # default order desc
    assert all(item["type"] == "message" and item["role"] == "user" for item in listing["data"])
    assert len(set(ids)) == 5 and all(isinstance(item_id, str) and item_id for item_id in ids)
    with server.http() as http:
        base = f"/responses/{response['id']}/input_items"
        raw = http.get(base).json()
        assert raw["object"] == "list" and raw["has_more"] is False
        assert raw["first_id"] == ids[0] and raw["last_id"] == ids[-1]
        asc = http.get(base, params={"order": "asc"}).json()
        assert [item["id"] for item in asc["data"]] == ids[::-1]
        page1 = http.get(base, params={"order": "asc", "limit": 2}).json()
        assert [item["id"] for item in page1["data"]] == ids[::-1][:2] and page1["has_more"] is True
        assert page1["first_id"] == ids[-1] and page1["last_id"] == ids[-2]
        page2 = http.get(base, params={"order": "asc", "limit": 2, "after": page1["last_id"]}).json()
        assert [item["id"] for item in page2["data"]] == ids[::-1][2:4] and page2["has_more"] is True
        page3 = http.get(base, params={"order": "asc", "limit": 2, "after": page2["last_id"]}).json()
        assert [item["id"] for item in page3["data"]] == ids[::-1][4:] and page3["has_more"] is False
        desc = http.get(base, params={"limit": 3}).json()
        assert [item["id"] for item in desc["data"]] == ids[:3] and desc["has_more"] is True
        for params, param in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "up"}, "order")):
            error_of(http.get(base, params=params), 400, "invalid_value", param)
    # The SDK pages through with `after` by itself.
    every = [item.id for item in client.responses.input_items.list(response["id"], limit=2, order="asc")]
    assert every == ids[::-1]


def test_input_items_own_input_only(server: RunningServer) -> None:
    first = create(server, input="one")
    second = create(server, input="two", previous_response_id=first["id"])
    with server.http() as http:
        data = http.get(f"/responses/{second['id']}/input_items").json()["data"]
    assert [item["content"][0]["text"] for item in data] == ["two"]


def test_store_false(server: RunningServer) -> None:
    before = stored_counts(server)
    response = create(server, input="secret", store=False)
    assert response["store"] is False and response["status"] == "completed"
    assert stored_counts(server) == before
    with server.http() as http:
        error_of(http.get(f"/responses/{response['id']}"), 404, "response_not_found", "response_id")
        error_of(http.get(f"/responses/{response['id']}/input_items"), 404, "response_not_found", "response_id")
        error_of(http.delete(f"/responses/{response['id']}"), 404, "response_not_found", "response_id")
        reply = http.post("/responses", json={"input": "next", "previous_response_id": response["id"]})
        error_of(reply, 400, "previous_response_not_found", "previous_response_id")
        events = parse_sse(http.post("/responses", json={"input": "s", "store": False, "stream": True}).text)
    assert check_sequence(events)["store"] is False
    assert stored_counts(server) == before


# -- background ------------------------------------------------------------------------------------------------------


def test_background_completes(server: RunningServer) -> None:
    response = create(server, input="in the background", background=True)
    assert response["background"] is True and response["status"] in ("queued", "in_progress")
    assert response["usage"] is None and response["completed_at"] is None
    with server.http() as http:
        done = wait_status(http, response["id"], {"completed"})
    assert done["status"] == "completed" and done["output"] and done["usage"]["output_tokens"] > 0
    assert done["background"] is True
    # Cancelling a finished background response returns it unchanged.
    cancelled = sdk_json(server.client().responses.cancel(response["id"]))
    check_response(cancelled)
    assert cancelled == done


def test_background_stream(server: RunningServer) -> None:
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x", "background": True, "stream": True})
        assert reply.status_code == 200
        events = parse_sse(reply.text)
        final = check_sequence(events)
        types = [event["type"] for event in events]
        assert types[:3] == ["response.created", "response.queued", "response.in_progress"]
        assert final["status"] == "completed" and final["background"] is True
        stored = wait_status(http, final["id"], {"completed"})
    assert stored == final


def test_cancel_in_flight_background(server: RunningServer) -> None:
    response = create(server, input="slow", background=True, metadata=SLOW)
    with server.http() as http:
        wait_status(http, response["id"], {"in_progress"})
        reply = http.post(f"/responses/{response['id']}/cancel")
        assert reply.status_code == 200, reply.text
        cancelled = reply.json()
        check_response(cancelled)
        assert cancelled["id"] == response["id"] and cancelled["status"] == "cancelled"
        assert cancelled["completed_at"] is None
        assert cancelled["output"] == []  # the message was cut off: only finished items are kept
        stored = wait_status(http, response["id"], {"cancelled"})  # stored once the generation task has ended
        assert stored == cancelled
        # Cancelled responses are not continuable.
        reply = http.post("/responses", json={"input": "x", "previous_response_id": response["id"]})
        error_of(reply, 400, "previous_response_not_found", "previous_response_id")
    again = sdk_json(server.client().responses.cancel(response["id"]))
    assert again["status"] == "cancelled"


def test_cancel_not_background(server: RunningServer) -> None:
    response = create(server, input="x")
    before = stored_counts(server)
    with server.http() as http:
        reply = http.post(f"/responses/{response['id']}/cancel")
    error_of(reply, 400, "response_not_cancellable", "response_id")
    assert stored_counts(server) == before
    with pytest.raises(openai.BadRequestError):
        server.client().responses.cancel(response["id"])


def test_delete_in_flight_background(server: RunningServer) -> None:
    response = create(server, input="slow", background=True, metadata=SLOW)
    with server.http() as http:
        wait_status(http, response["id"], {"in_progress"})
        assert http.delete(f"/responses/{response['id']}").status_code == 200
        # The DELETE stopped the generation task and waited for its end (objects/responses.py): it is gone, so
        # nothing is left that could store the response again.
        assert response["id"] not in server.service.background
        error_of(http.get(f"/responses/{response['id']}"), 404, "response_not_found", "response_id")


def test_cancel_streamed_background_ends_its_stream(server: RunningServer) -> None:
    """The SSE listener of a cancelled background response still gets one terminal event, then [DONE]."""
    body = {"model": SIM, "input": "slow", "background": True, "stream": True, "metadata": SLOW}
    with server.http() as http, http.stream("POST", "/responses", json=body) as reply:
        lines = reply.iter_lines()
        text = ""
        for line in lines:
            text += line + "\n"
            if line.startswith("data:") and '"response.output_text.delta"' in line:
                break
        response_id = parse_sse(text + "\n", done=False)[0]["response"]["id"]
        with server.http() as other:
            assert other.post(f"/responses/{response_id}/cancel").json()["status"] == "cancelled"
        text += "\n".join(lines) + "\n"
    events = parse_sse(text)
    final = check_sequence(events)
    assert final["status"] == "cancelled" and final["id"] == response_id
