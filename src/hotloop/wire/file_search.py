"""The file_search part of the event builder: a `file_search_call` the server runs, and the citations of the answer
that reads its results (no I/O). A mixin of `ResponseBuilder` (wire/builder.py), like wire/mcp_builder.py.

A search the model wrote goes out at once (`output_item.added`, status `in_progress`) and holds a reserved slot in
the output (wire/output.py) until the server ran it (pipeline/steps/file_searches.py):
`response.file_search_call.in_progress`, `.searching`, then `.completed` and `output_item.done` with the item's
final status (`failed`: no `.completed`; `incomplete`: not run, only its done). The stored item keeps its results;
what a client sees shows them only with `include: ["file_search_call.results"]` (wire/included.py).

A message closed after a search with results carries the `file_citation` annotations of the results it cites,
each announced by `response.output_text.annotation.added` before `response.output_text.done`: which text cites
which result is the kind's rule (tools/file_search.py `citations`), handed in as a `Citer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from hotloop.wire import events as ev
from hotloop.wire.events import Event
from hotloop.wire.included import hide
from hotloop.wire.output import Output
from hotloop.wire.tool_items import FileSearchCall, FileSearchResult, FileSearchStatus

# The annotations a message's text gets from the searches before it (tools/file_search.py `citations`).
Citer = Callable[[str, Sequence[FileSearchCall]], list[Any]]


class FileSearchBuilder:
    """`file_search_call` items and their events; the citations of the messages after them."""

    # Provided by ResponseBuilder.
    out: Output
    file_citations: Callable[[str], list[Any]]  # the code's files the text names (wire/code_interpreter.py)

    def _init_file_search(self, cite: Citer | None) -> None:
        self._cite = cite
        self._searched = False  # a search with results ended in this response: messages may cite it
        self._annotations: list[Any] | None = None  # a replayed message's stored annotations (`annotate`)

    def file_search_call(self, item: FileSearchCall) -> list[Event]:
        """The model wrote a search: `output_item.added`; it waits in a reserved slot for the server to run it. A
        search cut off (`incomplete`) is never run: its `output_item.done` follows at once."""
        index = self.out.index
        out = [self.out.emit(ev.OutputItemAdded, output_index=index, item=hide(item, self.out.shown))]
        if item.status != "in_progress":
            return out + self.out.end(index, item)
        self.out.reserve(item)
        return out

    def file_search_pending(self) -> list[int]:
        """The output indexes of the searches not run yet."""
        output = self.out.response.output
        return [index for index in self.out.reserved() if type(output[index]) is FileSearchCall]

    def _pending_search(self, index: int) -> FileSearchCall:
        item = self.out.reserved_item(index)
        if type(item) is not FileSearchCall:
            raise ValueError(f"no pending file_search_call at output index {index}")
        return item

    def file_search_running(self, index: int) -> list[Event]:
        """The server started the search at `index`: `response.file_search_call.in_progress`, `.searching`."""
        item_id = self._pending_search(index).id
        return [
            self.out.emit(ev.FileSearchCallInProgress, item_id=item_id, output_index=index),
            self.out.emit(ev.FileSearchCallSearching, item_id=item_id, output_index=index),
        ]

    def file_search_finished(
        self, index: int, status: FileSearchStatus, results: list[FileSearchResult] | None
    ) -> list[Event]:
        """The search at `index` ended: `.completed` (a completed one), then its `output_item.done` with the final
        item, which replaces it in the output (the done ones it held follow)."""
        item = self._pending_search(index)
        done = msgspec.structs.replace(item, status=status, results=results)
        self._searched = self._searched or bool(results)
        out = []
        if status == "completed":
            out.append(self.out.emit(ev.FileSearchCallCompleted, item_id=item.id, output_index=index))
        return out + self.out.settle(index, done)

    def replay_file_search(self, item: FileSearchCall) -> list[Event]:
        """A stored search's events, as its live stream had them (one that was cut off shows `in_progress` in its
        `output_item.added`, where live it showed `incomplete`)."""
        out = self.file_search_call(msgspec.structs.replace(item, status="in_progress", results=None))
        index = self.file_search_pending()[-1]
        if item.status in ("completed", "failed"):
            out += self.file_search_running(index)
        results = item.results if isinstance(item.results, list) else None
        status: FileSearchStatus = item.status if item.status != "in_progress" else "incomplete"
        return out + self.file_search_finished(index, status, results)

    def annotate(self, annotations: list[Any]) -> None:
        """The annotations the open message ends with (a replay: as stored), instead of the citations computed."""
        self._annotations = annotations

    def citations(self, text: str) -> list[Any]:
        """The annotations of a message's text that ends now: given (`annotate`), or the results it cites."""
        if self._annotations is not None:
            given, self._annotations = self._annotations, None
            return given
        found = self.file_citations(text)
        if self._cite is None or not self._searched:
            return found
        searches = [item for item in self.out.response.output if type(item) is FileSearchCall and item.results]
        return sorted([*self._cite(text, searches), *found], key=_position)

    def annotation_events(self, item_id: str, index: int, annotations: list[Any]) -> list[Event]:
        """`response.output_text.annotation.added`, one per annotation, in order."""
        return [
            self.out.emit(
                ev.OutputTextAnnotationAdded,
                item_id=item_id,
                output_index=index,
                content_index=0,
                annotation_index=number,
                annotation=annotation,
            )
            for number, annotation in enumerate(annotations)
        ]


def _position(annotation: Any) -> int:
    """Where an annotation stands in its text (a file citation's `index`, a container file's `start_index`)."""
    return int(getattr(annotation, "index", getattr(annotation, "start_index", 0)))
