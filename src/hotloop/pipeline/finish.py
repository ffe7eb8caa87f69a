"""Finishing a turn, after its generation and before its terminal event leaves, in named steps: the
conversation, persist, cache, meter. A client that has seen a response end can read it back; a step that fails
turns the outcome into the failure it is (`store_unavailable`), never an exception.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from hotloop.metering.records import record_for
from hotloop.pipeline.generate import Outcome
from hotloop.pipeline.resolve import CONTINUABLE, count_calls
from hotloop.pipeline.state.context import ChainState, Context
from hotloop.wire.builder import error_body
from hotloop.wire.events import Event
from hotloop.wire.response import ErrorInfo

if TYPE_CHECKING:
    from hotloop.pipeline.turn import Turn

log = logging.getLogger("hotloop.turn")
finished_log = logging.getLogger("hotloop.responses")  # one line per finished response (docs/logging.md)


async def finish(turn: Turn, outcome: Outcome) -> list[Event]:
    """Every step, then the closing events and the terminal one."""
    turn.timings.mark("finish")
    events = turn.builder.close(outcome.status, outcome.usage, reason=outcome.reason, error=outcome.error)
    outcome = await extend_conversation(turn, outcome)
    outcome = await persist(turn, outcome)
    cache(turn, outcome)
    turn.timings.add("post_inference", turn.timings.since("finish"))
    meter(turn)
    if turn.options.include_timings:
        events.append(turn.builder.timing_metrics(turn.timings.milliseconds()))
    inband = error_body(outcome.error) if outcome.error is not None and turn.options.inband_errors else None
    return events + turn.builder.terminal(inband)


async def extend_conversation(turn: Turn, outcome: Outcome) -> Outcome:
    """Append the input and output to the response's conversation before the response is stored, so a response
    whose items could not be appended is stored (and ends) as the failure it is."""
    conversation = turn.response.conversation
    if conversation is None or outcome.status not in CONTINUABLE:
        return outcome
    items = [*turn.new_items, *turn.response.output]
    try:
        if not await turn.service.store.add_conversation_items(turn.session.owner, conversation["id"], items):
            log.warning("conversation %s was deleted while %s ran", conversation["id"], turn.response.id)
        return outcome
    except Exception:
        log.exception("could not extend conversation %s", conversation["id"])
        return _failed(turn, outcome, "The conversation could not be updated.")


async def persist(turn: Turn, outcome: Outcome) -> Outcome:
    """Store the response with its input items; a blocked input (a secret, an injection) is never written."""
    if not turn.response.store or turn.safety.verdict == "block":
        return outcome
    try:
        await turn.service.store.save(turn.session.owner, turn.response, turn.new_items)
        return outcome
    except Exception:
        log.exception("could not store response %s", turn.response.id)
        return _failed(turn, outcome, "The response could not be stored.")


def _failed(turn: Turn, outcome: Outcome, message: str) -> Outcome:
    error = ErrorInfo(code="store_unavailable", message=message)
    turn.builder.set_status("failed", outcome.usage, error=error)
    return msgspec.structs.replace(outcome, status="failed", error=error)


def cache(turn: Turn, outcome: Outcome) -> None:
    """A continuable response becomes the lane's and the process's chain state; a failed continuation evicts its
    parent from the lane (§3.8.3)."""
    if outcome.status in CONTINUABLE:
        state = chain_state(turn)
        turn.session.remember(turn.lane, state)
        turn.service.chains.put(state)
    elif turn.parent is not None:
        turn.session.evict(turn.lane, turn.parent.response.id)


def meter(turn: Turn) -> None:
    """The usage record, the key's token window and the metrics of a finished response (off the event bytes)."""
    service, response, owner = turn.service, turn.response, turn.session.owner
    service.ledger.record(record_for(response, owner, turn.options.transport, turn.timings.milliseconds()))
    if response.usage is not None:  # the key's tokens-per-minute window (pipeline/admission/limits.py)
        service.rate_limiter.charge(owner, response.usage.total_tokens)
    service.metrics.observe(turn.timings)
    service.metrics.count_response(turn.model.id, response.status, turn.options.transport)
    service.metrics.count_safety(turn.safety)


async def finish_cancelled(turn: Turn) -> None:
    """The client went away or the response was cancelled: keep what finished, never cache it (§3.11).

    The terminal event is kept in `cancelled_events` for a listener that outlives the consumer (a streamed
    background response cancelled by `POST …/cancel`).
    """
    error = turn.stop_error
    if error is None:
        turn.cancelled_events = turn.builder.finish("cancelled", None)
    else:  # a shutdown cut: a server failure, with the in-band error on SSE
        inband = error_body(error) if turn.options.inband_errors else None
        turn.cancelled_events = turn.builder.finish("failed", None, error=error, inband_error=inband)
    if turn.response.store:
        try:
            await turn.service.store.save(turn.session.owner, turn.response, turn.new_items)
        except Exception:
            log.exception("could not store cancelled response %s", turn.response.id)
    meter(turn)
    log_finished(turn)


def chain_state(turn: Turn) -> ChainState:
    """The response as a continuation point: what the next turn inherits and reuses."""
    parent, output = turn.parent, turn.response.output
    base = parent.context if parent is not None else Context()
    return ChainState(
        response=turn.response,
        context=base.extend([*turn.new_items, *output]),
        call_ids=turn.call_ids | {item.call_id for item in output if hasattr(item, "call_id")},
        model=turn.model,
        request=turn.request,
        owner=turn.session.owner,
        calls_in_context=count_calls(output, turn.generation.calls_so_far),
        stored_chain=turn.response.store and (parent is None or parent.stored_chain),
        # A conversation's history is in the rendered tokens but not in this chain's context: a continuation by
        # previous_response_id renders from the context, as it would after loading the chain from the store.
        rendered=turn.rendered if turn.response.conversation is None else None,
        safety_states=turn.safety.states,
        tools=turn.tools,
    )


def log_finished(turn: Turn) -> None:
    if finished_log.isEnabledFor(logging.INFO):
        finished_log.info("response finished", extra={"fields": _log_fields(turn)})


def _log_fields(turn: Turn) -> dict[str, Any]:
    """The `response finished` line (docs/logging.md): ids, outcome and sizes, never content."""
    response, usage, seconds = turn.response, turn.response.usage, turn.timings.seconds
    fields: dict[str, Any] = {
        "response_id": response.id,
        "model": response.model,
        "status": response.status,
        "transport": turn.options.transport,
        "server_ms": round(1000 * (seconds.get("pre_inference", 0.0) + seconds.get("post_inference", 0.0)), 3),
    }
    if usage is not None:
        fields.update(
            input_tokens=usage.input_tokens,
            cached_tokens=usage.input_tokens_details.cached_tokens,
            output_tokens=usage.output_tokens,
        )
    if response.error is not None:
        fields["error_code"] = response.error.code
    return fields
