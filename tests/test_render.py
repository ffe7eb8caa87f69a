"""Rendering items into SmolLM2's chat template (hotloop/chat/: format, messages, media; protocol.md §1.3, §4)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples_support import examples
from hotloop.backends.base import ToolCallDelta, ToolCallStart
from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.backends.toolcalls.text import ToolCallParser
from hotloop.chat.format import ChatFormat
from hotloop.chat.media import image_tokens
from hotloop.chat.messages import chat_messages
from hotloop.errors import HotloopError
from hotloop.pipeline.normalize import normalize_item
from hotloop.pipeline.state.context import Context
from hotloop.sealing import seal
from hotloop.wire.items import (
    ContextItem,
    FunctionCall,
    FunctionCallOutput,
    InputText,
    Message,
    OutputText,
)
from media_support import png_data_url
from render_support import PATCH, TEXT, TOOLS, WEATHER, conversations

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    return smollm2_chat_format()


def items(*raw: dict[str, Any]) -> list[ContextItem]:
    out: list[ContextItem] = []
    for index, entry in enumerate(raw):
        item = normalize_item(entry, f"input[{index}]")
        assert not hasattr(item, "id") or item.id is not None  # normalization labels items
        out.append(item)  # type: ignore[arg-type]
    return out


# -- chat_messages --------------------------------------------------------------------------------------------------


def test_instructions_become_the_system_message_with_tools() -> None:
    messages = chat_messages("Be brief.", [WEATHER, PATCH], items({"role": "user", "content": "Hi"}))
    assert [m["role"] for m in messages] == ["system", "user"]
    system = messages[0]["content"]
    assert system.startswith("Be brief.")
    assert "<tools>" in system and "</tools>" in system and "<tool_call>" in system
    listed = [json.loads(line) for line in system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert [entry["name"] for entry in listed] == ["get_weather", "apply_patch"]
    assert listed[0]["parameters"] == WEATHER.parameters and listed[0]["description"] == WEATHER.description
    assert messages[1] == {"role": "user", "content": "Hi"}


def test_no_instructions_no_tools_no_system_message(chat: ChatFormat) -> None:
    messages = chat_messages(None, [], items({"role": "user", "content": "Hi"}))
    assert messages == [{"role": "user", "content": "Hi"}]
    # The template then adds its own default system prompt.
    assert chat.render_text(messages).startswith("<|im_start|>system\n")
    tools_only = chat_messages(None, [WEATHER], items({"role": "user", "content": "Hi"}))
    assert tools_only[0]["role"] == "system" and "get_weather" in tools_only[0]["content"]


def test_function_call_and_output() -> None:
    messages = chat_messages(
        None,
        [WEATHER],
        items(
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21C"},
        ),
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    block = messages[2]["content"]
    assert block.startswith("<tool_call>\n") and block.endswith("\n</tool_call>")
    assert json.loads(block.split("\n")[1]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert messages[3] == {"role": "tool", "content": "sunny, 21C"}
    # What the prompt shows is what the parser reads back from the model.
    parser = ToolCallParser([WEATHER], parallel=True)
    deltas = parser.feed(block) + parser.finish()
    assert deltas[0] == ToolCallStart("get_weather", "function", None)
    assert isinstance(deltas[1], ToolCallDelta) and json.loads(deltas[1].text) == {"city": "Paris"}


def test_consecutive_assistant_items_merge_into_one_turn() -> None:
    messages = chat_messages(
        None,
        [WEATHER],
        items(
            {"role": "user", "content": "Two cities?"},
            {"role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "a", "name": "get_weather", "arguments": '{"city": "A"}'},
            {"type": "function_call", "call_id": "b", "name": "get_weather", "arguments": '{"city": "B"}'},
            {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "rain"}]},
            {"type": "function_call_output", "call_id": "b", "output": "snow"},
            {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c", "output": "done"},
        ),
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    assert messages[2]["content"].count("<tool_call>") == 2 and messages[2]["content"].startswith("Checking.\n")
    assert messages[3]["content"] == "rain"
    assert json.loads(messages[5]["content"].split("\n")[1]) == {"name": "apply_patch", "input": "*** Begin Patch"}


def test_replayed_assistant_message_renders_like_the_original(chat: ChatFormat) -> None:
    original = Message(
        role="assistant",
        content=[OutputText(text="Hello there.", annotations=[], logprobs=[])],
        id="msg_0123456789abcdefghijklmn",
        status="completed",
        phase="final_answer",
    )
    replays: list[dict[str, Any]] = [
        {"role": "assistant", "content": "Hello there."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello there."}]},
        {"role": "assistant", "content": [{"type": "input_text", "text": "Hello there."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello there."}], "phase": "final_answer"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_0123456789abcdefghijklmn",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}],
        },
    ]
    user = items({"role": "user", "content": "Hi"})
    expected = chat.tokens(chat_messages("sys", [WEATHER], [*user, original]))
    for replay in replays:
        assert chat.tokens(chat_messages("sys", [WEATHER], [*user, *items(replay)])) == expected, replay
    call = FunctionCall(call_id="c1", name="get_weather", arguments='{"city":"X"}', id="fc_1", status="completed")
    bare = items({"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"X"}'})
    assert chat_messages(None, [], [call]) == chat_messages(None, [], bare)


def test_string_content_is_one_input_text_part() -> None:
    as_string = items({"role": "user", "content": "What now?"})
    as_part = items({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What now?"}]})
    assert isinstance(as_string[0], Message) and as_string[0].content == [InputText(text="What now?")]
    assert chat_messages("x", [], as_string) == chat_messages("x", [], as_part)
    output_as_string = FunctionCallOutput(call_id="c", output="ok")
    output_as_parts = FunctionCallOutput(call_id="c", output=[InputText(text="ok")])
    assert chat_messages(None, [], [output_as_string]) == chat_messages(None, [], [output_as_parts])


def test_developer_and_system_roles() -> None:
    messages = chat_messages(
        None,
        [],
        items(
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Hi"},
            {"role": "system", "content": "Be short."},
        ),
    )
    assert messages == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Be short."},
    ]


def test_reasoning_is_left_out_unless_asked_for_and_unknown_items_are_text() -> None:
    messages = chat_messages(
        None,
        [],
        items(
            {"role": "user", "content": "Hi"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "secret plan"}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "hotloop"}},
        ),
    )
    assert [m["role"] for m in messages] == ["user", "user"]
    assert "secret plan" not in json.dumps(messages)
    assert messages[1]["content"].startswith("[web_search_call] ") and "hotloop" in messages[1]["content"]


# -- images and files -----------------------------------------------------------------------------------------------


def test_image_placeholder_has_size_and_token_cost() -> None:
    url = png_data_url(64, 32)
    messages = chat_messages(
        None,
        [],
        items(
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": url, "detail": "high"},
                    {"type": "input_image", "image_url": url, "detail": "low"},
                    {"type": "input_image", "image_url": "https://example.com/cat.png"},
                    {"type": "input_image", "file_id": "file-abc"},
                ],
            }
        ),
    )
    lines = messages[0]["content"].split("\n")
    assert lines[0] == "What is this?"
    assert lines[1] == f"[image: 64x32, {image_tokens(64, 32, 'high')} tokens]" == "[image: 64x32, 255 tokens]"
    assert lines[2] == "[image: 64x32, 85 tokens]"
    assert lines[3] == "[image: https://example.com/cat.png]"
    assert lines[4] == "[image: file-abc]"


def test_file_placeholders() -> None:
    text_data = "data:text/plain;base64," + base64.b64encode(b"line one\nline two").decode()
    binary = base64.b64encode(b"%PDF-1.7\x00\x01\x02" * 10).decode()
    messages = chat_messages(
        None,
        [],
        items(
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "filename": "notes.txt", "file_data": text_data},
                    {
                        "type": "input_file",
                        "filename": "paper.pdf",
                        "file_data": "data:application/pdf;base64," + binary,
                    },
                    {"type": "input_file", "file_id": "file-xyz"},
                    {"type": "input_file", "file_url": "https://example.com/a.pdf"},
                ],
            }
        ),
    )
    content = messages[0]["content"]
    assert "[file: notes.txt]\nline one\nline two" in content
    assert "[file: paper.pdf, 110 bytes]" in content
    assert "[file: file-xyz]" in content and "[file: https://example.com/a.pdf]" in content


def test_bad_image_data_is_a_400_naming_the_part() -> None:
    raw = {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}
    with pytest.raises(HotloopError) as info:
        chat_messages(None, [], items(raw))
    assert info.value.param == "input[0].content[0]"


@pytest.mark.parametrize(
    ("size", "detail", "tokens"),
    [
        ((1024, 1024), "low", 85),
        ((4096, 8192), "low", 85),
        ((1024, 1024), "high", 765),  # OpenAI's published example: 4 tiles
        ((2048, 4096), "high", 1105),  # → 1024x2048 → 768x1536: 6 tiles
        ((2048, 4096), None, 1105),
        ((512, 512), "auto", 255),
        ((100, 100), "high", 255),  # never upscaled
        ((3320, 1660), "high", 1105),  # exactly 2:1, as 2048x4096 (float arithmetic gave 1445)
        ((4096, 2048), "high", 1105),
    ],
)
def test_image_token_cost(size: tuple[int, int], detail: str | None, tokens: int) -> None:
    assert image_tokens(*size, detail) == tokens


# -- purity and prefix stability (hypothesis) -----------------------------------------------------------------------


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversation=conversations(), data=st.data())
def test_continuation_renders_like_the_full_request(
    chat: ChatFormat, conversation: list[tuple[dict[str, Any], ContextItem]], data: st.DataObject
) -> None:
    """render(context(P) ⊕ new) == render(full list): rendering is a pure function of the item list."""
    split = data.draw(st.integers(0, len(conversation)))
    instructions = data.draw(st.none() | TEXT)
    tools = data.draw(st.sampled_from([[], TOOLS]))
    parent = Context([stored for _, stored in conversation[:split]])
    new = items(*(raw for raw, _ in conversation[split:]))
    continued = parent.extend(new)
    parent.extend(items({"role": "user", "content": "a fork that must not leak"}))
    full = items(*(raw for raw, _ in conversation))
    expected = chat.tokens(chat_messages(instructions, tools, full))
    assert chat.tokens(chat_messages(instructions, tools, continued)) == expected
    assert chat.tokens(chat_messages(instructions, tools, list(continued))) == expected


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversation=conversations(), instructions=st.none() | TEXT)
def test_smollm2_template_is_prefix_stable(
    chat: ChatFormat, conversation: list[tuple[dict[str, Any], ContextItem]], instructions: str | None
) -> None:
    """Tokens of messages[:k] without the generation prompt are a prefix of the tokens of all messages."""
    messages = chat_messages(instructions, TOOLS, [stored for _, stored in conversation])
    whole = chat.tokens(messages)
    for k in range(1, len(messages) + 1):
        head = chat.tokens(messages[:k], add_generation_prompt=False)
        assert whole[: len(head)] == head, (k, messages[:k])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=TEXT.filter(lambda text: not text[:1].isspace()), follow_up=TEXT)
def test_generation_prompt_prefixes_the_replayed_answer(chat: ChatFormat, answer: str, follow_up: str) -> None:
    """The prompt the model answered (ending in the generation prompt) prefixes the prompt that replays the answer.

    KV reuse across turns rests on this. It holds unless the answer starts with whitespace: BPE then merges the
    generation prompt's newline with it (docs/models.md), and one token less is reused.
    """
    user = {"role": "user", "content": "Hi"}
    prompt = chat.tokens([user])
    replay = chat.tokens([user, {"role": "assistant", "content": answer}, {"role": "user", "content": follow_up}])
    assert replay[: len(prompt)] == prompt


@pytest.mark.parametrize("answer", ["\n\nHello", "  x", "\t", " ", "\n"])
def test_answers_starting_with_whitespace_break_the_generation_prompt_prefix(chat: ChatFormat, answer: str) -> None:
    user = {"role": "user", "content": "Hi"}
    prompt = chat.tokens([user])
    replay = chat.tokens([user, {"role": "assistant", "content": answer}])
    assert replay[: len(prompt) - 1] == prompt[:-1]  # all but the generation prompt's last token
    assert replay[: len(prompt)] != prompt


def test_compaction_shows_its_sealed_summary() -> None:
    blob = seal("The user asked about Paris weather; it was sunny.", b"k" * 32)
    messages = chat_messages(None, [], items({"type": "compaction", "encrypted_content": blob}))
    assert messages == [
        {
            "role": "user",
            "content": "[earlier conversation, compacted]\nThe user asked about Paris weather; it was sunny.",
        }
    ]
