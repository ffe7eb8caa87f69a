"""A token-ID request's constraint on custom tools' inputs, as sim-engine honours it: where the constraint holds a
tool's grammar, hotloop-sim's call of that tool writes an input drawn from it, as a real engine's masked decoding
would produce one that the grammar admits (backends/upstream/constraints.py builds what hotloop sends).

- A structural tag (vLLM `structured_outputs.structural_tag`, SGLang `sampling_params.structural_tag`): a tag whose
  content is a Lark grammar or a regex gives the tool its header names (`to=functions.NAME`) that grammar; a JSON
  schema content gives each call branch whose `input` has a `pattern` that regex. `at_least_one`: the output opens
  with that call (no reasoning before it).
- llama.cpp's lazy GBNF grammar (`grammar`, triggered by `<tool_call>`): llguidance reads the GBNF; each custom
  tool's input is drawn by writing its call's opening under the grammar and sampling the JSON string after it.
- A forced call's JSON schema whose input has a `pattern`: the input drawn from it becomes the branch's `const`, so
  the bare JSON answer holds it.

Blocking (grammars compile, samples are drawn): `resolve` runs off the event loop.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.chat.specs import ToolSpec
from hotloop.simengine.requests import BadRequest
from hotloop.tools.grammar import Grammar, compile_grammar, sample

_RECIPIENT = re.compile(r"\bto=functions\.([^\s<]+)")
_CALL_OPEN = "<tool_call>"


class Resolved(msgspec.Struct):
    """What a request's constraint means for hotloop-sim's answer."""

    grammars: dict[str, Grammar]  # a tool's name → the grammar its input is drawn from
    forced: str | None = None  # the output must open with this tool's call
    schema: dict[str, Any] | None = None  # the JSON schema of a bare JSON answer, patterns drawn into consts


def needs_work(schema: dict[str, Any] | None, structural_tag: str | None, gbnf: str | None) -> bool:
    return structural_tag is not None or gbnf is not None or (schema is not None and bool(_patterned(schema)))


def resolve(
    schema: dict[str, Any] | None,
    structural_tag: str | None,
    gbnf: str | None,
    triggers: Sequence[dict[str, Any]],
    tools: Sequence[ToolSpec],
    rng: random.Random,
    lark_in_tags: bool = True,
) -> Resolved:
    """The tools' grammars and the forced tool a structural tag or a lazy GBNF grammar holds, and `schema` with
    each patterned input drawn; raises BadRequest for a structural tag an engine would refuse (`lark_in_tags`
    false: a Lark grammar in one, as xgrammar before 0.2.9 refuses it)."""
    resolved = Resolved(grammars={})
    if schema is not None:
        resolved.schema = _drawn(schema, rng)
    if structural_tag is not None:
        resolved.grammars, resolved.forced = _tag_grammars(structural_tag, lark_in_tags)
    elif gbnf is not None and any(t.get("value") == _CALL_OPEN for t in triggers):
        resolved.grammars = _gbnf_inputs(gbnf, [spec.name for spec in tools if spec.freeform], rng)
    elif gbnf is not None and not triggers:  # the whole output: one forced call (hotloop's tools/lark_gbnf.py)
        resolved.grammars = _gbnf_inputs(gbnf, [spec.name for spec in tools if spec.freeform], rng, lead="")
        if len(resolved.grammars) == 1:
            resolved.forced = next(iter(resolved.grammars))
    return resolved


def with_grammars(tools: Sequence[ToolSpec], grammars: dict[str, Grammar]) -> list[ToolSpec]:
    return [
        msgspec.structs.replace(spec, grammar=grammars[spec.name]) if spec.freeform and spec.name in grammars else spec
        for spec in tools
    ]


def _tag_grammars(text: str, lark_in_tags: bool = True) -> tuple[dict[str, Grammar], str | None]:
    try:
        tag = json.loads(text)
    except ValueError:
        raise BadRequest("The structural tag is not valid JSON.", param="structural_tag") from None
    fmt = tag.get("format") if isinstance(tag, dict) else None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("tags"), list):
        raise BadRequest("The structural tag has no format with tags.", param="structural_tag")
    grammars: dict[str, Grammar] = {}
    first: str | None = None
    for item in fmt["tags"]:
        if not isinstance(item, dict) or not isinstance(item.get("begin"), str):
            raise BadRequest("A structural tag's tag has no begin.", param="structural_tag")
        content = item.get("content") or {}
        kind = content.get("type")
        recipient = _RECIPIENT.search(item["begin"])
        name = recipient.group(1) if recipient is not None else None
        if kind == "grammar" and content.get("syntax") == "lark" and not lark_in_tags:  # 0.2.8: read as EBNF
            raise BadRequest("Invalid structured_outputs structural_tag specification.", param="structural_tag")
        if kind == "grammar" and content.get("syntax") == "lark" and name is not None:
            grammars[name] = Grammar(syntax="lark", definition=content["grammar"])
        elif kind == "regex" and name is not None:
            grammars[name] = Grammar(syntax="regex", definition=content["pattern"])
        elif kind == "json_schema":
            for branch, pattern in _patterned(content.get("json_schema") or {}):
                grammars[branch] = Grammar(syntax="regex", definition=_unanchored(pattern))
        first = first or name
    forced = first if fmt.get("at_least_one") and fmt.get("stop_after_first") else None
    return grammars, forced


def _patterned(schema: dict[str, Any]) -> list[tuple[str, str]]:
    """(tool name, pattern) of each call branch whose `input` string has a pattern."""
    found = []
    for branch in schema.get("anyOf", [schema]):
        properties = branch.get("properties") if isinstance(branch, dict) else None
        if not isinstance(properties, dict):
            continue
        name = (properties.get("name") or {}).get("const")
        pattern = (properties.get("input") or {}).get("pattern")
        if isinstance(name, str) and isinstance(pattern, str):
            found.append((name, pattern))
    return found


def _unanchored(pattern: str) -> str:
    """A JSON schema's pattern (a search; hotloop anchors it as `^(…)$`) as a regex matched whole."""
    if pattern.startswith("^(") and pattern.endswith(")$"):
        return pattern[2:-2]
    return pattern.removeprefix("^").removesuffix("$")


def _drawn(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    patterned = dict(_patterned(schema))
    if not patterned:
        return schema
    schema = copy.deepcopy(schema)
    for branch in schema.get("anyOf", [schema]):
        properties = branch.get("properties") if isinstance(branch, dict) else None
        name = ((properties or {}).get("name") or {}).get("const")
        if properties is not None and name in patterned:
            text = _draw(Grammar(syntax="regex", definition=_unanchored(patterned[name])), rng)
            properties["input"] = {"const": text} if text is not None else {"type": "string"}
    return schema


def _draw(grammar: Grammar, rng: random.Random) -> str | None:
    matcher = compile_grammar(grammar)
    return None if isinstance(matcher, str) else sample(matcher, rng)


def _gbnf_inputs(
    gbnf: str, names: Sequence[str], rng: random.Random, lead: str = _CALL_OPEN + "\n"
) -> dict[str, Grammar]:
    """Each named tool's input as the GBNF grammar admits it after `<lead>{"name": NAME, "input": "`: the JSON
    string sampled under the grammar, decoded, and handed to hotloop-sim as the one sentence of a grammar."""
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        matcher = compile_grammar(Grammar(syntax="lark", definition=any_to_lark(gbnf)))
    except Exception:  # llguidance's converter raises its own errors and ValueError
        raise BadRequest("failed to parse grammar", param="grammar") from None
    if isinstance(matcher, str):
        raise BadRequest(f"failed to parse grammar: {matcher}", param="grammar")
    grammars = {}
    for name in names:
        walker = matcher.deep_copy()
        opening = f'{lead}{{"name": {json.dumps(name)}, "input": "'
        if not walker.consume_tokens(list(opening.encode())):
            continue  # the grammar has no call of this tool with an input
        try:
            text, _ = json.JSONDecoder().raw_decode('"' + sample(walker, rng))
        except ValueError:
            continue
        grammars[name] = Grammar(syntax="lark", definition="start: " + json.dumps(text))
    return grammars
