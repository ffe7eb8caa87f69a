"""One file's ingestion as pure CPU work, from its bytes to its chunks' rows: extract its text, cut it into token
windows, embed them in one pass (embed.py) and take each one's
lexical terms (lexical.py). No I/O: pipeline/filesearch/ingestion.py runs it in a worker
process, off the server's event loop and its GIL, and writes the rows to the store."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hotloop.filesearch.chunk import Strategy, windows
from hotloop.filesearch.embed import default_embedder, embed_file
from hotloop.filesearch.extract import Unextractable, extract
from hotloop.filesearch.lexical import terms

WORKER_NICE = 10  # a worker process yields the CPU to the server's own threads (and an in-process engine)


@dataclass(frozen=True, slots=True)
class Ingested:
    """A file's chunks: (start, end, text) each, their vectors (float32 rows, one per chunk, in one buffer), the
    bytes they take in the store (text, vectors and terms), and their terms."""

    chunks: list[tuple[int, int, str]]
    vectors: bytes
    dims: int
    usage_bytes: int
    terms: list[bytes] = field(default_factory=list)  # each chunk's lexical terms (lexical.py), uint32 little-endian
    failure: str | None = None  # why the file has no text (Unextractable's message), instead of chunks


def ingest(filename: str, data: bytes, max_tokens: int, overlap: int, embed: bool = True) -> Ingested:
    """Never raises for what the file holds: a file whose text cannot be read gives `failure`. `embed` false: no
    vectors (an upstream embeds the chunks: pipeline/filesearch/embeddings.py); the windows are the same."""
    embedder = default_embedder()
    try:
        text = extract(filename, data)
    except Unextractable as exc:
        return Ingested([], b"", embedder.dims, 0, failure=str(exc))
    if embed:
        cut, vectors = embed_file(text, embedder, Strategy(max_tokens, overlap))
    else:
        cut, vectors = windows(text, embedder.tokens(text)[1], Strategy(max_tokens, overlap)), None
    chunks = [(chunk.start, chunk.end, chunk.text) for chunk in cut]
    found = [terms(chunk.text).astype("<u4").tobytes() for chunk in cut]
    usage = sum(len(chunk.text.encode()) for chunk in cut) + sum(map(len, found))
    if vectors is None:
        return Ingested(chunks, b"", 0, usage, found)
    return Ingested(chunks, vectors.astype("<f4").tobytes(), embedder.dims, usage + vectors.nbytes, found)


def start_worker() -> None:
    """A worker process's start: a lower priority, and the model loaded before the first file arrives."""
    try:
        os.nice(WORKER_NICE)
    except OSError:  # not allowed here: the work still runs, at the same priority
        pass
    default_embedder()
