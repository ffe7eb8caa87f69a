"""gpt-oss's harmony format on a `tokens` upstream (issue 13): the output parser (backends/toolcalls/harmony.py), the
prompt hotloop renders (chat/harmony.py), and a reasoning tool loop through `hotloop sim-engine --output-format
harmony` whose every prompt is the previous prompt plus exactly the tokens the engine generated.

The tokenizer is SmolLM2's with harmony's markers added as special tokens, as gpt-oss's own tokenizer has them
(each one id), so that the engine and hotloop agree on ids as they would with gpt-oss.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import start_server
from examples_support import examples
from hotloop.backends.base import (
    Delta,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from hotloop.backends.rust_tokenizer import RustTokenizer
from hotloop.backends.toolcalls.harmony import HarmonyParser
from hotloop.backends.toolcalls.text import ToolCalls
from hotloop.backends.upstream.tokens import request_body
from hotloop.chat import harmony
from hotloop.chat.format import ChatFormat
from hotloop.chat.incremental import probe_incremental
from hotloop.chat.reasoning import ReasoningPrompt, ReplayPolicy, replay_from
from hotloop.chat.specs import ToolSpec
from hotloop.config import Settings, Upstream
from hotloop.models import Model, build_registry
from hotloop.wire.items import (
    ContextItem,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    Message,
    Reasoning,
    ReasoningText,
)
from http_support import calls, check_sequence, output_text, parse_sse
from render_support import PATCH, check_turns, harmony_tokenizer_file, thinking_conversations
from render_support import WEATHER as GET_WEATHER
from simengine_support import WEATHER, SimEngineProcess


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return harmony_tokenizer_file(tmp_path_factory.mktemp("harmony"))


@pytest.fixture(scope="module")
def fmt(tokenizer_file: Path) -> ChatFormat:
    chat = harmony.harmony_format(RustTokenizer.from_file(tokenizer_file))
    assert probe_incremental(chat), "hotloop's harmony template renders message by message"
    return chat


def _parse(text: str, size: int, tools: tuple[ToolSpec, ...] = (GET_WEATHER, PATCH), parallel: bool = True) -> Any:
    parser = HarmonyParser(ToolCalls(tools, parallel))
    deltas: list[Delta] = []
    for start in range(0, len(text), size):
        deltas += parser.feed(text[start : start + size])
    return deltas + parser.finish()


def _joined(deltas: list[Delta]) -> list[tuple[str, str]]:
    """(kind, text) per output item: consecutive pieces of one kind joined."""
    out: list[tuple[str, str]] = []
    for delta in deltas:
        if isinstance(delta, ToolCallStart):
            out.append((f"call:{delta.name}:{delta.kind}", ""))
        elif isinstance(delta, ToolCallEnd):
            out.append(("end", ""))
        elif isinstance(delta, ReasoningDelta | TextDelta | ToolCallDelta):
            kind = {ReasoningDelta: "reasoning", TextDelta: "text", ToolCallDelta: "args"}[type(delta)]
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + delta.text)
            else:
                out.append((kind, delta.text))
    return out


CALL_TURN = (
    "<|channel|>analysis<|message|>The user wants <weather>.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Oslo <|x"}<|call|>'
)


@pytest.mark.fast
@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_channels_become_reasoning_then_a_call_cut_anywhere(size: int) -> None:
    deltas = _parse(CALL_TURN, size)
    assert _joined(deltas) == [
        ("reasoning", "The user wants <weather>."),
        ("call:get_weather:function", ""),
        ("args", '{"city": "Oslo <|x"}'),
        ("end", ""),
    ]
    if size < 5:  # the arguments stream as they are written
        assert sum(isinstance(delta, ToolCallDelta) for delta in deltas) > 1


@pytest.mark.fast
def test_the_answer_a_preamble_and_what_is_not_a_call() -> None:
    answer = "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>"
    assert _joined(_parse(answer, 4)) == [("reasoning", "hm"), ("text", "Hello!")]
    # The recipient before the channel, a stream without its stop token (vLLM leaves it out of the text).
    early = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}'
    assert _joined(_parse(early, 5)) == [("call:get_weather:function", ""), ("args", '{"city": "Rome"}'), ("end", "")]
    patch = "<|channel|>commentary to=functions.apply_patch<|message|>*** Begin Patch\n<|call|>"
    assert _joined(_parse(patch, 3)) == [("call:apply_patch:custom", ""), ("args", "*** Begin Patch\n"), ("end", "")]
    preamble = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Done"
    assert _joined(_parse(preamble, 6)) == [("text", "Checking.Done")]
    builtin = '<|channel|>commentary to=browser.search<|message|>{"q": "x"}<|call|>'  # not an offered tool
    assert _joined(_parse(builtin, 6)) == [("text", '{"q": "x"}')]
    assert _joined(_parse("Plain words, no markers.", 4)) == [("text", "Plain words, no markers.")]
    two = CALL_TURN + "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{}<|call|>"
    assert sum(isinstance(d, ToolCallStart) for d in _parse(two, 5, parallel=False)) == 1  # the first call only
    assert sum(isinstance(d, ToolCallStart) for d in _parse(two, 5)) == 2


@pytest.mark.fast
def test_a_call_the_length_limit_cut_ends_incomplete() -> None:
    """An engine leaves the `<|call|>` out of its text, so a call's body ends at the stream's end either way: the
    finish reason tells a whole call (stop) from one cut short (length), which ends incomplete, never as text."""
    body = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Os'
    for cut in (False, True):
        parser = HarmonyParser(ToolCalls((GET_WEATHER, PATCH), True))
        deltas = parser.feed(body) + parser.finish(cut=cut)
        assert deltas[0] == ToolCallStart("get_weather", "function", None)
        assert deltas[-1] == ToolCallEnd(incomplete=cut)


@pytest.mark.fast
def test_the_prompt_is_harmony_with_the_tools_as_typescript(fmt: ChatFormat) -> None:
    user = Message(role="user", content=[InputText(text="Weather in Oslo?")], id="msg_1", status="completed")
    thought = Reasoning(summary=[], id="rs_1", content=[ReasoningText(text="Need the tool.")])
    call = FunctionCall(call_id="c1", name="get_weather", arguments='{"city":"Oslo"}', id="fc_1", status="completed")
    output = FunctionCallOutput(call_id="c1", output="sunny", id="fco_1")
    system = harmony.system_message("Be brief.", [GET_WEATHER, PATCH], "high")
    messages = harmony.item_messages([user, thought, call, output], think_from=1)[1]
    text = fmt.render_text([system, *messages])
    assert text == (
        "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\n\nReasoning: high\n\n"
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
        "Calls to these tools must go to the commentary channel: 'functions'.<|end|>"
        "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n"
        "namespace functions {\n\n// Current weather for a city.\n"
        "type get_weather = (_: {\ncity: string,\n}) => any;\n\n"
        "// Apply a patch.\ntype apply_patch = (_: string) => any;\n\n} // namespace functions<|end|>"
        "<|start|>user<|message|>Weather in Oslo?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Oslo"}<|call|>'
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>"
        "<|start|>assistant"
    )


@pytest.mark.fast
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=thinking_conversations(), data=st.data())
@pytest.mark.parametrize("replay", ["chain", "all"])
def test_harmony_renders_incrementally_like_the_full_render(
    fmt: ChatFormat, replay: ReplayPolicy, items: list[ContextItem], data: st.DataObject
) -> None:
    model = Model("gpt-oss", cast(Any, None), fmt, 1 << 20, reasoning=ReasoningPrompt(form="harmony", replay=replay))

    def full(instructions: str | None, tools: Any, turn: list[ContextItem]) -> list[int]:
        system = harmony.system_message(instructions, tools)
        return fmt.tokens([system, *harmony.item_messages(turn, think_from=replay_from(replay, turn))[1]])

    check_turns(model, items, data, full)


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_harmony_tool_loop_replays_the_generated_tokens_exactly(
    tmp_path: Path, tokenizer_file: Path, dialect: str
) -> None:
    """gpt-oss behind the token-ID API: reasoning on `analysis`, calls on `commentary`, the answer on `final`; each
    turn of the tool chain finds the previous prompt and all it generated in the engine's cache."""
    flags = {"output_format": "harmony", "tokenizer": tokenizer_file, "reasoning_tokens": 6, "tool_calls": 3}
    # 200 tokens/s: each token's chunk comes in a read of its own, so that the first turn's deltas can be counted
    # (chunks that arrive together are one delta), even on a loaded machine.
    engine = SimEngineProcess(tps=200, prefill_us_per_token=1, **flags).wait_ready()
    url = engine.base_url if dialect == "vllm" else f"http://127.0.0.1:{engine.port}"
    upstream = Upstream(
        url=url,
        backend="tokens",
        dialect=dialect,  # type: ignore[arg-type]
        tokenizer=str(tokenizer_file),
        reasoning_parser="harmony",
        read_timeout_s=30,
    )
    server = start_server(tmp_path, models=["gpt-oss"], default_model="gpt-oss", upstreams={"gpt-oss": upstream})
    body = {"tools": [WEATHER], "instructions": "Be brief.", "reasoning": {"effort": "low"}}
    try:
        with server.http() as client:
            events = parse_sse(client.post("/responses", json={**body, "input": "Weather?", "stream": True}).text)
            response = check_sequence(events)  # schema-valid, in order
            loop = [response]
            while made := calls(response):
                assert response["output"][0]["type"] == "reasoning"
                outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in made]
                reply = client.post(
                    "/responses", json={**body, "previous_response_id": response["id"], "input": outputs}
                )
                response = reply.json()
                assert response["status"] == "completed", response
                loop.append(response)
        records = engine.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    finally:
        server.stop()
        engine.stop()
    kinds = [event["type"] for event in events]
    assert "response.reasoning_text.delta" in kinds and kinds.count("response.function_call_arguments.delta") > 1
    assert len(loop) == 4 and output_text(loop[-1])  # three calls, then the answer on the final channel
    assert loop[-1]["output"][0]["type"] == "reasoning" and loop[-1]["output"][-1]["type"] == "message"
    assert all(json.loads(call["arguments"])["city"] for response in loop[:-1] for call in calls(response))
    for before, after in itertools.pairwise(records):
        assert after["cached_tokens"] >= before["prompt_tokens"] + before["output_ids"], (before, after)


@pytest.mark.fast
def test_the_engine_is_asked_to_keep_special_tokens_and_llamacpp_is_refused(tokenizer_file: Path) -> None:
    request = GenerationRequest(prompt_tokens=[1, 2])
    assert request_body("vllm", "m", request, 100, keep_special=True)["skip_special_tokens"] is False
    sglang = request_body("sglang", "m", request, 100, keep_special=True)["sampling_params"]
    assert sglang["skip_special_tokens"] is False and sglang["spaces_between_special_tokens"] is False
    assert "skip_special_tokens" not in request_body("vllm", "m", request, 100)

    def registry(**fields: Any) -> Any:
        upstream = Upstream(**{"backend": "tokens", "url": "http://x/v1", "reasoning_parser": "harmony", **fields})
        return build_registry(Settings(models=["m"], default_model="m", upstreams={"m": upstream}))

    model = registry(tokenizer=str(tokenizer_file)).resolve("m")
    assert model.reasoning.form == "harmony" and model.chat.incremental
    with pytest.raises(ValueError, match="reasoning_parser: harmony needs"):
        registry(dialect="llamacpp")
    with pytest.raises(ValueError, match="chat_template"):
        registry(tokenizer=str(tokenizer_file), chat_template="x.jinja")
