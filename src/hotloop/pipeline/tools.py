"""Tool definitions and `tool_choice` (protocol.md §1.4): what is offered to the model and what is echoed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from hotloop.chat.specs import ToolSpec
from hotloop.config import DEFAULT_DROPPED_TOOL_TYPES
from hotloop.errors import InvalidParam
from hotloop.filesearch.filters import compile_filter
from hotloop.pipeline.mcp.declare import Declared, declare
from hotloop.tools import code_interpreter, file_search, hosted_shell, multi_agent
from hotloop.tools.function import declare_custom, declare_function, declare_namespace
from hotloop.tools.grammar import Grammar
from hotloop.tools.registry import BY_TYPE, HOSTED_TYPES, SEARCH_KINDS
from hotloop.wire.items import McpListTools

# What `drop_tool_types` defaults to (config.py): the hosted types unmodified clients always send (protocol.md §1.4).
DEFAULT_DROPPED = DEFAULT_DROPPED_TOOL_TYPES


class ToolSet(msgspec.Struct, frozen=True):
    """The resolved tools of a request: echoed shape, offered specs, and names the model may call.

    With MCP servers (`mcp`), the specs include their listed tools once they are offered (pipeline/mcp/listing.py),
    and the set, cached on the chain, keeps the lists they came from: a continuation lists nothing again."""

    echo: list[Any]
    specs: tuple[ToolSpec, ...]
    mcp: tuple[Declared, ...] = ()
    listed: tuple[McpListTools, ...] = ()  # the lists behind the MCP specs (empty until offered)
    approvals: frozenset[tuple[str, str]] = frozenset()  # (server label, tool) calls that wait for approval
    dropped: tuple[str, ...] = ()  # the types `drop_tool_types` took out of the request, counted per turn
    # Tools marked `defer_loading`: never rendered, callable once a `tool_search_output` loaded them (§1.11).
    deferred: tuple[ToolSpec, ...] = ()
    grammars: tuple[tuple[str, Grammar], ...] = ()  # custom tools' grammars by `tools[i].format.definition`
    file_search: file_search.Declared | None = None  # the server runs its searches (pipeline/steps/file_searches.py)
    code: code_interpreter.Declared | None = None  # the server runs its code (pipeline/steps/code_runs.py)
    shell: code_interpreter.Declared | None = None  # a hosted shell's container (pipeline/steps/shell_runs.py)

    def find(self, name: str, namespace: str | None = None) -> ToolSpec | None:
        """The tool named `name` in `namespace`, or by the name the model sees (`namespace.name`)."""
        for spec in self.specs:
            if (spec.name == name and spec.namespace == namespace) or (namespace is None and spec.prompt_name == name):
                return spec
        return None

    @property
    def search(self) -> ToolSpec | None:
        """The `tool_search` tool, if the request has one."""
        return next((spec for spec in self.specs if spec.kind in SEARCH_KINDS), None)


def _grammar_of(spec: ToolSpec, param: str) -> list[tuple[str, Grammar]]:
    """A custom tool's grammar, with the param an error names (compiled at the door: pipeline/grammars.py)."""
    return [(f"{param}.format.definition", spec.grammar)] if spec.grammar is not None else []


def _own_namespace(spec: ToolSpec) -> ToolSpec:
    """A deferred top-level tool: its calls carry its name as their namespace, as OpenAI's do (the Agents SDK finds
    the tool by it); the model sees the plain name (tools/spec.py `prompt_name`)."""
    return msgspec.structs.replace(spec, namespace=spec.name)


def resolve_tools(
    tools: list[dict[str, Any]] | None, drop: Iterable[str] = DEFAULT_DROPPED, no_code: str | None = None
) -> ToolSet:
    """Validate the `tools` array; function tools are echoed first, then the others as sent. A type this server
    does not run is refused by name (400 `unsupported_tool`), unless `drop` (the `drop_tool_types` setting) lists
    it: then it is left out, and the set says so. `no_code`: why this server runs no code (its sandbox cannot
    start here, or it is turned off): `code_interpreter` is refused by name with that reason, and so is a hosted
    `shell` (tools/hosted_shell.py: its environment a container), by its `environment`."""
    functions: list[Any] = []
    others: list[Any] = []
    specs: list[ToolSpec] = []
    servers: list[Declared] = []
    dropped: list[str] = []
    deferred: list[ToolSpec] = []
    grammars: list[tuple[str, Grammar]] = []
    searches: file_search.Declared | None = None
    code: code_interpreter.Declared | None = None
    shell: code_interpreter.Declared | None = None
    drop = frozenset(drop)
    for index, raw in enumerate(tools or ()):
        param = f"tools[{index}]"
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise InvalidParam("Each tool needs a string 'type'.", param=f"{param}.type", code="invalid_type")
        later = raw.get("defer_loading") is True
        if kind == hosted_shell.TYPE and hosted_shell.hosted(raw):  # run by the server, in a container
            if no_code is not None:
                raise InvalidParam(
                    f"A shell in a container is not supported here: {no_code}. Use the environment 'local' (the "
                    "client runs the commands).",
                    param=f"{param}.environment",
                    code="unsupported_tool",
                )
            spec, shell = hosted_shell.declare(raw, param)
            specs.append(spec)
            others.append(raw)
        elif kind in BY_TYPE:  # a typed tool the client runs (hotloop/tools/)
            specs.append(BY_TYPE[kind].declare(raw, param))
            others.append(raw)
        elif kind in drop:
            dropped.append(kind)
        elif kind == "function":
            echo, spec = declare_function(raw, param)
            functions.append(echo)
            (deferred if later else specs).append(_own_namespace(spec) if later else spec)
        elif kind == "custom":
            spec = declare_custom(raw, param)
            (deferred if later else specs).append(_own_namespace(spec) if later else spec)
            grammars += _grammar_of(spec, param)
            others.append(raw)
        elif kind == "namespace":
            for spec, member_later, where in declare_namespace(raw, param):
                (deferred if member_later else specs).append(spec)
                grammars += _grammar_of(spec, where)
            others.append(raw)
        elif kind == file_search.TYPE:
            if searches is not None:
                raise InvalidParam("Only one file_search tool per request.", param=f"{param}.type")
            spec, searches = file_search.declare(raw, param)
            if searches.filters is not None:
                compile_filter(searches.filters, param=f"{param}.filters")  # 400 naming the part that is wrong
            specs.append(spec)
            others.append(raw)
        elif kind == code_interpreter.TYPE:
            if no_code is not None:
                raise InvalidParam(
                    f"Tool type 'code_interpreter' is not supported here: {no_code}.",
                    param=f"{param}.type",
                    code="unsupported_tool",
                )
            if code is not None:
                raise InvalidParam("Only one code_interpreter tool per request.", param=f"{param}.type")
            spec, code = code_interpreter.declare(raw, param)
            specs.append(spec)
            others.append(raw)
        elif kind == "mcp":
            echo, declared = declare(raw, index)
            if any(server.label == declared.label for server in servers):
                raise InvalidParam(f"Duplicate server_label '{declared.label}'.", param=f"{param}.server_label")
            servers.append(declared)
            others.append(echo)
        else:
            raise unsupported(kind, param)
    check_unique([*specs, *deferred])
    found = ToolSet(
        grammars=tuple(grammars),
        echo=functions + others,
        specs=tuple(specs),
        mcp=tuple(servers),
        dropped=tuple(dropped),
        deferred=tuple(deferred),
        file_search=searches,
        code=code,
        shell=shell,
    )
    if (deferred or any(server.deferred for server in servers)) and found.search is None:
        raise InvalidParam(
            "Tools marked defer_loading need a tool_search tool to load them.", param="tools", code="invalid_value"
        )
    return found


def runs_code(tools: Iterable[Any]) -> bool:
    """Whether a request's tools run code in containers: a `code_interpreter`, a hosted `shell`."""
    return any(
        isinstance(tool, dict) and (tool.get("type") == code_interpreter.TYPE or hosted_shell.hosted(tool))
        for tool in tools
    )


def unsupported(kind: str, param: str) -> InvalidParam:
    """The refusal of a tool type this server does not run, naming `{param}.type` (a tool or a `tool_choice`)."""
    why = (
        "it is a tool OpenAI runs on its own servers, and this server does not run it"
        if _hosted(kind)
        else "this server does not know it"
    )
    return InvalidParam(f"Tool type '{kind}' is not supported: {why}.", param=f"{param}.type", code="unsupported_tool")


def _hosted(kind: str) -> bool:
    return kind in HOSTED_TYPES or kind.startswith("web_search")


def _not_run(kind: object, tools: ToolSet) -> bool:
    """Whether a `tool_choice` names a type this server does not run: one `drop_tool_types` left out of this
    request, or any hosted type. Dropping spares a client that always sends the tool; a request that requires it
    needs what the server cannot do, so it is refused by name as the tool itself would be."""
    return isinstance(kind, str) and (kind in tools.dropped or _hosted(kind))


def check_unique(specs: list[ToolSpec] | tuple[ToolSpec, ...]) -> None:
    """Two tools the model would call by the same name are refused (a namespace's `ns.x` is not a top-level `x`)."""
    seen: set[str] = set()
    for spec in specs:
        if spec.prompt_name in seen:
            raise InvalidParam(f"Duplicate tool name '{spec.name}'.", param="tools")
        seen.add(spec.prompt_name)


class ToolChoice(msgspec.Struct, frozen=True):
    echo: str | dict[str, Any]
    tools: ToolSet  # the tools the model may call
    mode: str  # "auto" | "none" | "required"
    forced: str | None = None  # the name the model sees (`ToolSpec.prompt_name`) of a tool it must call


def resolve_tool_choice(choice: str | dict[str, Any] | None, tools: ToolSet) -> ToolChoice:
    if choice is None:
        return ToolChoice("auto", tools, "auto")
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise InvalidParam("tool_choice must be 'auto', 'none', 'required' or an object.", param="tool_choice")
        if choice == "required" and not tools.specs:
            raise InvalidParam("tool_choice 'required' needs at least one tool.", param="tool_choice")
        return ToolChoice(choice, tools, choice)
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name, namespace = choice.get("name"), choice.get("namespace")
        spec = tools.find(name, namespace if isinstance(namespace, str) else None) if isinstance(name, str) else None
        if spec is None:
            raise InvalidParam(f"Tool '{name}' named in tool_choice is not in tools.", param="tool_choice.name")
        return ToolChoice(choice, tools, "required", spec.prompt_name)
    if kind in BY_TYPE:  # `{"type": "shell"}`, `{"type": "apply_patch"}`, …: that typed tool (§1.11)
        spec = next((spec for spec in tools.specs if _same_kind(BY_TYPE[kind].kind, spec.kind)), None)
        if spec is None:
            raise InvalidParam(f"tool_choice '{kind}' needs a '{kind}' tool in tools.", param="tool_choice.type")
        return ToolChoice(choice, tools, "required", spec.prompt_name)
    if kind in (file_search.TYPE, code_interpreter.TYPE):  # the model searches or runs code first (ToolChoiceTypes)
        spec = next((spec for spec in tools.specs if spec.kind == kind), None)
        if spec is None:
            raise InvalidParam(f"tool_choice '{kind}' needs a '{kind}' tool in tools.", param="tool_choice.type")
        return ToolChoice(choice, tools, "required", spec.prompt_name)
    if kind == "mcp":  # one MCP server's tools, or one of them (ToolChoiceMcp)
        label, name = choice.get("server_label"), choice.get("name")
        offered = [spec for spec in tools.specs if spec.kind == "mcp" and spec.namespace == label]
        if name is not None:
            offered = [spec for spec in offered if spec.name == name]
        if not offered:
            raise InvalidParam(f"No offered MCP tool matches tool_choice ('{label}').", param="tool_choice")
        # The model may call that server's tools only: a `name` then names one tool.
        forced = offered[0].prompt_name if name is not None else None
        return ToolChoice(choice, ToolSet(echo=tools.echo, specs=tuple(offered)), "required", forced)
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        allowed = choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list):
            raise InvalidParam("allowed_tools needs mode 'auto'|'required' and a tools list.", param="tool_choice")
        kept = tuple(spec for spec in tools.specs if any(_names(entry, spec) for entry in allowed))
        if mode == "required" and not kept:
            raise _required_not_run(allowed, tools) or InvalidParam(
                "allowed_tools names no declared tool.", param="tool_choice.tools"
            )
        return ToolChoice(choice, ToolSet(echo=tools.echo, specs=kept), mode)
    if _not_run(kind, tools):
        raise unsupported(str(kind), "tool_choice")
    raise InvalidParam(f"Unsupported tool_choice type '{kind}'.", param="tool_choice.type")


def _required_not_run(allowed: list[Any], tools: ToolSet) -> InvalidParam | None:
    """`allowed_tools` in `required` mode that allows no offered tool: the refusal of the first type it names that
    this server does not run, if it names one (it asked for that tool); else None."""
    for index, entry in enumerate(allowed):
        kind = entry.get("type") if isinstance(entry, dict) else None
        if _not_run(kind, tools):
            return unsupported(str(kind), f"tool_choice.tools[{index}]")
    return None


def _same_kind(declared: str, kind: str) -> bool:
    """A typed tool's kind; a tool search is one whichever side runs it, and so is a shell."""
    return (
        declared == kind
        or (declared in SEARCH_KINDS and kind in SEARCH_KINDS)
        or (declared == hosted_shell.TYPE and kind == hosted_shell.KIND)
    )


def _names(entry: object, spec: ToolSpec) -> bool:
    """Whether an `allowed_tools` entry names `spec`: by type for a typed tool (`{"type": "shell"}`), by name and
    namespace (or the `namespace.name` the model sees) for the rest, by server label for an MCP server's tools."""
    if not isinstance(entry, dict):
        return False
    kind = entry.get("type")
    if kind in BY_TYPE:
        return _same_kind(BY_TYPE[kind].kind, spec.kind)
    if kind in (file_search.TYPE, code_interpreter.TYPE):
        return spec.kind == kind
    if kind == "mcp":
        return (
            spec.kind == "mcp"
            and spec.namespace == entry.get("server_label")
            and entry.get("name") in (None, spec.name)
        )
    name, namespace = entry.get("name"), entry.get("namespace")
    return (name == spec.name and namespace == spec.namespace) or (namespace is None and name == spec.prompt_name)


def with_actions(tools: ToolSet, enabled: bool, may_spawn: bool) -> ToolSet:
    """The set with the multi-agent actions offered (a `multi_agent.enabled` response) or not: a chain's cached set
    serves a continuation with or without them (tools/multi_agent.py)."""
    has = any(spec.kind == multi_agent.KIND for spec in tools.specs)
    if has == enabled:
        return tools
    if enabled:
        return msgspec.structs.replace(tools, specs=(*tools.specs, *multi_agent.offered(may_spawn)))
    return msgspec.structs.replace(tools, specs=tuple(spec for spec in tools.specs if spec.kind != multi_agent.KIND))
