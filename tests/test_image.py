"""The image tier (`make test-image`, docs/deploy.md "The image"): hotloop's Containerfile built with podman
(scripts/image.py) and run as an operator runs it: keys from the environment, its data in a volume, reached through
a published port. An openai-python WebSocket loop and a stored chain go through it; a SIGTERM during a loop drains
(the response in flight completes, and is stored); without keys it refuses to start. Runs only when selected with
`-m image` (podman and a built image needed). file_search runs in it: a vector store's file ingested by the
worker process the container spawns, then searched inside a response."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from podman_support import image_name, podman, ws_loop

pytestmark = pytest.mark.image
KEY = "sk-image-test"
SIM = {"HOTLOOP_MODELS": "hotloop-sim", "HOTLOOP_DEFAULT_MODEL": "hotloop-sim"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Container:
    """One `podman run -d` of the image: its published port, its volume, its logs."""

    def __init__(self, volume: str, environment: dict[str, str]) -> None:
        self.name = f"hotloop-test-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.volume = volume
        self.environment = environment
        self.started = 0.0

    def start(self) -> Container:
        flags = [flag for key, value in self.environment.items() for flag in ("-e", f"{key}={value}")]
        image = image_name()
        self.started = time.monotonic()
        podman(
            "run", "-d", "--name", self.name, "-p", f"127.0.0.1:{self.port}:8000",
            "-v", f"{self.volume}:/var/lib/hotloop", *flags, image,
        )  # fmt: skip
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def ready(self, timeout: float = 60) -> float:
        """Seconds from `podman run` until /healthz answered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    return time.monotonic() - self.started
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"no /healthz in {timeout} s; logs:\n{self.logs()}")

    def logs(self) -> str:
        found = podman("logs", self.name, check=False)
        return found.stdout + found.stderr

    def wait(self, timeout: float = 60) -> int:
        found = podman("wait", "--condition", "stopped", self.name, check=False)
        inspected = podman("inspect", "--format", "{{.State.ExitCode}}", self.name, check=False)
        assert found.returncode == 0, found.stderr
        return int(inspected.stdout.strip() or -1)

    def remove(self) -> None:
        podman("rm", "-f", "-t", "0", self.name, check=False)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.base_url, api_key=KEY, websocket_base_url=self.base_url.replace("http", "ws"), max_retries=0
        )


@pytest.fixture
def volume() -> Iterator[str]:
    name = f"hotloop-test-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", name)
    yield name
    podman("volume", "rm", "-f", name, check=False)


def test_the_container_runs_a_websocket_loop_and_a_stored_chain(volume: str) -> None:
    container = Container(volume, {"HOTLOOP_API_KEYS": KEY, **SIM}).start()
    try:
        seconds = container.ready()
        print(f"image: /healthz answered {seconds:.2f} s after podman run")
        client = container.client()
        ws_loop(client, "hotloop-sim")
        first = client.responses.create(model="hotloop-sim", input="Remember 7.", store=True)
        second = client.responses.create(model="hotloop-sim", input="And?", previous_response_id=first.id, store=True)
        assert client.responses.retrieve(second.id).previous_response_id == first.id
        unauthorized = httpx.post(f"{container.base_url}/responses", json={"input": "hi"}, timeout=10)
        assert unauthorized.status_code == 401
        # file_search is in the image: a file ingested by the worker process the container spawns, then searched
        # inside a response.
        store = client.vector_stores.create(name="image")
        entry = client.vector_stores.files.upload_and_poll(
            vector_store_id=store.id, file=("tides.md", b"Spring tides follow the full moon."), poll_interval_ms=100
        )
        assert entry.status == "completed", entry.last_error
        tool = {"type": "file_search", "vector_store_ids": [store.id]}
        answer = client.responses.create(model="hotloop-sim", input="When are spring tides?", tools=[tool])  # type: ignore[list-item]
        assert answer.output[0].type == "file_search_call" and answer.output[0].status == "completed"
    finally:
        container.remove()


def test_sigterm_drains_the_response_in_flight_and_keeps_what_was_stored(volume: str) -> None:
    """A SIGTERM while a WebSocket response streams: the response completes (the server drains), it is stored,
    and a new container on the same volume reads it back."""
    environment = {"HOTLOOP_API_KEYS": KEY, "HOTLOOP_SHUTDOWN_GRACE_S": "20", **SIM}
    container = Container(volume, environment).start()
    try:
        container.ready()
        client = container.client()
        seen: list[dict[str, Any]] = []
        with client.responses.connect() as connection:
            connection.response.create(
                model="hotloop-sim",
                input="Long answer",
                store=True,
                metadata={"sim_tps": "40", "sim_output_tokens": "120"},
            )
            stopper = threading.Timer(1.0, lambda: podman("kill", "--signal", "TERM", container.name, check=False))
            stopper.start()
            for event in connection:
                seen.append(json.loads(event.to_json()))
                if event.type in ("response.completed", "response.failed", "error"):
                    break
            stopper.join()
        final = seen[-1]
        assert final["type"] == "response.completed", final
        assert container.wait() == 0, container.logs()
    finally:
        container.remove()
    again = Container(volume, environment).start()
    try:
        again.ready()
        stored = again.client().responses.retrieve(final["response"]["id"])
        assert (
            stored.status == "completed" and stored.output_text == final["response"]["output"][0]["content"][0]["text"]
        )
    finally:
        again.remove()


def test_without_keys_the_container_refuses_to_start(volume: str) -> None:
    container = Container(volume, SIM).start()
    try:
        assert container.wait() == 2
        assert "api_keys" in container.logs() or "HOTLOOP_API_KEYS" in container.logs()
    finally:
        container.remove()


def test_the_image_size() -> None:
    image = image_name()
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    print(f"image: {image} is {size / 1e6:.0f} MB")
    assert size < 1_000_000_000  # docs/deploy.md gives the measured size; a runaway layer would show here
