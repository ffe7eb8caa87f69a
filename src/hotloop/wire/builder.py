"""Turn backend deltas into the event sequence of protocol.md §2 (no I/O): deltas in, encoded events out.

The builder is an agent's item writer: the open output item, its text, its agent and its checks. It writes through
an `Output` (wire/output.py), the response's own stream, which numbers every event once (every transport gets the
same bytes, `sequence_number` counts from 0 without gaps) and keeps the terminal `response.output` equal to the
`output_item.done` items in order (§2.3), an `mcp_call`'s or a `file_search_call`'s slot reserved until the server
ran it (wire/mcp_builder.py, wire/file_search.py). A subagent's writer writes through its branch's `Output` instead
(pipeline/agents/branch.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from hotloop.errors import failure_of
from hotloop.ids import new_id
from hotloop.wire import events as ev
from hotloop.wire.agent_items import MultiAgentCall
from hotloop.wire.code_interpreter import CodeInterpreterBuilder
from hotloop.wire.events import Event
from hotloop.wire.file_search import Citer, FileSearchBuilder
from hotloop.wire.hosted_shell import HostedShellBuilder
from hotloop.wire.included import EVERYTHING, Shown, visible
from hotloop.wire.items import (
    Compaction,
    CustomToolCall,
    FunctionCall,
    McpApprovalRequest,
    McpCall,
    Message,
    OutputItem,
    OutputText,
    Reasoning,
    ReasoningText,
    ResponseItem,
)
from hotloop.wire.mcp_builder import McpBuilder
from hotloop.wire.output import Output
from hotloop.wire.response import ErrorInfo, IncompleteDetails, Response, Usage
from hotloop.wire.tool_items import CodeInterpreterCall, FileSearchCall, ShellCall, TypedCallItem

# A call item built whole from the model's arguments: a typed client tool's, a multi-agent action's, a file search.
CallItem = TypedCallItem | MultiAgentCall | FileSearchCall | CodeInterpreterCall

# The tool kinds whose calls are the items of §2.5; any other kind a backend names is a typed client tool (§1.11).
_PLAIN_KINDS = frozenset({"function", "custom", "mcp"})


class CallBuilder(Protocol):
    """A typed client tool's call item built from the arguments the model wrote for it (hotloop/tools/: each kind
    parses its own); `complete` is false when generation stopped inside them."""

    def __call__(self, kind: str, call_id: str, arguments: str, complete: bool, name: str) -> CallItem: ...


class InputCheck(Protocol):
    """A custom tool's input checked against its grammar as it is written (tools/grammar.py)."""

    def feed(self, text: str) -> None: ...

    def matches(self) -> bool: ...


# The check of a custom tool's input, by the tool's name and namespace; None: a tool without a grammar.
InputChecks = Callable[[str, str | None], InputCheck | None]


class _Writing(msgspec.Struct):
    """A typed call the model is still writing: nothing is sent until its arguments are whole (`_close_typed`)."""

    kind: str
    call_id: str
    name: str


def error_body(error: ErrorInfo) -> ev.ErrorBody:
    """The in-band SSE `error` event's body for a failure (protocol.md §2.9), typed as a non-streaming reply's
    body would be (errors.FAILURES): a safety block, an input too long for the engine, are the client's input."""
    failure = failure_of(error.code)
    return ev.ErrorBody(type=failure.type, code=error.code, message=error.message, param=failure.param)


# The raw reasoning text's delta and done events by the `reasoning_events` setting (protocol.md §2.6); `none`: the
# text only in `output_item.done`.
REASONING_EVENTS: dict[str, tuple[type[ev._ReasoningDelta], type[ev._ReasoningDone]] | None] = {
    "openai": (ev.ReasoningTextDelta, ev.ReasoningTextDone),
    "openresponses": (ev.OpenReasoningDelta, ev.OpenReasoningDone),
    "none": None,
}


# The event of a piece of a call's arguments (or a custom tool's input), by the open item's type.
_CALL_DELTAS: dict[type[Any], type[ev._Event]] = {
    FunctionCall: ev.FunctionCallArgumentsDelta,
    CustomToolCall: ev.CustomToolCallInputDelta,
    McpCall: ev.McpCallArgumentsDelta,
}


class ResponseBuilder(McpBuilder, FileSearchBuilder, CodeInterpreterBuilder, HostedShellBuilder):
    def __init__(
        self,
        response: Response,
        stream_id: str | None = None,
        reasoning_events: str = "openai",
        seal: Callable[[str], str] | None = None,
        typed: CallBuilder | None = None,
        checks: InputChecks | None = None,
        agent: dict[str, str] | None = None,
        output: Output | None = None,
        shown: Shown = EVERYTHING,
        cite: Citer | None = None,
    ) -> None:
        """`shown`: what of the server-run calls the request included (wire/included.py; everything where nothing
        is hidden); `cite`: how a message's text cites the searches' results (wire/file_search.py)."""
        # The response lives in its stream (`output`'s, when given: a subagent's branch), written through it alone.
        self.out = output if output is not None else Output(response, stream_id)
        self._agent = agent  # a multi-agent response's: on each item it makes (protocol.md §1.12)
        self._ending = False  # `close()` has begun: the item it closes is the response's last
        self._typed = typed
        self._checks = checks
        self._check: InputCheck | None = None  # the open custom call's, when its tool has a grammar
        self._reasoning = REASONING_EVENTS[reasoning_events]
        self._seal = (
            seal  # `include: ["reasoning.encrypted_content"]`: a finished reasoning item carries its text sealed
        )
        self._open: ResponseItem | _Writing | None = None
        self._text: list[str] = []
        self._emit = self.out.emit
        self._init_mcp()
        self.out.shown = shown
        self._init_file_search(cite)
        self._init_code()

    @property
    def response(self) -> Response:
        return self.out.response

    @response.setter
    def response(self, response: Response) -> None:
        self.out.response = response  # a replay's terminal event carries the stored response (wire/replay.py)

    @property
    def stream_id(self) -> str | None:
        return self.out.stream_id

    def _snapshot(self) -> Response:
        # Events are encoded the moment they are built, so the live object shows its state at that moment.
        return visible(self.response, self.out.shown)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def created(self) -> Event:
        return self._emit(ev.ResponseCreated, response=self._snapshot())

    def queued(self) -> Event:
        return self._emit(ev.ResponseQueued, response=self._snapshot())

    def in_progress(self) -> Event:
        return self._emit(ev.ResponseInProgress, response=self._snapshot())

    # -- text --------------------------------------------------------------------------------------------------

    def text_delta(self, text: str) -> list[Event]:
        out: list[Event] = []
        if not isinstance(self._open, Message):
            out.extend(self._close_item("completed"))
            out.extend(self._open_message())
        item = self._open
        assert isinstance(item, Message)
        self._text.append(text)
        out.append(
            self._emit(
                ev.OutputTextDelta,
                item_id=item.id,
                output_index=self._index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return out

    # -- reasoning ---------------------------------------------------------------------------------------------

    def reasoning_delta(self, text: str) -> list[Event]:
        """A piece of the model's reasoning: into the open `reasoning` item, opened first if another is open."""
        out: list[Event] = []
        if not isinstance(self._open, Reasoning):
            out.extend(self._close_item("completed"))
            out.extend(self.open_item(Reasoning(id=new_id("rs"), summary=[], content=[], status="in_progress")))
        item = self._open
        assert isinstance(item, Reasoning) and item.id is not None
        self._text.append(text)
        if self._reasoning is not None:
            delta_event = self._reasoning[0]
            out.append(self._emit(delta_event, item_id=item.id, output_index=self._index, content_index=0, delta=text))
        return out

    def _open_message(self) -> list[Event]:
        return self.open_item(Message(role="assistant", content=[], id=new_id("msg"), status="in_progress"))

    def open_item(self, item: ResponseItem) -> list[Event]:
        """Start an output item (status `in_progress`, empty text): `output_item.added`, and for a message its
        `content_part.added`. Deltas then fill it; the next item, or `close()`, ends it."""
        item = self._agent_of(item)
        self._open = item
        self._text = []
        out = [self._emit(ev.OutputItemAdded, output_index=self._index, item=item)]
        empty: OutputText | ReasoningText | None = None
        if isinstance(item, Message):
            empty = OutputText(text="")
        elif isinstance(item, Reasoning) and self._reasoning is not None:
            empty = ReasoningText(text="")
        if empty is not None:
            out.append(
                self._emit(ev.ContentPartAdded, item_id=item.id, output_index=self._index, content_index=0, part=empty)
            )
        return out

    # -- tool calls ----------------------------------------------------------------------------------------------

    def tool_call_start(self, name: str, kind: str, namespace: str | None) -> list[Event]:
        out = self._close_item("completed")
        item: OutputItem
        if kind == "mcp":  # a tool of an MCP server the server runs: `namespace` is its label
            assert namespace is not None
            return out + self._open_mcp(name, namespace)
        if kind not in _PLAIN_KINDS and self._typed is not None:
            self._open, self._text = _Writing(kind, new_id("call"), name), []
            return out
        if kind == "custom":
            self._check = self._checks(name, namespace) if self._checks is not None else None
            item = CustomToolCall(
                call_id=new_id("call"),
                name=name,
                input="",
                id=new_id("ctc"),
                status="in_progress",
                namespace=namespace,
            )
        else:
            item = FunctionCall(
                call_id=new_id("call"),
                name=name,
                arguments="",
                id=new_id("fc"),
                status="in_progress",
                namespace=namespace,
            )
        return out + self.open_item(item)

    def tool_call_delta(self, text: str) -> list[Event]:
        item = self._open
        self._text.append(text)
        if isinstance(item, McpApprovalRequest | _Writing):
            return []  # sent whole once its arguments are complete
        assert item is not None and item.id is not None
        if self._check is not None:
            self._check.feed(text)
        return [self._emit(_CALL_DELTAS[type(item)], item_id=item.id, output_index=self._index, delta=text)]

    def tool_call_end(self, incomplete: bool = False) -> list[Event]:
        return self._close_item("incomplete" if incomplete else "completed")

    # -- closing ---------------------------------------------------------------------------------------------------

    @property
    def _index(self) -> int:
        return self.out.index

    def _close_item(self, status: str) -> list[Event]:
        item = self._open
        if item is None:
            return []
        self._open = None
        text = "".join(self._text)
        if isinstance(item, McpCall | McpApprovalRequest):
            return self._close_mcp(item, text, status)
        if isinstance(item, _Writing):
            return self._close_typed(item, text, status)
        if isinstance(item, Compaction):
            return []  # a compaction that failed has nothing to carry: it is dropped (the response fails)
        index = self._index
        out: list[Event] = []
        assert item.id is not None
        if isinstance(item, Message):
            annotations = self.citations(text)
            part = OutputText(text=text, annotations=annotations)
            if annotations:
                out.extend(self.annotation_events(item.id, index, annotations))
            out.append(
                self._emit(
                    ev.OutputTextDone,
                    item_id=item.id,
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            out.append(self._emit(ev.ContentPartDone, item_id=item.id, output_index=index, content_index=0, part=part))
            phase = self._phase() or item.phase  # a replayed message keeps its own
            done: ResponseItem = msgspec.structs.replace(item, content=[part], status=status, phase=phase)
        elif isinstance(item, FunctionCall):
            out.append(
                self._emit(
                    ev.FunctionCallArgumentsDone,
                    item_id=item.id,
                    output_index=index,
                    arguments=text,
                    name=item.name,
                )
            )
            done = msgspec.structs.replace(item, arguments=text, status=status)
        elif isinstance(item, Reasoning):
            sealed = self._seal(text) if self._seal is not None else None
            done = msgspec.structs.replace(
                item, content=[ReasoningText(text=text)], status=status, encrypted_content=sealed
            )
            out.extend(self._reasoning_done(item.id, index, text))
        else:
            assert isinstance(item, CustomToolCall)
            out.append(self._emit(ev.CustomToolCallInputDone, item_id=item.id, output_index=index, input=text))
            check, self._check = self._check, None
            if check is not None and not check.matches():
                status = "incomplete"  # its grammar refuses the input: never handed out as a valid call (§1.11)
            done = msgspec.structs.replace(item, input=text, status=status)
        out += self.out.end(index, done)  # held while a reserved slot precedes it (wire/output.py)
        return out

    def _close_typed(self, writing: _Writing, text: str, status: str) -> list[Event]:
        assert self._typed is not None
        return self.typed_call(self._typed(writing.kind, writing.call_id, text, status == "completed", writing.name))

    def typed_call(self, item: CallItem) -> list[Event]:
        """A typed client tool's call as one whole item: `output_item.added`, a shell call's command events
        (protocol.md §1.11), `output_item.done` (held behind an MCP call not run yet, as any item's)."""
        if isinstance(item, FileSearchCall):  # the server runs it: it waits for its results (wire/file_search.py)
            return self.file_search_call(item)
        if isinstance(item, CodeInterpreterCall):  # the server runs it too (wire/code_interpreter.py)
            return self.code_interpreter_call(item)
        item = self._agent_of(item)  # type: ignore[assignment]
        if isinstance(item, ShellCall) and item.hosted:  # a hosted shell's: the server runs it (wire/hosted_shell.py)
            return self.hosted_shell_call(item)
        index = self._index
        out = [self._emit(ev.OutputItemAdded, output_index=index, item=item)]
        if isinstance(item, ShellCall):
            out += self.shell_commands(index, item)
        out += self.out.end(index, item)
        return out

    def _reasoning_done(self, item_id: str, index: int, text: str) -> list[Event]:
        if self._reasoning is None:
            return []
        part = ReasoningText(text=text)
        done = self._emit(self._reasoning[1], item_id=item_id, output_index=index, content_index=0, text=text)
        return [done, self._emit(ev.ContentPartDone, item_id=item_id, output_index=index, content_index=0, part=part)]

    def close(
        self, status: str, usage: Usage | None, *, reason: str | None = None, error: ErrorInfo | None = None
    ) -> list[Event]:
        """Close the open item and set the final state; the terminal event follows with `terminal()`.

        The two steps are apart so that the caller can persist the final state first and still turn the
        response into a failure if that does not work.
        """
        self._ending = True
        if status == "cancelled":
            # Only the items finished so far are kept (protocol.md §3.11); the open one was cut off.
            self._open = None
            out: list[Event] = []
        else:
            out = self._close_item("incomplete" if status == "incomplete" else "completed")
        out += self.out.end_reserved()
        self.set_status(status, usage, reason=reason, error=error)
        return out

    def set_status(
        self, status: str, usage: Usage | None, *, reason: str | None = None, error: ErrorInfo | None = None
    ) -> None:
        response = self.response
        response.status = status  # type: ignore[assignment]
        response.usage = usage
        response.error = error
        response.incomplete_details = IncompleteDetails(reason=reason) if reason else None
        response.completed_at = int(time.time()) if status == "completed" else None

    def steer_accepted(self, steer_id: str) -> Event:
        """`response.steer.accepted` in this response's own sequence (WebSocket steering, protocol.md §3.6)."""
        return self._emit(ev.SteerAccepted, steer={"id": steer_id, "previous_response_id": self.response.id})

    def timing_metrics(self, timings: dict[str, float]) -> Event:
        """The opt-in `hotloop:timing_metrics` extension event (stage timings in ms), before the terminal one."""
        return self._emit(ev.TimingMetrics, response_id=self.response.id, timings=timings)

    def _phase(self) -> str | None:
        """A multi-agent response's message says what it is (openai-python's `phase`; the Agents SDK keeps only the
        root's `final_answer`): one the response ends with is the final answer, one a call follows commentary."""
        if self._agent is None:
            return None
        return "final_answer" if self._ending else "commentary"

    def _agent_of(self, item: ResponseItem) -> ResponseItem:
        if self._agent is None or getattr(item, "agent", False) is not None:
            return item  # no agent to name, or an item without the field, or one that names its own
        return msgspec.structs.replace(item, agent=self._agent)

    def inject_created(self) -> Event:
        """`response.inject.created` in this response's own sequence: an inject's outputs were committed."""
        return self._emit(ev.InjectCreated, response_id=self.response.id)

    def compacting(self, item_id: str) -> Event:
        """`response.compaction.compacting`: the compaction item `item_id`, next in the output, is being made."""
        return self._emit(ev.CompactionCompacting, item_id=item_id, output_index=self._index)

    def add_item(self, item: ResponseItem) -> list[Event]:
        """A whole item at once (a compaction, an injected output): `output_item.added` and `.done`."""
        item = self._agent_of(item)
        return [*self.open_item(item), self.emit_done(item)]

    def emit_done(self, item: ResponseItem) -> Event:
        """`output_item.done` for an item kept exactly as given (a replayed shape this builder never fills)."""
        self._open = None
        event = self._emit(ev.OutputItemDone, output_index=self._index, item=item)
        self.response.output.append(item)
        return event

    def close_open(self, status: str, last: bool = False) -> list[Event]:
        """End the open item with `status` (`completed` or `incomplete`); `last`: it is the response's last of its
        agent (a message then is the final answer), though other items follow it."""
        self._ending = self._ending or last
        return self._close_item(status)

    @property
    def idle(self) -> bool:
        """No item is open: a whole item may be added (items go out one at a time, protocol.md §2.2)."""
        return self._open is None

    def terminal(self, inband_error: ev.ErrorBody | None = None) -> list[Event]:
        """The one terminal event (§2.3); on SSE an in-band `error` event precedes a failure (§2.9)."""
        out: list[Event] = []
        if inband_error is not None:
            out.append(self._emit(ev.StreamError, error=inband_error))
        response = visible(self.response, self.out.shown)
        out.append(self._emit(ev.TERMINAL_EVENTS[self.response.status], terminal=True, response=response))
        return out

    def finish(
        self,
        status: str,
        usage: Usage | None,
        *,
        reason: str | None = None,
        error: ErrorInfo | None = None,
        inband_error: ev.ErrorBody | None = None,
    ) -> list[Event]:
        """`close()` then `terminal()`."""
        return self.close(status, usage, reason=reason, error=error) + self.terminal(inband_error)
