"""`computer` and `computer_use_preview` (the Agents SDK's ComputerTool; protocol.md §1.11): one action on the
client's screen, answered with a screenshot the model then sees."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from hotloop.ids import new_id
from hotloop.tools.client import ClientTool, parse_arguments
from hotloop.wire.items import InputImage, InputPart, InputText
from hotloop.wire.tool_items import ComputerCall, ComputerCallOutput, ItemStatus, TypedCallItem, TypedOutputItem

# Each action and its fields (openai-python's `computer_action.py`).
ACTIONS: dict[str, tuple[str, ...]] = {
    "click": ("button", "x", "y"),
    "double_click": ("x", "y"),
    "drag": ("path",),
    "keypress": ("keys",),
    "move": ("x", "y"),
    "screenshot": (),
    "scroll": ("x", "y", "scroll_x", "scroll_y"),
    "type": ("text",),
    "wait": (),
}
_BUTTONS = ("left", "right", "wheel", "back", "forward")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _point(value: Any) -> bool:
    return isinstance(value, dict) and _int(value.get("x")) and _int(value.get("y"))


# Each field's check and the value it takes when missing or malformed; every field is required by openai-python,
# so the item always carries one. Only a scroll amount (a scroll along one axis) and a click's button are optional
# to the model: a missing one is no error.
_FIELDS: dict[str, tuple[Any, Any]] = {
    "x": (_int, 0),
    "y": (_int, 0),
    "scroll_x": (_int, 0),
    "scroll_y": (_int, 0),
    "button": (lambda value: value in _BUTTONS, "left"),
    "keys": (lambda value: isinstance(value, list) and all(isinstance(key, str) for key in value), []),
    "text": (lambda value: isinstance(value, str), ""),
    "path": (lambda value: isinstance(value, list) and bool(value) and all(map(_point, value)), []),
}
_OPTIONAL = frozenset({"scroll_x", "scroll_y", "button"})


class Computer(ClientTool):
    types = ("computer", "computer_use_preview")
    kind = "computer"
    call = ComputerCall
    output = ComputerCallOutput
    description = (
        "Act on the user's screen: `type` is one of click, double_click, drag, keypress, move, screenshot, scroll, "
        "type, wait, with its fields (x and y in pixels; button left/right/wheel; keys; text; scroll_x/scroll_y; "
        "path as [{x, y}, ...]). Each call answers with a screenshot."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(ACTIONS)},
            "x": {"type": "integer"},
            "y": {"type": "integer"},
            "button": {"type": "string", "enum": ["left", "right", "wheel", "back", "forward"]},
            "keys": {"type": "array", "items": {"type": "string"}},
            "text": {"type": "string"},
            "scroll_x": {"type": "integer"},
            "scroll_y": {"type": "integer"},
            "path": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["type"],
    }

    def describe(self, raw: dict[str, Any]) -> str:
        width, height, where = raw.get("display_width"), raw.get("display_height"), raw.get("environment")
        if isinstance(width, int) and isinstance(height, int):
            return f"{self.description} The display is {width}x{height}" + (f" ({where})." if where else ".")
        return self.description

    def build(self, call_id: str, arguments: str, complete: bool) -> TypedCallItem:
        parsed = parse_arguments(arguments) or {}
        if isinstance(parsed.get("action"), dict):  # the item's own shape, nested
            parsed = parsed["action"]
        kind = parsed.get("type")
        valid = kind in ACTIONS
        action: dict[str, Any] = {"type": kind if valid else "screenshot"}
        for field in ACTIONS.get(str(kind), ()):
            value = parsed.get(field)
            check, default = _FIELDS[field]
            if not check(value):
                valid = valid and value is None and field in _OPTIONAL
                value = list(default) if isinstance(default, list) else default  # never shared
            action[field] = value
        status: ItemStatus = "completed" if complete and valid else "incomplete"
        return ComputerCall(call_id=call_id, action=action, pending_safety_checks=[], id=new_id("cu"), status=status)

    def call_arguments(self, item: TypedCallItem) -> dict[str, Any]:
        assert isinstance(item, ComputerCall)
        if item.action is not None:
            return item.action
        return {"actions": item.actions or []}

    def output_content(self, item: TypedOutputItem) -> str | list[InputPart]:
        assert isinstance(item, ComputerCallOutput)
        shot = item.output
        if shot.image_url is None and shot.file_id is None:
            return "(no screenshot)"
        return [
            InputText(text="Screenshot after the action:"),
            InputImage(image_url=shot.image_url, file_id=shot.file_id),
        ]

    def sample(self, number: int, rng: random.Random) -> dict[str, Any]:
        if number % 2:
            return {"type": "screenshot"}
        return {"type": "click", "button": "left", "x": rng.randrange(8, 640), "y": rng.randrange(8, 480)}


COMPUTER = Computer()
