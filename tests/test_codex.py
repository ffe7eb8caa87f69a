"""End to end: the real Codex CLI (`codex exec`, pinned in tests/codex/package.json) runs hotloop-sim's commands.

The test installs Codex into tests/codex/node_modules with npm when it is missing (the npm registry must be reachable
the first time). Each run starts its own server with `sim_tool_calls=2` and gives Codex the README's `config.toml` (its
default tool set: function, `namespace` and `web_search` tools; hotloop leaves web_search out and counts it, setting
`drop_tool_types`), once with `supports_websockets = true` and once false. hotloop-sim prefers Codex's shell tool
(`exec_command`, a `cmd` property) and fills it with a real command, so Codex executes two commands before the sim
answers with text. The test checks that they ran (Codex's `command_execution` events, the marker files in its working
directory, their output in the `function_call_output` items Codex sends back), that every request came over the
configured transport, and that Codex fetched and accepted hotloop's model catalog (`model_catalog_url`, no
fallback-metadata warning). Two more runs edit a file through Codex's freeform `apply_patch` (its Lark grammar): on
hotloop-sim, and through a `tokens` upstream writing harmony (sim-engine as gpt-oss on vLLM's dialect), whose engine
is held to the grammar.
docs/protocol-notes.md, "Codex CLI", records what Codex sends.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import hotloop.pipeline.prepare as turn_module
from conftest import RunningServer, start_server
from hotloop.config import Upstream
from hotloop.observability.logs import RequestIds
from hotloop.wire.request import CreateRequest
from metrics_support import Scrape, metrics_url
from npm_support import NPM_TIMEOUT_S, events_of, input_items, npm_installed, run_cli
from render_support import harmony_tokenizer_file
from simengine_support import SimEngineProcess

CODEX_DIR = Path(__file__).parent / "codex"
CODEX_TIMEOUT_S = 60
API_KEY_ENV = "HOTLOOP_CODEX_TEST_KEY"
COMMANDS = 2  # sim_tool_calls: shell commands before the answer

# The README's example, with the test server's address and key variable.
CONFIG = """\
model_provider = "hotloop"
model = "{model}"

[model_providers.hotloop]
name = "hotloop"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{env_key}"
supports_websockets = {websockets}
model_catalog_url = "{base_url}/models"
"""


@pytest.fixture
def codex_home() -> Iterator[Path]:
    """Codex's home, outside /tmp: where bubblewrap is installed (the project installs Debian's for its own sandbox:
    scripts/ensure-bubblewrap.sh) Codex sandboxes each command with it, under a fresh /tmp, where a home in /tmp
    leaves its sandbox helper out of reach (`bwrap: execvp codex-linux-sandbox: No such file or directory`, every
    command exit 1)."""
    home = Path(tempfile.mkdtemp(prefix="hotloop-codex-home-", dir="/var/tmp"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The pinned Codex CLI, installed by npm into tests/codex on first use (never globally)."""
    return npm_installed(CODEX_DIR, "codex")


class Seen:
    """What the in-process server received: create requests (with their transport) and every HTTP/WebSocket scope."""

    def __init__(self) -> None:
        self.requests: list[tuple[bool, CreateRequest]] = []
        self.scopes: list[tuple[str, str, str, str]] = []  # (type, method, path, query string)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    record = Seen()
    check_request = turn_module.check_request
    middleware = RequestIds.__call__

    def recording_check(request: CreateRequest, *, websocket: bool) -> None:
        record.requests.append((websocket, request))
        check_request(request, websocket=websocket)

    async def recording_middleware(self: RequestIds, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            query = scope.get("query_string", b"").decode()
            record.scopes.append((scope["type"], scope.get("method", ""), scope["path"], query))
        await middleware(self, scope, receive, send)

    monkeypatch.setattr(turn_module, "check_request", recording_check)
    monkeypatch.setattr(RequestIds, "__call__", recording_middleware)
    yield record


def run_codex(
    codex: Path, server: RunningServer, work: Path, home: Path, *, websockets: bool, model: str = "hotloop-sim"
) -> str:
    """`codex exec` in `work`, where commands run unattended in Codex's sandbox; returns its `--json` event stream."""
    flag = str(websockets).lower()
    config = CONFIG.format(base_url=server.base_url, env_key=API_KEY_ENV, websockets=flag, model=model)
    (home / "config.toml").write_text(config)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "CODEX_"))}
    env.update({"CODEX_HOME": str(home), API_KEY_ENV: "test-key", "NO_COLOR": "1"})
    command = [
        str(codex),
        "exec",
        "--json",
        "--ephemeral",
        "--skip-git-repo-check",
        # Sandboxed, writes allowed in the working directory only; `codex exec` never asks for approval.
        "--sandbox",
        "workspace-write",
        "--color",
        "never",
        "-C",
        str(work),
        "List the files in this directory.",
    ]
    return run_cli("codex", command, env, work, CODEX_TIMEOUT_S)


@pytest.mark.timeout(CODEX_TIMEOUT_S + NPM_TIMEOUT_S)
@pytest.mark.parametrize("thinking", [0, 8], ids=["plain", "reasoning"])
@pytest.mark.parametrize("websockets", [True, False], ids=["websocket", "http"])
def test_codex_exec_runs_the_sims_shell_commands(
    codex_bin: Path, codex_home: Path, seen: Seen, tmp_path: Path, websockets: bool, thinking: int
) -> None:
    """Codex's whole tool loop; with `thinking`, the sim is a reasoning model (a reasoning item before each call
    and the answer), whose items Codex keeps in its history."""
    work, home = tmp_path / "work", codex_home
    work.mkdir()
    server = start_server(
        tmp_path / "data", models=["hotloop-sim"], sim_tool_calls=COMMANDS, sim_reasoning_tokens=thinking
    )
    try:
        stdout = run_codex(codex_bin, server, work, home, websockets=websockets)
        scrape = Scrape(httpx.get(metrics_url(server), timeout=10).text)
    finally:
        server.stop()
    events = events_of(stdout)
    completed = [event["item"] for event in events if event["type"] == "item.completed"]
    markers = [f"hotloop-sim-{n}\n" for n in range(1, COMMANDS + 1)]

    # Codex executed the sim's commands: its own events, and the files they wrote in its working directory.
    executions = [item for item in completed if item["type"] == "command_execution"]
    assert [item["exit_code"] for item in executions] == [0] * COMMANDS, stdout
    # (A login shell may print its own warnings first, e.g. a version manager that cannot write under the sandbox.)
    assert all(item["aggregated_output"].endswith(m) for item, m in zip(executions, markers, strict=True)), stdout
    for n, marker in enumerate(markers, 1):
        assert (work / f"hotloop_sim_{n}.txt").read_text() == marker
    # …then got the sim's text answer and ended the turn; nothing went wrong on the way.
    messages = [item for item in completed if item["type"] == "agent_message"]
    assert messages and messages[-1]["text"], stdout
    assert events[-1]["type"] == "turn.completed", stdout
    assert not [item for item in completed if item["type"] == "error"], stdout  # no fallback-metadata warning

    # Server side: Codex sent each command's output back, over the configured transport only.
    assert {websocket for websocket, _ in seen.requests} == {websockets}
    outputs = [
        item["output"]
        for _, request in seen.requests
        for item in input_items(request)
        if item.get("type") == "function_call_output"
    ]
    for marker in markers:
        assert any(isinstance(output, str) and output.endswith(f"\n{marker}") for output in outputs), outputs
    if thinking and not websockets:  # over HTTP Codex resends its history: our reasoning items are in it
        replayed = [
            item for _, request in seen.requests for item in input_items(request) if item.get("type") == "reasoning"
        ]
        assert replayed and all(item["content"][0]["text"].startswith("Let me think:") for item in replayed), replayed
    assert all(request.model == "hotloop-sim" and request.store is False for _, request in seen.requests)
    # Its default tools, not only functions, were accepted: `web_search` too, which Codex always sends and hotloop
    # cannot run. It is left out by `drop_tool_types` (web_search is a default) and the turn answered normally (above),
    # but not silently: every request that carried it counts on the dropped-tools metric.
    offered = {tool.get("type") for _, request in seen.requests for tool in request.tools or []}
    assert {"function", "namespace", "web_search"} <= offered, offered
    searching = sum(
        any(tool.get("type") == "web_search" for tool in request.tools or []) for _, request in seen.requests
    )
    assert searching >= COMMANDS + 1 and scrape.value("hotloop_tools_dropped_total", type="web_search") == searching

    # The model catalog (GET /v1/models?client_version=…), then the turn on one transport.
    catalog = [scope for scope in seen.scopes if scope[2] == "/v1/models"]
    assert catalog and all(scope[:2] == ("http", "GET") and "client_version=" in scope[3] for scope in catalog)
    turns = {scope[:3] for scope in seen.scopes if scope[2].startswith("/v1/") and scope[2] != "/v1/models"}
    assert turns == ({("websocket", "", "/v1/responses")} if websockets else {("http", "POST", "/v1/responses")})

    used, unused = ("websocket", "sse") if websockets else ("sse", "websocket")
    done = scrape.value("hotloop_responses_total", model="hotloop-sim", status="completed", transport=used)
    assert done >= COMMANDS + 1  # a response per command and the answer (plus a warmup on WebSocket)
    for status in ("completed", "failed", "incomplete", "cancelled"):
        assert scrape.value("hotloop_responses_total", model="hotloop-sim", status=status, transport=unused) == 0
        assert scrape.value("hotloop_responses_total", model="hotloop-sim", status=status, transport="http") == 0
    for status in ("failed", "incomplete", "cancelled"):
        assert scrape.value("hotloop_responses_total", model="hotloop-sim", status=status, transport=used) == 0


@pytest.mark.timeout(CODEX_TIMEOUT_S + NPM_TIMEOUT_S)
def test_codex_edits_a_file_through_the_freeform_apply_patch(
    codex_bin: Path, codex_home: Path, seen: Seen, tmp_path: Path
) -> None:
    """The catalog says hotloop-sim follows Lark grammars (`apply_patch_tool_type: freeform`), so Codex offers
    `apply_patch` as a custom tool with its own Lark grammar; the sim (told to prefer it) writes a patch its grammar
    accepts, and Codex applies it: the file is there, and Codex's `custom_tool_call_output` says so."""
    work, home = tmp_path / "work", codex_home
    work.mkdir()
    server = start_server(tmp_path / "data", models=["hotloop-sim"], sim_tool_calls=1, sim_prefer_tools=["apply_patch"])
    try:
        stdout = run_codex(codex_bin, server, work, home, websockets=True)
    finally:
        server.stop()
    check_patched(seen, work, stdout)


def check_patched(seen: Seen, work: Path, stdout: str) -> dict[str, Any]:
    """Codex offered `apply_patch` with its Lark grammar, the model's patch made the file, Codex answered the call
    with a `custom_tool_call_output`, and the turn completed. Returns the offered tool."""
    patches = [
        tool
        for _, request in seen.requests
        for tool in request.tools or []
        if tool.get("type") == "custom" and tool.get("name") == "apply_patch"
    ]
    assert patches and all(tool["format"]["type"] == "grammar" for tool in patches), stdout
    assert patches[0]["format"]["syntax"] == "lark" and "begin_patch" in patches[0]["format"]["definition"]
    assert (work / "hotloop_sim_1.txt").read_text() == "hotloop-sim-1\n", stdout
    outputs = [
        item
        for _, request in seen.requests
        for item in input_items(request)
        if item.get("type") == "custom_tool_call_output"
    ]
    assert outputs, stdout
    assert events_of(stdout)[-1]["type"] == "turn.completed", stdout
    return patches[0]


def test_models_answers_codex_with_its_catalog(tmp_path: Path) -> None:
    """Codex's catalog request gets `{"models": [...]}` with the fields Codex 0.171.0 requires; the OpenAI list
    shape is unchanged for everyone else. The freeform apply_patch goes to the models that follow Codex's grammar as
    they write: hotloop-sim, and smollm2-135m (llguidance's mask); not to an engine behind openai-chat, whose
    inputs are only checked afterwards."""
    engine = Upstream(backend="openai-chat", url="http://127.0.0.1:9/v1", upstream_model="m")
    served = ["hotloop-sim", "smollm2-135m", "engine"]
    server = start_server(tmp_path, models=served, upstreams={"engine": engine})
    try:
        with server.http() as http:
            catalog = http.get("/models", params={"client_version": "0.171.0"})
            plain = http.get("/models")
    finally:
        server.stop()
    assert catalog.status_code == 200 and plain.status_code == 200
    entries = {entry["slug"]: entry for entry in catalog.json()["models"]}
    assert set(entries) == {model["id"] for model in plain.json()["data"]} == set(served)
    sim = entries["hotloop-sim"]
    required = {
        "display_name": str,
        "base_instructions": str,
        "shell_type": str,
        "visibility": str,
        "supported_in_api": bool,
        "priority": int,
        "supported_reasoning_levels": list,
        "support_verbosity": bool,
        "truncation_policy": dict,
        "experimental_supported_tools": list,
        "context_window": int,
    }
    assert all(isinstance(sim[name], kind) for name, kind in required.items()), sim
    assert sim["context_window"] == 131_072
    assert sim["apply_patch_tool_type"] == "freeform"  # hotloop-sim follows Lark grammars
    assert entries["smollm2-135m"]["apply_patch_tool_type"] == "freeform"
    assert "apply_patch_tool_type" not in entries["engine"]  # Codex's default: the JSON function
    assert plain.json()["object"] == "list" and "models" not in plain.json()


@pytest.mark.timeout(CODEX_TIMEOUT_S + NPM_TIMEOUT_S)
def test_codex_edits_a_file_through_a_gpt_oss_engine_held_to_the_patch_grammar(
    codex_bin: Path, codex_home: Path, seen: Seen, tmp_path: Path
) -> None:
    """The same edit through a `tokens` upstream writing harmony (gpt-oss) on vLLM's dialect: the catalog offers the
    freeform apply_patch because the engine is held to its Lark grammar (a structural tag after the call's header,
    backends/upstream/constraints.py); sim-engine (told to prefer it) writes the patch under that tag, and Codex
    applies it."""
    work, home = tmp_path / "work", codex_home
    work.mkdir()
    tokenizer = harmony_tokenizer_file(tmp_path)
    engine = SimEngineProcess(
        output_format="harmony", tokenizer=tokenizer, tool_calls=1, prefer_tools="apply_patch", prefill_us_per_token=1
    ).wait_ready()
    upstream = Upstream(
        url=engine.base_url, backend="tokens", dialect="vllm", tokenizer=str(tokenizer), reasoning_parser="harmony"
    )
    server = start_server(
        tmp_path / "data", models=["gpt-oss"], default_model="gpt-oss", upstreams={"gpt-oss": upstream}
    )
    try:
        stdout = run_codex(codex_bin, server, work, home, websockets=True, model="gpt-oss")
        records = engine.http.get("/stats/requests").json()["requests"]
    finally:
        server.stop()
        engine.stop()
    patch = check_patched(seen, work, stdout)
    tags = [
        json.loads(record["constraint"]["structured_outputs"]["structural_tag"])
        for record in records
        if record["constraint"] is not None
    ]
    assert tags, records
    contents = [tag["content"] for found in tags for tag in found["format"]["tags"]]
    assert {"type": "grammar", "syntax": "lark", "grammar": patch["format"]["definition"]} in contents
