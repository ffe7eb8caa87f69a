"""Request bodies of the engine's endpoints, and a chat request as the template messages and tool policy input."""

from __future__ import annotations

import json
import re
from array import array
from typing import Any, Literal

import msgspec

from hotloop.chat.format import Chat
from hotloop.chat.messages import tool_prompt
from hotloop.chat.specs import ToolSpec


class BadRequest(Exception):
    """A request the engine refuses with 400, naming the parameter."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class FunctionDef(msgspec.Struct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(msgspec.Struct):
    function: FunctionDef
    type: str = "function"


class ChatMessage(msgspec.Struct):
    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    # An earlier turn's thinking, sent back (vLLM, SGLang, llama.cpp: `reasoning_content`; Ollama: `reasoning`).
    reasoning_content: str | None = None
    reasoning: str | None = None


class ChatBody(msgspec.Struct):
    messages: list[ChatMessage]
    model: str = ""
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ChatTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    response_format: dict[str, Any] | None = None
    # Thinking off, as each engine is told (hotloop's `reasoning_effort` upstream setting): effort "none", Qwen3's
    # template switch, Ollama's `think`.
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    think: bool | None = None

    @property
    def thinking(self) -> bool:
        switch = (self.chat_template_kwargs or {}).get("enable_thinking")
        return self.reasoning_effort != "none" and switch is not False and self.think is not False


class CompletionBody(msgspec.Struct):
    prompt: str | list[Any]  # a string, token ids, or a one-element batch of either (checked by single_prompt)
    model: str = ""
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = 16  # OpenAI's default for /v1/completions
    response_format: dict[str, Any] | None = None  # vLLM's structured output
    # vLLM's StructuredOutputsParams: one of json, regex, choice, grammar, json_object, structural_tag (a JSON
    # string), with options; hotloop sends `structural_tag` for a custom tool's grammar.
    structured_outputs: dict[str, Any] | None = None


class SamplingParams(msgspec.Struct):
    max_new_tokens: int | None = 128  # SGLang's default
    json_schema: str | None = None  # a JSON schema, as a string
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None  # xgrammar's structural tag, as a JSON string


class GenerateBody(msgspec.Struct):
    """SGLang's POST /generate: `input_ids` (or `text`), `sampling_params`, `stream`."""

    input_ids: list[Any] | None = None
    text: str | None = None
    sampling_params: SamplingParams = msgspec.field(default_factory=SamplingParams)
    stream: bool = False
    model: str = ""
    stream_options: StreamOptions | None = None  # not SGLang's: the shared runner reads it


class LlamaCppBody(msgspec.Struct):
    """llama.cpp server's POST /completion: `prompt` (text or ids), `n_predict`, `stream`."""

    prompt: str | list[Any]
    n_predict: int = -1  # llama.cpp's default: until the end of generation
    stream: bool = False
    json_schema: dict[str, Any] | None = None
    grammar: str | None = None  # GBNF; it wins over json_schema
    grammar_lazy: bool | None = None  # free until a trigger, then the grammar from the trigger on
    grammar_triggers: list[dict[str, Any]] | None = None  # {"type": 1 (word) | …, "value": …}
    preserved_tokens: list[str] | None = None
    model: str = ""
    stream_options: StreamOptions | None = None


def calls_in(text: str) -> int:
    """Tool calls written in prompt text: `<tool_call>` blocks, or harmony calls (each ends with `<|call|>`)."""
    return text.count("<tool_call>\n") + text.count("<|call|>")


def tools_in_prompt(text: str) -> tuple[list[ToolSpec], int]:
    """The tools a rendered prompt offers (hotloop's `<tools>` section, one JSON object per line, or a harmony
    prompt's `functions` namespace) and the calls after it: what a model reading the token ids would see."""
    if HARMONY_TOOLS in text:
        return _harmony_tools(text)
    start, end = text.find("<tools>\n"), text.find("\n</tools>")
    if start < 0 or end < start:
        return [], 0
    specs = []
    for line in text[start + len("<tools>\n") : end].splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            kind: Literal["function", "custom"] = "custom" if "input" in entry else "function"
            specs.append(ToolSpec(entry["name"], kind, entry.get("description"), entry.get("parameters")))
    # A call's block opens with "<tool_call>" on a line of its own; the tool prompt's example is one such block
    # (its prose names "<tool_call> block" in a sentence, which is not).
    calls = max(0, text.count("<tool_call>\n", end) - 1)
    return specs, calls


HARMONY_TOOLS, HARMONY_TOOLS_END = "namespace functions {", "} // namespace functions"
_TS_TYPE = re.compile(r"^type (\S+) = \((.*)$")
# `name?: TYPE,` and a ` // default: …` after it (chat/harmony.py `_field`); TYPE may hold commas (an enum's strings).
_TS_FIELD = re.compile(r"^(\w+)(\??): (.+),(?: // default: .*)?$")
_TS_TYPES = {"string": "string", "number": "number", "boolean": "boolean", "object": "object"}


def _ts_schema(text: str) -> dict[str, Any]:
    """A JSON schema for a TypeScript type as chat/harmony.py `_type` writes it: a primitive, `T[]`, or an enum
    (`"a" | "b"`), so that the engine's arguments keep to it (an array, one of the enum's values) as the model's
    would; `any`, and what is not understood, takes any value (a string)."""
    text = text.strip()
    if text.endswith("[]"):
        return {"type": "array", "items": _ts_schema(text[:-2])}
    if text in _TS_TYPES:
        return {"type": _TS_TYPES[text]}
    try:
        values = [json.loads(part) for part in text.split(" | ")]
    except ValueError:
        return {"type": "string"}
    if all(isinstance(value, str) for value in values):
        return {"type": "string", "enum": values}
    return {"enum": values}


def _harmony_tools(text: str) -> tuple[list[ToolSpec], int]:
    """The tools of a harmony developer message (chat/harmony.py writes them as TypeScript) and the calls after."""
    start = text.find(HARMONY_TOOLS)
    end = text.find(HARMONY_TOOLS_END, start)
    specs: list[ToolSpec] = []
    description: str | None = None
    fields: dict[str, Any] | None = None
    for line in text[start + len(HARMONY_TOOLS) : end].splitlines():
        if fields is not None:  # inside a tool's parameter object
            field = _TS_FIELD.match(line)
            if field is not None:
                fields["properties"][field.group(1)] = _ts_schema(field.group(3))
                if not field.group(2):
                    fields["required"].append(field.group(1))
            elif line.startswith("})"):
                fields = None
            continue
        if line.startswith("// "):
            description = line[3:]
            continue
        head = _TS_TYPE.match(line)
        if head is None:
            continue
        name, rest = head.groups()
        kind: Literal["function", "custom"] = "custom" if rest.startswith("_: string)") else "function"
        parameters = None
        if rest.startswith("_: {"):
            parameters = fields = {"type": "object", "properties": {}, "required": []}
        specs.append(ToolSpec(name, kind, description, parameters))
        description = None
    return specs, text.count("<|call|>", max(end, 0))


def decode(body: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"Invalid request: {exc}", param=_param_of(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"Invalid JSON: {exc}") from None


def _param_of(message: str) -> str | None:
    # msgspec says "… - at `$.messages[0].role`"
    _, found, where = message.rpartition("at `$.")
    return where.rstrip("`") if found else None


def single_prompt(prompt: str | list[Any]) -> str | array[int]:
    """One prompt: a string or token ids (a one-element batch of either is accepted; larger batches are not).

    Ids become an array("i") at once (checked in C: a long prompt costs the engine next to nothing here)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    try:
        tokens = array("i", prompt)
    except (TypeError, OverflowError):
        tokens = array("i")
    if not tokens:
        raise BadRequest("prompt must be a string or a non-empty list of token ids (one prompt).", param="prompt")
    if min(tokens) < 0:
        raise BadRequest("Token ids must be non-negative.", param="prompt")
    return tokens


def max_tokens(body: ChatBody) -> int | None:
    value = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if value is not None and value < 1:
        raise BadRequest("max_tokens must be at least 1.", param="max_tokens")
    return value


def strict_of(body: ChatBody) -> dict[str, bool]:
    """The `strict` of each chat tool that carries one, by name (GET /stats/requests)."""
    return {tool.function.name: tool.function.strict for tool in body.tools or [] if tool.function.strict is not None}


def tool_specs(body: ChatBody) -> list[ToolSpec]:
    specs = []
    for index, tool in enumerate(body.tools or []):
        if tool.type != "function":
            raise BadRequest(f"Unsupported tool type {tool.type!r}.", param=f"tools[{index}].type")
        specs.append(ToolSpec(tool.function.name, "function", tool.function.description, tool.function.parameters))
    return specs


def tool_mode(body: ChatBody, specs: list[ToolSpec]) -> tuple[str, str | None]:
    """`tool_choice` as hotloop-sim's (mode, forced tool name)."""
    choice = body.tool_choice
    if choice is None:
        return ("auto" if specs else "none"), None
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise BadRequest(f"Invalid tool_choice {choice!r}.", param="tool_choice")
        return choice, None
    name = (choice.get("function") or {}).get("name")
    if not isinstance(name, str) or name not in {spec.name for spec in specs}:
        raise BadRequest("tool_choice names no declared function.", param="tool_choice")
    return "required", name


def text_format(body: ChatBody | CompletionBody) -> dict[str, Any]:
    fmt = body.response_format or {"type": "text"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "schema": (fmt.get("json_schema") or {}).get("schema")}
    return {"type": str(fmt.get("type", "text"))}


def schema_of(body: CompletionBody | GenerateBody | LlamaCppBody) -> dict[str, Any] | None:
    """The JSON schema a token-ID request constrains its output to, if any (each engine names it its own way)."""
    if isinstance(body, CompletionBody):
        so = body.structured_outputs or {}
        if so.get("json_object"):
            return {"type": "object"}
        if so.get("json") is not None:
            return _schema_text(so["json"], "structured_outputs.json")
        fmt = text_format(body)
        if fmt["type"] == "json_object":
            return {"type": "object"}
        schema = fmt.get("schema")
        return schema if isinstance(schema, dict) else None
    if isinstance(body, LlamaCppBody):
        return body.json_schema if body.grammar is None else None  # llama.cpp: a grammar wins
    if body.sampling_params.json_schema is None:
        return None
    return _schema_text(body.sampling_params.json_schema, "sampling_params.json_schema")


def _schema_text(value: Any, param: str) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    try:
        schema = json.loads(value)
    except (TypeError, ValueError):
        raise BadRequest("The JSON schema is not valid JSON.", param=param) from None
    return schema if isinstance(schema, dict) else None


_VLLM_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
_SGLANG_KINDS = ("json_schema", "regex", "ebnf")
_LLAMACPP_FIELDS = ("json_schema", "grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens")


def constraint_fields(body: CompletionBody | GenerateBody | LlamaCppBody) -> dict[str, Any] | None:
    """The request's constrained-decoding fields exactly as they came (GET /stats/requests `constraint`: tests
    check each dialect's request), refused where the engine refuses them; None: an unconstrained request."""
    if isinstance(body, CompletionBody):
        so = body.structured_outputs
        kinds = sum(1 for kind in _VLLM_KINDS if (so or {}).get(kind) is not None)
        if body.response_format is not None and body.response_format.get("type", "text") != "text":
            kinds += 1  # vLLM replaces structured_outputs' kind with it, then refuses two kinds
        if kinds > 1:
            raise BadRequest(
                "You can only use one kind of structured outputs constraint but multiple are specified.",
                param="structured_outputs",
            )
        if so is not None and not isinstance(so.get("structural_tag", ""), str):
            raise BadRequest("structural_tag must be a string.", param="structured_outputs.structural_tag")
        fields = {"response_format": body.response_format, "structured_outputs": so}
    elif isinstance(body, GenerateBody):
        params = body.sampling_params
        if sum(1 for kind in _SGLANG_KINDS if getattr(params, kind) is not None) > 1:
            raise BadRequest("Only one of regex, json_schema, or ebnf can be set.", param="sampling_params")
        chosen = {kind: getattr(params, kind) for kind in (*_SGLANG_KINDS, "structural_tag")}
        chosen = {kind: value for kind, value in chosen.items() if value is not None}
        fields = {"sampling_params": chosen or None}
    else:
        if body.grammar_lazy and not body.grammar_triggers:
            raise BadRequest("Error: no triggers set for lazy grammar!", param="grammar_triggers")
        fields = {name: getattr(body, name) for name in _LLAMACPP_FIELDS}
    fields = {name: value for name, value in fields.items() if value is not None}
    return fields or None


def constrain(kwargs: dict[str, Any], schema: dict[str, Any] | None) -> None:
    """Constrained decoding, as an engine does it: the output is the schema's JSON and nothing else, so a forced
    tool call (a schema of `{"name": const, "arguments": …}` branches) comes back as bare JSON, not a tagged block."""
    if schema is not None:
        kwargs.update(tools=[], tool_choice="none", text_format={"type": "json_schema", "schema": schema})


def reasoning_sent(body: ChatBody) -> int:
    """Characters of reasoning the request's messages carry back (GET /stats/requests: `reasoning_chars`)."""
    return sum(len(message.reasoning_content or message.reasoning or "") for message in body.messages)


def template_messages(body: ChatBody, specs: list[ToolSpec]) -> tuple[list[Chat], int]:
    """The chat template's messages (tool calls as `<tool_call>` text, like hotloop's own render) and the tool
    calls already in the conversation (hotloop-sim's tool policy counts them)."""
    messages: list[Chat] = []
    calls = 0
    for message in body.messages:
        text = _content_text(message.content)
        for call in message.tool_calls or []:
            calls += 1
            function = call.get("function") or {}
            payload = {"name": function.get("name"), "arguments": _arguments(function.get("arguments"))}
            text += ("\n" if text else "") + "<tool_call>\n" + json.dumps(payload) + "\n</tool_call>"
        role = "system" if message.role == "developer" else message.role
        messages.append({"role": role, "content": text})
    if specs:
        offered = tool_prompt(specs)
        if messages and messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": messages[0]["content"] + "\n\n" + offered}
        else:
            messages.insert(0, {"role": "system", "content": offered})
    return messages, calls


def _content_text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            parts.append("[image]")
    return "\n".join(parts)


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw
