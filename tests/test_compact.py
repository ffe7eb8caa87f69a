"""`POST /v1/responses/compact` (protocol.md §1.8) through the openai SDK and raw HTTP."""

from __future__ import annotations

from conftest import RunningServer, stored_counts
from http_support import error_of

SIM = "hotloop-sim"


def test_compact_a_chain_then_continue_from_its_output(server: RunningServer) -> None:
    client = server.client()
    first = client.responses.create(model=SIM, input="first question")
    second = client.responses.create(model=SIM, input="second question", previous_response_id=first.id)
    before = stored_counts(server)
    # The raw body: the SDK's models type compaction output as output items, which user messages are not.
    raw = client.responses.with_raw_response.compact(model=SIM, previous_response_id=second.id)
    compacted = raw.http_response.json()
    assert stored_counts(server) == before  # nothing is stored
    assert compacted["object"] == "response.compaction" and compacted["usage"]["input_tokens"] > 0
    output = compacted["output"]
    users = [item for item in output if item["type"] == "message"]
    assert [item["role"] for item in users] == ["user", "user"]
    assert [item["content"][0]["text"] for item in users] == ["first question", "second question"]
    assert output[-1]["type"] == "compaction" and output[-1]["encrypted_content"]
    assert output[-1]["id"].startswith("cmp_")
    # A new chain starts from the compacted output, unmodified, plus new items.
    follow = client.responses.create(model=SIM, input=[*output, {"role": "user", "content": "third"}])
    assert follow.status == "completed"
    # The compaction id is not a response id.
    with server.http() as http:
        reply = http.post("/responses", json={"input": "x", "previous_response_id": compacted["id"]})
        error_of(reply, 400, "previous_response_not_found", "previous_response_id")


def test_compaction_blob_is_verified(server: RunningServer) -> None:
    client = server.client()
    compacted = client.responses.with_raw_response.compact(model=SIM, input="remember this").http_response.json()
    blob = compacted["output"][-1]["encrypted_content"]
    tampered = {"type": "compaction", "encrypted_content": "x" + blob}
    with server.http() as http:
        reply = http.post("/responses", json={"input": [tampered]})
        error_of(reply, 400, "invalid_encrypted_content", "input")


def test_compact_needs_a_model(server: RunningServer) -> None:
    with server.http() as http:
        error_of(http.post("/responses/compact", json={"input": "x"}), 400, "missing_required_parameter", "model")
        error_of(http.post("/responses/compact", json={"model": "nope", "input": "x"}), 404, "model_not_found", "model")
