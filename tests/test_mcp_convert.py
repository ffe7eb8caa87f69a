"""hotloop.mcp without a server: outputs capped in UTF-8 bytes, parts joined, the SDK's pydantic results and the
wire's decoded ones turned into the same Structs, the transport a URL names, an endpoint's repr without its header
values."""

from __future__ import annotations

import mcp_types
import pytest

from hotloop.mcp import Endpoint, transport_for
from hotloop.mcp.convert import call_result, capped, capped_parts, joined, listed, listed_wire, outcome
from hotloop.mcp.jsonrpc import Decoders

pytestmark = pytest.mark.fast


def test_capped_keeps_whole_characters() -> None:
    assert capped("abc", 3) == "abc"
    assert capped("abcd", 3) == "abc\n[output truncated: 4 bytes]"
    assert capped("ééé", 3) == "é\n[output truncated: 6 bytes]"  # 2 bytes each: the second one is not cut
    assert capped("", 0) == ""


def test_a_result_becomes_output_text() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="one"),
            mcp_types.ImageContent(data="AAAA", mime_type="image/png"),
            mcp_types.TextContent(text="two"),
        ]
    )
    converted = call_result(result, 1 << 20, 0.5)
    assert converted.output == 'one\n{"type":"image","data":"AAAA","mimeType":"image/png"}\ntwo'
    assert converted.error is None and converted.seconds == 0.5


def test_structured_content_alone_is_output_as_json() -> None:
    result = mcp_types.CallToolResult(content=[], structured_content={"sum": 3})
    assert call_result(result, 100, 0).output == '{"sum":3}'


def test_an_error_result_keeps_its_content_within_the_cap() -> None:
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(text="bad input")], is_error=True)
    error = call_result(result, 100, 0).error
    assert error is not None and error.type == "mcp_tool_execution_error"
    assert error.content == [{"type": "text", "text": "bad input"}]
    long = [{"type": "text", "text": "y" * 50}, {"type": "text", "text": "z" * 50}]
    text = "y" * 50 + "\n" + "z" * 9 + "\n[output truncated: 101 bytes]"
    assert capped_parts(long, 60) == [{"type": "text", "text": text}]


def test_a_listed_tool_is_plain_data() -> None:
    tool = mcp_types.Tool(
        name="search",
        description="Search",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        annotations=mcp_types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    converted = listed(tool)
    assert converted.annotations == {"readOnlyHint": True, "openWorldHint": False}
    assert converted.input_schema == {"type": "object", "properties": {"q": {"type": "string"}}}
    assert listed(mcp_types.Tool(name="x", input_schema={"type": "object"})).annotations is None


def test_the_wire_and_the_sdk_give_the_same_structs() -> None:
    wire = (
        b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"mimeType":"image/png","data":"AAAA","type":"image"},'
        b'{"type":"text","text":"two"}],"isError":false,"structuredContent":{"n":1}}}'
    )
    decoded = Decoders.tools_call.decode(wire).result
    assert decoded is not None
    sdk = mcp_types.CallToolResult(
        content=[mcp_types.ImageContent(data="AAAA", mime_type="image/png"), mcp_types.TextContent(text="two")],
        structured_content={"n": 1},
    )
    assert outcome(decoded, 100, 0.5) == call_result(sdk, 100, 0.5)
    assert joined(decoded.content) == '{"type":"image","data":"AAAA","mimeType":"image/png"}\ntwo'  # one key order
    listing = (
        b'{"id":1,"result":{"tools":[{"name":"x","inputSchema":{"type":"object"},'
        b'"annotations":{"readOnlyHint":true}}]}}'
    )
    page = Decoders.tools_list.decode(listing).result
    assert page is not None and page.next_cursor is None
    tool = mcp_types.Tool(
        name="x", input_schema={"type": "object"}, annotations=mcp_types.ToolAnnotations(read_only_hint=True)
    )
    assert listed_wire(page.tools[0]) == listed(tool)


def test_transport_for() -> None:
    assert transport_for("https://example.com/sse") == "sse"
    assert transport_for("https://example.com/v1/sse/?key=1") == "sse"
    assert transport_for("https://example.com/mcp") == "streamable_http"
    assert transport_for("https://example.com/ssefoo") == "streamable_http"


def test_an_endpoints_repr_shows_header_names_only() -> None:
    endpoint = Endpoint("https://example.com/mcp", (("Authorization", "Bearer secret"),))
    assert "secret" not in repr(endpoint) and "Authorization" in repr(endpoint)
