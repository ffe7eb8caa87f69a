"""A NUL character from a client never reaches PostgreSQL's text as a 500 (stores/health.py `unstorable`): an id, a
cursor or a name holding one is a 4xx; text inside a stored body (a response's input) is kept as sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from conftest import RunningServer, start_server
from store_support import drop_namespace, namespace, store_url

KEY = "key-a"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    ns = namespace()
    tmp = tmp_path_factory.mktemp("nul")
    running = start_server(tmp, api_keys=[KEY], models=["hotloop-sim"], store_url=store_url("postgresql", ns, tmp))
    yield running
    running.stop()
    asyncio.run(drop_namespace("postgresql", ns))


def test_a_nul_in_an_id_cursor_or_name_is_a_4xx(served: RunningServer) -> None:
    with served.http(KEY) as http:
        for path in (
            "/responses/resp_%00",
            "/responses/resp_%00/input_items",
            "/conversations/conv_%00",
            "/files/file-%00",
            "/vector_stores/vs_%00",
            "/containers/cntr_%00",
            "/containers/cntr_%00/files",
            "/skills/skill_%00",
            "/containers?after=cntr_%00",
            "/files?after=file-%00",
            "/vector_stores?after=vs_%00",
        ):
            answer = http.get(path)
            assert 400 <= answer.status_code < 500, (path, answer.status_code, answer.text)
            assert answer.json()["error"]["message"], path
        made = http.post("/containers", json={"name": "a\u0000b"})
        assert made.status_code == 400, made.text
        assert http.get("/containers").json()["data"] == []  # nothing stored for it


def test_a_nul_inside_a_stored_response_is_kept(served: RunningServer) -> None:
    client = served.client(api_key=KEY)
    response = client.responses.create(model="hotloop-sim", input="before\u0000after", metadata={"k": "v\u0000w"})
    assert response.status == "completed"
    items = client.responses.input_items.list(response.id).data
    assert items[0].content[0].text == "before\u0000after"  # type: ignore[union-attr]
    assert client.responses.retrieve(response.id).metadata == {"k": "v\u0000w"}
