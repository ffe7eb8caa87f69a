"""`POST /v1/embeddings` on the embedded model (pipeline/objects/embeddings.py), driven by openai-python unmodified:
one text or many, floats or base64, fewer dimensions; bad requests name the field; a large request leaves the
event loop free."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from conftest import RunningServer, start_server
from hotloop.pipeline.objects.embeddings import EMBEDDING_MODEL
from http_support import error_of

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("embeddings"), models=["hotloop-sim"])
    yield running
    running.stop()


def test_openai_python_embeds_texts(embedding_server: RunningServer) -> None:
    client = embedding_server.client()
    texts = ["how to define a function", "the def statement defines a function", "raise an exception"]
    made = client.embeddings.create(model=EMBEDDING_MODEL, input=texts)
    assert made.model == EMBEDDING_MODEL and [item.index for item in made.data] == [0, 1, 2]
    vectors = np.array([item.embedding for item in made.data])
    assert vectors.shape == (3, 256) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert made.usage.prompt_tokens == made.usage.total_tokens > 0
    # The SDK asked for base64 (its default) and decoded it; floats asked for are the same vectors.
    with embedding_server.http() as http:
        floats = http.post(
            "/embeddings", json={"model": EMBEDDING_MODEL, "input": texts[0], "encoding_format": "float"}
        )
    assert np.allclose(floats.json()["data"][0]["embedding"], vectors[0], atol=1e-6)
    encoded = client.embeddings.create(model=EMBEDDING_MODEL, input=texts[0], encoding_format="base64")
    raw = encoded.data[0].embedding
    assert isinstance(raw, str) and np.allclose(np.frombuffer(base64.b64decode(raw), dtype="<f4"), vectors[0])
    short = client.embeddings.create(model=EMBEDDING_MODEL, input=texts[0], dimensions=64)
    assert len(short.data[0].embedding) == 64 and abs(np.linalg.norm(short.data[0].embedding) - 1) < 1e-4


def test_bad_requests_name_the_field(embedding_server: RunningServer) -> None:
    with embedding_server.http() as http:
        ok = {"model": EMBEDDING_MODEL, "input": "x"}
        error_of(http.post("/embeddings", json={**ok, "model": "nope"}), 404, "model_not_found", "model")
        error_of(http.post("/embeddings", json={"input": "x"}), 400, "missing_required_parameter", "model")
        error_of(http.post("/embeddings", json={"model": EMBEDDING_MODEL}), 400, "missing_required_parameter", "input")
        error_of(http.post("/embeddings", json={**ok, "input": []}), 400, "invalid_value", "input")
        error_of(http.post("/embeddings", json={**ok, "input": ["a", ""]}), 400, "invalid_value", "input[1]")
        error_of(http.post("/embeddings", json={**ok, "input": [[1, 2, 3]]}), 400, "invalid_value", "input[0]")
        error_of(http.post("/embeddings", json={**ok, "input": ["a"] * 2049}), 400, "invalid_value", "input")
        error_of(
            http.post("/embeddings", json={**ok, "encoding_format": "hex"}), 400, "invalid_value", "encoding_format"
        )
        error_of(http.post("/embeddings", json={**ok, "dimensions": 300}), 400, "invalid_value", "dimensions")
        too_long = " ".join(["word"] * 9000)
        error_of(http.post("/embeddings", json={**ok, "input": too_long}), 400, "invalid_value", "input[0]")


def test_a_large_request_leaves_the_event_loop_free(embedding_server: RunningServer) -> None:
    done = threading.Event()
    slowest = 0.0

    def embed() -> None:
        try:
            texts = [f"paragraph {n} " + "some words about retrieval and ranking " * 100 for n in range(400)]
            embedding_server.client().embeddings.create(model=EMBEDDING_MODEL, input=texts)
        finally:
            done.set()

    thread = threading.Thread(target=embed)
    thread.start()
    with embedding_server.http() as http:
        while not done.is_set():
            started = time.monotonic()
            assert http.get("/models").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.02)
    thread.join()
    assert slowest < 1.0, slowest
