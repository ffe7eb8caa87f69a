"""MCP items and tools in every dialect (chat/hosted.py, protocol.md §1.10): the model reads an MCP tool as a
function (`label.tool` in templates and harmony, `label__tool` on chat APIs) and its history as function calls and
outputs; what it writes back parses as a call of kind "mcp"."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples_support import examples
from hotloop.backends.base import GenerationRequest, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.backends.rust_tokenizer import RustTokenizer
from hotloop.backends.sim.backend import SimBackend, SimSettings
from hotloop.backends.toolcalls.harmony import HarmonyParser
from hotloop.backends.toolcalls.streaming import make_parser
from hotloop.backends.toolcalls.text import ToolCallParser, ToolCalls
from hotloop.backends.upstream import chat_messages
from hotloop.backends.upstream.chat import _StreamReader
from hotloop.backends.upstream.chat_json import MessagesJSON
from hotloop.chat import harmony
from hotloop.chat.format import ChatFormat
from hotloop.chat.hosted import REFUSED, as_calls
from hotloop.chat.incremental import INLINE, PromptRenderer, TokenCache, probe_incremental, run_inline
from hotloop.chat.messages import chat_messages as template_messages
from hotloop.chat.reasoning import ReasoningPrompt, replay_from
from hotloop.chat.render import PromptBase
from hotloop.models import Model
from hotloop.pipeline.generate import feed_delta
from hotloop.pipeline.prompt import render_prompt
from hotloop.simengine.requests import tools_in_prompt
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.items import (
    ContextItem,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    Message,
)
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response
from openai_types_support import checked
from render_support import DOCS, MCP_TOOLS, check_turns, harmony_tokenizer_file, mcp_conversations

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

USER = Message(role="user", content=[InputText(text="Find the page on caching.")], id="msg_u")
CALL = McpCall(
    id="mcp_1", server_label="docs", name="search", arguments='{"q": "caching"}', output="3 hits", status="completed"
)
REQUEST = McpApprovalRequest(id="mcpr_1", server_label="docs", name="search", arguments='{"q": "secrets"}')
APPROVED = McpCall(
    id="mcp_2",
    server_label="docs",
    name="search",
    arguments='{"q": "secrets"}',
    output="1 hit",
    status="completed",
    approval_request_id="mcpr_1",
)
REFUSAL = McpApprovalResponse(approval_request_id="mcpr_1", approve=False, reason="private", id="mcpa_1")
LISTING = McpListTools(id="mcpl_1", server_label="docs", tools=[])
CALL_BLOCK = '<tool_call>\n{"name": "docs.search", "arguments": {"q": "caching"}}\n</tool_call>'


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    fmt = smollm2_chat_format()
    assert probe_incremental(fmt)
    return fmt


@pytest.fixture(scope="module")
def harmony_fmt(tmp_path_factory: pytest.TempPathFactory) -> ChatFormat:
    tokenizer = RustTokenizer.from_file(harmony_tokenizer_file(tmp_path_factory.mktemp("harmony")))
    fmt = harmony.harmony_format(tokenizer)
    assert probe_incremental(fmt)
    return fmt


# -- the expansion ------------------------------------------------------------------------------------------------


def test_as_calls_expands_each_mcp_item() -> None:
    plain: list[ContextItem] = [USER]
    assert as_calls(plain) is plain  # nothing to expand: the very list, no copy
    expanded = as_calls([USER, LISTING, CALL, REQUEST, REFUSAL, APPROVED])
    search = {"name": "search", "namespace": "docs"}
    assert expanded == [
        USER,
        FunctionCall(call_id="mcp_1", arguments='{"q": "caching"}', **search),
        FunctionCallOutput(call_id="mcp_1", output="3 hits"),
        FunctionCall(call_id="mcpr_1", arguments='{"q": "secrets"}', **search),
        FunctionCallOutput(call_id="mcpr_1", output=f"{REFUSED} Reason: private"),
        FunctionCallOutput(call_id="mcpr_1", output="1 hit"),  # the approved call's output answers the request
    ]
    approval = McpApprovalResponse(approval_request_id="mcpr_1", approve=True)
    assert as_calls([approval]) == []


@pytest.mark.parametrize(
    ("error", "text"),
    [
        ({"type": "mcp_protocol_error", "code": -32001, "message": "Request timed out"}, "mcp_protocol_error -32001"),
        ({"type": "http_error", "code": 401, "message": "Unauthorized"}, "Error (http_error 401): Unauthorized"),
        ({"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": "no page"}]}, "Error: no page"),
        ({"type": "mcp_tool_execution_error", "content": "plain"}, "Error: plain"),
    ],
)
def test_an_error_reads_as_the_output(error: dict[str, Any], text: str) -> None:
    failed = msgspec.structs.replace(CALL, output=None, error=error, status="failed")
    output = as_calls([failed])[1]
    assert isinstance(output, FunctionCallOutput) and isinstance(output.output, str) and text in output.output
    unrun = msgspec.structs.replace(CALL, output=None, status="incomplete")
    assert as_calls([unrun])[1] == FunctionCallOutput(call_id="mcp_1", output="The call did not complete.")


# -- templates (SmolLM2's hermes) ---------------------------------------------------------------------------------


def test_the_template_prompt_shows_the_tool_the_call_and_its_output(chat: ChatFormat) -> None:
    model = Model("m", cast(Any, None), chat, 1 << 20)
    renderer = PromptRenderer(TokenCache(1 << 20), encoder=INLINE)
    items = [USER, LISTING, CALL]
    prompt = run_inline(render_prompt(renderer, model, CreateRequest(), [DOCS], None, items))
    messages = template_messages(None, [DOCS], as_calls(items))
    assert prompt.tokens.tolist() == chat.tokens(messages)
    assert [message["role"] for message in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["content"] == CALL_BLOCK and messages[3]["content"] == "3 hits"
    listed = json.loads(messages[0]["content"].split("<tools>\n")[1].split("\n")[0])
    assert listed == {"name": "docs.search", "description": "Search the docs.", "parameters": DOCS.parameters}
    assert 'its parameters as a JSON object in "arguments"' in messages[0]["content"]
    text = chat.render_text(messages)
    assert CALL_BLOCK in text and "3 hits" in text
    # The simulated engine reads the prompt as a model would: the tool, and one call more than before it.
    specs, calls = tools_in_prompt(text)
    before = tools_in_prompt(chat.render_text(template_messages(None, [DOCS], [USER])))
    assert [spec.name for spec in specs] == ["docs.search"] and (before[1], calls) == (0, 1)


def test_what_the_model_writes_parses_as_an_mcp_call() -> None:
    start = ToolCallStart("search", "mcp", "docs")
    parsed = ToolCallParser([DOCS], parallel=True)
    deltas = parsed.feed(CALL_BLOCK) + parsed.finish()
    assert deltas[0] == start and json.loads(cast(ToolCallDelta, deltas[1]).text) == {"q": "caching"}
    for kind in ("hermes", "json"):
        parser = make_parser(kind, [DOCS], parallel=True)
        body = CALL_BLOCK if kind == "hermes" else '{"name": "docs.search", "arguments": {"q": "caching"}}'
        assert start in parser.feed(body) + parser.finish(), kind
    harmony_call = '<|channel|>commentary to=functions.docs.search <|constrain|>json<|message|>{"q": "x"}<|call|>'
    parser = HarmonyParser(ToolCalls([DOCS], True))
    assert start in parser.feed(harmony_call) + parser.finish()


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=mcp_conversations(), data=st.data())
def test_template_extends_with_mcp_items_like_the_full_render(
    chat: ChatFormat, items: list[ContextItem], data: st.DataObject
) -> None:
    model = Model("m", cast(Any, None), chat, 1 << 20)

    def full(instructions: str | None, tools: Any, turn: list[ContextItem]) -> list[int]:
        return chat.tokens(template_messages(instructions, tools, as_calls(turn)))

    check_turns(model, items, data, full)


# -- harmony --------------------------------------------------------------------------------------------------------


def test_harmony_shows_the_tool_the_call_and_its_output(harmony_fmt: ChatFormat) -> None:
    system = harmony.system_message(None, [DOCS])["content"]
    assert "// Search the docs.\ntype docs.search = (_: {\nq: string,\n}) => any;" in system
    _, messages = harmony.item_messages(as_calls([USER, CALL]))
    assert messages[1]["content"] == (
        '<|channel|>commentary to=functions.docs.search <|constrain|>json<|message|>{"q": "caching"}<|call|>'
    )
    assert messages[2]["content"] == "functions.docs.search to=assistant<|channel|>commentary<|message|>3 hits<|end|>"


def test_harmony_names_an_approved_call_from_its_request_in_the_history(harmony_fmt: ChatFormat) -> None:
    """The approved call's output answers the request, which the parent's output holds: rendered as a continuation,
    its header still names the tool, and the prompt is the full render's."""
    model = Model("gpt-oss", cast(Any, None), harmony_fmt, 1 << 20, reasoning=ReasoningPrompt(form="harmony"))
    renderer = PromptRenderer(TokenCache(1 << 20), encoder=INLINE)
    request = CreateRequest()
    first = run_inline(render_prompt(renderer, model, request, [DOCS], None, [USER, REQUEST]))
    base = PromptBase([USER, REQUEST], first.state, model.chat)
    approval = McpApprovalResponse(approval_request_id="mcpr_1", approve=True, id="mcpa_1")
    second = run_inline(render_prompt(renderer, model, request, [DOCS], base, [approval, APPROVED]))
    assert renderer.stats.chain_hits == 1
    whole = as_calls([USER, REQUEST, approval, APPROVED])
    system = harmony.system_message(None, [DOCS])
    assert second.tokens.tolist() == harmony_fmt.tokens([system, *harmony.item_messages(whole)[1]])
    _, messages = harmony.item_messages(as_calls([approval, APPROVED]), history=[USER, REQUEST])
    assert messages[0]["content"].startswith("functions.docs.search to=assistant")


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=mcp_conversations(), data=st.data())
def test_harmony_extends_with_mcp_items_like_the_full_render(
    harmony_fmt: ChatFormat, items: list[ContextItem], data: st.DataObject
) -> None:
    model = Model("gpt-oss", cast(Any, None), harmony_fmt, 1 << 20, reasoning=ReasoningPrompt(form="harmony"))

    def full(instructions: str | None, tools: Any, turn: list[ContextItem]) -> list[int]:
        expanded = as_calls(turn)
        system = harmony.system_message(instructions, tools)
        return harmony_fmt.tokens(
            [system, *harmony.item_messages(expanded, think_from=replay_from("chain", expanded))[1]]
        )

    check_turns(model, items, data, full)


# -- chat APIs (openai-chat) ----------------------------------------------------------------------------------------


def generation(items: list[ContextItem], response_id: str = "", previous: str | None = None) -> GenerationRequest:
    return GenerationRequest(
        prompt_tokens=[], tools=[DOCS], items=items, response_id=response_id, previous_response_id=previous
    )


def test_chat_messages_carry_the_call_and_its_output() -> None:
    items: list[ContextItem] = [USER, LISTING, CALL, REQUEST, REFUSAL]
    messages = chat_messages.messages(generation(items))
    function = {"name": "docs__search", "arguments": '{"q": "caching"}'}
    asked = {"name": "docs__search", "arguments": '{"q": "secrets"}'}
    assert messages == [
        {"role": "user", "content": "Find the page on caching."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "mcp_1", "type": "function", "function": function}],
        },
        {"role": "tool", "tool_call_id": "mcp_1", "content": "3 hits"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "mcpr_1", "type": "function", "function": asked}]},
        {"role": "tool", "tool_call_id": "mcpr_1", "content": f"{REFUSED} Reason: private"},
    ]
    assert chat_messages.tools([DOCS])[0]["function"]["name"] == "docs__search"
    approved = chat_messages.messages(generation([USER, REQUEST, APPROVED]))
    assert approved[-1] == {"role": "tool", "tool_call_id": "mcpr_1", "content": "1 hit"}


def test_a_continuations_chat_json_extends_its_parents_with_mcp_items() -> None:
    encoder = MessagesJSON()
    parent: list[ContextItem] = [USER, CALL, REQUEST]
    encoder.encode(generation(parent, "resp_1"))
    child = generation([*parent, REFUSAL, Message(role="user", content=[InputText(text="ok")])], "resp_2", "resp_1")
    assert msgspec.json.decode(encoder.encode(child)) == chat_messages.messages(child)
    assert encoder.reused == 1


def test_an_engines_call_of_an_mcp_tool_is_one_of_kind_mcp() -> None:
    reader = _StreamReader(chat_messages.tool_by_wire_name([DOCS]))
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "docs__search", "arguments": "{}"}}
    deltas = reader.feed([json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}).encode()])
    assert deltas[0] == ToolCallStart("search", "mcp", "docs")


# -- hotloop-sim ------------------------------------------------------------------------------------------------------


def test_the_sim_calls_an_mcp_tool_and_the_builder_streams_an_mcp_call() -> None:
    backend = SimBackend(SimSettings(ttft_ms=0, tps=1e6))

    async def run() -> list[Any]:
        return [delta async for delta in backend.generate(GenerationRequest(prompt_tokens=[1, 2, 3], tools=[DOCS]))]

    deltas = asyncio.run(run())
    assert deltas[0] == ToolCallStart(name="search", kind="mcp", namespace="docs")
    end = next(index for index, delta in enumerate(deltas) if isinstance(delta, ToolCallEnd))
    arguments = "".join(cast(ToolCallDelta, delta).text for delta in deltas[1:end])
    assert isinstance(json.loads(arguments)["q"], str)
    builder = ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"))
    events = [builder.created(), *(event for delta in deltas[: end + 1] for event in feed_delta(builder, delta))]
    raw = checked(events)
    kinds = [event["type"].removeprefix("response.") for event in raw]
    assert kinds == [
        "created",
        "output_item.added",
        *["mcp_call_arguments.delta"] * (end - 1),
        "mcp_call_arguments.done",
    ]
    assert raw[1]["item"]["type"] == "mcp_call" and raw[-1]["arguments"] == arguments
    assert builder.mcp_pending() == [0]


def test_mcp_tools_list_in_order() -> None:
    """Functions and MCP tools offered together: each under its own name, in the order given."""
    messages = template_messages(None, MCP_TOOLS, [USER])
    names = [
        json.loads(line)["name"]
        for line in messages[0]["content"].split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    ]
    assert names == ["get_weather", "docs.search"]
    assert [spec.prompt_name for spec in MCP_TOOLS] == names
