"""`tool_search` and `defer_loading` without a server (protocol.md §1.11): the BM25 search over deferred tools, what a
`tool_search_output` loads and may name, how `resolve_tools` defers each kind of tool and echoes it, and the
`tool_search` tool's declaration."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hotloop.chat.specs import ToolSpec
from hotloop.errors import InvalidParam
from hotloop.pipeline.mcp.listing import _offered
from hotloop.pipeline.steps.searches import _query
from hotloop.pipeline.tools import resolve_tools
from hotloop.tools import tool_search
from hotloop.tools.tool_search import (
    CLIENT_KIND,
    SERVER_KIND,
    TOOL_SEARCH,
    check_loadable,
    echo,
    listed,
    loaded,
    search,
    shown,
)
from hotloop.wire.items import McpListedTool, McpListTools
from hotloop.wire.tool_items import ToolSearchOutput

pytestmark = pytest.mark.fast

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def spec(
    name: str, description: str | None = None, params: tuple[str, ...] = (), namespace: str | None = None
) -> ToolSpec:
    parameters = {"type": "object", "properties": {p: {"type": "string"} for p in params}}
    return ToolSpec(name, description=description, parameters=parameters, namespace=namespace)


CATALOG = [
    spec("get_weather", "Current conditions for a city.", ("city",)),
    spec("sendEmail", "Deliver a message to an inbox.", ("to", "body")),
    spec("create_invoice", "Bill a customer for an order.", ("customer_id", "amount")),
    spec("lookup", "Find a record by its zipcode.", ("zipcode",)),
    spec("list_files", "Directory listing.", ("path",), namespace="fs"),
    *(spec(f"tool_{i}", f"does thing {i}", ("x",)) for i in range(40)),
]


def names(found: list[ToolSpec]) -> list[str]:
    return [s.name for s in found]


def output(*tools: dict[str, Any], call_id: str = "call_1") -> ToolSearchOutput:
    return ToolSearchOutput(tools=list(tools), execution="client", call_id=call_id)


# -- search ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("weather", "get_weather"),  # a word of a snake_case name
        ("get weather", "get_weather"),
        ("send email", "sendEmail"),  # camelCase names search by their parts
        ("email", "sendEmail"),
        ("SendEmail", "sendEmail"),  # a camelCase query splits the same way
        ("bill customer", "create_invoice"),  # the description
        ("inbox", "sendEmail"),
        ("zipcode", "lookup"),  # a parameter name (and the description)
        ("amount", "create_invoice"),  # a parameter name only
        ("files fs", "list_files"),  # the namespace and the name
    ],
)
def test_search_ranks_the_matching_tool_first(query: str, best: str) -> None:
    found = search(CATALOG, query)
    assert found and found[0].name == best, (query, names(found))


def test_search_without_a_match_loads_nothing() -> None:
    assert search(CATALOG, "spaceship") == []
    assert search(CATALOG, "") == [] and search(CATALOG, "  ,;  ") == []
    assert search([], "weather") == []


def test_search_returns_at_most_limit_hits_all_scoring() -> None:
    found = search(CATALOG, "tool thing")
    assert len(found) == 5 and all(s.name.startswith("tool_") for s in found)
    assert len(search(CATALOG, "tool", limit=2)) == 2
    assert names(search(CATALOG, "thing 7"))[0] == "tool_7"  # the number tells one tool from the others
    # A word only some tools have: only they come back, not a filler of zero scores.
    assert names(search(CATALOG, "city")) == ["get_weather"]


def test_search_is_case_insensitive_and_reuses_the_catalogs_index() -> None:
    first = search(tuple(CATALOG), "WEATHER")
    assert names(first) == ["get_weather"]
    assert names(search(CATALOG, "weather")) == ["get_weather"]


def test_the_index_of_each_catalog_is_kept_and_bounded() -> None:
    for i in range(tool_search._INDEXES + 3):
        assert names(search([spec(f"only_{i}"), spec("other")], f"only {i}")) == [f"only_{i}"]
    assert len(tool_search._cache) == tool_search._INDEXES


def test_the_query_is_read_from_what_the_model_wrote() -> None:
    assert _query({"query": "get weather"}) == "get weather"
    assert _query({"keywords": "weather", "limit": 3}) == "weather 3"  # a client's own schema, run by the server
    assert _query("weather now") == "weather now" and _query(["weather"]) == '["weather"]'


# -- loaded / check_loadable -----------------------------------------------------------------------------------------


WEATHER, INVOICE, FILES = CATALOG[0], CATALOG[2], CATALOG[4]


def test_loaded_takes_the_declared_tools_of_search_outputs_in_order() -> None:
    items = [
        "not an output",
        output({"type": "function", "name": "create_invoice"}),
        output({"type": "function", "name": "get_weather"}, {"type": "function", "name": "unknown"}),
        output({"type": "function", "name": "create_invoice"}),  # loaded twice: once
    ]
    assert loaded(items, CATALOG) == [INVOICE, WEATHER]
    assert loaded([], CATALOG) == [] and loaded(items, []) == []


def test_loaded_finds_namespace_members_in_each_shape() -> None:
    hotloop_shape = output({"type": "function", "name": "list_files", "namespace": "fs"})
    openai_shape = output(
        {
            "type": "namespace",
            "name": "fs",
            "description": "Files.",
            "tools": [{"type": "function", "name": "list_files"}],
        }
    )
    bare = output({"type": "function", "name": "list_files"})
    for item in (hotloop_shape, openai_shape, bare):
        assert loaded([item], CATALOG) == [FILES], item
    assert loaded([output({"type": "function", "name": "list_files", "namespace": "other"})], CATALOG) == []


def test_listed_flattens_namespaces() -> None:
    tools = [
        {"type": "namespace", "name": "fs", "tools": [{"type": "function", "name": "a"}, "junk"]},
        "junk",
        {"type": "custom", "name": "b"},
    ]
    assert listed(tools) == [{"type": "function", "name": "a", "namespace": "fs"}, {"type": "custom", "name": "b"}]


def test_check_loadable_accepts_declared_tools_only() -> None:
    offered = [spec("tool_search"), spec("ping")]
    check_loadable([output({"name": "get_weather"}), output({"name": "ping"})], CATALOG, offered)
    check_loadable([output({"name": "list_files", "namespace": "fs"}), output({"name": "list_files"})], CATALOG, [])
    check_loadable([output({"type": "namespace", "name": "fs", "tools": [{"name": "list_files"}]})], CATALOG, [])
    check_loadable(["other items", output()], CATALOG, [])
    for bad in (
        output({"name": "nope"}),
        output({"name": "list_files", "namespace": "nope"}),
        output({"type": "namespace", "name": "fs", "tools": [{"name": "nope"}]}),
        output({"type": "namespace", "name": "nope", "tools": [{"name": "list_files"}]}),
    ):
        with pytest.raises(InvalidParam) as caught:
            check_loadable([bad], CATALOG, offered)
        assert caught.value.param == "input" and caught.value.code == "invalid_value"


def test_a_search_output_reads_as_the_loaded_definitions() -> None:
    text = TOOL_SEARCH.output_content(
        output(
            {
                "type": "namespace",
                "name": "fs",
                "tools": [{"type": "function", "name": "list_files", "description": "ls"}],
            },
            {"type": "custom", "name": "patch"},
        )
    )
    assert isinstance(text, str)
    lines = text.splitlines()
    assert json.loads(lines[1]) == {"name": "fs.list_files", "description": "ls", "parameters": OBJECT}
    assert json.loads(lines[2]) == {"name": "patch", "input": "freeform text"}
    assert TOOL_SEARCH.output_content(output()) == "No tools matched."


# -- resolve_tools ---------------------------------------------------------------------------------------------------


SEARCH = {"type": "tool_search"}
FUNCTION = {"type": "function", "name": "f", "description": "F.", "parameters": OBJECT, "defer_loading": True}
CUSTOM = {"type": "custom", "name": "c", "description": "C.", "defer_loading": True}
NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM.",
    "tools": [
        {"type": "function", "name": "lookup", "parameters": OBJECT, "defer_loading": True},
        {"type": "function", "name": "orders", "parameters": OBJECT},
        {"type": "custom", "name": "note", "defer_loading": True},
    ],
}


def test_resolve_tools_defers_each_kind_and_echoes_defer_loading() -> None:
    tools = resolve_tools([SEARCH, FUNCTION, CUSTOM, NAMESPACE, {**FUNCTION, "name": "g", "defer_loading": False}])
    assert [(s.namespace, s.name, s.kind) for s in tools.deferred] == [
        ("f", "f", "function"),  # a deferred top-level tool's calls carry its name as their namespace
        ("c", "c", "custom"),
        ("crm", "lookup", "function"),
        ("crm", "note", "custom"),
    ]
    assert [(s.namespace, s.name) for s in tools.specs] == [(None, "tool_search"), ("crm", "orders"), (None, "g")]
    assert tools.search is not None and tools.search.kind == SERVER_KIND
    by_name = {tool["name"]: tool for tool in tools.echo if "name" in tool}
    assert by_name["f"]["defer_loading"] is True and "defer_loading" not in by_name["g"]
    assert by_name["c"]["defer_loading"] is True
    assert [m.get("defer_loading") for m in by_name["crm"]["tools"]] == [True, None, True]
    assert {"type": "tool_search"} in tools.echo


def test_a_deferred_mcp_servers_tools_are_listed_deferred() -> None:
    server = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/", "defer_loading": True}
    tools = resolve_tools([SEARCH, server, {**server, "server_label": "now", "defer_loading": False}])
    assert [d.deferred for d in tools.mcp] == [True, False]
    assert [t.get("defer_loading") for t in tools.echo if t["type"] == "mcp"] == [True, False]
    lists = [
        McpListTools(id=f"mcpl_{label}", server_label=label, tools=[McpListedTool(name="read", input_schema=OBJECT)])
        for label in ("docs", "now")
    ]
    offered = _offered(tools, lists)
    assert [(s.namespace, s.name, s.kind) for s in offered.deferred] == [("docs", "read", "mcp")]
    assert [(s.namespace, s.name) for s in offered.specs] == [(None, "tool_search"), ("now", "read")]


@pytest.mark.parametrize(
    "tool",
    [
        FUNCTION,
        CUSTOM,
        NAMESPACE,
        {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/", "defer_loading": True},
    ],
    ids=["function", "custom", "namespace", "mcp"],
)
def test_deferred_tools_need_a_tool_search(tool: dict[str, Any]) -> None:
    with pytest.raises(InvalidParam) as caught:
        resolve_tools([tool])
    assert caught.value.param == "tools" and caught.value.code == "invalid_value"
    resolve_tools([{"type": "tool_search", "execution": "client"}, tool])


def test_duplicate_names_count_deferred_tools_too() -> None:
    with pytest.raises(InvalidParam):
        resolve_tools([SEARCH, FUNCTION, {**FUNCTION, "defer_loading": False}])


# -- echo and the tool_search declaration ----------------------------------------------------------------------------


def test_echo_is_the_declared_shape_with_defer_loading() -> None:
    assert echo(spec("get_weather", "W.", ("city",))) == {
        "type": "function",
        "name": "get_weather",
        "description": "W.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": None,
        "defer_loading": True,
    }
    assert echo(ToolSpec("c", kind="custom", description="C.")) == {
        "type": "custom",
        "name": "c",
        "description": "C.",
        "defer_loading": True,
    }
    # A namespace's member is listed inside its namespace (`shown`); an MCP server's tool carries its label.
    assert "namespace" not in echo(spec("lookup", namespace="crm"))
    assert echo(ToolSpec("read", kind="mcp", namespace="wiki"))["namespace"] == "wiki"
    top, block = shown([spec("f"), spec("lookup", namespace="crm")])
    assert top["name"] == "f" and block["type"] == "namespace" and block["name"] == "crm"
    assert [member["name"] for member in block["tools"]] == ["lookup"]


def test_tool_search_declares_by_execution() -> None:
    server = TOOL_SEARCH.declare({"type": "tool_search"}, "tools[0]")
    assert (server.name, server.kind) == ("tool_search", SERVER_KIND)
    assert server.parameters is not None and "query" in server.parameters["properties"]
    # The server's own search reads `query`: a declared description or schema is for a client's search only.
    ignored = TOOL_SEARCH.declare({"type": "tool_search", "description": "D", "parameters": OBJECT}, "tools[0]")
    assert ignored.parameters == server.parameters and ignored.description == server.description
    client = TOOL_SEARCH.declare(
        {"type": "tool_search", "execution": "client", "description": "D", "parameters": OBJECT}, "tools[0]"
    )
    assert (client.kind, client.description, client.parameters) == (CLIENT_KIND, "D", OBJECT)
    for bad, param in (
        ({"execution": "elsewhere"}, "tools[2].execution"),
        ({"parameters": "x"}, "tools[2].parameters"),
    ):
        with pytest.raises(InvalidParam) as caught:
            TOOL_SEARCH.declare({"type": "tool_search", **bad}, "tools[2]")
        assert caught.value.param == param
