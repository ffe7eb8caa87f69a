"""Custom tools' grammars as each `tokens` engine takes them (docs/backends.md, "Grammars on `tokens` upstreams").

A custom tool may carry a Lark or regex grammar (tools/grammar.py) that its call's input must match; the server checks
every input once written (an input that does not match ends `incomplete`). Where the engine can enforce the grammar
while it decodes, hotloop asks it to, in the engine's own terms, from the tool calls' format:

- harmony (gpt-oss): the input is the raw body of `<|channel|>commentary to=functions.NAME<|message|>…<|call|>`. A
  structural tag (xgrammar's format, which vLLM and SGLang both take) whose tag opens with that header, holds the
  tool's Lark grammar or regex and ends with `<|call|>`: triggered by the header when the model may choose (free
  text, reasoning and other tools' calls around it), or required from the first token when `tool_choice` forces the
  tool (`at_least_one` + `stop_after_first`).
- Hermes (`<tool_call>\\n{"name": …, "input": "…"}\\n</tool_call>`): the input is a JSON string inside the call's
  JSON, which no engine applies a Lark grammar to. A regex becomes the string's JSON-schema `pattern` (matched
  whole): a structural tag triggered by `<tool_call>` whose content is the JSON schema of every callable tool's
  call (vLLM, SGLang), or llama.cpp's lazy GBNF grammar triggered by the same word (llama-cpp-python's JSON-schema
  converter). A forced call keeps `output_schema`'s JSON schema, its patterns filtered the same way; a forced call
  whose grammar no pattern carries (Lark, or a regex whose matches JSON escapes) is known to open with
  `{"name": "<tool>", "input": "` and to be the whole output, so it goes as the engine's own grammar field for the
  whole output (vLLM `structured_outputs.grammar`, SGLang `ebnf`, llama.cpp `grammar`): GBNF whose input is the
  grammar's JSON-escaped language (tools/lark_gbnf.py).

Nothing is sent for a grammar an engine would apply wrongly or refuse: a Lark grammar on Hermes with `tool_choice`
auto (a structural tag's JSON schema cannot carry it); a regex whose
matches could hold a character a JSON string escapes (`"`, `\\`, control characters: xgrammar and llama.cpp put the
pattern's characters in the string unescaped, so such a call would not parse); on llama.cpp, a regex its converter
does not translate faithfully (`\\d`, `(?:…)`: checked by converting, parsing the GBNF back with llguidance and
matching samples drawn from the regex). The server's own check still judges those inputs.

Everything here is built once per distinct set of tools (cached: a WebSocket continuation resends its tools every
turn) and only when a callable custom tool has a grammar: other requests do not come here at all.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from hotloop.backends.base import GenerationRequest
from hotloop.tools import lark_gbnf
from hotloop.tools.grammar import Grammar, compile_grammar, matches, sample

log = logging.getLogger(__name__)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"  # Hermes
HARMONY_CALL_END = "<|call|>"
WORD_TRIGGER = 1  # llama.cpp's COMMON_GRAMMAR_TRIGGER_TYPE_WORD
# A lark terminal matching any text that holds a character a JSON string must escape.
_NEEDS_ESCAPE = r'/(?s:.*)["\\\x00-\x1f](?s:.*)/'
# The escapes llama.cpp's GBNF parser reads (src/llama-grammar.cpp `parse_char`); any other fails the request.
_GBNF_ESCAPE = re.compile(r'\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[trn\\"\[\]])')
_ESCAPE_AT = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")  # an escape, whole if it can be
_ROUND_TRIPS = 4  # samples of a regex the llama.cpp grammar must take

Tool = tuple[str, bool, Grammar | None]  # prompt name, freeform, grammar: what a constraint depends on


def harmony_header(name: str) -> str:
    """What gpt-oss writes before a custom tool's raw input (chat/harmony.py renders the same)."""
    return f"<|channel|>commentary to=functions.{name}<|message|>"


def followed(dialect: str, calls: str) -> frozenset[str]:
    """The grammar syntaxes whose every grammar this engine is asked to enforce as the model writes: Lark and regex
    for harmony's raw inputs on vLLM and SGLang. On Hermes a Lark grammar is never sent and a regex only where its
    matches need no JSON escape (the module's docstring), so neither is followed whatever it says."""
    return frozenset({"lark", "regex"}) if calls == "harmony" and dialect in ("vllm", "sglang") else frozenset()


def has_grammar(request: GenerationRequest) -> bool:
    return any(spec.grammar is not None for spec in request.tools)


def apply(
    dialect: str, calls: str, request: GenerationRequest, schema: dict[str, Any] | None, refused: bool = False
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """`output_schema`'s JSON schema and the grammar fields (`constraint_fields`) a request with a custom tool's
    grammar sends: the grammar's fields replace the schema (an engine takes one constraint; harmony's structural
    tag holds a forced call itself), or the schema loses the patterns this engine cannot take. `refused`: the
    engine refused these grammars once (TokensBackend): none is sent, the schema keeps no pattern. Blocking the
    first time a set of tools is seen (it compiles and converts: `TokensBackend` runs it off the event loop)."""
    if refused:
        return (without_patterns(schema) if schema is not None else None), None
    fields = constraint_fields(dialect, calls, request)
    if fields is not None:
        return None, fields
    return (engine_schema(schema, dialect, request) if schema is not None else None), None


def constraint_fields(dialect: str, calls: str, request: GenerationRequest) -> dict[str, Any] | None:
    """The engine's request fields that constrain the callable custom tools' inputs to their grammars, or None
    (nothing to send). vLLM: top-level (`structured_outputs`); SGLang: inside `sampling_params` (`structural_tag`);
    llama.cpp: top-level (`grammar`, `grammar_lazy`, `grammar_triggers`, `preserved_tokens`). `calls`: how the
    model writes calls (`harmony`, or the tool parser: `hermes`, `json`, `none`). When it is not None, the
    fields replace the JSON-schema constraint the body would otherwise carry (an engine takes one). The fields are
    shared between requests with the same tools: read them, do not change them."""
    if request.tool_choice == "none" or not request.tools:
        return None
    return _fields(dialect, *key(calls, request))


def key(calls: str, request: GenerationRequest) -> tuple[str, tuple[Tool, ...], bool, bool, bool]:
    """What a request's grammar constraint depends on, besides the engine: the calls' format, the callable tools
    (name, freeform, grammar), `tool_choice` required, a forced tool, parallel calls."""
    forced = request.forced_tool if request.tool_choice == "required" else None
    tools = tuple(
        (spec.prompt_name, spec.freeform, spec.grammar if spec.freeform else None)
        for spec in request.tools
        if forced is None or spec.prompt_name == forced
    )
    return calls, tools, request.tool_choice == "required", forced is not None, request.parallel_tool_calls


def carries_grammar(schema: dict[str, Any] | None, fields: dict[str, Any] | None) -> bool:
    """Whether what `apply` gave holds a grammar: its fields, or an input pattern in the JSON schema."""
    return fields is not None or (schema is not None and without_patterns(schema) != schema)


def without_patterns(schema: dict[str, Any]) -> dict[str, Any]:
    """A forced call's JSON schema with no input pattern left (an engine that refused this request's grammars)."""

    def plain(branch: dict[str, Any]) -> dict[str, Any]:
        properties = branch.get("properties") or {}
        text = properties.get("input")
        if not isinstance(text, dict) or "pattern" not in text:
            return branch
        return {**branch, "properties": {**properties, "input": {"type": "string"}}}

    return {**schema, "anyOf": [plain(b) for b in schema["anyOf"]]} if "anyOf" in schema else plain(schema)


@lru_cache(maxsize=256)
def _fields(
    dialect: str, calls: str, tools: tuple[Tool, ...], required: bool, forced: bool, parallel: bool
) -> dict[str, Any] | None:
    if not any(grammar is not None for _, _, grammar in tools):
        return None
    if calls == "harmony":
        if dialect == "llamacpp":  # refused at start-up: llama.cpp's /completion drops the special tokens
            return None
        tag = _harmony_tag(tools, forced)
        return None if tag is None else _structural(dialect, tag)
    if forced and calls in ("hermes", "json"):  # the whole output is this one call
        return _forced_fields(dialect, tools[0])
    if calls != "hermes" or required:  # a call among several (or bare JSON calls): output_schema's JSON schema
        return None
    if dialect == "llamacpp":
        return _llamacpp_fields(tools, parallel)
    tag = _hermes_tag(tools, dialect)
    return None if tag is None else _structural(dialect, tag)


def _forced_fields(dialect: str, tool: Tool) -> dict[str, Any] | None:
    """A forced custom call whose grammar no JSON-schema `pattern` carries (a Lark grammar, a regex whose matches
    JSON escapes): the output is known to be `{"name": …, "input": "…"}` from its first token, so the engine's own
    grammar field holds all of it, the input's JSON-escaped language included (tools/lark_gbnf.py). None: the JSON
    schema carries it (`engine_schema`), or nothing can."""
    name, freeform, grammar = tool
    if not freeform or grammar is None or _pattern(grammar, dialect) is not None:
        return None
    gbnf = lark_gbnf.forced_call(name, grammar.syntax, grammar.definition)
    if gbnf is None or not _gbnf_parses(gbnf):
        return None
    if dialect == "vllm":
        return {"structured_outputs": {"grammar": gbnf}}
    return {"ebnf": gbnf} if dialect == "sglang" else {"grammar": gbnf}


def engine_schema(schema: dict[str, Any], dialect: str, request: GenerationRequest) -> dict[str, Any]:
    """`output_schema`'s JSON schema for a forced call, with each regex pattern this engine would apply wrongly
    or refuse (see the module's docstring) taken out: that input is then checked by the server alone."""
    grammars = {spec.prompt_name: spec.grammar for spec in request.tools if spec.freeform and spec.grammar}
    branches = schema.get("anyOf", [schema])
    kept = []
    for branch in branches:
        properties = branch.get("properties") or {}
        text = properties.get("input")
        name = (properties.get("name") or {}).get("const")
        grammar = grammars.get(name) if isinstance(name, str) else None
        if isinstance(text, dict) and "pattern" in text and (grammar is None or not _pattern(grammar, dialect)):
            branch = {**branch, "properties": {**properties, "input": {"type": "string"}}}
        kept.append(branch)
    return {**schema, "anyOf": kept} if "anyOf" in schema else kept[0]


def _structural(dialect: str, tag_format: dict[str, Any]) -> dict[str, Any]:
    """xgrammar's structural tag, as a JSON string, where each engine takes it (vLLM's xgrammar backend, SGLang's
    xgrammar backend: the `{"type": "structural_tag", "format": …}` form)."""
    text = json.dumps({"type": "structural_tag", "format": tag_format}, ensure_ascii=False)
    return {"structured_outputs": {"structural_tag": text}} if dialect == "vllm" else {"structural_tag": text}


def _harmony_tag(tools: tuple[Tool, ...], forced: bool) -> dict[str, Any] | None:
    tags = []
    for name, freeform, grammar in tools:
        if not freeform or grammar is None:
            continue
        content: dict[str, Any] = (
            {"type": "grammar", "syntax": "lark", "grammar": grammar.definition}
            if grammar.syntax == "lark"
            else {"type": "regex", "pattern": grammar.definition}
        )
        tags.append({"type": "tag", "begin": harmony_header(name), "content": content, "end": HARMONY_CALL_END})
    if not tags:
        return None
    # Each trigger is its tag's whole header: a header that only begins another tool's (`apply_patch` and
    # `apply_patch_v2`) never captures that tool's call.
    tag_format: dict[str, Any] = {"type": "triggered_tags", "triggers": [tag["begin"] for tag in tags], "tags": tags}
    if forced:  # tool_choice names this tool: its call from the first token, and nothing after it
        tag_format.update(at_least_one=True, stop_after_first=True)
    return tag_format


def _hermes_schema(tools: Sequence[Tool], dialect: str) -> dict[str, Any] | None:
    """The JSON schema of a call of any callable tool, a regex grammar as its input's pattern where this engine
    takes it; None when no input gets a pattern (nothing to constrain)."""
    branches, patterned = [], False
    for name, freeform, grammar in tools:
        key = "input" if freeform else "arguments"
        value: dict[str, Any] = {"type": "string"} if freeform else {"type": "object"}
        pattern = _pattern(grammar, dialect) if grammar is not None else None
        if pattern is not None:
            value, patterned = {"type": "string", "pattern": pattern}, True
        branches.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, key: value},
                "required": ["name", key],
                "additionalProperties": False,
            }
        )
    if not patterned:
        return None
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _hermes_tag(tools: tuple[Tool, ...], dialect: str) -> dict[str, Any] | None:
    schema = _hermes_schema(tools, dialect)
    if schema is None:
        return None
    tag = {
        "type": "tag",
        "begin": CALL_OPEN + "\n",
        "content": {"type": "json_schema", "json_schema": schema},
        "end": "\n" + CALL_CLOSE,
    }
    return {"type": "triggered_tags", "triggers": [CALL_OPEN], "tags": [tag]}


def _llamacpp_fields(tools: tuple[Tool, ...], parallel: bool) -> dict[str, Any] | None:
    schema = _hermes_schema(tools, "llamacpp")
    if schema is None:
        return None
    gbnf = _call_gbnf(schema, parallel)
    if gbnf is None or not _gbnf_parses(gbnf):
        return None
    return {
        "grammar": gbnf,
        "grammar_lazy": True,  # free text until the model opens a call
        "grammar_triggers": [{"type": WORD_TRIGGER, "value": CALL_OPEN}],
        # A model whose `<tool_call>` is one token (Qwen) needs it preserved, or llama.cpp refuses the trigger.
        "preserved_tokens": [CALL_OPEN],
    }


def _call_gbnf(schema: dict[str, Any], parallel: bool) -> str | None:
    """llama.cpp's GBNF for a `<tool_call>` block (or several) whose JSON follows `schema`: fed from the trigger
    word on, so the root opens with it."""
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        converter.visit(converter.resolve_refs(schema, ""), "tool-call")
        rules = converter.format_grammar()
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError):
        log.info("llama.cpp's converter cannot take a custom tool's pattern; sending no grammar", exc_info=True)
        return None
    block = json.dumps(CALL_OPEN + "\n") + " tool-call " + json.dumps("\n" + CALL_CLOSE)
    root = f'root ::= {block} ("\\n" {block})*' if parallel else f"root ::= {block}"
    return root + "\n" + rules


def _gbnf_parses(gbnf: str) -> bool:
    """llama.cpp would parse it (only the escapes its parser reads), and llguidance reads it too."""
    if any(not _GBNF_ESCAPE.fullmatch(found.group()) for found in _ESCAPE_AT.finditer(gbnf)):
        return False
    return _gbnf_matcher(gbnf) is not None


def _gbnf_matcher(gbnf: str) -> Any:
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        lark = any_to_lark(gbnf)
    except Exception:  # llguidance's converter raises its own errors and ValueError
        return None
    matcher = compile_grammar(Grammar(syntax="lark", definition=lark))
    return None if isinstance(matcher, str) else matcher


@lru_cache(maxsize=256)
def _pattern(grammar: Grammar, dialect: str) -> str | None:
    """The JSON-schema pattern standing for a regex grammar on this engine, or None (see the module docstring)."""
    if grammar.syntax != "regex" or not _json_safe(grammar.definition):
        return None
    pattern = f"^({grammar.definition})$"  # JSON schema's pattern is a search: anchored, it matches whole
    if dialect == "llamacpp" and not _converts(grammar, pattern):
        return None
    return pattern


def _json_safe(regex: str) -> bool:
    """No match of `regex` holds `"`, `\\` or a control character: its language and the language of texts holding
    one do not meet (llguidance's regex intersection, with the Rust regex syntax the door compiled it with)."""
    from llguidance import regex_to_lark

    try:
        terminal = regex_to_lark(regex)
    except Exception:
        return False
    probe = compile_grammar(Grammar(syntax="lark", definition=f"start: X\nX: /{terminal}/ & {_NEEDS_ESCAPE}\n"))
    if isinstance(probe, str):
        return False
    return not probe.is_accepting() and not _allowed_bytes(probe)


def _allowed_bytes(matcher: Any) -> bool:
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    mask = allocate_token_bitmask(1, 257)  # tools/grammar.py's matchers: 256 bytes and an end token
    fill_next_token_bitmask(matcher, mask, 0)
    return int.from_bytes(mask.tobytes(), "little") & ((1 << 256) - 1) != 0


def _converts(grammar: Grammar, pattern: str) -> bool:
    """llama.cpp's converter translates the pattern faithfully enough: its GBNF parses, and calls holding inputs
    drawn from the regex itself (JSON-escaped, as the model writes them) match it."""
    regex = compile_grammar(grammar)
    if isinstance(regex, str):
        return False
    schema = {
        "type": "object",
        "properties": {"name": {"const": "t"}, "input": {"type": "string", "pattern": pattern}},
        "required": ["name", "input"],
        "additionalProperties": False,
    }
    gbnf = _call_gbnf(schema, parallel=False)
    if gbnf is None or not _gbnf_parses(gbnf):
        return False
    call = _gbnf_matcher(gbnf)
    for seed in range(_ROUND_TRIPS):
        text = sample(regex, random.Random(seed))
        written = f"{CALL_OPEN}\n{json.dumps({'name': 't', 'input': text})}\n{CALL_CLOSE}"
        if not matches(regex, text) or not matches(call, written):
            return False
    return True
