"""Finishing a turn, after its generation and before its terminal event leaves, in named steps: the
conversation, persist, cache, meter. A client that has seen a response end can read it back; a step that fails
turns the outcome into the failure it is (`store_unavailable`), never an exception.

Each step is a function of what it is given: the service, the session, the prepared record (prepared.py), how
the transport runs the turn, and the response's builder. `finish` and `finish_cancelled` return the events that
end the response; the caller sends them.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from hotloop.metering.records import record_for
from hotloop.pipeline.generate import Outcome
from hotloop.pipeline.prepared import Prepared, TurnOptions
from hotloop.pipeline.resolve import CONTINUABLE, count_calls
from hotloop.pipeline.service import Service
from hotloop.pipeline.state.context import ChainState, Context
from hotloop.pipeline.state.session import Session
from hotloop.pipeline.traces import end_trace
from hotloop.tools.multi_agent import foreign
from hotloop.tools.registry import call_ids
from hotloop.wire.builder import ResponseBuilder, error_body
from hotloop.wire.events import Event
from hotloop.wire.response import ErrorInfo

log = logging.getLogger("hotloop.turn")
finished_log = logging.getLogger("hotloop.responses")  # one line per finished response (docs/logging.md)


async def finish(
    service: Service,
    session: Session,
    prepared: Prepared,
    options: TurnOptions,
    builder: ResponseBuilder,
    outcome: Outcome,
) -> list[Event]:
    """Every step, then the closing events and the terminal one."""
    timings = prepared.timings
    timings.mark("finish")
    events = builder.close(outcome.status, outcome.usage, reason=outcome.reason, error=outcome.error)
    outcome = await extend_conversation(service, session, prepared, builder, outcome)
    outcome = await persist(service, session, prepared, builder, outcome)
    cache(service, session, prepared, options, outcome)
    timings.add("post_inference", timings.since("finish"))
    meter(service, session, prepared, options)
    end_trace(prepared, options)
    if options.include_timings:
        events.append(builder.timing_metrics(timings.milliseconds()))
    inband = error_body(outcome.error) if outcome.error is not None and options.inband_errors else None
    return events + builder.terminal(inband)


async def extend_conversation(
    service: Service, session: Session, prepared: Prepared, builder: ResponseBuilder, outcome: Outcome
) -> Outcome:
    """Append the input and output to the response's conversation before the response is stored, so a response
    whose items could not be appended is stored (and ends) as the failure it is."""
    response = prepared.response
    conversation = response.conversation
    if conversation is None or outcome.status not in CONTINUABLE:
        return outcome
    items = [*prepared.new_items, *response.output]
    try:
        if not await service.store.add_conversation_items(session.owner, conversation["id"], items):
            log.warning("conversation %s was deleted while %s ran", conversation["id"], response.id)
        return outcome
    except Exception:
        log.exception("could not extend conversation %s", conversation["id"])
        return _failed(builder, outcome, "The conversation could not be updated.")


async def persist(
    service: Service, session: Session, prepared: Prepared, builder: ResponseBuilder, outcome: Outcome
) -> Outcome:
    """Store the response with its input items; a blocked input (a secret, an injection) is never written."""
    if not prepared.response.store or prepared.safety.verdict == "block":
        return outcome
    try:
        await service.store.save(session.owner, prepared.response, prepared.new_items)
        return outcome
    except Exception:
        log.exception("could not store response %s", prepared.response.id)
        return _failed(builder, outcome, "The response could not be stored.")


def _failed(builder: ResponseBuilder, outcome: Outcome, message: str) -> Outcome:
    error = ErrorInfo(code="store_unavailable", message=message)
    builder.set_status("failed", outcome.usage, error=error)
    return msgspec.structs.replace(outcome, status="failed", error=error)


def cache(service: Service, session: Session, prepared: Prepared, options: TurnOptions, outcome: Outcome) -> None:
    """A continuable response becomes the lane's and the process's chain state; a failed continuation evicts its
    parent from the lane (§3.8.3)."""
    if outcome.status in CONTINUABLE:
        state = chain_state(prepared, session.owner)
        session.remember(options.lane, state)
        service.chains.put(state)
    elif prepared.parent is not None:
        session.evict(options.lane, prepared.parent.response.id)


def meter(service: Service, session: Session, prepared: Prepared, options: TurnOptions) -> None:
    """The usage record, the key's token window and the metrics of a finished response (off the event bytes)."""
    response, owner, timings = prepared.response, session.owner, prepared.timings
    service.ledger.record(record_for(response, owner, options.transport, timings.milliseconds()))
    if response.usage is not None:  # the key's tokens-per-minute window (pipeline/state/limits.py)
        service.rate_limiter.charge(owner, response.usage.total_tokens)
    service.metrics.observe(timings)
    service.metrics.count_response(prepared.model.id, response.status, options.transport)
    service.metrics.count_safety(prepared.safety)


async def finish_cancelled(
    service: Service,
    session: Session,
    prepared: Prepared,
    options: TurnOptions,
    builder: ResponseBuilder,
    error: ErrorInfo | None,
) -> list[Event]:
    """The client went away or the response was cancelled (`error` None), or a shutdown cut it (`error`, a
    server failure): keep what finished, never cache it (§3.11). Returns the events that end it, for a consumer
    or a listener that outlives the consumer (a streamed background response cancelled by `POST …/cancel`)."""
    prepared.timings.mark("finish")  # where the trace's `finish` span starts
    if error is None:
        events = builder.finish("cancelled", None)
    else:
        inband = error_body(error) if options.inband_errors else None
        events = builder.finish("failed", None, error=error, inband_error=inband)
    if prepared.response.store:
        try:
            await service.store.save(session.owner, prepared.response, prepared.new_items)
        except Exception:
            log.exception("could not store cancelled response %s", prepared.response.id)
    meter(service, session, prepared, options)
    end_trace(prepared, options)
    log_finished(prepared, options)
    return events


def chain_state(prepared: Prepared, owner: str) -> ChainState:
    """The response as a continuation point: what the next turn inherits and reuses."""
    parent, response = prepared.parent, prepared.response
    output = response.output
    base = parent.context if parent is not None else Context()
    return ChainState(
        response=response,
        context=base.extend([*prepared.new_items, *output]),
        call_ids=prepared.call_ids | call_ids(output),
        model=prepared.model,
        request=prepared.request,
        owner=owner,
        # A multi-agent response's subagents' calls are theirs, not in the root's context (tools/multi_agent.py).
        calls_in_context=count_calls([item for item in output if not foreign(item)], prepared.generation.calls_so_far),
        stored_chain=response.store and (parent is None or parent.stored_chain),
        # A conversation's history is in the rendered tokens but not in this chain's context: a continuation by
        # previous_response_id renders from the context, as it would after loading the chain from the store.
        rendered=prepared.rendered if response.conversation is None else None,
        rendered_output=prepared.rendered_output,
        safety_states=prepared.safety.states,
        tools=prepared.tools,
    )


def log_finished(prepared: Prepared, options: TurnOptions) -> None:
    if finished_log.isEnabledFor(logging.INFO):
        finished_log.info("response finished", extra={"fields": _log_fields(prepared, options)})


def _log_fields(prepared: Prepared, options: TurnOptions) -> dict[str, Any]:
    """The `response finished` line (docs/logging.md): ids, outcome and sizes, never content."""
    response, seconds = prepared.response, prepared.timings.seconds
    usage = response.usage
    fields: dict[str, Any] = {
        "response_id": response.id,
        "model": response.model,
        "status": response.status,
        "transport": options.transport,
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
