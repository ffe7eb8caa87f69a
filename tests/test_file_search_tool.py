"""`file_search` run by the server inside the response (docs/file-search.md, "file_search in a response"):
openai-python against hotloop serving hotloop-sim, over HTTP (JSON and SSE) and WebSocket mode; stored, replayed
and continued.

The search itself is the Vector Stores API's (`search_stores`), replaced here by a fake that returns fixed results
(`searches`): these tests are about the tool around it. hotloop-sim searches a user's message (its words, the
query) and answers a search's results with a sentence citing the first, "According to [1], …".
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import openai
import pytest
from openai.types.responses import Response, ResponseFileSearchToolCall, ResponseOutputMessage
from openai.types.responses.response_output_text import AnnotationFileCitation

from conftest import RunningServer, start_server, stored_counts
from hotloop.backends.sim.backend import _latest_messages
from hotloop.errors import NotFound
from hotloop.pipeline.filesearch.runtime import FileSearch
from hotloop.pipeline.filesearch.search import SearchOptions
from hotloop.tools import file_search
from hotloop.wire.items import FileCitation
from hotloop.wire.tool_items import FileSearchCall, FileSearchResult
from hotloop.wire.vector_stores import SearchResult, TextContent
from http_support import check_sequence, parse_sse
from openai_types_support import openai_typed
from test_http_replay import assert_same_stream
from test_tool_search import record_generations
from websocket_sdk_support import run_turn, ws_client

JSON = dict[str, Any]
TOOL: JSON = {"type": "file_search", "vector_store_ids": ["vs_docs"]}
RESULTS = ["file_search_call.results"]
QUESTION = "Which port does the manual name?"
# "According to [1], …": the label of the first result, at its character index.
CITATION = {"type": "file_citation", "file_id": "file-manual", "filename": "manual.md", "index": 13}
HITS = [
    SearchResult(
        file_id="file-manual",
        filename="manual.md",
        score=0.91,
        content=[TextContent(text="The server listens on port 8080.")],
        attributes={"lang": "en"},
    ),
    SearchResult(file_id="file-notes", filename="notes.txt", score=0.4, content=[TextContent(text="Lunch at noon.")]),
]


@dataclass
class Searches:
    """What the fake search was asked: (store ids, queries, options) per search."""

    asked: list[tuple[tuple[str, ...], list[str], SearchOptions]] = field(default_factory=list)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("file_search"), models=["hotloop-sim"])
    yield running
    running.stop()


@pytest.fixture
def client(server: RunningServer) -> openai.OpenAI:
    return server.client()


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Searches:
    """`FileSearch.search` answering HITS; a store named `vs_missing` is not the key's (NotFound, as the real one).
    test_file_search_e2e.py runs the real search, on real vector stores."""
    seen = Searches()

    async def search(
        self: Any, owner: str, store_ids: Sequence[str], queries: Sequence[str], options: Any, **_: Any
    ) -> list[SearchResult]:
        seen.asked.append((tuple(store_ids), list(queries), options))
        if "vs_missing" in store_ids:
            raise NotFound("No vector store found with id 'vs_missing'.", param="vector_store_ids")
        return HITS[: options.max_num_results]

    monkeypatch.setattr(FileSearch, "search", search)
    return seen


def check_answer(
    response: Response, query: str = "Which port does the manual name"
) -> tuple[ResponseFileSearchToolCall, ResponseOutputMessage]:
    """A search of `query` (the input's words), then a message citing its first result by its label."""
    assert [item.type for item in response.output] == ["file_search_call", "message"], response.output
    call, message = response.output
    assert isinstance(call, ResponseFileSearchToolCall) and isinstance(message, ResponseOutputMessage)
    assert call.status == "completed" and call.queries == [query]
    text = message.content[0]
    assert text.type == "output_text" and text.text.startswith("According to [1],")
    assert [annotation.model_dump() for annotation in text.annotations] == [CITATION]
    assert isinstance(text.annotations[0], AnnotationFileCitation)
    return call, message


# -- at the door -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "file_search"}, "tools[0].vector_store_ids"),
        ({**TOOL, "vector_store_ids": []}, "tools[0].vector_store_ids"),
        ({**TOOL, "vector_store_ids": ["vs_1", 2]}, "tools[0].vector_store_ids"),
        ({**TOOL, "vector_store_ids": [f"vs_{n}" for n in range(17)]}, "tools[0].vector_store_ids"),
        ({**TOOL, "max_num_results": 0}, "tools[0].max_num_results"),
        ({**TOOL, "max_num_results": 51}, "tools[0].max_num_results"),
        ({**TOOL, "max_num_results": True}, "tools[0].max_num_results"),
        ({**TOOL, "filters": {"type": "eq", "key": "lang"}}, "tools[0].filters.value"),
        ({**TOOL, "filters": {"type": "and", "filters": [{"type": "like"}]}}, "tools[0].filters.filters[0].type"),
        ({**TOOL, "filters": "lang=en"}, "tools[0].filters"),
        ({**TOOL, "ranking_options": {"ranker": "bm25"}}, "tools[0].ranking_options.ranker"),
        ({**TOOL, "ranking_options": {"score_threshold": 1.5}}, "tools[0].ranking_options.score_threshold"),
        ({**TOOL, "ranking_options": {"speed": "fast"}}, "tools[0].ranking_options.speed"),
        (
            {**TOOL, "ranking_options": {"hybrid_search": {"embedding_weight": 1}}},
            "tools[0].ranking_options.hybrid_search.text_weight",
        ),
        ({**TOOL, "store": "vs_1"}, "tools[0].store"),
    ],
)
def test_a_bad_tool_is_refused_naming_its_field(
    server: RunningServer, client: openai.OpenAI, tool: JSON, param: str
) -> None:
    before = stored_counts(server)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="hotloop-sim", input="Hi.", tools=[tool])  # type: ignore[list-item]
    assert refused.value.param == param, refused.value.body
    assert stored_counts(server) == before


def test_one_file_search_tool_and_a_choice_needs_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as twice:
        client.responses.create(model="hotloop-sim", input="Hi.", tools=[TOOL, TOOL])  # type: ignore[list-item]
    assert twice.value.param == "tools[1].type"
    with pytest.raises(openai.BadRequestError) as choice:
        client.responses.create(model="hotloop-sim", input="Hi.", tool_choice={"type": "file_search"})
    assert choice.value.param == "tool_choice.type"


# -- in the response ------------------------------------------------------------------------------------------------


def test_the_model_searches_then_answers_citing_a_result(client: openai.OpenAI, searches: Searches) -> None:
    tool = {
        **TOOL,
        "max_num_results": 5,
        "filters": {"type": "eq", "key": "lang", "value": "en"},
        "ranking_options": {
            "ranker": "default-2024-11-15",
            "score_threshold": 0.2,
            "hybrid_search": {
                "embedding_weight": 0.7,
                "text_weight": 0.3,
            },
        },
    }
    response = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[tool])  # type: ignore[list-item]
    call, _ = check_answer(response)
    assert call.results is None  # not included
    assert response.status == "completed" and response.tools[0].model_dump(exclude_none=True) == tool
    [(stores, queries, options)] = searches.asked
    assert stores == ("vs_docs",) and queries == call.queries
    assert (options.max_num_results, options.ranker, options.score_threshold) == (5, "default-2024-11-15", 0.2)
    assert options.weights == (0.3, 0.7)  # (text, embedding)
    assert options.filters is not None and options.filters({"lang": "en"}) and not options.filters({"lang": "de"})


def test_results_are_sent_only_when_included_and_always_kept(client: openai.OpenAI, searches: Searches) -> None:
    included = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[TOOL], include=RESULTS)  # type: ignore[list-item]
    call, _ = check_answer(included)
    assert call.results is not None and [r.model_dump(exclude_none=True) for r in call.results] == [
        {
            "file_id": "file-manual",
            "filename": "manual.md",
            "score": 0.91,
            "text": "The server listens on port 8080.",
            "attributes": {"lang": "en"},
        },
        {"file_id": "file-notes", "filename": "notes.txt", "score": 0.4, "text": "Lunch at noon."},
    ]
    plain = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[TOOL])  # type: ignore[list-item]
    # Stored with its results either way: GET shows them when it includes them.
    for stored_id in (included.id, plain.id):
        assert client.responses.retrieve(stored_id).output[0].results is None  # type: ignore[union-attr]
        shown = client.responses.retrieve(stored_id, include=RESULTS).output[0]
        assert isinstance(shown, ResponseFileSearchToolCall) and shown.results == call.results


def test_a_conversations_items_show_results_only_when_included(client: openai.OpenAI, searches: Searches) -> None:
    conversation = client.conversations.create()
    response = client.responses.create(
        model="hotloop-sim",
        input=QUESTION,
        tools=[TOOL],
        conversation=conversation.id,  # type: ignore[list-item]
    )
    call, _ = check_answer(response)
    plain = client.conversations.items.list(conversation.id)
    shown = client.conversations.items.list(conversation.id, include=RESULTS)
    [hidden_call] = [item for item in plain.data if item.type == "file_search_call"]
    [shown_call] = [item for item in shown.data if item.type == "file_search_call"]
    assert hidden_call.results is None and shown_call.results and shown_call.results[0].filename == "manual.md"  # type: ignore[union-attr]
    one = client.conversations.items.retrieve(call.id, conversation_id=conversation.id, include=RESULTS)
    assert one.results == shown_call.results  # type: ignore[union-attr]
    assert client.conversations.items.retrieve(call.id, conversation_id=conversation.id).results is None  # type: ignore[union-attr]


def test_the_stream_carries_the_search_events_and_the_citation(server: RunningServer, searches: Searches) -> None:
    for include in (None, RESULTS):
        with server.http() as http:
            body = {"model": "hotloop-sim", "input": QUESTION, "tools": [TOOL], "stream": True}
            reply = http.post("/responses", json={**body, **({"include": include} if include else {})})
        events = parse_sse(reply.text)  # each checked against the Open Responses schema
        final = check_sequence(events)
        typed = [openai_typed("event", event) for event in events]  # and openai-python's ResponseStreamEvent
        kinds = [event["type"] for event in events if event.get("output_index") == 0]
        assert kinds == [
            "response.output_item.added",
            "response.file_search_call.in_progress",
            "response.file_search_call.searching",
            "response.file_search_call.completed",
            "response.output_item.done",
        ]
        added, done = events[2]["item"], next(e for e in events if e["type"] == "response.output_item.done")["item"]
        assert added["status"] == "in_progress" and added["results"] is None
        assert done["status"] == "completed" and (done["results"] is not None) is (include is not None)
        assert final["output"][0] == done
        [annotation] = [e for e in typed if e.type == "response.output_text.annotation.added"]
        assert annotation.annotation is not None and annotation.annotation.model_dump() == CITATION
        assert (annotation.output_index, annotation.annotation_index, annotation.content_index) == (1, 0, 0)
        text_done = next(i for i, e in enumerate(events) if e["type"] == "response.output_text.done")
        assert events.index(next(e for e in events if e["type"].endswith("annotation.added"))) < text_done


def test_a_replay_is_the_live_stream(server: RunningServer, searches: Searches) -> None:
    for include in ([], RESULTS):
        with server.http() as http:
            body = {"model": "hotloop-sim", "input": QUESTION, "tools": [TOOL], "include": include}
            live = parse_sse(http.post("/responses", json={**body, "stream": True}).text)
            params: dict[str, Any] = {"stream": "true", "include[]": include}
            replayed = parse_sse(http.get(f"/responses/{live[-1]['response']['id']}", params=params).text)
        assert_same_stream(live, replayed)


def test_a_failed_search_is_a_failed_call_the_model_reads(server: RunningServer, searches: Searches) -> None:
    """A store the key does not own (the search's 404): the call ends `failed`, without `.completed`; the response
    goes on (hotloop-sim, reading that it failed, tries once more, then answers)."""
    body = {"model": "hotloop-sim", "input": QUESTION, "tools": [{**TOOL, "vector_store_ids": ["vs_missing"]}]}
    with server.http() as http:
        events = parse_sse(http.post("/responses", json={**body, "stream": True}).text)
    final = check_sequence(events)
    for event in events:
        openai_typed("event", event)
    kinds = [event["type"] for event in events if event.get("output_index") == 0]
    assert kinds == [
        "response.output_item.added",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.output_item.done",
    ]
    assert final["status"] == "completed" and final["output"][0]["status"] == "failed"
    assert final["output"][0]["results"] is None and final["output"][-1]["type"] == "message"
    assert final["output"][-1]["content"][0]["annotations"] == []
    assert searches.asked[0][0] == ("vs_missing",)


def test_max_tool_calls_bounds_the_searches(
    server: RunningServer, client: openai.OpenAI, searches: Searches, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hotloop-sim made to write two searches at once: with `max_tool_calls` 1 the second is not run; the search
    is then no longer offered, and the model answers."""
    backend = server.service.models.resolve("hotloop-sim").backend
    monkeypatch.setattr(backend, "settings", msgspec.structs.replace(backend.settings, parallel_calls=2))
    generations = record_generations(monkeypatch)
    response = client.responses.create(
        model="hotloop-sim",
        input=QUESTION,
        tools=[TOOL],
        max_tool_calls=1,
        include=RESULTS,  # type: ignore[list-item]
    )
    kinds = [(item.type, getattr(item, "status", None)) for item in response.output]
    assert kinds == [("file_search_call", "completed"), ("file_search_call", "incomplete"), ("message", "completed")]
    assert len(searches.asked) == 1 and response.output[1].results is None  # type: ignore[union-attr]
    assert [spec.name for spec in generations[1].tools] == []  # no built-in call left: not offered again


# -- continued, and over WebSocket -------------------------------------------------------------------------------------


def test_a_continuation_reads_the_results_after_the_prompt(
    client: openai.OpenAI, searches: Searches, monkeypatch: pytest.MonkeyPatch, server: RunningServer
) -> None:
    generations = record_generations(monkeypatch)
    first = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[TOOL])  # type: ignore[list-item]
    check_answer(first)
    second = client.responses.create(
        model="hotloop-sim",
        previous_response_id=first.id,
        input="And the lunch?",
        tools=[TOOL],  # type: ignore[list-item]
    )
    check_answer(second, "And the lunch")
    decode = server.service.models.resolve("hotloop-sim").chat.tokenizer.decode
    prompts = [list(generation.prompt_tokens) for generation in generations]
    assert len(prompts) == 4
    # The search's results enter the prompt after what was rendered: each prompt extends the one before.
    for before, after in itertools.pairwise(prompts):
        assert after[: len(before)] == before
    read = decode(prompts[1][len(prompts[0]) :])
    assert "[1] manual.md (file-manual)\nThe server listens on port 8080." in read and file_search.CITE_HINT in read
    assert "The server listens on port 8080." in decode(prompts[2])  # the continuation's context holds them
    server.service.chains.clear()  # the chain read back from the store: its search kept its results
    third = client.responses.create(
        model="hotloop-sim",
        previous_response_id=first.id,
        input="Once more?",
        tools=[TOOL],  # type: ignore[list-item]
    )
    check_answer(third, "Once more")
    assert "The server listens on port 8080." in decode(list(generations[4].prompt_tokens))


def test_a_stateless_client_resends_the_search(client: openai.OpenAI, searches: Searches) -> None:
    first = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[TOOL], store=False)  # type: ignore[list-item]
    history: Any = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in first.output],
    ]
    second = client.responses.create(
        model="hotloop-sim",
        input=[*history, {"role": "user", "content": "More?"}],
        tools=[TOOL],  # type: ignore[list-item]
    )
    check_answer(second, "More")


def test_websocket_mode_searches_and_continues(server: RunningServer, searches: Searches) -> None:
    with ws_client(server).responses.connect() as conn:
        response, events = run_turn(
            conn, model="hotloop-sim", input=QUESTION, tools=[TOOL], store=False, include=RESULTS
        )
        call, _ = check_answer(response)
        assert call.results is not None and call.results[0].file_id == "file-manual"
        kinds = [event.type for event in events]
        assert kinds.count("response.file_search_call.completed") == 1
        assert kinds.count("response.output_text.annotation.added") == 1
        follow, _ = run_turn(
            conn, model="hotloop-sim", previous_response_id=response.id, input="Again?", tools=[TOOL], store=False
        )
        follow_call, _ = check_answer(follow, "Again")
        assert follow_call.results is None
    assert len(searches.asked) == 2


def test_the_model_answers_without_searching_when_told_not_to(client: openai.OpenAI, searches: Searches) -> None:
    response = client.responses.create(model="hotloop-sim", input=QUESTION, tools=[TOOL], tool_choice="none")  # type: ignore[list-item]
    assert [item.type for item in response.output] == ["message"] and not searches.asked


# -- the kind's own rules (no server) ----------------------------------------------------------------------------------


def searched(*names: tuple[str, str]) -> FileSearchCall:
    results = [FileSearchResult(file_id=file_id, filename=filename, text="…") for file_id, filename in names]
    return FileSearchCall(id="fs_1", queries=["q"], status="completed", results=results)


@pytest.mark.fast
def test_citations_follow_labels_then_filenames() -> None:
    latest = searched(("f1", "a.md"), ("f2", "b.txt"))
    earlier = searched(("f0", "old.pdf"))
    text = "See [2] and [1]; b.txt again, old.pdf too, [9] is no result, and a.mdx is no filename."
    assert file_search.citations(text, [earlier, latest]) == [
        FileCitation("f2", "b.txt", 4),
        FileCitation("f1", "a.md", 12),
        FileCitation("f0", "old.pdf", text.index("old.pdf")),
    ]
    assert file_search.citations("Nothing cited.", [latest]) == []
    assert file_search.citations("[1]", []) == []


@pytest.mark.fast
def test_how_a_search_reads_to_the_model() -> None:
    call = searched(("f1", "a.md"))
    function_call, output = file_search.lower(call)
    assert json.loads(function_call.arguments) == {"queries": ["q"]} and function_call.name == "file_search"
    assert output.output == "[1] a.md (f1)\n…\n\n" + file_search.CITE_HINT
    assert file_search.output_text(msgspec.structs.replace(call, results=[])) == file_search.NO_RESULTS
    assert file_search.output_text(msgspec.structs.replace(call, results=msgspec.UNSET)) == file_search.NOT_AVAILABLE
    assert file_search.output_text(msgspec.structs.replace(call, status="failed")) == file_search.FAILED
    assert file_search.output_text(msgspec.structs.replace(call, status="incomplete")) == file_search.NOT_RUN
    assert file_search.queries_of('{"query": "ports"}') == ["ports"] and file_search.queries_of("ports?") == ["ports?"]


@pytest.mark.fast
def test_hotloop_sim_reads_its_prompts_last_messages() -> None:
    tail = (
        "lo<|im_end|>\n<|im_start|>user\nPorts?<|im_end|>\n"
        "<|im_start|>tool\n[1] a.md (f1)<|im_end|>\n<|im_start|>assistant\n"
    )
    assert _latest_messages(tail) == [("user", "Ports?"), ("tool", "[1] a.md (f1)")]
    assert file_search.sample_queries("Which port, please?") == ["Which port please"]
    assert file_search.read_results(file_search.output_text(searched(("f1", "a.md"))))
    assert not file_search.read_results(file_search.FAILED)
