"""The tool-call parser that turns a text model's `<tool_call>` output into function calls."""

from __future__ import annotations

import json

import pytest

from hotloop.backends.base import TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.toolcalls.text import ToolCallParser
from hotloop.chat.specs import ToolSpec

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

WEATHER = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
PATCH = ToolSpec(name="apply_patch", kind="custom")


def run(parser: ToolCallParser, pieces: list[str]) -> list[object]:
    out: list[object] = []
    for piece in pieces:
        out += parser.feed(piece)
    return out + parser.finish()


def test_plain_text_streams_at_once() -> None:
    parser = ToolCallParser([WEATHER], parallel=True)
    assert parser.feed("Hello") == [TextDelta("Hello")]
    assert parser.feed(" world") == [TextDelta(" world")]
    assert parser.finish() == []


def test_tool_call_block_becomes_a_call() -> None:
    pieces = [
        "<tool",
        "_call>\n",
        '{"name": "get_weather", ',
        '"arguments": {"city": "Paris"}}',
        "\n</tool_call>",
    ]
    out = run(ToolCallParser([WEATHER], parallel=True), pieces)
    assert out[0] == ToolCallStart("get_weather", "function", None)
    assert isinstance(out[1], ToolCallDelta) and json.loads(out[1].text) == {"city": "Paris"}
    assert out[2] == ToolCallEnd()


def test_bare_json_call_and_string_arguments() -> None:
    out = run(
        ToolCallParser([WEATHER], parallel=True),
        ['{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}'],
    )
    assert isinstance(out[1], ToolCallDelta) and json.loads(out[1].text) == {"city": "Oslo"}


def test_parallel_calls_and_their_limit() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "B"}}</tool_call>'
    )
    both = run(ToolCallParser([WEATHER], parallel=True), [text])
    assert sum(isinstance(delta, ToolCallStart) for delta in both) == 2
    one = run(ToolCallParser([WEATHER], parallel=False), [text])
    assert sum(isinstance(delta, ToolCallStart) for delta in one) == 1


def test_unknown_call_or_not_json_is_plain_text() -> None:
    for text in [
        '<tool_call>{"name": "nope", "arguments": {',
        '{"name": "nope", "arguments": {}}',
        '{"name": "get_wea", "arguments": {}}',  # a name that is only the start of a tool's, though not cut
        "{not json",
    ]:
        out = run(ToolCallParser([WEATHER], parallel=True), [text])
        assert out == [TextDelta(text)], text


def finished(parser: ToolCallParser, text: str, cut: bool) -> list[object]:
    return parser.feed(text) + parser.finish(cut=cut)


def test_a_call_cut_short_is_an_incomplete_call_never_text() -> None:
    """Issue 36: a forced custom call the length limit cut short came back as a message holding the call's JSON."""
    patch = '{"name": "apply_patch", "input": "*** Begin Patch\\n*** Add File: a.txt\\n+one\\n+tw'
    assert finished(ToolCallParser([PATCH, WEATHER], parallel=True), patch, cut=True) == [
        ToolCallStart("apply_patch", "custom", None),
        ToolCallDelta("*** Begin Patch\n*** Add File: a.txt\n+one\n+tw"),
        ToolCallEnd(incomplete=True),
    ]
    weather = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os'
    assert finished(ToolCallParser([WEATHER], parallel=True), weather, cut=True) == [
        ToolCallStart("get_weather", "function", None),
        ToolCallDelta('{"city": "Os'),
        ToolCallEnd(incomplete=True),
    ]
    # Cut inside the name: the one offered tool whose name it starts; before the payload: an empty one.
    assert finished(ToolCallParser([PATCH, WEATHER], parallel=True), '{"name": "get_w', cut=True)[:2] == [
        ToolCallStart("get_weather", "function", None),
        ToolCallDelta(""),
    ]
    assert finished(ToolCallParser([PATCH, WEATHER], parallel=True), '{"name": "', cut=True) == [
        TextDelta('{"name": "')
    ]


def test_a_malformed_call_to_an_offered_tool_is_incomplete() -> None:
    """A stop inside the call, or JSON that does not parse: the call with what was written, incomplete."""
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>'
    out = finished(ToolCallParser([WEATHER], parallel=True), text, cut=False)
    assert out == [ToolCallStart("get_weather", "function", None), ToolCallDelta('{"city": }'), ToolCallEnd(True)]


def test_whole_calls_before_a_cut_one_stay_whole() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "B'
    )
    out = finished(ToolCallParser([WEATHER], parallel=True), text, cut=True)
    assert [delta for delta in out if isinstance(delta, ToolCallEnd)] == [ToolCallEnd(), ToolCallEnd(incomplete=True)]
    one = finished(ToolCallParser([WEATHER], parallel=False), text, cut=True)
    assert [delta for delta in one if isinstance(delta, ToolCallEnd)] == [ToolCallEnd()]  # the first call only


def test_custom_tool_input() -> None:
    out = run(
        ToolCallParser([PATCH], parallel=True),
        ['<tool_call>{"name": "apply_patch", "input": "*** Begin"}</tool_call>'],
    )
    assert out[0] == ToolCallStart("apply_patch", "custom", None)
    assert out[1] == ToolCallDelta("*** Begin")
    # As the `tokens` backend's parsers read it (one `ToolCalls`): a model that writes "arguments" for the text.
    written = run(ToolCallParser([PATCH], parallel=True), ['{"name": "apply_patch", "arguments": "*** End"}'])
    assert written[1] == ToolCallDelta("*** End")


def test_without_tools_everything_is_text() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    assert run(ToolCallParser([], parallel=True), [text]) == [TextDelta(text)]


def test_a_json_list_of_calls_in_one_block() -> None:
    calls = '[{"name": "get_weather", "arguments": {"city": "A"}}, {"name": "get_weather", "arguments": {}}]'
    text = f"<tool_call>{calls}</tool_call>"
    out = run(ToolCallParser([WEATHER], parallel=True), [text])
    assert sum(isinstance(delta, ToolCallStart) for delta in out) == 2
    bare = run(ToolCallParser([WEATHER], parallel=True), ["[", '{"name": "get_weather", "arguments": {"city": "B"}}]'])
    assert isinstance(bare[1], ToolCallDelta) and json.loads(bare[1].text) == {"city": "B"}
    # "[" that does not open a list of calls is text, released at once when it cannot be one
    parser = ToolCallParser([WEATHER], parallel=True)
    assert parser.feed("[") == []
    assert parser.feed("1] see note") == [TextDelta("[1] see note")]
    assert run(ToolCallParser([WEATHER], parallel=True), ['[{"name": "nope"}]']) == [TextDelta('[{"name": "nope"}]')]


def test_namespaced_tools_with_equal_names_stay_apart() -> None:
    """Namespace members are offered and parsed as `namespace.name`, so two `search` tools do not collide."""
    from hotloop.chat.messages import chat_messages

    docs = ToolSpec(name="search", namespace="docs")
    web = ToolSpec(name="search", namespace="web")
    system = chat_messages(None, (docs, web), [])[0]["content"]
    assert '"name": "docs.search"' in system and '"name": "web.search"' in system
    out = run(
        ToolCallParser([docs, web], parallel=True), ['<tool_call>{"name": "web.search", "arguments": {}}</tool_call>']
    )
    assert out[0] == ToolCallStart("search", "function", "web")
    assert run(ToolCallParser([docs, web], parallel=True), ['{"name": "search", "arguments": {}}']) == [
        TextDelta('{"name": "search", "arguments": {}}')
    ]
