"""`openai-chat` in front of a real OpenAI-compatible engine in CI: llama-cpp-python's own server
(`python -m llama_cpp.server`, the test extra `llama-cpp-python[server]`) running SmolLM2-135M-Instruct on the CPU.

Driven with the official openai SDK through hotloop: streamed text from a real model, a continuation whose history
reaches the engine as chat messages, and a client that hangs up mid-stream ending the engine's generation.
sim-engine covers the protocol's corners; this checks the mapping against an engine hotloop does not control.
(This engine answers a streamed request longer than its context with an empty 200 stream, so there is no overflow
error to map: hotloop fails such a response with `server_error` after its retries.)
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from conftest import RunningServer, start_server
from hotloop.backends.local.gguf import smollm2_path
from hotloop.config import Upstream
from process_support import free_port, wait_healthy

ENGINE_CONTEXT = 2048


class LlamaCppServer:
    """`python -m llama_cpp.server` on a free port, with its output kept for failures."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.log = log
        # llama_cpp.server's own entry point, behind hotloop's guard against llama.cpp's AMX kernels (they crash on
        # some of CI's CPUs: backends/local/gguf.py).
        launch = "from hotloop.backends.local.gguf import avoid_amx_kernels; avoid_amx_kernels(); import runpy; "
        launch += "runpy.run_module('llama_cpp.server', run_name='__main__')"
        command = [sys.executable, "-c", launch, "--model", str(smollm2_path()), "--port", str(self.port)]
        command += ["--n_ctx", str(ENGINE_CONTEXT), "--n_threads", "2", "--model_alias", "smollm2"]
        # One request at a time, a new one waiting for the last instead of interrupting it (its default): a request
        # that is still generating then shows as a wait.
        command += ["--interrupt_requests", "false"]
        self._out = log.open("w")
        self.process = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT, text=True)
        wait_healthy("llama_cpp.server", f"{self.url}/models", self.process, self.output, timeout=120)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._out.close()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppServer]:
    server = LlamaCppServer(tmp_path_factory.mktemp("engine") / "engine.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def hotloop(engine: LlamaCppServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    upstream = Upstream(url=engine.url, upstream_model="smollm2", context_window=8192, read_timeout_s=60)
    running = start_server(
        tmp_path_factory.mktemp("hotloop"), models=["real"], default_model="real", upstreams={"real": upstream}
    )
    yield running
    running.stop()


@pytest.fixture
def sdk(hotloop: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=hotloop.base_url, api_key="unused", max_retries=0) as client:
        yield client


def test_a_real_model_streams_and_continues_a_chain(sdk: openai.OpenAI) -> None:
    kinds: list[str] = []
    with sdk.responses.stream(
        model="real", input="Name three colors.", max_output_tokens=24, temperature=0, store=True
    ) as stream:
        for event in stream:
            kinds.append(event.type)
        first = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] in (
        "response.completed",
        "response.incomplete",
    )
    assert kinds.count("response.output_text.delta") > 3  # streamed token by token, not in one piece
    assert first.output_text.strip() and first.usage is not None and first.usage.output_tokens > 3
    second = sdk.responses.create(
        model="real", previous_response_id=first.id, input="Now one more.", max_output_tokens=16, temperature=0
    )
    assert second.status in ("completed", "incomplete") and second.output_text.strip()
    assert second.previous_response_id == first.id


def test_a_client_that_hangs_up_stops_the_engine(hotloop: RunningServer, engine: LlamaCppServer) -> None:
    # ~440 tokens at temperature 0 (about 4 s of this CPU engine's time) unless generation stops when hotloop hangs
    # up on the engine, which it must do as soon as its own client is gone.
    body = {"model": "real", "input": "List every prime number.", "max_output_tokens": 1500, "temperature": 0}
    deltas = 0
    with (
        httpx.Client(base_url=hotloop.base_url, timeout=120) as http,
        http.stream("POST", "/responses", json={**body, "stream": True}) as reply,
    ):
        for line in reply.iter_lines():
            deltas += "output_text.delta" in line
            if deltas >= 3:
                break  # hang up
    hung_up = time.monotonic()
    # The engine serves one request at a time: a short one is answered at once only if the story was abandoned.
    with httpx.Client(timeout=120) as direct:
        answer = direct.post(
            f"{engine.url}/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
    assert answer.status_code == 200
    assert time.monotonic() - hung_up < 1.5, "the engine went on generating for the departed client"
