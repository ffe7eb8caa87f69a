"""Mode `inject` of the agent loop: the `ws` rollout's loop as ONE multi-agent response (docs/api.md `multi_agent`,
pipeline/inject.py). One `response.create` with `multi_agent: {enabled: true}` on a fresh WebSocket; each client
call's `output_item.done` is the client's cue (the response waits, it does not end), the tool runs (--tool-ms) and
its output goes back by `response.inject`, acknowledged by `response.inject.created` in the response's own
sequence; the model then generates again on the extended prompt, until it answers and the response ends.

The tool outputs are those the `ws` rollout of the same run sent (its sizes, the same texts), and hotloop-sim is
paced by the same metadata (no subagents: `sim_subagents` 0), so the loop is the ws loop's. Each step is timed from
the frame that started it (the create, or an inject) to its generation's end (the next call's `output_item.done`,
or the terminal event); its overhead is that less its generation's model time, as a ws turn's is its create to its
terminal event less its model time. One response's `usage` sums its generations: a generation's output tokens are
its deltas as counted (checked against that sum), or where deltas do not count them (a typed call comes whole, a
congested stream merges deltas) the ws turn's, if they sum to the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from hotloop import clock
from hotloop.bench.agent_config import AgentLoopConfig
from hotloop.bench.agent_records import RunRecord, TurnRecord
from hotloop.bench.clients import FIRST_OUTPUT, BenchError, Tracker, TurnResult, first_output, kind_of, ws_connect
from hotloop.bench.rollout import model_ms
from hotloop.bench.scenario import CLIENT_CALLS, Rollout
from hotloop.bench.stats import median

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

    from hotloop.bench.progress import Progress

MULTI_AGENT = {"enabled": True}
ITEM_DONE = "response.output_item.done"
INJECT_CREATED = "response.inject.created"
# An output token each, as hotloop-sim writes them (unless merged while the client reads slower than it writes).
TOKEN_DELTAS = FIRST_OUTPUT | {"response.reasoning_text.delta", "response.reasoning.delta"}

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


@dataclass
class Step:
    """One generation of the response as the client saw it; times are seconds from the frame that started it."""

    ttft_s: float | None  # to its first output (a delta, or a typed call's item)
    end_s: float  # to its call's `output_item.done`, or to the terminal event
    ack_s: float | None  # an inject's `response.inject.created` (None for the create)
    call: dict[str, Any] | None  # the client call it ended with (None: the response ended)
    deltas: int  # its output deltas (TOKEN_DELTAS)
    tool_ms: float = 0.0  # the time of the tool that answered its call, as the client spent it
    output_chars: int = 0  # the size of that tool's output


class InjectSession:
    """One multi-agent response over one WebSocket: `start` sends the create, `resume` an inject; each returns
    the step that frame started. `final` is the response as its terminal event had it."""

    def __init__(self, connection: ClientConnection, request: dict[str, Any]) -> None:
        self.connection = connection
        self.request = request
        self.response_id = ""
        self.created = 0  # `response.created` frames seen: one for the whole loop
        self.tracker: Tracker | None = None  # the response's terminal event and timing metrics

    async def start(self, items: list[dict[str, Any]]) -> Step:
        body = {"type": "response.create", "store": False, **self.request, "input": items}
        body["multi_agent"] = MULTI_AGENT
        started = time.perf_counter()
        self.tracker = Tracker(started)
        return await self._step(_encode(body).decode(), started)

    async def resume(self, items: list[dict[str, Any]]) -> Step:
        frame = _encode({"type": "response.inject", "response_id": self.response_id, "input": items}).decode()
        return await self._step(frame, time.perf_counter())

    @property
    def final(self) -> TurnResult | None:
        return None if self.tracker is None else self.tracker.result

    async def _step(self, frame: str, started: float) -> Step:
        assert self.tracker is not None
        ttft = ack = None
        deltas = 0
        await self.connection.send(frame)
        while True:
            raw = await self.connection.recv()
            now = time.perf_counter() - started
            kind = _decode(raw).get("type", "") if len(raw) < 512 else kind_of(raw)
            deltas += kind in TOKEN_DELTAS
            if ttft is None and first_output(kind, raw):
                ttft = now
            elif kind == "response.created":
                self.created += 1
                self.response_id = _decode(raw)["response"]["id"]
            elif kind == INJECT_CREATED:
                ack = now
            elif kind == "response.inject.failed":
                raise BenchError(f"inject failed: {raw!r}"[:2000])
            elif kind == ITEM_DONE:
                item = _decode(raw)["item"]
                if item.get("type") in CLIENT_CALLS:
                    return Step(ttft_s=ttft, end_s=now, ack_s=ack, call=item, deltas=deltas)
            if self.tracker.feed(kind, raw):
                return Step(ttft_s=ttft, end_s=now, ack_s=ack, call=None, deltas=deltas)


async def run_inject_rollout(
    base_url: str,
    fields: dict[str, Any],
    rollout: Rollout,
    config: AgentLoopConfig,
    ws: RunRecord,
    progress: Progress,
    name: str,
    api_key: str | None = None,
) -> RunRecord:
    """One rollout inside one multi-agent response on a fresh WebSocket, answering each call with the output the
    same run's ws rollout `ws` sent (its turns' sizes)."""
    sizes = [t.output_chars for t in ws.turns[:-1]]
    metadata = {**fields.get("metadata", {}), "sim_subagents": "0"}  # the root calls the client's tools only
    session = InjectSession(await ws_connect(base_url, api_key), {**fields, "metadata": metadata})
    steps: list[Step] = []
    try:
        start = time.perf_counter()
        items = rollout.first_input()
        for turn in range(rollout.turns):
            progress.update(f"agent-loop run {ws.run + 1}/{config.runs} {name:<10} step {turn + 1}/{rollout.turns}")
            step = await (session.start(items) if turn == 0 else session.resume(items))
            steps.append(step)
            if step.call is None or turn == rollout.turns - 1:
                break
            tool_start = time.perf_counter()  # the tool's time includes producing its output, as in ws
            step.output_chars = sizes[turn]
            items = [rollout.tool_output(turn, step.call, step.output_chars)]
            await clock.until(tool_start + config.tool_ms / 1000.0)
            step.tool_ms = (time.perf_counter() - tool_start) * 1000.0
        e2e_ms = (time.perf_counter() - start) * 1000.0
    finally:
        await session.connection.close()
    final = session.final
    if final is None or final.status != "completed" or len(steps) != rollout.turns:
        status = "no terminal event" if final is None else final.status
        raise BenchError(f"{name}: {len(steps)} of {rollout.turns} steps, the response {status}")
    tokens, source = _output_tokens(steps, ws, final.output_tokens)
    record = RunRecord(mode=name, run=ws.run, e2e_ms=e2e_ms, physical_ms=0.0)
    record.turns = [_entry(n, step, ws.turns[n], config, tokens[n]) for n, step in enumerate(steps)]
    record.physical_ms = sum(t.model_ms for t in record.turns) + config.tool_ms * (len(record.turns) - 1)
    record.inject = _measured(session, final, steps, ws)
    record.inject["output_tokens_from"] = source
    return record


def _output_tokens(steps: list[Step], ws: RunRecord, total: int) -> tuple[list[int], str]:
    """Each generation's output tokens, and where they come from: its deltas, or the ws turn's (see above)."""
    counted = [step.deltas for step in steps]
    if sum(counted) == total:
        return counted, "deltas"
    beside = [t.output_tokens for t in ws.turns]
    if sum(beside) == total:
        return beside, "ws"
    raise BenchError(
        f"inject: {total} output tokens over the response's generations, {sum(counted)} deltas counted and "
        f"{sum(beside)} in the ws rollout: no generation's model time to take off"
    )


def _entry(turn: int, step: Step, beside: TurnRecord, config: AgentLoopConfig, tokens: int) -> TurnRecord:
    """A step as a turn: this step's times and output, the ws turn's prompt (the response reports only its sum)."""
    own = model_ms(config.ttft_ms, config.tps, tokens)
    turn_ms = step.end_s * 1000.0
    call = step.call or {}
    return TurnRecord(
        turn=turn,
        context_tokens=beside.context_tokens,
        output_tokens=tokens,
        ttft_ms=None if step.ttft_s is None else step.ttft_s * 1000.0,
        turn_ms=turn_ms,
        model_ms=own,
        overhead_ms=turn_ms - own,
        tool_ms=step.tool_ms,
        output_chars=step.output_chars,
        call=(f"function_call:{call.get('name')}" if call.get("type") == "function_call" else str(call["type"]))
        if call and step.output_chars
        else "",
    )


def _measured(session: InjectSession, final: TurnResult, steps: list[Step], ws: RunRecord) -> dict[str, Any]:
    """What only this mode has: one response for the loop, its summed usage beside the ws rollout's, the injects'
    acknowledgements and the server's own prompt extension (hotloop:timing_metrics `mcp_step`)."""
    timings = final.timings or {}
    acks = [s.ack_s * 1000.0 for s in steps if s.ack_s is not None]
    return {
        "responses_created": session.created,
        "response_id": session.response_id,
        "steps": len(steps) - 1,
        "generations": len(steps),
        "input_tokens": final.input_tokens,  # summed over the generations' prompts
        "input_tokens_ws": sum(t.context_tokens for t in ws.turns),
        "output_tokens": final.output_tokens,
        "output_tokens_ws": sum(t.output_tokens for t in ws.turns),
        "ack_ms": median(acks) if acks else None,
        "extension_per_step_ms": float(timings.get("mcp_step", 0.0)) / max(1, len(steps) - 1),
        "output_items": len(final.output),
        "timings": timings,
    }
