"""`tool_search` and `defer_loading` (protocol.md §1.11): tools marked deferred stay out of the prompt until a search
loads them; the loaded tools' definitions reach the model as the search's output, after the prompt's existing
tokens, so loading keeps the rendered prefix (and the engine's prefix cache).

`{"type": "tool_search"}` is offered as a function `tool_search`. Server execution (the default): hotloop searches
the deferred tools itself, BM25 over their names, descriptions and parameter names (`bm25s`), and the response goes
on with the hits callable (pipeline/steps/). Client execution: the model's search is a `tool_search_call` for
the client, whose `tool_search_output` names the tools to load (they must have been declared).
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

from hotloop.errors import InvalidParam
from hotloop.ids import new_id
from hotloop.tools.client import ClientTool, parse_arguments
from hotloop.tools.spec import ToolSpec, prompt_name
from hotloop.wire.items import InputPart, InputText, Message
from hotloop.wire.tool_items import (
    AdditionalTools,
    ItemStatus,
    ToolSearchCall,
    ToolSearchOutput,
    TypedCallItem,
    TypedOutputItem,
)

SERVER_KIND = "tool_search"
CLIENT_KIND = "tool_search_client"
MAX_HITS = 5  # the tools one server-run search loads at most
_INDEXES = 32  # distinct deferred sets whose BM25 index is kept
_WORD = re.compile(r"[A-Za-z0-9]+")


class ToolSearch(ClientTool):
    types = ("tool_search",)
    kind = SERVER_KIND
    call = ToolSearchCall
    output = ToolSearchOutput
    description = (
        "Search the tools that are not loaded yet by what they do; the best matches become callable. Write a "
        "few keywords in `query`."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Keywords for the tools you need."}},
        "required": ["query"],
    }

    def declare(self, raw: dict[str, Any], param: str) -> ToolSpec:
        execution = raw.get("execution", "server")
        if execution not in (None, "server", "client"):
            raise InvalidParam("execution must be 'server' or 'client'.", param=f"{param}.execution")
        description, parameters = raw.get("description"), raw.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise InvalidParam("'parameters' must be a JSON schema object.", param=f"{param}.parameters")
        client = execution == "client"
        return ToolSpec(
            "tool_search",
            CLIENT_KIND if client else SERVER_KIND,
            description if client and isinstance(description, str) else self.description,
            parameters if client and parameters is not None else self.parameters,
        )

    def build(self, call_id: str, arguments: str, complete: bool, execution: str = "server") -> TypedCallItem:
        parsed = parse_arguments(arguments)
        status: ItemStatus = "completed" if complete and parsed is not None else "incomplete"
        where: Literal["server", "client"] = "client" if execution == "client" else "server"
        return ToolSearchCall(
            arguments=parsed if parsed is not None else arguments,
            execution=where,
            call_id=call_id,
            id=new_id("ts"),
            status=status,
        )

    def call_arguments(self, item: TypedCallItem) -> dict[str, Any]:
        assert isinstance(item, ToolSearchCall)
        return item.arguments if isinstance(item.arguments, dict) else {"query": str(item.arguments)}

    def output_content(self, item: TypedOutputItem) -> str | list[InputPart]:
        assert isinstance(item, ToolSearchOutput)
        if not item.tools:
            return "No tools matched."
        return "Loaded these tools; call them like the others:\n" + "\n".join(
            json.dumps(definition(tool)) for tool in listed(item.tools)
        )

    @property
    def name(self) -> str:
        return "tool_search"

    def call_key(self, item: TypedCallItem) -> str:
        assert isinstance(item, ToolSearchCall)
        return item.key

    def answers(self, item: TypedOutputItem) -> str:
        assert isinstance(item, ToolSearchOutput)
        return item.answers

    def sample(self, number: int, rng: random.Random) -> dict[str, Any]:
        return {"query": "tools"}


TOOL_SEARCH = ToolSearch()


def definition(tool: dict[str, Any]) -> dict[str, Any]:
    """A loaded tool as the model reads it: as the system prompt lists tools (chat/messages.py)."""
    name = tool.get("name")
    namespace = tool.get("namespace")
    entry: dict[str, Any] = {"name": prompt_name(str(name), namespace)}
    if tool.get("description"):
        entry["description"] = tool["description"]
    if tool.get("type") == "custom":
        entry["input"] = "freeform text"
    else:
        entry["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return entry


def echo(spec: ToolSpec) -> dict[str, Any]:
    """A deferred spec as a `tool_search_output` lists it (openai-python's FunctionTool / CustomTool shapes)."""
    if spec.freeform:
        out: dict[str, Any] = {"type": "custom", "name": spec.name, "defer_loading": True}
        if spec.description:
            out["description"] = spec.description
    else:
        out = {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
            "strict": spec.strict,
            "defer_loading": True,
        }
    if spec.kind == "mcp" and spec.namespace:  # an MCP server's tool: its label, as the model calls it
        out["namespace"] = spec.namespace
    return out


def shown(hits: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The tools a server-run search loaded, as its `tool_search_output` lists them: top-level tools as declared,
    a namespace's members inside `{"type": "namespace", "name", "description", "tools"}` (openai-python's
    `ToolSearchOutputNamespaceTool`), an MCP server's tools with their label in `namespace`."""
    out: list[dict[str, Any]] = []
    blocks: dict[str, dict[str, Any]] = {}
    for spec in hits:
        member = spec.namespace is not None and spec.namespace != spec.name and spec.kind != "mcp"
        if not member:
            out.append(echo(spec))
            continue
        namespace = str(spec.namespace)
        block = blocks.get(namespace)
        if block is None:
            block = blocks[namespace] = {"type": "namespace", "name": namespace, "description": "", "tools": []}
            out.append(block)
        block["tools"].append(echo(spec))
    return out


LOADING_TYPES = frozenset({ToolSearchOutput, AdditionalTools})


def loads(items: Sequence[Any]) -> bool:
    """Whether any of `items` loads tools (exact types, looked up in C: this may run over a whole context)."""
    return not LOADING_TYPES.isdisjoint(map(type, items))


def added_message(item: AdditionalTools) -> Message:
    """An `additional_tools` item as the model reads it, where it stands: a developer message with the tools'
    definitions, as the system prompt lists tools."""
    text = "These tools are available from now on; call them like the others:\n" + "\n".join(
        json.dumps(definition(tool)) for tool in listed(item.tools)
    )
    return Message(role="developer", content=[InputText(text=text)], id=item.id)


def listed(tools: Iterable[Any]) -> list[dict[str, Any]]:
    """The tools a `tool_search_output` lists, each a function or custom tool (`namespace` set on a namespace's
    member): hotloop's own outputs list members so, OpenAI's (openai-python's `ToolSearchOutputNamespaceTool`) as
    `{"type": "namespace", "name", "tools": [...]}`."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        members = tool.get("tools")
        if tool.get("type") == "namespace" and isinstance(members, list):
            out.extend({**member, "namespace": tool.get("name")} for member in members if isinstance(member, dict))
        else:
            out.append(tool)
    return out


def loaded(items: Iterable[Any], deferred: Sequence[ToolSpec]) -> list[ToolSpec]:
    """The deferred specs the `tool_search_output` items among `items` loaded, in the order they were loaded."""
    by_name = {(spec.namespace, spec.name): spec for spec in deferred}
    bare = {spec.name: spec for spec in reversed(deferred)}  # a bare name (check_loadable accepts it): the first
    out: dict[tuple[str | None, str], ToolSpec] = {}
    for item in items:
        if isinstance(item, ToolSearchOutput):
            for tool in listed(item.tools):
                key = (tool.get("namespace"), tool.get("name"))
                spec = by_name.get(key) or by_name.get((None, str(key[1])))  # type: ignore[arg-type]
                if spec is None and key[0] is None:
                    spec = bare.get(str(key[1]))
                if spec is not None:
                    out[(spec.namespace, spec.name)] = spec
    return list(out.values())


def check_loadable(items: Iterable[Any], deferred: Sequence[ToolSpec], specs: Sequence[ToolSpec]) -> None:
    """A client's `tool_search_output` may load only tools the request declared (400 param `input`)."""
    known = {(spec.namespace, spec.name) for spec in (*deferred, *specs)}
    names = {spec.name for spec in (*deferred, *specs)}
    for item in items:
        if not isinstance(item, ToolSearchOutput):
            continue
        for tool in listed(item.tools):  # dicts: the item's type says so
            name, namespace = tool.get("name"), tool.get("namespace")
            if (namespace, name) not in known and not (namespace is None and name in names):
                raise InvalidParam(
                    f"tool_search_output names tool {name!r}, which this request did not declare.",
                    param="input",
                    code="invalid_value",
                )


def search(deferred: Sequence[ToolSpec], query: str, limit: int = MAX_HITS) -> list[ToolSpec]:
    """The deferred tools that best match `query`, best first (BM25; no match, no tool). CPU work: run it off the
    event loop for a large catalog (the index of a set is built once and kept)."""
    words = _words(query)
    if not deferred or not words:
        return []
    vocabulary, index = _index(tuple(deferred))
    known = [word for word in words if word in vocabulary]
    if not known:
        return []
    hits, scores = index.retrieve([known], k=min(limit, len(deferred)), show_progress=False)
    return [deferred[int(hit)] for hit, score in zip(hits[0], scores[0], strict=True) if score > 0]


def _words(text: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(text):
        out.append(word.lower())
        # camelCase and snake_case names search by their parts too
        out.extend(part.lower() for part in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", word) if part != word)
    return out


def _document(spec: ToolSpec) -> list[str]:
    properties = (spec.parameters or {}).get("properties")
    names = " ".join(properties) if isinstance(properties, dict) else ""
    text = " ".join([spec.namespace or "", spec.name.replace("_", " "), spec.name, spec.description or "", names])
    return _words(text) or ["_"]


_lock = threading.Lock()
_cache: OrderedDict[str, tuple[dict[str, int], Any]] = OrderedDict()


def _index(deferred: tuple[ToolSpec, ...]) -> tuple[dict[str, int], Any]:
    """A set's vocabulary and BM25 index, built once (a continuation searches the same set again)."""
    corpus = [_document(spec) for spec in deferred]
    key = json.dumps(corpus)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    import bm25s  # numpy-backed: imported where a search first runs, not when the server starts

    vocabulary = {word: n for n, word in enumerate(sorted({word for doc in corpus for word in doc}))}
    index = bm25s.BM25()
    ids = [[vocabulary[word] for word in doc] for doc in corpus]
    index.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocabulary), show_progress=False)
    with _lock:
        _cache[key] = (vocabulary, index)
        while len(_cache) > _INDEXES:
            _cache.popitem(last=False)
    return vocabulary, index
