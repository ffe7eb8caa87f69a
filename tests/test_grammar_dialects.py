"""A custom tool's grammar on `tokens` upstreams, each engine asked in its own dialect (issue 30; docs/backends.md
"Grammars on `tokens` upstreams"; backends/upstream/constraints.py).

Clients → hotloop → a real `hotloop sim-engine` process per model family (Hermes `<tool_call>` text, gpt-oss's
harmony channels), in each dialect (vLLM, SGLang, llama.cpp), with Codex's Lark `apply_patch` grammar and regexes:
the exact constraint fields the engine received (its GET /stats/requests `constraint`), and the call that came
back. Where a constraint was sent, sim-engine drew the input from it, as an engine's masked decoding would, and the
call is `completed` with an input its grammar takes; where none can be sent (Lark on Hermes, a regex llama.cpp's
converter cannot translate, one whose matches JSON would escape), nothing was sent, and the server's own check ends
sim-engine's unconstrained input `incomplete`. A request without grammars sends exactly what it sent before.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from conftest import RunningServer, start_server
from hotloop.backends.base import GenerationRequest
from hotloop.backends.upstream import constraints
from hotloop.backends.upstream.tokens import request_body
from hotloop.config import Upstream
from hotloop.simengine import constraints as sim_constraints
from hotloop.tools.grammar import Grammar, compile_grammar, matches, sample
from hotloop.tools.spec import ToolSpec
from render_support import harmony_tokenizer_file
from simengine_support import SimEngineProcess

_DATA = Path(__file__).parent / "data" / "codex_apply_patch.lark"
# Codex's grammar (openai/codex codex-rs/core/src/tools/handlers/tool_apply_patch.lark, Apache-2.0): tests/data
# keeps it with its license; the same rules inline where that file is absent.
APPLY_PATCH = (
    _DATA.read_text(encoding="utf-8")
    if _DATA.exists()
    else """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"""
)
SLUG = r"[a-z]{1,8}(-[0-9]{1,4}){0,2}"  # no character JSON escapes, no class llama.cpp's converter lacks
PHONE = r"\d{3}-\d{4}"  # llama.cpp's JSON-schema converter has no `\d`
QUOTED = r'say "[a-z]{1,6}"'  # a `"` in every match: a JSON string would escape it
HARMONY_END = "<|call|>"
DIALECTS = ("vllm", "sglang", "llamacpp")
ENGINE = {"tps": 5000, "prefill_us_per_token": 1, "tool_calls": 1, "parallel_calls": 1}
JSON = dict[str, Any]


def lark_tool(name: str = "apply_patch") -> JSON:
    grammar = {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH}
    return {"type": "custom", "name": name, "description": "Edit files with a patch.", "format": grammar}


def regex_tool(name: str, definition: str) -> JSON:
    return {"type": "custom", "name": name, "format": {"type": "grammar", "syntax": "regex", "definition": definition}}


def harmony_header(name: str) -> str:
    return f"<|channel|>commentary to=functions.{name}<|message|>"


def harmony_tag(name: str, content: JSON, forced: bool = False) -> JSON:
    tag = {"type": "tag", "begin": harmony_header(name), "content": content, "end": HARMONY_END}
    fmt: JSON = {"type": "triggered_tags", "triggers": [harmony_header(name)], "tags": [tag]}
    if forced:
        fmt.update(at_least_one=True, stop_after_first=True)
    return {"type": "structural_tag", "format": fmt}


def call_branch(name: str, pattern: str | None) -> JSON:
    value: JSON = {"type": "string", "pattern": f"^({pattern})$"} if pattern is not None else {"type": "string"}
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "input": value},
        "required": ["name", "input"],
        "additionalProperties": False,
    }


def hermes_tag(schema: JSON) -> JSON:
    tag = {"type": "tag", "begin": "<tool_call>\n", "content": {"type": "json_schema", "json_schema": schema}}
    tag["end"] = "\n</tool_call>"
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [tag]}}


def sent_tag(dialect: str, constraint: JSON | None) -> JSON:
    """The structural tag of the engine's constraint fields, which hold it and nothing else, as a JSON string."""
    assert constraint is not None
    if dialect == "vllm":
        assert list(constraint) == ["structured_outputs"] and list(constraint["structured_outputs"]) == [
            "structural_tag"
        ]
        text = constraint["structured_outputs"]["structural_tag"]
    else:
        assert constraint == {"sampling_params": {"structural_tag": constraint["sampling_params"]["structural_tag"]}}
        text = constraint["sampling_params"]["structural_tag"]
    assert isinstance(text, str)
    tag: JSON = json.loads(text)
    return tag


# -- engines and hotloop ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hermes_engine() -> Iterator[SimEngineProcess]:
    process = SimEngineProcess(**ENGINE).wait_ready()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def harmony_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimEngineProcess, Path]]:
    tokenizer = harmony_tokenizer_file(tmp_path_factory.mktemp("harmony"))
    process = SimEngineProcess(**ENGINE, output_format="harmony", tokenizer=tokenizer, reasoning_tokens=3)
    yield process.wait_ready(), tokenizer
    process.stop()


@pytest.fixture(scope="module")
def hotloop(
    hermes_engine: SimEngineProcess,
    harmony_engine: tuple[SimEngineProcess, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningServer]:
    harmony, tokenizer = harmony_engine
    common: JSON = {"backend": "tokens", "read_timeout_s": 30}
    gpt_oss: JSON = {**common, "tokenizer": str(tokenizer), "reasoning_parser": "harmony"}
    upstreams = {
        "hermes-vllm": Upstream(url=hermes_engine.base_url, dialect="vllm", **common),
        "hermes-sglang": Upstream(url=f"http://127.0.0.1:{hermes_engine.port}", dialect="sglang", **common),
        "hermes-llamacpp": Upstream(url=f"http://127.0.0.1:{hermes_engine.port}", dialect="llamacpp", **common),
        "harmony-vllm": Upstream(url=harmony.base_url, dialect="vllm", **gpt_oss),
        "harmony-sglang": Upstream(url=f"http://127.0.0.1:{harmony.port}", dialect="sglang", **gpt_oss),
    }
    running = start_server(
        tmp_path_factory.mktemp("grammars"), models=list(upstreams), default_model="hermes-vllm", upstreams=upstreams
    )
    yield running
    running.stop()


@pytest.fixture()
def http(hotloop: RunningServer) -> Iterator[httpx.Client]:
    with hotloop.http() as client:
        yield client


def run(http: httpx.Client, engine: SimEngineProcess, model: str, tools: list[JSON], **extra: Any) -> tuple[JSON, Any]:
    """One response (not stored) and the constraint fields the engine received for it."""
    engine.reset()
    body = {"model": model, "input": "Make the change.", "tools": tools, "store": False, **extra}
    reply = http.post("/responses", json=body)
    assert reply.status_code == 200, reply.text
    records = engine.http.get("/stats/requests").json()["requests"]
    assert len(records) == 1, records
    response: JSON = reply.json()
    return response, records[0]["constraint"]


def custom_call(response: JSON) -> JSON:
    found = [item for item in response["output"] if item["type"] == "custom_tool_call"]
    assert len(found) == 1, response["output"]
    return found[0]


def patch_ok(text: str) -> bool:
    matcher = compile_grammar(Grammar(syntax="lark", definition=APPLY_PATCH))
    assert not isinstance(matcher, str)
    return text.startswith("*** Begin Patch\n") and "*** End Patch" in text and matches(matcher, text)


# -- harmony (gpt-oss): the tool's grammar itself, on the raw input ------------------------------------------------


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_harmony_lark_goes_as_a_structural_tag_triggered_by_the_call_header(
    http: httpx.Client, harmony_engine: tuple[SimEngineProcess, Path], dialect: str
) -> None:
    response, constraint = run(http, harmony_engine[0], f"harmony-{dialect}", [lark_tool()])
    content = {"type": "grammar", "syntax": "lark", "grammar": APPLY_PATCH}
    assert sent_tag(dialect, constraint) == harmony_tag("apply_patch", content)
    # The model reasons first (free text before the trigger), then its call follows the grammar.
    assert response["output"][0]["type"] == "reasoning"
    call = custom_call(response)
    assert call["status"] == "completed" and call["name"] == "apply_patch", call
    assert patch_ok(call["input"]), call["input"]


def test_codex_gets_the_freeform_apply_patch_where_the_engine_follows_lark(http: httpx.Client) -> None:
    """Codex's catalog offers the Lark `apply_patch` for the upstreams whose engine is held to it as the model writes
    (harmony on vLLM and SGLang, the test above), not where the server can only check the input afterwards."""
    catalog = http.get("/models", params={"client_version": "0.171.0"})
    assert catalog.status_code == 200, catalog.text
    kinds = {entry["slug"]: entry.get("apply_patch_tool_type") for entry in catalog.json()["models"]}
    assert kinds == {
        "harmony-vllm": "freeform",
        "harmony-sglang": "freeform",
        "hermes-vllm": None,
        "hermes-sglang": None,
        "hermes-llamacpp": None,
    }


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_harmony_regex_goes_as_the_tags_regex(
    http: httpx.Client, harmony_engine: tuple[SimEngineProcess, Path], dialect: str
) -> None:
    # A `"` in every match is fine raw: harmony's input is no JSON string.
    tools = [regex_tool("slug", SLUG), regex_tool("quote", QUOTED)]
    response, constraint = run(http, harmony_engine[0], f"harmony-{dialect}", tools, tool_choice="auto")
    tag = sent_tag(dialect, constraint)
    assert tag["format"]["triggers"] == [harmony_header("slug"), harmony_header("quote")]
    assert [t["content"] for t in tag["format"]["tags"]] == [
        {"type": "regex", "pattern": SLUG},
        {"type": "regex", "pattern": QUOTED},
    ]
    call = custom_call(response)
    assert call["status"] == "completed", call
    assert re.fullmatch(SLUG if call["name"] == "slug" else QUOTED, call["input"]), call


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_forced_harmony_tool_follows_its_grammar_from_the_first_token(
    http: httpx.Client, harmony_engine: tuple[SimEngineProcess, Path], dialect: str
) -> None:
    tools = [lark_tool(), {"type": "function", "name": "noop", "parameters": {"type": "object", "properties": {}}}]
    choice = {"type": "custom", "name": "apply_patch"}
    response, constraint = run(http, harmony_engine[0], f"harmony-{dialect}", tools, tool_choice=choice)
    # The structural tag replaces the JSON schema a forced call otherwise sends: an engine takes one constraint.
    content = {"type": "grammar", "syntax": "lark", "grammar": APPLY_PATCH}
    assert sent_tag(dialect, constraint) == harmony_tag("apply_patch", content, forced=True)
    assert [item["type"] for item in response["output"]] == ["custom_tool_call"]  # no reasoning before it
    call = custom_call(response)
    assert call["status"] == "completed" and patch_ok(call["input"]), call


# -- Hermes: a regex as the JSON string's pattern; Lark cannot be sent ---------------------------------------------


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_hermes_regex_goes_as_a_pattern_in_a_structural_tag_on_tool_call(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", [regex_tool("slug", SLUG)])
    assert sent_tag(dialect, constraint) == hermes_tag(call_branch("slug", SLUG))
    call = custom_call(response)
    assert call["status"] == "completed" and re.fullmatch(SLUG, call["input"]), call


def test_hermes_regex_goes_to_llamacpp_as_a_lazy_gbnf_grammar(
    http: httpx.Client, hermes_engine: SimEngineProcess
) -> None:
    response, constraint = run(http, hermes_engine, "hermes-llamacpp", [regex_tool("slug", SLUG)])
    assert constraint is not None
    assert set(constraint) == {"grammar", "grammar_lazy", "grammar_triggers", "preserved_tokens"}
    assert constraint["grammar_lazy"] is True
    assert constraint["grammar_triggers"] == [{"type": 1, "value": "<tool_call>"}]  # a word trigger
    assert constraint["preserved_tokens"] == ["<tool_call>"]
    gbnf = constraint["grammar"]
    # Fed from the trigger on, the grammar opens with it; calls with the regex's inputs pass, others do not.
    assert gbnf.startswith('root ::= "<tool_call>\\n" tool-call "\\n</tool_call>"'), gbnf
    grammar = _gbnf(gbnf)
    call = custom_call(response)
    assert call["status"] == "completed" and re.fullmatch(SLUG, call["input"]), call
    for text, ok in ((call["input"], True), ("abc-1", True), ("ABC", False), ("abc-12345", False)):
        written = "<tool_call>\n" + json.dumps({"name": "slug", "input": text}) + "\n</tool_call>"
        assert matches(grammar, written) is ok, text


@pytest.mark.parametrize("dialect", DIALECTS)
def test_hermes_lark_sends_nothing_and_the_server_judges_the_input(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    """No engine applies a Lark grammar to a JSON string's contents: nothing is sent, the model writes what it
    likes (sim-engine: its placeholder), and the server's check ends the call incomplete."""
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", [lark_tool()])
    assert constraint is None
    call = custom_call(response)
    assert call["status"] == "incomplete" and not patch_ok(call["input"]), call


@pytest.mark.parametrize("dialect", DIALECTS)
def test_hermes_regex_each_engine_would_apply_wrongly_sends_nothing(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    """`"` in every match: xgrammar and llama.cpp's converter would write it unescaped into the JSON string. `\\d`:
    llama.cpp's converter has no such class (its grammar would not parse); vLLM and SGLang take it."""
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", [regex_tool("quote", QUOTED)])
    assert constraint is None
    assert custom_call(response)["status"] == "incomplete"
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", [regex_tool("phone", PHONE)])
    call = custom_call(response)
    if dialect == "llamacpp":
        assert constraint is None and call["status"] == "incomplete", call
    else:
        assert sent_tag(dialect, constraint) == hermes_tag(call_branch("phone", PHONE))
        assert call["status"] == "completed" and re.fullmatch(PHONE, call["input"]), call


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_forced_hermes_regex_call_goes_as_the_json_schema_pattern(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    choice = {"type": "custom", "name": "slug"}
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", [regex_tool("slug", SLUG)], tool_choice=choice)
    schema = call_branch("slug", SLUG)
    expected = {
        "vllm": {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}},
        "sglang": {"sampling_params": {"json_schema": json.dumps(schema)}},
        "llamacpp": {"json_schema": schema},
    }[dialect]
    assert constraint == expected
    call = custom_call(response)
    assert call["status"] == "completed" and re.fullmatch(SLUG, call["input"]), call


# -- an engine that refuses a grammar form ------------------------------------------------------------------------


def test_an_engine_that_refuses_lark_in_a_structural_tag_gets_the_turn_without_it(
    harmony_engine: tuple[SimEngineProcess, Path], tmp_path: Path
) -> None:
    """vLLM 0.32.0's xgrammar (0.2.8) reads a structural tag's grammar as EBNF and answers 400 to Lark there: the turn
    goes again without the grammar (the server's check judges the input), and those tools are sent without it
    since; a regex tag, which that xgrammar takes, still goes."""
    _, tokenizer = harmony_engine
    old = SimEngineProcess(**ENGINE, output_format="harmony", tokenizer=tokenizer, structural_tag_lark=False)
    old.wait_ready()
    upstream = Upstream(
        url=old.base_url, dialect="vllm", backend="tokens", tokenizer=str(tokenizer), reasoning_parser="harmony"
    )
    server = start_server(tmp_path, models=["gpt-oss"], default_model="gpt-oss", upstreams={"gpt-oss": upstream})
    try:
        with server.http() as client:
            constraints_sent = []
            for tools in ([lark_tool()], [lark_tool()], [regex_tool("slug", SLUG)]):
                response, records = run_all(client, old, "gpt-oss", tools)
                constraints_sent.append([record["constraint"] for record in records])
                call = custom_call(response)
                assert call["status"] == ("completed" if call["name"] == "slug" else "incomplete"), call
    finally:
        server.stop()
        old.stop()
    lark = {"type": "grammar", "syntax": "lark", "grammar": APPLY_PATCH}
    refused, again, regex = constraints_sent
    assert len(refused) == 2 and json.loads(refused[0]["structured_outputs"]["structural_tag"]) == harmony_tag(
        "apply_patch", lark
    )
    assert refused[1] is None  # the same turn, without the grammar
    assert again == [None]  # remembered: no second refusal
    assert len(regex) == 1 and regex[0] is not None


def run_all(http: httpx.Client, engine: SimEngineProcess, model: str, tools: list[JSON]) -> tuple[JSON, list[JSON]]:
    """One response and every request the engine got for it."""
    engine.reset()
    reply = http.post("/responses", json={"model": model, "input": "Go.", "tools": tools, "store": False})
    assert reply.status_code == 200, reply.text
    records: list[JSON] = engine.http.get("/stats/requests").json()["requests"]
    response: JSON = reply.json()
    return response, records


# -- requests without grammars, and the bodies without sockets -----------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_request_without_grammars_sends_no_constraint(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    tools = [{"type": "custom", "name": "note", "description": "Take a note."}]
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", tools)
    assert constraint is None
    assert custom_call(response)["status"] == "completed"


WEATHER = ToolSpec("get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
NOTE = ToolSpec("apply_patch", kind="custom", description="Patch files")
_SAMPLING = '"temperature":1.0,"top_p":1.0,"presence_penalty":0.0,"frequency_penalty":0.0'
_SPECIAL = ',"skip_special_tokens":false,"spaces_between_special_tokens":false'
_FORCED = (
    '{"type":"object","properties":{"name":{"const":"apply_patch"},"input":{"type":"string"}},'
    '"required":["name","input"],"additionalProperties":false}'
)
_FORCED_TEXT = json.dumps(json.loads(_FORCED)).replace('"', '\\"')  # SGLang takes the schema as a string
_VLLM = '{"model":"m","prompt":[1,2,3],"max_tokens":50,"stream":true,"stream_options":{"include_usage":true},'
_SGLANG = '{"input_ids":[1,2,3],"sampling_params":{'
_LLAMACPP = '{"prompt":[1,2,3],"n_predict":50,"stream":true,"cache_prompt":true,'
_RESPONSE_FORMAT = ',"response_format":{"type":"json_schema","json_schema":{"name":"output","schema":'
# What each dialect's body was before grammars reached the `tokens` backend, byte for byte.
GOLDEN = {
    ("vllm", "auto", False): _VLLM + _SAMPLING + "}",
    ("vllm", "auto", True): _VLLM + _SAMPLING + _SPECIAL + "}",
    ("vllm", "forced", False): _VLLM + _SAMPLING + _RESPONSE_FORMAT + _FORCED + "}}}",
    ("sglang", "auto", False): _SGLANG + _SAMPLING + ',"max_new_tokens":50},"stream":true}',
    ("sglang", "auto", True): _SGLANG + _SAMPLING + _SPECIAL + ',"max_new_tokens":50},"stream":true}',
    ("sglang", "forced", False): _SGLANG
    + _SAMPLING
    + ',"max_new_tokens":50,"json_schema":"'
    + _FORCED_TEXT
    + '"},"stream":true}',
    ("llamacpp", "auto", False): _LLAMACPP + _SAMPLING + "}",
    ("llamacpp", "forced", False): _LLAMACPP + _SAMPLING + ',"json_schema":' + _FORCED + "}",
}


@pytest.mark.fast
@pytest.mark.parametrize(("dialect", "choice", "special"), list(GOLDEN))
def test_bodies_without_grammars_are_byte_identical_to_before(dialect: str, choice: str, special: bool) -> None:
    forced = choice == "forced"
    request = GenerationRequest(
        prompt_tokens=[1, 2, 3],
        tools=[WEATHER, NOTE],
        tool_choice="required" if forced else "auto",
        forced_tool="apply_patch" if forced else None,
        max_output_tokens=50,
    )
    for calls in ("hermes", "harmony", "json"):
        body = request_body(dialect, "m", request, 100, keep_special=special, calls=calls)
        assert msgspec.json.encode(body).decode() == GOLDEN[(dialect, choice, special)], calls


@pytest.mark.fast
def test_constraints_are_built_once_per_set_of_tools() -> None:
    slug = ToolSpec("slug", kind="custom", grammar=Grammar(syntax="regex", definition=SLUG))
    first = GenerationRequest(prompt_tokens=[1], tools=[WEATHER, slug], tool_choice="auto")
    again = GenerationRequest(prompt_tokens=[1, 2, 3, 4], tools=[WEATHER, slug], tool_choice="auto")
    for dialect in DIALECTS:
        fields = constraints.constraint_fields(dialect, "hermes", first)
        assert fields is not None and constraints.constraint_fields(dialect, "hermes", again) is fields
    # Harmony on llama.cpp is refused at start-up (its /completion drops the special tokens): nothing to build.
    assert constraints.constraint_fields("llamacpp", "harmony", first) is None
    # Bare-JSON calls (tool_parser json) have no `<tool_call>` to trigger on: nothing sent.
    assert constraints.constraint_fields("vllm", "json", first) is None
    assert constraints.constraint_fields("vllm", "hermes", msgspec.structs.replace(first, tool_choice="none")) is None


@pytest.mark.fast
def test_the_sim_engine_reads_the_grammar_back_from_each_constraint() -> None:
    slug = ToolSpec("slug", kind="custom", grammar=Grammar(syntax="regex", definition=SLUG))
    bare = ToolSpec("slug", kind="custom")
    request = GenerationRequest(prompt_tokens=[1], tools=[WEATHER, slug], tool_choice="auto")
    for dialect, calls in (("vllm", "hermes"), ("vllm", "harmony"), ("llamacpp", "hermes")):
        fields = constraints.constraint_fields(dialect, calls, request)
        assert fields is not None
        tag = (fields.get("structured_outputs") or {}).get("structural_tag")
        got = sim_constraints.resolve(
            None, tag, fields.get("grammar"), fields.get("grammar_triggers", []), [WEATHER, bare], random.Random(1)
        )
        assert set(got.grammars) == {"slug"} and got.forced is None, got
        for seed in range(5):  # the input sim-engine writes: drawn from the grammar the engine was given
            matcher = compile_grammar(got.grammars["slug"])
            assert not isinstance(matcher, str)
            assert re.fullmatch(SLUG, sample(matcher, random.Random(seed)))


def _gbnf(gbnf: str) -> Any:
    from llguidance.gbnf_to_lark import any_to_lark

    matcher = compile_grammar(Grammar(syntax="lark", definition=any_to_lark(gbnf)))
    assert not isinstance(matcher, str), matcher
    return matcher


@pytest.mark.fast
def test_a_forced_calls_pattern_goes_only_where_the_engine_applies_it() -> None:
    def forced(name: str, definition: str, dialect: str) -> JSON:
        spec = ToolSpec(name, kind="custom", grammar=Grammar(syntax="regex", definition=definition))
        request = GenerationRequest(prompt_tokens=[1], tools=[spec], tool_choice="required", forced_tool=name)
        body = request_body(dialect, "m", request, 100)
        schema: JSON = {
            "vllm": lambda: body["response_format"]["json_schema"]["schema"],
            "sglang": lambda: json.loads(body["sampling_params"]["json_schema"]),
            "llamacpp": lambda: body["json_schema"],
        }[dialect]()
        value: JSON = schema["properties"]["input"]
        return value

    for dialect in DIALECTS:
        assert forced("slug", SLUG, dialect) == {"type": "string", "pattern": f"^({SLUG})$"}
        if dialect != "llamacpp":
            assert forced("phone", PHONE, dialect) == {"type": "string", "pattern": f"^({PHONE})$"}


def forced_grammar(dialect: str, constraint: JSON | None) -> str:
    """The GBNF of a forced call's whole output, in the engine's own grammar field and nothing else."""
    assert constraint is not None
    if dialect == "vllm":
        assert constraint == {"structured_outputs": {"grammar": constraint["structured_outputs"]["grammar"]}}
        text = constraint["structured_outputs"]["grammar"]
    elif dialect == "sglang":
        assert constraint == {"sampling_params": {"ebnf": constraint["sampling_params"]["ebnf"]}}
        text = constraint["sampling_params"]["ebnf"]
    else:
        assert constraint == {"grammar": constraint["grammar"]}
        text = constraint["grammar"]
    assert isinstance(text, str)
    return text


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_forced_hermes_lark_call_goes_as_the_engines_grammar_for_the_whole_output(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    """Issue 36: a forced call's Lark grammar reached no Hermes engine (no JSON-schema `pattern` can carry the
    escaped form of a patch's newlines). The call is the whole output, so it goes as GBNF for all of it: the
    engine (sim-engine, drawing under the grammar it got) writes a patch the grammar accepts."""
    choice = {"type": "custom", "name": "apply_patch"}
    response, constraint = run(http, hermes_engine, f"hermes-{dialect}", [lark_tool()], tool_choice=choice)
    grammar = _gbnf(forced_grammar(dialect, constraint))
    call = custom_call(response)
    assert call["status"] == "completed" and patch_ok(call["input"]), call
    written = json.dumps({"name": "apply_patch", "input": call["input"]}, ensure_ascii=False)
    assert matches(grammar, written)  # the call as the model wrote it, its input JSON-escaped
    assert not matches(grammar, json.dumps({"name": "apply_patch", "input": "*** Begin Patch\n"}))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_forced_regex_whose_matches_json_escapes_goes_as_the_engines_grammar(
    http: httpx.Client, hermes_engine: SimEngineProcess, dialect: str
) -> None:
    """`"` in every match (and on llama.cpp a `\\d` its converter lacks): no pattern carries it, the GBNF does."""
    for name, regex in (("quote", QUOTED), *((("phone", PHONE),) if dialect == "llamacpp" else ())):
        choice = {"type": "custom", "name": name}
        response, constraint = run(
            http, hermes_engine, f"hermes-{dialect}", [regex_tool(name, regex)], tool_choice=choice
        )
        forced_grammar(dialect, constraint)
        call = custom_call(response)
        assert call["status"] == "completed" and re.fullmatch(regex, call["input"]), call
