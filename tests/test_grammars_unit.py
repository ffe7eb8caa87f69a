"""Custom tools' grammars without a server (tools/grammar.py, pipeline/grammars.py): the `format` at the door,
compiling with llguidance and its messages, the streaming input check, the sampler hotloop-sim draws from (checked
against oracles that do not use llguidance), the compile cache and the time bound."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples_support import examples
from grammar_support import ANSWER, APPLY_PATCH, BAD_PATCHES, DATE, GOOD_PATCH, PHONE, REGEXES, patch_ok
from hotloop.errors import InvalidParam
from hotloop.pipeline import grammars as pipeline_grammars
from hotloop.pipeline.grammars import check_grammars, input_checks
from hotloop.pipeline.tools import resolve_tools
from hotloop.tools import grammar as grammar_module
from hotloop.tools.grammar import MAX_DEFINITION, Grammar, InputCheck, compile_grammar, declared, matches, sample
from hotloop.tools.spec import ToolSpec
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.response import Response, Usage

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

PARAM = "tools[0].format"
CODEX = Grammar(syntax="lark", definition=APPLY_PATCH)


def compiled(syntax: str, definition: str) -> Any:
    matcher = compile_grammar(Grammar(syntax=syntax, definition=definition))  # type: ignore[arg-type]
    assert not isinstance(matcher, str), matcher
    return matcher


def refused(raw: Any, param: str = PARAM) -> InvalidParam:
    with pytest.raises(InvalidParam) as caught:
        declared(raw, param)
    return caught.value


# --- the format at the door ---------------------------------------------------------------------------------------


def test_text_or_no_format_means_no_grammar() -> None:
    assert declared(None, PARAM) is None
    assert declared({"type": "text"}, PARAM) is None


@pytest.mark.parametrize("syntax", ["lark", "regex"])
def test_a_grammar_is_kept_as_written(syntax: str) -> None:
    raw = {"type": "grammar", "syntax": syntax, "definition": "start: /a+/" if syntax == "lark" else "a+"}
    assert declared(raw, PARAM) == Grammar(syntax=syntax, definition=raw["definition"])


@pytest.mark.parametrize(
    ("raw", "param", "code"),
    [
        ("text", PARAM, "invalid_type"),
        (["grammar"], PARAM, "invalid_type"),
        ({}, f"{PARAM}.type", "invalid_value"),
        ({"type": "json_schema"}, f"{PARAM}.type", "invalid_value"),
        ({"type": "grammar", "definition": "a"}, f"{PARAM}.syntax", "invalid_value"),
        ({"type": "grammar", "syntax": "ebnf", "definition": "a"}, f"{PARAM}.syntax", "invalid_value"),
        ({"type": "grammar", "syntax": "LARK", "definition": "a"}, f"{PARAM}.syntax", "invalid_value"),
        ({"type": "grammar", "syntax": "regex"}, f"{PARAM}.definition", "invalid_value"),
        ({"type": "grammar", "syntax": "regex", "definition": ""}, f"{PARAM}.definition", "invalid_value"),
        ({"type": "grammar", "syntax": "lark", "definition": " \n"}, f"{PARAM}.definition", "invalid_value"),
        ({"type": "grammar", "syntax": "lark", "definition": ["start: a"]}, f"{PARAM}.definition", "invalid_value"),
    ],
)
def test_a_malformed_format_names_its_field(raw: Any, param: str, code: str) -> None:
    error = refused(raw)
    assert (error.param, error.code, error.status) == (param, code, 400)


def test_the_size_cap_counts_bytes() -> None:
    at_cap = "a" * MAX_DEFINITION
    assert declared({"type": "grammar", "syntax": "regex", "definition": at_cap}, PARAM) is not None
    for over in ("a" * (MAX_DEFINITION + 1), "é" * (MAX_DEFINITION // 2 + 1)):  # the second: few characters
        error = refused({"type": "grammar", "syntax": "regex", "definition": over})
        assert (error.param, error.code) == (f"{PARAM}.definition", "invalid_value")
        assert str(MAX_DEFINITION) in error.message


def test_resolved_tools_name_each_grammar_by_its_place() -> None:
    lark = {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH}
    patch = {"type": "custom", "name": "patch", "format": lark}
    tools: list[dict[str, Any]] = [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "apply_patch", "format": lark},
        {"type": "custom", "name": "free", "format": {"type": "text"}},
        {"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "custom", "name": "g"}, patch]},
    ]
    resolved = resolve_tools(tools)
    assert [param for param, _ in resolved.grammars] == [
        "tools[1].format.definition",
        "tools[3].tools[1].format.definition",
    ]
    assert {grammar for _, grammar in resolved.grammars} == {CODEX}
    bad = {"type": "custom", "name": "g", "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}}
    with pytest.raises(InvalidParam) as caught:
        resolve_tools([{"type": "namespace", "name": "ns", "description": "d", "tools": [bad]}])
    assert caught.value.param == "tools[0].tools[0].format.syntax"


# --- compiling ------------------------------------------------------------------------------------------------------


def test_codex_grammar_compiles_and_judges_patches() -> None:
    matcher = compiled("lark", APPLY_PATCH)
    assert matches(matcher, GOOD_PATCH) and patch_ok(GOOD_PATCH)
    assert matches(matcher, GOOD_PATCH.removesuffix("\n"))  # the last newline is optional
    for bad in BAD_PATCHES:
        assert not matches(matcher, bad) and not patch_ok(bad), bad


EXAMPLES = {PHONE: ("555-0123", "555-012"), ANSWER: ("no way out", "yes a b c d"), DATE: ("2024-02-29", "2024-13-01")}


@pytest.mark.parametrize("regex", REGEXES)
def test_regexes_compile_and_match_whole_inputs(regex: str) -> None:
    matcher = compiled("regex", regex)
    good, wrong = EXAMPLES[regex]
    assert matches(matcher, good)
    for bad in (wrong, good + " ", " " + good, "", "x" + good):
        assert not matches(matcher, bad) and re.fullmatch(regex, bad) is None


@pytest.mark.parametrize(
    ("syntax", "definition", "where", "says"),
    [
        ("lark", "start: foo\nfoo: LF", "2(6)", 'unknown name: "LF"'),
        ("lark", 'start: "a" (b | \nb: "x"\n', "1(17)", "Expected token ')'"),
        ("lark", 'start: begin_patch hunk+\nbegin_patch: "x"\n', "1(8)", 'unknown name: "hunk"'),
        ("lark", "start: /(ab/\n", "1(8)", "unclosed group"),
        ("regex", "(ab", "", "unclosed group"),
        ("regex", "a{3,1}", "", "invalid repetition count range"),
        ("regex", "[z-a]", "", "invalid character class range"),
    ],
)
def test_a_malformed_grammar_gives_the_compilers_message(syntax: str, definition: str, where: str, says: str) -> None:
    message = compile_grammar(Grammar(syntax=syntax, definition=definition))  # type: ignore[arg-type]
    assert isinstance(message, str) and says in message and where in message, message


def test_an_equal_grammar_is_compiled_once() -> None:
    definition = r"cache-\d+-" + str(time.monotonic_ns())  # not compiled before in this process
    first = compile_grammar(Grammar(syntax="regex", definition=definition))
    before = compile_grammar.cache_info()
    again = compile_grammar(Grammar(syntax="regex", definition=str(definition)))  # an equal, separate object
    after = compile_grammar.cache_info()
    assert again is first
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


# --- the streaming check ------------------------------------------------------------------------------------------

PIECES_OF = st.sampled_from([GOOD_PATCH, *BAD_PATCHES, GOOD_PATCH.replace("hello", "héllo ✓")])


@settings(max_examples=examples(200), deadline=None)
@given(text=PIECES_OF, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_fed_in_pieces_the_check_equals_the_whole_text_check(text: str, cuts: list[int]) -> None:
    matcher = compiled("lark", APPLY_PATCH)
    bounds = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    check = InputCheck(matcher)
    for start, end in itertools.pairwise(bounds):
        check.feed(text[start:end])
    assert check.matches() == matches(matcher, text) == patch_ok(text)


def test_a_check_leaves_the_compiled_matcher_untouched() -> None:
    matcher = compiled("lark", APPLY_PATCH)
    spoiled = InputCheck(matcher)
    spoiled.feed("nonsense")
    spoiled.feed(GOOD_PATCH)
    assert not spoiled.matches()
    partial = InputCheck(matcher)
    partial.feed(GOOD_PATCH[:40])
    assert not partial.matches()  # a prefix is no sentence
    assert matches(matcher, GOOD_PATCH)


NAME = st.sampled_from(["a.txt", "src/m.py", "dir with space/é.md", " ", ""])  # "": no file name
TEXT = st.sampled_from(["", "x = 1", "*** End Patch", "@@ f", "\t"])
ADD = st.builds(lambda name, lines: [f"*** Add File: {name}", *(f"+{line}" for line in lines)], NAME, st.lists(TEXT))
DELETE = st.builds(lambda name: [f"*** Delete File: {name}"], NAME)
CHANGE = st.just("@@") | st.builds("@@ {}".format, TEXT) | st.builds("{}{}".format, st.sampled_from("+- "), TEXT)
UPDATE = st.builds(
    lambda name, moved, changes, end: [
        f"*** Update File: {name}",
        *([f"*** Move to: {moved}"] if moved is not None else []),
        *changes,
        *(["*** End of File"] if end else []),
    ],
    NAME,
    st.none() | NAME,
    st.lists(CHANGE, max_size=4),
    st.booleans(),
)
STRAY = st.sampled_from(["*** Begin Patch", "*** End Patch", "*** Add File:", "*** End of File", "@@ ", "", "text"])


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data(), hunks=st.lists(st.one_of(ADD, DELETE, UPDATE), max_size=4), newline=st.booleans())
def test_the_check_agrees_with_an_oracle_on_patch_like_texts(
    data: st.DataObject, hunks: list[list[str]], newline: bool
) -> None:
    """Patches built from the grammar's parts, some with a line dropped or a stray line put in: llguidance and the
    hand oracle agree on each, valid or not."""
    lines = ["*** Begin Patch", *(line for hunk in hunks for line in hunk), "*** End Patch"]
    where = data.draw(st.integers(0, len(lines) - 1))
    mutation = data.draw(st.sampled_from(["none", "none", "drop", "stray"]))
    if mutation == "drop":
        del lines[where]
    elif mutation == "stray":
        lines.insert(where, data.draw(STRAY))
    text = "\n".join(lines) + ("\n" if newline else "")
    assert matches(compiled("lark", APPLY_PATCH), text) == patch_ok(text), text


@pytest.mark.parametrize("regex", REGEXES)
@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_the_check_agrees_with_python_re(regex: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(regex, fullmatch=True, alphabet=st.characters(codec="utf-8")))
    assert matches(compiled("regex", regex), text), text
    noise = data.draw(st.text(alphabet="0123456789-aeinosywz ", max_size=16))
    assert matches(compiled("regex", regex), noise) == (re.fullmatch(regex, noise) is not None), noise


# --- drawing a sample (hotloop-sim) ------------------------------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_sample_of_codex_grammar_is_a_patch(seed: int) -> None:
    matcher = compiled("lark", APPLY_PATCH)
    text = sample(matcher, random.Random(seed))
    assert matches(matcher, text) and patch_ok(text), text


@pytest.mark.parametrize("regex", REGEXES)
@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_sample_of_a_regex_matches_it(regex: str, seed: int) -> None:
    matcher = compiled("regex", regex)
    text = sample(matcher, random.Random(seed))
    assert matches(matcher, text) and re.fullmatch(regex, text) is not None, text


def test_samples_are_seeded_and_bounded() -> None:
    matcher = compiled("lark", APPLY_PATCH)
    draws = [sample(matcher, random.Random(seed)) for seed in range(examples(40))]
    assert draws == [sample(matcher, random.Random(seed)) for seed in range(examples(40))]
    assert len(set(draws)) > len(draws) // 2  # they differ
    assert all(len(text.encode()) < 2000 for text in draws)
    assert sum("*** Add File: " in text or "*** Update File: " in text for text in draws) > len(draws) // 4
    short = sample(matcher, random.Random(0), max_bytes=20)  # past the budget it heads for the shortest end
    assert matches(matcher, short) and patch_ok(short)


# --- the door: compiled on big-stack threads, in time ------------------------------------------------------------


async def test_check_grammars_refuses_the_first_that_does_not_compile() -> None:
    good = ("tools[0].format.definition", CODEX)
    bad = ("tools[2].tools[1].format.definition", Grammar(syntax="regex", definition="(ab"))
    await check_grammars([good])
    with pytest.raises(InvalidParam) as caught:
        await check_grammars([good, bad])
    assert caught.value.param == bad[0] and caught.value.code == "invalid_value"
    assert caught.value.message.startswith("The grammar does not compile:") and "unclosed group" in caught.value.message


async def test_a_deep_grammar_compiles_on_the_big_stack_threads() -> None:
    # ~2500 nested rules, just under the cap: on a default 8 MB stack llguidance 1.9 overflows it (SIGSEGV).
    rules = 2500
    deep = "start: r0\n" + "".join(f'r{i}: "(" r{i + 1} ")" | "x"\n' for i in range(rules)) + f'r{rules}: "y"\n'
    assert MAX_DEFINITION - 1024 < len(deep.encode()) <= MAX_DEFINITION
    await check_grammars([("tools[0].format.definition", Grammar(syntax="lark", definition=deep))])


async def test_a_compile_past_the_time_bound_is_refused_and_the_loop_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def stuck(grammar: Grammar) -> str:
        release.wait(10)
        return "late"

    monkeypatch.setattr(pipeline_grammars, "compile_grammar", stuck)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(tick())
    started = time.perf_counter()
    try:
        with pytest.raises(InvalidParam) as caught:
            await check_grammars([("tools[1].format.definition", Grammar(syntax="regex", definition="x"))], 0.3)
    finally:
        release.set()
        ticker.cancel()
    elapsed = time.perf_counter() - started
    assert caught.value.param == "tools[1].format.definition" and "did not compile within 0.3 s" in caught.value.message
    assert 0.3 <= elapsed < 1.5 and ticks > 20  # the loop kept turning while the compile hung


def test_an_unexpected_compiler_error_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """Raised on the compile's own thread, it is raised again to whoever asked (and nothing is cached)."""

    def broken(grammar: Grammar) -> str:
        raise KeyError(grammar.definition)

    monkeypatch.setattr(grammar_module, "_compile", broken)
    unique = Grammar(syntax="regex", definition=f"unexpected-{time.monotonic_ns()}")
    with pytest.raises(KeyError):
        compile_grammar(unique)
    monkeypatch.undo()
    assert not isinstance(compile_grammar(unique), str)


async def test_check_grammars_hands_an_unexpected_error_to_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(grammar: Grammar) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(pipeline_grammars, "compile_grammar", broken)
    with pytest.raises(RuntimeError, match="boom"):
        await check_grammars([("tools[0].format.definition", CODEX)])


# --- the builder: a call its grammar refuses is incomplete -------------------------------------------------------


@pytest.mark.parametrize(("text", "status"), [(GOOD_PATCH, "completed"), (BAD_PATCHES[0], "incomplete")])
def test_a_custom_call_is_incomplete_when_its_grammar_refuses_the_input(text: str, status: str) -> None:
    checks = input_checks([ToolSpec(name="apply_patch", kind="custom", grammar=CODEX), ToolSpec(name="free")])
    builder = ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"), None, checks=checks)
    events = builder.tool_call_start("apply_patch", "custom", None)
    for start in range(0, len(text), 7):
        events += builder.tool_call_delta(text[start : start + 7])
    events += builder.tool_call_end()
    events += builder.finish("completed", Usage.of(1, 0, 1))
    item = json.loads(events[-1].data)["response"]["output"][0]
    assert (item["type"], item["input"], item["status"]) == ("custom_tool_call", text, status)


def test_no_grammar_no_check() -> None:
    assert input_checks([ToolSpec(name="free", kind="custom"), ToolSpec(name="f")]) is None
    checks = input_checks([ToolSpec(name="p", kind="custom", grammar=CODEX, namespace="ns")])
    assert checks is not None and checks("p", None) is None and checks("p", "ns") is not None
