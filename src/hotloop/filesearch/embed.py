"""Embeddings for file_search. The default is embedded and downloads nothing: WordLlama's 256-dimension static
model (`wordllama/weights/l2_supercat_256.safetensors` and its tokenizer, both in the wheel): an average of token
vectors, ~1 MB of text a second on one core here. Vectors are L2-normalized float32, so a dot product is the
cosine."""

from __future__ import annotations

import threading
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

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


class WordLlamaEmbedder:
    name = "wordllama-l2-supercat-256"
    dims = 256

    def __init__(self) -> None:
        import wordllama

        # The wheel's own files: WordLlama.load() looks for the tokenizer in a folder the wheel does not have and
        # would download it; its cache folder is the package itself, where both files are.
        folder = Path(wordllama.__file__).parent
        self._model: Any = wordllama.WordLlama.load(cache_dir=folder, disable_download=True)
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizers" / "l2_supercat_tokenizer_config.json"))
        self._lock = threading.Lock()  # the model's tokenizer pads in place: one batch at a time

    def embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        with self._lock:
            vectors: Vectors = self._model.embed(texts, norm=True).astype(np.float32, copy=False)
        return vectors

    def offsets(self, text: str) -> list[tuple[int, int]]:
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return [(start, end) for start, end in encoding.offsets if end > start]


@cache
def default_embedder() -> WordLlamaEmbedder:
    """The embedded model, loaded once per process (~0.5 s)."""
    return WordLlamaEmbedder()
