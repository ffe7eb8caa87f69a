"""Custom tools with a grammar through the server (protocol.md §1.11): over HTTP, SSE and WebSocket, on hotloop-sim
(its inputs drawn from the grammar) and smollm2 (not constrained yet: its input is checked, and `incomplete` when
the grammar refuses it); grammars refused at the door with the compiler's message, nothing stored; one compile per
chain. The servers run in this process, so the compile cache (tools/grammar.py) is read directly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from websockets.sync.client import connect

from conftest import RunningServer, stored_counts
from grammar_support import APPLY_PATCH, DATE, PHONE, SUM, lark_tool, patch_ok, regex_tool, sum_ok
from hotloop.tools.grammar import MAX_DEFINITION, Grammar, compile_grammar
from wsutil import WS

ONE_CALL = {"sim_tool_calls": "1"}


def only_call(output: list[Any]) -> Any:
    calls = [item for item in output if item.type == "custom_tool_call"]
    assert len(calls) == 1, output
    return calls[0]


def refusal(server: RunningServer, tools: list[dict[str, Any]], transport: str = "http") -> dict[str, Any]:
    """The 400 a create with these tools gets (HTTP, or the WebSocket error frame), checked to store nothing."""
    before = stored_counts(server)
    if transport == "http":
        with server.http() as http:
            reply = http.post("/responses", json={"model": "hotloop-sim", "input": "x", "tools": tools})
        assert reply.status_code == 400, reply.text
        error: dict[str, Any] = reply.json()["error"]
    else:
        with WS(server.ws_url) as ws:
            frame = ws.error(model="hotloop-sim", input="x", tools=tools)
        assert frame["status"] == 400
        error = frame["error"]
    assert error["type"] == "invalid_request_error"
    assert stored_counts(server) == before
    return error


# --- hotloop-sim draws inputs its grammar accepts -----------------------------------------------------------------


def test_codex_apply_patch_call_parses(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="hotloop-sim",
        input="Patch it.",
        tools=[lark_tool()],
        metadata=ONE_CALL,  # type: ignore[list-item]
    )
    call = only_call(response.output)
    assert (call.name, call.status) == ("apply_patch", "completed")
    assert patch_ok(call.input), call.input
    assert response.tools[0].format.type == "grammar"  # type: ignore[union-attr]
    assert response.tools[0].format.definition == APPLY_PATCH  # type: ignore[union-attr]


def test_codex_apply_patch_call_streams_its_input(client: openai.OpenAI) -> None:
    stream = client.responses.create(
        model="hotloop-sim",
        input="Patch it, streaming.",
        tools=[lark_tool()],  # type: ignore[list-item]
        metadata=ONE_CALL,
        stream=True,
    )
    deltas: list[str] = []
    done: list[str] = []
    item: Any = None
    for event in stream:
        if event.type == "response.custom_tool_call_input.delta":
            deltas.append(event.delta)
        elif event.type == "response.custom_tool_call_input.done":
            done.append(event.input)
        elif event.type == "response.output_item.done" and event.item.type == "custom_tool_call":
            item = event.item
        elif event.type == "response.completed":
            assert only_call(event.response.output) == item
    assert len(deltas) > 1 and done == ["".join(deltas)] and item is not None
    assert (item.input, item.status) == (done[0], "completed")
    assert patch_ok(item.input), item.input


@pytest.mark.parametrize("regex", [PHONE, DATE])
def test_regex_tool_call_matches(client: openai.OpenAI, regex: str) -> None:
    for seed in range(3):  # a few draws: each one matches
        response = client.responses.create(
            model="hotloop-sim",
            input=f"Draw {seed}.",
            tools=[regex_tool("pick", regex)],  # type: ignore[list-item]
            metadata=ONE_CALL,
        )
        call = only_call(response.output)
        assert call.status == "completed" and re.fullmatch(regex, call.input), call.input


def test_namespaced_custom_tool_with_a_grammar(client: openai.OpenAI) -> None:
    namespace = {"type": "namespace", "name": "files", "description": "File edits.", "tools": [lark_tool()]}
    response = client.responses.create(
        model="hotloop-sim",
        input="Patch it.",
        tools=[namespace],
        metadata=ONE_CALL,  # type: ignore[list-item]
    )
    call = only_call(response.output)
    assert (call.name, call.namespace, call.status) == ("apply_patch", "files", "completed")
    assert patch_ok(call.input), call.input


# --- refused at the door --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_a_malformed_grammar_is_refused_with_the_compilers_message(server: RunningServer, transport: str) -> None:
    broken = APPLY_PATCH.replace("%import common.LF\n", "")  # LF is then an unknown name
    error = refusal(server, [lark_tool(definition=broken)], transport)
    assert (error["param"], error["code"]) == ("tools[0].format.definition", "invalid_value")
    assert 'unknown name: "LF"' in error["message"] and "The grammar does not compile" in error["message"]


def test_a_malformed_regex_in_a_namespace_names_its_member(server: RunningServer) -> None:
    namespace = {"type": "namespace", "name": "ns", "description": "d", "tools": [regex_tool("ok", "a+")]}
    namespace["tools"].append(regex_tool("broken", "(ab"))
    error = refusal(server, [{"type": "custom", "name": "free"}, namespace])
    assert error["param"] == "tools[1].tools[1].format.definition" and "unclosed group" in error["message"]


def test_a_definition_over_the_cap_is_refused(server: RunningServer) -> None:
    huge = "start: " + " | ".join(f'"w{i}"' for i in range(12_000))  # ~ 100 KB
    assert len(huge.encode()) > MAX_DEFINITION
    error = refusal(server, [lark_tool(definition=huge)])
    assert (error["param"], error["code"]) == ("tools[0].format.definition", "invalid_value")
    regex = refusal(server, [regex_tool("r", "a" * 70_000)])
    assert regex["param"] == "tools[0].format.definition" and str(MAX_DEFINITION) in regex["message"]


@pytest.mark.parametrize(
    ("fmt", "param"),
    [
        ({"type": "grammar", "syntax": "ebnf", "definition": "root ::= 'a'"}, "tools[0].format.syntax"),
        ({"type": "grammar", "syntax": "lark"}, "tools[0].format.definition"),
        ({"type": "json"}, "tools[0].format.type"),
    ],
)
def test_a_malformed_format_is_refused(server: RunningServer, fmt: dict[str, Any], param: str) -> None:
    error = refusal(server, [{"type": "custom", "name": "g", "format": fmt}])
    assert error["param"] == param


def test_text_format_is_freeform(client: openai.OpenAI) -> None:
    tool = {"type": "custom", "name": "note", "format": {"type": "text"}}
    response = client.responses.create(model="hotloop-sim", input="x", tools=[tool], metadata=ONE_CALL)  # type: ignore[list-item]
    assert only_call(response.output).status == "completed"


# --- compiled once per chain --------------------------------------------------------------------------------------


def test_a_websocket_chain_compiles_its_grammar_once(server: RunningServer) -> None:
    # A grammar this process has not compiled before: the comment makes it a distinct definition. (A raw socket:
    # tests/schema.py's OR schema has no custom tools or calls.)
    tools = [lark_tool(definition=APPLY_PATCH + f"// chain {time.monotonic_ns()}\n")]
    before = compile_grammar.cache_info().misses
    misses: list[int] = []
    with connect(server.ws_url, open_timeout=10) as ws:
        previous: str | None = None
        turn_input: Any = "Patch it."
        for _ in range(3):
            turn = {"model": "hotloop-sim", "input": turn_input, "tools": tools, "previous_response_id": previous}
            ws.send(json.dumps({"type": "response.create", **turn, "metadata": {"sim_tool_calls": "3"}}))
            while (event := json.loads(ws.recv(timeout=10)))["type"] not in ("response.completed", "error"):
                pass
            assert event["type"] == "response.completed", event
            misses.append(compile_grammar.cache_info().misses)
            response = event["response"]
            [call] = [item for item in response["output"] if item["type"] == "custom_tool_call"]
            assert call["status"] == "completed" and patch_ok(call["input"]), call["input"]
            previous = response["id"]
            turn_input = [{"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Done."}]
    assert before < misses[0] == misses[1] == misses[2], (before, misses)


# --- smollm2: whatever it writes, never handed out as valid -------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "parses"),
    [
        # Codex's Lark grammar has no recursion: smollm2 writes it as one regex inside the call's JSON
        # (tools/lark_regex.py), so a patch, if a rambling one (measured: `*** Add File: 1.0...`).
        (lark_tool(), patch_ok),
        # A regex is (backends/local/guided.py): measured `123-4567`.
        (regex_tool("apply_patch", PHONE), lambda text: re.fullmatch(PHONE, text) is not None),
        # A recursive grammar, JSON-escaped into the call's grammar (tools/lark_json.py).
        (lark_tool(definition=SUM), sum_ok),
    ],
    ids=["lark", "regex", "recursive-lark"],
)
def test_smollm2_forced_to_a_grammar_tool_is_incomplete_exactly_when_the_input_does_not_parse(
    client: openai.OpenAI, tool: dict[str, Any], parses: Callable[[str], bool]
) -> None:
    response = client.responses.create(
        model="smollm2-135m",
        input="Create the file hello.txt containing Hello.",
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "custom", "name": "apply_patch"},
        max_output_tokens=400,  # room for a whole patch
        temperature=0.8,  # greedy decoding repeats one patch line until the limit; sampling (seeded) ends
    )
    call = only_call(response.output)  # a call, never text, even when cut short (issue 36)
    assert call.name == "apply_patch"
    if response.incomplete_details is not None:  # cut off while writing (the grammar lets a patch go on)
        assert response.incomplete_details.reason == "max_output_tokens"
        assert call.status == "incomplete" and _admits_prefix(tool, call.input), call.input[-300:]
        return
    assert (call.status == "incomplete") == (not parses(call.input)), (call.status, call.input)
    assert call.status == "completed", call.input  # each of these grammars is held while the model writes


def _admits_prefix(tool: dict[str, Any], text: str) -> bool:
    matcher = compile_grammar(Grammar(tool["format"]["syntax"], tool["format"]["definition"]))
    assert not isinstance(matcher, str)
    return bool(text) and bool(matcher.deep_copy().consume_tokens(list(text.encode())))


# --- a chain of ~2,900 rules (under the cap) overflows an 8 MB stack -----------------------------------------------

DEEP = 2900
DEEP_CHAIN = "start: r0\n" + "".join(f'r{i}: "x" r{i + 1} | "y"\n' for i in range(DEEP)) + f'r{DEEP}: "z"\n'


def test_a_deep_grammar_compiles_from_a_main_thread() -> None:
    """compile_grammar moves the work to a thread with a large stack, whoever calls it (the builder and hotloop-sim
    do, on a grammar evicted from the cache): on the caller's 8 MB stack this chain is a SIGSEGV."""
    assert len(DEEP_CHAIN.encode()) <= MAX_DEFINITION
    script = (
        "import sys\nfrom hotloop.tools.grammar import Grammar, compile_grammar, matches\n"
        "m = compile_grammar(Grammar(syntax='lark', definition=sys.stdin.read()))\n"
        "assert not isinstance(m, str), m\nassert matches(m, 'x' * 500 + 'y')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], input=DEEP_CHAIN, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


def test_a_deep_grammar_through_the_server(server: RunningServer) -> None:
    tool = {"type": "custom", "name": "deep", "format": {"type": "grammar", "syntax": "lark", "definition": DEEP_CHAIN}}
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        reply = http.post(
            "/responses", json={"model": "hotloop-sim", "input": "x", "tools": [tool], "metadata": ONE_CALL}
        )
    assert reply.status_code == 200, reply.text
    [call] = [item for item in reply.json()["output"] if item["type"] == "custom_tool_call"]
    assert call["status"] == "completed" and re.fullmatch(r"x*[yz]", call["input"]), call["input"]
