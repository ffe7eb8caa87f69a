"""Typed client tools (hotloop/tools/, protocol.md §1.4, §1.11) without a server: each kind's items against
openai-python's types, the tools' declaration and refusals, tool_choice, call pairing, the builder's events and
their replay, and a compaction that carries the items."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest
from openai.types.responses import (
    ResponseApplyPatchToolCall,
    ResponseComputerToolCall,
    ResponseFunctionShellToolCall,
    response_input_item,
    response_output_item,
)
from pydantic import BaseModel

from hotloop.chat.compacted import carried, carries, kept_tail
from hotloop.chat.hosted import as_calls
from hotloop.errors import HotloopError
from hotloop.pipeline.normalize import normalize_input
from hotloop.pipeline.tools import resolve_tool_choice, resolve_tools
from hotloop.pipeline.validate import check_new_items
from hotloop.sealing import seal
from hotloop.tools.registry import BY_KIND, build_call, pair
from hotloop.wire.builder import ResponseBuilder
from hotloop.wire.items import Compaction, FunctionCall, FunctionCallOutput, InputImage, InputText, Message
from hotloop.wire.replay import replay_events
from hotloop.wire.response import Response, Usage
from hotloop.wire.tool_items import (
    ApplyPatchCallOutput,
    ComputerCallOutput,
    ComputerScreenshot,
    LocalShellCallOutput,
    ShellCall,
    ShellCallOutput,
    ShellOutcome,
    ShellOutput,
)
from media_support import png_data_url
from openai_types_support import openai_typed

pytestmark = pytest.mark.fast  # the fast tier: `make unit-fast`

SECRET = b"s" * 32


def exact(model: type[BaseModel], raw: dict[str, Any]) -> BaseModel:
    """`raw` validated as `model`, every key one openai-python declares, and dumped back unchanged."""
    typed = model.model_validate(raw)
    assert typed.model_dump(exclude_unset=True) == raw
    return typed


# -- build: the call item from the arguments the model wrote ----------------------------------------------------------

MODELS: dict[str, tuple[type[BaseModel], ...]] = {
    "shell": (ResponseFunctionShellToolCall,),
    "local_shell": (response_input_item.LocalShellCall, response_output_item.LocalShellCall),
    "apply_patch": (ResponseApplyPatchToolCall,),
    "computer": (ResponseComputerToolCall,),
}
WELL_FORMED: list[tuple[str, dict[str, Any]]] = [
    ("shell", {"commands": ["ls", "pwd"], "timeout_ms": 500}),
    ("shell", {"command": ["ls", "-la"]}),  # one argv instead of `commands`
    ("local_shell", {"command": ["ls", "-la"]}),
    ("local_shell", {"command": "ls", "working_directory": "/w", "timeout_ms": 9}),  # one line, run by bash
    ("apply_patch", {"type": "create_file", "path": "a.txt", "diff": "+a\n"}),
    ("apply_patch", {"operation": {"type": "update_file", "path": "a", "diff": "@@\n-a\n+b"}}),  # nested
    ("apply_patch", {"type": "delete_file", "path": "a.txt"}),
    ("computer", {"type": "click", "button": "right", "x": 3, "y": 4}),
    ("computer", {"type": "click", "x": 3, "y": 4}),
    ("computer", {"type": "screenshot"}),
    ("computer", {"type": "scroll", "x": 1, "y": 2, "scroll_x": 0, "scroll_y": 5}),
    ("computer", {"action": {"type": "keypress", "keys": ["CTRL", "C"]}}),  # nested
    ("computer", {"type": "type", "text": "hi"}),
    ("computer", {"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}),
    ("computer", {"type": "wait"}),
]


def expected_item(kind: str, arguments: dict[str, Any], item_id: str) -> dict[str, Any]:
    base = {"call_id": "call_1", "id": item_id, "status": "completed"}
    if kind == "shell":
        commands = arguments.get("commands") or [" ".join(arguments["command"])]
        timeout = {"timeout_ms": arguments["timeout_ms"]} if "timeout_ms" in arguments else {}
        return {"type": "shell_call", **base, "action": {"commands": commands, **timeout}}
    if kind == "local_shell":
        command = arguments["command"]
        argv = command if isinstance(command, list) else ["bash", "-lc", command]
        extra = {k: v for k, v in arguments.items() if k in ("working_directory", "timeout_ms")}
        return {"type": "local_shell_call", **base, "action": {"type": "exec", "command": argv, "env": {}, **extra}}
    if kind == "apply_patch":
        return {"type": "apply_patch_call", **base, "operation": arguments.get("operation", arguments)}
    action = dict(arguments.get("action", arguments))
    if action["type"] == "click":
        action.setdefault("button", "left")
    return {"type": "computer_call", **base, "pending_safety_checks": [], "action": action}


@pytest.mark.parametrize(("kind", "arguments"), WELL_FORMED)
def test_build_from_well_formed_arguments(kind: str, arguments: dict[str, Any]) -> None:
    item = BY_KIND[kind].build("call_1", json.dumps(arguments), True)
    raw = msgspec.to_builtins(item)
    assert raw == expected_item(kind, arguments, raw["id"])
    for model in MODELS[kind]:
        exact(model, raw)
    openai_typed("output", raw)
    # `lower` renders it back as the function call the model wrote, and `build` of that gives the same item
    lowered = BY_KIND[kind].lower(item)
    assert isinstance(lowered, FunctionCall) and lowered.name == kind and lowered.call_id == "call_1"
    again = msgspec.to_builtins(BY_KIND[kind].build("call_1", lowered.arguments, True))
    assert {**again, "id": raw["id"]} == raw


MALFORMED: list[tuple[str, str]] = [
    ("shell", '{"commands": ["ls"'),  # cut off
    ("shell", '{"commands": []}'),
    ("shell", "[1, 2]"),
    ("local_shell", '{"command": ["ls", '),
    ("local_shell", '{"command": 7}'),
    ("apply_patch", '{"type": "create_file", "path": "a.txt", "di'),
    ("apply_patch", '{"type": "rename_file", "path": "a.txt", "diff": "+"}'),
    ("apply_patch", '{"type": "update_file", "path": "a.txt"}'),  # no diff
    ("apply_patch", '{"type": "create_file", "path": "", "diff": "+"}'),
    ("computer", '{"type": "click", "x": 1'),
    ("computer", '{"type": "click"}'),  # no position
    ("computer", '{"type": "fly"}'),
    ("computer", "not json"),
    ("computer", '{"type": "click", "button": "middle", "x": 1, "y": 2}'),
    ("computer", '{"type": "drag"}'),
    ("computer", '{"type": "drag", "path": [{"x": 1}]}'),
    ("computer", '{"type": "keypress", "keys": "a"}'),
    ("computer", '{"type": "type"}'),
    ("computer", '{"type": "move", "x": true, "y": 2}'),
]


@pytest.mark.parametrize(("kind", "arguments"), MALFORMED)
def test_malformed_or_cut_off_arguments_give_an_unfinished_item(kind: str, arguments: str) -> None:
    item = BY_KIND[kind].build("call_1", arguments, True)
    raw = msgspec.to_builtins(item)
    assert raw["status"] == ("in_progress" if kind == "apply_patch" else "incomplete")
    openai_typed("output", raw)  # still an item openai-python reads


def test_a_scroll_along_one_axis() -> None:
    """A model that scrolls one way may leave the other amount out: it is 0, as openai-python needs one."""
    item = BY_KIND["computer"].build("c", '{"type": "scroll", "x": 5, "y": 6, "scroll_y": -3}', True)
    raw = msgspec.to_builtins(item)
    assert raw["status"] == "completed"
    assert raw["action"] == {"type": "scroll", "x": 5, "y": 6, "scroll_x": 0, "scroll_y": -3}
    exact(ResponseComputerToolCall, raw)


@pytest.mark.parametrize("kind", sorted(BY_KIND))
def test_generation_stopped_inside_the_arguments(kind: str) -> None:
    arguments = json.dumps(BY_KIND[kind].sample(1, random.Random(1)))
    assert msgspec.to_builtins(BY_KIND[kind].build("c", arguments, True))["status"] == "completed"
    stopped = msgspec.to_builtins(build_call(kind, "c", arguments, False))
    assert stopped["status"] == ("in_progress" if kind == "apply_patch" else "incomplete")


# -- lower: the items as the function calls and outputs every chat format renders --------------------------------


def test_shell_output_reads_as_its_text_and_exit() -> None:
    output = ShellCallOutput(
        call_id="call_1",
        output=[
            ShellOutput(stdout="a\n", stderr="warn\n", outcome=ShellOutcome(type="exit", exit_code=2)),
            ShellOutput(stdout="", stderr="", outcome=ShellOutcome(type="timeout")),
        ],
    )
    lowered = BY_KIND["shell"].lower(output)
    assert lowered == FunctionCallOutput(call_id="call_1", output="a\nstderr:\nwarn\n(exit code 2)\n\n(timed out)")
    exact(response_input_item.ShellCallOutput, msgspec.to_builtins(output))


def test_other_outputs_lowered() -> None:
    local = LocalShellCallOutput(output='{"stdout": "x"}', id="call_9")
    lowered_local = BY_KIND["local_shell"].lower(local)
    assert isinstance(lowered_local, FunctionCallOutput)
    assert (lowered_local.call_id, lowered_local.output) == ("call_9", '{"stdout": "x"}')
    patch = ApplyPatchCallOutput(call_id="call_2", status="failed", output="no such file")
    assert BY_KIND["apply_patch"].lower(patch) == FunctionCallOutput(call_id="call_2", output="failed: no such file")
    url = png_data_url()
    shot = ComputerCallOutput(call_id="call_3", output=ComputerScreenshot(type="computer_screenshot", image_url=url))
    lowered = BY_KIND["computer"].lower(shot)
    assert isinstance(lowered, FunctionCallOutput) and isinstance(lowered.output, list)
    assert lowered.output[1] == InputImage(image_url=url) and isinstance(lowered.output[0], InputText)
    exact(response_input_item.ComputerCallOutput, msgspec.to_builtins(shot))


def test_as_calls_lowers_typed_items_in_a_context() -> None:
    call = BY_KIND["shell"].build("call_1", '{"commands": ["ls"]}', True)
    output = ShellCallOutput(
        call_id="call_1", output=[ShellOutput(stdout="f", stderr="", outcome=ShellOutcome(type="exit", exit_code=0))]
    )
    user = Message(role="user", content=[InputText(text="go")])
    lowered = as_calls([user, call, output])
    assert lowered[0] is user
    assert isinstance(lowered[1], FunctionCall) and json.loads(lowered[1].arguments) == {"commands": ["ls"]}
    assert (lowered[1].call_id, lowered[1].name, lowered[1].id) == ("call_1", "shell", call.id)
    assert lowered[2] == FunctionCallOutput(call_id="call_1", output="f\n(exit code 0)")


# -- resolve_tools: declared, refused, dropped --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["image_generation", "programmatic_tool_calling", "teleport"])
def test_tools_hotloop_does_not_run_are_refused(kind: str) -> None:
    """Refused by name unless `drop_tool_types` lists them (image_generation is by default: Cline always sends it)."""
    tools = [{"type": "function", "name": "f"}, {"type": kind}]
    with pytest.raises(HotloopError) as info:
        resolve_tools(tools, drop=("web_search",))
    assert (info.value.status, info.value.code, info.value.param) == (400, "unsupported_tool", "tools[1].type")


def test_code_interpreter_is_refused_by_name_where_no_code_runs() -> None:
    """Where the sandbox cannot start (or the setting is off), the reason is the refusal's; elsewhere it is declared."""
    tools = [{"type": "code_interpreter", "container": {"type": "auto"}}]
    with pytest.raises(HotloopError) as info:
        resolve_tools(tools, no_code="its sandbox cannot run on this host (no bwrap)")
    assert (info.value.status, info.value.code, info.value.param) == (400, "unsupported_tool", "tools[0].type")
    assert "no bwrap" in info.value.message
    declared = resolve_tools(tools).code
    assert declared is not None and declared.container_id is None and declared.memory_limit == "1g"


def test_web_search_is_dropped_by_default_and_refused_without_the_setting() -> None:
    tools = [{"type": "web_search"}, {"type": "shell"}]
    resolved = resolve_tools(tools)
    assert resolved.dropped == ("web_search",) and resolved.echo == [{"type": "shell"}]
    assert [spec.kind for spec in resolved.specs] == ["shell"]
    with pytest.raises(HotloopError) as info:
        resolve_tools(tools, drop=[])
    assert (info.value.code, info.value.param) == ("unsupported_tool", "tools[0].type")


@pytest.mark.parametrize(
    ("environment", "param"),
    [({"type": "remote"}, "tools[1].environment.type"), ("local", "tools[1].environment")],
)
def test_a_shell_environment_hotloop_does_not_know_is_refused(environment: Any, param: str) -> None:
    """`local` (an object) is the client's, a container's the server's (tests/test_hosted_shell.py); else 400."""
    with pytest.raises(HotloopError) as info:
        resolve_tools([{"type": "function", "name": "f"}, {"type": "shell", "environment": environment}])
    assert (info.value.code, info.value.param) == ("invalid_value", param)


def test_typed_tools_are_offered_as_functions() -> None:
    skill = {"name": "deploy", "description": "Ship the app.", "path": "/skills/deploy"}
    computer = {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"}
    tools: list[dict[str, Any]] = [
        {"type": "shell", "environment": {"type": "local", "skills": [skill]}},
        computer,
        {"type": "local_shell"},
    ]
    resolved = resolve_tools([*tools, {"type": "apply_patch"}])
    assert resolved.echo == [*tools, {"type": "apply_patch"}]  # echoed as sent
    shell, screen = resolved.specs[:2]
    assert [spec.kind for spec in resolved.specs] == [spec.name for spec in resolved.specs]
    assert [spec.name for spec in resolved.specs] == ["shell", "computer", "local_shell", "apply_patch"]
    assert shell.description is not None and "- deploy: Ship the app. (/skills/deploy)" in shell.description
    assert screen.description is not None and "1024x768 (linux)" in screen.description
    assert all(spec.parameters and spec.parameters["type"] == "object" for spec in resolved.specs)


# -- tool_choice ------------------------------------------------------------------------------------------------------

FUNCTION = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


def test_tool_choice_shell_forces_the_shell() -> None:
    tools = resolve_tools([FUNCTION, {"type": "shell"}])
    choice = resolve_tool_choice({"type": "shell"}, tools)
    assert (choice.mode, choice.forced, choice.echo) == ("required", "shell", {"type": "shell"})
    patch = resolve_tool_choice({"type": "apply_patch"}, resolve_tools([{"type": "apply_patch"}]))
    assert patch.forced == "apply_patch"
    for kind in ("shell", "apply_patch", "computer_use_preview"):
        with pytest.raises(HotloopError) as info:
            resolve_tool_choice({"type": kind}, tools if kind != "shell" else resolve_tools([FUNCTION]))
        assert info.value.param == "tool_choice.type"


def test_allowed_tools_tell_namespaced_tools_of_one_name_apart() -> None:
    tools = resolve_tools(
        [
            {"type": "function", "name": "search"},
            {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "search"}]},
            {"type": "namespace", "name": "b", "tools": [{"type": "function", "name": "search"}]},
            {"type": "shell"},
        ]
    )
    pick = resolve_tool_choice(
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "search", "namespace": "b"}],
        },
        tools,
    )
    assert [spec.prompt_name for spec in pick.tools.specs] == ["b.search"]
    by_prompt_name = resolve_tool_choice(
        {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "a.search"}, {"type": "shell"}],
        },
        tools,
    )
    assert [spec.prompt_name for spec in by_prompt_name.tools.specs] == ["a.search", "shell"]
    bare = resolve_tool_choice({"type": "allowed_tools", "tools": [{"type": "function", "name": "search"}]}, tools)
    assert [spec.prompt_name for spec in bare.tools.specs] == ["search"]
    forced = resolve_tool_choice({"type": "function", "name": "search", "namespace": "a"}, tools)
    assert forced.forced == "a.search"
    assert resolve_tool_choice({"type": "function", "name": "search"}, tools).forced == "search"
    assert resolve_tool_choice({"type": "function", "name": "b.search"}, tools).forced == "b.search"
    with pytest.raises(HotloopError):
        resolve_tool_choice({"type": "function", "name": "search", "namespace": "c"}, tools)


# -- pairing: an output answers a known call ----------------------------------------------------------------------


def shell_output(call_id: str) -> dict[str, Any]:
    outcome = {"type": "exit", "exit_code": 0}
    return {
        "type": "shell_call_output",
        "call_id": call_id,
        "output": [{"stdout": "x", "stderr": "", "outcome": outcome}],
    }


def test_outputs_must_answer_a_known_call() -> None:
    call = msgspec.to_builtins(BY_KIND["shell"].build("call_1", '{"commands": ["ls"]}', True))
    items = normalize_input([{"role": "user", "content": "go"}, call, shell_output("call_1")])
    assert [pair(item) for item in items] == [None, ("call", "call_1"), ("output", "call_1")]
    assert check_new_items(items, frozenset(), SECRET) == frozenset({"call_1"})  # type: ignore[arg-type]
    assert check_new_items(normalize_input([shell_output("call_1")]), frozenset({"call_1"}), SECRET)  # type: ignore[arg-type]
    unknown = [
        shell_output("call_2"),
        {"type": "apply_patch_call_output", "call_id": "call_2", "status": "completed"},
        {"type": "local_shell_call_output", "id": "call_2", "output": "{}"},
        {
            "type": "computer_call_output",
            "call_id": "call_2",
            "output": {"type": "computer_screenshot", "image_url": png_data_url()},
        },
    ]
    for raw in unknown:
        with pytest.raises(HotloopError) as info:
            check_new_items(normalize_input([call, raw]), frozenset(), SECRET)  # type: ignore[arg-type]
        assert (info.value.code, info.value.param) == ("function_call_not_found", "input")


def test_local_shell_output_pairs_by_id_or_call_id() -> None:
    call = msgspec.to_builtins(BY_KIND["local_shell"].build("call_7", '{"command": ["ls"]}', True))
    for answer in ({"id": "call_7"}, {"call_id": "call_7"}, {"call_id": "call_7", "id": "lsho_1"}):
        raw = {"type": "local_shell_call_output", "output": '{"stdout": ""}', **answer}
        [item] = normalize_input([raw])
        assert pair(item) == ("output", "call_7")
        check_new_items(normalize_input([call, raw]), frozenset(), SECRET)  # type: ignore[arg-type]
        # its `id` is the call's when it came with `call_id` only (openai-python requires one), never made up
        assert isinstance(item, LocalShellCallOutput) and item.id == answer.get("id", "call_7")
        exact(
            response_input_item.LocalShellCallOutput,
            {k: v for k, v in msgspec.to_builtins(item).items() if k != "call_id"},
        )


# -- the builder: a typed call sent whole ---------------------------------------------------------------------------


def test_builder_sends_a_shell_call_whole_and_replays_it() -> None:
    builder = ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"), typed=build_call)
    events = [builder.created(), builder.in_progress()]
    assert builder.tool_call_start("shell", "shell", None) == []
    for piece in ('{"comm', 'ands": ["ls -la",', ' "echo hi"]}'):
        assert builder.tool_call_delta(piece) == []
    events += builder.tool_call_end()
    events += builder.finish("completed", Usage.of(10, 0, 6))
    raw = [openai_typed("event", json.loads(event.data)).model_dump(exclude_unset=True) for event in events]
    assert [event["sequence_number"] for event in raw] == list(range(len(raw)))
    types = [event["type"] for event in raw]
    per_command = [
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
    ]
    middle = ["response.output_item.added", *per_command, *per_command, "response.output_item.done"]
    assert types == ["response.created", "response.in_progress", *middle, "response.completed"]
    added, done = raw[2]["item"], raw[-2]["item"]
    assert added == done and done["type"] == "shell_call" and done["status"] == "completed"
    assert done["action"] == {"commands": ["ls -la", "echo hi"]} and done["call_id"].startswith("call_")
    assert [(e["command_index"], e.get("command"), e.get("delta")) for e in raw[3:9]] == [
        (0, "", None),
        (0, None, "ls -la"),
        (0, "ls -la", None),
        (1, "", None),
        (1, None, "echo hi"),
        (1, "echo hi", None),
    ]
    assert all(e["output_index"] == 0 for e in raw[2:-1])
    assert raw[-1]["response"]["output"] == [done]
    replayed = [json.loads(event.data) for event in replay_events(builder.response)]
    assert [event["type"] for event in replayed] == types
    assert [event["sequence_number"] for event in replayed] == list(range(len(types)))
    assert replayed[-2]["item"] == done


def test_builder_typed_call_cut_off() -> None:
    builder = ResponseBuilder(Response(id="resp_x", created_at=1, model="hotloop-sim"), typed=build_call)
    builder.tool_call_start("apply_patch", "apply_patch", None)
    builder.tool_call_delta('{"type": "create_file", "path": "a"')
    events = builder.finish("incomplete", Usage.of(5, 0, 16), reason="max_output_tokens")
    raw = [json.loads(event.data) for event in events]
    assert [event["type"] for event in raw] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert raw[1]["item"]["status"] == "in_progress" and raw[1]["item"]["type"] == "apply_patch_call"
    openai_typed("event", raw[-1])


# -- compaction: typed items carried --------------------------------------------------------------------------------


def test_a_compaction_carries_shell_items() -> None:
    call = BY_KIND["shell"].build("call_1", '{"commands": ["ls"]}', True)
    [output] = normalize_input([shell_output("call_1")])
    user = Message(role="user", content=[InputText(text="go")])
    tail = kept_tail([user, call], [output])  # type: ignore[list-item]
    assert tail == [call, output]
    body = carries(Compaction(encrypted_content=seal(carried("summary", [user], tail, 1), SECRET)))
    assert body is not None and body.tail == [call, output] and body.calls == 1
    assert isinstance(body.tail[0], ShellCall) and isinstance(body.tail[1], ShellCallOutput)
