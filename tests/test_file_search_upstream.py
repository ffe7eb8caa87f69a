"""file_search embedding with an OpenAI-compatible `/v1/embeddings` upstream (`file_search_embeddings_url`) instead
of the embedded model: here another hotloop, whose /v1/embeddings serves the embedded model, asked for 64 of its
256 dimensions, so the vectors show which one made them. An upstream that does not answer fails a search with a
502; a store's files embedded by another model are still found by their words."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from conftest import RunningServer, start_server

TEXT = b"Spring tides follow the full and the new moon, when the sun and the moon pull together."


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("embeddings-upstream"), models=["hotloop-sim"])
    yield running
    running.stop()


def embedded_by(upstream: RunningServer, data_dir: Path) -> RunningServer:
    """A server whose file_search embeds with `upstream`'s /v1/embeddings, 64 dimensions."""
    return start_server(
        data_dir,
        models=["hotloop-sim"],
        file_search_embeddings_url=upstream.base_url,
        file_search_embeddings_model="wordllama-l2-supercat-256",
        file_search_embeddings_api_key="test-key",
        file_search_embeddings_dimensions=64,
    )


def _vector_bytes(data_dir: Path) -> set[int]:
    with sqlite3.connect(data_dir / "hotloop.db") as conn:
        return {row[0] for row in conn.execute("SELECT length(vector) FROM vector_store_chunks")}


def _ingest(server: RunningServer) -> str:
    client = server.client()
    store = client.vector_stores.create(name="tides")
    entry = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("tides.txt", TEXT), poll_interval_ms=100
    )
    assert entry.status == "completed", entry.last_error
    return store.id


def test_an_upstream_embeds_the_chunks_and_the_queries(upstream: RunningServer, tmp_path: Path) -> None:
    server = embedded_by(upstream, tmp_path)
    try:
        store_id = _ingest(server)
        assert _vector_bytes(tmp_path) == {64 * 4}  # the upstream's vectors, cut to 64 dimensions
        found = server.client().vector_stores.search(store_id, query="when are spring tides?").data
        assert found[0].filename == "tides.txt"
        # Vectors only: the query's vector is the upstream's too, or nothing would rank.
        only_vectors = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
        assert (
            server.client()
            .vector_stores.search(
                store_id,
                query="lunar pull on the sea",
                ranking_options=only_vectors,  # type: ignore[typeddict-unknown-key]
            )
            .data
        )
    finally:
        server.stop()


def test_an_upstream_that_does_not_answer_fails_the_search(tmp_path: Path) -> None:
    server = start_server(
        tmp_path,
        models=["hotloop-sim"],
        file_search_embeddings_url="http://127.0.0.1:9/v1",
        file_search_embeddings_model="none",
    )
    try:
        client = server.client()
        store = client.vector_stores.create(name="down")
        with pytest.raises(openai.APIStatusError) as failed:
            client.vector_stores.search(store.id, query="anything")
        assert failed.value.status_code == 502 and failed.value.code == "embeddings_upstream_error"
    finally:
        server.stop()


def test_files_of_another_model_are_found_by_their_words(upstream: RunningServer, tmp_path: Path) -> None:
    first = start_server(tmp_path, models=["hotloop-sim"])  # the embedded model, 256 dimensions
    try:
        store_id = _ingest(first)
    finally:
        first.stop()
    second = embedded_by(upstream, tmp_path)
    try:
        client = second.client()
        assert client.vector_stores.search(store_id, query="spring tides").data[0].filename == "tides.txt"
        only_vectors = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
        assert not client.vector_stores.search(
            store_id,
            query="spring tides",
            ranking_options=only_vectors,  # type: ignore[typeddict-unknown-key]
        ).data
    finally:
        second.stop()
