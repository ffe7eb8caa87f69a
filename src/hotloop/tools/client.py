"""What a typed tool the client runs is (protocol.md §1.11): a kind offered to the model as one function with a
fixed schema, whose call the model writes as that function's arguments and hotloop hands out as the kind's own
item; the client's answer comes back as the kind's output item. The chat formats, the call parsers and the engines
never see the kind: `lower` turns its items into the function call and output every one of them renders."""

from __future__ import annotations

import json
import random
from typing import Any, ClassVar, cast

from hotloop.errors import InvalidParam
from hotloop.tools.spec import ToolSpec
from hotloop.wire.items import FunctionCall, FunctionCallOutput, InputPart
from hotloop.wire.tool_items import TypedCallItem, TypedOutputItem


class ClientTool:
    """One kind: its `tools[i].type` names, its items, its function as the model sees it; subclasses parse."""

    types: ClassVar[tuple[str, ...]]  # the `tools[i].type` values that declare it (a preview name beside one)
    kind: ClassVar[str]  # its ToolSpec.kind, and the function's name in the prompt (`name`)
    call: ClassVar[type[Any]]
    output: ClassVar[type[Any]]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]

    @property
    def name(self) -> str:
        return self.kind

    def declare(self, raw: dict[str, Any], param: str) -> ToolSpec:
        """The spec offered to the model; raises `InvalidParam` naming `param`'s field for what hotloop cannot
        honour. The tool itself is echoed as sent."""
        return ToolSpec(self.kind, self.kind, self.describe(raw), self.parameters)

    def describe(self, raw: dict[str, Any]) -> str:
        return self.description

    def build(self, call_id: str, arguments: str, complete: bool) -> TypedCallItem:
        """The call item from the arguments the model wrote; `complete` is false when generation stopped inside
        them. Arguments that do not make an action give an `incomplete` item: handed out, never as a valid call."""
        raise NotImplementedError

    def call_arguments(self, item: TypedCallItem) -> dict[str, Any]:
        """A call's arguments as the model wrote them (the inverse of `build`, for rendering it back)."""
        raise NotImplementedError

    def output_content(self, item: TypedOutputItem) -> str | list[InputPart]:
        """What the model reads as the call's result."""
        raise NotImplementedError

    def call_key(self, item: TypedCallItem) -> str:
        """The call id its output answers."""
        return str(item.call_id)

    def answers(self, item: TypedOutputItem) -> str:
        """The call id an output answers."""
        return str(item.call_id)

    def sample(self, number: int, rng: random.Random) -> dict[str, Any]:
        """hotloop-sim's arguments for its `number`th call of a conversation: a well-formed, harmless action."""
        raise NotImplementedError

    def lower(self, item: TypedCallItem | TypedOutputItem) -> FunctionCall | FunctionCallOutput:
        """The item as the function call or output every chat format renders (chat/hosted.py)."""
        if isinstance(item, self.call):
            # As json.dumps writes them by default, as most models (and hotloop-sim) do: the replayed call then
            # tokenizes as the model wrote it, and an engine's prefix cache keeps it.
            arguments = json.dumps(self.call_arguments(item))
            return FunctionCall(call_id=self.call_key(item), name=self.name, arguments=arguments, id=item.id)
        answer = cast(TypedOutputItem, item)
        return FunctionCallOutput(call_id=self.answers(answer), output=self.output_content(answer), id=answer.id)


def parse_arguments(arguments: str) -> dict[str, Any] | None:
    """The model's arguments as an object, or None."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def strings(value: Any) -> list[str] | None:
    """A string or a list of strings as a list; anything else None."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(entry, str) for entry in value):
        return list(value)
    return None


def refuse_field(raw: dict[str, Any], param: str, field: str, allowed: tuple[Any, ...]) -> None:
    """400 naming `param.field` when the tool asks for what hotloop does not have."""
    value = raw.get(field)
    if value is not None and value not in allowed:
        raise InvalidParam(
            f"'{field}' {json.dumps(value)[:80]} is not supported: this server offers the tool to the model and "
            "the client runs it.",
            param=f"{param}.{field}",
            code="unsupported_tool",
        )
