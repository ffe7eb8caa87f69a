"""file_search's retrieval core (hotloop/filesearch/): extraction by kind, token-window chunking that keeps the
text as it is, the embedded embeddings (no download), and hybrid retrieval that beats lexical-only and vector-only
on the same corpus: Python's own reference topics with questions written for them (filesearch_questions.py)."""

from __future__ import annotations

import io
import itertools
import json
import time
from pydoc_data.topics import topics

import numpy as np
import pytest
from pypdf import PdfWriter

from filesearch_questions import QUESTIONS
from hotloop.filesearch.chunk import Strategy, chunks
from hotloop.filesearch.embed import default_embedder, embed_file
from hotloop.filesearch.extract import Unextractable, extract
from hotloop.filesearch.hybrid import Hit, fuse
from hotloop.filesearch.ingest import ingest
from hotloop.filesearch.lexical import LexicalIndex, query_terms, stem, terms
from hotloop.filesearch.topk import top
from pdf_support import make_pdf, text_pdf

pytestmark = pytest.mark.fast


def test_text_kinds_are_extracted_and_the_rest_refused_with_a_reason() -> None:
    assert extract("notes.md", "# Title\n\nBody ✓".encode()) == "# Title\n\nBody ✓"
    assert extract("main.py", b"\xef\xbb\xbfprint(1)\n") == "print(1)\n"  # the BOM goes
    page = b"<html><head><style>p{}</style><script>var x</script></head><body><p>One</p><p>Two &amp; 3</p></body>"
    assert extract("page.html", page) == "One\nTwo & 3"
    assert extract("data.json", b'{"a": [1, 2]}') == '{"a": [1, 2]}'
    for name, data, why in [
        ("image.png", b"\x89PNG...", "'.png'"),
        ("blob.txt", b"abc\x00def", "binary"),
        ("latin.txt", "café".encode("latin-1"), "UTF-8"),
        ("empty.md", b"  \n", "no text"),
        ("bad.json", b'{"a": ', "JSON"),
        ("bad.jsonl", b'{"a": 1}\n{oops}\n', "JSON"),
    ]:
        with pytest.raises(Unextractable, match=why):
            extract(name, data)


def test_a_pdfs_text_is_extracted_and_hostile_pdfs_are_refused_quickly() -> None:
    assert extract("paper.pdf", text_pdf("Hybrid retrieval fuses ranks")) == "Hybrid retrieval fuses ranks"
    # A decompression bomb: 200 KB that would inflate to 200 MB. pypdf stops at its limit; nothing grows.
    bomb = make_pdf(b"BT /F1 12 Tf 72 720 Td (" + b"A" * 200_000_000 + b") Tj ET", deflate=True)
    assert len(bomb) < 1_000_000
    started = time.perf_counter()
    with pytest.raises(Unextractable, match="could not be read"):
        extract("bomb.pdf", bomb)
    assert time.perf_counter() - started < 10
    with pytest.raises(Unextractable, match="could not be read"):
        extract("broken.pdf", b"%PDF-1.4\nnot really a pdf at all")
    with pytest.raises(Unextractable, match="no text layer"):
        extract("scan.pdf", make_pdf(b"0 0 612 792 re f"))
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    writer.encrypt("secret")
    locked = io.BytesIO()
    writer.write(locked)
    with pytest.raises(Unextractable, match="encrypted"):
        extract("locked.pdf", locked.getvalue())


def test_chunks_are_token_windows_of_the_text_as_it_is() -> None:
    embedder = default_embedder()
    text = " ".join(f"word{n}" for n in range(3000))
    strategy = Strategy(max_tokens=200, overlap=50)
    cut = chunks(text, embedder, strategy)
    assert all(chunk.tokens <= 200 for chunk in cut) and cut[0].tokens == 200
    assert all(text[chunk.start : chunk.end] == chunk.text for chunk in cut)
    assert [chunk.start for chunk in cut] == sorted(chunk.start for chunk in cut)
    for before, after in itertools.pairwise(cut):
        assert after.start < before.end  # they overlap
    assert cut[-1].end == len(text)
    assert chunks("", embedder) == []
    for bad in ((50, 0), (5000, 0), (800, 500)):
        with pytest.raises(ValueError):
            Strategy(*bad)


def test_files_are_tokenized_word_by_word_as_the_tokenizer_encodes_them() -> None:
    """tokenize.py's word-by-word tokenization (with its cache) against the tokenizer's own `encode` of the whole
    text: the same ids and character offsets, on prose, code, indentation, non-ASCII and byte-fallback text."""
    embedder = default_embedder()
    assert embedder._words is not None  # WordLlama's tokenizer is the one tokenize.py expects
    samples = [topics[key] for key in ("function", "formatstrings", "typesseq", "string-methods")]
    samples += ["", " ", "\n", "  x", "😀", "é x", "a\u2581b ▁ c", "日本語 と English\t\tmixed", "\x00\x01 b"]
    samples += ["a<s>b", "<s>", "x </s> y", "<unk>z</s>", "a <s> b <s>"]
    samples += [
        "def f(x):\n        return {'a': [1, 2]}  # ✓\n\n\n    pass",
        " " * 40 + "end  ",
        "ünïcödé " * 50,
        "x" * 5000,
    ]
    for text in [*samples, "".join(samples)]:
        encoding = embedder._tokenizer.encode(text, add_special_tokens=False)
        spans = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        kept = spans[:, 1] > spans[:, 0]
        for _ in range(2):  # the second time from the cache
            ids, ours = embedder.tokens(text)
            assert ids.tolist() == np.asarray(encoding.ids)[kept].tolist(), repr(text[:40])
            assert ours.tolist() == spans[kept].tolist(), repr(text[:40])


def test_the_embedded_model_loads_without_a_download_and_its_vectors_are_unit_length() -> None:
    embedder = default_embedder()
    vectors = embedder.embed(["the def statement defines a function", "how to define a function", "raise an error"])
    assert vectors.shape == (3, embedder.dims) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[2] @ vectors[1]  # closer in meaning, closer in space


def test_the_model_read_from_its_files_embeds_as_wordllama_does() -> None:
    """hotloop reads WordLlama's weights and tokenizer itself (its package's compiled helpers are not needed, and the
    image leaves them out); WordLlama's own `embed` is the oracle."""
    from pathlib import Path

    import wordllama

    folder = Path(wordllama.__file__).parent
    theirs = wordllama.WordLlama.load(cache_dir=folder, disable_download=True)
    texts = ["the def statement defines a function", "Tomatoes need sun", "x" * 3000, "ünïcödé ✓ text"]
    ours = default_embedder().embed(texts)
    expected = theirs.embed(texts, norm=True)
    assert ours.shape == expected.shape and float((ours * expected).sum(axis=1).min()) > 0.99999


def test_one_pass_vectors_are_the_per_chunk_vectors() -> None:
    """`embed_file` reads a file's tokens once and takes each window's mean from running sums: the same vectors,
    up to the tokens at a window's edge (a chunk tokenized alone may split its first word differently)."""
    embedder = default_embedder()
    for key in ("function", "formatstrings", "typesseq"):
        cut, fast = embed_file(topics[key], embedder)
        assert [chunk.text for chunk in cut] == [chunk.text for chunk in chunks(topics[key], embedder)]
        slow = embedder.embed([chunk.text for chunk in cut])
        assert fast.shape == slow.shape and float((fast * slow).sum(axis=1).min()) > 0.99
    assert embed_file("", embedder)[1].shape[0] == 0


def test_top_k_is_exact_whatever_the_scores() -> None:
    """topk.py's sampled floor finds the same scores as sorting them all: random, mostly-zero (a lexical ranking,
    `above` 0), masked (-inf) and heavily tied scores, k from 0 past the array's length."""
    rng = np.random.default_rng(39)
    for trial in range(2000):
        size, k, kind = int(rng.integers(0, 3000)), int(rng.integers(0, 120)), trial % 4
        scores = rng.standard_normal(size).astype(np.float32)
        if kind == 1:
            scores = np.where(rng.random(size) < 0.9, 0, np.abs(scores)).astype(np.float32)
        elif kind == 2:
            scores = np.where(rng.random(size) < 0.5, -np.inf, scores).astype(np.float32)
        elif kind == 3:
            scores = np.round(scores, 1).astype(np.float32)
        above = 0.0 if kind == 1 else -np.inf
        rows = top(scores, k, above)
        assert len(set(rows.tolist())) == len(rows)
        expected = np.sort(scores[scores > above])[::-1][:k]
        assert sorted(scores[rows].tolist(), reverse=True) == expected.tolist(), (trial, size, k)


def test_fusion_rewards_agreement() -> None:
    lexical = [Hit(1, 9.0), Hit(2, 5.0), Hit(3, 1.0)]
    vector = [Hit(3, 0.9), Hit(1, 0.8), Hit(4, 0.7)]
    assert [hit.index for hit in fuse([lexical, vector], [1.0, 1.0])] == [1, 3, 2, 4]
    assert [hit.index for hit in fuse([lexical, vector], [0.0, 1.0])][:1] == [3]


def test_bm25_ranks_rare_shared_terms_first() -> None:
    texts = ["the tide rises", "spring tides follow the moon", "the moon is bright", "bright bright bright"]
    index = LexicalIndex([terms(text) for text in texts])
    scores = index.scores(query_terms("spring tides"))
    assert int(np.argmax(scores)) == 1 and scores[0] > 0 and scores[2] == 0  # "tides" finds "tide"
    assert stem("tides") == stem("tide") and stem("glass") == "glass" and stem("queries") == "query"
    assert index.scores(query_terms("nothing here")).tolist() == [0.0] * 4
    assert LexicalIndex([]).scores(query_terms("tide")).size == 0


def _top(scores: np.ndarray, k: int, positive: bool) -> list[Hit]:
    best = np.argsort(-scores, kind="stable")[:k]
    return [Hit(int(i), float(scores[i])) for i in best if not positive or scores[i] > 0]


@pytest.mark.parametrize(("size", "overlap"), [(800, 400), (400, 200), (1600, 400), (200, 100)])
def test_hybrid_recall_beats_lexical_and_vector_alone(size: int, overlap: int) -> None:
    """recall@5 (a question is answered when a top-5 chunk comes from one of its topics) over the reference topics
    ingested as a vector store's files are (filesearch/ingest.py: chunks of `size` tokens, 800/400 being `auto`,
    their one-pass vectors and their terms) and ranked as a search ranks them (BM25 on the terms, cosine on the
    vectors, RRF with equal weights, each read 50 deep); each row's figures are printed (`pytest -s -k recall`),
    and docs/file-search.md has them."""
    embedder = default_embedder()
    owners: list[str] = []
    rows, found = [], []
    started = time.perf_counter()
    for key, text in sorted(topics.items()):
        done = ingest(f"{key}.txt", text.encode(), size, overlap)
        rows.append(np.frombuffer(done.vectors, "<f4").reshape(-1, done.dims))
        found += [np.frombuffer(one, "<u4") for one in done.terms]
        owners += [key] * len(done.chunks)
    vectors, index = np.concatenate(rows), LexicalIndex(found)
    seconds = time.perf_counter() - started
    recall = {}
    for ranker in ("lexical", "vector", "hybrid"):
        answered = 0
        for question, wanted in QUESTIONS:
            lexical = _top(index.scores(query_terms(question)), 50, True)
            vector = _top(vectors @ embedder.embed([question])[0], 50, False)
            ranked = (
                lexical if ranker == "lexical" else vector if ranker == "vector" else fuse([lexical, vector], [1, 1])
            )
            answered += bool({owners[hit.index] for hit in ranked[:5]} & wanted)
        recall[ranker] = round(answered / len(QUESTIONS), 3)
    size_bytes = sum(len(text.encode()) for text in topics.values())
    row = {"chunking": f"{size}/{overlap}", "chunks": len(owners), "bytes": size_bytes, "ingest_s": round(seconds, 2)}
    print(json.dumps({**row, "recall@5": recall}))
    assert recall["hybrid"] >= max(recall["lexical"], recall["vector"]), recall
    assert recall["hybrid"] > 0.5, recall  # a corpus the questions were written for
