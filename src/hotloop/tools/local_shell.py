"""`local_shell` (the older LocalShellTool; protocol.md §1.11): one argv the client runs, its output one string."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from hotloop.ids import new_id
from hotloop.tools.client import ClientTool, optional_int, parse_arguments, strings
from hotloop.tools.shell import shell_command
from hotloop.wire.items import InputPart
from hotloop.wire.tool_items import (
    ItemStatus,
    LocalShellAction,
    LocalShellCall,
    LocalShellCallOutput,
    TypedCallItem,
    TypedOutputItem,
)


class LocalShell(ClientTool):
    types = ("local_shell",)
    kind = "local_shell"
    call = LocalShellCall
    output = LocalShellCallOutput
    description = (
        "Run a command on the user's machine and read its output. `command` is the argv (e.g. "
        '["bash", "-lc", "ls -la"]); `working_directory` and `timeout_ms` are optional.'
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "The argv to run."},
            "working_directory": {"type": "string"},
            "timeout_ms": {"type": "integer"},
        },
        "required": ["command"],
    }

    def build(self, call_id: str, arguments: str, complete: bool) -> TypedCallItem:
        parsed = parse_arguments(arguments) or {}
        command = strings(parsed.get("command"))
        if command is not None and len(command) == 1:  # one command line: run it by the shell
            command = ["bash", "-lc", command[0]]
        directory = parsed.get("working_directory")
        action = LocalShellAction(
            command=command or [],
            env={},
            type="exec",
            timeout_ms=optional_int(parsed.get("timeout_ms")),
            working_directory=directory if isinstance(directory, str) else None,
        )
        status: ItemStatus = "completed" if complete and command else "incomplete"
        return LocalShellCall(call_id=call_id, action=action, id=new_id("lsh"), status=status)

    def call_arguments(self, item: TypedCallItem) -> dict[str, Any]:
        assert isinstance(item, LocalShellCall)
        action = item.action
        out: dict[str, Any] = {"command": action.command}
        if action.working_directory is not None:
            out["working_directory"] = action.working_directory
        if action.timeout_ms is not None:
            out["timeout_ms"] = action.timeout_ms
        return out

    def output_content(self, item: TypedOutputItem) -> str | list[InputPart]:
        assert isinstance(item, LocalShellCallOutput)
        return item.output

    def answers(self, item: TypedOutputItem) -> str:
        assert isinstance(item, LocalShellCallOutput)
        return item.answers

    def sample(self, number: int, rng: random.Random) -> dict[str, Any]:
        return {"command": ["sh", "-c", shell_command(number)]}


LOCAL_SHELL = LocalShell()
