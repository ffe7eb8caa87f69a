"""The pipeline without a socket (the fast tier): admission, `start_turn` and `Turn.events()` on a built service
(hotloop-sim, SQLite in a temporary directory), driven the way every transport drives them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hotloop.config import Settings
from hotloop.errors import HotloopError, StoreUnavailable
from hotloop.pipeline import background
from hotloop.pipeline.admission.entry import admit
from hotloop.pipeline.prepared import MEASURE_OPTIONS, TurnOptions
from hotloop.pipeline.service import Service
from hotloop.pipeline.turn import Turn
from hotloop.transports.app import build_service
from hotloop.wire.request import decode_create

pytestmark = pytest.mark.fast

SIM = "hotloop-sim"


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Service]:
    settings = Settings(
        data_dir=str(tmp_path), models=[SIM], default_model=SIM, sim_ttft_ms=0.0, sim_tps=50_000.0, rate_limit_rpm=3
    )
    built = build_service(settings)
    built.start()
    yield built
    await built.close()


def _create(**body: Any) -> Any:
    return decode_create(msgspec.json.encode({"model": SIM, **body}))


async def _run(turn: Turn) -> list[dict[str, Any]]:
    return [msgspec.json.decode(event.data) async for event in turn.events()]


async def test_a_turn_and_its_continuation_on_a_lane(service: Service) -> None:
    session = service.session("owner", caching=True)
    options = TurnOptions(websocket=True, lane=None, transport="websocket")
    first = await admit(service, session, _create(input="hi", store=False), options)
    events = await _run(first)
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert session.cached(first.response.id) is not None  # the lane holds it: the next turn renders only its input
    hits = service.renderer.stats.chain_hits
    second = await admit(
        service, session, _create(input="more", previous_response_id=first.response.id, store=False), options
    )
    assert second.prepared.parent is not None and second.prepared.parent.response.id == first.response.id
    assert (await _run(second))[-1]["response"]["previous_response_id"] == first.response.id
    assert service.renderer.stats.chain_hits == hits + 1


async def test_admission_order_and_the_evicted_parent(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    session = service.session("owner", caching=True)
    options = TurnOptions(websocket=True, lane="a", stream_id="a", transport="websocket")
    parent = await admit(service, session, _create(input="hi", store=False), options)
    await _run(parent)

    # The store is seen down: a create that would store is refused before start_turn runs; its parent is
    # evicted from the lane (§3.8.3). One that stores nothing is not probed.
    async def down() -> None:
        raise StoreUnavailable("The response store is unavailable.")

    monkeypatch.setattr(service.store, "ensure_available", down)
    with pytest.raises(StoreUnavailable):
        await admit(service, session, _create(input="x", previous_response_id=parent.response.id), options)
    assert session.cached(parent.response.id) is None
    await _run(await admit(service, session, _create(input="y", store=False), options))
    # The key's third create this minute is its last; the fourth is refused (429) before it is prepared.
    with pytest.raises(HotloopError) as limited:
        await admit(service, session, _create(input="z", store=False), options)
    assert (limited.value.status, limited.value.code) == (429, "rate_limit_exceeded")
    # Draining comes first of all.
    service.drain.begin()
    with pytest.raises(HotloopError) as draining:
        await admit(service, session, _create(input="z", store=False), options)
    assert (draining.value.status, draining.value.code) == (503, "server_is_overloaded")


async def test_a_measured_turn_probes_no_store_and_leaves_nothing_to_resend(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /v1/responses/input_tokens's turn (`MEASURE_OPTIONS`): admitted (drain, rate limit), never run."""
    session = service.session("owner", caching=False)
    history = [{"role": "user", "content": "Fix the bug."}, {"role": "user", "content": "In parse()."}]

    async def down() -> None:
        raise StoreUnavailable("The response store is unavailable.")

    monkeypatch.setattr(service.store, "ensure_available", down)
    measured = await admit(service, session, _create(input=history), MEASURE_OPTIONS)
    assert len(measured.prepared.generation.prompt_tokens) > 0
    assert len(service.resent) == 0 and service.resent.match("owner", measured.prepared.request.input) is None
    await admit(service, session, _create(input=history, store=False))  # a create is kept for a resend
    assert len(service.resent) == 1
    service.drain.begin()
    with pytest.raises(HotloopError) as draining:
        await admit(service, session, _create(input=history), MEASURE_OPTIONS)
    assert (draining.value.status, draining.value.code) == (503, "server_is_overloaded")


async def test_a_client_that_goes_away_cancels_the_turn(service: Service) -> None:
    """A transport whose client disconnects cancels the task consuming the events (transports/http.py, sse.py)."""
    session = service.session("owner", caching=False)
    turn = await admit(service, session, _create(input="long", store=False, metadata={"sim_tps": "50"}))
    seen: list[str] = []

    async def consume() -> None:
        async for event in turn.events():
            seen.append(msgspec.json.decode(event.data)["type"])

    task = asyncio.create_task(consume())
    while "response.output_text.delta" not in seen:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not service.drain.turns  # the turn left the set of turns in flight
    assert turn.response.status == "cancelled"
    assert "response.completed" not in seen


async def test_background_start_relay_and_stop(service: Service) -> None:
    """pipeline/background.py: stored queued at once, relayed to a streaming creator, stopped as cancelled."""
    session = service.session("owner", caching=False)
    slow_start = {"sim_ttft_ms": "300", "sim_output_tokens": "3"}  # still generating when the store is read
    turn = await admit(service, session, _create(input="bg", background=True, metadata=slow_start))
    running = await background.start(service, turn, stream=True)
    stored = await service.store.get("owner", turn.response.id)
    assert stored is not None and stored.status in ("queued", "in_progress")
    kinds = [msgspec.json.decode(event.data)["type"] async for event in running.relay()]
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert (await service.store.get("owner", turn.response.id)).status == "completed"  # type: ignore[union-attr]
    slow = await admit(service, session, _create(input="bg", background=True, metadata={"sim_tps": "20"}))
    await background.start(service, slow, stream=False)
    task = background.running(service, slow.response.id)
    assert task is not None
    while slow not in service.drain.turns:  # generating (its task has entered the turn's events)
        await asyncio.sleep(0.005)
    await background.stop(task)
    assert background.running(service, slow.response.id) is None
    assert (await service.store.get("owner", slow.response.id)).status == "cancelled"  # type: ignore[union-attr]
