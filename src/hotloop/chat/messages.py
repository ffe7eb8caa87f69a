"""Items → template messages: the system message (instructions and the offered tools), each context item's role
and text, consecutive assistant turns merged.

Tool calls use the `<tool_call>` JSON convention in the prompt and in the model's answers (docs/models.md).
Items without a slot in the template (web_search_call, …) are shown as text. Reasoning goes back only where the
caller says from which item on (chat/reasoning.py), as the `<think>` block the model wrote before its answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from hotloop import sealing
from hotloop.chat.format import Chat
from hotloop.chat.media import describe_file, describe_image
from hotloop.chat.reasoning import THINK_CLOSE, think_block
from hotloop.chat.specs import ToolSpec, prompt_name
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputFile,
    InputImage,
    InputText,
    Message,
    OtherItem,
    OutputText,
    Reasoning,
    Refusal,
)

TOOL_PROMPT = (
    "You can call tools. These are the tools, one JSON object per line:\n"
    "<tools>\n{tools}\n</tools>\n"
    "\n"
    "To call a tool, reply with only a <tool_call> block and nothing else, for example:\n"
    "<tool_call>\n{example}\n</tool_call>\n"
    'Put the tool\'s exact name in "name"{payload}. '
    "For several calls, write one block per call. "
    "The tool's result comes back in a message from the tool. "
    "If no tool is needed, reply to the user in plain text."
)


def tool_prompt(specs: Iterable[ToolSpec]) -> str:
    """The system-prompt section offering the tools, with an example call to the first one (pure and stable)."""
    entries: list[dict[str, Any]] = []
    specs = list(specs)
    for spec in specs:
        entry: dict[str, Any] = {"name": spec.prompt_name}
        if spec.description:
            entry["description"] = spec.description
        if spec.freeform:
            entry["input"] = "freeform text"
        else:
            entry["parameters"] = spec.parameters or {"type": "object", "properties": {}}
        entries.append(entry)
    first = specs[0]
    if first.freeform:
        example = json.dumps({"name": first.prompt_name, "input": "<text>"})
    else:
        properties = (first.parameters or {}).get("properties")
        names = list(properties)[:2] if isinstance(properties, dict) else []
        example = json.dumps({"name": first.prompt_name, "arguments": {name: f"<{name}>" for name in names}})
    kinds = {spec.kind for spec in specs}
    payload = []
    if kinds - {"custom"}:  # functions, and MCP tools (called as functions)
        payload.append(' and its parameters as a JSON object in "arguments"')
    if "custom" in kinds:
        payload.append(' and a freeform tool\'s text as a string in "input"')
    return TOOL_PROMPT.format(
        tools="\n".join(json.dumps(entry) for entry in entries), example=example, payload=",".join(payload)
    )


def parts_text(parts: Iterable[Any], param: str) -> str:
    """Text, refusal, image and file parts as the prompt shows them, one per line."""
    out: list[str] = []
    for index, part in enumerate(parts):
        where = f"{param}.content[{index}]"
        if isinstance(part, InputText | OutputText):
            out.append(part.text)
        elif isinstance(part, Refusal):
            out.append(part.refusal)
        elif isinstance(part, InputImage):
            out.append(describe_image(part, where))
        elif isinstance(part, InputFile):
            out.append(describe_file(part, where))
    return "\n".join(out)


def _call_text(name: str, payload: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, **payload}) + "\n</tool_call>"


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _item_message(item: ContextItem, param: str, think: bool) -> tuple[str, str] | None:
    if isinstance(item, Message):
        role = "system" if item.role == "developer" else item.role
        return role, parts_text(item.content, param)
    if isinstance(item, FunctionCall):
        return "assistant", _call_text(
            prompt_name(item.name, item.namespace), {"arguments": _arguments(item.arguments)}
        )
    if isinstance(item, CustomToolCall):
        return "assistant", _call_text(prompt_name(item.name, item.namespace), {"input": item.input})
    if isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        output = item.output if isinstance(item.output, str) else parts_text(item.output, param)
        return "tool", output
    if isinstance(item, Reasoning):
        block = think_block(item) if think else None
        return ("assistant", block) if block is not None else None
    if isinstance(item, Compaction):
        return "user", compaction_text(item)
    if isinstance(item, OtherItem):
        return "user", other_item_text(item)
    return None


def compaction_text(item: Compaction) -> str:
    """A compaction as a user message: a marker, then the summary sealed in it (also for chat APIs:
    backends/upstream/chat_messages.py)."""
    summary = sealing.peek(item.encrypted_content)
    return "[earlier conversation, compacted]" + ("\n" + summary if summary else "")


def other_item_text(item: OtherItem) -> str:
    """An item without a slot in the template (web_search_call, …), shown as its JSON."""
    return f"[{item.raw.get('type')}] {json.dumps(item.raw)}"


def system_message(instructions: str | None, tools: Iterable[ToolSpec]) -> Chat | None:
    """The system message: instructions, then the tool list; None when there is neither."""
    tools = tuple(tools)
    parts = [text for text in (instructions, tool_prompt(tools) if tools else None) if text]
    return {"role": "system", "content": "\n\n".join(parts)} if parts else None


def item_messages(
    items: Iterable[ContextItem], after: Chat | None = None, think_from: int | None = None
) -> tuple[Chat | None, list[Chat]]:
    """The template messages of `items`, consecutive assistant turns merged; reasoning items from index
    `think_from` on become `<think>` blocks (None: no reasoning is rendered).

    `after` is the message the items follow; when the first of them merges into it, the merged message comes
    back first and `after` is replaced (the incremental renderer then re-renders it). Returns (the replaced
    message or None, the new messages).
    """
    rendered = (
        _item_message(item, f"input[{index}]", think_from is not None and index >= think_from)
        for index, item in enumerate(items)
    )
    return assemble(rendered, after, _joint)


def _joint(before: str) -> str:
    # What a reasoning model writes: its answer two newlines after `</think>` (what the parser drops).
    return "\n\n" if before.endswith(THINK_CLOSE) else "\n"


def assemble(
    rendered: Iterable[tuple[str, str] | None], after: Chat | None, joint: Callable[[str], str]
) -> tuple[Chat | None, list[Chat]]:
    """Template messages from each item's (role, content) (None: the item is not shown): consecutive assistant
    contents are one message, joined by `joint(the content so far)`; `after` as `item_messages` says."""
    messages: list[Chat] = [after] if after is not None else []
    for entry in rendered:
        if entry is None:
            continue
        role, content = entry
        if role == "assistant" and messages and messages[-1]["role"] == "assistant":
            before = messages[-1]["content"]
            messages[-1] = {"role": "assistant", "content": before + joint(before) + content}
        else:
            messages.append({"role": role, "content": content})
    if after is None:
        return None, messages
    if messages[0] is after:
        return None, messages[1:]
    return after, messages


def chat_messages(
    instructions: str | None, tools: Iterable[ToolSpec], items: Iterable[ContextItem], think_from: int | None = None
) -> list[Chat]:
    """The template's `messages`: the system message first, then the items' messages."""
    system = system_message(instructions, tools)
    return ([system] if system else []) + item_messages(items, think_from=think_from)[1]
