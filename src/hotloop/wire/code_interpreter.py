"""The code_interpreter part of the event builder: a `code_interpreter_call` the server runs in a container (no
I/O). A mixin of `ResponseBuilder` (wire/builder.py), like wire/file_search.py.

The model's code goes out once its call is written: `output_item.added` (status `in_progress`, no code yet),
`response.code_interpreter_call.in_progress`, the code as one `response.code_interpreter_call_code.delta`, then
`.done`; the item then holds a reserved slot in the output (wire/output.py) until the server ran it
(pipeline/steps/code_runs.py): `response.code_interpreter_call.interpreting`, then `.completed` and
`output_item.done` with the item's final status (`failed`: no `.completed`; `incomplete`: not run, only its done).
The stored item keeps its outputs; a client sees them only with `include: ["code_interpreter_call.outputs"]`
(wire/included.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from hotloop.wire import events as ev
from hotloop.wire.events import Event
from hotloop.wire.items import ContainerFileCitation
from hotloop.wire.output import Output
from hotloop.wire.tool_items import (
    CodeInterpreterCall,
    CodeInterpreterImage,
    CodeInterpreterLogs,
    CodeInterpreterStatus,
)

Outputs = list[CodeInterpreterLogs | CodeInterpreterImage]


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A file a code run of this response wrote in its container (a container file's id and path)."""

    container_id: str
    file_id: str
    path: str  # /mnt/data/…


class CodeInterpreterBuilder:
    """`code_interpreter_call` items and their events; the citations of the files the code wrote."""

    # Provided by ResponseBuilder.
    out: Output
    _written: list[WrittenFile]

    def _init_code(self) -> None:
        self._written = []

    def code_wrote(self, files: Sequence[WrittenFile]) -> None:
        """The files a run wrote: a message after it that names one cites it (`file_citations`)."""
        self._written += files

    def file_citations(self, text: str) -> list[ContainerFileCitation]:
        """A `container_file_citation` for each file the response's code wrote that the text names (its path, or
        its name as a whole word), at its first mention."""
        found: list[ContainerFileCitation] = []
        for file in {file.path: file for file in self._written}.values():
            name = file.path.rsplit("/", 1)[-1]
            match = re.search(re.escape(file.path), text) or re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", text)
            if match is not None:
                found.append(ContainerFileCitation(file.container_id, file.file_id, name, match.start(), match.end()))
        return sorted(found, key=lambda citation: citation.start_index)

    def code_interpreter_call(self, item: CodeInterpreterCall) -> list[Event]:
        """The model wrote code: its item and the code's events; it waits in a reserved slot for the server to run
        it. A call cut off (`incomplete`) is never run: its `output_item.done` follows at once."""
        index, code = self.out.index, item.code or ""
        added = msgspec.structs.replace(item, code="", status="in_progress", outputs=None)
        out = [
            self.out.emit(ev.OutputItemAdded, output_index=index, item=added),
            self.out.emit(ev.CodeInterpreterCallInProgress, item_id=item.id, output_index=index),
        ]
        if code:
            out.append(self.out.emit(ev.CodeInterpreterCallCodeDelta, item_id=item.id, output_index=index, delta=code))
        out.append(self.out.emit(ev.CodeInterpreterCallCodeDone, item_id=item.id, output_index=index, code=code))
        if item.status != "in_progress":
            return out + self.out.end(index, item)
        self.out.reserve(item)
        return out

    def code_pending(self) -> list[int]:
        """The output indexes of the code runs not run yet."""
        output = self.out.response.output
        return [index for index in self.out.reserved() if type(output[index]) is CodeInterpreterCall]

    def pending_code(self, index: int) -> CodeInterpreterCall:
        item = self.out.reserved_item(index)
        if type(item) is not CodeInterpreterCall:
            raise ValueError(f"no pending code_interpreter_call at output index {index}")
        return item

    def code_running(self, index: int) -> list[Event]:
        """The server started running the code at `index`: `response.code_interpreter_call.interpreting`."""
        item_id = self.pending_code(index).id
        return [self.out.emit(ev.CodeInterpreterCallInterpreting, item_id=item_id, output_index=index)]

    def code_finished(
        self, index: int, status: CodeInterpreterStatus, outputs: Outputs | None, container_id: str | None = None
    ) -> list[Event]:
        """The code at `index` ended: `.completed` (a completed run), then its `output_item.done` with the final
        item (its container's id, once known), which replaces it in the output."""
        item = self.pending_code(index)
        done = msgspec.structs.replace(
            item, status=status, outputs=outputs, container_id=container_id or item.container_id
        )
        out = []
        if status == "completed":
            out.append(self.out.emit(ev.CodeInterpreterCallCompleted, item_id=item.id, output_index=index))
        return out + self.out.settle(index, done)

    def replay_code(self, item: CodeInterpreterCall) -> list[Event]:
        """A stored code run's events, as its live stream had them: its container's id only at its done (the
        live call learns it when it runs)."""
        written = msgspec.structs.replace(item, status="in_progress", outputs=None, container_id="")
        out = self.code_interpreter_call(written)
        index = self.code_pending()[-1]
        if item.status in ("completed", "failed"):
            out += self.code_running(index)
        outputs = item.outputs if isinstance(item.outputs, list) else None
        status: CodeInterpreterStatus = (
            item.status if item.status not in ("in_progress", "interpreting") else "incomplete"
        )
        return out + self.code_finished(index, status, outputs, item.container_id)
