"""A Lark grammar without recursion as one regular expression: what a JSON schema's string `pattern` can carry, so a
backend that constrains decoding by JSON schema (llguidance in-process, an engine's JSON-schema option) holds a
custom call's input to it inside the call's JSON, escaping included. Codex's `apply_patch` grammar is such a grammar.

Only the part of Lark that such grammars use is read: rules and terminals (`name: …`, `NAME: …`, priorities
dropped), alternatives, `->` aliases, groups, `[optional]`, `? * +`, `~ n` / `~ n..m`, strings and `/regex/`, and
`%import common.X` of the common terminals below. Anything else (recursion, `%ignore`, templates, flags) gives
None: the grammar is then only checked once the input is written (tools/grammar.py), which stays the judge either
way.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache

# Lark's `common` terminals a grammar may import (lark/grammars/common.lark).
COMMON = {
    "LF": r"\n",
    "CR": r"\r",
    "NEWLINE": r"(?:\r?\n)+",
    "WS_INLINE": r"(?:[ \t])+",
    "WS": r"(?:[ \t\f\r\n])+",
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "LETTER": r"[a-zA-Z]",
    "WORD": r"[a-zA-Z]+",
    "CNAME": r"[_a-zA-Z][_a-zA-Z0-9]*",
}
TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<regex>/(?:[^/\\\n]|\\.)+/[a-z]*)
      | (?P<repeat>~\s*\d+(?:\s*\.\.\s*\d+)?)
      | (?P<alias>->\s*\w+)
      | (?P<name>[_a-zA-Z][_a-zA-Z0-9]*)
      | (?P<op>[|()\[\]?*+])
    )""",
    re.VERBOSE,
)
_DEFINITION = re.compile(r"^\s*(\??[_a-zA-Z][_a-zA-Z0-9]*)(?:\.-?\d+)?\s*:(.*)$")
MAX_PATTERN = 64 * 1024


class Unsupported(Exception):
    pass


_META = frozenset("\\.^$*+?()[]{}|/-")
_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _literal(text: str) -> str:
    """A literal as every regex dialect here reads it (Python's, llguidance's, an engine's ECMAScript): only
    metacharacters escaped (`re.escape` also escapes spaces and `#`, which some dialects refuse)."""
    out = []
    for char in text:
        if char in _CONTROL:
            out.append(_CONTROL[char])
        elif char in _META:
            out.append("\\" + char)
        elif ord(char) < 32:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


@lru_cache(maxsize=64)
def lark_to_regex(definition: str, start: str = "start") -> str | None:
    """The regular expression of `start`'s language, or None when the grammar is not of the kind read here."""
    try:
        rules = rules_of(definition)
        pattern = _Expander(rules).expand(start)
    except (Unsupported, RecursionError, ValueError, SyntaxError):
        return None
    return pattern if len(pattern) <= MAX_PATTERN else None


def rules_of(definition: str) -> dict[str, str]:
    rules: dict[str, str] = {}
    current: str | None = None
    for raw in definition.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith(("//", "#")):  # a comment line (a regex may hold `//`)
            continue
        if line.lstrip().startswith("%import"):
            for name in re.findall(r"common\.(\w+)", line):
                if name not in COMMON:
                    raise Unsupported(name)
                rules[name] = "/" + COMMON[name].replace("/", "\\/") + "/"
            continue
        if line.lstrip().startswith("%"):
            raise Unsupported(line)  # %ignore, %declare, %override: not a plain regular language
        found = _DEFINITION.match(line)
        if found is not None:
            current = found.group(1).lstrip("?")
            rules[current] = found.group(2)
        elif current is not None and line[:1].isspace():
            rules[current] += " " + line.strip()  # a continued alternative
        else:
            raise Unsupported(line)
    return rules


class _Expander:
    def __init__(self, rules: dict[str, str]) -> None:
        self.rules = rules
        self.done: dict[str, str] = {}
        self.open: set[str] = set()

    def expand(self, name: str) -> str:
        if name in self.done:
            return self.done[name]
        if name in self.open or name not in self.rules:
            raise Unsupported(name)  # recursion, or a name nothing defines
        self.open.add(name)
        tokens = [match for match in TOKEN.finditer(self.rules[name])]
        if "".join(match.group(0) for match in tokens).strip() != self.rules[name].strip():
            raise Unsupported(self.rules[name])  # something the tokenizer does not know
        parser = _Parser([(match.lastgroup or "", match.group(match.lastgroup or 0).strip()) for match in tokens], self)
        pattern = parser.alternatives()
        if parser.position != len(parser.tokens):
            raise Unsupported(name)
        self.open.discard(name)
        self.done[name] = pattern
        return pattern


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], expander: _Expander) -> None:
        self.tokens = tokens
        self.position = 0
        self.expander = expander

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def alternatives(self) -> str:
        branches = [self.sequence()]
        while (token := self._peek()) is not None and token == ("op", "|"):
            self.position += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    def sequence(self) -> str:
        parts: list[str] = []
        while (token := self._peek()) is not None and token not in (("op", "|"), ("op", ")"), ("op", "]")):
            if token[0] == "alias":
                self.position += 1
                continue
            parts.append(self.item())
        return "".join(parts)

    def item(self) -> str:
        atom = self.atom()
        token = self._peek()
        if token is not None and token[0] == "op" and token[1] in "?*+":
            self.position += 1
            return f"(?:{atom}){token[1]}"
        if token is not None and token[0] == "repeat":
            self.position += 1
            low, _, high = token[1][1:].replace(" ", "").partition("..")
            return f"(?:{atom}){{{low},{high or low}}}"
        return atom

    def atom(self) -> str:
        kind, text = self.tokens[self.position]
        self.position += 1
        if kind == "string":
            return _literal(ast.literal_eval(text))
        if kind == "regex":
            body, _, flags = text[1:].rpartition("/")
            if flags:
                raise Unsupported(text)
            re.compile(body)
            return f"(?:{body.replace(chr(92) + '/', '/')})"
        if kind == "name":
            return f"(?:{self.expander.expand(text)})"
        if (kind, text) in (("op", "("), ("op", "[")):
            inner = self.alternatives()
            closing = ")" if text == "(" else "]"
            if self._peek() != ("op", closing):
                raise Unsupported(text)
            self.position += 1
            return f"(?:{inner})" if text == "(" else f"(?:{inner})?"
        raise Unsupported(text)
