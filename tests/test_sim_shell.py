"""hotloop-sim's shell-like tools (docs/models.md, "What it answers"): preferred, and their commands really run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from hotloop.backends.base import GenerationRequest, ToolCallDelta, ToolCallEnd, ToolCallStart
from hotloop.backends.sim.backend import SimBackend, SimSettings
from hotloop.backends.sim.shell import command_field
from hotloop.chat.specs import ToolSpec

FAST = SimSettings(ttft_ms=0.0, tps=1_000_000.0, tool_calls=100)  # calls whatever `calls_so_far`
# Codex 0.171.0's own `exec_command` tool, as it sent it (tests/test_codex.py captured it).
CODEX_EXEC = json.loads((Path(__file__).parent / "codex" / "exec_command.json").read_text())

SHELL_SCHEMAS: dict[str, dict[str, Any]] = {
    "codex_exec_command": CODEX_EXEC["parameters"],
    # An argv array with required extras, as in `hotloop bench`'s scenario and Codex's older `shell` tool.
    "argv": {
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}},
            "workdir": {"type": "string"},
            "timeout_ms": {"type": "integer", "minimum": 1000, "maximum": 120000},
            "login": {"type": "boolean"},
        },
        "required": ["command", "workdir", "timeout_ms"],
        "additionalProperties": False,
    },
    # Several command lines (the Agents SDK's shell tool shape).
    "lines": {
        "type": "object",
        "properties": {"commands": {"type": "array", "items": {"type": "string"}}, "timeout_ms": {"type": "integer"}},
        "required": ["commands"],
    },
    "nullable_string": {"type": "object", "properties": {"command": {"type": ["string", "null"]}}},
}
PLAIN = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})


async def calls(backend: SimBackend, request: GenerationRequest) -> list[tuple[str, dict[str, Any]]]:
    """(name, parsed arguments) of each call in one response."""
    out: list[tuple[str, dict[str, Any]]] = []
    name, pieces = "", []
    async for delta in backend.generate(request):
        if isinstance(delta, ToolCallStart):
            name, pieces = delta.name, []
        elif isinstance(delta, ToolCallDelta):
            pieces.append(delta.text)
        elif isinstance(delta, ToolCallEnd):
            out.append((name, json.loads("".join(pieces))))
    return out


def run(arguments: dict[str, Any], field: str, cwd: Path) -> str:
    """Execute a call the way its tool would: a command line with a shell, an argv as it is, each line of several."""
    value = arguments[field]
    workdir = cwd / arguments.get("workdir", ".")
    if isinstance(value, str):
        argvs = [["sh", "-c", value]]
    elif field == "commands":
        argvs = [["sh", "-c", line] for line in value]
    else:
        argvs = [value]
    return "".join(subprocess.run(a, cwd=workdir, capture_output=True, text=True, check=True).stdout for a in argvs)


@pytest.mark.parametrize("name", sorted(SHELL_SCHEMAS))
async def test_a_shell_call_runs_and_leaves_its_marker(name: str, tmp_path: Path) -> None:
    schema = SHELL_SCHEMAS[name]
    spec = ToolSpec(name=name, parameters=schema)
    field = command_field(spec)
    assert field is not None
    request = GenerationRequest(prompt_tokens=list(range(50)), tools=[spec], calls_so_far=4)
    [(called, arguments)] = await calls(SimBackend(FAST), request)
    assert called == name
    jsonschema.validate(arguments, schema, cls=jsonschema.Draft202012Validator)
    # Only the command and the required properties: random optional ones (a shell binary, a sandbox override,
    # a working directory) would make the command fail.
    assert set(arguments) == {field, *schema.get("required", [])}
    assert run(arguments, field, tmp_path) == "hotloop-sim-5\n"  # the conversation's fifth call
    assert (tmp_path / "hotloop_sim_5.txt").read_text() == "hotloop-sim-5\n"


async def test_a_shell_tool_is_preferred_and_calls_are_numbered() -> None:
    shell = ToolSpec(name="exec_command", parameters=CODEX_EXEC["parameters"])
    tools = [PLAIN, ToolSpec(name="patch", kind="custom"), shell, ToolSpec(name="x", parameters={"type": "object"})]
    backend = SimBackend(SimSettings(ttft_ms=0.0, tps=1_000_000.0, tool_calls=100, parallel_calls=3))
    for seed in range(20):
        request = GenerationRequest(prompt_tokens=[seed, *range(30)], tools=tools, calls_so_far=seed)
        made = await calls(backend, request)
        assert [name for name, _ in made] == ["exec_command"] * 3
        expected = [f"printf 'hotloop-sim-%d\\n' {n} | tee hotloop_sim_{n}.txt" for n in range(seed + 1, seed + 4)]
        assert [arguments["cmd"] for _, arguments in made] == expected
    # A forced tool still wins over a shell tool.
    forced = GenerationRequest(prompt_tokens=[1], tools=tools, tool_choice="required", forced_tool="get_weather")
    assert [name for name, _ in await calls(backend, forced)] == ["get_weather"] * 3


async def test_without_a_shell_tool_the_choice_stays_random() -> None:
    tools = [PLAIN, ToolSpec(name="other", parameters={"type": "object", "properties": {"n": {"type": "integer"}}})]
    backend = SimBackend(FAST)
    chosen = set()
    for seed in range(30):
        [(name, _)] = await calls(backend, GenerationRequest(prompt_tokens=[seed, 1, 2], tools=tools))
        chosen.add(name)
    assert chosen == {"get_weather", "other"}


def test_what_counts_as_a_shell_tool() -> None:
    def spec(properties: dict[str, Any], kind: str = "function") -> ToolSpec:
        return ToolSpec(name="t", kind=kind, parameters={"type": "object", "properties": properties})  # type: ignore[arg-type]

    assert command_field(spec({"cmd": {"type": "string"}, "command": {"type": "string"}})) == "cmd"
    assert command_field(spec({"command": {"type": "array", "items": {"type": "string"}}})) == "command"
    assert command_field(spec({"command": {"type": "integer"}})) is None
    assert command_field(spec({"commands": {"type": "array", "items": {"type": "object"}}})) is None
    assert command_field(spec({"script": {"type": "string"}})) is None
    assert command_field(spec({"command": {"type": "string"}}, kind="mcp")) == "command"  # an MCP server's shell
    assert command_field(ToolSpec(name="shell", kind="custom")) is None
    assert command_field(ToolSpec(name="shell")) is None
