"""A custom tool's grammar (protocol.md §1.11): `format: {type: "grammar", syntax: "lark" | "regex", definition}`.

The call's `input` must match it. llguidance compiles Lark (Codex's `apply_patch` grammar as written) and regexes
in milliseconds, reports errors with line and column, and releases the GIL while it compiles. Here: the grammar's
shape at the door, compiling it (blocking CPU work: pipeline/grammars.py runs it off the event loop, bounded), a
streaming check of a call's input as it is written, and a sample drawn from it (hotloop-sim). The matchers run over
bytes (a tokenizer of 256 single-byte tokens), so every engine and tokenizer is checked the same way.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from hotloop.errors import InvalidParam

if TYPE_CHECKING:
    from llguidance import LLMatcher, LLTokenizer

MAX_DEFINITION = 64 * 1024  # bytes of a definition; past it the grammar is refused before anything compiles
CHECK_BUDGET_S = 0.05  # the most one call's input check may spend on the event loop, in all
_EOS = 256
# Bounds on the compiler's own work (llguidance `LLParserLimits`): a hostile grammar fails instead of running long.
_MAX_ITEMS_IN_ROW, _LEXER_FUEL, _MAX_GRAMMAR_SIZE = 2000, 2_000_000, 500_000


class Grammar(msgspec.Struct, frozen=True):
    syntax: Literal["lark", "regex"]
    definition: str


def declared(raw: Any, param: str) -> Grammar | None:
    """A custom tool's `format` (absent, `{type: "text"}` or a grammar), checked for shape; 400 naming the field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidParam("'format' must be an object.", param=param, code="invalid_type")
    kind = raw.get("type")
    if kind == "text":
        return None
    if kind != "grammar":
        raise InvalidParam("format.type must be 'text' or 'grammar'.", param=f"{param}.type")
    syntax, definition = raw.get("syntax"), raw.get("definition")
    if syntax not in ("lark", "regex"):
        raise InvalidParam("format.syntax must be 'lark' or 'regex'.", param=f"{param}.syntax")
    if not isinstance(definition, str) or not definition.strip():
        raise InvalidParam("format.definition must be a non-empty string.", param=f"{param}.definition")
    if len(definition.encode()) > MAX_DEFINITION:
        raise InvalidParam(
            f"format.definition is over {MAX_DEFINITION} bytes.", param=f"{param}.definition", code="invalid_value"
        )
    return Grammar(syntax=syntax, definition=definition)


@cache
def _bytes() -> LLTokenizer:
    """llguidance's view of text: one token per byte, and an end token."""
    from llguidance import LLTokenizer, TokenizerWrapper

    class Bytes:
        eos_token_id = _EOS
        bos_token_id = None
        tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
        special_token_ids = [_EOS]

        def __call__(self, text: str | bytes) -> list[int]:
            return list(text if isinstance(text, bytes) else text.encode())

    return LLTokenizer(TokenizerWrapper(Bytes()), slices=[])


@lru_cache(maxsize=128)
def compile_grammar(grammar: Grammar) -> LLMatcher | str:
    """The grammar's matcher at its start, or the compiler's message; kept for the next request with the same
    grammar (a WebSocket continuation resends its tools every turn). Blocking (GIL released): off the event loop
    (pipeline/grammars.py). Whoever misses the cache (the door, or the builder and hotloop-sim for a grammar evicted
    since), the compile runs on a big stack (`on_big_stack`)."""
    return on_big_stack(lambda: _compile(grammar))


def on_big_stack(work: Callable[[], T]) -> T:
    """`work()` on a thread of its own with a large stack, waited for: llguidance recurses on deeply nested rules
    when it compiles a grammar and overflows an 8 MB stack (a SIGSEGV that kills the server) on a chain of ~2,900
    rules, under the size cap. Its exception, if any, is raised here."""
    box: list[T | BaseException] = []

    def run() -> None:
        try:
            box.append(work())
        except BaseException as exc:  # raised to the caller, as the work on its own thread would
            box.append(exc)

    with _STACK_LOCK:
        previous = threading.stack_size(_COMPILE_STACK)
        try:
            thread = threading.Thread(target=run, name="hotloop-grammar-compile", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    result = box[0]
    if isinstance(result, BaseException):
        raise result
    return result


T = TypeVar("T")
_COMPILE_STACK = 64 * 1024 * 1024
_STACK_LOCK = threading.Lock()


def _compile(grammar: Grammar) -> LLMatcher | str:
    from llguidance import LLMatcher, LLParserLimits

    text = (
        LLMatcher.grammar_from_lark(grammar.definition)
        if grammar.syntax == "lark"
        else LLMatcher.grammar_from_regex(grammar.definition)
    )
    try:
        matcher = LLMatcher(
            _bytes(),
            text,
            log_level=0,
            limits=LLParserLimits(
                max_items_in_row=_MAX_ITEMS_IN_ROW,
                initial_lexer_fuel=_LEXER_FUEL,
                max_grammar_size=_MAX_GRAMMAR_SIZE,
            ),
        )
    except (ValueError, RuntimeError) as exc:
        return str(exc) or "the grammar does not compile"
    if matcher.is_error():
        return matcher.get_error() or "the grammar does not compile"
    return matcher


class InputCheck:
    """A call's input checked against its grammar as it is written: each piece costs its own bytes. The check
    runs where the input streams (the event loop), so its work is bounded: past `budget_s` in all (an ambiguous
    grammar's steps grow with the input) the input counts as not verified, and the call ends `incomplete`."""

    __slots__ = ("_left", "_matcher", "_ok")

    def __init__(self, matcher: LLMatcher, budget_s: float = CHECK_BUDGET_S) -> None:
        self._matcher = matcher.deep_copy()
        self._ok = True
        self._left = budget_s

    def feed(self, text: str) -> None:
        if not self._ok or not text:
            return
        started = time.perf_counter()
        self._ok = self._matcher.consume_tokens(list(text.encode()))
        self._left -= time.perf_counter() - started
        if self._left < 0:
            self._ok = False  # not verified in time: never handed out as valid

    def matches(self) -> bool:
        """Whether what was fed is a whole sentence of the grammar (checked within the budget)."""
        return self._ok and self._matcher.is_accepting()


def matches(matcher: LLMatcher, text: str) -> bool:
    check = InputCheck(matcher)
    check.feed(text)
    return check.matches()


_PRINTABLE = bytes(range(32, 127)) + b"\n"
_WORDY = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./")


def sample(matcher: LLMatcher, rng: random.Random, max_bytes: int = 400) -> str:
    """A text the grammar accepts, drawn at random (hotloop-sim's input for a custom tool with a grammar): a walk
    over the bytes the grammar allows next, letters and digits preferred, ending once it may; then the shortest
    way to an end. Deterministic for a seeded `rng`."""
    walker = matcher.deep_copy()
    out = bytearray()
    while len(out) < max_bytes:
        forced = walker.compute_ff_bytes()
        if forced:
            walker.consume_tokens(list(forced))
            out += forced
            continue
        allowed = _allowed(walker)
        if not allowed or (walker.is_accepting() and rng.random() < 0.25):
            break
        choice = _pick(allowed, rng)
        walker.consume_tokens([choice])
        out.append(choice)
    for _ in range(4 * max_bytes):  # toward an end: lines closed, markers (`*`, `@`, …) over words and spaces
        forced = walker.compute_ff_bytes()
        if forced:
            walker.consume_tokens(list(forced))
            out += forced
            continue
        if walker.is_accepting():
            break
        allowed = _allowed(walker)
        if not allowed:
            break
        if 10 not in allowed and walker.deep_copy().consume_tokens(list(_ESCAPED_NEWLINE)):
            walker.consume_tokens(list(_ESCAPED_NEWLINE))  # a JSON-escaped grammar's line end (tools/lark_gbnf.py)
            out += _ESCAPED_NEWLINE
            continue
        marks = [byte for byte in allowed if byte not in _WORDY and byte in _PRINTABLE]
        choice = 10 if 10 in allowed else rng.choice(marks or allowed)
        walker.consume_tokens([choice])
        out.append(choice)
    return out.decode("utf-8", "replace")


_ESCAPED_NEWLINE = b"\\n"


def _allowed(walker: LLMatcher) -> list[int]:
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    mask = allocate_token_bitmask(1, _bytes().vocab_size)
    fill_next_token_bitmask(walker, mask, 0)
    bits = int.from_bytes(mask.tobytes(), "little")
    return [byte for byte in range(256) if bits >> byte & 1]


def _pick(allowed: list[int], rng: random.Random) -> int:
    wordy = [byte for byte in allowed if byte in _WORDY]
    if 10 in allowed and rng.random() < 0.1:
        return 10
    pool = wordy or [byte for byte in allowed if byte in _PRINTABLE] or allowed
    return rng.choice(pool)
