"""`shell` (the Agents SDK's ShellTool; protocol.md §1.11): commands the client runs in its local environment."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from hotloop.errors import InvalidParam
from hotloop.ids import new_id
from hotloop.tools.client import ClientTool, optional_int, parse_arguments, strings
from hotloop.tools.spec import ToolSpec
from hotloop.wire.items import InputPart
from hotloop.wire.tool_items import ItemStatus, ShellAction, ShellCall, ShellCallOutput, TypedCallItem, TypedOutputItem


def shell_command(number: int) -> str:
    """A harmless POSIX command line that proves it ran: it prints `hotloop-sim-<n>` (a text the command line itself
    does not contain) and writes it to `hotloop_sim_<n>.txt` in the working directory (hotloop-sim's calls)."""
    return f"printf 'hotloop-sim-%d\\n' {number} | tee hotloop_sim_{number}.txt"


class Shell(ClientTool):
    types = ("shell",)
    kind = "shell"
    call = ShellCall
    output = ShellCallOutput
    description = (
        "Run shell commands on the user's machine and read their output. `commands` are shell command lines run "
        "in order in the working directory; `timeout_ms` bounds each."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "commands": {"type": "array", "items": {"type": "string"}, "description": "Shell command lines."},
            "timeout_ms": {"type": "integer", "description": "Time limit per command, in milliseconds."},
        },
        "required": ["commands"],
    }

    def declare(self, raw: dict[str, Any], param: str) -> ToolSpec:
        """`local` or no environment: the client runs the commands (a container's: tools/hosted_shell.py)."""
        environment = raw.get("environment")
        if environment is not None and (not isinstance(environment, dict) or environment.get("type") != "local"):
            kind = environment.get("type") if isinstance(environment, dict) else environment
            raise InvalidParam(
                f"Shell environment {kind!r} is not one of 'local' (the client runs the commands), "
                "'container_auto' or 'container_reference' (the server runs them in a container).",
                param=f"{param}.environment.type" if isinstance(environment, dict) else f"{param}.environment",
                code="invalid_value",
            )
        return super().declare(raw, param)

    def describe(self, raw: dict[str, Any]) -> str:
        environment = raw.get("environment")
        skills = environment.get("skills") if isinstance(environment, dict) else None
        lines = [
            f"- {skill.get('name')}: {skill.get('description')} ({skill.get('path')})"
            for skill in skills or ()
            if isinstance(skill, dict)
        ]
        return self.description + ("\nSkills on this machine:\n" + "\n".join(lines) if lines else "")

    def build(self, call_id: str, arguments: str, complete: bool) -> TypedCallItem:
        parsed = parse_arguments(arguments) or {}
        commands = strings(parsed.get("commands"))
        if commands is None:  # a model that wrote one `command` (a line, or an argv) instead
            argv = strings(parsed.get("command"))
            commands = [" ".join(argv)] if argv else None
        action = ShellAction(commands=commands or [], timeout_ms=optional_int(parsed.get("timeout_ms")))
        status: ItemStatus = "completed" if complete and commands else "incomplete"
        return ShellCall(call_id=call_id, action=action, id=new_id("sh"), status=status)

    def call_arguments(self, item: TypedCallItem) -> dict[str, Any]:
        assert isinstance(item, ShellCall)
        out: dict[str, Any] = {"commands": item.action.commands}
        if item.action.timeout_ms is not None:
            out["timeout_ms"] = item.action.timeout_ms
        if item.action.max_output_length is not None:  # a hosted shell's model writes it (tools/hosted_shell.py)
            out["max_output_length"] = item.action.max_output_length
        return out

    def output_content(self, item: TypedOutputItem) -> str | list[InputPart]:
        assert isinstance(item, ShellCallOutput)
        blocks = []
        for entry in item.output:
            outcome = entry.outcome
            end = "timed out" if outcome.type == "timeout" else f"exit code {outcome.exit_code}"
            parts = [entry.stdout.rstrip("\n")] if entry.stdout else []
            if entry.stderr:
                parts.append("stderr:\n" + entry.stderr.rstrip("\n"))
            blocks.append("\n".join([*parts, f"({end})"]))
        return "\n\n".join(blocks)

    def sample(self, number: int, rng: random.Random) -> dict[str, Any]:
        return {"commands": [shell_command(number)]}


SHELL = Shell()
