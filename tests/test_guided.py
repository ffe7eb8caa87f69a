"""SmolLM2's decoding held to a custom tool's grammar by llguidance (backends/local/guided.py): forced from the first
token, lazily from the opening of a `<tool_call>` block with `tool_choice` auto; a regex, and a recursive Lark grammar
(tools/lark_json.py); the real model and vocabulary."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from grammar_support import lark_tool, patch_ok
from hotloop.backends.base import GenerationRequest
from hotloop.backends.local.gguf import load_llama
from hotloop.backends.local.guided import GuidedLogits, guided_grammar
from hotloop.chat.specs import ToolSpec
from hotloop.tools.grammar import Grammar

PHONE = ToolSpec("phone", kind="custom", grammar=Grammar("regex", r"\d{3}-\d{4}"))
# Recursive: no regex carries it; its input is held to it JSON-escaped.
SUM = 'start: expr\nexpr: NUMBER | "(" expr " + " expr ")"\nNUMBER: /[0-9]{1,3}/\n'
CALC = ToolSpec("calc", kind="custom", grammar=Grammar("lark", SUM))


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    model = load_llama(n_ctx=512, n_threads=2)
    yield model
    model.close()


def _allowed(processor: GuidedLogits, ids: list[int], vocabulary: int) -> np.ndarray:
    scores = processor(np.array(ids, dtype=np.intc), np.zeros(vocabulary, dtype=np.single))
    return np.isfinite(scores)


def _grammar(tool: ToolSpec, lazy: bool) -> str:
    grammar = guided_grammar(GenerationRequest(prompt_tokens=[], tools=[tool], tool_choice="required"), lazy)
    assert grammar is not None
    return grammar


def _pieces(llama: Any, processor: GuidedLogits, *heads: bytes) -> set[str]:
    """What the mask lets the model write next after `heads`, each fed to it in turn (as generation would: a block's
    opening is seen before what follows it), token by token."""
    vocabulary = llama.n_vocab()
    ids: list[int] = []
    for head in heads:
        ids += llama.tokenize(head, add_bos=False, special=False)
        allowed = _allowed(processor, ids, vocabulary)
    return {llama.detokenize([token]).decode("utf-8", "replace") for token in range(vocabulary) if allowed[token]}


def test_the_lazy_mask_arms_when_a_call_opens(llama: Any) -> None:
    vocabulary = llama.n_vocab()
    processor = GuidedLogits(llama, _grammar(PHONE, True), prompt_length=0, lazy=True)
    text = llama.tokenize(b"Sure, one moment.\n", add_bos=False, special=False)
    assert _allowed(processor, text, vocabulary).all()  # free text before the block
    opened = text + llama.tokenize(b"<tool_call>\n", add_bos=False, special=False)
    allowed = _allowed(processor, opened, vocabulary)
    words = llama.tokenize(b"Hello", add_bos=False, special=False)
    brace = llama.tokenize(b"{", add_bos=False, special=False)
    assert not allowed[words[0]] and allowed[brace[0]]  # inside the block: only the call's JSON
    assert 0 < allowed.sum() < vocabulary // 10


def test_the_forced_mask_holds_the_input_to_its_pattern(llama: Any) -> None:
    processor = GuidedLogits(llama, _grammar(PHONE, False), prompt_length=0, lazy=False)
    pieces = _pieces(llama, processor, b'{"name": "phone", "input": "')
    assert pieces and all(re.fullmatch(r"\d{1,3}(-\d{0,4})?", piece) for piece in pieces), sorted(pieces)[:20]


@pytest.mark.parametrize("lazy", [False, True], ids=["forced", "lazy"])
def test_the_mask_holds_the_input_to_a_recursive_grammar(llama: Any, lazy: bool) -> None:
    def mask(text: bytes) -> set[str]:
        processor = GuidedLogits(llama, _grammar(CALC, lazy), prompt_length=0, lazy=lazy)
        return _pieces(llama, processor, b"<tool_call>\n", text) if lazy else _pieces(llama, processor, text)

    pieces = mask(b'{"name": "calc", "input": "((12 + ')
    # a number or a nested sum opens; nothing else (not a letter, not a closing quote: the sum is not done)
    assert all(re.fullmatch(r"\(*\d{0,3}", piece) for piece in pieces), sorted(pieces)[:20]
    assert "(" in pieces and any(piece.isdigit() for piece in pieces), sorted(pieces)[:20]
    # the sum is whole: only the string's end may follow (a quote, or a token that starts with one)
    done = mask(b'{"name": "calc", "input": "((12 + 3) + 4)')
    assert done and all(piece.startswith('"') for piece in done), sorted(done)[:20]


def _shot(n: int, name: str, word: str) -> list[dict[str, Any]]:
    patch = f"*** Begin Patch\n*** Add File: {name}\n+{word}\n*** End Patch\n"
    return [
        {"role": "user", "content": f"Create {name} saying {word}."},
        {"type": "custom_tool_call", "call_id": f"c{n}", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": f"c{n}", "output": "Done."},
        {"role": "assistant", "content": f"Created {name}."},
    ]


# Two earlier calls in the history: the 135M model then opens a call by itself (alone, it never does).
FEW_SHOT = [*_shot(1, "a.txt", "one"), *_shot(2, "b.txt", "two")]


@pytest.mark.parametrize("ask", ["Create c.txt saying three.", "Create notes.md saying hello."])
def test_smollm2_writes_codex_patches_its_grammar_accepts_with_tool_choice_auto(
    client: openai.OpenAI, ask: str
) -> None:
    response = client.responses.create(
        model="smollm2-135m",
        input=[*FEW_SHOT, {"role": "user", "content": ask}],  # type: ignore[list-item]
        tools=[lark_tool()],  # type: ignore[list-item]
        temperature=0.8,
        max_output_tokens=200,
    )
    calls = [item for item in response.output if item.type == "custom_tool_call"]
    assert calls, response.output
    for call in calls:
        assert call.status == "completed" and patch_ok(call.input), call


def test_a_forced_call_cut_short_comes_back_as_an_incomplete_call_never_as_text(client: openai.OpenAI) -> None:
    """Issue 36: SmolLM2 forced to call a Lark-grammar tool, the budget running out inside the patch, came back as a
    message whose text was the call's JSON. Now: the call with the input written so far, `incomplete`."""
    response = client.responses.create(
        model="smollm2-135m",
        input="Create notes.md with ten lines of text.",
        tools=[lark_tool("edit")],  # type: ignore[list-item]
        tool_choice={"type": "custom", "name": "edit"},
        max_output_tokens=24,
    )
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["custom_tool_call"], response.output
    call = response.output[0]
    assert call.type == "custom_tool_call" and call.name == "edit" and call.status == "incomplete"  # type: ignore[union-attr]
    assert call.input.startswith("*** Begin Patch\n") and '"name"' not in call.input


# A recursive chain of ~2,900 rules (under the size cap): its compile overflows an 8 MB stack (tests/test_grammars.py).
DEEP = 2900
DEEP_LOOP = "start: r0\n" + "".join(f'r{i}: "x" r{i + 1} | "y"\n' for i in range(DEEP)) + f'r{DEEP}: "z" r0 | "z"\n'


def test_a_deep_recursive_grammar_is_guided_without_overflowing_the_generation_threads_stack() -> None:
    """The guided grammar is built and compiled on a big stack: on the generation thread's own, this grammar (now
    guided, JSON-escaped) is a SIGSEGV that takes the server down. In a process of its own, on a thread such as
    the generation's."""
    script = f"""
import sys, threading
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_guided import DEEP_LOOP, _pieces
from hotloop.backends.base import GenerationRequest
from hotloop.backends.local.gguf import load_llama
from hotloop.backends.local.llama import _processors
from hotloop.chat.specs import ToolSpec
from hotloop.tools.grammar import Grammar

llama = load_llama(n_ctx=256, n_threads=1)
tool = ToolSpec("deep", kind="custom", grammar=Grammar("lark", DEEP_LOOP))
request = GenerationRequest(prompt_tokens=[], tools=[tool], tool_choice="required")
seen = []
def work():
    [processor] = _processors(llama, request, 0)
    seen.append(_pieces(llama, processor, b'{{"name": "deep", "input": "xxx'))
thread = threading.Thread(target=work)
thread.start()
thread.join()
assert seen and seen[0] and all(piece[:1] in "xyz" for piece in seen[0]), sorted(seen[0])[:20]
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])


def test_a_grammar_lark_json_cannot_read_leaves_the_other_tools_held() -> None:
    """A recursive grammar with `%ignore` is not rewritten: its input stays a free string (checked once written),
    and the other tools' calls are still held to theirs."""
    from llguidance import LLMatcher

    from hotloop.tools.grammar import _bytes, matches

    ignoring = 'start: a\na: "(" a ")" | "x"\n%import common.WS\n%ignore WS'
    free = ToolSpec("free", kind="custom", grammar=Grammar("lark", ignoring))
    request = GenerationRequest(prompt_tokens=[], tools=[free, PHONE], tool_choice="required")
    grammar = guided_grammar(request, lazy=False)
    assert grammar is not None
    matcher = LLMatcher(_bytes(), grammar, log_level=0)
    assert matches(matcher, '{"name": "phone", "input": "123-4567"}')
    assert not matches(matcher, '{"name": "phone", "input": "12"}')
    assert matches(matcher, '{"name": "free", "input": "anything at all"}')
