"""The create body (protocol.md §1.2) and the WebSocket client events that carry it (§3.3, §3.6).

Decoding turns msgspec's errors into `InvalidParam` naming the offending field, so every transport reports a
type error the same way.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from hotloop.errors import HotloopError, InvalidJSON, InvalidParam, MissingParam, UnsupportedParam


class CreateRequest(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    """`POST /v1/responses` body; also the flat `response.create` WebSocket event (plus `type`, `stream_id`).

    Every field is optional and an explicit `null` means "use the default" (protocol.md §1.2).
    Unknown keys are ignored.
    """

    model: str | None = None
    # Each item stays raw JSON until the normalize stage decodes it: a resent history's items already seen are
    # recognized by their bytes and never decoded again (pipeline/resend.py).
    input: str | list[msgspec.Raw] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    background: bool | None = None
    generate: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    top_logprobs: int | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    truncation: str | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    prompt_cache_retention: str | None = None  # deprecated upstream for prompt_cache_options.ttl
    multi_agent: dict[str, Any] | None = None  # {enabled, max_concurrent_subagents} (protocol.md §1.12)
    safety_identifier: str | None = None
    service_tier: str | None = None
    user: str | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    # [{"type": "compaction", "compact_threshold": N}]: compact in the create once the prompt crosses N tokens.
    context_management: list[Any] | None = None
    # WebSocket only (protocol.md §3.5); validated there.
    stream_id: str | None = None


class ClientEvent(msgspec.Struct, forbid_unknown_fields=False):
    """The envelope every WebSocket frame must have: an object with a string `type`."""

    type: str


class CreateEvent(CreateRequest, tag_field="type", tag="response.create"):
    """`response.create` (protocol.md §3.3): the create body's fields, flat, plus `stream_id`."""


class AppendEvent(msgspec.Struct, tag_field="type", tag="response.append", forbid_unknown_fields=False):
    """Legacy `response.append` (protocol.md §3.6)."""

    input: str | list[msgspec.Raw] | None = None


class SteerEvent(msgspec.Struct, tag_field="type", tag="response.steer", forbid_unknown_fields=False):
    previous_response_id: str | None = None
    input: Any = None


class ProcessedEvent(msgspec.Struct, tag_field="type", tag="response.processed", forbid_unknown_fields=False):
    """Codex's acknowledgement of a response (§3.6): no reply."""


class InjectEvent(msgspec.Struct, tag_field="type", tag="response.inject", forbid_unknown_fields=False):
    """`response.inject` (protocol.md §1.12): client-owned tool outputs for a multi-agent response waiting on this
    connection; the items stay raw (echoed byte for byte in a failure, normalized only when offered)."""

    response_id: str
    input: list[msgspec.Raw]


ClientEvents = CreateEvent | AppendEvent | SteerEvent | ProcessedEvent | InjectEvent


class InvalidCreate(Exception):
    """A `response.create` frame whose fields do not decode: still a create on its lane (§3.9); `error` is what
    the client is told there."""

    def __init__(self, error: HotloopError) -> None:
        super().__init__(error.message)
        self.error = error


_create_decoder = msgspec.json.Decoder(CreateRequest)
_event_decoder = msgspec.json.Decoder(ClientEvent)
_client_decoder = msgspec.json.Decoder(ClientEvents)
_TOO_DEEP = "We could not parse the JSON body of your request: it is nested too deeply."
_PATH = re.compile(r" - at `\$((?:\.[A-Za-z0-9_]+|\[\d+\])*)`$")


def param_of(error: msgspec.ValidationError) -> tuple[str, str | None]:
    """Split msgspec's "… - at `$.a.b[0]`" into a message and the param path "a.b[0]"."""
    text = str(error)
    match = _PATH.search(text)
    if match is None:
        return text, None
    path = match.group(1).lstrip(".")
    return text[: match.start()], path or None


def validation_error(error: msgspec.ValidationError, prefix: str | None = None) -> HotloopError:
    """msgspec's validation error as the 400 that names the field; `prefix`: where the value being decoded sits in
    the body (`input[3]` for one input item), None for the body itself. The one translation of msgspec's errors."""
    message, path = param_of(error)
    param = ".".join(part for part in (prefix, path) if part) or None
    if message.startswith("Object missing required field"):
        field = message.split("`")[1]
        param = f"{param}.{field}" if param else field
        return MissingParam(f"Missing required parameter: '{param}'.", param=param)
    if message.startswith("Object contains unknown field"):
        field = message.split("`")[1]
        param = f"{param}.{field}" if param else field
        return UnsupportedParam(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
    code = "invalid_type" if message.startswith("Expected") else "invalid_value"
    where = f"'{param}'" if param else "the request body"
    return InvalidParam(f"Invalid value for {where}: {message}.", param=param, code=code)


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes | str) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`, got") and param_of(exc)[1] is None:  # the body, not a field
            raise InvalidParam("The request body must be a JSON object.", param=None, code="invalid_type") from None
        raise validation_error(exc) from None
    except msgspec.DecodeError as exc:
        raise InvalidJSON(f"We could not parse the JSON body of your request: {exc}.") from None
    except RecursionError:  # msgspec's own guard against deep nesting
        raise InvalidJSON(_TOO_DEEP) from None


_item_decoder = msgspec.json.Decoder()


def decode_item(raw: Any) -> Any:
    """An input item as Python objects: a raw item from the wire is decoded here, once; anything else is as is."""
    if not isinstance(raw, msgspec.Raw):
        return raw
    try:
        return _item_decoder.decode(raw)
    except RecursionError:
        raise InvalidJSON(_TOO_DEEP) from None
    except msgspec.DecodeError as exc:  # the body's decode already checked the syntax; kept for safety
        raise InvalidJSON(f"We could not parse the JSON body of your request: {exc}.") from None


def decode_body(decoder: msgspec.json.Decoder[Any], data: bytes | str) -> Any:
    """Decode any endpoint's body; raises `InvalidJSON` or `InvalidParam` with the field's path."""
    return _decode(decoder, data)


# Admission limits on the size of one create (issue 11): past them a request is refused before it is decoded whole,
# because every item and tool costs Python work on the event loop (decoding, normalizing, validating, rendering)
# that no thread can take over while it holds the GIL. Generous for agents: a 200-turn Codex session resends ~600
# items, and the largest MCP setups offer a few hundred tools.
MAX_INPUT_ITEMS = 10_000
MAX_TOOLS = 1_024
COUNT_FIRST_BYTES = 1 << 20  # bodies this large are counted (cheaply, as raw JSON) before the full decode


class _Counts(msgspec.Struct, forbid_unknown_fields=False):
    """A create's lists as raw JSON, to count them without building their objects."""

    input: str | list[msgspec.Raw] | None = None
    tools: list[msgspec.Raw] | None = None


_counts_decoder = msgspec.json.Decoder(_Counts)


def _over_limits(counts: _Counts | CreateRequest) -> InvalidParam | None:
    """The error of a create over the item or tool limit (raw or decoded: both count the same), or None."""
    if isinstance(counts.input, list) and len(counts.input) > MAX_INPUT_ITEMS:
        return InvalidParam(
            f"input has {len(counts.input)} items; at most {MAX_INPUT_ITEMS} are accepted.",
            param="input",
            code="array_above_max_length",
        )
    if counts.tools is not None and len(counts.tools) > MAX_TOOLS:
        return InvalidParam(
            f"tools has {len(counts.tools)} entries; at most {MAX_TOOLS} are accepted.",
            param="tools",
            code="array_above_max_length",
        )
    return None


def _check_counts(data: bytes | str) -> None:
    """The limits, counted as raw JSON before a large body is decoded whole."""
    try:
        counts = _counts_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return  # the full decode reports it, with the field's path
    error = _over_limits(counts)
    if error is not None:
        raise error


def decode_create(data: bytes | str) -> CreateRequest:
    """Decode a create body; raises `InvalidJSON` or `InvalidParam` with the field's path."""
    if len(data) >= COUNT_FIRST_BYTES:
        _check_counts(data)
    request: CreateRequest = _decode(_create_decoder, data)
    error = _over_limits(request)  # a smaller body over a limit: the same error
    if error is not None:
        raise error
    return request


def decode_client_event(data: bytes | str) -> ClientEvents:
    """One WebSocket frame, decoded once into its event (protocol.md §3.10). Raises `InvalidJSON`, `invalid_event`
    (no string `type`), `unknown_event_type`, `InvalidCreate` for a create whose fields do not decode or that is
    over a size limit, or the field's error for another event."""
    if len(data) >= COUNT_FIRST_BYTES:
        _large_create_counts(data)
    try:
        event: ClientEvents = _client_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise _classified(data, exc) from None
    except msgspec.DecodeError:
        raise InvalidJSON("The frame is not valid JSON.") from None
    except RecursionError:
        raise InvalidJSON(_TOO_DEEP) from None
    if isinstance(event, CreateEvent) and (error := _over_limits(event)) is not None:
        raise InvalidCreate(error)  # a smaller frame over a limit: the same error
    return event


def _large_create_counts(data: bytes | str) -> None:
    """A create's item and tool limits, counted as raw JSON before a large frame is decoded whole."""
    try:
        kind = _event_decoder.decode(data).type
    except (msgspec.DecodeError, RecursionError):
        return  # the full decode reports it
    if kind == "response.create":
        try:
            _check_counts(data)
        except HotloopError as exc:
            raise InvalidCreate(exc) from None


_KNOWN_EVENTS = frozenset(
    {"response.create", "response.append", "response.steer", "response.processed", "response.inject"}
)


def _classified(data: bytes | str, exc: msgspec.ValidationError) -> Exception:
    """What a frame that failed to decode is: no envelope, an unknown type, or a known event with a bad field."""
    try:
        kind = _event_decoder.decode(data).type
    except (msgspec.DecodeError, RecursionError):  # ValidationError included: no object with a string `type`
        return InvalidParam(
            "Each frame must be a JSON object with a string 'type'.", param="type", code="invalid_event"
        )
    if kind not in _KNOWN_EVENTS:
        return HotloopError(f"Unknown event type '{kind}'.", param="type", code="unknown_event_type")
    error = validation_error(exc)
    return InvalidCreate(error) if kind == "response.create" else error
