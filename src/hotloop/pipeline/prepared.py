"""What the pre-inference stages made of a request (`Prepared`, pipeline/prepare.py) and how a transport runs it
(`TurnOptions`): the records a turn generates and finishes from, below both `turn.py` and `finish.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from hotloop.backends.base import GenerationRequest
from hotloop.chat.incremental import Rendered
from hotloop.models import Model
from hotloop.observability.timings import StageTimings
from hotloop.pipeline.compaction import Plan
from hotloop.pipeline.state.context import ChainState
from hotloop.pipeline.state.session import Lane
from hotloop.pipeline.steps.plan import StepPlan
from hotloop.pipeline.tools import ToolSet
from hotloop.safety import SafetyResult
from hotloop.wire.items import ContextItem
from hotloop.wire.request import CreateRequest
from hotloop.wire.response import Response


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """All a turn generates and finishes from."""

    request: CreateRequest
    response: Response
    parent: ChainState | None
    new_items: list[ContextItem]
    call_ids: frozenset[str]
    model: Model
    generation: GenerationRequest
    rendered: Rendered | None
    safety: SafetyResult
    tools: ToolSet
    timings: StageTimings
    compaction: Plan | None = None  # the context is compacted first (`context_management`)
    # The server runs steps between generations (pipeline/steps/): MCP tools, a server-run tool search, a
    # multi-agent response's actions. None: the turn is one generation.
    steps: StepPlan | None = None
    # How many of the response's output items `rendered` holds: a compaction's item, or the output before an
    # in-server step's generation; a continuation renders the rest.
    rendered_output: int = 0


class TurnOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a transport runs a turn."""

    websocket: bool = False
    lane: Lane = None
    stream_id: str | None = None
    inband_errors: bool = False  # SSE: an `error` event precedes `response.failed` (protocol.md §2.9)
    transport: str = "http"  # "http" | "sse" | "websocket": kept in the usage record and metrics
    include_timings: bool = False  # header `x-responsesapi-include-timing-metrics: true`
    # Only measured (POST /v1/responses/input_tokens): never run, so nothing is stored and the store is not probed,
    # and its input is not kept for a later resend (pipeline/inputs.py `remember`).
    measure_only: bool = False
    # Tracing (observability/tracing.py), when on: the incoming `traceparent`'s context (HTTP header, or the
    # WebSocket upgrade's), and the span of the WebSocket connection the responses link to.
    trace_parent: Any = None
    trace_link: Any = None


DEFAULT_OPTIONS = TurnOptions()
MEASURE_OPTIONS = TurnOptions(measure_only=True)
