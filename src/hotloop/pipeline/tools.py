"""Tool definitions and `tool_choice` (protocol.md §1.4): what is offered to the model and what is echoed."""

from __future__ import annotations

from typing import Any

import msgspec

from hotloop.chat.specs import ToolSpec
from hotloop.errors import InvalidParam
from hotloop.pipeline.mcp.declare import Declared, declare
from hotloop.wire.items import McpListTools

# Accepted and never offered to the model (Codex always sends some of these); `mcp` tools the server runs itself.
HOSTED_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "file_search",
        "code_interpreter",
        "image_generation",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
        "computer_use_preview",
        "computer",
    }
)


class ToolSet(msgspec.Struct, frozen=True):
    """The resolved tools of a request: echoed shape, offered specs, and names the model may call.

    With MCP servers (`mcp`), the specs include their listed tools once they are offered (pipeline/mcp/listing.py),
    and the set, cached on the chain, keeps the lists they came from: a continuation lists nothing again."""

    echo: list[Any]
    specs: tuple[ToolSpec, ...]
    mcp: tuple[Declared, ...] = ()
    listed: tuple[McpListTools, ...] = ()  # the lists behind the MCP specs (empty until offered)
    approvals: frozenset[tuple[str, str]] = frozenset()  # (server label, tool) calls that wait for approval

    def find(self, name: str) -> ToolSpec | None:
        for spec in self.specs:
            if spec.name == name:
                return spec
        return None


def _function(raw: dict[str, Any], param: str, namespace: str | None = None) -> tuple[dict[str, Any], ToolSpec]:
    if isinstance(raw.get("function"), dict):  # Chat Completions shape
        raw = {"type": "function", **raw["function"]}
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParam("Each function tool needs a string 'name'.", param=f"{param}.name", code="invalid_type")
    parameters = raw.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidParam(
            "'parameters' must be a JSON schema object.", param=f"{param}.parameters", code="invalid_type"
        )
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidParam("'description' must be a string.", param=f"{param}.description", code="invalid_type")
    strict = raw.get("strict")
    echo = {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": strict,
    }
    return echo, ToolSpec(name=name, description=description, parameters=parameters, namespace=namespace)


def _custom(raw: dict[str, Any], param: str, namespace: str | None = None) -> ToolSpec:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParam("Each custom tool needs a string 'name'.", param=f"{param}.name", code="invalid_type")
    description = raw.get("description")
    return ToolSpec(
        name=name,
        kind="custom",
        description=description if isinstance(description, str) else None,
        namespace=namespace,
    )


def _namespace(raw: dict[str, Any], param: str) -> list[ToolSpec]:
    name = raw.get("name")
    members = raw.get("tools")
    if not isinstance(name, str) or not isinstance(members, list):
        raise InvalidParam("A namespace tool needs 'name' and a 'tools' list.", param=param, code="invalid_type")
    specs: list[ToolSpec] = []
    for index, member in enumerate(members):
        where = f"{param}.tools[{index}]"
        if not isinstance(member, dict):
            raise InvalidParam("Each namespace member must be an object.", param=where, code="invalid_type")
        if member.get("type") == "custom":
            specs.append(_custom(member, where, name))
        else:
            specs.append(_function(member, where, name)[1])
    return specs


def resolve_tools(tools: list[dict[str, Any]] | None) -> ToolSet:
    """Validate the `tools` array; function tools are echoed first, then namespace and custom tools as sent."""
    functions: list[Any] = []
    others: list[Any] = []
    specs: list[ToolSpec] = []
    servers: list[Declared] = []
    for index, raw in enumerate(tools or ()):
        param = f"tools[{index}]"
        kind = raw.get("type")
        if kind == "function":
            echo, spec = _function(raw, param)
            functions.append(echo)
            specs.append(spec)
        elif kind == "custom":
            specs.append(_custom(raw, param))
            others.append(raw)
        elif kind == "namespace":
            specs.extend(_namespace(raw, param))
            others.append(raw)
        elif kind == "mcp":
            echo, declared = declare(raw, index)
            if any(server.label == declared.label for server in servers):
                raise InvalidParam(f"Duplicate server_label '{declared.label}'.", param=f"{param}.server_label")
            servers.append(declared)
            others.append(echo)
        elif not isinstance(kind, str):
            raise InvalidParam("Each tool needs a string 'type'.", param=f"{param}.type", code="invalid_type")
        elif kind not in HOSTED_TOOL_TYPES and not kind.startswith(("web_search", "computer")):
            raise InvalidParam(f"Unsupported tool type '{kind}'.", param=f"{param}.type")
    check_unique(specs)
    return ToolSet(echo=functions + others, specs=tuple(specs), mcp=tuple(servers))


def check_unique(specs: list[ToolSpec] | tuple[ToolSpec, ...]) -> None:
    seen: set[tuple[str | None, str]] = set()
    for spec in specs:
        if (spec.namespace, spec.name) in seen:
            raise InvalidParam(f"Duplicate tool name '{spec.name}'.", param="tools")
        seen.add((spec.namespace, spec.name))


class ToolChoice(msgspec.Struct, frozen=True):
    echo: str | dict[str, Any]
    tools: ToolSet  # the tools the model may call
    mode: str  # "auto" | "none" | "required"
    forced: str | None = None  # a tool the model must call


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
        name = choice.get("name")
        if not isinstance(name, str) or tools.find(name) is None:
            raise InvalidParam(f"Tool '{name}' named in tool_choice is not in tools.", param="tool_choice.name")
        return ToolChoice(choice, tools, "required", name)
    if kind == "mcp":  # one MCP server's tools, or one of them (ToolChoiceMcp)
        label, name = choice.get("server_label"), choice.get("name")
        offered = [spec for spec in tools.specs if spec.kind == "mcp" and spec.namespace == label]
        if name is not None:
            offered = [spec for spec in offered if spec.name == name]
        if not offered:
            raise InvalidParam(f"No offered MCP tool matches tool_choice ('{label}').", param="tool_choice")
        # The model may call that server's tools only: a bare `name` then names one tool.
        return ToolChoice(choice, ToolSet(echo=tools.echo, specs=tuple(offered)), "required", name)
    if kind == "allowed_tools":
        mode = choice.get("mode", "auto")
        allowed = choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list):
            raise InvalidParam("allowed_tools needs mode 'auto'|'required' and a tools list.", param="tool_choice")
        names = {entry.get("name") for entry in allowed if isinstance(entry, dict)}
        kept = tuple(spec for spec in tools.specs if spec.name in names)
        if mode == "required" and not kept:
            raise InvalidParam("allowed_tools names no declared tool.", param="tool_choice.tools")
        return ToolChoice(choice, ToolSet(echo=tools.echo, specs=kept), mode)
    raise InvalidParam(f"Unsupported tool_choice type '{kind}'.", param="tool_choice.type")
