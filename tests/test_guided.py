"""SmolLM2's decoding held to a custom tool's grammar by llguidance (backends/local/guided.py): forced from the first
token, lazily from the opening of a `<tool_call>` block with `tool_choice` auto; the real model and vocabulary."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest

from grammar_support import lark_tool, patch_ok
from hotloop.backends.base import GenerationRequest
from hotloop.backends.local.gguf import load_llama
from hotloop.backends.local.guided import GuidedLogits
from hotloop.backends.output_schema import output_schema
from hotloop.chat.specs import ToolSpec
from hotloop.tools.grammar import Grammar

PHONE = ToolSpec("phone", kind="custom", grammar=Grammar("regex", r"\d{3}-\d{4}"))


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    model = load_llama(n_ctx=512, n_threads=2)
    yield model
    model.close()


def _allowed(processor: GuidedLogits, ids: list[int], vocabulary: int) -> np.ndarray:
    scores = processor(np.array(ids, dtype=np.intc), np.zeros(vocabulary, dtype=np.single))
    return np.isfinite(scores)


def _schema() -> dict[str, Any]:
    schema = output_schema(GenerationRequest(prompt_tokens=[], tools=[PHONE], tool_choice="required"))
    assert schema is not None
    return schema


def test_the_lazy_mask_arms_when_a_call_opens(llama: Any) -> None:
    vocabulary = llama.n_vocab()
    processor = GuidedLogits(llama, _schema(), prompt_length=0, lazy=True)
    text = llama.tokenize(b"Sure, one moment.\n", add_bos=False, special=False)
    assert _allowed(processor, text, vocabulary).all()  # free text before the block
    opened = text + llama.tokenize(b"<tool_call>\n", add_bos=False, special=False)
    allowed = _allowed(processor, opened, vocabulary)
    words = llama.tokenize(b"Hello", add_bos=False, special=False)
    brace = llama.tokenize(b"{", add_bos=False, special=False)
    assert not allowed[words[0]] and allowed[brace[0]]  # inside the block: only the call's JSON
    assert 0 < allowed.sum() < vocabulary // 10


def test_the_forced_mask_holds_the_input_to_its_pattern(llama: Any) -> None:
    vocabulary = llama.n_vocab()
    processor = GuidedLogits(llama, _schema(), prompt_length=0, lazy=False)
    head = llama.tokenize(b'{"name": "phone", "input": "', add_bos=False, special=False)
    allowed = _allowed(processor, head, vocabulary)
    digits = [token for token in range(vocabulary) if allowed[token]]
    pieces = {llama.detokenize([token]).decode("utf-8", "replace") for token in digits}
    assert pieces and all(re.fullmatch(r"\d{1,3}(-\d{0,4})?", piece) for piece in pieces), sorted(pieces)[:20]


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
