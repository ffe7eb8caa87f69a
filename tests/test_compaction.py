"""Server-side compaction inside a create (`context_management`, issue 14; pipeline/compaction.py).

A 100-turn agent loop on hotloop-sim with a 16k window runs to its end through compaction, over WebSocket and
HTTP, stored or not (HTTP stateless: the client resends everything, or drops what precedes the latest compaction);
the compaction item streams first and is schema-valid; usage counts the summary; bad entries are 400s naming the
parameter with nothing stored; behind a `tokens` engine the turn after a compaction finds the compacted prompt
and what it generated in the engine's prefix cache.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RunningServer, start_server, stored_counts
from hotloop.config import Upstream
from http_support import calls, check_sequence, error_of, output_text, parse_sse
from openai_types_support import openai_typed
from simengine_support import SimEngineProcess
from wsutil import WS, final

WINDOW = 16_384
THRESHOLD = 8_000
TURNS = 100
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}
# About 600 tokens of tool output a turn: 100 turns hold some 60k tokens, almost four windows.
OUTPUT = "".join(f"src/module_{i}.py:{i}: def handler_{i}(request): return render(request, {i})\n" for i in range(40))
COMPACT = [{"type": "compaction", "compact_threshold": THRESHOLD}]
META = {"sim_tool_calls": str(TURNS - 1), "sim_output_tokens": "40"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("small"), models=["hotloop-sim"], sim_context_window=WINDOW)
    yield running
    running.stop()


def _body(**extra: Any) -> dict[str, Any]:
    return {"tools": [SHELL], "context_management": COMPACT, "metadata": META, "instructions": "Fix the bug.", **extra}


def _answers(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function_call_output", "call_id": c["call_id"], "output": OUTPUT} for c in calls(response)]


def _check_loop(responses: list[dict[str, Any]]) -> list[int]:
    """The loop ran to its end; the turns that compacted (their compaction item first)."""
    assert len(responses) == TURNS and output_text(responses[-1]), [r["status"] for r in responses]
    assert all(r["status"] == "completed" for r in responses)
    compacted = [n for n, r in enumerate(responses) if r["output"][0]["type"] == "compaction"]
    assert len(compacted) >= 3, compacted  # 60k tokens through an 8k threshold
    for n in compacted:
        item = responses[n]["output"][0]
        assert item["id"].startswith("cmp_") and item["encrypted_content"]
        assert [i["type"] for i in responses[n]["output"][1:]] in (["function_call"], ["message"])
        # Usage counts the summary: its prompt (the whole context, past the threshold) and the compacted one.
        assert responses[n]["usage"]["input_tokens"] > THRESHOLD
    for before, after in itertools.pairwise(compacted):
        assert after - before > 3  # a compacted context grows again before the next compaction
    # Each compaction replaces the one before (its summary is not kept again): the compacted context stays small.
    restarts = [responses[n + 1]["usage"]["input_tokens"] for n in compacted if n + 1 < len(responses)]
    assert max(restarts) - min(restarts) < 300 and max(restarts) < THRESHOLD // 2, restarts
    return compacted


@pytest.mark.parametrize("store", [True, False], ids=["stored", "stateless"])
def test_a_long_loop_over_websocket_compacts_and_runs_to_its_end(small: RunningServer, store: bool) -> None:
    """…and every turn after a compaction extends the compacted prompt: the only full renders are the first
    turn's and, per compaction, the summary's prompt and the compacted context."""
    stats = small.service.renderer.stats
    full_before = stats.full_renders
    responses: list[dict[str, Any]] = []
    with WS(small.ws_url) as ws:
        events = ws.turn(**_body(input="The tests fail; find out why.", store=store))
        responses.append(final(events))
        while calls(responses[-1]):
            turn = ws.turn(
                timeout=30,
                **_body(input=_answers(responses[-1]), previous_response_id=responses[-1]["id"], store=store),
            )
            if final(turn)["output"][0]["type"] == "compaction":
                added = [e for e in turn if e["type"] == "response.output_item.added"]
                assert added[0]["item"]["type"] == "compaction" and added[0]["output_index"] == 0
            responses.append(final(turn))
    compacted = _check_loop(responses)
    assert stats.full_renders - full_before == 1 + 2 * len(compacted)


@pytest.mark.parametrize("mode", ["chained", "resent", "pruned"])
def test_a_long_loop_over_http_compacts_and_runs_to_its_end(small: RunningServer, mode: str) -> None:
    """`chained`: stored, previous_response_id; `resent`: stateless, every item resent; `pruned`: stateless, the
    items before the latest compaction dropped, as OpenAI's guide allows."""
    history: list[Any] = [{"role": "user", "content": "The tests fail; find out why."}]
    responses: list[dict[str, Any]] = []
    with small.http() as http:
        while True:
            if mode == "chained":
                body = _body(input=history if not responses else _answers(responses[-1]))
                if responses:
                    body["previous_response_id"] = responses[-1]["id"]
            else:
                body = _body(input=history, store=False)
            stream = mode == "pruned" and len(responses) % 10 == 9  # now and then streamed: the same events
            reply = http.post("/responses", json={**body, "stream": stream})
            assert reply.status_code == 200, reply.text
            response = check_sequence(parse_sse(reply.text)) if stream else reply.json()
            responses.append(response)
            if not calls(response):
                break
            history = [*history, *response["output"], *_answers(response)]
            if mode == "pruned":
                kinds = [item.get("type") for item in history]
                if "compaction" in kinds:
                    history = history[len(kinds) - 1 - kinds[::-1].index("compaction") :]
        compacted = _check_loop(responses)
        if mode == "chained":  # stored with its compaction item, and replayed with it
            stored = responses[compacted[0]]
            assert http.get(f"/responses/{stored['id']}").json()["output"] == stored["output"]
            replay = parse_sse(http.get(f"/responses/{stored['id']}", params={"stream": "true"}).text)
            assert check_sequence(replay)["output"][0]["type"] == "compaction"


def test_pruning_before_the_latest_compaction_changes_nothing(small: RunningServer) -> None:
    """A stateless client may drop the items before the latest compaction: the model reads the same prompt."""
    history: list[Any] = [{"role": "user", "content": "Go."}]
    with small.http() as http:
        response: dict[str, Any] = {}
        while not response or response["output"][0]["type"] != "compaction":
            response = http.post("/responses", json=_body(input=history, store=False)).json()
            history = [*history, *response["output"], *_answers(response)]
        start = next(n for n, item in enumerate(history) if item.get("type") == "compaction")

        def count(items: list[Any]) -> int:
            reply = http.post(
                "/responses/input_tokens", json={"tools": [SHELL], "instructions": "Fix the bug.", "input": items}
            )
            tokens: int = reply.json()["input_tokens"]
            return tokens

        whole, pruned = count(history), count(history[start:])
        uncompacted = count([item for item in history if item.get("type") != "compaction"])
    assert whole == pruned < uncompacted // 2


@pytest.mark.parametrize(
    ("entries", "param"),
    [
        ("compaction", "context_management"),
        ([{"type": "truncation"}], "context_management[0].type"),
        ([{"compact_threshold": 5000}], "context_management[0].type"),
        ([{"type": "compaction", "compact_threshold": 10}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": "8000"}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": True}], "context_management[0].compact_threshold"),
        ([{"type": "compaction"}, {"type": "compaction"}], "context_management[1]"),
        (["compaction"], "context_management[0]"),
    ],
)
def test_bad_entries_are_400s_naming_the_parameter(small: RunningServer, entries: Any, param: str) -> None:
    before = stored_counts(small)
    with small.http() as http:
        reply = http.post("/responses", json={"input": "hi", "context_management": entries})
        error_of(reply, 400, reply.json()["error"]["code"], param)
    assert stored_counts(small) == before
    with WS(small.ws_url) as ws:
        frame = ws.error(input="hi", context_management=entries)
        assert frame["status"] == 400 and frame["error"]["param"] == param


def test_a_history_past_the_window_is_compacted_not_refused(small: RunningServer) -> None:
    """A stateless client resumes a session longer than the window: compacted first (without compaction, or with a
    threshold past the window, it is `context_length_exceeded`)."""
    history: list[Any] = [{"role": "user", "content": "Go."}]
    for n in range(40):  # ~24k tokens of calls and outputs
        call = {"type": "function_call", "call_id": f"c{n}", "name": "shell", "arguments": '{"command": "ls"}'}
        history += [call, {"type": "function_call_output", "call_id": f"c{n}", "output": OUTPUT}]
    history.append({"role": "user", "content": "Now fix it."})
    with small.http() as http:
        response = http.post("/responses", json=_body(input=history, store=False)).json()
        assert response["status"] == "completed" and response["output"][0]["type"] == "compaction"
        assert response["usage"]["input_tokens"] > WINDOW  # the summary read it all (its oldest items left out)
        for entries in (None, [{"type": "compaction", "compact_threshold": 10 * WINDOW}]):
            reply = http.post("/responses", json=_body(input=history, store=False, context_management=entries))
            error_of(reply, 400, "context_length_exceeded", "input")


def test_a_first_message_past_the_threshold_is_compacted_once(small: RunningServer) -> None:
    """Threshold 2 000, a first message of 4 000 words: the compaction leaves it to the summary (it does not fit
    below the threshold), so the compacted context is below it and the next turn does not compact again."""
    words = ["the", "tests", "fail", "in", "parse", "when", "the", "input", "is", "empty"]
    first = " ".join(words[n % len(words)] for n in range(4000))
    body = {
        "context_management": [{"type": "compaction", "compact_threshold": 2000}],
        "metadata": {"sim_output_tokens": "40"},
    }
    with small.http() as http:
        assert http.post("/responses/input_tokens", json={"input": first}).json()["input_tokens"] > 4000
        one = http.post("/responses", json={**body, "input": first}).json()
        two = http.post("/responses", json={**body, "input": "Go on.", "previous_response_id": one["id"]}).json()
        compacted = http.post("/responses/input_tokens", json={"input": [one["output"][0]]}).json()["input_tokens"]
    assert one["status"] == two["status"] == "completed"
    assert [item["type"] for item in one["output"]] == ["compaction", "message"]
    assert [item["type"] for item in two["output"]] == ["message"]  # exactly one compaction
    assert compacted < 1000  # the compacted context: below half the threshold
    assert two["usage"]["input_tokens"] < 2000


def test_below_the_threshold_nothing_is_compacted(small: RunningServer) -> None:
    with small.http() as http:
        response = http.post("/responses", json=_body(input="Short.")).json()
        default = http.post("/responses", json=_body(input="Short.", context_management=[{"type": "compaction"}]))
    assert response["output"][0]["type"] == "function_call"
    assert default.json()["output"][0]["type"] == "function_call"  # 80 % of the window by default


TRIGGER = {"type": "compaction_trigger"}


@pytest.mark.parametrize("transport", ["sse", "websocket"])
def test_a_compaction_trigger_compacts_now_and_the_chain_goes_on_from_it(small: RunningServer, transport: str) -> None:
    """protocol.md §1.12: `compaction_trigger` as the last input item compacts whatever the prompt's size (no
    `context_management` given, far below any threshold): the compaction item opens, `response.compaction.compacting`
    names it while the summary is sampled, every event is openai-python's, and the next turn continues from it."""
    first = {"input": "Fix the parser.", "metadata": {"sim_output_tokens": "20"}}
    with small.http() as http:
        one = http.post("/responses", json=first).json()
        body = {"input": [{"role": "user", "content": "Compact now."}, TRIGGER], "previous_response_id": one["id"]}
        if transport == "sse":
            events = parse_sse(http.post("/responses", json={**body, "stream": True}).text)
        else:
            with WS(small.ws_url) as ws:
                events = ws.turn(**body)
    compacting = [event for event in events if event["type"] == "response.compaction.compacting"]
    added = [event for event in events if event["type"] == "response.output_item.added"]
    done = [event for event in events if event["type"] == "response.output_item.done"]
    assert len(compacting) == 1 and added[0]["item"]["type"] == "compaction"
    assert compacting[0]["item_id"] == added[0]["item"]["id"] == done[0]["item"]["id"]
    assert compacting[0]["output_index"] == 0 and done[0]["item"]["encrypted_content"]
    # Opened with no content, then being made while the summary is sampled, then done with it.
    assert events.index(added[0]) < events.index(compacting[0]) < events.index(done[0])
    for event in events:
        openai_typed("event", event)
    two = final(events) if transport == "websocket" else check_sequence(events)
    assert two["status"] == "completed" and two["output"][0]["type"] == "compaction"
    with small.http() as http:
        three = http.post("/responses", json={"input": "Go on.", "previous_response_id": two["id"]}).json()
        items = http.get(f"/responses/{two['id']}/input_items").json()["data"]
    assert three["status"] == "completed" and three["output"][0]["type"] != "compaction"
    assert [item["type"] for item in items] == ["message"]  # the trigger is an instruction, not an input item


def test_a_compaction_trigger_that_is_not_the_last_item_is_refused(small: RunningServer) -> None:
    before = stored_counts(small)
    with small.http() as http:
        reply = http.post("/responses", json={"input": [TRIGGER, {"role": "user", "content": "hi"}]})
        error_of(reply, 400, "invalid_value", "input[0]")
    assert stored_counts(small) == before


def test_after_a_compaction_the_engine_finds_the_compacted_prompt_cached(tmp_path: Path) -> None:
    """Behind a `tokens` engine: the compacting turn's prompt is new to the engine (its one miss); the next turn's
    prompt extends the compacted prompt and what the engine generated on it."""
    engine = SimEngineProcess(tps=20_000, prefill_us_per_token=1, tool_calls=TURNS - 1, output_tokens=40).wait_ready()
    upstream = Upstream(url=engine.base_url, backend="tokens", dialect="vllm", context_window=WINDOW, read_timeout_s=30)
    server = start_server(tmp_path, models=["engine"], default_model="engine", upstreams={"engine": upstream})
    responses: list[dict[str, Any]] = []
    try:
        with server.http() as http:
            response = http.post("/responses", json=_body(input="Go.")).json()
            responses.append(response)
            while len(responses) < 40 and calls(response):
                body = _body(input=_answers(response), previous_response_id=response["id"])
                response = http.post("/responses", json=body).json()
                assert response["status"] == "completed", response
                responses.append(response)
        records = engine.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    finally:
        server.stop()
        engine.stop()
    compacted = [n for n, r in enumerate(responses) if r["output"][0]["type"] == "compaction"]
    assert compacted and compacted[0] + 1 < len(responses)
    # One engine request a turn, two for a compacting turn (the summary, then the answer).
    generating = [r for r in records if r["path"] == "/v1/completions"]
    assert len(generating) == len(responses) + len(compacted)
    first = compacted[0]
    main = generating[first + 1]  # the compacting turn's answer, after its summary (turns before: one each)
    after = generating[first + 2]
    assert main["cached_tokens"] < main["prompt_tokens"] // 2  # the compacted prompt is new to the engine
    assert after["cached_tokens"] >= main["prompt_tokens"] + main["output_ids"]
    assert responses[first + 1]["usage"]["input_tokens"] < THRESHOLD


def test_a_client_gone_during_the_summary_leaves_a_cancelled_response(small: RunningServer) -> None:
    history: list[Any] = [{"role": "user", "content": "Go."}]
    for n in range(16):  # past the threshold: this create compacts first
        call = {"type": "function_call", "call_id": f"c{n}", "name": "shell", "arguments": '{"command": "ls"}'}
        history += [call, {"type": "function_call_output", "call_id": f"c{n}", "output": OUTPUT}]
    slow = {**META, "sim_ttft_ms": "3000"}  # the summary's first token is 3 s away
    with WS(small.ws_url) as ws:
        ws.create(**_body(input=history, metadata=slow))
        created = ws.recv()
        assert ws.recv()["type"] == "response.in_progress"
    response_id = created["response"]["id"]
    with small.http() as http:
        deadline = time.monotonic() + 10
        while (status := http.get(f"/responses/{response_id}").json().get("status")) != "cancelled":
            assert time.monotonic() < deadline, status
            time.sleep(0.05)


def test_an_engine_behind_the_chat_api_compacts_too(tmp_path: Path) -> None:
    """hotloop does not tokenize for a chat-API engine: the parent's usage and the new input's size measure the
    prompt; the summary and the answer are two engine requests, and the loop goes on from the compaction."""
    engine = SimEngineProcess(tps=20_000, prefill_us_per_token=1, tool_calls=99, output_tokens=40).wait_ready()
    upstream = Upstream(url=engine.base_url, context_window=WINDOW, read_timeout_s=30)
    server = start_server(tmp_path, models=["chat"], default_model="chat", upstreams={"chat": upstream})
    responses: list[dict[str, Any]] = []
    try:
        with server.http() as http:
            response = http.post("/responses", json=_body(input="Go.")).json()
            responses.append(response)
            while calls(response) and len(responses) < 12:  # the engine counts only the calls it is sent
                body = _body(input=_answers(response), previous_response_id=response["id"])
                response = http.post("/responses", json=body).json()
                assert response["status"] == "completed", response
                responses.append(response)
        requests = [
            r for r in engine.http.get("/stats/requests").json()["requests"] if r["path"] == "/v1/chat/completions"
        ]
    finally:
        server.stop()
        engine.stop()
    compacted = [n for n, r in enumerate(responses) if r["output"][0]["type"] == "compaction"]
    assert len(responses) == 12 and compacted and compacted[0] + 1 < len(responses)
    assert len(requests) == len(responses) + len(compacted)
    after = compacted[0] + 1
    # The turn after the compaction sent the compacted context: far fewer prompt tokens than the one before it.
    assert responses[after]["usage"]["input_tokens"] < responses[compacted[0] - 1]["usage"]["input_tokens"]
