"""Validation (protocol.md §1.2, §1.3, §6): request fields, and the new input items against the chain's context.

Only new items are checked against what the chain already holds (its call ids), so a continuation costs its
own input, not the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hotloop import sealing
from hotloop.chat.media import describe_file, image_size
from hotloop.errors import InvalidParam, UnsupportedParam
from hotloop.tools.registry import pair
from hotloop.wire.items import (
    KNOWN_ITEM_TYPES,
    Compaction,
    ContextItem,
    CustomToolCallOutput,
    FunctionCallOutput,
    InputFile,
    InputImage,
    Message,
    Reasoning,
)
from hotloop.wire.request import CreateRequest
from hotloop.wire.tool_items import ComputerCallOutput

TYPE_NAMES = {cls: name for name, cls in KNOWN_ITEM_TYPES.items()}

STREAM_ID_MAX = 256
METADATA_MAX_PAIRS = 16
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512
REASONING_EFFORTS = frozenset({"none", "minimal", "low", "medium", "high", "xhigh", "max"})
# A compaction threshold, in prompt tokens: below the lower end every turn would compact its own system prompt.
COMPACT_THRESHOLD_RANGE = (1_000, 100_000_000)
INCLUDE_HONOURED = frozenset({"reasoning.encrypted_content", "message.output_text.logprobs"})


def _range(value: float | None, param: str, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise InvalidParam(f"'{param}' must be between {low:g} and {high:g}, got {value:g}.", param=param)


def check_request(request: CreateRequest, *, websocket: bool) -> None:
    """Field-level checks that need no state; raises the first violation found."""
    if request.background and websocket:
        raise UnsupportedParam("background is not supported in WebSocket mode.", param="background")
    if request.background and request.store is False:
        raise InvalidParam("background requires store to be true.", param="background")
    if request.conversation is not None and request.previous_response_id is not None:
        raise InvalidParam(
            "Mutually exclusive parameters: provide either 'previous_response_id' or 'conversation', not both.",
            param="conversation",
            code="mutually_exclusive_parameters",
        )
    if request.prompt is not None:
        raise UnsupportedParam("Prompt templates are not supported.", param="prompt")
    if request.previous_response_id is not None and not request.previous_response_id:
        raise InvalidParam("previous_response_id must not be empty.", param="previous_response_id")
    _range(request.temperature, "temperature", 0, 2)
    _range(request.top_p, "top_p", 0, 1)
    _range(request.presence_penalty, "presence_penalty", -2, 2)
    _range(request.frequency_penalty, "frequency_penalty", -2, 2)
    _range(request.top_logprobs, "top_logprobs", 0, 20)
    if request.max_output_tokens is not None and request.max_output_tokens < 16:
        raise InvalidParam(
            f"max_output_tokens must be at least 16, got {request.max_output_tokens}.",
            param="max_output_tokens",
        )
    if request.max_tool_calls is not None and request.max_tool_calls < 1:
        raise InvalidParam("max_tool_calls must be at least 1.", param="max_tool_calls")
    if request.truncation not in (None, "auto", "disabled"):
        raise InvalidParam("truncation must be 'auto' or 'disabled'.", param="truncation")
    check_metadata(request.metadata)
    _check_text(request.text)
    _check_reasoning(request.reasoning)
    _check_context_management(request.context_management)
    _check_prompt_cache(request)
    _check_multi_agent(request.multi_agent)


# `prompt_cache_options` (protocol.md §1.12): accepted and echoed. hotloop's caches (a chain's rendered tokens, the
# content-addressed token cache, an engine's prefix cache) are exact-prefix and always on, bounded by bytes rather
# than time: `mode`, `ttl` and `prompt_cache_breakpoint`s change nothing there (docs/api.md, "Prompt caching").
_CACHE_MODES = ("implicit", "explicit")
_CACHE_TTLS = ("30m", "12h")
_RETENTIONS = ("in_memory", "in-memory", "24h")


def _check_prompt_cache(request: CreateRequest) -> None:
    options = request.prompt_cache_options
    if options is not None:
        _one_of(options.get("mode"), _CACHE_MODES, "prompt_cache_options.mode")
        _one_of(options.get("ttl"), _CACHE_TTLS, "prompt_cache_options.ttl")
        if not isinstance(options.get("prewarm"), bool | None):
            raise InvalidParam(
                "prompt_cache_options.prewarm must be a boolean.",
                param="prompt_cache_options.prewarm",
                code="invalid_type",
            )
        if not isinstance(options.get("comparison_response_id"), str | None):
            raise InvalidParam(
                "prompt_cache_options.comparison_response_id must be a string.",
                param="prompt_cache_options.comparison_response_id",
                code="invalid_type",
            )
    _one_of(request.prompt_cache_retention, _RETENTIONS, "prompt_cache_retention")


def _one_of(value: object, allowed: tuple[str, ...], param: str) -> None:
    if value is not None and value not in allowed:
        wanted = ", ".join(f"'{option}'" for option in allowed)
        raise InvalidParam(f"Invalid value for '{param}': {value!r}; expected one of {wanted}.", param=param)


def _check_multi_agent(config: dict[str, Any] | None) -> None:
    """`multi_agent` is never ignored (protocol.md §1.12): a bad shape is 400 naming the field."""
    if config is None:
        return
    enabled = config.get("enabled")
    if not isinstance(enabled, bool):
        raise InvalidParam("multi_agent.enabled must be a boolean.", param="multi_agent.enabled", code="invalid_type")
    limit = config.get("max_concurrent_subagents")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise InvalidParam(
            "multi_agent.max_concurrent_subagents must be a positive integer.",
            param="multi_agent.max_concurrent_subagents",
        )


def check_metadata(metadata: dict[str, object] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > METADATA_MAX_PAIRS:
        raise InvalidParam(f"metadata has more than {METADATA_MAX_PAIRS} pairs.", param="metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_MAX:
            raise InvalidParam(f"metadata keys are at most {METADATA_KEY_MAX} characters.", param="metadata")
        if not isinstance(value, str):
            raise InvalidParam(f"metadata value for '{key}' must be a string.", param="metadata", code="invalid_type")
        if len(value) > METADATA_VALUE_MAX:
            raise InvalidParam(f"metadata values are at most {METADATA_VALUE_MAX} characters.", param="metadata")


def _check_text(text: dict[str, object] | None) -> None:
    if text is None:
        return
    fmt = text.get("format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema")):
        raise InvalidParam("text.format.type must be 'text', 'json_object' or 'json_schema'.", param="text.format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("name"), str):
            raise InvalidParam("text.format.name is required for json_schema.", param="text.format.name")
        if not isinstance(fmt.get("schema"), dict):
            raise InvalidParam("text.format.schema must be a JSON schema object.", param="text.format.schema")
        if not isinstance(fmt.get("description"), str | None):
            raise InvalidParam(
                "text.format.description must be a string.", param="text.format.description", code="invalid_type"
            )
        if not isinstance(fmt.get("strict"), bool | None):
            raise InvalidParam("text.format.strict must be a boolean.", param="text.format.strict", code="invalid_type")
    verbosity = text.get("verbosity")
    if verbosity not in (None, "low", "medium", "high"):
        raise InvalidParam("text.verbosity must be 'low', 'medium' or 'high'.", param="text.verbosity")


def _check_reasoning(reasoning: dict[str, object] | None) -> None:
    if reasoning is None:
        return
    effort = reasoning.get("effort")
    if effort is not None and (not isinstance(effort, str) or effort not in REASONING_EFFORTS):
        raise InvalidParam(f"Unsupported reasoning.effort '{effort}'.", param="reasoning.effort")
    summary = reasoning.get("summary")
    if summary is not None and (not isinstance(summary, str) or summary not in ("auto", "concise", "detailed")):
        raise InvalidParam(f"Unsupported reasoning.summary '{summary}'.", param="reasoning.summary")


def _check_context_management(entries: list[Any] | None) -> None:
    """`[{"type": "compaction", "compact_threshold": N}]` (pipeline/compaction.py); one compaction entry at most."""
    for index, entry in enumerate(entries or ()):
        param = f"context_management[{index}]"
        if not isinstance(entry, dict):
            raise InvalidParam(f"{param} must be an object.", param=param)
        if entry.get("type") != "compaction":
            raise InvalidParam(
                f"Unsupported context management type {entry.get('type')!r}: only 'compaction' is supported.",
                param=f"{param}.type",
            )
        if index:
            raise InvalidParam("Only one compaction entry may be given.", param=param)
        threshold = entry.get("compact_threshold")
        low, high = COMPACT_THRESHOLD_RANGE
        if threshold is not None and (
            not isinstance(threshold, int) or isinstance(threshold, bool) or not low <= threshold <= high
        ):
            raise InvalidParam(
                f"compact_threshold must be an integer from {low} to {high}, got {threshold!r}.",
                param=f"{param}.compact_threshold",
            )


def check_stream_id(stream_id: str) -> bool:
    return 0 < len(stream_id) <= STREAM_ID_MAX and all(c.isascii() and (c.isalnum() or c in "_.-") for c in stream_id)


def check_new_items(
    items: Sequence[ContextItem], known_calls: frozenset[str], secret: bytes, offset: int = 0
) -> frozenset[str]:
    """Check the new items (`offset`: the input's items before them); returns the call ids known after them
    (outputs must answer an earlier call)."""
    calls = set(known_calls)
    for index, item in enumerate(items, offset):
        param = f"input[{index}]"
        paired = pair(item)
        if paired is not None and paired[0] == "call":
            calls.add(paired[1])
        elif paired is not None:
            if paired[1] not in calls:
                kind = TYPE_NAMES.get(type(item), "function_call_output")
                raise InvalidParam(
                    f"No tool call found for {kind.replace('_', ' ')} with call_id '{paired[1]}'.",
                    param="input",
                    code="function_call_not_found",
                )
            if isinstance(item, FunctionCallOutput | CustomToolCallOutput) and not isinstance(item.output, str):
                _check_parts(item.output, f"{param}.output")
            elif isinstance(item, ComputerCallOutput):
                _check_screenshot(item, f"{param}.output")
        elif isinstance(item, Message):
            _check_parts(item.content, f"{param}.content")
        elif isinstance(item, Reasoning | Compaction) and item.encrypted_content is not None:
            sealing.open_blob(item.encrypted_content, secret)
    return frozenset(calls)


def _check_screenshot(item: ComputerCallOutput, param: str) -> None:
    shot = item.output
    if not shot.image_url and not shot.file_id:
        raise InvalidParam("computer_screenshot needs image_url or file_id.", param=param)
    image_size(InputImage(image_url=shot.image_url, file_id=shot.file_id), f"{param}.image_url")


def _check_parts(parts: Iterable[object], param: str) -> None:
    for index, part in enumerate(parts):
        if isinstance(part, InputImage):
            if not part.image_url and not part.file_id:
                raise InvalidParam("input_image needs image_url or file_id.", param=f"{param}[{index}]")
            if part.detail not in (None, "low", "high", "auto", "original"):
                raise InvalidParam("detail must be 'low', 'high' or 'auto'.", param=f"{param}[{index}].detail")
            image_size(part, f"{param}[{index}].image_url")
        elif isinstance(part, InputFile):
            if not (part.file_data or part.file_url or part.file_id):
                raise InvalidParam("input_file needs file_data, file_url or file_id.", param=f"{param}[{index}]")
            describe_file(part, f"{param}[{index}].file_data")
