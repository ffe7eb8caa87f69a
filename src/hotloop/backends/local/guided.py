"""Decoding constrained by llguidance in-process (SmolLM2 via llama.cpp), for custom tools with grammars: their
inputs are held to the grammar (a regex, or a Lark grammar as one regex: tools/lark_regex.py) inside the call's JSON
(llguidance escapes the pattern in the JSON string itself) by masking the logits with llguidance's mask for the
model's own vocabulary. llama.cpp's own JSON-schema converter cannot take these patterns (no `\\d`), and a grammar it
fails to parse brings the process down.

A forced call (`tool_choice` required) is held to its schema from the first token. Otherwise the constraint is
lazy: the model writes freely until it opens a `<tool_call>` block; from there the call must be one of the offered
tools' calls, with a valid input, up to `</tool_call>`; then it is free again.
"""

from __future__ import annotations

import json
import threading
import warnings
from typing import Any

import msgspec
import numpy as np

from hotloop.backends.base import GenerationRequest
from hotloop.backends.output_schema import output_schema
from hotloop.backends.toolcalls.text import CLOSE, OPEN
from hotloop.chat.specs import ToolSpec
from hotloop.tools.grammar import on_big_stack
from hotloop.tools.lark_json import json_string_rules
from hotloop.tools.lark_regex import lark_to_regex

_lock = threading.Lock()
_tokenizers: dict[int, Any] = {}  # by id(llama): building one reads the whole vocabulary (~0.5 s)


def _tokenizer(llama: Any) -> Any:
    from llguidance.llamacpp import lltokenizer_from_vocab

    with _lock:
        found = _tokenizers.get(id(llama))
        if found is None:
            with warnings.catch_warnings():  # it reads each token's attributes by a call llama-cpp-python deprecates
                warnings.simplefilter("ignore", DeprecationWarning)
                found = _tokenizers[id(llama)] = lltokenizer_from_vocab(llama._model.vocab)
        return found


def call_grammar(schema: dict[str, Any]) -> str:
    """The rest of a `<tool_call>` block once it is open: a call the schema accepts, then the block's end."""
    return f'start: /[ \\t\\n]*/ %json {json.dumps(schema)} /[ \\t\\n]*/ "{CLOSE}"'


def guided_grammar(request: GenerationRequest, lazy: bool) -> str | None:
    """llguidance's grammar for the call `request` asks for (its tool_choice says which): its JSON schema
    (output_schema.py), where a custom tool whose Lark grammar has recursion (no regex can carry it) is a call of
    its own whose input is that grammar JSON-escaped (tools/lark_json.py). `lazy`: the rest of a `<tool_call>`
    block; else the whole answer. None: nothing to hold it to."""
    from llguidance import LLMatcher

    recursive = [spec for spec in request.tools if _recursive(spec) and _offered(request, spec)]
    others = msgspec.structs.replace(request, tools=[spec for spec in request.tools if spec not in recursive])
    schema = output_schema(others) if others.tools else None
    if not recursive:
        if schema is None:
            return None
        return (
            LLMatcher.grammar_from_lark(call_grammar(schema))
            if lazy
            else LLMatcher.grammar_from_json_schema(json.dumps(schema))
        )
    alternatives = [] if schema is None else [f"%json {json.dumps(schema)}"]
    rules: list[str] = []
    for index, spec in enumerate(recursive):
        assert spec.grammar is not None
        found = json_string_rules(spec.grammar.definition, f"hotloop_g{index}")
        assert found is not None  # _recursive read it
        body, start = found
        alternatives.append(f"hotloop_call{index}")
        rules += [_call_rule(f"hotloop_call{index}", spec.prompt_name, start), body]
    top = f'start: /[ \\t\\n]*/ hotloop_call /[ \\t\\n]*/ "{CLOSE}"' if lazy else "start: hotloop_call"
    lark = "\n".join([top, "hotloop_call: " + " | ".join(alternatives), *rules, "HOTLOOP_WS: /[ \\t\\n\\r]*/"])
    return LLMatcher.grammar_from_lark(lark)


def _recursive(spec: ToolSpec) -> bool:
    """A freeform tool whose Lark grammar no regex carries and lark_json.py can rewrite; one it cannot stays an
    unconstrained string among the others (checked once written), as before."""
    grammar = spec.grammar
    if not spec.freeform or grammar is None or grammar.syntax != "lark":
        return False
    return lark_to_regex(grammar.definition) is None and json_string_rules(grammar.definition, "g") is not None


def _offered(request: GenerationRequest, spec: ToolSpec) -> bool:
    return request.forced_tool is None or spec.prompt_name == request.forced_tool


def _call_rule(name: str, tool: str, start: str) -> str:
    """A freeform call as output_schema.py shapes it, `{"name": …, "input": "…"}`, the input held to `start`."""
    ws = "HOTLOOP_WS"
    quoted = json.dumps(json.dumps(tool))
    return (
        f'{name}: "{{" {ws} "\\"name\\"" {ws} ":" {ws} {quoted} {ws} "," {ws} "\\"input\\"" {ws} ":" {ws} '
        f'"\\"" {start} "\\"" {ws} "}}"'
    )


def _compiled(tokenizer: Any, grammar: str) -> Any:
    from llguidance import LLMatcher

    matcher = LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise ValueError(matcher.get_error())
    return matcher


class GuidedLogits:
    """A llama-cpp-python logits processor: before each token, the logits of the tokens the constraint forbids are
    -inf; the tokens sampled since the last call advance it. Built per generation, on its thread. `lazy`: armed
    only inside a `<tool_call>` block."""

    def __init__(self, llama: Any, grammar: str, prompt_length: int, lazy: bool) -> None:
        from llguidance.numpy import allocate_token_bitmask

        self._llama = llama
        self._tokenizer = _tokenizer(llama)
        self._eos = int(llama.token_eos())
        self._lazy = lazy
        # Compiled once, on a big stack (a deep grammar overflows this thread's), then copied for each call.
        self._pristine = on_big_stack(lambda: _compiled(self._tokenizer, grammar))
        self._matcher: Any = None if lazy else self._start()
        self._mask = allocate_token_bitmask(1, self._tokenizer.vocab_size)
        self._seen = prompt_length
        self._text = ""  # what was written since the last block closed (lazy)

    def _start(self) -> Any:
        return self._pristine.deep_copy()

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        new = [int(token) for token in input_ids[self._seen :]]
        self._seen = len(input_ids)
        if self._matcher is not None and new:
            self._matcher.consume_tokens(new)
        elif self._lazy and new:
            self._watch(new)
        matcher = self._matcher
        if matcher is None or matcher.is_error():
            return scores  # free text, or lost (a token llguidance refused): the server's check judges the input
        if matcher.is_stopped():
            if self._lazy:  # the block is closed: free again, until the next one opens
                self._matcher, self._text = None, ""
                return scores
            scores[:] = -np.inf  # a forced call is the whole answer: only its end may follow
            scores[self._eos] = 0.0
            return scores
        from llguidance.numpy import apply_token_bitmask_inplace, fill_next_token_bitmask

        fill_next_token_bitmask(matcher, self._mask, 0)
        apply_token_bitmask_inplace(scores, self._mask)
        return scores

    def _watch(self, tokens: list[int]) -> None:
        """Arm once the text opens a block at a token boundary (only whitespace after `<tool_call>`); a block opened
        inside a token (`<tool_call>{`) stays free, and the server's check judges its input."""
        self._text = (self._text + self._llama.detokenize(tokens).decode("utf-8", "replace"))[-64:]
        at = self._text.rfind(OPEN)
        if at >= 0 and not self._text[at + len(OPEN) :].strip():
            self._matcher = self._start()
