"""The usage ledger through a real server: one record per response on every transport, GET /v1/usage, per-key
isolation, no raw key on disk, and no record lost when `hotloop serve` gets SIGTERM under load."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningServer, start_server
from hotloop.backends.base import Delta, GenerationRequest
from hotloop.pipeline.state.session import owner_of
from http_support import parse_sse, wait_status
from process_support import ServerProcess
from wsutil import WS, final

SIM = "hotloop-sim"
SLOW = {"sim_tps": "5"}


@pytest.fixture(scope="module")
def usage_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(
        tmp_path_factory.mktemp("usage"), api_keys=["key-a", "key-b"], models=[SIM], ledger_flush_ms=10.0
    )
    yield running
    running.stop()


def records(http: httpx.Client, **params: Any) -> dict[str, Any]:
    reply = http.get("/usage", params={"limit": 1000, **params})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def wait_records(http: httpx.Client, ids: list[str], timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    """The caller's records of these responses, once all are written (the ledger flushes in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        found = {rec["response_id"]: rec for rec in records(http)["data"] if rec["response_id"] in ids}
        if len(found) == len(ids):
            return found
        assert time.monotonic() < deadline, f"records missing: {set(ids) - set(found)}"
        time.sleep(0.02)


def assert_matches(record: dict[str, Any], response: dict[str, Any], transport: str) -> None:
    usage = response["usage"] or {"input_tokens": 0, "output_tokens": 0, "input_tokens_details": {"cached_tokens": 0}}
    assert record["model"] == response["model"] and record["status"] == response["status"]
    assert record["input_tokens"] == usage["input_tokens"]
    assert record["cached_tokens"] == usage["input_tokens_details"]["cached_tokens"]
    assert record["output_tokens"] == usage["output_tokens"]
    assert record["transport"] == transport
    assert record["owner"] == owner_of("key-a", True)  # the store's hash, never the key
    timings = record["timings"]  # stage timings in ms (observability/timings.py)
    assert {"validate", "resolve", "render", "pre_inference"} <= set(timings), timings
    assert all(value >= 0 for value in timings.values())
    assert abs(record["created_at"] - time.time()) < 600


# -- one record per response, on every transport ---------------------------------------------------------------------


def test_http_json_and_sse_records_match_the_responses(usage_server: RunningServer) -> None:
    with usage_server.http("key-a") as http:
        first = http.post("/responses", json={"model": SIM, "input": "hello there"}).json()
        follow = http.post(
            "/responses", json={"model": SIM, "input": "and again", "previous_response_id": first["id"]}
        ).json()
        assert follow["usage"]["input_tokens_details"]["cached_tokens"] > 0
        reply = http.post("/responses", json={"model": SIM, "input": "stream it", "stream": True})
        streamed = parse_sse(reply.text)[-1]["response"]
        found = wait_records(http, [first["id"], follow["id"], streamed["id"]])
    assert_matches(found[first["id"]], first, "http")
    assert_matches(found[follow["id"]], follow, "http")
    assert_matches(found[streamed["id"]], streamed, "sse")


def test_websocket_records_match_the_responses(usage_server: RunningServer) -> None:
    with WS(usage_server.ws_url, api_key="key-a") as ws:
        one = final(ws.turn(model=SIM, input="over the socket"))
        two = final(ws.turn(model=SIM, input="continue", previous_response_id=one["id"]))
    assert two["usage"]["input_tokens_details"]["cached_tokens"] > 0
    with usage_server.http("key-a") as http:
        found = wait_records(http, [one["id"], two["id"]])
    assert_matches(found[one["id"]], one, "websocket")
    assert_matches(found[two["id"]], two, "websocket")


class BrokenBackend:
    async def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        raise RuntimeError("backend exploded")
        yield  # an async generator

    async def prefill(self, prompt_tokens: list[int]) -> int:
        return 0

    async def close(self) -> None:
        pass


def test_failed_and_cancelled_responses_are_recorded(usage_server: RunningServer) -> None:
    model = usage_server.service.models.resolve(SIM)
    original = model.backend
    model.backend = BrokenBackend()
    try:
        with usage_server.http("key-a") as http:
            reply = http.post("/responses", json={"model": SIM, "input": "fail", "stream": True})
            failed = parse_sse(reply.text)[-1]["response"]
    finally:
        model.backend = original
    assert failed["status"] == "failed"
    with usage_server.http("key-a") as http:
        # A background response cancelled mid-generation.
        background = http.post(
            "/responses", json={"model": SIM, "input": "slow", "background": True, "metadata": SLOW}
        ).json()
        wait_status(http, background["id"], {"in_progress"}, missing_ok=True)
        cancelled = http.post(f"/responses/{background['id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        # An SSE stream the client walks away from.
        with http.stream(
            "POST", "/responses", json={"model": SIM, "input": "slow", "stream": True, "metadata": SLOW}
        ) as r:
            lines = r.iter_lines()
            head = [next(lines) for _ in range(2)]
        dropped_id = json.loads(head[1].removeprefix("data: "))["response"]["id"]
        dropped = wait_status(http, dropped_id, {"cancelled"}, missing_ok=True)
        found = wait_records(http, [failed["id"], cancelled["id"], dropped_id])
    assert_matches(found[failed["id"]], failed, "sse")
    assert_matches(found[cancelled["id"]], cancelled, "http")
    assert_matches(found[dropped_id], dropped, "sse")
    assert {found[i]["status"] for i in (cancelled["id"], dropped_id)} == {"cancelled"}


# -- GET /v1/usage -----------------------------------------------------------------------------------------------------


def test_usage_paging_totals_and_model_filter(tmp_path: Path) -> None:
    server = start_server(tmp_path, models=[SIM], ledger_flush_ms=10.0)
    try:
        with server.http() as http:
            created = [http.post("/responses", json={"input": f"number {n}"}).json() for n in range(5)]
            ids = [response["id"] for response in created]
            wait_records(http, ids)
            whole = records(http)
            assert [rec["response_id"] for rec in whole["data"]] == ids  # oldest first
            assert whole["object"] == "list" and whole["has_more"] is False
            assert (whole["first_id"], whole["last_id"]) == (ids[0], ids[-1])
            assert whole["totals"] == {
                "responses": 5,
                "input_tokens": sum(r["usage"]["input_tokens"] for r in created),
                "cached_tokens": sum(r["usage"]["input_tokens_details"]["cached_tokens"] for r in created),
                "output_tokens": sum(r["usage"]["output_tokens"] for r in created),
            }
            seen: list[str] = []
            after: str | None = None
            pages = 0
            while True:
                page = records(http, limit=2, **({"after": after} if after else {}))
                assert page["totals"] == whole["totals"]  # totals cover every page
                seen += [rec["response_id"] for rec in page["data"]]
                pages += 1
                if not page["has_more"]:
                    break
                after = page["last_id"]
            assert seen == ids and pages == 3
            assert records(http, after=ids[-1])["data"] == []
            assert records(http, after="resp_unknown")["data"] == []
            default = http.get("/usage").json()
            assert len(default["data"]) == 5
            assert records(http, model=SIM)["totals"]["responses"] == 5
            other = records(http, model="other-model")
            assert other["data"] == [] and other["totals"]["responses"] == 0
            assert (other["first_id"], other["last_id"]) == (None, None)
            for bad in ("0", "1001", "ten", "-1"):
                reply = http.get("/usage", params={"limit": bad})
                assert reply.status_code == 400, bad
                assert reply.json()["error"]["param"] == "limit"
            assert http.post("/usage").status_code == 405
    finally:
        server.stop()


def test_usage_is_per_key_and_the_key_never_reaches_the_disk(usage_server: RunningServer) -> None:
    with usage_server.http("key-a") as a, usage_server.http("key-b") as b:
        mine = a.post("/responses", json={"model": SIM, "input": "a's secret business"}).json()
        theirs = b.post("/responses", json={"model": SIM, "input": "b's"}).json()
        wait_records(a, [mine["id"]])
        wait_records(b, [theirs["id"]])
        b_ids = {rec["response_id"] for rec in records(b)["data"]}
        a_ids = {rec["response_id"] for rec in records(a)["data"]}
        assert mine["id"] not in b_ids and theirs["id"] in b_ids
        assert theirs["id"] not in a_ids and not (a_ids & b_ids)
        assert {rec["owner"] for rec in records(b)["data"]} == {owner_of("key-b", True)}
        assert records(b)["totals"]["responses"] == len(b_ids)
        assert records(b, after=mine["id"])["data"] == []  # another key's cursor finds nothing
    with usage_server.http(None) as anonymous:
        assert anonymous.get("/usage").status_code == 401
    with usage_server.http("key-c") as wrong:
        assert wrong.get("/usage").status_code == 401
    data_dir = Path(usage_server.settings.data_dir)
    files = list(data_dir.glob("hotloop.db*"))
    assert files
    for path in files:
        raw = path.read_bytes()
        assert b"key-a" not in raw and b"key-b" not in raw, path


# -- the store directly ------------------------------------------------------------------------------------------------


# The store's usage methods (idempotent appends, paging, totals, owners) are in tests/test_store_contract.py,
# on every store.


# -- SIGTERM under load ------------------------------------------------------------------------------------------------


def test_sigterm_under_load_loses_no_record(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path,
        ledger_flush_ms=5000,  # records are still buffered when the signal arrives
        ledger_batch=100000,
        sim_ttft_ms=5,
        sim_tps=2000,
        sim_output_tokens=16,
    )
    port, base = server.port, server.base_url
    completed: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def http_client(stream: bool) -> None:
        with httpx.Client(base_url=base, timeout=10) as http:
            while not stop.is_set():
                try:
                    reply = http.post("/responses", json={"input": "load", "stream": stream})
                except httpx.HTTPError:
                    return  # the server is going away
                if reply.status_code != 200:
                    continue
                if stream:
                    events = [
                        json.loads(line.removeprefix("data: "))
                        for line in reply.text.split("\n")
                        if line.startswith("data: {")
                    ]
                    if not events or events[-1]["type"] != "response.completed":
                        continue
                    response_id = events[-1]["response"]["id"]
                else:
                    body = reply.json()
                    if body.get("status") != "completed":
                        continue
                    response_id = body["id"]
                with lock:
                    completed.append(response_id)

    def ws_client() -> None:
        try:
            with WS(f"ws://127.0.0.1:{port}/v1/responses") as ws:
                while not stop.is_set():
                    events = ws.turn(input="load over ws")
                    if events[-1]["type"] == "response.completed":
                        with lock:
                            completed.append(events[-1]["response"]["id"])
        except Exception:
            return  # closed by the shutdown

    threads: list[threading.Thread] = []
    try:
        server.wait_ready()
        threads = [threading.Thread(target=http_client, args=(n % 2 == 1,), daemon=True) for n in range(6)]
        threads.append(threading.Thread(target=ws_client, daemon=True))
        for thread in threads:
            thread.start()
        load_deadline = time.monotonic() + 10
        while len(completed) < 40:
            assert time.monotonic() < load_deadline, "no load"
            time.sleep(0.02)
        with lock:
            before_signal = len(completed)
        with sqlite3.connect(tmp_path / "hotloop.db") as conn:
            written_before = conn.execute("SELECT COUNT(*) FROM usage").fetchone()[0]
        assert written_before < before_signal  # the ledger really was holding records back
    finally:
        server.signal(signal.SIGTERM)
        returncode = server.wait(timeout=60)
        output = server.output()
        stop.set()
        for thread in threads:
            thread.join(15)
    assert returncode in (0, -signal.SIGTERM), output
    assert "Traceback" not in output, output
    with sqlite3.connect(tmp_path / "hotloop.db") as conn:
        usage_rows = conn.execute("SELECT response_id, status FROM usage").fetchall()
        response_ids = {row[0] for row in conn.execute("SELECT id FROM responses")}
    usage_ids = [row[0] for row in usage_rows]
    assert len(usage_ids) == len(set(usage_ids))
    missing = set(completed) - set(usage_ids)
    assert not missing, f"{len(missing)} of {len(completed)} completed responses have no usage record"
    assert set(usage_ids) <= response_ids  # every record belongs to a response that exists
    assert len(completed) >= before_signal
