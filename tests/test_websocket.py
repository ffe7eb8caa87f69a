"""WebSocket mode with a raw client: the create frame, warmup, frame errors and continuation (protocol.md §3, §4)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import RunningServer, stored_counts
from wsutil import WEATHER, WS, final, function_calls, user


def test_create_flat_body_stream_is_ignored(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        for stream in (True, False, None):
            body = {"model": "hotloop-sim", "input": "hello", "stream": stream, "stream_options": {}}
            events = ws.turn(**body, client_metadata={"x": "y"}, some_future_field=1)
            response = final(events)
            assert events[-1]["type"] == "response.completed"
            assert response["status"] == "completed" and response["output"]
            assert response["usage"]["output_tokens"] > 0
            assert all("stream_id" not in event for event in events)


def test_background_is_rejected(server: RunningServer) -> None:
    before = stored_counts(server)
    with WS(server.ws_url) as ws:
        frame = ws.error(model="hotloop-sim", input="hi", background=True)
        assert frame["status"] == 400
        assert frame["error"]["type"] == "invalid_request_error"
        assert frame["error"]["code"] == "unsupported_parameter"
        assert frame["error"]["param"] == "background"
        assert set(frame) == {"type", "status", "error"}
        # the socket stays usable
        assert final(ws.turn(input="hi"))["status"] == "completed"
    assert stored_counts(server)[0] == before[0] + 1


def test_warmup_then_chain(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        instructions = "You are a careful assistant. " * 20
        events = ws.turn(input=user("warm this up"), instructions=instructions, tools=[WEATHER], generate=False)
        assert [event["type"] for event in events] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        warm = final(events)
        assert warm["output"] == [] and warm["usage"]["output_tokens"] == 0
        assert warm["usage"]["input_tokens"] > 0
        events = ws.turn(previous_response_id=warm["id"], input=[], instructions=instructions, tools=[WEATHER])
        real = final(events)
        assert real["status"] == "completed" and real["previous_response_id"] == warm["id"]
        assert real["output"]
        assert real["usage"]["input_tokens_details"]["cached_tokens"] > 0


def test_malformed_frames_keep_the_socket_open(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        ws.send("{not json")
        frame = ws.recv()
        assert frame["error"]["code"] == "invalid_json" and frame["status"] == 400
        assert frame["error"]["param"] is None
        for bad in ([1, 2], {"type": 5}, {"input": "x"}, "null"):
            ws.send(json.dumps(bad) if not isinstance(bad, str) else bad)
            frame = ws.recv()
            assert frame["error"]["code"] == "invalid_event" and frame["error"]["param"] == "type", bad
        ws.send({"type": "response.teleport", "response_id": "resp_x", "input": []})
        frame = ws.recv()
        assert frame["error"]["code"] == "unknown_event_type" and frame["error"]["param"] == "type"
        # an inject for a response this connection does not know fails (tests/test_inject.py has the rest)
        ws.send({"type": "response.inject", "response_id": "resp_x", "input": []})
        frame = ws.recv()
        assert frame["type"] == "response.inject.failed" and frame["error"]["code"] == "response_not_found"
        # a binary frame holding JSON is accepted
        ws.send(json.dumps({"type": "response.create", "input": "binary"}).encode())
        assert final(ws.collect())["status"] == "completed"
        # a text create still works after all that
        assert final(ws.turn(input="hi"))["status"] == "completed"


def test_processed_gets_no_reply_and_a_steer_for_a_finished_response_fails(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        response = final(ws.turn(input="hi"))
        ws.send({"type": "response.processed", "response_id": response["id"]})
        ws.send({"type": "response.steer", "previous_response_id": response["id"], "input": "go left"})
        frame = ws.recv()  # the steer reply comes first: processed had none
        assert frame["type"] == "response.steer.failed"
        assert frame["error"]["code"] == "response_already_completed"  # it ended and waits for nothing
        assert frame["error"]["type"] == "invalid_request_error" and frame["error"]["message"]
        assert frame["steer"]["previous_response_id"] == response["id"]
        assert isinstance(frame["sequence_number"], int)
        with_error = ws.turn(input="again")
        assert final(with_error)["status"] == "completed"


def test_store_false_chain_lives_on_its_connection(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        first = final(ws.turn(input="one", store=False))
        second = final(ws.turn(input=user("two"), store=False, previous_response_id=first["id"]))
        assert second["status"] == "completed" and second["previous_response_id"] == first["id"]
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
        assert second["store"] is False
        with WS(server.ws_url) as other:
            frame = other.error(input="three", store=False, previous_response_id=second["id"])
            assert frame["error"]["code"] == "previous_response_not_found"
            assert frame["error"]["param"] == "previous_response_id" and frame["status"] == 400
        # still fine on its own socket
        third = final(ws.turn(input="three", store=False, previous_response_id=second["id"]))
        assert third["status"] == "completed"
    # closing dropped it; and it was never written anywhere
    with WS(server.ws_url) as ws:
        frame = ws.error(input="four", previous_response_id=third["id"])
        assert frame["error"]["code"] == "previous_response_not_found"
    with server.http() as http:
        assert http.get(f"/responses/{third['id']}").status_code == 404


def test_store_true_continues_on_a_new_connection(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        first = final(ws.turn(input="remember me", store=True))
    with WS(server.ws_url) as ws:
        second = final(ws.turn(input=user("next"), previous_response_id=first["id"], store=False))
        assert second["status"] == "completed" and second["previous_response_id"] == first["id"]
        assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    with server.http() as http:
        stored = http.get(f"/responses/{first['id']}")
        assert stored.status_code == 200 and stored.json()["output"] == first["output"]
        assert http.get(f"/responses/{second['id']}").status_code == 404


def test_failed_continuation_evicts_its_parent(server: RunningServer) -> None:
    before = stored_counts(server)
    with WS(server.ws_url) as ws:
        parent = final(ws.turn(input="weather?", tools=[WEATHER], store=False))
        calls = function_calls(parent)
        assert len(calls) == 1
        bad = [{"type": "function_call_output", "call_id": "call_unknown", "output": "sunny"}]
        frame = ws.error(input=bad, tools=[WEATHER], store=False, previous_response_id=parent["id"])
        assert frame["error"]["code"] == "function_call_not_found" and frame["error"]["param"] == "input"
        good = [{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "sunny"}]
        frame = ws.error(input=good, tools=[WEATHER], store=False, previous_response_id=parent["id"])
        assert frame["error"]["code"] == "previous_response_not_found"
    assert stored_counts(server) == before


def test_rejected_creates_store_nothing(server: RunningServer) -> None:
    before = stored_counts(server)
    with WS(server.ws_url) as ws:
        rejects: list[tuple[dict[str, object], str]] = [
            ({"input": "x", "background": True}, "unsupported_parameter"),
            ({"input": "x", "previous_response_id": "resp_doesnotexist000000000000"}, "previous_response_not_found"),
            ({"input": "x", "model": "no-such-model"}, "model_not_found"),
            ({"input": [{"type": "function_call_output", "call_id": "c1", "output": "o"}]}, "function_call_not_found"),
            ({"input": "x", "stream_id": "bad id"}, "invalid_stream_id"),
            ({"input": "x", "temperature": "hot"}, "invalid_type"),
            ({"input": "x", "metadata": {"k" * 65: "v"}}, ""),
        ]
        for body, code in rejects:
            frame = ws.error(**body)
            assert frame["status"] in (400, 404), frame
            if code:
                assert frame["error"]["code"] == code, (body, frame)
    assert stored_counts(server) == before


def test_errors_wait_for_the_lane_ahead(server: RunningServer) -> None:
    """A create is validated at the head of its lane: its error follows the running response's terminal (§3.9)."""
    with WS(server.ws_url) as ws:
        ws.create(input="first", metadata={"sim_tps": "200", "sim_output_tokens": "40"}, store=False)
        ws.create(input="x", previous_response_id="resp_unknown000000000000000000")
        ws.create(input="x", background=True)
        frames = ws.collect(terminals=1, errors=2)
        assert [frame["type"] for frame in frames[-2:]] == ["error", "error"]
        assert frames[-3]["type"] == "response.completed"
        # connection-level errors are sent at once, ahead of the running response
        ws.create(input="second", metadata={"sim_tps": "200", "sim_output_tokens": "40"}, store=False)
        ws.send("nope")
        frames = ws.collect(terminals=1, errors=1)
        assert frames[-1]["type"] == "response.completed"
        assert [frame["error"]["code"] for frame in frames if frame["type"] == "error"] == ["invalid_json"]


def test_incomplete_response_is_continuable(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        events = ws.turn(input="talk", max_output_tokens=16, metadata={"sim_output_tokens": "200"}, store=False)
        cut = final(events)
        assert events[-1]["type"] == "response.incomplete" and cut["status"] == "incomplete"
        assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
        assert final(ws.turn(input="go on", previous_response_id=cut["id"], store=False))["status"] == "completed"


def test_stored_child_of_an_unstored_parent(server: RunningServer) -> None:
    """A stored R whose parent was store:false keeps only a reference; once the socket is gone R is a miss (§4)."""
    with WS(server.ws_url) as ws:
        parent = final(ws.turn(input="private", store=False))
        child = final(ws.turn(input=user("public"), store=True, previous_response_id=parent["id"]))
        assert child["status"] == "completed"
        assert final(ws.turn(input="on", previous_response_id=child["id"], store=False))["status"] == "completed"
    with server.http() as http:
        stored = http.get(f"/responses/{child['id']}")
        assert stored.status_code == 200 and stored.json()["previous_response_id"] == parent["id"]
        assert http.get(f"/responses/{parent['id']}").status_code == 404
    with WS(server.ws_url) as ws:
        frame = ws.error(input="more", previous_response_id=child["id"])
        assert frame["error"]["code"] == "previous_response_not_found"


def test_steer_reply_follows_its_target(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        events = ws.turn(input="hi", stream_id="lane_s", store=False)
        target = final(events)
        ws.send({"type": "response.steer", "previous_response_id": target["id"], "input": "left"})
        frame = ws.recv()
        assert frame["type"] == "response.steer.failed"
        assert frame["sequence_number"] == len(events) and frame["stream_id"] == "lane_s"
        assert frame["steer"]["input"] == "left"
        ws.send({"type": "response.steer", "previous_response_id": "resp_elsewhere", "input": "left"})
        frame = ws.recv()
        assert frame["type"] == "response.steer.failed" and frame["sequence_number"] == 0
        assert "stream_id" not in frame
        assert frame["error"]["code"] == "response_not_found"


def test_storage_fault_still_answers(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with WS(server.ws_url) as ws:
        parent = final(ws.turn(input="hi", store=False))
        monkeypatch.setattr(server.service.store, "load_chain", broken)
        frame = ws.error(input="x", previous_response_id="resp_notcached00000000000000000")
        assert frame["status"] >= 500 and frame["error"]["code"] in ("server_error", "store_unavailable")
        monkeypatch.undo()
        assert final(ws.turn(input="y", previous_response_id=parent["id"], store=False))["status"] == "completed"


def test_deleted_response_is_not_continuable_on_the_socket(server: RunningServer) -> None:
    with WS(server.ws_url) as ws:
        stored = final(ws.turn(input="keep", store=True))
        with server.http() as http:
            assert http.delete(f"/responses/{stored['id']}").status_code == 200
        frame = ws.error(input="more", previous_response_id=stored["id"])
        assert frame["error"]["code"] == "previous_response_not_found"


def test_query_model_is_the_default(server: RunningServer) -> None:
    with WS(server.ws_url + "?model=no-such-model&client=x") as ws:
        frame = ws.error(input="hi")
        assert frame["status"] == 404 and frame["error"]["code"] == "model_not_found"
        assert frame["error"]["param"] == "model" and "no-such-model" in frame["error"]["message"]
        assert final(ws.turn(input="hi", model="hotloop-sim"))["model"] == "hotloop-sim"
    with WS(server.ws_url + "?model=hotloop-sim&foo=bar") as ws:
        assert final(ws.turn(input="hi"))["model"] == "hotloop-sim"


def test_failed_save_ends_the_response_failed(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that fails after `response.created` turns the response into `response.failed` (never a hang)."""

    async def broken(*args: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with WS(server.ws_url) as ws:
        monkeypatch.setattr(server.service.store, "save", broken)
        events = ws.turn(input="hi", store=True)
        monkeypatch.undo()
        terminal = events[-1]
        assert terminal["type"] == "response.failed"
        assert terminal["response"]["error"]["code"] == "store_unavailable"
        frame = ws.error(input="more", previous_response_id=terminal["response"]["id"])
        assert frame["error"]["code"] == "previous_response_not_found"
    with server.http() as http:
        monkeypatch.setattr(server.service.store, "save", broken)
        reply = http.post("/responses", json={"input": "hi"})
        monkeypatch.undo()
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "store_unavailable"
