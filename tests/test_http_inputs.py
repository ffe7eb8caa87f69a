"""Create parameters and input item kinds over HTTP (protocol.md §1.2, §1.3, §2.8)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from conftest import RunningServer, start_server
from hotloop.config import DEFAULT_DROPPED_TOOL_TYPES, Settings
from hotloop.pipeline.tools import DEFAULT_DROPPED
from http_support import TIME_TOOL, calls, check_sequence, error_of, output_text, sdk_json, stream_create
from media_support import png_data_url
from metrics_support import scrape
from schema import check_response
from wsutil import WS

SIM = "hotloop-sim"


def create(server: RunningServer, **body: Any) -> dict[str, Any]:
    response = sdk_json(server.client().responses.create(model=SIM, **body))
    check_response(response)
    return response


def count(server: RunningServer, **body: Any) -> int:
    with server.http() as http:
        reply = http.post("/responses/input_tokens", json={"model": SIM, **body})
    assert reply.status_code == 200, reply.text
    tokens: int = reply.json()["input_tokens"]
    return tokens


# -- generation limits and echoed parameters -----------------------------------------------------------------------


def test_max_output_tokens_incomplete_json(server: RunningServer) -> None:
    response = create(server, input="Talk a lot.", max_output_tokens=16, metadata={"sim_output_tokens": "200"})
    assert response["status"] == "incomplete" and response["max_output_tokens"] == 16
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["completed_at"] is None and response["error"] is None
    assert response["usage"]["output_tokens"] == 16
    [message] = response["output"]
    assert message["status"] == "incomplete" and message["content"][0]["text"]
    with server.http() as http:
        assert http.get(f"/responses/{response['id']}").json() == response


def test_max_output_tokens_incomplete_sse(server: RunningServer) -> None:
    with server.http() as http:
        events = stream_create(
            http, {"model": SIM, "input": "x", "max_output_tokens": 16, "metadata": {"sim_output_tokens": "100"}}
        )
    final = check_sequence(events)
    types = [event["type"] for event in events]
    assert types[-1] == "response.incomplete" and "response.completed" not in types
    # The open part is closed normally before the item ends incomplete.
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert events[-2]["item"]["status"] == "incomplete"
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"] is not None and final["completed_at"] is None
    # An incomplete response is continuable.
    follow = create(server, input="go on", previous_response_id=final["id"])
    assert follow["status"] == "completed"


def test_max_output_tokens_not_reached(server: RunningServer) -> None:
    response = create(server, input="short", max_output_tokens=500)
    assert response["status"] == "completed" and response["incomplete_details"] is None


def test_sampling_and_echoed_fields(server: RunningServer) -> None:
    response = create(
        server,
        input="x",
        temperature=0.3,
        top_p=0.9,
        metadata={"team": "infra", "run": "42"},
        max_tool_calls=3,
        truncation="auto",
        prompt_cache_key="pck-1",
        safety_identifier="user-hash",
        user="u-1",
        reasoning={"effort": "low"},
        include=["message.output_text.logprobs", "reasoning.encrypted_content", "file_search_call.results"],
        instructions="Be brief.",
    )
    assert response["status"] == "completed"
    assert response["temperature"] == 0.3 and response["top_p"] == 0.9
    assert response["metadata"] == {"team": "infra", "run": "42"}
    assert response["max_tool_calls"] == 3 and response["truncation"] == "auto"
    assert response["prompt_cache_key"] == "pck-1" and response["safety_identifier"] == "user-hash"
    assert response["reasoning"]["effort"] == "low" and response["instructions"] == "Be brief."
    default = create(server, input="x", temperature=None, top_p=None, metadata=None)
    assert default["temperature"] == 1.0 and default["top_p"] == 1.0 and default["metadata"] == {}
    assert default["presence_penalty"] == 0 and default["frequency_penalty"] == 0 and default["top_logprobs"] == 0
    assert default["truncation"] == "disabled" and default["service_tier"] == "default"
    assert default["text"]["format"] == {"type": "text"} and default["reasoning"] == {"effort": None, "summary": None}


def test_json_schema_output(server: RunningServer) -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "kind": {"type": "string", "enum": ["a", "b"]},
        },
        "required": ["title", "score", "tags", "kind"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "review", "schema": schema, "strict": True}
    for prompt in ("one", "two", "three"):
        response = create(server, input=prompt, text={"format": fmt})
        Draft202012Validator(schema).validate(json.loads(output_text(response)))
    assert response["text"]["format"]["name"] == "review" and response["text"]["format"]["schema"] == schema
    with server.http() as http:
        events = stream_create(http, {"model": SIM, "input": "s", "text": {"format": fmt}})
    Draft202012Validator(schema).validate(json.loads(output_text(check_sequence(events))))
    loose = create(server, input="l", text={"format": {"type": "json_schema", "name": "n", "schema": schema}})
    assert loose["text"]["format"]["strict"] is False and loose["text"]["format"]["description"] is None
    plain = create(server, input="j", text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(output_text(plain)), dict)


# -- input item kinds (protocol.md §1.3) -------------------------------------------------------------------------------


def test_input_string_and_parts_render_alike(server: RunningServer) -> None:
    as_string = count(server, input=[{"role": "user", "content": "hello there"}])
    as_parts = count(
        server, input=[{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]}]
    )
    as_input = count(server, input="hello there")
    assert as_string == as_parts == as_input
    response = create(server, input=[{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}])
    assert response["status"] == "completed"


def test_input_image_data_url(server: RunningServer) -> None:
    url = png_data_url(64, 48)
    content = [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": url}]
    response = create(server, input=[{"role": "user", "content": content}])
    assert response["status"] == "completed"
    low = count(server, input=[{"role": "user", "content": [{**content[1], "detail": "low"}]}])
    remote = count(
        server, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]
    )
    text_only = count(server, input=[{"role": "user", "content": content[:1]}])
    assert low > 0 and remote > 0 and text_only > 0
    with server.http() as http:
        items = http.get(f"/responses/{response['id']}/input_items").json()["data"]
    assert items[0]["content"][1]["image_url"] == url  # stored as sent


def test_input_file_base64_text(server: RunningServer) -> None:
    def file_part(text: str) -> dict[str, Any]:
        data = base64.b64encode(text.encode()).decode()
        return {"type": "input_file", "filename": "notes.txt", "file_data": data}

    short = count(server, input=[{"role": "user", "content": [file_part("alpha")]}])
    long = count(server, input=[{"role": "user", "content": [file_part("alpha beta gamma delta " * 20)]}])
    assert long > short + 40  # the text file's content reaches the prompt
    data_url = {"type": "input_file", "filename": "n.md", "file_data": "data:text/markdown;base64,IyBoaQ=="}
    response = create(server, input=[{"role": "user", "content": [file_part("hello"), data_url]}])
    assert response["status"] == "completed"


def test_assistant_replay_without_id_or_status(server: RunningServer) -> None:
    first = create(server, input="hi")
    replay_exact = [{"role": "user", "content": "hi"}, *first["output"], {"role": "user", "content": "more"}]
    bare = {"role": "assistant", "content": [{"type": "output_text", "text": output_text(first)}]}
    replay_bare = [{"role": "user", "content": "hi"}, bare, {"role": "user", "content": "more"}]
    replay_string = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": output_text(first)},
        {"role": "user", "content": "more"},
    ]
    counts = {count(server, input=replay) for replay in (replay_exact, replay_bare, replay_string)}
    assert len(counts) == 1  # ids, status, annotations and string content do not change the rendering
    chained = count(server, previous_response_id=first["id"], input=[{"role": "user", "content": "more"}])
    assert counts == {chained}
    assert create(server, input=replay_bare)["status"] == "completed"


def test_reasoning_and_unknown_items(server: RunningServer) -> None:
    items = [
        {"role": "user", "content": "search something"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "I should search."}]},
        {"type": "reasoning", "id": "rs_old", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
        {
            "type": "local_shell_call",
            "id": "lsc_1",
            "call_id": "c1",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"]},
        },
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "phase": "commentary"},
        {"role": "user", "content": [{"type": "text", "text": "Open Responses text part"}]},
    ]
    response = create(server, input=items)
    assert response["status"] == "completed"
    with server.http() as http:
        listed = http.get(f"/responses/{response['id']}/input_items", params={"order": "asc"}).json()["data"]
    assert [item["type"] for item in listed] == [
        "message",
        "reasoning",
        "reasoning",
        "web_search_call",
        "local_shell_call",
        "message",
        "message",
    ]
    assert listed[3]["action"] == items[3]["action"]  # unknown items are kept verbatim


def test_item_reference(server: RunningServer) -> None:
    first = create(server, input=[{"role": "user", "content": "remember the number 12345"}])
    message_id = first["output"][0]["id"]
    with server.http() as http:
        input_id = http.get(f"/responses/{first['id']}/input_items").json()["data"][0]["id"]
    referenced = count(
        server, input=[{"type": "item_reference", "id": input_id}, {"type": "item_reference", "id": message_id}]
    )
    copied = count(server, input=[{"role": "user", "content": "remember the number 12345"}, first["output"][0]])
    assert referenced == copied
    # `type` may be omitted on a reference.
    response = create(server, input=[{"id": message_id}, {"role": "user", "content": "and?"}])
    assert response["status"] == "completed"


def test_web_search_dropped_and_hosted_tools_refused(server: RunningServer) -> None:
    """protocol.md §1.4: `web_search` is left out (setting `drop_tool_types`), a tool OpenAI runs on its own servers
    is refused by name; the Chat Completions shape of a function tool is echoed in the flat shape."""
    chat_shape = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    tools = [{"type": "web_search"}, chat_shape, TIME_TOOL]
    response = create(server, input="x", tools=tools, tool_choice="required")
    assert response["tools"] == [
        {"type": "function", "name": "lookup", "description": None, "parameters": {"type": "object"}, "strict": None},
        {**TIME_TOOL, "description": None, "strict": None},
    ]
    [call] = calls(response)
    assert call["name"] in ("lookup", "get_time")
    only_dropped = create(server, input="x", tools=[{"type": "web_search"}])
    assert only_dropped["tools"] == [] and calls(only_dropped) == [] and output_text(only_dropped)
    with server.http() as http:
        for hosted in ({"type": "programmatic_tool_calling"}, {"type": "web_search_preview"}):
            reply = http.post("/responses", json={"model": SIM, "input": "x", "tools": [chat_shape, hosted]})
            error_of(reply, 400, "unsupported_tool", "tools[1].type")


# What unmodified clients send on every request (docs/protocol-notes.md, "What clients send by default"): Codex CLI
# 0.171.0's web search, Cline 3.0.65's (openai-native) web search and image generation.
CLIENT_DEFAULTS = [
    {"type": "web_search", "external_web_access": False},
    {"type": "web_search"},
    {"type": "image_generation", "output_format": "png"},
]
TIME_ECHO = {**TIME_TOOL, "description": None, "strict": None}
DROPPED = "hotloop_tools_dropped_total"


def test_the_default_drop_list_is_one_list() -> None:
    assert DEFAULT_DROPPED == DEFAULT_DROPPED_TOOL_TYPES == ("web_search", "image_generation")
    assert Settings().drop_tool_types == list(DEFAULT_DROPPED_TOOL_TYPES)


@pytest.mark.parametrize("hosted", CLIENT_DEFAULTS, ids=lambda tool: "-".join(map(str, tool.values())))
def test_each_default_dropped_type_is_left_out_and_counted(server: RunningServer, hosted: dict[str, Any]) -> None:
    """protocol.md §1.4: a hosted tool a client always sends is neither offered nor echoed, and counted per turn."""
    kind = hosted["type"]
    before = scrape(server).value(DROPPED, type=kind)
    response = create(server, input="x", tools=[hosted, TIME_TOOL], tool_choice="required")
    assert response["tools"] == [TIME_ECHO]
    [call] = calls(response)
    assert call["name"] == "get_time"
    alone = create(server, input="x", tools=[hosted])
    assert alone["tools"] == [] and calls(alone) == [] and output_text(alone)
    assert scrape(server).value(DROPPED, type=kind) == before + 2


def test_clines_hosted_tools_together_are_left_out(server: RunningServer) -> None:
    """Cline's two hosted tools in one request, before its functions: both dropped, each counted once."""
    kinds = ("web_search", "image_generation")
    before = {kind: scrape(server).value(DROPPED, type=kind) for kind in kinds}
    include = ["web_search_call.action.sources"]  # which Cline asks for beside its web search
    response = create(server, input="x", tools=[*CLIENT_DEFAULTS[1:], TIME_TOOL], include=include)
    assert response["tools"] == [TIME_ECHO] and response["status"] == "completed"
    assert {kind: scrape(server).value(DROPPED, type=kind) - before[kind] for kind in kinds} == dict.fromkeys(kinds, 1)


REQUIRED_NOT_RUN = [
    ({"type": "image_generation"}, "tool_choice.type", "image_generation"),
    ({"type": "web_search"}, "tool_choice.type", "web_search"),
    ({"type": "web_search_preview"}, "tool_choice.type", "web_search_preview"),
    (
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "image_generation"}]},
        "tool_choice.tools[0].type",
        "image_generation",
    ),
    (
        {"type": "allowed_tools", "mode": "required", "tools": [{"name": "nope"}, {"type": "web_search"}]},
        "tool_choice.tools[1].type",
        "web_search",
    ),
]


@pytest.mark.parametrize(("choice", "param", "kind"), REQUIRED_NOT_RUN, ids=lambda value: str(value)[:40])
def test_a_tool_choice_requiring_a_dropped_or_hosted_type_is_refused(
    server: RunningServer, choice: dict[str, Any], param: str, kind: str
) -> None:
    """Dropping spares a client that always sends the tool; a request that requires it is refused by name, as the
    tool itself would be (400 unsupported_tool, the param named), and nothing is counted as dropped."""
    tools = [{"type": "image_generation", "output_format": "png"}, {"type": "web_search"}, TIME_TOOL]
    before = scrape(server).value(DROPPED, type="image_generation")
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x", "tools": tools, "tool_choice": choice})
    error = error_of(reply, 400, "unsupported_tool", param)
    assert error["message"] == (
        f"Tool type '{kind}' is not supported: it is a tool OpenAI runs on its own servers, and this server does "
        "not run it."
    )
    assert scrape(server).value(DROPPED, type="image_generation") == before


def test_allowed_tools_naming_a_dropped_type_beside_an_offered_one(server: RunningServer) -> None:
    """`allowed_tools` that also allows an offered tool asks for nothing the server cannot do: `required` calls the
    offered one, `auto` with only the dropped type allows no tool and answers in text."""
    body = {"model": SIM, "input": "x", "tools": [{"type": "image_generation"}, TIME_TOOL]}
    allowed = [{"type": "image_generation"}, {"type": "function", "name": "get_time"}]
    required = {"type": "allowed_tools", "mode": "required", "tools": allowed}
    auto = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "image_generation"}]}
    with server.http() as http:  # raw: Open Responses' schema has no hosted type in an echoed `allowed_tools`
        called = http.post("/responses", json={**body, "tool_choice": required})
        answered = http.post("/responses", json={**body, "tool_choice": auto})
    assert called.status_code == answered.status_code == 200, (called.text, answered.text)
    [call] = calls(called.json())
    assert call["name"] == "get_time"
    assert calls(answered.json()) == [] and output_text(answered.json())


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ({"type": "web_search_preview"}, "it is a tool OpenAI runs on its own servers"),
        ({"type": "web_search_2025_08_26"}, "it is a tool OpenAI runs on its own servers"),
        ({"type": "programmatic_tool_calling"}, "it is a tool OpenAI runs on its own servers"),
        ({"type": "teleport"}, "this server does not know it"),
    ],
    ids=lambda value: value["type"] if isinstance(value, dict) else "",
)
def test_a_type_not_in_the_drop_list_is_still_refused(server: RunningServer, tool: dict[str, Any], why: str) -> None:
    """Only the exact types of `drop_tool_types` are dropped: a preview variant of web search is refused by name."""
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "x", "tools": [TIME_TOOL, tool]})
    error = error_of(reply, 400, "unsupported_tool", "tools[1].type")
    assert error["message"].startswith(f"Tool type '{tool['type']}' is not supported: {why}")


@contextmanager
def turn_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """hotloop.turn's INFO lines. The `hotloop` logger does not propagate to the root, where caplog listens, and a
    server's start resets its child loggers (observability/logs.py, dictConfig): so caplog's handler is put on
    hotloop.turn itself, once the server runs."""
    logger = logging.getLogger("hotloop.turn")
    level = logger.level
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.INFO)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)


BOTH = "image_generation, web_search"
WHY = "(setting drop_tool_types; logged once per connection)"


def drop_lines(log: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in log.records if record.getMessage().startswith("left out tools")]


def test_a_drop_is_logged_once_per_connection_and_per_key_over_http(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every turn counts its dropped tools, but a client that sends them on every request logs one line: once per
    WebSocket connection, and over HTTP (a Session per request) once per key and set of types in the process. Its
    own server and keys, since what HTTP callers were told is remembered for the whole process."""
    keys = ("log-once-key-a", "log-once-key-b")
    running = start_server(tmp_path, models=["hotloop-sim"], api_keys=list(keys))
    body = {"model": SIM, "input": "x", "tools": [*CLIENT_DEFAULTS[1:], TIME_TOOL], "metadata": {"sim_tool_calls": "0"}}
    try:
        with turn_log(caplog) as log:
            for key in (keys[0], keys[0], keys[0], keys[1]):
                with running.http(key) as http:
                    assert http.post("/responses", json=body).status_code == 200
            with running.http(keys[0]) as http:  # another set of types is another line
                assert http.post("/responses", json={**body, "tools": [{"type": "web_search"}]}).status_code == 200
            assert drop_lines(log) == [f"left out tools of types {kinds} {WHY}" for kinds in (BOTH, BOTH, "web_search")]
            log.clear()
            for _ in range(2):  # two connections of the same key, three turns each: a line per connection
                with WS(running.ws_url, api_key=keys[0]) as ws:
                    for _ in range(3):
                        assert ws.turn(**body)[-1]["type"] == "response.completed"
            assert drop_lines(log) == [f"left out tools of types {BOTH} {WHY}"] * 2
        dropped = scrape(running)
    finally:
        running.stop()
    assert dropped.value(DROPPED, type="image_generation") == 4 + 6  # counted every turn all the same
    assert dropped.value(DROPPED, type="web_search") == 5 + 6


# -- prompt caching and multi_agent (protocol.md §1.12) ------------------------------------------------------------


def test_prompt_cache_options_and_breakpoints_are_accepted_and_echoed(server: RunningServer) -> None:
    """Every valid shape is taken (openai-python 3.63's params, sent by its own client) and echoed as it types them;
    the breakpoints on content parts change nothing a client can see."""
    content = [{"type": "input_text", "text": "Summarize the repo.", "prompt_cache_breakpoint": {"ttl": "12h"}}]
    response = server.client().responses.create(
        model=SIM,
        input=[{"role": "user", "content": content}],  # type: ignore[list-item]
        prompt_cache_options={"mode": "explicit", "ttl": "12h"},
        prompt_cache_retention="24h",
    )
    assert response.status == "completed" and response.prompt_cache_options is not None
    assert (response.prompt_cache_options.mode, response.prompt_cache_options.ttl) == ("explicit", "12h")
    assert response.prompt_cache_retention == "24h"
    check_response(sdk_json(response))
    defaults = create(server, input="hi", prompt_cache_options={})
    assert defaults["prompt_cache_options"] == {"mode": "implicit", "ttl": "30m"}
    assert create(server, input="hi")["prompt_cache_options"] is None


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("prompt_cache_options", {"mode": "sometimes"}, "prompt_cache_options.mode"),
        ("prompt_cache_options", {"ttl": "5d"}, "prompt_cache_options.ttl"),
        ("prompt_cache_options", {"prewarm": "yes"}, "prompt_cache_options.prewarm"),
        ("prompt_cache_options", "30m", "prompt_cache_options"),
        ("prompt_cache_retention", "forever", "prompt_cache_retention"),
        ("multi_agent", {"enabled": "yes"}, "multi_agent.enabled"),
        ("multi_agent", {"enabled": False, "max_concurrent_subagents": 0}, "multi_agent.max_concurrent_subagents"),
    ],
)
def test_bad_cache_options_and_multi_agent_are_400s_naming_them(
    server: RunningServer, field: str, value: Any, param: str
) -> None:
    with server.http() as http:
        reply = http.post("/responses", json={"model": SIM, "input": "hi", field: value})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text
    with WS(server.ws_url) as ws:
        frame = ws.error(model=SIM, input="hi", **{field: value})
        assert frame["status"] == 400 and frame["error"]["param"] == param


def test_multi_agent_disabled_is_a_plain_response(server: RunningServer) -> None:
    response = create(server, input="hi", extra_body={"multi_agent": {"enabled": False}})
    assert response["status"] == "completed"


def test_generate_false_warmup(server: RunningServer) -> None:
    """`generate: false` is accepted on HTTP: no output, and a continuation reuses the prefilled prompt."""
    warm = create(
        server, input="a long shared system context " * 5, instructions="Stay warm.", extra_body={"generate": False}
    )
    assert warm["status"] == "completed" and warm["output"] == []
    assert warm["usage"]["output_tokens"] == 0 and warm["usage"]["input_tokens"] > 0
    follow = create(server, input="now answer", instructions="Stay warm.", previous_response_id=warm["id"])
    assert follow["status"] == "completed" and output_text(follow)
    assert follow["usage"]["input_tokens_details"]["cached_tokens"] >= warm["usage"]["input_tokens"] - 8
    prewarm = create(server, input="x", extra_body={"prompt_cache_options": {"prewarm": True}})
    assert prewarm["output"] == [] and prewarm["status"] == "completed"


def test_sse_disconnect_stores_cancelled(server: RunningServer) -> None:
    with server.http() as http:
        body = {"model": SIM, "input": "slow", "stream": True, "metadata": {"sim_tps": "5"}}
        with http.stream("POST", "/responses", json=body) as reply:
            lines = reply.iter_lines()
            first = [next(lines) for _ in range(2)]
        response_id = json.loads(first[1].removeprefix("data: "))["response"]["id"]
        deadline = time.monotonic() + 10
        while (stored := http.get(f"/responses/{response_id}")).status_code != 200 or stored.json()[
            "status"
        ] != "cancelled":
            assert time.monotonic() < deadline, stored.text
            time.sleep(0.05)
    check_response(stored.json())
    assert stored.json()["usage"] is None and stored.json()["completed_at"] is None
    assert stored.json()["output"] == []  # the open message was not finished
