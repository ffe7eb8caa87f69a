"""Shell-like function tools as hotloop-sim sees them: which property runs a command, and a harmless command line
with the other required arguments, so that an agent's calls really run something."""

from __future__ import annotations

import random
from typing import Any

from hotloop.backends.sim.schema_example import example_for_schema
from hotloop.chat.specs import ToolSpec
from hotloop.tools.shell import shell_command

# Properties a shell-like function tool runs: a command line (string), an argv (`command`/`cmd` as an array) or
# several command lines (`commands`), in this order of preference.
COMMAND_FIELDS = ("cmd", "command", "commands")
# Required directory properties of a shell tool get the working directory, where a random word would fail the call.
_WORKDIR_FIELDS = ("workdir", "cwd", "working_directory")


def command_field(spec: ToolSpec) -> str | None:
    """The property that makes a function tool, or an MCP server's tool, shell-like (a string or an array of strings
    named as a command)."""
    properties = (spec.parameters or {}).get("properties") if spec.kind in ("function", "mcp") else None
    if not isinstance(properties, dict):
        return None
    for name in COMMAND_FIELDS:
        schema = properties.get(name)
        if isinstance(schema, dict) and (_is_type(schema, "string") or _is_string_array(schema)):
            return name
    return None


def shell_arguments(schema: dict[str, Any], field: str, number: int, rng: random.Random) -> dict[str, Any]:
    """The command plus the other *required* properties: optional ones (a shell binary, a sandbox override, a
    login flag) are left to the tool's defaults, as a model would, since random values for them break the run."""
    properties: dict[str, Any] = schema["properties"]
    required = schema.get("required")
    names = [name for name in properties if isinstance(required, list) and name in required and name != field]
    line = shell_command(number)
    if _is_type(properties[field], "string"):
        arguments: dict[str, Any] = {field: line}
    else:
        arguments = {field: [line] if field == "commands" else ["sh", "-c", line]}
    for name in names:
        sub = properties[name]
        if isinstance(sub, dict):
            fixed = name in _WORKDIR_FIELDS and _is_type(sub, "string")
            arguments[name] = "." if fixed else example_for_schema(sub, rng, 1, schema)
    return arguments


def _is_type(schema: dict[str, Any], kind: str) -> bool:
    declared = schema.get("type")
    return declared == kind or (isinstance(declared, list) and kind in declared)


def _is_string_array(schema: dict[str, Any]) -> bool:
    items = schema.get("items")
    return _is_type(schema, "array") and isinstance(items, dict) and _is_type(items, "string")
