"""A long text cut into pieces tokenizes to exactly its own ids (backends/text_pieces.py): the cut rule proved on
SmolLM2's tokenizer (against llama.cpp, the ground truth) and on BPE tokenizers trained here with Llama 3's and
Qwen 2's pre-tokenizers, and refused for the pre-tokenizers it does not hold for."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples_support import examples
from hotloop.backends.local.bpe import _cache_path, load_bpe
from hotloop.backends.local.gguf import GGUFTokenizer, load_llama, smollm2_path
from hotloop.backends.rust_tokenizer import RustTokenizer, _cores
from hotloop.backends.text_pieces import LLAMA3, PIECE_CHARS, QWEN2, cut_points, cuttable, pieces

pytestmark = pytest.mark.fast

CORPUS = [
    "def f(x):\n    return x ** 2  # square\n",
    "The quick brown fox jumps over 12345 lazy dogs; it's 3.14, they'll say.\n",
    "FAILED tests/test_x.py::test_y - AssertionError: assert 3 == 4\n=== 2 failed, 10 passed in 0.5s ===\n",
    '{"name": "shell", "arguments": {"cmd": ["rg", "-n", "TODO"]}}\n',
] * 20

# Lines of code, logs and prose, with the characters a cut could meet on either side of a newline.
CHARS = st.sampled_from([*"abcXYZ019 _-.,:;'\"()[]{}<>/\\#=+*!?|\t", "'s", "'ll", "ü", "日本", "😀", "\r"])
LINE = st.lists(CHARS, max_size=14).map("".join)
TEXT = st.lists(LINE, min_size=2, max_size=14).map("\n".join)


def _trained(pattern: str) -> str:
    """A small byte-level BPE (tokenizer.json text) with `pattern` as its Split pre-tokenizer, as Llama 3 and
    Qwen 2 ship theirs."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|eot_id|>"]
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return str(tokenizer.to_str())


@pytest.fixture(scope="module")
def smollm2_config() -> dict[str, Any]:
    assert load_bpe(smollm2_path()) is not None  # builds the cached tokenizer.json when it is not there yet
    config: dict[str, Any] = json.loads(_cache_path(smollm2_path()).read_text())
    return config


@pytest.fixture(scope="module", params=["llama3", "qwen2"])
def trained(request: pytest.FixtureRequest) -> RustTokenizer:
    return RustTokenizer(_trained(LLAMA3 if request.param == "llama3" else QWEN2))


@pytest.fixture(scope="module", params=["fastokens", "tokenizers"])
def smollm2(request: pytest.FixtureRequest) -> RustTokenizer:
    tokenizer = load_bpe(smollm2_path(), prefer_fast=request.param == "fastokens")
    assert tokenizer is not None and tokenizer.engine == request.param
    return tokenizer


@pytest.fixture(scope="module")
def llama_cpp() -> GGUFTokenizer:
    return GGUFTokenizer(load_llama(vocab_only=True, n_threads=1, n_ctx=256, n_batch=256))


def _holds(tokenizer: RustTokenizer, text: str) -> None:
    whole = tokenizer.encode(text)
    for cut in cut_points(text):
        assert tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:]) == whole, (text, cut)


def test_the_tokenizers_hotloop_meets_may_be_cut(smollm2_config: dict[str, Any], trained: RustTokenizer) -> None:
    assert cuttable(smollm2_config)
    assert trained.cores == _cores()


@settings(max_examples=examples(300), deadline=None)
@given(TEXT)
def test_smollm2_tokenizes_pieces_to_the_whole_texts_ids(smollm2: RustTokenizer, text: str) -> None:
    _holds(smollm2, text)


@settings(max_examples=examples(300), deadline=None)
@given(TEXT)
def test_llama3_and_qwen2_tokenize_pieces_to_the_whole_texts_ids(trained: RustTokenizer, text: str) -> None:
    _holds(trained, text)


def test_a_cut_after_whitespace_would_differ(smollm2: RustTokenizer) -> None:
    """Why a cut needs a non-space character before the newline: at the end of a piece, GPT-2's `\\s+(?!\\S)` takes
    the whole run of whitespace, which the text as a whole splits in two."""
    text = "a\n\nb"
    assert cut_points(text) == []
    assert smollm2.encode(text[:3]) + smollm2.encode(text[3:]) != smollm2.encode(text)


def test_a_long_text_is_encoded_in_pieces_to_the_same_ids(smollm2: RustTokenizer, llama_cpp: GGUFTokenizer) -> None:
    lines = [f"{i}: def handler_{i}(request): return respond(request, status={200 + i % 7})" for i in range(2000)]
    text = "\n".join(lines) + "\n"
    count = min(smollm2.cores, len(text) // PIECE_CHARS)
    assert len(pieces(text, count)) == count == min(_cores(), len(text) // PIECE_CHARS)
    assert smollm2.encode_array(text).tolist() == llama_cpp.encode(text)


def test_pieces_are_the_text_cut_at_safe_places() -> None:
    text = "alpha\nbeta\n\ngamma\n delta\nepsilon\n" * 50
    for count in range(1, 8):
        parts = pieces(text, count)
        assert "".join(parts) == text
        assert 1 <= len(parts) <= count
        assert all(part.endswith("\n") and part[-2] != "\n" for part in parts[:-1])
    assert pieces("no newline at all " * 100, 4) == ["no newline at all " * 100]


@pytest.mark.parametrize(
    "change",
    [
        {"normalizer": {"type": "NFC"}},
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}},
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}},
        {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}},
        {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": r"\s+|\S+"}, "behavior": "Isolated", "invert": False}},
        {"added_tokens": [{"id": 0, "content": "\n\nHuman:", "special": True}]},
        {"model": {"type": "Unigram"}},
    ],
)
def test_other_tokenizers_keep_texts_whole(smollm2_config: dict[str, Any], change: dict[str, Any]) -> None:
    assert not cuttable({**smollm2_config, **change})
