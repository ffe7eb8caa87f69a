"""The tools a client declares with its own schema and runs itself (protocol.md §1.4): `function` (JSON-schema
parameters, `strict`), `custom` (freeform input, an optional Lark or regex `format`), and `namespace` (a named group
of them, whose calls name it). Each is declared here as the request gives it: 400 naming the field for a bad shape;
offered to the model as a `ToolSpec` (spec.py); its calls and outputs are the plain items of wire/items.py.
"""

from __future__ import annotations

from typing import Any

from hotloop.errors import InvalidParam
from hotloop.tools.grammar import declared
from hotloop.tools.spec import ToolSpec


def declare_function(raw: dict[str, Any], param: str, namespace: str | None = None) -> tuple[dict[str, Any], ToolSpec]:
    """A function tool (the Responses shape, or Chat Completions' `{function: {...}}`): its echo and its spec."""
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
    if strict is not None and not isinstance(strict, bool):
        raise InvalidParam("'strict' must be a boolean.", param=f"{param}.strict", code="invalid_type")
    echo = {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters,
        "strict": strict,
    }
    if raw.get("defer_loading") is True:
        echo["defer_loading"] = True
    spec = ToolSpec(name=name, description=description, parameters=parameters, namespace=namespace, strict=strict)
    return echo, spec


def declare_custom(raw: dict[str, Any], param: str, namespace: str | None = None) -> ToolSpec:
    """A custom tool: freeform text, its `format` grammar checked (not compiled: pipeline/grammars.py does)."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParam("Each custom tool needs a string 'name'.", param=f"{param}.name", code="invalid_type")
    description = raw.get("description")
    return ToolSpec(
        name=name,
        kind="custom",
        description=description if isinstance(description, str) else None,
        namespace=namespace,
        grammar=declared(raw.get("format"), f"{param}.format"),
    )


def declare_namespace(raw: dict[str, Any], param: str) -> list[tuple[ToolSpec, bool, str]]:
    """The members, each with whether it is deferred (`defer_loading` applies to members, not the namespace) and
    its param."""
    name = raw.get("name")
    members = raw.get("tools")
    if not isinstance(name, str) or not isinstance(members, list):
        raise InvalidParam("A namespace tool needs 'name' and a 'tools' list.", param=param, code="invalid_type")
    specs: list[tuple[ToolSpec, bool, str]] = []
    for index, member in enumerate(members):
        where = f"{param}.tools[{index}]"
        if not isinstance(member, dict):
            raise InvalidParam("Each namespace member must be an object.", param=where, code="invalid_type")
        spec = (
            declare_custom(member, where, name)
            if member.get("type") == "custom"
            else declare_function(member, where, name)[1]
        )
        specs.append((spec, member.get("defer_loading") is True, where))
    return specs
