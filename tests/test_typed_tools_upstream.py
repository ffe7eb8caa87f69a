"""Typed client tools (`shell`, `apply_patch`: hotloop/tools/) on the upstream backends, end to end: clients →
hotloop → a real `hotloop sim-engine` process, through `openai-chat`, `tokens` in each dialect (vLLM, SGLang,
llama.cpp) and gpt-oss's harmony format on `tokens`.

The engine only ever sees a function (chat `tools`, or the tool as the rendered prompt offers it) and writes a call
whose arguments follow its schema; hotloop hands that call out as the typed item (`shell_call`,
`apply_patch_call`), valid as openai-python types it. The client's `shell_call_output` / `apply_patch_call_output`
then reaches the engine as a tool message (chat) or the rendered tool output (token ids), after the call exactly as
hotloop renders it, so the engine's prefix cache holds the whole previous prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall

from conftest import RunningServer, start_server
from hotloop.backends.upstream.chat import OpenAIChatBackend
from hotloop.backends.upstream.tokens import TokensBackend
from hotloop.chat import harmony
from hotloop.config import Upstream
from hotloop.simengine.requests import tools_in_prompt
from hotloop.tools.apply_patch import APPLY_PATCH, OPERATIONS
from hotloop.tools.shell import SHELL, shell_command
from http_support import output_text
from openai_types_support import openai_typed
from render_support import harmony_tokenizer_file
from simengine_support import SimEngineProcess

MODELS = ("chat", "vllm", "sglang", "llamacpp")  # openai-chat, then `tokens` in each dialect
TOOLS = ("shell", "apply_patch")
STDOUT = "hotloop-sim-1\n"
# What the model reads as each tool's result (Shell / ApplyPatch `output_content`).
READS = {"shell": "hotloop-sim-1\n(exit code 0)", "apply_patch": "completed: patched"}
JSON = dict[str, Any]
ENGINE = {"tps": 5000, "prefill_us_per_token": 1, "tool_calls": 1, "parallel_calls": 1}  # one call, then text


def _answer(tool: str, call_id: str) -> dict[str, Any]:
    """The client's output item for the call: it ran the command, or applied the patch."""
    if tool == "shell":
        outcome = {"type": "exit", "exit_code": 0}
        output = [{"stdout": STDOUT, "stderr": "", "outcome": outcome}]
        return {"type": "shell_call_output", "call_id": call_id, "output": output}
    return {"type": "apply_patch_call_output", "call_id": call_id, "status": "completed", "output": "patched"}


def _check_call(tool: str, item: dict[str, Any]) -> dict[str, Any]:
    """The typed item, valid as openai-python's type with a runnable action; returns its arguments as the model
    sees them."""
    openai_typed("output", item)
    if tool == "shell":
        shell = ResponseFunctionShellToolCall.model_validate(item)
        assert shell.status == "completed" and shell.action.commands == [shell_command(1)], item
        return {"commands": shell.action.commands}
    patch = ResponseApplyPatchToolCall.model_validate(item)
    operation = patch.operation
    assert patch.status == "completed" and operation.type in OPERATIONS and operation.path, item
    assert (operation.type == "delete_file") == (getattr(operation, "diff", None) is None), item
    written = operation.model_dump(exclude={"type", "path"})  # a diff, but for delete_file
    return {"type": operation.type, "path": operation.path, **written}


class Sent:
    """The bodies hotloop sent the engine (backend `body`), newest last."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bodies: list[dict[str, Any]] = []
        for cls in (OpenAIChatBackend, TokensBackend):
            monkeypatch.setattr(cls, "body", self._recording(cls.body))

    def _recording(self, body: Any) -> Any:
        def recording(backend: Any, request: Any) -> dict[str, Any]:
            sent: dict[str, Any] = body(backend, request)
            self.bodies.append(sent)
            return sent

        return recording

    def prompt_text(self, server: RunningServer, model: str) -> str:
        """The last token-ID prompt, decoded with the model's tokenizer: what the engine read."""
        body = self.bodies[-1]
        ids = body.get("input_ids", body.get("prompt"))
        ids = msgspec.json.decode(bytes(ids)) if isinstance(ids, msgspec.Raw) else ids
        text: str = server.service.models.resolve(model).chat.tokenizer.decode(ids)
        return text

    def messages(self) -> list[dict[str, Any]]:
        """The last chat request's messages, as JSON."""
        messages: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(self.bodies[-1]["messages"]))
        return messages


@pytest.fixture()
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sent]:
    yield Sent(monkeypatch)


def _streamed(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """A streamed create's final response; every event valid as openai-python types it, in sequence, the done
    items the response's output. (Open Responses' schema, tests/schema.py, has no typed tools or items.)"""
    reply = http.post("/responses", json={**body, "stream": True})
    assert reply.status_code == 200, reply.text
    blocks = [block for block in reply.text.split("\n\n") if block.strip()]
    assert blocks.pop() == "data: [DONE]"
    events = [json.loads(block.split("\ndata: ", 1)[1]) for block in blocks]
    for event in events:
        if not event["type"].startswith("hotloop:"):
            openai_typed("event", event)
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    final: dict[str, Any] = events[-1]["response"]
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    assert events[-1]["type"] == "response.completed" and final["output"] == done, events
    return final


def _round_trip(
    server: RunningServer, engine: SimEngineProcess, model: str, tool: str
) -> tuple[JSON, JSON, JSON, list[JSON]]:
    """A streamed create offering `tool` → its typed call; then the client's output with `previous_response_id`
    → the engine's text answer. Returns (the call, its arguments, the answer, the engine's request records)."""
    engine.reset()
    body = {"model": model, "tools": [{"type": tool}], "instructions": "Be brief."}
    with server.http() as http:
        first = _streamed(http, {**body, "input": "Say hello into a file."})
        assert first["status"] == "completed" and len(first["output"]) >= 1, first
        call = first["output"][-1]
        assert call["type"] == f"{tool}_call" and all(i["type"] == "reasoning" for i in first["output"][:-1]), first
        arguments = _check_call(tool, call)
        outputs = [_answer(tool, call["call_id"])]
        reply = http.post("/responses", json={**body, "previous_response_id": first["id"], "input": outputs})
    answer = reply.json()
    assert reply.status_code == 200 and answer["status"] == "completed", answer
    # One call in the conversation: the engine's policy answers with text, so it read the call back.
    assert output_text(answer) and not [item for item in answer["output"] if item["type"].endswith("_call")]
    records = engine.http.get("/stats/requests", params={"after": 0}).json()["requests"]
    assert len(records) == 2, records
    return call, arguments, answer, records


# -- openai-chat and tokens (vllm / sglang / llamacpp) ----------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[SimEngineProcess]:
    process = SimEngineProcess(**ENGINE).wait_ready()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def hotloop(engine: SimEngineProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = f"http://127.0.0.1:{engine.port}"
    upstreams = {
        "chat": Upstream(url=engine.base_url, read_timeout_s=30),
        "vllm": Upstream(url=engine.base_url, backend="tokens", dialect="vllm", read_timeout_s=30),
        "sglang": Upstream(url=root, backend="tokens", dialect="sglang", read_timeout_s=30),
        "llamacpp": Upstream(url=root, backend="tokens", dialect="llamacpp", read_timeout_s=30),
    }
    running = start_server(
        tmp_path_factory.mktemp("typed"), models=list(MODELS), default_model="chat", upstreams=upstreams
    )
    yield running
    running.stop()


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("model", MODELS)
def test_a_typed_call_and_its_output_round_trip_through_the_engine(
    hotloop: RunningServer, engine: SimEngineProcess, sent: Sent, model: str, tool: str
) -> None:
    call, arguments, _, (before, after) = _round_trip(hotloop, engine, model, tool)
    if model == "chat":
        # The call went back as the assistant's function call, the client's output as a `tool` message after it.
        *_, assistant, result = sent.messages()
        [function] = assistant["tool_calls"]
        assert assistant["role"] == "assistant" and function["id"] == call["call_id"]
        assert function["function"]["name"] == tool and json.loads(function["function"]["arguments"]) == arguments
        assert result == {"role": "tool", "tool_call_id": call["call_id"], "content": READS[tool]}
        assert after["cached_tokens"] >= before["prompt_tokens"]  # the first prompt is a prefix of the second
        return
    # Token ids: the call as a `<tool_call>` block of the assistant turn, the output as the tool's turn after it.
    text = sent.prompt_text(hotloop, model)
    block = "<tool_call>\n" + json.dumps({"name": tool, "arguments": arguments}) + "\n</tool_call><|im_end|>\n"
    assert text.endswith(f"{block}<|im_start|>tool\n{READS[tool]}<|im_end|>\n<|im_start|>assistant\n"), text[-600:]
    # …rendered back (the template writes the arguments as parsed JSON) as the engine wrote it: its prefix cache
    # holds the first prompt and all it generated.
    assert after["cached_tokens"] >= before["prompt_tokens"] + before["output_ids"], (before, after)


# -- harmony (gpt-oss) on tokens ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def harmony_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimEngineProcess, Path]]:
    tokenizer = harmony_tokenizer_file(tmp_path_factory.mktemp("harmony"))
    flags = {**ENGINE, "output_format": "harmony", "tokenizer": tokenizer, "reasoning_tokens": 4}
    process = SimEngineProcess(**flags).wait_ready()
    yield process, tokenizer
    process.stop()


@pytest.fixture(scope="module")
def harmony_server(
    harmony_engine: tuple[SimEngineProcess, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    engine, tokenizer = harmony_engine
    common: dict[str, Any] = {"backend": "tokens", "tokenizer": str(tokenizer), "reasoning_parser": "harmony"}
    upstreams = {
        "vllm": Upstream(url=engine.base_url, dialect="vllm", read_timeout_s=30, **common),
        "sglang": Upstream(url=f"http://127.0.0.1:{engine.port}", dialect="sglang", read_timeout_s=30, **common),
    }
    data = tmp_path_factory.mktemp("typed-harmony")
    running = start_server(data, models=list(upstreams), default_model="vllm", upstreams=upstreams)
    yield running
    running.stop()


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_typed_call_round_trips_in_harmony(
    harmony_server: RunningServer,
    harmony_engine: tuple[SimEngineProcess, Path],
    sent: Sent,
    dialect: str,
    tool: str,
) -> None:
    """gpt-oss: the tool offered in the `functions` namespace, the call on `commentary` after the reasoning on
    `analysis`, the client's output as the tool's message to the assistant."""
    _, arguments, answer, (before, after) = _round_trip(harmony_server, harmony_engine[0], dialect, tool)
    assert answer["output"][0]["type"] == "reasoning"
    text = sent.prompt_text(harmony_server, dialect)
    written = json.dumps(arguments)  # as json.dumps writes by default, as the model (hotloop-sim) wrote it
    head = f"<|start|>assistant<|channel|>commentary to=functions.{tool} <|constrain|>json<|message|>{written}<|call|>"
    tail = (
        f"<|start|>functions.{tool} to=assistant<|channel|>commentary<|message|>{READS[tool]}<|end|><|start|>assistant"
    )
    assert text.endswith(head + tail), text[-600:]
    # The previous prompt is cached. The typed item keeps the action, not the text: the call renders from it as
    # json.dumps writes it by default, which is what most models write, but not always byte for byte (an engine
    # that fills every property, as sim-engine does, writes fields the action leaves out).
    assert after["cached_tokens"] >= before["prompt_tokens"], (before, after)


@pytest.mark.fast
def test_the_engine_reads_a_harmony_prompts_typed_tools_with_their_types() -> None:
    """sim-engine reconstructs the tools from harmony's TypeScript (`string[]`, `"a" | "b"`): its arguments then
    keep to the schema, `commands` a list and `type` one of apply_patch's operations, not a random word."""
    specs = [tool.declare({"type": tool.kind}, "tools[0]") for tool in (SHELL, APPLY_PATCH)]
    found, calls = tools_in_prompt(harmony.system_message(None, specs)["content"])
    assert calls == 0 and [spec.name for spec in found] == ["shell", "apply_patch"]
    shell, patch = (spec.parameters or {} for spec in found)
    assert shell["properties"] == {
        "commands": {"type": "array", "items": {"type": "string"}},
        "timeout_ms": {"type": "number"},  # harmony writes integers as `number`
    }
    assert patch["properties"]["type"] == {"type": "string", "enum": list(OPERATIONS)}
    assert (shell["required"], patch["required"]) == (["commands"], ["type", "path"])
