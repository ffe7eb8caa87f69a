"""A custom tool's grammar as GBNF, the grammar format that llama.cpp's server (`grammar`), xgrammar (vLLM's
`structured_outputs.grammar`, SGLang's `ebnf`) and llguidance all read, for an engine to hold a forced call to it.

A Hermes model writes a custom call's input inside its call's JSON (`{"name": "edit", "input": "…"}`), so the
grammar must describe the input's JSON-escaped form: every literal and character class is rewritten into the forms
`json.dumps` writes (tools/lark_json.py says why rewriting each piece rewrites the whole language). No engine takes
a Lark grammar there (a JSON schema's `pattern` holds a regex's characters unescaped), which is why a forced call
goes to the engine as one GBNF grammar for its whole output (`forced_call`).

Read: what tools/lark_regex.py reads (rules and terminals, alternatives, `->` aliases dropped, groups, `[optional]`,
`? * +`, `~ n..m`, strings, `/regex/` without flags, `%import common.X`), recursion included: GBNF is context-free.
`\\d`, `\\w` and `\\s` are their ASCII classes (an engine's grammar has no Unicode categories): the model may then
not write a non-ASCII digit or letter such a class would take; the server's check of the written input
(tools/grammar.py) stays the judge either way. Anything else gives None.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from typing import Any

from hotloop.tools.lark_json import Unsupported as JsonUnsupported
from hotloop.tools.lark_json import escaped_rule
from hotloop.tools.lark_regex import TOKEN, Unsupported, rules_of

_MAX = 0x10FFFF
_SPECIAL = sorted([*range(0x20), ord('"'), ord("\\")])  # what JSON writes escaped
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
Intervals = list[tuple[int, int]]


@lru_cache(maxsize=64)
def forced_call(tool: str, syntax: str, definition: str) -> str | None:
    """GBNF for a whole forced Hermes call of the custom tool `tool` whose input follows the grammar (`syntax`
    lark or regex): `{"name": "<tool>", "input": "<the input, JSON-escaped>"}`, as `json.dumps` writes it. None
    when the grammar uses what is not read here."""
    found = rules(definition, "g") if syntax == "lark" else regex_rules(definition, "g")
    if found is None:
        return None
    body, start = found
    head = _string(json.dumps({"name": tool, "input": ""})[:-2])  # up to the input's opening quote
    return f'root ::= {head} {start} "\\"}}"\n{body}'


def rules(definition: str, prefix: str) -> tuple[str, str] | None:
    """The Lark grammar's rules as GBNF for the JSON-escaped forms of its strings, named `prefix-…`, and its start
    rule's name. None when the grammar uses what is not read here."""
    emit = Gbnf()
    try:
        found = rules_of(definition)
        if "start" not in found:
            return None
        lines = [f"{_name(name, prefix)} ::= {_body(text, prefix, emit)}" for name, text in found.items()]
        _check_references(found, prefix, lines)
    except (Unsupported, JsonUnsupported, ValueError, SyntaxError, re.error, RecursionError, OverflowError):
        return None
    return "\n".join(lines), _name("start", prefix)


def regex_rules(pattern: str, prefix: str) -> tuple[str, str] | None:
    """A regex grammar as one GBNF rule (see `rules`)."""
    try:
        start = _name("start", prefix)
        return f"{start} ::= {escaped_rule(pattern, Gbnf())}", start
    except (JsonUnsupported, ValueError, re.error, RecursionError, OverflowError):
        return None


def _name(name: str, prefix: str) -> str:
    """A GBNF rule name (letters, digits and `-`): a terminal `NAME` becomes `prefix-t-name`."""
    plain = f"t-{name.lower()}" if name.isupper() else name
    return f"{prefix}-{plain.replace('_', '-')}"


def _body(text: str, prefix: str, emit: Gbnf) -> str:
    tokens = list(TOKEN.finditer(text))
    if "".join(match.group(0) for match in tokens).strip() != text.strip():
        raise Unsupported(text)  # something the tokenizer does not know
    out = ""
    for match in tokens:
        kind = match.lastgroup or ""
        piece = _token(kind, match.group(kind).strip(), prefix, emit)
        postfix = kind == "repeat" or piece in ("?", "*", "+", ")?")  # an operator binds to what precedes it
        out += piece if postfix or not out else " " + piece
    return out


def _token(kind: str, text: str, prefix: str, emit: Gbnf) -> str:
    if kind == "string":
        return emit.literal(ast.literal_eval(text))
    if kind == "regex":
        body, _, flags = text[1:].rpartition("/")
        if flags:
            raise Unsupported(text)
        return escaped_rule(body.replace("\\/", "/"), emit)
    if kind == "repeat":
        low, _, high = text[1:].replace(" ", "").partition("..")
        return f"{{{low},{high}}}" if high else f"{{{low}}}"
    if kind == "alias":
        return ""
    if kind == "name":
        return _name(text, prefix)
    return {"[": "(", "]": ")?"}.get(text, text)


def _check_references(found: dict[str, str], prefix: str, lines: list[str]) -> None:
    """Every rule a body names is defined (a typo would make the engine refuse the whole request)."""
    defined = {_name(name, prefix) for name in found}
    for line in lines:
        body = re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', "", line.partition("::=")[2])
        for used in re.findall(rf"\b{re.escape(prefix)}-[a-z0-9-]+", body):
            if used not in defined:
                raise Unsupported(used)


class Gbnf:
    """Regex pieces written as GBNF for their JSON-escaped forms (tools/lark_json.py `Emitter`)."""

    def literal(self, text: str) -> str:
        return _escaped(text)

    def char_set(self, items: list[tuple[Any, Any]]) -> str:
        allowed = _set_of(items)
        raw = _intersect(allowed, _complement([(code, code) for code in _SPECIAL]))
        specials = [code for code in _SPECIAL if _holds(allowed, code)]
        options = ([_class(raw)] if raw else []) + [_escaped(chr(code)) for code in specials]
        if not options:
            raise JsonUnsupported("an empty class")
        return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"

    def repeat(self, inner: str, low: int, high: int | None) -> str:
        suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((low, high))
        if suffix is None:
            suffix = f"{{{low},}}" if high is None else f"{{{low}}}" if low == high else f"{{{low},{high}}}"
        return f"({inner}){suffix}"


def _escaped(text: str) -> str:
    """GBNF for `text` as JSON writes it inside a string (a `\\u00XX` escape's hex letters in either case)."""
    parts: list[str] = []
    plain: list[str] = []
    for char in text:
        if char in _SHORT or char >= " ":
            plain.append(_SHORT.get(char, char))
            continue
        digits = f"{ord(char):04x}"
        plain.append("\\u" + digits[:3])
        last = digits[3]
        if last.isalpha():
            parts += [_string("".join(plain)), f"[{last}{last.upper()}]"]
            plain = []
        else:
            plain.append(last)
    if plain or not parts:
        parts.append(_string("".join(plain)))
    return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"


def _string(text: str) -> str:
    """A GBNF string literal holding exactly `text`."""
    out = []
    for char in text:
        if char == '"' or char == "\\":
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.append(_code(ord(char)))
    return '"' + "".join(out) + '"'


def _code(code: int) -> str:
    return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def _class(allowed: Intervals) -> str:
    """A GBNF character class for the set, negated when that is shorter."""
    outside = _complement(allowed)
    negate = len(outside) <= len(allowed)
    ranges = outside if negate else allowed
    body = "".join(_code(low) if low == high else f"{_code(low)}-{_code(high)}" for low, high in ranges)
    return f"[{'^' if negate else ''}{body}]"


def _set_of(items: list[tuple[Any, Any]]) -> Intervals:
    """The code points a parsed class matches (`\\d`, `\\w`, `\\s` as ASCII)."""
    from re import _constants as c  # type: ignore[attr-defined]

    negate = bool(items) and items[0][0] is c.NEGATE
    found: Intervals = []
    for op, value in items[1:] if negate else items:
        if op is c.LITERAL:
            found.append((value, value))
        elif op is c.RANGE:
            found.append(value)
        elif op is c.CATEGORY and value in _CATEGORIES:
            member, outside = _CATEGORIES[value]
            found += _complement(member) if outside else member
        else:
            raise JsonUnsupported(str(op))
    merged = _merge(found)
    return _complement(merged) if negate else merged


def _merge(intervals: Intervals) -> Intervals:
    out: Intervals = []
    for low, high in sorted(intervals):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _complement(intervals: Intervals) -> Intervals:
    out: Intervals = []
    start = 0
    for low, high in _merge(intervals):
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= _MAX:
        out.append((start, _MAX))
    return out


def _intersect(a: Intervals, b: Intervals) -> Intervals:
    return _complement(_complement(a) + _complement(b))


def _holds(intervals: Intervals, code: int) -> bool:
    return any(low <= code <= high for low, high in intervals)


def _categories() -> dict[Any, tuple[Intervals, bool]]:
    from re import _constants as c  # type: ignore[attr-defined]

    digit = [(0x30, 0x39)]
    word = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
    space = [(0x09, 0x0D), (0x20, 0x20)]
    return {
        c.CATEGORY_DIGIT: (digit, False),
        c.CATEGORY_NOT_DIGIT: (digit, True),
        c.CATEGORY_WORD: (word, False),
        c.CATEGORY_NOT_WORD: (word, True),
        c.CATEGORY_SPACE: (space, False),
        c.CATEGORY_NOT_SPACE: (space, True),
    }


_CATEGORIES = _categories()
