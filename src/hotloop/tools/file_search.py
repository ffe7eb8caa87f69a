"""`file_search` run by the server inside the response (docs/file-search.md, "file_search in a response"): a search
of the request's vector stores, offered to the model as a function `file_search({"queries": [...]})`.

- Declared at the door (`declare`): `vector_store_ids` (1 to `MAX_STORES` ids), `max_num_results` (1 to 50),
  `filters` (checked by the pipeline: filesearch/filters.py), `ranking_options` {ranker, score_threshold,
  hybrid_search {embedding_weight, text_weight}}; a 400 naming the field for anything else. Echoed as sent.
- The model's call becomes a `file_search_call` (`build`), which the server runs (pipeline/steps/file_searches.py).
- The call reads to the model (`lower`) as the function call it wrote and an output listing the results, each
  under its label: `[n] <filename> (<file_id>)` and its text.
- Its answer cites them (`citations`): each `[n]` in the text is a `file_citation` of the n-th result of the
  latest search with results, at the label's index; a result's filename, as a whole word, cites its file at its
  first mention when no label already cites that file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from hotloop.errors import InvalidParam
from hotloop.ids import new_id
from hotloop.tools.client import parse_arguments, strings
from hotloop.tools.spec import ToolSpec
from hotloop.wire.items import FileCitation, FunctionCall, FunctionCallOutput
from hotloop.wire.request import validation_error
from hotloop.wire.tool_items import FileSearchCall, FileSearchResult
from hotloop.wire.vector_stores import DEFAULT_RESULTS, MAX_RESULTS, RankingOptions, ranking

TYPE = KIND = NAME = "file_search"  # `tools[i].type`, its ToolSpec's kind, the function the model calls
MAX_STORES = 16  # vector_store_ids in one tool (OpenAI documents no bound; each is searched on every call)
MAX_QUERIES = 8  # the queries of one call that are searched (the rest are dropped)
MAX_CITATIONS = 64  # annotations of one message's text
RANKERS = ("auto", "default-2024-11-15")
FIELDS = frozenset({"type", "vector_store_ids", "max_num_results", "filters", "ranking_options"})
DESCRIPTION = (
    "Search the user's files for passages that answer the question. Write one or more short search queries in "
    "`queries`; the results come back labelled [1], [2], …"
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "queries": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "description": "Search queries, a few words each.",
        }
    },
    "required": ["queries"],
}
CITE_HINT = "Cite the results you use by their labels, as [1]."  # the last line of a search's output with results
NO_RESULTS = "The search found nothing."
NOT_AVAILABLE = "The results of this search are not available."
FAILED = "The search failed."
NOT_RUN = "The search did not run."
_LABEL = re.compile(r"\[(\d{1,3})\]")
_WORD = re.compile(r"[^\W_]+")


class Declared(msgspec.Struct, frozen=True):
    """A request's `file_search` tool, checked: what each of its searches asks of the vector stores."""

    store_ids: tuple[str, ...]
    max_num_results: int = DEFAULT_RESULTS
    filters: dict[str, Any] | None = None  # compiled where it runs (filesearch/filters.py), checked at the door
    ranker: str = "auto"
    score_threshold: float = 0.0
    weights: tuple[float, float] = (1.0, 1.0)  # (text, embedding): `ranking_options.hybrid_search`


def declare(raw: dict[str, Any], param: str) -> tuple[ToolSpec, Declared]:
    """The function offered to the model and the search's settings; raises `InvalidParam` naming the field (its
    `filters` are the pipeline's to check: filesearch/filters.py is below the tools)."""
    for key in raw:
        if key not in FIELDS:
            raise InvalidParam(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")
    ids = raw.get("vector_store_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(one, str) and one for one in ids):
        raise InvalidParam(
            "'vector_store_ids' must be a non-empty list of vector store ids.",
            param=f"{param}.vector_store_ids",
            code="invalid_type",
        )
    if len(ids) > MAX_STORES:
        raise InvalidParam(
            f"'vector_store_ids' may list at most {MAX_STORES} vector stores.",
            param=f"{param}.vector_store_ids",
            code="invalid_value",
        )
    count = raw.get("max_num_results", DEFAULT_RESULTS)
    if count is None:
        count = DEFAULT_RESULTS
    if not _integer(count) or not 1 <= count <= MAX_RESULTS:
        raise InvalidParam(
            f"'max_num_results' must be an integer from 1 to {MAX_RESULTS}.",
            param=f"{param}.max_num_results",
            code="invalid_value",
        )
    filters = raw.get("filters")
    if filters is not None and not isinstance(filters, dict):
        raise InvalidParam("'filters' must be an object.", param=f"{param}.filters", code="invalid_type")
    ranker, threshold, weights = _ranking(raw.get("ranking_options"), f"{param}.ranking_options")
    declared = Declared(tuple(dict.fromkeys(ids)), count, filters, ranker, threshold, weights)
    return ToolSpec(NAME, KIND, DESCRIPTION, PARAMETERS), declared


def _ranking(raw: Any, param: str) -> tuple[str, float, tuple[float, float]]:
    """The tool's `ranking_options`, read as the search endpoint's are (wire/vector_stores.py) and checked alike."""
    try:
        options = msgspec.convert(raw, RankingOptions | None)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, prefix=param) from None
    return ranking(options, param, RANKERS)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def build(arguments: str, complete: bool) -> FileSearchCall:
    """The call the model wrote (wire/builder.py's `CallBuilder`): its queries, `in_progress` until the server
    ran it; `incomplete` when generation stopped inside it (never run). Lenient: `{"query": "…"}`, a bare string or
    text that is not JSON are queries too; a call with none fails when it runs."""
    return FileSearchCall(
        id=new_id("fs"),
        queries=queries_of(arguments),
        status="in_progress" if complete else "incomplete",
        results=None,  # null on the wire until it ran (and then unless included)
    )


def queries_of(arguments: str) -> list[str]:
    parsed = parse_arguments(arguments)
    if parsed is None:
        try:
            found = strings(json.loads(arguments)) or []
        except ValueError:
            found = [arguments]
    else:
        found = strings(parsed.get("queries")) or strings(parsed.get("query")) or []
    return [query.strip() for query in found if query.strip()][:MAX_QUERIES]


def lower(item: FileSearchCall) -> Iterator[FunctionCall | FunctionCallOutput]:
    """The item as the model reads it (chat/hosted.py): the call it wrote, then the results under their labels.
    The arguments as json.dumps writes them, as the model (and hotloop-sim) wrote them: the prefix is kept."""
    yield FunctionCall(call_id=item.id, name=NAME, arguments=json.dumps({"queries": item.queries}), id=item.id)
    yield FunctionCallOutput(call_id=item.id, output=output_text(item))


def output_text(item: FileSearchCall) -> str:
    """What the model reads as the search's result."""
    if item.status == "failed":
        return FAILED
    if item.status != "completed":
        return NOT_RUN
    if not isinstance(item.results, list):
        return NOT_AVAILABLE  # resent by a client that did not include them
    if not item.results:
        return NO_RESULTS
    blocks = [f"{label(number, result)}\n{result.text or ''}" for number, result in enumerate(item.results, 1)]
    return "\n\n".join([*blocks, CITE_HINT])


def label(number: int, result: FileSearchResult) -> str:
    return f"[{number}] {result.filename or 'untitled'} ({result.file_id or 'unknown'})"


def texts(item: FileSearchCall) -> Iterator[str]:
    """The free text the item carries (the safety stage reads it): its queries, then its results' text."""
    yield from item.queries
    yield from result_texts(item)


def result_texts(item: FileSearchCall) -> Iterator[str]:
    """The results' text: the files' contents, which the model reads as a tool's output (a third party's)."""
    for result in item.results if isinstance(item.results, list) else ():
        if result.text:
            yield result.text


def citations(text: str, searches: Sequence[FileSearchCall]) -> list[FileCitation]:
    """The `file_citation` annotations of an answer's `text`, after `searches` (those with results, in output
    order): each `[n]` label of a result of the latest search, at the label; then each other cited file's first
    mention by filename (a whole word), at the mention. In the order they stand in the text."""
    if not searches:
        return []
    latest = searches[-1].results
    found: list[FileCitation] = []
    cited: set[str] = set()
    for match in _LABEL.finditer(text):
        number = int(match.group(1))
        if isinstance(latest, list) and 1 <= number <= len(latest):
            result = latest[number - 1]
            if result.file_id:
                found.append(FileCitation(result.file_id, result.filename or "", match.start()))
                cited.add(result.file_id)
    for search in reversed(searches):
        for result in search.results if isinstance(search.results, list) else ():
            if not result.file_id or not result.filename or result.file_id in cited:
                continue
            mention = re.search(rf"(?<!\w){re.escape(result.filename)}(?!\w)", text)
            if mention is not None:
                found.append(FileCitation(result.file_id, result.filename, mention.start()))
                cited.add(result.file_id)
    found.sort(key=lambda citation: citation.index)
    return found[:MAX_CITATIONS]


# -- hotloop-sim -------------------------------------------------------------------------------------------------


def sample_queries(text: str) -> list[str]:
    """hotloop-sim's queries for a user's message: its words, as one query."""
    words = _WORD.findall(text)[:16]
    return [" ".join(words) if words else "files"]


def read_results(output: str) -> bool:
    """Whether a tool output is a search's results (hotloop-sim then answers citing the first)."""
    return output.rstrip().endswith(CITE_HINT)
