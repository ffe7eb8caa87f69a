"""Render a model input (instructions, tools, context items) with the model's chat template into token IDs.

Tool calls use the `<tool_call>` JSON convention in the prompt and in the model's answers (docs/models.md).
Items without a slot in the template (web_search_call, …) are shown as text; reasoning is not replayed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2
import jinja2.sandbox

from hotloop.backends.base import Tokenizer, ToolSpec, prompt_name
from hotloop.pipeline import sealing
from hotloop.pipeline.media import describe_file, describe_image
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


class ChatFormat:
    """A chat template (Jinja, as shipped in the model's GGUF) plus the tokenizer that goes with it."""

    def __init__(self, template: str, tokenizer: Tokenizer, bos_token: str = "", eos_token: str = "") -> None:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(template)
        self.tokenizer = tokenizer
        self._special = {"bos_token": bos_token, "eos_token": eos_token}
        # Incremental rendering (pipeline/tokens.py): special tokens a message segment may start with, the
        # generation prompt's ids, a salt for cache keys, and whether the probe found the template per-message.
        self.boundary_ids = frozenset(
            ids[0] for ids in (tokenizer.encode(t) for t in (bos_token, eos_token) if t) if len(ids) == 1
        )
        probe = [{"role": "user", "content": "probe"}]
        with_prompt = self.render_text(probe, add_generation_prompt=True)
        without = self.render_text(probe, add_generation_prompt=False)
        self.generation_ids = tokenizer.encode(with_prompt[len(without) :]) if with_prompt.startswith(without) else []
        self.cache_salt = hashlib.blake2b(template.encode(), digest_size=16).digest()
        self.incremental = False
        self._source = template
        # role → (text before, text after) a message's content, where the template provably renders a message
        # after the first as that plain concatenation (`learn_wrappers`); segments then skip Jinja.
        self.wrappers: dict[str, tuple[str, str]] = {}

    def render_text(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt, **self._special
            )
        except jinja2.TemplateError as exc:
            raise RuntimeError(f"chat template failed: {exc}") from exc

    def tokens(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        return self.tokenizer.encode(self.render_text(messages, add_generation_prompt))

    def segment_text(self, base: Chat, base_text: str, messages: Sequence[Chat]) -> str | None:
        """The text `messages` add after the conversation's first message `base` (rendered alone as `base_text`),
        or None when the template does not render them as a suffix of it."""
        wrappers = self.wrappers
        if wrappers and all(message["role"] in wrappers for message in messages):
            parts: list[str] = []
            for message in messages:
                before, after = wrappers[message["role"]]
                parts += (before, message["content"], after)
            return "".join(parts)
        text = self.render_text([base, *messages], add_generation_prompt=False)
        return text[len(base_text) :] if text.startswith(base_text) else None

    def learn_wrappers(self) -> dict[str, tuple[str, str]]:
        """Find, per role, the text the template puts around a later message's content, where that is provably all
        it does: the template uses `content` only inside string concatenation that it outputs (read from its
        syntax tree), and renders every probe below as exactly that concatenation. Otherwise segments keep
        rendering through Jinja. Called once, by the incremental probe (pipeline/tokens.py)."""
        self.wrappers = {}
        if not _content_only_output(self._source):
            return self.wrappers
        learned: dict[str, tuple[str, str]] = {}
        for role in ("system", "user", "assistant", "tool"):
            wrapper = self._wrapper(role)
            if wrapper is not None:
                learned[role] = wrapper
        if learned and self._wrappers_hold(learned):
            self.wrappers = learned
        return self.wrappers

    def _wrapper(self, role: str) -> tuple[str, str] | None:
        found: set[tuple[str, str]] = set()
        for base in _PROBE_BASES:
            base_text = self.render_text([base], add_generation_prompt=False)
            try:
                text = self.render_text([base, {"role": role, "content": _SENTINEL}], add_generation_prompt=False)
            except RuntimeError:  # the template refuses this role here
                return None
            if not text.startswith(base_text) or text.count(_SENTINEL) != 1:
                return None
            before, _, after = text[len(base_text) :].partition(_SENTINEL)
            found.add((before, after))
        return found.pop() if len(found) == 1 else None

    def _wrappers_hold(self, learned: dict[str, tuple[str, str]]) -> bool:
        roles = list(learned)
        for base in _PROBE_BASES:
            base_text = self.render_text([base], add_generation_prompt=False)
            for contents in _PROBE_CONTENTS:
                messages = [{"role": roles[i % len(roles)], "content": c} for i, c in enumerate(contents)]
                rendered = self.render_text([base, *messages], add_generation_prompt=False)
                expected = "".join(learned[m["role"]][0] + m["content"] + learned[m["role"]][1] for m in messages)
                if rendered != base_text + expected:
                    return False
        return True


_SENTINEL = "\x00hotloop-content\x00"
_PROBE_BASES = [{"role": "system", "content": "You are a probe."}, {"role": "user", "content": "Hi there"}]
_PROBE_CONTENTS = [
    ["", "  padded \n", "x"],
    ["line one\nline two", '<tool_call>\n{"name": "f"}\n</tool_call>', "  ", "ünï 日本 😀", "{{ '%s' }}"],
]
_VERBATIM = (jinja2.nodes.Add, jinja2.nodes.Concat)


def _content_only_output(source: str) -> bool:
    """Whether every use of a message's `content` in the template is output as is, joined only by `+` or `~`."""
    try:
        tree = jinja2.Environment().parse(source)
    except jinja2.TemplateSyntaxError:
        return False
    return _uses_ok(tree, [])


def _uses_ok(node: jinja2.nodes.Node, parents: list[jinja2.nodes.Node]) -> bool:
    if _is_content(node):
        for parent in reversed(parents):
            if isinstance(parent, jinja2.nodes.Output):
                return True
            if not isinstance(parent, _VERBATIM):
                return False
        return False
    trail = [*parents, node]
    return all(_uses_ok(child, trail) for child in node.iter_child_nodes())


def _is_content(node: jinja2.nodes.Node) -> bool:
    if isinstance(node, jinja2.nodes.Getattr):
        return node.attr == "content"
    if isinstance(node, jinja2.nodes.Getitem):
        return isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == "content"
    return isinstance(node, jinja2.nodes.Name) and node.name == "content"


def tool_prompt(specs: Iterable[ToolSpec]) -> str:
    """The system-prompt section offering the tools, with an example call to the first one (pure and stable)."""
    entries: list[dict[str, Any]] = []
    specs = list(specs)
    for spec in specs:
        entry: dict[str, Any] = {"name": spec.prompt_name}
        if spec.description:
            entry["description"] = spec.description
        if spec.kind == "custom":
            entry["input"] = "freeform text"
        else:
            entry["parameters"] = spec.parameters or {"type": "object", "properties": {}}
        entries.append(entry)
    first = specs[0]
    if first.kind == "custom":
        example = json.dumps({"name": first.prompt_name, "input": "<text>"})
    else:
        properties = (first.parameters or {}).get("properties")
        names = list(properties)[:2] if isinstance(properties, dict) else []
        example = json.dumps({"name": first.prompt_name, "arguments": {name: f"<{name}>" for name in names}})
    kinds = {spec.kind for spec in specs}
    payload = []
    if "function" in kinds:
        payload.append(' and its parameters as a JSON object in "arguments"')
    if "custom" in kinds:
        payload.append(' and a freeform tool\'s text as a string in "input"')
    return TOOL_PROMPT.format(
        tools="\n".join(json.dumps(entry) for entry in entries), example=example, payload=",".join(payload)
    )


def _parts_text(parts: Iterable[Any], param: str) -> str:
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


def _item_message(item: ContextItem, param: str) -> tuple[str, str] | None:
    if isinstance(item, Message):
        role = "system" if item.role == "developer" else item.role
        return role, _parts_text(item.content, param)
    if isinstance(item, FunctionCall):
        return "assistant", _call_text(
            prompt_name(item.name, item.namespace), {"arguments": _arguments(item.arguments)}
        )
    if isinstance(item, CustomToolCall):
        return "assistant", _call_text(prompt_name(item.name, item.namespace), {"input": item.input})
    if isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        output = item.output if isinstance(item.output, str) else _parts_text(item.output, param)
        return "tool", output
    if isinstance(item, Reasoning):
        return None
    if isinstance(item, Compaction):
        return "user", compaction_text(item)
    if isinstance(item, OtherItem):
        return "user", other_item_text(item)
    return None


def compaction_text(item: Compaction) -> str:
    """A compaction as a user message: a marker, then the summary sealed in it (backends/chat_messages.py too)."""
    summary = sealing.peek(item.encrypted_content)
    return "[earlier conversation, compacted]" + ("\n" + summary if summary else "")


def other_item_text(item: OtherItem) -> str:
    """An item without a slot in the template (web_search_call, …), shown as its JSON."""
    return f"[{item.raw.get('type')}] {json.dumps(item.raw)}"


Chat = dict[str, str]  # one template message: {"role", "content"}


def system_message(instructions: str | None, tools: Iterable[ToolSpec]) -> Chat | None:
    """The system message: instructions, then the tool list; None when there is neither."""
    tools = tuple(tools)
    parts = [text for text in (instructions, tool_prompt(tools) if tools else None) if text]
    return {"role": "system", "content": "\n\n".join(parts)} if parts else None


def item_messages(items: Iterable[ContextItem], after: Chat | None = None) -> tuple[Chat | None, list[Chat]]:
    """The template messages of `items`, consecutive assistant turns merged.

    `after` is the message the items follow; when the first of them merges into it, the merged message comes
    back first and `after` is replaced (the incremental renderer then re-renders it). Returns (the replaced
    message or None, the new messages).
    """
    messages: list[Chat] = [after] if after is not None else []
    for index, item in enumerate(items):
        rendered = _item_message(item, f"input[{index}]")
        if rendered is None:
            continue
        role, content = rendered
        if role == "assistant" and messages and messages[-1]["role"] == "assistant":
            messages[-1] = {"role": "assistant", "content": messages[-1]["content"] + "\n" + content}
        else:
            messages.append({"role": role, "content": content})
    if after is None:
        return None, messages
    if messages[0] is after:
        return None, messages[1:]
    return after, messages


def chat_messages(instructions: str | None, tools: Iterable[ToolSpec], items: Iterable[ContextItem]) -> list[Chat]:
    """The template's `messages`: the system message first, then the items' messages."""
    system = system_message(instructions, tools)
    return ([system] if system else []) + item_messages(items)[1]
