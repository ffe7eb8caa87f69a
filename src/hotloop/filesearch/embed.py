"""Embeddings for file_search. The default is embedded and downloads nothing: WordLlama's 256-dimension static
model (`wordllama/weights/l2_supercat_256.safetensors` and its tokenizer, both in its wheel): an average of token
vectors. Vectors are L2-normalized float32, so a dot product is the cosine."""

from __future__ import annotations

import importlib.util
import json
import struct
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hotloop.filesearch.chunk import Chunk, Strategy, windows
from hotloop.filesearch.tokenize import Spans, WordTokens, fits

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    name: str
    dims: int

    def embed(self, texts: list[str]) -> Vectors:
        """One L2-normalized row per text (CPU work: call it off the event loop)."""
        ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) characters of each of the text's tokens, for chunking (chunk.py)."""
        ...


class WindowEmbedder(Embedder, Protocol):
    """An embedder whose vector of a text is the average of its tokens' (a static model): the vectors of a file's
    overlapping windows then come from one pass over the file's tokens (`embed_windows`), not one per window."""

    def tokens(self, text: str) -> tuple[npt.NDArray[np.int32], Spans]:
        """The text's token ids and each one's (start, end) characters."""
        ...

    def embed_windows(self, ids: npt.NDArray[np.int32], windows: list[tuple[int, int]]) -> Vectors:
        """One L2-normalized row per window of token indexes [start, end)."""
        ...


class WordLlamaEmbedder:
    """WordLlama's model, read from its wheel's files without running its package (whose compiled helpers hotloop
    never needs: the image leaves them out). Its vector of a text is the mean of its tokens' rows (no special
    tokens, no truncation), as `WordLlama.embed` computes it, L2-normalized."""

    name = "wordllama-l2-supercat-256"
    dims = 256

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        folder = package_folder("wordllama")
        self.table = read_table(folder / "weights" / "l2_supercat_256.safetensors", "embedding.weight")
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizers" / "l2_supercat_tokenizer_config.json"))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        # Whole files word by word (tokenize.py), the same tokens as `encode` gives, several times faster.
        self._words = WordTokens(self._tokenizer) if fits(self._tokenizer) else None

    def embed(self, texts: list[str]) -> Vectors:
        rows = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, encoding in enumerate(self._tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = np.clip(np.asarray(encoding.ids, dtype=np.int64), 0, len(self.table) - 1)
            if len(ids):
                rows[row] = self.table[ids].mean(axis=0)
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        return rows

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [(start, end) for start, end in self.tokens(text)[1].tolist()]

    def tokens(self, text: str) -> tuple[npt.NDArray[np.int32], Spans]:
        if self._words is not None:
            ids, spans = self._words(text)
        else:
            encoding = self._tokenizer.encode(text, add_special_tokens=False)
            ids = np.asarray(encoding.ids, dtype=np.int32)
            spans = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        kept = spans[:, 1] > spans[:, 0]
        return ids[kept], spans[kept]

    def embed_windows(self, ids: npt.NDArray[np.int32], windows: list[tuple[int, int]]) -> Vectors:
        """WordLlama's vector of a text is the mean of its tokens' rows, normalized: a window's is the difference of
        two running sums of the file's rows, taken at the windows' edges. Each token is read once, however much the
        windows overlap (`auto` chunking reads every token twice the other way), and no window is tokenized again."""
        table = self.table
        if not windows:
            return np.zeros((0, table.shape[1]), dtype=np.float32)
        ids = np.clip(ids, 0, table.shape[0] - 1)
        edges = sorted({edge for window in windows for edge in window})
        running = np.zeros(table.shape[1], dtype=np.float64)
        sums: dict[int, npt.NDArray[np.float64]] = {}
        previous = 0
        for edge in edges:
            if edge > previous:
                running = running + table[ids[previous:edge]].sum(axis=0)  # float32, pairwise: exact enough
            sums[edge] = running
            previous = edge
        rows = np.stack([(sums[end] - sums[start]) / max(end - start, 1) for start, end in windows])
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        return rows.astype(np.float32)


def package_folder(name: str) -> Path:
    """An installed package's folder, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the {name} package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def read_table(path: Path, tensor: str) -> npt.NDArray[np.float32]:
    """One tensor of a safetensors file as float32 (the format: an 8-byte header length, a JSON header of each
    tensor's dtype, shape and byte offsets, then the data)."""
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    entry = json.loads(data[8 : 8 + size])[tensor]
    dtype = {"F16": "<f2", "F32": "<f4", "BF16": None}[entry["dtype"]]
    if dtype is None:
        raise ValueError(f"{path.name}: {tensor} is bfloat16, which this reader does not take")
    start, end = entry["data_offsets"]
    values = np.frombuffer(data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize, offset=8 + size + start)
    return np.ascontiguousarray(values.reshape(entry["shape"]).astype(np.float32))


@cache
def default_embedder() -> WordLlamaEmbedder:
    """The embedded model, loaded once per process (~0.5 s)."""
    return WordLlamaEmbedder()


def embed_file(text: str, embedder: WindowEmbedder, strategy: Strategy | None = None) -> tuple[list[Chunk], Vectors]:
    """A file's chunks and their vectors: one tokenization, one pass over its tokens."""
    ids, spans = embedder.tokens(text)
    cut = windows(text, spans, strategy or Strategy())
    vectors = embedder.embed_windows(ids, [(chunk.first, chunk.first + chunk.tokens) for chunk in cut])
    return cut, vectors
