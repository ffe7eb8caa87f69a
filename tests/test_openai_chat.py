"""The `openai-chat` upstream backend end to end: clients → hotloop → a real `hotloop sim-engine` process.

Text, a tool round trip with parallel calls, usage with the engine's cached tokens, upstream errors → a
`response.failed` with a meaningful code, a stalled upstream → a failure (not a hang), retries only before the first
token, and a departed client → the upstream request cancelled. Plus the `[upstreams.<name>]` configuration.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from conftest import RunningServer, start_server
from hotloop.backends.base import GenerationRequest, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.upstream import chat_messages
from hotloop.chat.specs import ToolSpec
from hotloop.config import Settings, Upstream, load_settings
from hotloop.models import build_registry
from hotloop.simengine.engine import authorization_digest
from hotloop.wire.items import FunctionCall, FunctionCallOutput, InputImage, InputText, Message, OutputText
from http_support import calls, check_sequence, error_of, output_text, parse_sse, stream_create
from process_support import free_port
from simengine_support import (
    READ_TIMEOUT_S,
    WEATHER,
    SimEngineProcess,
    agent_engine,
    failed_error,
    hang_up_mid_stream,
    reset_client,
)


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    yield from agent_engine()


@pytest.fixture(scope="module")
def hotloop(engine: SimEngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    upstream = Upstream(
        url=engine.base_url,
        upstream_model="engine-model",
        api_key="upstream-secret",
        read_timeout_s=READ_TIMEOUT_S,
        retries=1,
    )
    nowhere = Upstream(url=f"http://127.0.0.1:{free_port()}/v1", retries=1, connect_timeout_s=1)  # nothing listens
    running = start_server(
        tmp_path_factory.mktemp("upstream"),
        models=["up", "down"],
        default_model="up",
        upstreams={"up": upstream, "down": nowhere},
    )
    yield running
    running.stop()


@pytest.fixture()
def http(hotloop: RunningServer, engine: SimEngineProcess) -> Iterator[httpx.Client]:
    yield from reset_client(hotloop, engine)


def test_text_answer_with_the_engines_usage(hotloop: RunningServer, engine: SimEngineProcess) -> None:
    engine.reset()
    with hotloop.client() as sdk:
        response = sdk.responses.create(model="up", instructions="Be brief.", input="Hello")
    assert response.status == "completed" and response.output_text and response.model == "up"
    stats = engine.stats()
    assert stats["last_model"] == "engine-model"  # upstream_model is what the engine is asked for
    assert stats["last_authorization_sha256"] == authorization_digest(
        "Bearer upstream-secret"
    )  # the upstream key, not the client's
    assert response.usage is not None
    assert response.usage.input_tokens == stats["prompt_tokens"] > 0  # the engine's count, not hotloop's
    assert response.usage.output_tokens == stats["completion_tokens"] == 32


def test_parallel_tool_calls_round_trip_with_cached_tokens(http: httpx.Client, engine: SimEngineProcess) -> None:
    events = stream_create(http, {"input": "Weather in Oslo and Rome?", "tools": [WEATHER]})
    first = check_sequence(events)
    made = calls(first)
    assert first["status"] == "completed" and len(made) == 2  # both parallel calls, as two items
    for call in made:
        assert call["name"] == "get_weather" and isinstance(json.loads(call["arguments"])["city"], str)
    outputs = [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"} for call in made]
    reply = http.post("/responses", json={"previous_response_id": first["id"], "input": outputs, "tools": [WEATHER]})
    second = reply.json()
    assert reply.status_code == 200 and second["status"] == "completed"
    # The engine saw one assistant turn with 2 tool calls and their outputs (its policy: K = 2 → a text answer).
    assert calls(second) == [] and output_text(second)
    usage = second["usage"]
    assert usage["input_tokens"] > first["usage"]["input_tokens"]
    # The first turn's prompt is a prefix of the second's: the engine reports it cached, and so does hotloop.
    assert usage["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] - 2
    assert engine.stats()["cached_tokens"] == usage["input_tokens_details"]["cached_tokens"]


def test_a_functions_strict_reaches_the_engine(http: httpx.Client, engine: SimEngineProcess) -> None:
    """A function's `strict` goes to the engine as the request gave it (vLLM holds a strict tool's arguments to its
    schema); a tool without one is sent without one."""
    engine.reset()
    strict = {**WEATHER, "strict": True}
    loose = {**WEATHER, "name": "get_time", "strict": False}
    plain = {**WEATHER, "name": "get_date"}
    reply = http.post("/responses", json={"input": "Weather?", "tools": [strict, loose, plain], "store": False})
    assert reply.status_code == 200, reply.text
    assert [tool["strict"] for tool in reply.json()["tools"]] == [True, False, None]  # echoed as given
    records = engine.http.get("/stats/requests").json()["requests"]
    assert [record["strict"] for record in records] == [{"get_weather": True, "get_time": False}]


def test_a_non_boolean_strict_is_refused(http: httpx.Client) -> None:
    reply = http.post("/responses", json={"input": "Hi", "tools": [{**WEATHER, "strict": "yes"}]})
    error_of(reply, 400, "invalid_type", "tools[0].strict")


def test_retry_before_the_first_token(http: httpx.Client, engine: SimEngineProcess) -> None:
    engine.script({"status": 503, "message": "warming up"})
    reply = http.post("/responses", json={"input": "hi"})
    assert reply.status_code == 200 and reply.json()["status"] == "completed"
    assert engine.stats()["requests"] == 2  # the 503, then the retry


def test_upstream_errors_fail_the_response_with_a_code(http: httpx.Client, engine: SimEngineProcess) -> None:
    engine.script({"status": 503, "message": "engine down"}, {"status": 503, "message": "engine down"})
    error = failed_error(parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text))
    assert error["code"] == "server_error" and "503" in error["message"] and "engine down" in error["message"]
    assert engine.stats()["requests"] == 2  # retries: 1
    engine.reset()
    engine.script({"status": 429, "message": "slow down"})
    error = failed_error(parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text))
    assert error["code"] == "rate_limit_exceeded" and "slow down" in error["message"]
    assert engine.stats()["requests"] == 1  # a 429 is the client's to retry
    engine.reset()
    engine.script({"status": 400, "message": "This model's maximum context length is 2048 tokens."})
    events = parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text)
    assert failed_error(events)["code"] == "context_length_exceeded"
    # The in-band error event is typed as the non-streaming reply's body is (one table, errors.FAILURES).
    inband = events[-2]["error"]
    assert (inband["type"], inband["param"]) == ("invalid_request_error", "input"), inband
    engine.script({"status": 429, "message": "slow down"})
    inband = parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text)[-2]["error"]
    assert (inband["type"], inband["code"]) == ("requests", "rate_limit_exceeded"), inband


def test_upstream_client_errors_are_4xx_without_streaming(http: httpx.Client, engine: SimEngineProcess) -> None:
    """Not streamed, the engine's verdict on the input is the client's error (400, 429), never a 500."""
    engine.script({"status": 400, "message": "request (931 tokens) exceeds the available context size (512 tokens)"})
    error_of(http.post("/responses", json={"input": "hi"}), 400, "context_length_exceeded", "input")
    engine.script({"status": 429, "message": "slow down"})
    reply = http.post("/responses", json={"input": "hi"})
    assert reply.status_code == 429 and reply.json()["error"]["code"] == "rate_limit_exceeded"
    engine.script({"status": 500, "message": "boom"}, {"status": 500, "message": "boom"})
    error_of(http.post("/responses", json={"input": "hi"}), 500, "server_error", None)  # the engine's own fault


def test_an_unreachable_upstream_fails_the_response(http: httpx.Client) -> None:
    error = failed_error(parse_sse(http.post("/responses", json={"model": "down", "input": "hi", "stream": True}).text))
    assert error["code"] == "server_error" and "cannot connect" in error["message"].lower()


def test_custom_tools_go_as_functions_and_come_back_as_custom_calls(http: httpx.Client) -> None:
    reply = http.post("/responses", json={"input": "patch it", "tools": [{"type": "custom", "name": "apply_patch"}]})
    made = [item for item in reply.json()["output"] if item["type"] == "custom_tool_call"]
    assert reply.status_code == 200 and len(made) == 2 and made[0]["name"] == "apply_patch"
    assert isinstance(made[0]["input"], str) and not made[0]["input"].startswith("{")  # unwrapped from {"input"}


def test_a_call_the_length_limit_cuts_is_an_incomplete_call() -> None:
    """The engine's stream ends `length` inside a custom call: the call ends incomplete, with its input as far as it
    was written (never the `{"input": …` JSON it was offered as); a call the stream finished is whole."""
    from hotloop.backends.upstream.chat import _StreamReader

    def chunk(arguments: str, finish: str | None) -> bytes:
        call = {"index": 0, "id": "c1", "function": {"name": "apply_patch", "arguments": arguments}}
        return json.dumps({"choices": [{"delta": {"tool_calls": [call]}, "finish_reason": finish}]}).encode()

    for finish, rest, incomplete in (("length", "ne", True), ("tool_calls", 'ne"}', False)):
        reader = _StreamReader({"apply_patch": ToolSpec("apply_patch", kind="custom")})
        started = reader.feed([chunk('{"input": "*** Begin Patch\\n+o', None), chunk(rest, finish)])
        deltas = [*started, *reader.end()]
        assert deltas[:3] == [
            ToolCallStart("apply_patch", "custom", None),
            ToolCallDelta("*** Begin Patch\n+one"),
            ToolCallEnd(incomplete=incomplete),
        ]


def test_no_retry_after_the_first_token(http: httpx.Client, engine: SimEngineProcess) -> None:
    engine.script({"die_after": 3})
    events = parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text)
    error = failed_error(events)
    assert error["code"] == "server_error" and "mid-stream" in error["message"]
    assert any(event["type"] == "response.output_text.delta" for event in events)  # output had started
    assert engine.stats()["requests"] == 1


def test_a_stalled_upstream_fails_instead_of_hanging(http: httpx.Client, engine: SimEngineProcess) -> None:
    engine.script({"stall_after": 2})
    start = time.perf_counter()
    events = parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text)
    elapsed = time.perf_counter() - start
    error = failed_error(events)
    assert error["code"] == "server_error" and "sent nothing" in error["message"]
    assert READ_TIMEOUT_S <= elapsed < READ_TIMEOUT_S + 3
    stats = engine.wait_stats(lambda s: s["cancelled"] == 1)
    assert stats["requests"] == 1 and stats["cancelled"] == 1  # hotloop hung up on the stalled stream


def test_client_disconnect_cancels_the_upstream_request(hotloop: RunningServer, engine: SimEngineProcess) -> None:
    engine.reset()
    engine.script({"tps": 20, "output_tokens": 400})
    hang_up_mid_stream(hotloop, {"input": "hi", "stream": True})
    engine.assert_one_cancelled()


def test_prewarm_and_input_items_keep_working(http: httpx.Client) -> None:
    reply = http.post("/responses", json={"input": "hi", "generate": False})
    assert reply.status_code == 200 and reply.json()["status"] == "completed"
    listing = http.get(f"/responses/{reply.json()['id']}/input_items")
    assert listing.status_code == 200 and listing.json()["data"][0]["type"] == "message"


# -- mapping and configuration (no sockets) -------------------------------------------------------------------


def test_items_map_to_chat_messages() -> None:
    items = [
        Message(role="developer", content=[InputText(text="rules")]),
        Message(role="user", content=[InputText(text="look: "), InputImage(image_url="https://x/a.png")]),
        Message(role="assistant", content=[OutputText(text="Checking.")]),
        FunctionCall(call_id="c1", name="get_weather", arguments='{"city":"Oslo"}'),
        FunctionCall(call_id="c2", name="run", arguments="{}", namespace="shell"),
        FunctionCallOutput(call_id="c1", output="sunny"),
        FunctionCallOutput(call_id="c2", output="ok"),
    ]
    request = GenerationRequest(prompt_tokens=[], items=items, instructions="Be brief.")
    messages = chat_messages.messages(request)
    assert [m["role"] for m in messages] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert messages[2]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x/a.png"}}
    assistant = messages[3]
    assert assistant["content"] == "Checking."
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["get_weather", "shell__run"]
    assert messages[4] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    specs = [ToolSpec("run", namespace="shell"), ToolSpec("patch", kind="custom")]
    offered = chat_messages.tools(specs)
    assert offered[0]["function"]["name"] == "shell__run" and "strict" not in offered[0]["function"]
    assert offered[1]["function"]["parameters"] == chat_messages.CUSTOM_INPUT
    forced = GenerationRequest(prompt_tokens=[], tools=specs, tool_choice="required", forced_tool="shell.run")
    assert chat_messages.tool_choice(forced) == {"type": "function", "function": {"name": "shell__run"}}


def test_upstream_tables_from_toml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hotloop.toml"
    config.write_text(
        'models = ["llama"]\ndefault_model = "llama"\n\n[upstreams.llama]\nbackend = "openai-chat"\n'
        'url = "http://127.0.0.1:11434/v1"\nupstream_model = "llama3.2:3b"\nread_timeout_s = 30\n'
    )
    settings = load_settings(str(config))
    upstream = settings.upstreams["llama"]
    assert upstream.upstream_model == "llama3.2:3b" and upstream.read_timeout_s == 30 and upstream.retries == 2
    registry = build_registry(settings)
    assert registry.resolve("llama").takes_messages and registry.resolve(None).id == "llama"
    config.write_text('[upstreams.llama]\nurl = "http://x/v1"\ntimeout = 3\n')
    with pytest.raises(ValueError, match="timeout"):
        load_settings(str(config))
    env = msgspec.json.encode({"vllm": {"url": "http://gpu:8000/v1"}}).decode()
    monkeypatch.setenv("HOTLOOP_UPSTREAMS", env)
    assert load_settings().upstreams["vllm"].url == "http://gpu:8000/v1"


def test_unknown_or_bad_upstream_models_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"not defined in an \[upstreams"):
        build_registry(Settings(models=["mystery"], default_model="mystery"))
    with pytest.raises(ValueError, match="url is required"):
        build_registry(Settings(models=["x"], default_model="x", upstreams={"x": Upstream()}))
    with pytest.raises(ValueError, match="built-in"):
        build_registry(
            Settings(
                models=["hotloop-sim"],
                default_model="hotloop-sim",
                upstreams={"hotloop-sim": Upstream(url="http://x/v1")},
            )
        )


def test_llamacpp_chat_timings_are_the_engines_own_time() -> None:
    from hotloop.backends.base import Finished
    from hotloop.backends.upstream.chat import _StreamReader

    reader = _StreamReader({})
    reader.feed([json.dumps({"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]}).encode()])
    last = {"choices": [{"delta": {}, "finish_reason": "stop"}], "timings": {"prompt_ms": 2.0, "predicted_ms": 8.5}}
    reader.feed([json.dumps(last).encode()])
    finished = reader.end()[-1]
    assert isinstance(finished, Finished) and finished.engine_ms == 10.5


def test_a_continuations_messages_are_its_parents_plus_its_new_items() -> None:
    """The incremental JSON equals a full conversion on every turn: parallel calls merging into the open assistant
    message, a fork from an older turn, new instructions."""
    from hotloop.backends.upstream.chat_json import MessagesJSON

    def user(text: str) -> Message:
        return Message(role="user", content=[InputText(text=text)])

    def call(n: int) -> FunctionCall:
        return FunctionCall(call_id=f"c{n}", name="shell", arguments=f'{{"cmd": "ls {n}"}}')

    encoder = MessagesJSON()
    items: list[object] = [user("start")]
    turns = [
        [call(1), call(2)],  # two parallel calls: one assistant message
        [FunctionCallOutput(call_id="c1", output="a"), FunctionCallOutput(call_id="c2", output="b"), call(3)],
        [FunctionCallOutput(call_id="c3", output="c"), Message(role="assistant", content=[OutputText(text="done")])],
        [user("more"), call(4)],
    ]
    parent: str | None = None
    history: list[list[object]] = []
    for number, new in enumerate(turns):
        items = [*items, *new]
        history.append(items)
        request = GenerationRequest(
            prompt_tokens=[],
            items=list(items),
            instructions="be brief",
            response_id=f"r{number}",
            previous_response_id=parent,
        )
        assert msgspec.json.decode(encoder.encode(request)) == chat_messages.messages(request)
        parent = f"r{number}"
    assert encoder.reused == len(turns) - 1
    fork = GenerationRequest(
        prompt_tokens=[],
        items=[*history[0], user("other")],
        instructions="be brief",
        response_id="f",
        previous_response_id="r0",
    )
    assert msgspec.json.decode(encoder.encode(fork)) == chat_messages.messages(fork)
    changed = GenerationRequest(
        prompt_tokens=[],
        items=[*history[-1], user("x")],
        instructions="new",
        response_id="n",
        previous_response_id="r3",
    )
    assert msgspec.json.decode(encoder.encode(changed)) == chat_messages.messages(changed)
    assert encoder.reused == len(turns)  # the fork reused r0; new instructions build anew


@pytest.mark.fast
@pytest.mark.parametrize("policy", ["chain", "all", "none"])
def test_reasoning_goes_back_as_the_engines_field(policy: str) -> None:
    """The reasoning of a tool loop reaches the engine on the assistant message after it (`reasoning_content` or
    `reasoning`); `chain` keeps only the chain since the last user message, `all` everything, `none` nothing. The
    incremental JSON equals the full conversion on every turn."""
    from hotloop.backends.upstream.chat_json import MessagesJSON
    from hotloop.wire.items import Reasoning, ReasoningText

    def think(text: str) -> Reasoning:
        return Reasoning(id=f"rs_{text}", summary=[], content=[ReasoningText(text=text)])

    replay = chat_messages.Replay(policy=policy, field="reasoning")
    encoder = MessagesJSON(replay=replay)
    items: list[object] = [Message(role="user", content=[InputText(text="fix it")])]
    turns = [
        [think("look first"), FunctionCall(call_id="c1", name="shell", arguments="{}")],
        [
            FunctionCallOutput(call_id="c1", output="ok"),
            think("now edit"),
            FunctionCall(call_id="c2", name="e", arguments="{}"),
        ],
        [
            FunctionCallOutput(call_id="c2", output="done"),
            think("say so"),
            Message(role="assistant", content=[OutputText(text="fixed")]),
        ],
        [
            Message(role="user", content=[InputText(text="and tests?")]),
            think("run them"),
            FunctionCall(call_id="c3", name="t", arguments="{}"),
        ],
    ]
    parent: str | None = None
    for number, new in enumerate(turns):
        items = [*items, *new]
        request = GenerationRequest(
            prompt_tokens=[], items=list(items), response_id=f"p{policy}{number}", previous_response_id=parent
        )
        sent = msgspec.json.decode(encoder.encode(request))
        assert sent == chat_messages.messages(request, replay)
        parent = request.response_id
    carried = [message.get("reasoning") for message in sent if message["role"] == "assistant"]
    expected = {
        "chain": [None, None, None, "run them"],
        "all": ["look first", "now edit", "say so", "run them"],
        "none": [None, None, None, None],
    }[policy]
    assert carried == expected
    assert all("_reasoning" not in message for message in sent)
