"""A Lark grammar without recursion as one regular expression (tools/lark_regex.py): the same language as the
grammar on what llguidance's sampler draws from it, and None for what it does not read."""

from __future__ import annotations

import random
import re

import pytest

from grammar_support import APPLY_PATCH, BAD_PATCHES, GOOD_PATCH
from hotloop.tools.grammar import Grammar, compile_grammar, matches, sample
from hotloop.tools.lark_regex import lark_to_regex

pytestmark = pytest.mark.fast


def test_codex_apply_patch_is_one_regex_of_the_same_language() -> None:
    pattern = lark_to_regex(APPLY_PATCH)
    assert pattern is not None
    matcher = compile_grammar(Grammar("lark", APPLY_PATCH))
    assert not isinstance(matcher, str)
    rng = random.Random(7)
    for _ in range(40):
        text = sample(matcher, rng, 200)
        assert re.fullmatch(pattern, text), text
    assert re.fullmatch(pattern, GOOD_PATCH)
    for bad in BAD_PATCHES:
        assert bool(re.fullmatch(pattern, bad)) == matches(matcher, bad), bad
    # The regex is one llguidance takes too (the JSON schema's `pattern` of a forced call).
    assert not isinstance(compile_grammar(Grammar("regex", pattern)), str)


@pytest.mark.parametrize(
    ("definition", "text", "expected"),
    [
        ('start: "a" ~ 2..3 ["b"] /c+/', "aabccc", True),
        ('start: "a" ~ 2..3 ["b"] /c+/', "abccc", False),
        ('start: x+\nx: DIGIT | "-"\n%import common.DIGIT', "12-3", True),
        ('# a comment\n// another\nstart: ("x" | "y")* -> both', "xyx", True),
        ('start: "a.b"', "axb", False),  # literals are literal
    ],
)
def test_small_grammars(definition: str, text: str, expected: bool) -> None:
    pattern = lark_to_regex(definition)
    assert pattern is not None and bool(re.fullmatch(pattern, text)) is expected


@pytest.mark.parametrize(
    "definition",
    [
        'start: a\na: "(" a ")" | "x"',  # recursion: not regular
        "start: WORD+\n%import common.WORD\n%ignore WS",  # %ignore
        "start: /x/i",  # flags
        "start: missing",  # a name nothing defines
        'start: "a" {',  # what the reader does not know
    ],
)
def test_what_it_does_not_read_gives_none(definition: str) -> None:
    assert lark_to_regex(definition) is None
