"""Items → gpt-oss's harmony format (`reasoning_parser = "harmony"` on a `tokens` upstream).

hotloop renders harmony itself, as the format's guide lays it out, rather than through the model's Jinja template:
its messages depend on one another (a tool's output names the tool its call went to; the template drops reasoning
it does not see as the current chain's), which would defeat rendering message by message. Each template message
here is one harmony message, already in harmony except for `<|start|>` and its role, and `HARMONY_TEMPLATE` only
joins them: the incremental renderer (chat/incremental.py) then tokenizes each message once, and a turn's prompt is
the previous prompt plus exactly what the model generated.

- system: the system message (the model's identity, the reasoning effort — `reasoning.effort`: low, medium or
  high —, the channels) and a developer message with `instructions` and the offered tools as the TypeScript
  namespace `functions`.
- message: `<|start|>user<|message|>…<|end|>`; an assistant message on the `final` channel; `developer` and
  `system` items as developer messages.
- reasoning (from `think_from` on, chat/reasoning.py): the `analysis` channel.
- function_call / custom_tool_call: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>`
  (a freeform tool's input as it is).
- function_call_output: `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>OUTPUT<|end|>`.
- One assistant turn's items follow one another as messages, `<|start|>assistant` before each after the first.

A final answer the model ended with `<|return|>` is replayed ending in `<|end|>`, as the format requires: the
prompt after it differs from the generated tokens by that one token.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hotloop.chat.format import Chat, ChatFormat
from hotloop.chat.hosted import as_calls
from hotloop.chat.messages import assemble, compaction_text, other_item_text, parts_text
from hotloop.chat.reasoning import reasoning_text
from hotloop.chat.specs import Tokenizer, ToolSpec, prompt_name
from hotloop.wire.items import (
    Compaction,
    ContextItem,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    Message,
    OtherItem,
    Reasoning,
)

START, END, CALL = "<|start|>", "<|end|>", "<|call|>"
# Template messages are harmony messages without `<|start|>` and their role; a tool's output carries its own
# header (its author is the tool), so its role adds nothing.
HARMONY_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|start|>' + (message.role if message.role != 'tool' else '') + message.content -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)


def harmony_format(tokenizer: Tokenizer) -> ChatFormat:
    """A harmony model's chat format: this template with the model's own tokenizer; `<|start|>` opens a message."""
    return ChatFormat(HARMONY_TEMPLATE, tokenizer, boundaries=(START,))


IDENTITY = "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06"
EFFORTS = {"none": "low", "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


def system_message(instructions: str | None, tools: Iterable[ToolSpec], effort: str | None = None) -> Chat:
    """The system message and, with instructions or tools, the developer message, as one template message."""
    tools = tuple(tools)
    system = f"{IDENTITY}\n\nReasoning: {EFFORTS.get(effort or 'medium', 'medium')}\n\n"
    system += "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    if tools:
        system += "\nCalls to these tools must go to the commentary channel: 'functions'."
    content = "<|message|>" + system + END
    developer = [f"# Instructions\n\n{instructions}"] if instructions else []
    if tools:
        developer.append(
            "# Tools\n\n## functions\n\nnamespace functions {\n\n" + _namespace(tools) + "} // namespace functions"
        )
    if developer:
        content += START + "developer<|message|>" + "\n\n".join(developer) + END
    return {"role": "system", "content": content}


def _namespace(tools: Sequence[ToolSpec]) -> str:
    out = []
    for spec in tools:
        head = f"// {spec.description}\n" if spec.description else ""
        if spec.freeform:
            out.append(f"{head}type {spec.prompt_name} = (_: string) => any;\n\n")
            continue
        properties = (spec.parameters or {}).get("properties")
        if not isinstance(properties, dict) or not properties:
            out.append(f"{head}type {spec.prompt_name} = () => any;\n\n")
            continue
        required = set((spec.parameters or {}).get("required") or ())
        fields = "".join(_field(name, schema, name in required) for name, schema in properties.items())
        out.append(f"{head}type {spec.prompt_name} = (_: {{\n{fields}}}) => any;\n\n")
    return "".join(out)


def _field(name: str, schema: Any, required: bool) -> str:
    schema = schema if isinstance(schema, dict) else {}
    note = f"// {schema['description']}\n" if isinstance(schema.get("description"), str) else ""
    default = f" // default: {json.dumps(schema['default'])}" if "default" in schema else ""
    return f"{note}{name}{'' if required else '?'}: {_type(schema)},{default}\n"


def _type(schema: dict[str, Any]) -> str:
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"{_type(items) if isinstance(items, dict) else 'any'}[]"
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean"}.get(
        kind if isinstance(kind, str) else "", "object" if kind == "object" else "any"
    )


def _message(item: ContextItem, param: str, think: bool, names: Mapping[str, str]) -> tuple[str, str] | None:
    if isinstance(item, Message):
        text = parts_text(item.content, param)
        if item.role == "assistant":
            return "assistant", f"<|channel|>final<|message|>{text}{END}"
        return ("user" if item.role == "user" else "developer"), f"<|message|>{text}{END}"
    if isinstance(item, FunctionCall):
        name = prompt_name(item.name, item.namespace)
        return (
            "assistant",
            f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{item.arguments}{CALL}",
        )
    if isinstance(item, CustomToolCall):
        name = prompt_name(item.name, item.namespace)
        return "assistant", f"<|channel|>commentary to=functions.{name}<|message|>{item.input}{CALL}"
    if isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        output = item.output if isinstance(item.output, str) else parts_text(item.output, param)
        name = names.get(item.call_id, "tool")
        return "tool", f"functions.{name} to=assistant<|channel|>commentary<|message|>{output}{END}"
    if isinstance(item, Reasoning):
        text = reasoning_text(item) if think else ""
        return ("assistant", f"<|channel|>analysis<|message|>{text}{END}") if text else None
    if isinstance(item, Compaction):
        return "user", f"<|message|>{compaction_text(item)}{END}"
    if isinstance(item, OtherItem):
        return "user", f"<|message|>{other_item_text(item)}{END}"
    return None


def _answers_other(item: ContextItem, names: Mapping[str, str]) -> bool:
    return isinstance(item, FunctionCallOutput | CustomToolCallOutput) and item.call_id not in names


def call_names(items: Iterable[ContextItem]) -> dict[str, str]:
    """call_id → the name the model called, for the outputs' headers."""
    return {
        item.call_id: prompt_name(item.name, item.namespace)
        for item in items
        if isinstance(item, FunctionCall | CustomToolCall)
    }


def item_messages(
    items: Iterable[ContextItem],
    after: Chat | None = None,
    think_from: int | None = None,
    history: Sequence[ContextItem] = (),
) -> tuple[Chat | None, list[Chat]]:
    """As chat/messages.item_messages: the template messages of `items`, one assistant turn's messages in one
    template message. `history`: the items before them, read only for an output whose call is not in `items`
    (a continuation's calls are in its parent's output, which it renders)."""
    items = list(items)
    found = call_names(items)
    if history and any(_answers_other(item, found) for item in items):
        # The history is as stored (an approval's output answers the request among it): read as calls here.
        found = {**call_names(as_calls(history)), **found}
    rendered = (
        _message(item, f"input[{index}]", think_from is not None and index >= think_from, found)
        for index, item in enumerate(items)
    )
    return assemble(rendered, after, lambda _: START + "assistant")
