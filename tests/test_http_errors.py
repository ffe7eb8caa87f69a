"""Rejected HTTP requests (protocol.md §0, §1.9, §6): status, code, param, the 4-key body, nothing stored, no 500."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from conftest import RunningServer, start_server, stored_counts
from http_support import WEATHER_TOOL, error_of
from schema import check_response

SIM = "hotloop-sim"
PNG_BAD = "data:image/png;base64," + base64.b64encode(b"not a png").decode()


def _image(url: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "input_image", "image_url": url, **extra}]}]


# (body fields, status, code, param): each is a create with `model` and `input: "x"` unless it sets them.
CASES: list[tuple[dict[str, Any], int, str, str | None]] = [
    ({"temperature": "hot"}, 400, "invalid_type", "temperature"),
    ({"temperature": True}, 400, "invalid_type", "temperature"),
    ({"temperature": 2.5}, 400, "invalid_value", "temperature"),
    ({"top_p": 1.5}, 400, "invalid_value", "top_p"),
    ({"presence_penalty": -3}, 400, "invalid_value", "presence_penalty"),
    ({"frequency_penalty": 3}, 400, "invalid_value", "frequency_penalty"),
    ({"top_logprobs": 21}, 400, "invalid_value", "top_logprobs"),
    ({"max_output_tokens": 15}, 400, "invalid_value", "max_output_tokens"),
    ({"max_output_tokens": "many"}, 400, "invalid_type", "max_output_tokens"),
    ({"max_tool_calls": 0}, 400, "invalid_value", "max_tool_calls"),
    ({"store": "yes"}, 400, "invalid_type", "store"),
    ({"parallel_tool_calls": "x"}, 400, "invalid_type", "parallel_tool_calls"),
    ({"instructions": 5}, 400, "invalid_type", "instructions"),
    ({"truncation": "maybe"}, 400, "invalid_value", "truncation"),
    ({"model": 5}, 400, "invalid_type", "model"),
    ({"model": "no-such-model"}, 404, "model_not_found", "model"),
    ({"model": ""}, 404, "model_not_found", "model"),
    ({"input": 5}, 400, "invalid_type", "input"),
    ({"input": ["just a string"]}, 400, "invalid_type", "input[0]"),
    ({"input": [{"role": "user", "content": 5}]}, 400, "invalid_type", "input[0].content"),
    ({"input": [{"role": "robot", "content": "x"}]}, 400, "invalid_value", "input[0].role"),
    ({"input": [{"type": "message"}]}, 400, "missing_required_parameter", "input[0].content"),
    ({"input": [{"type": 5}]}, 400, "invalid_type", "input[0].type"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
        400,
        "missing_required_parameter",
        "input[0].content[0].text",
    ),
    (
        {"input": [{"type": "function_call_output", "call_id": "x"}]},
        400,
        "missing_required_parameter",
        "input[0].output",
    ),
    (
        {"input": [{"type": "function_call", "call_id": "c", "name": "n", "arguments": 5}]},
        400,
        "invalid_type",
        "input[0].arguments",
    ),
    (
        {"input": [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]},
        400,
        "function_call_not_found",
        "input",
    ),
    ({"input": [{"type": "item_reference", "id": "msg_doesnotexist"}]}, 400, "item_not_found", "input"),
    (
        {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "forged"}]},
        400,
        "invalid_encrypted_content",
        "input",
    ),
    ({"input": _image(PNG_BAD)}, 400, "invalid_value", "input[0].content[0].image_url"),
    ({"input": _image("data:image/png;base64,!!!")}, 400, "invalid_value", "input[0].content[0].image_url"),
    (
        {"input": _image("https://example.com/a.png", detail="ultra")},
        400,
        "invalid_value",
        "input[0].content[0].detail",
    ),
    (
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_data": "!!", "filename": "a.txt"}]}]},
        400,
        "invalid_value",
        "input[0].content[0].file_data",
    ),
    ({"previous_response_id": "resp_doesnotexist"}, 400, "previous_response_not_found", "previous_response_id"),
    ({"previous_response_id": ""}, 400, "invalid_value", "previous_response_id"),
    ({"tools": "x"}, 400, "invalid_type", "tools"),
    ({"tools": [5]}, 400, "invalid_type", "tools[0]"),
    ({"tools": [{"type": "function"}]}, 400, "invalid_type", "tools[0].name"),
    ({"tools": [{"type": "function", "name": "f", "parameters": "x"}]}, 400, "invalid_type", "tools[0].parameters"),
    ({"tools": [{"type": "teleport"}]}, 400, "unsupported_tool", "tools[0].type"),
    ({"tools": [{"type": "code_interpreter"}]}, 400, "invalid_type", "tools[0].container"),
    ({"tools": [{"type": "file_search"}]}, 400, "invalid_type", "tools[0].vector_store_ids"),
    ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, 400, "invalid_value", "tools"),
    ({"tool_choice": "sometimes"}, 400, "invalid_value", "tool_choice"),
    ({"tool_choice": 5}, 400, "invalid_type", "tool_choice"),
    ({"tool_choice": "required"}, 400, "invalid_value", "tool_choice"),
    (
        {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "other"}},
        400,
        "invalid_value",
        "tool_choice.name",
    ),
    ({"tool_choice": {"type": "bogus"}}, 400, "invalid_value", "tool_choice.type"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, 400, "invalid_value", "metadata"),
    ({"metadata": {"k" * 65: "v"}}, 400, "invalid_value", "metadata"),
    ({"metadata": {"k": "v" * 513}}, 400, "invalid_value", "metadata"),
    ({"metadata": {"k": 5}}, 400, "invalid_type", "metadata"),
    ({"metadata": "x"}, 400, "invalid_type", "metadata"),
    ({"background": True, "store": False}, 400, "invalid_value", "background"),
    ({"conversation": "conv_123"}, 404, "conversation_not_found", "conversation"),
    ({"conversation": {"id": "conv_123"}}, 404, "conversation_not_found", "conversation"),
    ({"conversation": 7}, 400, "invalid_type", "conversation"),
    ({"conversation": {"name": "x"}}, 400, "invalid_value", "conversation"),
    (
        {"conversation": "conv_123", "previous_response_id": "resp_x"},
        400,
        "mutually_exclusive_parameters",
        "conversation",
    ),
    ({"prompt": {"id": "pmpt_123"}}, 400, "unsupported_parameter", "prompt"),
    ({"stream_id": "lane"}, 400, "unsupported_parameter", "stream_id"),
    ({"text": {"format": {"type": "xml"}}}, 400, "invalid_value", "text.format"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, 400, "invalid_value", "text.format.schema"),
    ({"text": {"verbosity": "loud"}}, 400, "invalid_value", "text.verbosity"),
    ({"reasoning": {"effort": "ultra"}}, 400, "invalid_value", "reasoning.effort"),
    ({"include": [5]}, 400, "invalid_type", "include[0]"),
]


@pytest.fixture
def unchanged(server: RunningServer) -> Iterator[None]:
    """A rejected request stores nothing (protocol.md §0)."""
    before = stored_counts(server)
    yield
    assert stored_counts(server) == before


@pytest.mark.parametrize(("fields", "status", "code", "param"), CASES, ids=[str(case[0])[:60] for case in CASES])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_rejected_create(
    server: RunningServer,
    unchanged: None,
    fields: dict[str, Any],
    status: int,
    code: str,
    param: str | None,
    stream: bool,
) -> None:
    body = {"model": SIM, "input": "x", **fields, "stream": stream}
    with server.http() as http:
        reply = http.post("/responses", json=body)
        # Errors found before the first event are plain HTTP errors, also with stream: true (§1.9).
        error_of(reply, status, code, param)
        if status == 400 and code not in ("unsupported_parameter",):
            count = http.post("/responses/input_tokens", json=body)
            error_of(count, status, code, param)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'{"model": ', "invalid_json"),
        (b"", "invalid_json"),
        (b"\xff\xfe{", "invalid_json"),
        (b"{'single': 'quotes'}", "invalid_json"),
        (b"[1, 2]", "invalid_type"),
        (b'"a string"', "invalid_type"),
        (b"null", "invalid_type"),
    ],
)
def test_malformed_body(server: RunningServer, unchanged: None, raw: bytes, code: str) -> None:
    with server.http() as http:
        reply = http.post("/responses", content=raw, headers={"content-type": "application/json"})
    error_of(reply, 400, code, None)


def test_sdk_raises_typed_errors(server: RunningServer, unchanged: None) -> None:
    client = server.client()
    with pytest.raises(openai.NotFoundError) as not_found:
        client.responses.create(model="no-such-model", input="x")
    assert not_found.value.code == "model_not_found" and not_found.value.param == "model"
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model=SIM, input="x", previous_response_id="resp_nope", stream=True)
    assert bad.value.code == "previous_response_not_found" and bad.value.param == "previous_response_id"


def test_context_length_exceeded(server: RunningServer, unchanged: None) -> None:
    body = {"model": "smollm2-135m", "input": "word " * 3000, "max_output_tokens": 16}
    with server.http() as http:
        error_of(http.post("/responses", json=body), 400, "context_length_exceeded", "input")
        error_of(http.post("/responses", json={**body, "stream": True}), 400, "context_length_exceeded", "input")
        error_of(http.post("/responses/input_tokens", json=body), 400, "context_length_exceeded", "input")
        # truncation: auto drops the oldest items instead (counted, not generated, to stay fast).
        items = [{"role": "user", "content": "word " * 300} for _ in range(10)]
        reply = http.post(
            "/responses/input_tokens", json={"model": "smollm2-135m", "input": items, "truncation": "auto"}
        )
        assert reply.status_code == 200, reply.text
        assert 0 < reply.json()["input_tokens"] < 2048


def test_oversize_body(tmp_path: Path) -> None:
    running = start_server(tmp_path, max_body_bytes=1024, models=[SIM])
    try:
        before = stored_counts(running)
        with running.http() as http:
            error_of(http.post("/responses", json={"input": "x" * 2000}), 413, "request_too_large", None)

            def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies while reading
                yield b'{"input": "'
                for _ in range(40):
                    yield b"x" * 100
                yield b'"}'

            reply = http.post("/responses", content=chunks(), headers={"content-type": "application/json"})
            error_of(reply, 413, "request_too_large", None)
            error_of(http.post("/responses/input_tokens", json={"input": "x" * 2000}), 413, "request_too_large", None)
            small = http.post("/responses", json={"input": "small"})
            assert small.status_code == 200
            check_response(small.json())
        assert stored_counts(running) == (before[0] + 1, before[1] + 2)
    finally:
        running.stop()


def test_routes_and_methods(server: RunningServer, unchanged: None) -> None:
    with server.http() as http:
        error_of(http.get("/responses"), 426, "upgrade_required", None)
        error_of(http.get("/no/such/route"), 404, "not_found", None)
        error_of(http.get(str(server.base_url).removesuffix("/v1") + "/nope"), 404, "not_found", None)
        for method, path in [
            ("PUT", "/responses"),
            ("DELETE", "/responses"),
            ("PATCH", "/responses/resp_x"),
            ("POST", "/responses/resp_x"),
            ("GET", "/responses/resp_x/cancel"),
            ("POST", "/responses/resp_x/input_items"),
            ("POST", "/models"),
        ]:
            error_of(http.request(method, path), 405, "method_not_allowed", None)
        error_of(http.get("/models/no-such-model"), 404, "model_not_found", "model")
        error_of(http.get("/responses/resp_x/input_items", params={"limit": "abc"}), 400, "invalid_value", "limit")


def test_strict_params(tmp_path: Path) -> None:
    running = start_server(tmp_path, strict_params=True, models=[SIM])
    try:
        with running.http() as http:
            reply = http.post("/responses", json={"input": "x", "surprise": 1})
            error_of(reply, 400, "unknown_parameter", "surprise")
            accepted = http.post("/responses", json={"input": "x", "temperature": 0.5})
            assert accepted.status_code == 200
            check_response(accepted.json())
    finally:
        running.stop()


@pytest.mark.parametrize(
    "fields",
    [
        {"input": [{"id": 5}]},
        {"input": [{"type": "item_reference"}]},
        {"input": [{"role": "user", "content": [5]}]},
        {"input": [{"role": "user", "content": [{"type": "bogus_part"}]}]},
        {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
        {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
        {"input": [{"role": "user", "content": "x", "phase": "bogus"}]},
        {"input": [{"role": "assistant", "content": [{"type": "refusal"}]}]},
        {"input": [{"type": "message", "role": "user", "content": [], "status": "bad"}]},
        {"input": [{"type": "function_call_output", "call_id": "x", "output": [{"type": "input_text"}]}]},
        {"input": [{"type": "compaction", "encrypted_content": "forged"}]},
        {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
        {"input": [{"type": "custom_tool_call_output", "call_id": "nope", "output": "x"}]},
        {"tools": [{"type": "namespace"}]},
        {"tools": [{"type": "namespace", "name": "ns", "tools": [5]}]},
        {"tools": [{"type": "custom"}]},
        {"tools": [{"type": "function", "function": {"name": 5}}]},
        {"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": "x"}},
        {"tool_choice": {"type": "allowed_tools", "mode": "sometimes", "tools": []}},
        {"tool_choice": {"type": "function"}},
        {"text": "x"},
        {"text": {"format": "x"}},
        {"text": {"format": {"type": "json_schema", "schema": {}}}},
        {"reasoning": "x"},
        {"reasoning": {"summary": "x"}},
        {"stream_options": "x"},
        {"generate": "x"},
        {"prompt_cache_options": "x"},
        {"user": 5},
        {"max_output_tokens": 1e20},
    ],
)
def test_never_500(server: RunningServer, unchanged: None, fields: dict[str, Any]) -> None:
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x", **fields})
    assert 400 <= reply.status_code < 500, reply.text
    error = error_of(reply, reply.status_code, reply.json()["error"]["code"], reply.json()["error"]["param"])
    assert error["code"] and error["type"] == "invalid_request_error"
