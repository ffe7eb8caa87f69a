"""What a client sees of the calls the server runs (no I/O). A file search's results and a code run's outputs are
stored whole and read back into the model's context, but shown to a client only where its request (or its retrieve,
its listing) includes them, by OpenAI's `include` values; otherwise they are null, as OpenAI shows them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from hotloop.wire.response import Response
from hotloop.wire.tool_items import CodeInterpreterCall, FileSearchCall

RESULTS = "file_search_call.results"
OUTPUTS = "code_interpreter_call.outputs"
# Each kind's hidden field, by the `include` value that shows it.
HIDDEN: dict[type[Any], tuple[str, str]] = {
    FileSearchCall: (RESULTS, "results"),
    CodeInterpreterCall: (OUTPUTS, "outputs"),
}

Shown = frozenset[str]
EVERYTHING: Shown = frozenset(include for include, _ in HIDDEN.values())
NOTHING: Shown = frozenset()


def shown(include: Iterable[str] | None) -> Shown:
    """The hidden fields a request's `include` shows."""
    return EVERYTHING.intersection(include or ())


def hide(item: Any, shown: Shown) -> Any:
    """The item as a client that included `shown` sees it (an item with nothing hidden as it is)."""
    hidden = HIDDEN.get(type(item))
    if hidden is None or hidden[0] in shown or not isinstance(getattr(item, hidden[1]), list):
        return item
    return msgspec.structs.replace(item, **{hidden[1]: None})


def visible(response: Response, shown: Shown) -> Response:
    """The response as its client sees it (`response` itself when nothing is hidden)."""
    if shown == EVERYTHING or all(hide(item, shown) is item for item in response.output):
        return response
    return msgspec.structs.replace(response, output=[hide(item, shown) for item in response.output])
