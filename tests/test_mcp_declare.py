"""MCP tool declarations (pipeline/mcp/declare.py): fields, filters, the echo without credentials, the allowlist."""

from __future__ import annotations

import pytest

from hotloop.chat.specs import ToolSpec
from hotloop.config import McpServer, Settings
from hotloop.errors import HotloopError
from hotloop.pipeline.mcp.declare import allowed, declare, endpoint
from hotloop.pipeline.tools import ToolSet, resolve_tool_choice, resolve_tools
from hotloop.wire.items import McpListedTool

pytestmark = pytest.mark.fast

URL = "http://127.0.0.1:9000/mcp"


def tool(**fields: object) -> dict[str, object]:
    return {"type": "mcp", "server_label": "docs", "server_url": URL, **fields}


def listed(name: str, read_only: bool | None = None) -> McpListedTool:
    annotations = None if read_only is None else {"readOnlyHint": read_only}
    return McpListedTool(name=name, input_schema={"type": "object"}, annotations=annotations)


def error_of(raw: dict[str, object]) -> HotloopError:
    with pytest.raises(HotloopError) as caught:
        resolve_tools([raw])
    return caught.value


def test_the_echo_keeps_no_credentials() -> None:
    echo, declared = declare(tool(headers={"X-Key": "secret-1"}, authorization="secret-2", server_description="d"), 0)
    assert "headers" not in echo and "authorization" not in echo
    assert echo == {"type": "mcp", "server_label": "docs", "server_url": URL, "server_description": "d"}
    assert declared.headers == (("X-Key", "secret-1"),) and declared.authorization == "secret-2"


@pytest.mark.parametrize("field", ["connector_id", "tunnel_id"])
def test_connectors_and_tunnels_are_refused_naming_the_field(field: str) -> None:
    error = error_of(tool(**{field: "connector_gmail"}))
    assert error.status == 400 and error.code == "unsupported_parameter" and error.param == f"tools[0].{field}"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ({"type": "mcp", "server_url": URL}, "tools[0].server_label"),
        (tool(headers={"a": 1}), "tools[0].headers"),
        (tool(allowed_tools="x"), "tools[0].allowed_tools"),
        (tool(allowed_tools={"tool_names": "x"}), "tools[0].allowed_tools.tool_names"),
        (tool(require_approval="sometimes"), "tools[0].require_approval"),
        (tool(require_approval={"never": {"read_only": "yes"}}), "tools[0].require_approval.never.read_only"),
        (tool(server_url=5), "tools[0].server_url"),
    ],
)
def test_bad_fields_are_400_naming_them(raw: dict[str, object], param: str) -> None:
    error = error_of(raw)
    assert error.status == 400 and error.param == param


def test_two_servers_of_one_label_are_refused() -> None:
    with pytest.raises(HotloopError) as caught:
        resolve_tools([tool(), tool()])
    assert caught.value.param == "tools[1].server_label"


def test_function_custom_and_mcp_tools_together() -> None:
    tools = resolve_tools([{"type": "function", "name": "f"}, tool(), {"type": "custom", "name": "c"}])
    assert [server.label for server in tools.mcp] == ["docs"]
    assert [spec.name for spec in tools.specs] == ["f", "c"]  # the MCP server's tools once listed
    assert [entry["type"] for entry in tools.echo] == ["function", "mcp", "custom"]


def test_allowed_tools_by_name_and_by_read_only() -> None:
    by_name = declare(tool(allowed_tools=["a"]), 0)[1]
    assert by_name.offered(listed("a")) and not by_name.offered(listed("b"))
    read_only = declare(tool(allowed_tools={"read_only": True}), 0)[1]
    assert read_only.offered(listed("a", True)) and not read_only.offered(listed("b", False))
    assert not read_only.offered(listed("c"))
    everything = declare(tool(), 0)[1]
    assert everything.offered(listed("z"))


def test_approval_is_asked_by_default_and_as_filters_say() -> None:
    assert declare(tool(), 0)[1].needs_approval(listed("a"))
    assert declare(tool(require_approval="always"), 0)[1].needs_approval(listed("a"))
    assert not declare(tool(require_approval="never"), 0)[1].needs_approval(listed("a"))
    filtered = declare(tool(require_approval={"never": {"tool_names": ["safe"]}, "always": {"read_only": False}}), 0)
    policy = filtered[1]
    assert not policy.needs_approval(listed("safe", False))  # `never` wins
    assert policy.needs_approval(listed("write", False))
    assert policy.needs_approval(listed("other"))  # neither filter: asked


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:9000/mcp", True),
        ("http://127.0.0.1:9000/mcp/", True),
        ("http://127.0.0.1:9000/mcp/sub", True),
        ("http://127.0.0.1:9000/mcpx", False),
        ("http://127.0.0.1:9001/mcp", False),
        ("https://127.0.0.1:9000/mcp", False),
        ("http://127.0.0.1.evil.example:9000/mcp", False),
        ("http://user:pw@127.0.0.1:9000/mcp", False),
        ("ftp://127.0.0.1:9000/mcp", False),
        ("not a url", False),
    ],
)
def test_the_allowlist_matches_scheme_host_port_and_path_segments(url: str, ok: bool) -> None:
    assert allowed(url, ["http://127.0.0.1:9000/mcp"]) is ok


def test_an_empty_allowlist_allows_nothing() -> None:
    assert not allowed(URL, [])


def test_a_url_outside_the_allowlist_is_400_naming_it() -> None:
    declared = declare(tool(), 3)[1]
    with pytest.raises(HotloopError) as caught:
        endpoint(declared, Settings())
    assert caught.value.code == "mcp_server_not_allowed" and caught.value.param == "tools[3].server_url"


def test_a_configured_server_is_used_by_label_with_its_headers_first() -> None:
    settings = Settings(mcp_servers={"docs": McpServer(url=URL, headers={"X-Team": "a", "X-Key": "conf"})})
    declared = declare({"type": "mcp", "server_label": "docs", "headers": {"X-Key": "req"}, "authorization": "t"}, 0)
    where = endpoint(declared[1], settings)
    assert where.url == URL
    assert dict(where.headers) == {"X-Team": "a", "X-Key": "req", "Authorization": "Bearer t"}


def test_a_label_alone_without_configuration_is_400() -> None:
    declared = declare({"type": "mcp", "server_label": "docs"}, 0)[1]
    with pytest.raises(HotloopError) as caught:
        endpoint(declared, Settings(mcp_allowed_urls=[URL]))
    assert caught.value.param == "tools[0].server_url"


def test_sse_is_chosen_by_path_or_configuration() -> None:
    settings = Settings(mcp_allowed_urls=["http://127.0.0.1:9000/"])
    assert endpoint(declare(tool(server_url="http://127.0.0.1:9000/sse"), 0)[1], settings).transport == "sse"
    assert endpoint(declare(tool(), 0)[1], settings).transport == "streamable_http"
    configured = Settings(mcp_servers={"docs": McpServer(url=URL, transport="sse")})
    assert endpoint(declare({"type": "mcp", "server_label": "docs"}, 0)[1], configured).transport == "sse"


def test_tool_choice_mcp_needs_an_offered_tool() -> None:
    with pytest.raises(HotloopError) as caught:
        resolve_tool_choice({"type": "mcp", "server_label": "docs"}, resolve_tools([tool()]))
    assert caught.value.param == "tool_choice"


def test_tool_choice_mcp_limits_the_call_to_that_server() -> None:
    specs = (
        ToolSpec("read", kind="mcp", namespace="docs"),
        ToolSpec("read", kind="mcp", namespace="wiki"),
        ToolSpec("write", kind="mcp", namespace="wiki"),
    )
    tools = ToolSet(echo=[], specs=specs)
    whole = resolve_tool_choice({"type": "mcp", "server_label": "wiki"}, tools)
    assert whole.mode == "required" and [s.namespace for s in whole.tools.specs] == ["wiki", "wiki"]
    one = resolve_tool_choice({"type": "mcp", "server_label": "wiki", "name": "read"}, tools)
    assert one.forced == "wiki.read" and one.tools.specs == (specs[1],)  # not docs' tool of the same name
