"""The Vector Stores API over HTTP (pipeline/objects/vector_stores.py, transports/vector_stores.py), driven by
openai-python unmodified on both stores (SQLite, PostgreSQL): stores, their files and batches through ingestion to
`completed`, search with filters, ranking options and query lists; bad and hostile input answered with a 4xx naming
the field or a `failed` file with its reason; another key's store is a 404; two replicas on PostgreSQL share
stores; files added while no replica ingests are ingested once one does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types import VectorStore as OpenAIVectorStore
from openai.types.vector_stores import VectorStoreFile as OpenAIVectorStoreFile

from conftest import RunningServer, start_server
from pdf_support import make_pdf, text_pdf
from store_support import drop_namespace, namespace, store_url

KEYS = ["key-a", "key-b"]
DOCS = {
    "kettle.md": "# The kettle\nDescale the kettle with citric acid every month; limescale slows the boil.",
    "garden.txt": "Tomatoes need six hours of sun and deep watering twice a week in summer.",
    "router.html": "<html><body><h1>Router</h1><p>Reset the router by holding the pinhole button for ten "
    "seconds.</p><script>var hidden = 'never indexed';</script></body></html>",
    "bikes.json": '{"topic": "bicycle chain", "advice": "Oil the bicycle chain after riding in rain."}',
    "sorting.py": "def bubble_sort(items):\n    '''Sort a list by swapping neighbours.'''\n    return sorted(items)\n",
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def vs_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    kind: str = request.param
    tmp = tmp_path_factory.mktemp(f"vs-{kind}")
    ns = namespace()
    url = store_url(kind, ns, tmp)
    running = start_server(tmp, api_keys=KEYS, admin_key="admin", models=["hotloop-sim"], store_url=url)
    running.kind = kind  # type: ignore[attr-defined]
    running.ns = ns  # type: ignore[attr-defined]
    yield running
    running.stop()
    import asyncio

    asyncio.run(drop_namespace(kind, ns))


def _client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return server.client(api_key=key)


@pytest.fixture(scope="module")
def docs_store(vs_server: RunningServer) -> tuple[str, dict[str, str]]:
    """A store holding DOCS, each file with attributes, ingested."""
    client = _client(vs_server)
    store = client.vector_stores.create(name="house", metadata={"team": "home"})
    ids = {}
    for n, (name, text) in enumerate(DOCS.items()):
        made = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id,
            file=(name, text.encode()),
            attributes={"kind": name.rsplit(".", 1)[1], "rank": n, "indoor": name != "garden.txt"},
            poll_interval_ms=100,
        )
        assert made.status == "completed", made.last_error
        ids[name] = made.id
    return store.id, ids


def test_a_store_ingests_every_kind_and_finds_each_by_its_words(
    vs_server: RunningServer, docs_store: tuple[str, dict[str, str]]
) -> None:
    client = _client(vs_server)
    store_id, ids = docs_store
    found = client.vector_stores.retrieve(store_id)
    assert isinstance(found, OpenAIVectorStore)
    assert (found.status, found.file_counts.completed, found.file_counts.total) == ("completed", 5, 5)
    assert found.usage_bytes > 0 and found.metadata == {"team": "home"}
    for question, name in [
        ("how do I descale my kettle", "kettle.md"),
        ("how much sun do tomatoes need", "garden.txt"),
        ("reset the router", "router.html"),
        ("oil the bicycle chain", "bikes.json"),
        ("bubble sort function", "sorting.py"),
    ]:
        page = client.vector_stores.search(store_id, query=question, max_num_results=2)
        assert page.data[0].filename == name and page.data[0].file_id == ids[name]
        assert 0 < page.data[0].score <= 1 and page.data[0].content[0].type == "text"
    router = client.vector_stores.search(store_id, query="router pinhole").data[0]
    assert "never indexed" not in router.content[0].text  # the page's script is not its text
    entry = client.vector_stores.files.retrieve(file_id=ids["kettle.md"], vector_store_id=store_id)
    assert isinstance(entry, OpenAIVectorStoreFile) and entry.chunking_strategy is not None
    assert entry.chunking_strategy.type == "static" and entry.chunking_strategy.static.max_chunk_size_tokens == 800
    content = client.vector_stores.files.content(file_id=ids["kettle.md"], vector_store_id=store_id)
    assert [part.text for part in content] == [DOCS["kettle.md"]]


def test_filters_and_ranking_options(vs_server: RunningServer, docs_store: tuple[str, dict[str, str]]) -> None:
    client = _client(vs_server)
    store_id, _ = docs_store

    def names(**options: object) -> list[str]:
        return [hit.filename for hit in client.vector_stores.search(store_id, **options).data]  # type: ignore[arg-type]

    assert names(query="kettle", filters={"type": "eq", "key": "kind", "value": "txt"}) == ["garden.txt"]
    indoor = names(query="water", filters={"type": "eq", "key": "indoor", "value": True}, max_num_results=10)
    assert "garden.txt" not in indoor and indoor
    compound = {
        "type": "and",
        "filters": [{"type": "gte", "key": "rank", "value": 1}, {"type": "in", "key": "kind", "value": ["py", "md"]}],
    }
    assert names(query="sort", filters=compound, max_num_results=10) == ["sorting.py"]
    assert names(query="kettle", filters={"type": "eq", "key": "nobody", "value": "x"}) == []
    assert len(names(query="the", max_num_results=3)) <= 3
    # Weights: all on the text (lexical only) or all on the embedding (vectors only); both still find the kettle.
    for weights in ({"embedding_weight": 0, "text_weight": 1}, {"embedding_weight": 1, "text_weight": 0}):
        hits = client.vector_stores.search(
            store_id, query="descale kettle limescale", ranking_options={"ranker": "auto", "hybrid_search": weights}
        ).data  # type: ignore[typeddict-unknown-key]
        assert hits[0].filename == "kettle.md"
    strict = client.vector_stores.search(store_id, query="kettle", ranking_options={"score_threshold": 0.999})
    assert all(hit.score >= 0.999 for hit in strict.data)
    both = client.vector_stores.search(store_id, query=["descale the kettle", "router reset"], max_num_results=2)
    assert {hit.filename for hit in both.data} == {"kettle.md", "router.html"}
    rewritten = client.vector_stores.search(store_id, query="How do I reset the router?", rewrite_query=True)
    assert rewritten.search_query == ["reset router"] and rewritten.data[0].filename == "router.html"


def test_the_console_and_metrics_show_ingestion_and_searches(
    vs_server: RunningServer, docs_store: tuple[str, dict[str, str]]
) -> None:
    store_id, ids = docs_store
    _client(vs_server).vector_stores.search(store_id, query="kettle")
    with vs_server.http("admin") as http:
        state = http.get("/console/state").json()["file_search"]
    metrics = httpx.get(
        vs_server.base_url.removesuffix("/v1") + "/metrics", headers={"Authorization": "Bearer admin"}
    ).text
    mine = [row for row in state["ingestions"] if row["vector_store_id"] == store_id]
    assert {row["file_id"] for row in mine} == set(ids.values())
    assert all(row["status"] == "completed" and row["chunks"] >= 1 and row["bytes"] > 0 for row in mine)
    assert state["searches"][0]["vector_store_ids"] == [store_id] and state["searches"][0]["results"] >= 1
    assert state["search_p50_s"] is not None and state["files_by_outcome"]["completed"] >= 5
    assert "kettle.md" not in str(state)  # ids and sizes only: a file's name may be a user's data
    assert 'hotloop_files_ingested_total{outcome="completed"}' in metrics
    assert "hotloop_file_search_seconds_count" in metrics and "hotloop_file_bytes_ingested_total" in metrics


def test_bad_input_names_the_field(vs_server: RunningServer, docs_store: tuple[str, dict[str, str]]) -> None:
    store_id, _ = docs_store
    with httpx.Client(base_url=vs_server.base_url, headers={"Authorization": "Bearer key-a"}) as http:
        search, files, batches = (f"/vector_stores/{store_id}/{part}" for part in ("search", "files", "file_batches"))
        tiny = {"type": "static", "static": {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0}}
        cases = [
            (search, {"query": "x", "filters": {"type": "eq", "key": "k", "value": 1, "x": 2}}, "filters.x"),
            (search, {"query": "x", "filters": {"type": "near", "key": "k", "value": 1}}, "filters.type"),
            (search, {"query": "x", "max_num_results": 51}, "max_num_results"),
            (search, {"query": []}, "query"),
            (search, {"query": "x", "ranking_options": {"ranker": "best"}}, "ranking_options.ranker"),
            (search, {"query": "x", "ranking_options": {"score_threshold": 2}}, "ranking_options.score_threshold"),
            (files, {"file_id": "file-nope"}, "file_id"),
            (files, {"file_id": "f", "attributes": {f"k{n}": n for n in range(17)}}, "attributes"),
            (files, {"file_id": "f", "chunking_strategy": tiny}, "chunking_strategy.static.max_chunk_size_tokens"),
            ("/vector_stores", {"expires_after": {"anchor": "created_at", "days": 1}}, "expires_after.anchor"),
            ("/vector_stores", {"name": "x", "colour": "red"}, "colour"),
            (batches, {"file_ids": [f"file-{n}" for n in range(10_000)]}, "file_ids"),
        ]
        for path, body, param in cases:
            reply = http.post(path, json=body)
            status = 404 if param == "file_id" and "nope" in str(body) else 400
            assert reply.status_code == status, (path, body, reply.text)
            assert reply.json()["error"]["param"] == param, (body, reply.text)
        assert http.get(f"/vector_stores/{store_id}/files", params={"filter": "done"}).status_code == 400
    assert _client(vs_server).vector_stores.retrieve(store_id).file_counts.total == 5  # nothing was added


def test_another_keys_store_is_not_found(vs_server: RunningServer, docs_store: tuple[str, dict[str, str]]) -> None:
    store_id, ids = docs_store
    other = _client(vs_server, "key-b")
    for call in (
        lambda: other.vector_stores.retrieve(store_id),
        lambda: other.vector_stores.search(store_id, query="kettle"),
        lambda: other.vector_stores.files.list(store_id),
        lambda: other.vector_stores.files.retrieve(file_id=ids["kettle.md"], vector_store_id=store_id),
        lambda: other.vector_stores.delete(store_id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    mine = other.vector_stores.create(name="b's")
    with pytest.raises(openai.NotFoundError):  # a's file, added to b's store: b cannot name it
        other.vector_stores.files.create(vector_store_id=mine.id, file_id=ids["kettle.md"])
    assert [found.id for found in other.vector_stores.list()] == [mine.id]


def test_unreadable_files_fail_with_their_reason(vs_server: RunningServer) -> None:
    client = _client(vs_server)
    store = client.vector_stores.create(name="bad")
    bomb = make_pdf(b"BT /F1 12 Tf 72 720 Td (" + b"A" * 100_000_000 + b") Tj ET", deflate=True)
    files = [
        ("broken.pdf", b"%PDF-1.4 this is not a pdf"),
        ("bomb.pdf", bomb),
        ("photo.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64),
        ("latin1.txt", "caf\xe9".encode("latin-1")),
        ("fine.pdf", text_pdf("The lighthouse keeper trims the lamp wick at dusk.")),
    ]
    started = time.perf_counter()
    batch = client.vector_stores.file_batches.upload_and_poll(
        vector_store_id=store.id, files=files, poll_interval_ms=100
    )
    assert time.perf_counter() - started < 60
    assert (batch.status, batch.file_counts.failed, batch.file_counts.completed) == ("completed", 4, 1)
    for entry in client.vector_stores.files.list(store.id, filter="failed"):
        assert entry.last_error is not None and entry.last_error.code == "unsupported_file" and entry.last_error.message
    assert client.vector_stores.search(store.id, query="lighthouse lamp").data[0].filename == "fine.pdf"
    with pytest.raises(openai.BadRequestError) as empty:
        client.files.create(file=("empty.txt", b""), purpose="assistants")
    assert empty.value.code == "empty_file"


def test_batches_list_and_cancel(vs_server: RunningServer) -> None:
    client = _client(vs_server)
    store = client.vector_stores.create(name="batches")
    made = [
        client.files.create(file=(f"n{n}.txt", f"note {n} about owls".encode()), purpose="assistants") for n in range(4)
    ]
    batch = client.vector_stores.file_batches.create_and_poll(
        vector_store_id=store.id, file_ids=[file.id for file in made], poll_interval_ms=100
    )
    assert batch.status == "completed" and batch.file_counts.completed == 4
    listed = client.vector_stores.file_batches.list_files(batch_id=batch.id, vector_store_id=store.id, limit=2)
    assert len({entry.id for entry in listed}) == 4  # the SDK follows the cursor
    # A batch cancelled at once: its files are cancelled or (if a worker was quicker) completed, never lost.
    again = client.vector_stores.file_batches.create(vector_store_id=store.id, file_ids=[made[0].id, made[1].id])
    cancelled = client.vector_stores.file_batches.cancel(batch_id=again.id, vector_store_id=store.id)
    assert cancelled.status in ("cancelled", "completed")
    counts = cancelled.file_counts
    assert counts.cancelled + counts.completed == 2 and counts.in_progress == 0


def test_deleting_a_file_takes_it_out_of_its_stores(vs_server: RunningServer) -> None:
    client = _client(vs_server)
    store = client.vector_stores.create(name="deletions")
    entry = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("moths.txt", b"Moths navigate by the moon."), poll_interval_ms=100
    )
    assert client.vector_stores.search(store.id, query="moths moon").data
    client.files.delete(entry.id)
    assert client.vector_stores.search(store.id, query="moths moon").data == []
    assert client.vector_stores.retrieve(store.id).file_counts.total == 0
    entry = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("bats.txt", b"Bats navigate by echoes."), poll_interval_ms=100
    )
    removed = client.vector_stores.files.delete(file_id=entry.id, vector_store_id=store.id)
    assert removed.deleted and client.files.retrieve(entry.id).id == entry.id  # the file itself stays
    updated = client.vector_stores.update(
        store.id, name="renamed", expires_after={"anchor": "last_active_at", "days": 2}
    )
    assert updated.name == "renamed" and updated.expires_at is not None
    assert client.vector_stores.delete(store.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.retrieve(store.id)


def test_files_added_while_no_replica_ingests_are_ingested_later(tmp_path: Path) -> None:
    """A replica that does not ingest (file_search_workers 0) takes the files; one that does, started later on the
    same store, ingests them: what was in progress at a stop resumes."""
    idle = start_server(tmp_path, api_keys=KEYS, models=["hotloop-sim"], file_search_workers=0)
    try:
        client = _client(idle)
        store = client.vector_stores.create(name="later")
        client.vector_stores.files.upload(vector_store_id=store.id, file=("owl.txt", b"Owls hunt at night."))
        time.sleep(1.5)
        assert client.vector_stores.retrieve(store.id).status == "in_progress"
    finally:
        idle.stop()
    working = start_server(tmp_path, api_keys=KEYS, models=["hotloop-sim"])
    try:
        client = _client(working)
        deadline = time.monotonic() + 60
        while client.vector_stores.retrieve(store.id).status != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert client.vector_stores.search(store.id, query="owls night").data[0].filename == "owl.txt"
    finally:
        working.stop()


def test_two_replicas_on_postgresql_share_stores(tmp_path: Path) -> None:
    ns = namespace()
    url = store_url("postgresql", ns, tmp_path)
    first = start_server(tmp_path / "a", api_keys=KEYS, models=["hotloop-sim"], store_url=url)
    second = start_server(tmp_path / "b", api_keys=KEYS, models=["hotloop-sim"], store_url=url, file_search_workers=0)
    try:
        store = _client(second).vector_stores.create(name="shared")
        entry = _client(second).vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=("tide.txt", b"Spring tides follow the full moon."), poll_interval_ms=100
        )
        assert entry.status == "completed"  # ingested by the first replica: the second has no workers
        for replica in (first, second):
            assert _client(replica).vector_stores.search(store.id, query="spring tides").data[0].filename == "tide.txt"
        _client(first).files.delete(entry.id)
        assert _client(second).vector_stores.search(store.id, query="spring tides").data == []
    finally:
        first.stop()
        second.stop()
        import asyncio

        asyncio.run(drop_namespace("postgresql", ns))
