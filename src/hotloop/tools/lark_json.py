"""A Lark grammar's language as the content of a JSON string: the same grammar with every terminal rewritten into its
JSON-escaped form, so that llguidance can hold a custom call's input to any Lark grammar (recursive ones too) while
the model writes it inside the call's JSON, where a regex (tools/lark_regex.py) can only carry grammars without
recursion.

Why this works: JSON's string escaping maps each character to a fixed text (`"` → `\\"`, a newline → `\\n`, a
control character → `\\u00XX`, any other character to itself), so it maps a concatenation to the concatenation of the
mapped parts, an alternation to the alternation, a repetition to the repetition. Rewriting each string and regex of
the grammar therefore rewrites its whole language. Each character is written in the one form `json.dumps` writes
with `ensure_ascii=False` (`\\u001b`, hex digits in either case; other characters as they are), the form models write.

Why regexes become rules: llguidance's lexer is greedy and does not backtrack, and escaped forms share a first
character (`\\`): a regex lexeme such as `[^\\n]*`, escaped, would take the `\\` of a following `\\n` as the start of
one of its own escapes and fail on the `n`. So a regex is rewritten into rule syntax with one lexeme per character
(its raw characters, or one escape: all of fixed length), and terminal definitions become rules. The grammar's
language is kept; what llguidance's greedy lexing of the original refuses beyond it is still refused afterwards by the
check of the written input (tools/grammar.py), which stays the judge.

Read: rules and terminals, strings and `/regex/` (no flags), `%import common.X` (lark_regex.COMMON). Anything else
(`%ignore`, which would apply to the call's JSON too, other directives, flags, lookarounds, anchors, backreferences)
gives None.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from typing import Any, Protocol

from hotloop.tools.lark_regex import COMMON

_SCAN = re.compile(
    r"""(?P<comment>(?://|\#)[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*")(?P<sflags>[a-zA-Z]*)
      | (?P<regex>/(?:[^/\\\n]|\\.)+/)(?P<rflags>[a-zA-Z]*)
      | (?P<directive>%[^\n]*)
      | (?P<name>[_a-zA-Z][_a-zA-Z0-9]*)(?P<priority>\.-?\d+(?=\s*:))?
      | (?P<other>[\s\S])""",
    re.VERBOSE,
)
_IMPORT = re.compile(r"%import\s+common\.([A-Z_]+)\s*$")
SPECIAL = [chr(code) for code in range(0x20)] + ['"', "\\"]  # the characters JSON writes escaped
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_RAW = '"\\\\\\x{0}-\\x{1F}'  # inside a class: what never appears raw in a JSON string


class Unsupported(Exception):
    pass


@lru_cache(maxsize=64)
def json_string_rules(definition: str, prefix: str) -> tuple[str, str] | None:
    """The grammar's rules, every name prefixed with `prefix_` (a terminal `NAME` becoming the rule
    `prefix_t_name`) and every string and regex JSON-escaped, and the name of its start rule; None when the grammar
    uses what is not read here."""
    out: list[str] = []
    try:
        for match in _SCAN.finditer(definition):
            out.append(_rewritten(match, prefix))
    except (Unsupported, ValueError, SyntaxError, re.error, OverflowError, RecursionError):
        return None
    return "".join(out), f"{prefix}_start"


def _rewritten(match: re.Match[str], prefix: str) -> str:
    if match.group("comment") is not None:
        return ""
    if match.group("string") is not None:
        if match.group("sflags"):
            raise Unsupported("string flags")
        return _lexeme(_escaped_literal(ast.literal_eval(match.group("string"))))
    if match.group("regex") is not None:
        if match.group("rflags"):
            raise Unsupported("regex flags")
        return escaped_rule(match.group("regex")[1:-1].replace("\\/", "/"))
    if match.group("directive") is not None:
        found = _IMPORT.match(match.group("directive"))
        if found is None or found.group(1) not in COMMON:
            raise Unsupported(match.group("directive"))
        name = found.group(1)
        return f"{_name(name, prefix)}: {escaped_rule(COMMON[name])}"
    if match.group("name") is not None:
        return _name(match.group("name"), prefix)
    return match.group(0)


def _name(name: str, prefix: str) -> str:
    """A rule's name: a terminal becomes a rule too (Lark's terminals are upper case, rules lower case)."""
    return f"{prefix}_t_{name.lower()}" if name.isupper() else f"{prefix}_{name}"


def _lexeme(pattern: str) -> str:
    return f"/{pattern}/"


class Emitter(Protocol):
    """How a rewritten regex is written in the target grammar (here llguidance's Lark; tools/lark_gbnf.py: GBNF)."""

    def literal(self, text: str) -> str:
        """A run of literal characters."""
        ...

    def char_set(self, items: list[tuple[Any, Any]]) -> str:
        """A character class (`re`'s parsed items, NEGATE first when negated)."""
        ...

    def repeat(self, inner: str, low: int, high: int | None) -> str:
        """`inner` repeated `low` to `high` times (None: no bound)."""
        ...


class _LarkJson:
    """llguidance's Lark: one lexeme per escaped literal or character."""

    def literal(self, text: str) -> str:
        return _lexeme(_escaped_literal(text))

    def char_set(self, items: list[tuple[Any, Any]]) -> str:
        return _lexeme(_char_set(items))

    def repeat(self, inner: str, low: int, high: int | None) -> str:
        return f"({inner}){{{low},{'' if high is None else high}}}"


LARK = _LarkJson()


def escaped_rule(pattern: str, emit: Emitter = LARK) -> str:
    """A rule expression for the JSON-escaped forms of the strings `pattern` matches: one lexeme per character."""
    from re import _parser  # type: ignore[attr-defined]

    return f"({_sequence(_parser.parse(pattern), emit)})"


def _sequence(items: Any, emit: Emitter) -> str:
    """Runs of literal characters as one lexeme each (an escaped literal is a fixed text), the rest item by item."""
    from re import _constants as c  # type: ignore[attr-defined]

    parts: list[str] = []
    run: list[str] = []
    for op, value in items:
        if op is c.LITERAL:
            run.append(chr(value))
            continue
        if run:
            parts.append(emit.literal("".join(run)))
            run = []
        parts.append(_item(op, value, emit))
    if run:
        parts.append(emit.literal("".join(run)))
    if not parts:
        raise Unsupported("an empty alternative")
    return " ".join(parts)


def _item(op: Any, value: Any, emit: Emitter) -> str:
    from re import _constants as c  # type: ignore[attr-defined]

    if op in (c.NOT_LITERAL, c.ANY, c.IN):
        items = [(c.NEGATE, None), (c.LITERAL, value)] if op is c.NOT_LITERAL else value
        if op is c.ANY:
            items = [(c.NEGATE, None), (c.LITERAL, ord("\n"))]
        return emit.char_set(items)
    if op is c.BRANCH:
        return "(" + " | ".join(_sequence(branch, emit) for branch in value[1]) + ")"
    if op is c.SUBPATTERN:
        _group, add_flags, del_flags, inner = value
        if add_flags or del_flags:
            raise Unsupported("inline flags")
        return f"({_sequence(inner, emit)})"
    if op in (c.MAX_REPEAT, c.MIN_REPEAT):  # a lazy repeat matches the same language
        low, high, inner = value
        return emit.repeat(_sequence(inner, emit), low, None if high is c.MAXREPEAT else high)
    raise Unsupported(str(op))  # anchors, lookarounds, backreferences, possessive repeats


def _char_set(items: list[tuple[Any, Any]]) -> str:
    """A character class: the characters it holds that JSON writes raw, as a class, or'd with the escaped forms of
    those it holds that JSON escapes."""
    from re import _constants as c  # type: ignore[attr-defined]

    negate = bool(items) and items[0][0] is c.NEGATE
    body = "".join(_class_item(op, value) for op, value in (items[1:] if negate else items))
    source = _python_class(items)
    escapes = [_escaped_literal(char) for char in SPECIAL if source.fullmatch(char)]
    raw = f"[^{body}{_RAW}]" if negate else f"[[{body}]&&[^{_RAW}]]"
    return "(?:" + "|".join([raw, *escapes]) + ")"


def _class_item(op: Any, value: Any) -> str:
    from re import _constants as c  # type: ignore[attr-defined]

    if op is c.LITERAL:
        return f"\\x{{{value:X}}}"
    if op is c.RANGE:
        return f"\\x{{{value[0]:X}}}-\\x{{{value[1]:X}}}"
    if op is c.CATEGORY:
        names = {
            c.CATEGORY_DIGIT: "\\d",
            c.CATEGORY_NOT_DIGIT: "\\D",
            c.CATEGORY_SPACE: "\\s",
            c.CATEGORY_NOT_SPACE: "\\S",
            c.CATEGORY_WORD: "\\w",
            c.CATEGORY_NOT_WORD: "\\W",
        }
        if value in names:
            return names[value]
    raise Unsupported(str(op))


def _python_class(items: list[tuple[Any, Any]]) -> re.Pattern[str]:
    """The same class for Python's `re`, to ask which of the characters JSON escapes it holds."""
    from re import _constants as c  # type: ignore[attr-defined]

    negate = bool(items) and items[0][0] is c.NEGATE
    body = "".join(_class_item(op, value) for op, value in (items[1:] if negate else items))
    body = re.sub(r"\\x\{([0-9A-F]+)\}", lambda found: f"\\U{int(found.group(1), 16):08X}", body)
    return re.compile(f"[{'^' if negate else ''}{body}]")


def _escaped_literal(text: str) -> str:
    """A regex matching exactly `text` as JSON writes it inside a string."""
    parts = []
    for char in text:
        if char in _SHORT:
            written = _SHORT[char]
        elif char < " ":
            written = f"\\u00{ord(char):02x}"
        else:
            written = char
        for piece in written:
            hex_digit = piece.isalpha() and written.startswith("\\u") and piece in "abcdef"
            parts.append(f"[{piece}{piece.upper()}]" if hex_digit else f"\\x{{{ord(piece):X}}}")
    return "".join(parts)
