"""A Lark grammar's language inside a JSON string (tools/lark_json.py): for recursive grammars too, the rewritten
grammar takes exactly the JSON-escaped forms (as `json.dumps(…, ensure_ascii=False)` writes them) of what the
original takes. Checked with llguidance on both sides, on inputs drawn from the originals and on random texts full of
what JSON escapes."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_support import APPLY_PATCH, GOOD_PATCH
from hotloop.tools.grammar import Grammar, compile_grammar, matches, sample
from hotloop.tools.lark_json import json_string_rules

pytestmark = pytest.mark.fast

# Recursion (no regex can carry these), quotes, backslashes, control characters and classes of every kind.
NESTED = 'start: expr\nexpr: NUMBER | "(" expr (" + " expr)* ")" | STR\nNUMBER: /[0-9]{1,3}/\nSTR: /"[^"\\n]*"/\n'
TREE = (
    'start: node\nnode: NAME ("[" node ("," WS_INLINE? node)* "]")?\nNAME: /[\\w.\\\\-]+/\n%import common.WS_INLINE\n'
)
TEXTY = 'start: line+\nline: /[^\\n]*/ LF | TAB /\\S+/ LF\nTAB: "\\t"\n%import common.LF\n'
ANY = 'start: "<" /[^>]{0,8}/ ">" /./?'  # a class with every control character, then `.`
GRAMMARS = {"apply_patch": APPLY_PATCH, "nested": NESTED, "tree": TREE, "texty": TEXTY, "any": ANY}
ALPHABET = st.sampled_from(list('ab9 (")+,[]<>-.\\\t\n\r\x00\x1b\x7f*@éx'))


def dumps(text: str) -> str:
    """A JSON string as models write it: non-ASCII characters as they are."""
    return json.dumps(text, ensure_ascii=False)


def pair(definition: str) -> tuple[object, object]:
    """The original grammar's matcher and the rewritten one's (inside a JSON string's quotes)."""
    rules = json_string_rules(definition, "g")
    assert rules is not None, definition
    body, start = rules
    original = compile_grammar(Grammar("lark", definition))
    rewritten = compile_grammar(Grammar("lark", f'start: "\\"" {start} "\\""\n{body}'))
    assert not isinstance(original, str), original
    assert not isinstance(rewritten, str), rewritten
    return original, rewritten


@pytest.mark.parametrize("name", list(GRAMMARS))
def test_every_input_drawn_from_the_grammar_is_taken_json_escaped(name: str) -> None:
    original, rewritten = pair(GRAMMARS[name])
    rng = random.Random(7)
    for _ in range(40):
        text = sample(original, rng)  # type: ignore[arg-type]
        assert matches(original, text)  # type: ignore[arg-type]
        assert matches(rewritten, dumps(text)), (name, text)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["nested", "tree", "any"])
@settings(max_examples=150, deadline=None)
@given(text=st.text(ALPHABET, max_size=14))
def test_the_rewritten_grammar_takes_exactly_the_escaped_forms(name: str, text: str) -> None:
    original, rewritten = pair(GRAMMARS[name])
    assert matches(rewritten, dumps(text)) == matches(original, text), (name, text)  # type: ignore[arg-type]


def test_codex_patches_and_their_mutations() -> None:
    original, rewritten = pair(APPLY_PATCH)
    rng = random.Random(3)
    texts = [GOOD_PATCH, GOOD_PATCH.replace("Hello", 'say "hi"\\\t\x1b')]
    for _ in range(60):
        chars = list(rng.choice(texts))
        at = rng.randrange(len(chars))
        chars[at : at + rng.randrange(3)] = rng.choice(["", "\n", '"', "\\", "*", "\t", "x"])
        texts.append("".join(chars))
    for text in texts:
        # Codex's grammar is read by llguidance's greedy lexer; the rewritten one takes at least what it takes.
        if matches(original, text):  # type: ignore[arg-type]
            assert matches(rewritten, dumps(text)), text  # type: ignore[arg-type]


def test_only_the_escapes_json_dumps_writes() -> None:
    _, rewritten = pair(ANY)
    assert matches(rewritten, '"<\\u001b>"') and matches(rewritten, '"<\\u001B>"')  # type: ignore[arg-type]
    assert not matches(rewritten, '"<\\u0041>"')  # "A" written as an escape  # type: ignore[arg-type]
    assert not matches(rewritten, '"<\\/>"')  # type: ignore[arg-type]
    assert not matches(rewritten, '"<\n>"')  # a raw newline is not JSON  # type: ignore[arg-type]
    assert not matches(rewritten, '"<>\\n"')  # `.` is not a newline  # type: ignore[arg-type]
    assert matches(rewritten, '"<\\n\\t\\"\\\\>"')  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "definition",
    [
        'start: "a" WS\n%import common.WS\n%ignore WS',  # %ignore would reach into the call's JSON
        'start: "abc"i',
        "start: /abc/i",
        "start: /(?=a)a/",
        "start: /^a$/",
        "start: /(a)\\1/",
        "start: X\n%import common.ESCAPED_STRING -> X",
        'start: %json {"type": "string"}',
    ],
)
def test_what_is_not_read_gives_none(definition: str) -> None:
    assert json_string_rules(definition, "g") is None
