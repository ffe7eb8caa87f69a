"""N, the normalization of input items (protocol.md §1.3, §4): raw JSON items in, typed context items out.

A replayed item must render like the original, so ids and statuses are kept only as labels: a missing message
`type` reads as `message`, string content as one text part, a missing `annotations` as `[]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.errors import InvalidParam, MissingParam
from hotloop.ids import new_id
from hotloop.wire.items import (
    KNOWN_ITEM_TYPES,
    ContextItem,
    InputText,
    ItemReference,
    Message,
    OtherItem,
)
from hotloop.wire.request import decode_item, validation_error

_ID_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
    "compaction": "cmp",
    # MCP items (protocol.md §1.10): only an approval response may come without an id (openai-python types the
    # others' `id` as required, so they are refused without one); none has a call_id to pair.
    "mcp_list_tools": "mcpl",
    "mcp_call": "mcp",
    "mcp_approval_request": "mcpr",
    "mcp_approval_response": "mcpa",
    # The typed client tools' items (protocol.md §1.11). A `local_shell_call_output` gets none: openai-python's
    # `id` is the call's, which it answers when it has no `call_id`.
    "shell_call": "sh",
    "shell_call_output": "sho",
    "local_shell_call": "lsh",
    "apply_patch_call": "apc",
    "apply_patch_call_output": "apco",
    "computer_call": "cu",
    "computer_call_output": "cuo",
    "tool_search_call": "ts",
    "tool_search_output": "tso",
    "additional_tools": "adt",
    # A search the server ran (tools/file_search.py); openai-python types its `id` as required.
    "file_search_call": "fs",
    "code_interpreter_call": "ci",  # code the server ran (tools/code_interpreter.py)
}

_PREFIX_OF: dict[type[Any], str] = {KNOWN_ITEM_TYPES[kind]: prefix for kind, prefix in _ID_PREFIX.items()}


def _message_content(raw: dict[str, Any], param: str) -> dict[str, Any]:
    content = raw.get("content")
    role = raw.get("role")
    text_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        return {**raw, "content": [{"type": text_type, "text": content}]}
    if isinstance(content, list):
        # `text` is the Open Responses name for plain text parts, and some clients replay assistant text as
        # `input_text`: both are read as the role's text type.
        renamed = ("text", "input_text") if role == "assistant" else ("text",)
        parts = [
            {**part, "type": text_type} if isinstance(part, dict) and part.get("type") in renamed else part
            for part in content
        ]
        return {**raw, "content": parts}
    if content is None:
        raise MissingParam("Each message needs 'content'.", param=f"{param}.content")
    return raw


def normalize_item(raw: Any, param: str, *, ids: bool = True) -> ContextItem | ItemReference:
    """One input item (raw JSON or decoded) → its typed form; raises `InvalidParam` naming `input[i]…`.
    `ids=False` leaves an item without an id as it is (`assign_ids` gives it one)."""
    raw = decode_item(raw)
    if not isinstance(raw, dict):
        raise InvalidParam("Each input item must be an object.", param=param, code="invalid_type")
    kind = raw.get("type")
    if kind is None:
        kind = "message" if "role" in raw else "item_reference" if "id" in raw else None
        if kind is None:
            raise MissingParam("Each input item needs a 'type' (or a 'role').", param=f"{param}.type")
    if not isinstance(kind, str):
        raise InvalidParam("'type' must be a string.", param=f"{param}.type", code="invalid_type")
    cls = KNOWN_ITEM_TYPES.get(kind)
    if kind == "compaction_trigger":  # the last item's is taken out before (pipeline/compaction.py `triggered`)
        raise InvalidParam("A compaction_trigger item must be the last input item.", param=param)
    if cls is None:
        return OtherItem(raw=raw)
    if cls is Message:
        raw = _message_content(raw, param)
    try:
        item = msgspec.convert({**raw, "type": kind}, cls)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, param) from None
    if isinstance(item, ItemReference):
        return item  # expanded by the resolve stage, which can reach the store
    # Stored items carry an id and a status (input_items lists them); neither changes how an item renders.
    if hasattr(item, "status") and item.status is None:
        item = msgspec.structs.replace(item, status="completed")
    return _with_id(item) if ids else item


def _with_id(item: Any) -> Any:
    prefix = _PREFIX_OF.get(type(item))
    if prefix is None or getattr(item, "id", None) is not None:
        return item
    return msgspec.structs.replace(item, id=new_id(prefix))


def assign_ids(items: Sequence[ContextItem | ItemReference]) -> list[ContextItem | ItemReference]:
    """Each item the client sent without an id gets a new one (every request's input items have their own)."""
    return [_with_id(item) for item in items]


def reissue_ids(items: Sequence[ContextItem], positions: Sequence[int]) -> list[ContextItem]:
    """A copy of `items` with a new id at each of `positions` (ids hotloop generated for an earlier request)."""
    out = list(items)
    for index in positions:
        item = out[index]
        out[index] = msgspec.structs.replace(item, id=new_id(_PREFIX_OF[type(item)]))
    return out


def normalize_input(
    value: str | Sequence[Any] | None, start: int = 0, *, ids: bool = True
) -> list[ContextItem | ItemReference]:
    """The request's `input` (from its item `start` on): a string is one user message; `None` and `[]` are no
    items. `ids=False`: see `normalize_item`."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Message(role="user", content=[InputText(text=value)], id=new_id("msg"))]
    return [normalize_item(value[index], f"input[{index}]", ids=ids) for index in range(start, len(value))]
