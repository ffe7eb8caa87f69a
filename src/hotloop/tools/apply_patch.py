"""`apply_patch` (the Agents SDK's ApplyPatchTool; protocol.md §1.11): one file created, updated or deleted by the
client, the change written as a V4A diff."""

from __future__ import annotations

import random
from typing import Any, ClassVar, Literal

from hotloop.ids import new_id
from hotloop.tools.client import ClientTool, parse_arguments
from hotloop.wire.items import InputPart
from hotloop.wire.tool_items import (
    ApplyPatchCall,
    ApplyPatchCallOutput,
    PatchOperation,
    TypedCallItem,
    TypedOutputItem,
)

OPERATIONS = ("create_file", "update_file", "delete_file")


class ApplyPatch(ClientTool):
    types = ("apply_patch",)
    kind = "apply_patch"
    call = ApplyPatchCall
    output = ApplyPatchCallOutput
    description = (
        "Create, update or delete one file in the user's workspace. `type` is create_file, update_file or "
        "delete_file; `path` is relative to the workspace; `diff` (not for delete_file) is a V4A diff: for a new "
        "file every line starts with '+'; for an update, '@@' hunks of ' ' context, '-' removed and '+' added lines."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(OPERATIONS)},
            "path": {"type": "string"},
            "diff": {"type": "string"},
        },
        "required": ["type", "path"],
    }

    def build(self, call_id: str, arguments: str, complete: bool) -> TypedCallItem:
        parsed = parse_arguments(arguments) or {}
        if isinstance(parsed.get("operation"), dict):  # the item's own shape, nested
            parsed = parsed["operation"]
        kind, path, diff = parsed.get("type"), parsed.get("path"), parsed.get("diff")
        valid = kind in OPERATIONS and isinstance(path, str) and bool(path)
        if kind != "delete_file" and not isinstance(diff, str):
            valid = False
        operation = PatchOperation(
            type=kind if kind in OPERATIONS else "update_file",
            path=path if isinstance(path, str) else "",
            diff=None if kind == "delete_file" else diff if isinstance(diff, str) else "",
        )
        # The item has no `incomplete` status (openai-python): a call cut off or malformed stays `in_progress`.
        status: Literal["in_progress", "completed"] = "completed" if complete and valid else "in_progress"
        return ApplyPatchCall(call_id=call_id, operation=operation, id=new_id("apc"), status=status)

    def call_arguments(self, item: TypedCallItem) -> dict[str, Any]:
        assert isinstance(item, ApplyPatchCall)
        operation = item.operation
        out: dict[str, Any] = {"type": operation.type, "path": operation.path}
        if operation.diff is not None:
            out["diff"] = operation.diff
        return out

    def output_content(self, item: TypedOutputItem) -> str | list[InputPart]:
        assert isinstance(item, ApplyPatchCallOutput)
        return f"{item.status}: {item.output}" if item.output else item.status

    def sample(self, number: int, rng: random.Random) -> dict[str, Any]:
        return {"type": "create_file", "path": f"hotloop_sim_{number}.txt", "diff": f"+hotloop-sim-{number}\n"}


APPLY_PATCH = ApplyPatch()
