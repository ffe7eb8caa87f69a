"""The Response object (protocol.md §1.6) and its usage block (§1.7): the 31 fields OR `ResponseResource` requires."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from hotloop.wire.items import ResponseItem

ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


class InputTokensDetails(msgspec.Struct):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class Usage(msgspec.Struct):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    def plus(self, other: Usage | None) -> Usage:
        """Two generations' usage together (a compaction's summary and the answer)."""
        if other is None:
            return self
        return Usage.of(
            self.input_tokens + other.input_tokens,
            self.input_tokens_details.cached_tokens + other.input_tokens_details.cached_tokens,
            self.output_tokens + other.output_tokens,
            self.output_tokens_details.reasoning_tokens + other.output_tokens_details.reasoning_tokens,
        )

    @classmethod
    def of(cls, input_tokens: int, cached_tokens: int, output_tokens: int, reasoning_tokens: int = 0) -> Usage:
        return cls(
            input_tokens=input_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=cached_tokens),
            output_tokens=output_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning_tokens),
            total_tokens=input_tokens + output_tokens,
        )


class ErrorInfo(msgspec.Struct):
    code: str
    message: str


class IncompleteDetails(msgspec.Struct):
    reason: str


class Response(msgspec.Struct, kw_only=True):
    id: str
    object: str = "response"
    created_at: int
    completed_at: int | None = None
    status: ResponseStatus = "in_progress"
    incomplete_details: IncompleteDetails | None = None
    error: ErrorInfo | None = None
    model: str
    previous_response_id: str | None = None
    instructions: str | None = None
    output: list[ResponseItem] = msgspec.field(default_factory=list)
    usage: Usage | None = None
    tools: list[Any] = msgspec.field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    truncation: str = "disabled"
    text: dict[str, Any] = msgspec.field(default_factory=lambda: {"format": {"type": "text"}})
    temperature: float = 1.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_logprobs: int = 0
    reasoning: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    store: bool = True
    background: bool = False
    service_tier: str = "default"
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: dict[str, Any] | None = None  # as the request gave it, `mode` and `ttl` filled in
    prompt_cache_retention: str | None = None
    user: str | None = None
    conversation: dict[str, str] | None = None  # {"id": "conv_…"} when created in a conversation


class DeletedResponse(msgspec.Struct):
    id: str
    object: str = "response"
    deleted: bool = True


encode = msgspec.json.Encoder().encode
response_decoder = msgspec.json.Decoder(Response)
