"""The `tokens` upstream backend end to end: clients → hotloop (renders and tokenizes) → a real `hotloop sim-engine`
process, in each dialect (vLLM /v1/completions, SGLang /generate, llama.cpp /completion).

An agent loop whose every turn hits the engine's prefix cache (cached ≥ the previous prompt), tool calls parsed out
of generated `<tool_call>` text, a `tokenizer.json` model directory, upstream errors → `response.failed`, retries only
before the first token, a departed client → the upstream request cancelled. Plus the tool parsers, without sockets.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from conftest import RunningServer, start_server
from hotloop.backends.base import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.local.bpe import _cache_path
from hotloop.backends.local.gguf import load_llama, smollm2_chat_format, smollm2_path
from hotloop.backends.toolcalls.streaming import make_parser
from hotloop.backends.upstream.tokens import request_body
from hotloop.chat.specs import ToolSpec
from hotloop.config import Settings, Upstream
from hotloop.models import build_registry
from hotloop.simengine.engine import authorization_digest
from http_support import calls, check_sequence, output_text, parse_sse
from simengine_support import (
    READ_TIMEOUT_S,
    WEATHER,
    SimEngineProcess,
    agent_engine,
    failed_error,
    hang_up_mid_stream,
    reset_client,
)

DIALECTS = ("vllm", "sglang", "llamacpp")


@cache
def _smollm2_template() -> str:
    vocab = load_llama(vocab_only=True, n_threads=1, n_ctx=256, n_batch=256)  # the GGUF's metadata, no weights
    try:
        template: str = vocab.metadata["tokenizer.chat_template"]
    finally:
        vocab.close()
    return template


def smollm2_model_dir(path: Path) -> Path:
    """A Hugging Face style model directory for SmolLM2: its tokenizer.json and tokenizer_config.json."""
    fmt = smollm2_chat_format()  # builds (and caches) the tokenizer.json from the GGUF
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy(_cache_path(smollm2_path()), path / "tokenizer.json")
    special = fmt._special
    config = {"chat_template": _smollm2_template(), **special}  # bos_token, eos_token
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    yield from agent_engine()


@pytest.fixture(scope="module")
def hotloop(engine: SimEngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = f"http://127.0.0.1:{engine.port}"
    common: dict[str, Any] = {"backend": "tokens", "read_timeout_s": READ_TIMEOUT_S, "retries": 1}
    upstreams = {
        "vllm": Upstream(url=engine.base_url, dialect="vllm", upstream_model="engine-model", api_key="k", **common),
        "sglang": Upstream(url=root, dialect="sglang", **common),
        "llamacpp": Upstream(url=root, dialect="llamacpp", **common),
        "hf": Upstream(url=engine.base_url, tokenizer=str(smollm2_model_dir(tmp_path_factory.mktemp("hf"))), **common),
    }
    running = start_server(
        tmp_path_factory.mktemp("tokens"), models=list(upstreams), default_model="vllm", upstreams=upstreams
    )
    yield running
    running.stop()


@pytest.fixture()
def http(hotloop: RunningServer, engine: SimEngineProcess) -> Iterator[httpx.Client]:
    yield from reset_client(hotloop, engine)


def _create(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    # Same instructions and tools every turn (they are not inherited): the system message stays the same.
    reply = http.post("/responses", json={"tools": [WEATHER], "instructions": "Be brief.", **body})
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()
    assert response["status"] == "completed", response
    return response


@pytest.mark.parametrize("model", [*DIALECTS, "hf"])
def test_agent_loop_hits_the_engines_prefix_cache_every_turn(
    http: httpx.Client, engine: SimEngineProcess, model: str
) -> None:
    response = _create(http, {"model": model, "input": "Weather in Oslo and Rome?"})
    prompts = [response["usage"]["input_tokens"]]
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 0
    turns = 1
    while made := calls(response):
        # The engine wrote `<tool_call>` blocks (two parallel calls); hotloop parsed them into function calls.
        assert all(call["name"] == "get_weather" and json.loads(call["arguments"])["city"] for call in made)
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in made]
        response = _create(http, {"model": model, "previous_response_id": response["id"], "input": outputs})
        usage = response["usage"]
        # Each turn's prompt is the previous prompt's ids plus new ones: the engine found all of it cached.
        assert usage["input_tokens_details"]["cached_tokens"] >= prompts[-1]
        prompts.append(usage["input_tokens"])
        turns += 1
    assert turns == 2 and output_text(response)  # K = 2 calls (made at once), then a text answer
    stats = engine.stats()
    assert stats["prompt_tokens"] == sum(prompts)  # hotloop's ids are what the engine counted
    assert stats["cached_tokens"] >= prompts[0]


def test_tool_choice_never_changes_the_prompt_so_the_cache_still_hits(http: httpx.Client) -> None:
    clock = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
    tools = [WEATHER, clock]
    response = _create(http, {"input": "Weather in Oslo?", "tools": tools, "tool_choice": "auto"})
    only_weather = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}
    # Then a call of the weather tool only, then no calls at all: the same system message (every tool listed).
    for choice in (only_weather, "none"):
        made = calls(response)
        assert made
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in made]
        previous = response
        body = {"previous_response_id": previous["id"], "input": outputs, "tools": tools, "tool_choice": choice}
        response = _create(http, body)
        assert response["usage"]["input_tokens_details"]["cached_tokens"] >= previous["usage"]["input_tokens"]
        if choice is only_weather:  # constrained to a call of the allowed tool
            assert [call["name"] for call in calls(response)] == ["get_weather"]
    assert calls(response) == [] and output_text(response)


def test_text_streams_with_the_engines_usage(http: httpx.Client, engine: SimEngineProcess) -> None:
    # 200 tokens/s: each token's chunk comes in a read of its own (chunks that arrive together are one delta).
    engine.script({"tps": 200})
    events = parse_sse(http.post("/responses", json={"input": "Hello", "stream": True}).text)
    final = check_sequence(events)
    assert final["status"] == "completed" and output_text(final)
    assert sum(event["type"] == "response.output_text.delta" for event in events) > 3  # streamed, not one piece
    stats = engine.stats()
    assert stats["last_model"] == "engine-model" and stats["last_authorization_sha256"] == authorization_digest(
        "Bearer k"
    )
    assert final["usage"]["input_tokens"] == stats["prompt_tokens"] and final["usage"]["output_tokens"] == 32


@pytest.mark.parametrize("model", DIALECTS)
def test_a_calls_arguments_stream_as_the_engine_writes_them(
    http: httpx.Client, engine: SimEngineProcess, model: str
) -> None:
    # 200 tokens/s: each token's chunk comes in a read of its own (chunks that arrive together are one delta).
    engine.script({"tps": 200})
    body = {"model": model, "input": "Weather in Oslo?", "tools": [WEATHER], "stream": True}
    events = parse_sse(http.post("/responses", json=body).text)
    final = check_sequence(events)  # schema-valid, in order
    made = calls(final)
    assert made and json.loads(made[0]["arguments"])["city"]
    first = made[0]["id"]
    deltas = [
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == first
    ]
    assert len(deltas) > 1 and "".join(deltas) == made[0]["arguments"]  # in pieces, not one delta at the end


@pytest.mark.parametrize("model", DIALECTS)
def test_max_output_tokens_is_sent_and_incomplete(http: httpx.Client, model: str) -> None:
    reply = http.post("/responses", json={"model": model, "input": "Hello", "max_output_tokens": 16})
    response = reply.json()
    assert response["status"] == "incomplete" and response["usage"]["output_tokens"] == 16


@pytest.mark.parametrize("model", DIALECTS)
def test_upstream_errors_fail_the_response(http: httpx.Client, engine: SimEngineProcess, model: str) -> None:
    engine.script({"status": 503, "message": "warming up"})  # retried: the retry succeeds
    assert http.post("/responses", json={"model": model, "input": "hi"}).json()["status"] == "completed"
    assert engine.stats()["requests"] == 2
    engine.script({"status": 400, "message": "maximum context length is 2048 tokens"})
    error = failed_error(parse_sse(http.post("/responses", json={"model": model, "input": "hi", "stream": True}).text))
    assert error["code"] == "context_length_exceeded"
    engine.script({"die_after": 3})
    events = parse_sse(http.post("/responses", json={"model": model, "input": "hi", "stream": True}).text)
    error = failed_error(events)
    assert error["code"] == "server_error" and "mid-stream" in error["message"]
    assert engine.stats()["requests"] == 4  # no retry after output started


def test_a_stalled_upstream_fails_instead_of_hanging(http: httpx.Client, engine: SimEngineProcess) -> None:
    engine.script({"stall_after": 2})
    error = failed_error(parse_sse(http.post("/responses", json={"input": "hi", "stream": True}).text))
    assert error["code"] == "server_error" and "sent nothing" in error["message"]
    stats = engine.wait_stats(lambda s: s["cancelled"] == 1)
    assert stats["requests"] == 1 and stats["cancelled"] == 1


@pytest.mark.parametrize("model", DIALECTS)
def test_client_disconnect_cancels_the_upstream_request(
    hotloop: RunningServer, engine: SimEngineProcess, model: str
) -> None:
    engine.reset()
    engine.script({"tps": 20, "output_tokens": 400})
    hang_up_mid_stream(hotloop, {"model": model, "input": "hi", "stream": True})
    engine.assert_one_cancelled()


# -- request bodies, parsers and configuration (no sockets) --------------------------------------------------------


def test_request_bodies_per_dialect() -> None:
    from hotloop.backends.base import GenerationRequest

    request = GenerationRequest(prompt_tokens=[1, 2, 3], max_output_tokens=7, temperature=0.5)
    vllm = request_body("vllm", "m", request, 100)
    assert vllm["prompt"] == [1, 2, 3] and vllm["max_tokens"] == 7 and vllm["stream_options"]["include_usage"]
    sglang = request_body("sglang", "m", request, 100)
    assert sglang["input_ids"] == [1, 2, 3] and sglang["sampling_params"]["max_new_tokens"] == 7
    llamacpp = request_body("llamacpp", "m", request, 100)
    assert llamacpp["prompt"] == [1, 2, 3] and llamacpp["n_predict"] == 7 and llamacpp["cache_prompt"] is True
    # No max_output_tokens: the rest of the context window (vLLM's default would be 16 tokens).
    assert request_body("vllm", "m", GenerationRequest(prompt_tokens=[1] * 60), 100)["max_tokens"] == 40
    forced = GenerationRequest(prompt_tokens=[1], tools=[ToolSpec("f")], tool_choice="required")
    assert request_body("llamacpp", "m", forced, 100)["json_schema"]["properties"]["name"] == {"const": "f"}


def test_request_bodies_fit_sglang_context() -> None:
    from hotloop.backends.base import GenerationRequest

    request = GenerationRequest(prompt_tokens=[1] * 60)
    assert request_body("llamacpp", "m", request, 100)["n_predict"] == 40
    sglang = request_body("sglang", "m", request, 100)["sampling_params"]
    assert sglang["max_new_tokens"] == 39  # SGLang refuses prompt + budget == its context length
    assert None not in sglang.values()


def _read(reader: Any, chunks: list[dict[str, Any]]) -> str:
    return "".join(delta.text for chunk in chunks for delta in reader.feed([json.dumps(chunk).encode()]))


def test_sglang_reader_takes_cumulative_or_incremental_text() -> None:
    from hotloop.backends.upstream.tokens import _SGLangReader

    cumulative = [{"text": "ab"}, {"text": "abab"}, {"text": "ababc", "meta_info": {"finish_reason": {"type": "stop"}}}]
    assert _read(_SGLangReader(make_parser("none", [], True), 3), cumulative) == "ababc"
    # Incremental pieces that repeat the text so far are new text, not a cumulative echo.
    pieces = [{"text": "ab"}, {"text": "ab"}, {"text": "abc", "meta_info": {"finish_reason": {"type": "length"}}}]
    reader = _SGLangReader(make_parser("none", [], True), 3, incremental=True)
    assert _read(reader, pieces) == "abababc" and reader.reason == "length"


def test_llamacpp_timings_are_the_engines_own_time() -> None:
    from hotloop.backends.base import Finished
    from hotloop.backends.upstream.tokens import _LlamaCppReader

    reader = _LlamaCppReader(make_parser("none", [], True), 3)
    final = {"content": "", "stop": True, "timings": {"cache_n": 2, "prompt_ms": 1.5, "predicted_ms": 40.25}}
    assert _read(reader, [{"content": "hi", "stop": False}, final]) == "hi"
    [finished] = reader.end()
    assert isinstance(finished, Finished) and finished.engine_ms == 41.75 and finished.cached_tokens == 2
    bare = _LlamaCppReader(make_parser("none", [], True), 3)
    bare.feed([json.dumps({"content": "", "stop": True, "timings": {"cache_n": 0}}).encode()])
    assert bare.end()[-1].engine_ms is None  # an engine that does not say


def test_vllm_abort_is_a_failure_not_an_answer() -> None:
    from hotloop.backends.upstream.client import Retryable
    from hotloop.backends.upstream.tokens import _VLLMReader

    reader = _VLLMReader(make_parser("none", [], True), 3)
    assert reader.feed([json.dumps({"choices": [{"text": "", "finish_reason": "abort"}]}).encode()]) == []
    assert isinstance(reader.failure, Retryable) and "aborted" in str(reader.failure)


TOOLS = [ToolSpec("get_weather"), ToolSpec("patch", kind="custom")]


def _run(kind: str, pieces: list[str], parallel: bool = True) -> list[list[Any]]:
    parser = make_parser(kind, TOOLS, parallel)
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def _flat(steps: list[list[Any]]) -> list[Any]:
    return [delta for step in steps for delta in step]


def test_hermes_parser_streams_text_and_each_calls_arguments_as_they_are_written() -> None:
    call = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    pieces = [
        "Let me ",
        "check.\n<tool",
        "_call>\n",
        call[:20],
        call[20:43],
        call[43:],
        "\n</tool_",
        "call>\n<tool_call>",
    ]
    pieces += ['{"name": "patch", "input": "di', "ff \\u00e9\\ud83d", '\\ude00\\n"}</tool_call>']
    steps = _run("hermes", pieces)
    assert steps[0] == [TextDelta("Let me ")]  # text streams at once
    assert steps[1] == [TextDelta("check.\n")]  # held only what may open a block
    assert steps[2:4] == [[], []]  # inside the block, before the call's name is whole
    assert steps[4] == [ToolCallStart("get_weather"), ToolCallDelta('{"city')]  # the arguments stream
    assert steps[5:7] == [[ToolCallDelta('": "Oslo"}')], []]
    assert steps[7] == [ToolCallEnd()]  # the block closed
    # A freeform tool's input streams decoded, an escape held until it is whole (here a surrogate pair).
    assert steps[8] == [ToolCallStart("patch", "custom"), ToolCallDelta("di")]
    assert steps[9:11] == [[ToolCallDelta("ff é")], [ToolCallDelta("😀\n"), ToolCallEnd()]]
    assert steps[11] == []  # the whitespace between blocks is not a message


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_streamed_calls_carry_the_same_payload_as_held_ones(size: int) -> None:
    """Cut anywhere, a streamed call's deltas join to the payload its whole block gives."""
    text = (
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "O\\"slo}", "n": [1, {"a": "]"}]}}\n'
        '</tool_call>\n<tool_call>{"name": "patch", "input": "a\\tb\\\\\\u00e9"}</tool_call>'
    )
    deltas = _flat(_run("hermes", [text[i : i + size] for i in range(0, len(text), size)]))
    calls_made: list[list[str]] = []
    for delta in deltas:
        if isinstance(delta, ToolCallStart):
            calls_made.append([delta.name])
        elif isinstance(delta, ToolCallDelta):
            calls_made[-1].append(delta.text)
    assert [(made[0], "".join(made[1:])) for made in calls_made] == [
        ("get_weather", '{"city": "O\\"slo}", "n": [1, {"a": "]"}]}'),
        ("patch", "a\tb\\é"),
    ]
    assert sum(isinstance(delta, ToolCallEnd) for delta in deltas) == 2
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)).rstrip() == "Sure."


def test_a_streamed_call_cut_short_ends_with_what_was_written() -> None:
    deltas = _flat(_run("hermes", ['<tool_call>{"name": "get_weather", "arguments": {"city": "Os']))
    assert deltas == [ToolCallStart("get_weather"), ToolCallDelta('{"city": "Os'), ToolCallEnd(incomplete=True)]


def test_hermes_parser_releases_bad_blocks_as_text_and_reads_bare_json() -> None:
    unknown = _flat(_run("hermes", ['<tool_call>{"name": "nope", "arguments": {}}</tool_call>']))
    assert unknown == [TextDelta('<tool_call>{"name": "nope", "arguments": {}}</tool_call>')]
    broken = _flat(_run("hermes", ['<tool_call>{"name": "get_wea']))  # stopped inside the name, not cut
    assert broken == [TextDelta('<tool_call>{"name": "get_wea')]
    parser = make_parser("hermes", TOOLS, True)
    cut = parser.feed('<tool_call>{"name": "get_wea') + parser.finish(cut=True)  # cut by the length limit
    assert cut == [ToolCallStart("get_weather"), ToolCallDelta(""), ToolCallEnd(incomplete=True)]
    malformed = _flat(_run("hermes", ['<tool_call>{"name": "get_weather", "arguments": 7}</tool_call>']))
    assert malformed == [ToolCallStart("get_weather"), ToolCallDelta("7"), ToolCallEnd(incomplete=True)]
    unclosed = _flat(_run("hermes", ['<tool_call>{"name": "get_weather", "arguments": {}}']))  # a stop token
    assert unclosed == [ToolCallStart("get_weather"), ToolCallDelta("{}"), ToolCallEnd()]
    bare = _flat(_run("hermes", [' [{"name": "get_weather", "arguments": {"city": "A"}},', ' {"name": "patch"}]']))
    assert [type(d) for d in bare] == [ToolCallStart, ToolCallDelta, ToolCallEnd] * 2
    one = _flat(_run("hermes", ["<tool_call>" + '{"name": "patch"}</tool_call>'] * 2, parallel=False))
    assert sum(isinstance(d, ToolCallStart) for d in one) == 1  # parallel_tool_calls false: the first call
    held = _run("hermes", ["a < b", " <tool"])  # "<tool" may open a block: held, then released at the end
    assert held == [[TextDelta("a < b")], [], [TextDelta(" <tool")]]


def test_json_and_none_parsers() -> None:
    assert _flat(_run("json", ['{"name": "get_weather", ', '"arguments": "{}"}'])) == [
        ToolCallStart("get_weather"),
        ToolCallDelta("{}"),
        ToolCallEnd(),
    ]
    assert _flat(_run("json", ["Sure", ", done"])) == [TextDelta("Sure"), TextDelta(", done")]
    assert _flat(_run("json", ["{not json"])) == [TextDelta("{not json")]
    text = '<tool_call>{"name": "patch"}</tool_call>'
    assert _flat(_run("none", [text])) == [TextDelta(text)]


def test_tokens_upstream_configuration(tmp_path: Path) -> None:
    def registry(**fields: Any) -> Any:
        upstream = Upstream(**{"backend": "tokens", "url": "http://x/v1", **fields})
        return build_registry(Settings(models=["m"], default_model="m", upstreams={"m": upstream}))

    model = registry(urls=["http://a/v1", "http://b/v1"], url="").resolve("m")
    assert not model.takes_messages and model.chat.incremental  # the normal, incremental token path
    assert [replica.url for replica in model.backend.router.replicas] == ["http://a/v1", "http://b/v1"]
    hf = registry(tokenizer=str(smollm2_model_dir(tmp_path / "model"))).resolve("m")
    assert hf.chat.tokens([{"role": "user", "content": "hi"}]) == smollm2_chat_format().tokens(
        [{"role": "user", "content": "hi"}]
    )
    with pytest.raises(ValueError, match=r"no tokenizer\.json"):
        registry(tokenizer=str(tmp_path / "missing"))
    (tmp_path / "bare").mkdir()
    shutil.copy(tmp_path / "model" / "tokenizer.json", tmp_path / "bare" / "tokenizer.json")
    with pytest.raises(ValueError, match="no chat template"):
        registry(tokenizer=str(tmp_path / "bare"))
    chat = Upstream(urls=["http://a/v1", "http://b/v1"])  # openai-chat routes over replicas too
    chat_model = build_registry(Settings(models=["c"], default_model="c", upstreams={"c": chat})).resolve("c")
    assert len(chat_model.backend.router.replicas) == 2


def test_a_continuation_encodes_only_its_new_ids() -> None:
    """The prompt's JSON is its parent's plus the new ids; a prompt that does not extend its parent is encoded whole."""
    from array import array

    from hotloop.backends.upstream.prompt_json import PromptJSON

    prompts = PromptJSON()
    first = array("i", range(1000))
    assert msgspec.json.decode(prompts.encode(first, "resp_1", None)) == list(range(1000))
    second = array("i", range(1500))
    assert msgspec.json.decode(prompts.encode(second, "resp_2", "resp_1")) == list(range(1500))
    assert prompts.reused == 1
    assert msgspec.json.decode(prompts.encode(array("i", range(1500)), "resp_3", "resp_2")) == list(range(1500))
    assert prompts.reused == 2
    forked = array("i", [7, *range(1, 1600)])  # not an extension of resp_2: encoded whole
    assert msgspec.json.decode(prompts.encode(forked, "resp_4", "resp_2")) == forked.tolist()
    assert prompts.reused == 2
    small = PromptJSON(max_bytes=10_000)
    small.encode(first, "a", None)
    small.encode(second, "b", None)
    assert small.stored_bytes <= 10_000


@pytest.mark.fast
@pytest.mark.parametrize(
    "pieces",
    [
        ["<think>plan it</think>\n\nDone."],
        list("<think>plan it</think>\n\nDone."),
        ["  <thi", "nk>pla", "n it</th", "ink>Done."],
    ],
)
def test_think_blocks_become_reasoning_before_the_answer(pieces: list[str]) -> None:
    from hotloop.backends.base import ReasoningDelta, TextDelta
    from hotloop.backends.toolcalls.streaming import PlainText
    from hotloop.backends.toolcalls.thinking import ThinkParser

    parser = ThinkParser(PlainText())
    deltas = [delta for piece in pieces for delta in parser.feed(piece)] + parser.finish()
    reasoning = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    text = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    assert (reasoning, text) == ("plan it", "Done.")
    kinds = [type(d).__name__ for d in deltas]
    assert kinds.index("TextDelta") > max(i for i, k in enumerate(kinds) if k == "ReasoningDelta")


@pytest.mark.fast
def test_output_without_a_think_block_and_a_block_opened_by_the_prompt() -> None:
    from hotloop.backends.base import ReasoningDelta, TextDelta
    from hotloop.backends.toolcalls.streaming import PlainText
    from hotloop.backends.toolcalls.thinking import ThinkParser

    plain = ThinkParser(PlainText())
    assert plain.feed("<th") == [] and plain.feed("anks!") + plain.finish() == [TextDelta("<thanks!")]
    opened = ThinkParser(PlainText(), open_in_prompt=True)
    deltas = opened.feed("hmm") + opened.feed("</think>ok") + opened.finish()
    assert deltas == [ReasoningDelta("hmm"), TextDelta("ok")]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_think_block_from_the_engine_is_a_reasoning_item(tmp_path: Path, dialect: str) -> None:
    """A reasoning model behind the token-ID API writes `<think>…</think>` before its call or answer
    (`reasoning_parser = "think"`): a reasoning item first, then the call, which still parses."""
    thinker = SimEngineProcess(tps=5000, prefill_us_per_token=1, reasoning_tokens=5, tool_calls=2).wait_ready()
    url = thinker.base_url if dialect == "vllm" else f"http://127.0.0.1:{thinker.port}"
    upstream = Upstream(url=url, backend="tokens", dialect=dialect, reasoning_parser="think", read_timeout_s=30)  # type: ignore[arg-type]
    server = start_server(tmp_path, models=["qwen"], default_model="qwen", upstreams={"qwen": upstream})
    try:
        with server.http() as client:
            first = client.post("/responses", json={"input": "Weather?", "tools": [WEATHER], "store": False}).json()
    finally:
        server.stop()
        thinker.stop()
    assert [item["type"] for item in first["output"]] == ["reasoning", "function_call"], first["output"]
    assert first["output"][0]["content"][0]["text"].startswith("Let me think:")
    assert first["output"][1]["name"] == WEATHER["name"]


@pytest.mark.parametrize(("dialect", "replay"), [("vllm", "chain"), ("sglang", "chain"), ("llamacpp", "all")])
def test_a_reasoning_tool_loop_replays_the_generated_tokens_exactly(tmp_path: Path, dialect: str, replay: str) -> None:
    """Each turn's prompt is the previous prompt plus exactly the tokens the engine generated (its `<think>` block
    and calls) plus the tool outputs: the engine, which keeps what it generated in its prefix cache as vLLM and
    SGLang do, finds all of that cached. A new user message ends the chain: `chain` drops the reasoning rendered so
    far (one miss, as Qwen3's template does), `all` keeps it."""
    thinker = SimEngineProcess(tps=5000, prefill_us_per_token=1, reasoning_tokens=6, tool_calls=3).wait_ready()
    url = thinker.base_url if dialect == "vllm" else f"http://127.0.0.1:{thinker.port}"
    upstream = Upstream(
        url=url,
        backend="tokens",
        dialect=dialect,
        reasoning_parser="think",
        reasoning_replay=replay,
        read_timeout_s=30,  # type: ignore[arg-type]
    )
    server = start_server(tmp_path, models=["qwen"], default_model="qwen", upstreams={"qwen": upstream})
    try:
        with server.http() as client:
            body = {"tools": [WEATHER], "instructions": "Be brief."}
            response = _create(client, {**body, "input": "Weather in Oslo?"})
            loop = [response]
            while made := calls(response):
                assert response["output"][0]["type"] == "reasoning"
                outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in made]
                response = _create(client, {**body, "previous_response_id": response["id"], "input": outputs})
                loop.append(response)
            follow_up = _create(client, {**body, "previous_response_id": response["id"], "input": "And Rome?"})
        records = thinker.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    finally:
        server.stop()
        thinker.stop()
    assert len(loop) >= 3 and output_text(loop[-1])  # calls, more calls, then an answer
    assert [record["prompt_tokens"] for record in records] == [r["usage"]["input_tokens"] for r in [*loop, follow_up]]
    for before, after in itertools.pairwise(records[: len(loop)]):
        assert before["output_ids"] > 0
        assert after["cached_tokens"] >= before["prompt_tokens"] + before["output_ids"], (before, after)
    last, user_turn = records[len(loop) - 1], records[len(loop)]
    if replay == "all":
        assert user_turn["cached_tokens"] >= last["prompt_tokens"] + last["output_ids"]
    else:  # the chain's reasoning is gone from the prompt: it differs from the first reasoning on
        assert records[0]["prompt_tokens"] <= user_turn["cached_tokens"] < records[1]["prompt_tokens"]
    assert follow_up["output"][0]["type"] == "reasoning"
