"""A custom tool's grammar as GBNF for a forced Hermes call's whole output (tools/lark_gbnf.py): the call as
`json.dumps` writes it, its input the grammar's language JSON-escaped. The oracle is the tool's own grammar compiled
by llguidance: inputs drawn from it, and the bad ones it refuses, judged again through the GBNF (parsed back by
llguidance, and by the llama.cpp that llama-cpp-python vendors)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from grammar_support import APPLY_PATCH, BAD_PATCHES, GOOD_PATCH, PHONE
from hotloop.backends.upstream.constraints import _gbnf_matcher, _gbnf_parses
from hotloop.tools.grammar import Grammar, compile_grammar, matches, sample
from hotloop.tools.lark_gbnf import forced_call

pytestmark = pytest.mark.fast

# Recursive (no regex carries it), and with characters JSON escapes in its language: `"`, `\`, a tab.
NESTED = 'start: item\nitem: WORD | "[" item ("," item)* "]" | "\\"" WORD "\\"" | "\\\\" TAB\nWORD: /[a-z]{1,4}/\n'
NESTED += "TAB: /\\t/\n"
# `.`, a negated class, `\d`, `\s` and a bounded repeat: the classes JSON escapes part of.
CLASSES = r'q"[^x]\d{2,}\s.'


def _call(tool: str, text: str) -> str:
    return json.dumps({"name": tool, "input": text}, ensure_ascii=False)


def _gbnf(syntax: str, definition: str) -> Any:
    gbnf = forced_call("t", syntax, definition)
    assert gbnf is not None and _gbnf_parses(gbnf), gbnf
    matcher = _gbnf_matcher(gbnf)
    assert matcher is not None
    return matcher


def test_codex_apply_patch_as_the_forced_calls_gbnf() -> None:
    matcher = _gbnf("lark", APPLY_PATCH)
    assert matches(matcher, _call("t", GOOD_PATCH))
    for bad in BAD_PATCHES:
        assert not matches(matcher, _call("t", bad)), bad
    assert not matches(matcher, '{"name": "t", "input": "' + GOOD_PATCH + '"}')  # newlines unescaped
    assert not matches(matcher, _call("other", GOOD_PATCH))  # the forced tool only


@pytest.mark.parametrize(("syntax", "definition"), [("lark", APPLY_PATCH), ("lark", NESTED), ("regex", CLASSES)])
def test_what_the_grammar_takes_the_gbnf_takes_escaped(syntax: str, definition: str) -> None:
    own = compile_grammar(Grammar(syntax=syntax, definition=definition))
    assert not isinstance(own, str), own
    matcher = _gbnf(syntax, definition)
    for seed in range(12):
        text = sample(own, random.Random(seed))
        assert matches(own, text), text
        assert matches(matcher, _call("t", text)), text


def test_characters_json_escapes_are_held_to_their_escaped_form() -> None:
    matcher = _gbnf("regex", CLASSES)
    assert matches(matcher, _call("t", 'q"\\42 \u00e9'))
    assert matches(matcher, _call("t", 'q"\n42\t"'))  # `[^x]` takes a newline; `.` a quote
    assert not matches(matcher, _call("t", 'q"x42 a'))  # the class refuses `x`
    assert not matches(matcher, _call("t", 'q"a42 \n'))  # `.` refuses a newline
    assert not matches(matcher, _call("t", 'q"a4 a'))  # `\d{2,}`
    phone = _gbnf("regex", PHONE)
    assert matches(phone, _call("t", "123-4567")) and not matches(phone, _call("t", "123-456"))


def test_llama_cpp_parses_the_gbnf() -> None:
    """llama.cpp fails a request whose grammar it cannot parse: the vendored parser takes each one."""
    from llama_cpp import LlamaGrammar

    for syntax, definition in (("lark", APPLY_PATCH), ("lark", NESTED), ("regex", CLASSES)):
        gbnf = forced_call("t", syntax, definition)
        assert gbnf is not None
        LlamaGrammar.from_string(gbnf, verbose=False)


@pytest.mark.parametrize(
    "definition",
    [
        'start: WORD\nWORD: /[a-z]+/\n%ignore " "\n',  # %ignore would apply to the call's JSON too
        'start: "a"i\n',  # a string flag
        "start: /a/i\n",  # a regex flag
        "start: missing\n",  # a rule nothing defines
        'start: "a".."z"\n',  # a range of strings
        "start: /^a$/\n",  # anchors
    ],
)
def test_what_is_not_read_gives_none(definition: str) -> None:
    assert forced_call("t", "lark", definition) is None
