"""`code_interpreter` end to end (docs/code-interpreter.md): real servers serving hotloop-sim, real sandboxes
(bubblewrap, as root: tests/test_sandbox.py's fixture installs it where missing), driven by unmodified clients:
openai-python over HTTP (JSON, SSE and its replay), WebSocket mode, the Containers API, and the OpenAI Agents SDK's
`CodeInterpreterTool`. hotloop-sim runs exactly the request's `metadata["sim_code"]` when set (else a program from
the user's words), then answers "The code printed: <its first line>"; hostile programs go through it too, each
contained, and the server goes on answering."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, CodeInterpreterTool, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.items import MessageOutputItem, ToolCallItem
from openai import AsyncOpenAI
from openai.types.responses import Response, ResponseCodeInterpreterToolCall, ResponseOutputMessage
from openai.types.responses.response_code_interpreter_tool_call import OutputLogs

from conftest import RunningServer, start_server, stored_counts
from http_support import check_sequence, parse_sse
from openai_types_support import openai_typed
from test_http_replay import assert_same_stream
from test_sandbox import available  # noqa: F401  (the fixture: root, bubblewrap installed, the sandbox runs here)
from websocket_sdk_support import run_turn, ws_client
from wsutil import TERMINAL, WS

set_tracing_disabled(True)  # no trace export: the SDK would otherwise try to reach api.openai.com
JSON = dict[str, Any]
KEYS = ["key-a", "key-b"]
AUTO: Any = {"type": "code_interpreter", "container": {"type": "auto"}}
OUTPUTS: Any = ["code_interpreter_call.outputs"]
SUM = "What is the sum of the first 10 numbers?"
# The events of one code_interpreter_call, in order (docs/code-interpreter.md, "The call").
CALL_EVENTS = [
    "response.output_item.added",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.output_item.done",
]
FRESH = "A fresh Python kernel: the previous one stopped"


@pytest.fixture(scope="module")
def server(available: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:  # noqa: F811
    running = start_server(tmp_path_factory.mktemp("code"), models=["hotloop-sim"], api_keys=KEYS)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def hostile(available: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:  # noqa: F811
    """A server whose runs end after 5 s (`code_timeout_s`), for the endless loop: long enough that the memory hog
    meets its memory bound first on a loaded CI machine (at 2 s, touching its first GiB there took longer once)."""
    running = start_server(tmp_path_factory.mktemp("code-hostile"), models=["hotloop-sim"], code_timeout_s=5.0)
    yield running
    running.stop()


def _client(server: RunningServer, key: str = "key-a") -> openai.OpenAI:
    return server.client(api_key=key, timeout=60)


def _run(client: openai.OpenAI, code: str | None = None, **body: Any) -> Response:
    """A response whose model runs `code` (hotloop-sim: exactly, as `sim_code`; None: a program of its own)."""
    metadata = {"sim_code": code} if code is not None else {}
    body = {"model": "hotloop-sim", "input": "Run it.", "tools": [AUTO], "metadata": metadata, **body}
    return client.responses.create(**body)


def _call(response: Response) -> tuple[ResponseCodeInterpreterToolCall, str]:
    """The response's code run, and the answer hotloop-sim gave after reading its output."""
    assert [item.type for item in response.output] == ["code_interpreter_call", "message"], response.output
    call, message = response.output
    assert isinstance(call, ResponseCodeInterpreterToolCall) and isinstance(message, ResponseOutputMessage)
    assert response.status == "completed" and message.content[0].type == "output_text"
    return call, message.content[0].text


def _logs(call: ResponseCodeInterpreterToolCall) -> str:
    assert call.outputs is not None, "outputs not included"
    return "\n".join(output.logs for output in call.outputs if isinstance(output, OutputLogs))


# -- in a response: an auto container, its outputs, a continuation ------------------------------------------------


def test_an_auto_container_runs_the_code_and_a_continuation_reuses_it(server: RunningServer) -> None:
    client = _client(server)
    response = _run(client, input=SUM, include=OUTPUTS)
    call, answer = _call(response)
    assert (call.code, call.status, call.outputs) == (
        "print(sum(range(10)))",
        "completed",
        [OutputLogs(type="logs", logs="45")],
    )
    assert call.container_id.startswith("cntr_") and answer == "The code printed: 45"
    assert response.tools[0].model_dump(exclude_none=True) == AUTO  # echoed as sent
    made = client.containers.retrieve(call.container_id)  # the key's own, as the Containers API shows it
    assert (made.name, made.memory_limit) == ("code_interpreter", "1g")

    # Without `include` the outputs stay on the server: null here, shown by a retrieve that includes them.
    first = _run(client, "x = 41\nprint('set')")
    call, answer = _call(first)
    assert call.status == "completed" and call.outputs is None and answer == "The code printed: set"
    assert client.responses.retrieve(first.id).output[0].outputs is None  # type: ignore[union-attr]
    shown = client.responses.retrieve(first.id, include=OUTPUTS).output[0]
    assert isinstance(shown, ResponseCodeInterpreterToolCall) and shown.outputs == [OutputLogs(type="logs", logs="set")]
    assert call.container_id not in (response.output[0].container_id, "")  # type: ignore[union-attr]

    # A continuation runs in the same container, on the same kernel: the variable is still there.
    second = _run(client, "x + 1", previous_response_id=first.id, include=OUTPUTS)
    follow, answer = _call(second)
    assert follow.container_id == call.container_id and follow.outputs == [OutputLogs(type="logs", logs="42")]
    assert answer == "The code printed: 42"


def test_an_auto_container_gone_since_gets_a_new_one(server: RunningServer) -> None:
    """The context's container was deleted (or expired): `auto` makes a new one rather than failing the call."""
    client = _client(server)
    first = _run(client, "print('one')")
    gone = _call(first)[0].container_id
    client.containers.delete(gone)
    follow, answer = _call(_run(client, "print('two')", previous_response_id=first.id))
    assert follow.status == "completed" and follow.container_id not in (gone, "") and answer == "The code printed: two"


def test_the_answer_cites_the_file_the_code_wrote(server: RunningServer) -> None:
    """hotloop-sim's answer quotes the run's first line, which names the file: a `container_file_citation`."""
    client = _client(server)
    code = "open('/mnt/data/report.txt', 'w').write('ok')\nprint('wrote /mnt/data/report.txt')"
    response = _run(client, code)
    call, answer = _call(response)
    [file] = client.containers.files.list(call.container_id).data
    [citation] = response.output[1].content[0].annotations  # type: ignore[union-attr]
    assert citation.type == "container_file_citation"
    assert (citation.container_id, citation.file_id, citation.filename) == (call.container_id, file.id, "report.txt")
    assert answer[citation.start_index : citation.end_index] == "/mnt/data/report.txt"


def test_tool_choice_makes_the_model_run_code(server: RunningServer) -> None:
    response = _run(_client(server), input=SUM, tool_choice={"type": "code_interpreter"}, include=OUTPUTS)
    call, _ = _call(response)
    assert call.status == "completed" and _logs(call) == "45"
    assert response.tool_choice.type == "code_interpreter"  # type: ignore[union-attr]


# -- streamed, and replayed --------------------------------------------------------------------------------------


def test_the_stream_carries_the_calls_events_and_its_replay_the_same(server: RunningServer) -> None:
    code = "print(6 * 7)"
    for include in ([], ["code_interpreter_call.outputs"]):
        body = {"model": "hotloop-sim", "input": "Go.", "tools": [AUTO], "metadata": {"sim_code": code}}
        with server.http("key-a") as http:
            live = parse_sse(http.post("/responses", json={**body, "include": include, "stream": True}).text)
            params: dict[str, Any] = {"stream": "true", "include[]": include}
            replayed = parse_sse(http.get(f"/responses/{live[-1]['response']['id']}", params=params).text)
        final = check_sequence(live)  # each event checked against the Open Responses schema by parse_sse
        typed = [openai_typed("event", event) for event in live]  # and against openai-python's ResponseStreamEvent
        assert [event["type"] for event in live if event.get("output_index") == 0] == CALL_EVENTS
        by_type = {event.type: event for event in typed if getattr(event, "output_index", None) == 0}
        added, done = by_type["response.output_item.added"].item, by_type["response.output_item.done"].item
        assert (added.status, added.code, added.outputs) == ("in_progress", "", None)
        assert by_type["response.code_interpreter_call_code.delta"].delta == code
        assert by_type["response.code_interpreter_call_code.done"].code == code
        assert done.status == "completed" and done.code == code and done.container_id.startswith("cntr_")
        assert done.outputs == ([OutputLogs(type="logs", logs="42")] if include else None)
        assert final["output"][1]["content"][0]["text"] == "The code printed: 42"
        assert_same_stream(live, replayed)  # the same event types, the same items

    # openai-python's own stream helper folds the same events into the final response.
    with _client(server).responses.stream(model="hotloop-sim", input=SUM, tools=[AUTO], include=OUTPUTS) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()
    assert [kind for kind in kinds if "code_interpreter" in kind] == [kind for kind in CALL_EVENTS if "code_" in kind]
    assert _logs(_call(streamed)[0]) == "45"


# -- a named container, its files ----------------------------------------------------------------------------------


def test_a_named_containers_files_are_read_and_written_by_the_code(server: RunningServer) -> None:
    client = _client(server)
    container = client.containers.create(name="analysis")
    uploaded = client.containers.files.create(container.id, file=("prices.csv", b"item,price\ntea,3\ncake,4\n"))
    assert uploaded.path == "/mnt/data/prices.csv"
    code = (
        "rows = open('/mnt/data/prices.csv').read().splitlines()[1:]\n"
        "total = sum(int(row.split(',')[1]) for row in rows)\n"
        "open('/mnt/data/total.txt', 'w').write(f'total={total}')\n"
        "print(rows[0]); print(total)"
    )
    tool = {"type": "code_interpreter", "container": container.id}
    response = _run(client, code, tools=[tool], include=OUTPUTS)
    call, answer = _call(response)
    assert call.status == "completed" and call.container_id == container.id
    assert _logs(call) == "tea,3\n7" and answer == "The code printed: tea,3"
    assert response.tools[0].model_dump(exclude_none=True) == tool
    files = {file.path: file for file in client.containers.files.list(container.id)}
    assert set(files) == {"/mnt/data/prices.csv", "/mnt/data/total.txt"}
    written = files["/mnt/data/total.txt"]
    assert (written.source, written.bytes, files["/mnt/data/prices.csv"].source) == ("assistant", 7, "user")
    assert client.containers.files.content.retrieve(written.id, container_id=container.id).content == b"total=7"


def test_another_keys_container_fails_the_call_and_reveals_nothing(server: RunningServer) -> None:
    owner, other = _client(server, "key-a"), _client(server, "key-b")
    container = owner.containers.create(name="a-private-name")
    owner.containers.files.create(container.id, file=("secret.txt", b"a's secret"))
    before = owner.containers.retrieve(container.id)
    code = "print(open('/mnt/data/secret.txt').read())\nopen('/mnt/data/planted.txt', 'w').write('b was here')"
    tool = {"type": "code_interpreter", "container": container.id}
    call, answer = _call(_run(other, code, tools=[tool], include=OUTPUTS))
    assert call.status == "failed" and call.container_id == container.id  # the id it sent, nothing more
    logs = _logs(call)
    assert logs.startswith("No container found") and answer == f"The code printed: {logs.splitlines()[0]}"
    for revealed in ("a's secret", "a-private-name", "secret.txt"):
        assert revealed not in logs
    assert container.id not in [c.id for c in other.containers.list()]
    with pytest.raises(openai.NotFoundError):
        other.containers.files.list(container.id)
    assert [file.path for file in owner.containers.files.list(container.id)] == ["/mnt/data/secret.txt"]
    assert owner.containers.retrieve(container.id).last_active_at == before.last_active_at  # never opened


# -- hostile code, contained -------------------------------------------------------------------------------------

READ_HOST = """
import os
for path in ({secret!r}, "/etc/shadow"):
    try:
        print(path, "read", open(path, "rb").read().hex())
    except OSError as error:
        print(path, type(error).__name__)
print("data dir", os.path.exists({data_dir!r}))
"""
PORTS = """
import socket
for port in (6379, 5432):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        print(port, "connected")
    except OSError as error:
        print(port, type(error).__name__)
"""
# (program, the status its call ends with, what its logs say, whether the next run starts a fresh kernel)
HOSTILE = {
    "fork bomb": ("import os\nwhile True: os.fork()", "completed", "BlockingIOError", False),
    "memory hog": (
        "hog = bytearray(2 * 1024**3)",
        "failed",
        "The kernel was killed: the container reached its memory limit (1024 MiB)",
        True,
    ),
    "endless loop": ("while True: pass", "failed", "The call ran past its 5 s.", True),
    "host files": (READ_HOST, "completed", "/etc/shadow FileNotFoundError", False),
    "redis and postgres": (PORTS, "completed", "6379 ConnectionRefusedError\n5432 ConnectionRefusedError", False),
    "kernel kills itself": (
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        "failed",
        "The kernel was killed by signal 9 (SIGKILL)",
        True,
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_code_is_contained_and_the_server_goes_on(hostile: RunningServer, case: str) -> None:
    program, status, says, fresh = HOSTILE[case]
    data_dir = hostile.settings.data_dir
    secret = Path(data_dir) / "secret.key"
    assert secret.is_file()
    code = program.format(secret=str(secret), data_dir=data_dir) if case == "host files" else program
    client = hostile.client(timeout=60)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_run, client, code, include=OUTPUTS)
        started = time.monotonic()
        plain = client.responses.create(model="hotloop-sim", input="Hello?")  # meanwhile, or right after
        assert plain.status == "completed" and time.monotonic() - started < 1.5
        response = running.result(timeout=30)
    call, answer = _call(response)
    logs = _logs(call)
    assert call.status == status and says in logs, logs
    assert answer.startswith("The code printed: ")
    if case == "host files":
        assert "read" not in logs.split() and secret.read_bytes().hex() not in logs and "data dir False" in logs
    if case == "redis and postgres":
        assert "connected" not in logs
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the server's process forks, as ever
    # The container runs the next code: on a fresh kernel, saying so, where the last one was lost.
    after = _run(client, "print('after')", previous_response_id=response.id, include=OUTPUTS)
    next_call, _ = _call(after)
    assert next_call.status == "completed" and next_call.container_id == call.container_id
    assert _logs(next_call).endswith("after") and (FRESH in _logs(next_call)) is fresh


def test_a_failed_run_streams_no_completed_event(hostile: RunningServer) -> None:
    body = {"model": "hotloop-sim", "input": "Go.", "tools": [AUTO], "metadata": {"sim_code": "while True: pass"}}
    with hostile.http() as http:
        events = parse_sse(http.post("/responses", json={**body, "stream": True}).text)
    final = check_sequence(events)
    for event in events:
        openai_typed("event", event)
    expected = [kind for kind in CALL_EVENTS if kind != "response.code_interpreter_call.completed"]
    assert [event["type"] for event in events if event.get("output_index") == 0] == expected
    assert final["status"] == "completed" and final["output"][0]["status"] == "failed"
    assert final["output"][1]["content"][0]["text"].startswith("The code printed: The call ran past its 5 s.")


# -- at the door ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        ({"type": "code_interpreter"}, "tools[0].container", "invalid_type"),
        ({"type": "code_interpreter", "container": 7}, "tools[0].container", "invalid_type"),
        ({"type": "code_interpreter", "container": "box-1"}, "tools[0].container", None),
        ({"type": "code_interpreter", "container": {"type": "named"}}, "tools[0].container", "invalid_value"),
        (
            {"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "2g"}},
            "tools[0].container.memory_limit",
            None,
        ),
        (
            {"type": "code_interpreter", "container": {"type": "auto", "file_ids": "file-1"}},
            "tools[0].container.file_ids",
            "invalid_type",
        ),
        ({**AUTO, "timeout": 5}, "tools[0].timeout", "unknown_parameter"),
        (
            {"type": "code_interpreter", "container": {"type": "auto", "gpu": True}},
            "tools[0].container.gpu",
            "unknown_parameter",
        ),
        (
            {
                "type": "code_interpreter",
                "container": {
                    "type": "auto",
                    "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org", "not a domain"]},
                },
            },
            "tools[0].container.network_policy.allowed_domains[1]",
            None,
        ),
        ([AUTO, AUTO], "tools[1].type", None),
    ],
)
def test_a_bad_tool_is_refused_naming_its_field(
    server: RunningServer, tool: JSON | list[JSON], param: str, code: str | None
) -> None:
    before = stored_counts(server)
    tools: Any = tool if isinstance(tool, list) else [tool]
    with pytest.raises(openai.BadRequestError) as refused:
        _client(server).responses.create(model="hotloop-sim", input="Hi.", tools=tools)
    assert refused.value.param == param, refused.value.body
    if code is not None:
        assert refused.value.code == code, refused.value.body
    assert stored_counts(server) == before


def test_a_server_that_runs_no_code_refuses_the_tool_by_name(tmp_path: Path) -> None:
    running = start_server(tmp_path, models=["hotloop-sim"], code_interpreter=False)
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            running.client().responses.create(model="hotloop-sim", input=SUM, tools=[AUTO])
        assert (refused.value.code, refused.value.param) == ("unsupported_tool", "tools[0].type")
        assert "its code_interpreter setting is off" in refused.value.message
        assert stored_counts(running) == (0, 0)
    finally:
        running.stop()


# -- WebSocket mode and the Agents SDK -----------------------------------------------------------------------------


def test_websocket_mode_runs_code_and_continues_in_the_container(server: RunningServer) -> None:
    with ws_client(server, api_key="key-a").responses.connect() as conn:
        body = {"model": "hotloop-sim", "tools": [AUTO], "include": OUTPUTS, "store": False}
        response, events = run_turn(conn, **body, input="Go.", metadata={"sim_code": "x = 'kept'\nprint(len(x))"})
        call, answer = _call(response)
        assert call.status == "completed" and _logs(call) == "4" and answer == "The code printed: 4"
        kinds = [event.type for event in events if getattr(event, "output_index", None) == 0]
        assert kinds == CALL_EVENTS
        follow, _ = run_turn(conn, **body, input="Again.", previous_response_id=response.id, metadata={"sim_code": "x"})
        again, _ = _call(follow)
        assert again.container_id == call.container_id and _logs(again) == "'kept'"


def test_a_steer_interrupts_the_run_under_way_and_the_kernel_keeps_its_variables(server: RunningServer) -> None:
    """A steered run is interrupted at once (a KeyboardInterrupt in its code) and ends `incomplete`, showing what it
    printed; the successor,
    which hotloop-sim has run the same code again, is interrupted by the socket's close; the kernel lives on, its
    variables with it (no fresh kernel's notice)."""
    client = _client(server)
    container = client.containers.create(name="steered")
    tool = {"type": "code_interpreter", "container": container.id}
    _run(client, "x = 41\nprint('set')", tools=[tool])
    waiting = "import time\nprint('waiting', flush=True)\nfor _ in range(300):\n    time.sleep(0.1)"
    metadata = {"sim_code": waiting}
    body = {"model": "hotloop-sim", "input": "Wait.", "tools": [tool], "store": False, "metadata": metadata}
    body["include"] = OUTPUTS
    with WS(server.ws_url, api_key="key-a") as ws:
        ws.create(**body)
        frames = [ws.recv()]
        while frames[-1]["type"] != "response.code_interpreter_call.interpreting":
            frames.append(ws.recv(timeout=20))
        time.sleep(0.3)  # the code is in its loop
        started = time.monotonic()
        ws.send({"type": "response.steer", "previous_response_id": frames[0]["response"]["id"], "input": "Stop."})
        while frames[-1]["type"] not in TERMINAL:
            frames.append(ws.recv(timeout=10))
        assert time.monotonic() - started < 3
        steered = frames[-1]["response"]
        assert steered["status"] == "incomplete" and steered["incomplete_details"] == {"reason": "steered"}
        [call] = steered["output"]
        assert (call["type"], call["status"]) == ("code_interpreter_call", "incomplete")
        logs = "\n".join(output["logs"] for output in call["outputs"])  # what it printed, then why it stopped
        assert logs.startswith("waiting") and "KeyboardInterrupt" in logs
        assert logs.endswith("The run was stopped: the response was steered.")
        while ws.recv(timeout=20)["type"] != "response.code_interpreter_call.interpreting":  # the successor's run
            pass
    follow = _run(client, "x + 1", tools=[tool], include=OUTPUTS)  # waits for the successor's run to be interrupted
    call, answer = _call(follow)
    assert call.status == "completed" and _logs(call) == "42" and answer == "The code printed: 42"


def test_the_agents_sdk_code_interpreter_tool(server: RunningServer) -> None:
    async def run() -> None:
        client = AsyncOpenAI(base_url=server.base_url, api_key="key-a", max_retries=0)
        agent = Agent(
            name="analyst",
            instructions="Compute with Python.",
            model=OpenAIResponsesModel(model="hotloop-sim", openai_client=client),
            tools=[CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": {"type": "auto"}})],
        )
        result = await Runner.run(agent, SUM)
        calls = [item.raw_item for item in result.new_items if isinstance(item, ToolCallItem)]
        assert len(calls) == 1 and isinstance(calls[0], ResponseCodeInterpreterToolCall)
        assert calls[0].status == "completed" and calls[0].container_id.startswith("cntr_")
        assert calls[0].code == "print(sum(range(10)))"
        assert [type(item) for item in result.new_items] == [ToolCallItem, MessageOutputItem]
        assert result.final_output == "The code printed: 45"
        await client.close()

    asyncio.run(run())
