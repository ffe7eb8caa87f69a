"""The Rust BPE rebuilt from the GGUF (backends/local/bpe.py) gives exactly llama.cpp's token ids, run by fastokens (the
served engine) and by Hugging Face tokenizers (the fallback): every proof below runs against both."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples_support import examples
from hotloop.backends.local.bpe import BPETokenizer, load_bpe
from hotloop.backends.local.gguf import GGUFTokenizer, load_llama, smollm2_chat_format, smollm2_path
from hotloop.backends.rust_tokenizer import LONG_TEXT

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference() -> GGUFTokenizer:
    return GGUFTokenizer(load_llama(vocab_only=True, n_threads=1, n_ctx=256, n_batch=256))


@pytest.fixture(scope="module", params=["fastokens", "tokenizers"])
def pair(request: pytest.FixtureRequest, reference: GGUFTokenizer) -> tuple[BPETokenizer, GGUFTokenizer]:
    bpe = load_bpe(smollm2_path(), prefer_fast=request.param == "fastokens")
    assert bpe is not None
    assert bpe.engine == request.param
    return BPETokenizer(bpe, reference), reference


def test_the_served_chat_format_uses_fastokens() -> None:
    tokenizer = smollm2_chat_format().tokenizer
    assert isinstance(tokenizer, BPETokenizer)
    assert tokenizer._tokenizer.engine == "fastokens"


@pytest.mark.exhaustive
def test_max_token_chars_bounds_every_token(reference: GGUFTokenizer) -> None:
    """The cheap lower bound on a text's tokens (characters / max_token_chars) holds for every single token."""
    bpe = load_bpe(smollm2_path())
    assert bpe is not None and bpe.max_token_chars > 0
    longest = max(len(reference.decode([token])) for token in range(49152))
    assert longest <= bpe.max_token_chars
    for text in ["\n" + " " * 200, "#" * 500, "a" * 10_000, "<|im_start|>" * 50]:
        assert len(bpe.encode(text)) >= len(text) / bpe.max_token_chars


def test_same_ids_as_llama_cpp_on_real_files(pair: tuple[BPETokenizer, GGUFTokenizer]) -> None:
    fast, reference = pair
    for path in [
        *sorted((ROOT / "src" / "hotloop").rglob("*.py"))[:20],
        ROOT / "README.md",
        ROOT / "docs" / "models.md",
    ]:
        text = path.read_text()
        assert fast.encode(text) == reference.encode(text), path
    chatml = "<|im_start|>system\nYou are…<|im_end|>\n<|im_start|>user\n 12345 ünï 日本 😀\t\n<|im_end|>\n"
    assert fast.encode(chatml) == reference.encode(chatml)
    assert fast.decode(fast.encode(chatml)) == chatml


ALPHABET = st.characters(codec="utf-8", exclude_categories=["Cs"])
PIECES = st.sampled_from(["<|im_start|>", "<|im_end|>", "\n", "  ", "\t", "123", " 4", "'s", "'ll", "ü", "日本", "😀"])


def test_rare_scripts_go_to_llama_cpp(pair: tuple[BPETokenizer, GGUFTokenizer]) -> None:
    """Seen with hypothesis: the two disagree on some astral code points; those texts are tokenized by llama.cpp."""
    fast, reference = pair
    text = "\U0001da43\U0007d000"
    assert fast._tokenizer.encode(text) != reference.encode(text)
    assert fast.encode(text) == reference.encode(text)


@pytest.mark.parametrize("control", ["\x04", "\x06", "\x13", "\x14", "\x16", "\x1d"])
def test_tokenless_control_characters_go_to_llama_cpp(pair: tuple[BPETokenizer, GGUFTokenizer], control: str) -> None:
    """Seen with hypothesis: llama.cpp splits words at these (then drops them), the Rust side merges across."""
    fast, reference = pair
    text = f"={control}."
    assert fast._tokenizer.encode(text) != reference.encode(text)
    assert fast.encode(text) == reference.encode(text)


def test_the_ascii_test_for_rare_characters_is_the_regex() -> None:
    """ASCII text skips the regex (bpe.py `_has_rare`): the same answer for every ASCII character, alone and in text."""
    from hotloop.backends.local import bpe

    for code in range(128):
        for text in (chr(code), f"some text {chr(code)} around it"):
            assert bpe._has_rare(text) == (bpe._RARE.search(text) is not None), code


@pytest.mark.exhaustive
def test_no_other_bmp_character_needs_llama_cpp(pair: tuple[BPETokenizer, GGUFTokenizer]) -> None:
    """Every BMP character, in contexts where a split matters, gives the same ids on both sides (512 characters
    per text: a difference anywhere in one shows as a difference of the whole)."""
    fast, reference = pair
    codes = [*range(0xD800), *range(0xE000, 0x10000)]
    for start in range(0, len(codes), 512):
        text = " ".join(f"={chr(code)}. a{chr(code)}b" for code in codes[start : start + 512])
        assert fast.encode(text) == reference.encode(text), hex(codes[start])


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(st.text(ALPHABET, max_size=12) | PIECES, max_size=12))
def test_same_ids_as_llama_cpp_on_random_text(pair: Any, parts: list[str]) -> None:
    fast, reference = pair
    text = "".join(parts)
    assert fast.encode(text) == reference.encode(text)


LINES = st.lists(st.text(ALPHABET, max_size=30) | PIECES | st.sampled_from(["", " ", "\t\t", "x = 1", "  def f():"]))


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(LINES.map("\n".join), min_size=1, max_size=4).map("\n".join))
def test_same_ids_as_llama_cpp_on_long_texts(pair: Any, text: str) -> None:
    """Long texts (a big tool output) take the path that releases the GIL in both engines."""
    fast, reference = pair
    text = (text + "\n") * (1 + LONG_TEXT // max(1, len(text) + 1))
    assert len(text) >= LONG_TEXT
    expected = reference.encode(text)
    assert fast.encode(text) == expected
    assert fast.encode_array(text).tolist() == expected  # the ids as the renderer takes them


def test_the_ids_array_is_the_ids(pair: Any) -> None:
    fast, _ = pair
    for text in ["", "hi", "<|im_start|>user\nhello<|im_end|>\n" * 200, "x = 1\n" * 1000 + "ünïcödé 日本語 😀"]:
        ids = fast.encode_array(text)
        assert ids.typecode == "i"
        assert ids.tolist() == fast.encode(text)


def _stalled_share(call: Callable[[], object], times: int) -> float:
    """The share of the time a worker thread spends making `call` `times` times during which this thread could not
    run (gaps over 1 ms between its own steps): near 1 when the call holds the GIL, and above 0 under CPU contention
    too (another process, or a busy thread, preempting this one)."""
    done = threading.Event()

    def work() -> None:
        for _ in range(times):
            call()
        done.set()

    worker = threading.Thread(target=work)
    start = last = time.perf_counter()
    stalled = 0.0
    worker.start()
    while not done.is_set():
        time.sleep(0)  # hands the GIL over at once, so that only a call holding it can stall this thread
        now = time.perf_counter()
        if now - last > 1e-3:
            stalled += now - last
        last = now
    worker.join()
    return stalled / (time.perf_counter() - start)


def _lasting(make: Callable[[int], Callable[[], object]], seconds: float) -> Callable[[], object]:
    """`make(n)`'s call, with n doubled until one call lasts `seconds`."""
    n = 1024
    while True:
        call = make(n)
        began = time.perf_counter()
        call()
        if time.perf_counter() - began >= seconds:
            return call
        n *= 2


def _hashing(size: int) -> Callable[[], object]:
    data = bytes(size)  # made once: only the hash, which releases the GIL, is timed
    return lambda: hashlib.sha256(data).digest()


def test_a_long_text_is_encoded_without_the_gil(pair: Any) -> None:
    """A worker thread tokenizing a long tool output (the renderer offloads those, chat/incremental.py) leaves the
    event loop's thread running. fastokens' single-text `encode` holds the GIL below 32 KB, `tokenizers'` always:
    `encode_array` takes their batch calls, which do not.

    CPU contention stalls this thread too (the full suite's servers, the 2 cores), so the encode is judged against
    two calls of the same length measured alongside: hashing a buffer (which releases the GIL) and summing a range
    (which holds it). The encode must stall this thread like the first, not the second."""
    fast, _ = pair
    line = "    result = compute(alpha, beta)  # a line of a 24 KB tool output\n"
    text = line * (24_000 // len(line))
    assert LONG_TEXT <= len(text) < 32_768
    began = time.perf_counter()
    fast.encode_array(text)
    length = max(2e-3, time.perf_counter() - began)
    times = max(3, round(0.04 / length))  # ~40 ms a measure: 20 of fastokens' encodes, 3 of tokenizers' (~30 ms each)
    calls = {
        "encode": lambda: fast.encode_array(text),
        "releases": _lasting(_hashing, length),
        "holds": _lasting(lambda n: lambda: sum(range(n)), length),
    }
    shares: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(3):  # interleaved, so a burst of contention weighs on all three alike
        for name, call in calls.items():
            shares[name].append(_stalled_share(call, times=times))
    median = {name: sorted(values)[1] for name, values in shares.items()}
    assert median["holds"] - median["releases"] > 0.3, shares  # the measure tells the two apart here
    assert median["encode"] < (median["releases"] + median["holds"]) / 2, shares
