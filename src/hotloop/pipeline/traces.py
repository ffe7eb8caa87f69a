"""A finished response's span (observability/tracing.py): the OpenTelemetry GenAI conventions' attributes, read
from the prepared turn once it has ended. Nothing here runs with tracing off."""

from __future__ import annotations

from hotloop.observability.tracing import Attributes, ResponseTrace, messages
from hotloop.pipeline.prepared import Prepared, TurnOptions

OPERATION = "chat"  # the GenAI conventions' operation for a model's turn in a conversation


def end_trace(prepared: Prepared, options: TurnOptions) -> None:
    """The response's span and its stages' (`finish` from the timings' mark of that name), when traced."""
    trace = prepared.timings.trace
    if trace is None:
        return
    prepared.timings.interval("finish")
    response = prepared.response
    error = response.error.code if response.error is not None else None
    trace.end(f"{OPERATION} {prepared.request.model}", attributes(prepared, options, trace), error=error)


def attributes(prepared: Prepared, options: TurnOptions, trace: ResponseTrace) -> Attributes:
    response, request, seconds = prepared.response, prepared.request, prepared.timings.seconds
    usage = response.usage
    conversation = response.conversation
    reason = response.incomplete_details.reason if response.incomplete_details is not None else None
    found: Attributes = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": provider(prepared),
        "gen_ai.request.model": request.model,
        "gen_ai.response.model": response.model,
        "gen_ai.response.id": response.id,
        "gen_ai.request.previous_response.id": request.previous_response_id,
        "gen_ai.conversation.id": conversation["id"] if conversation is not None else None,
        "gen_ai.request.max_tokens": request.max_output_tokens,
        "gen_ai.request.temperature": request.temperature,
        "gen_ai.response.finish_reasons": [reason or response.status],
        "gen_ai.response.time_to_first_chunk": seconds.get("ttft"),
        "hotloop.transport": options.transport,
        "hotloop.status": response.status,
        "hotloop.server_seconds": seconds.get("pre_inference", 0.0) + seconds.get("post_inference", 0.0),
    }
    if usage is not None:
        found["gen_ai.usage.input_tokens"] = usage.input_tokens
        found["gen_ai.usage.output_tokens"] = usage.output_tokens
        found["gen_ai.usage.cache_read.input_tokens"] = usage.input_tokens_details.cached_tokens
        found["gen_ai.usage.reasoning.output_tokens"] = usage.output_tokens_details.reasoning_tokens
    if trace.tracing.content:  # the operator asked for content on the spans (`otel_content`)
        found["gen_ai.system_instructions"] = request.instructions if isinstance(request.instructions, str) else None
        found["gen_ai.input.messages"] = messages(prepared.new_items)
        found["gen_ai.output.messages"] = messages(response.output)
    return found


def provider(prepared: Prepared) -> str:
    """`openai` for an engine hotloop reaches over its OpenAI-compatible API, `hotloop` for a model in process."""
    backend = type(prepared.model.backend).__module__
    return "openai" if backend.startswith("hotloop.backends.upstream") else "hotloop"
