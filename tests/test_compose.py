"""The Compose file (deploy/compose, docs/deploy.md "Compose"), brought up as an operator would with
podman-compose in the image tier (`-m image`): two hotloop replicas behind nginx, PostgreSQL, the stand-in engine.
Through nginx: an openai-python WebSocket loop, a stored chain whose turns the two replicas share, and, with one
replica stopped (it drains), the other serving everything. The registry images it names are swapped for the
tier's stand-ins (tests/images/) through the file's own variables."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from podman_support import image_name, podman, podman_env, ws_loop

pytestmark = pytest.mark.image
ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
KEY = "sk-compose-test"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Project:
    """One `podman-compose up` of the file, under a project name of its own."""

    def __init__(self) -> None:
        self.name = f"hotloop-test-{uuid.uuid4().hex[:6]}"
        self.port = _free_port()
        self.env = {
            **podman_env(),
            "HOTLOOP_API_KEYS": KEY,
            "HOTLOOP_PUBLISH": f"127.0.0.1:{self.port}",
            "HOTLOOP_IMAGE": image_name(),
            "POSTGRES_IMAGE": image_name("postgres"),
            "NGINX_IMAGE": image_name("nginx"),
            "POSTGRES_PASSWORD": uuid.uuid4().hex,
        }
        self.url = f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(Path(sys.executable).with_name("podman-compose")), "-f", str(COMPOSE), "-p", self.name, *args]
        done = subprocess.run(command, env=self.env, text=True, capture_output=True, timeout=300)
        assert not check or done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    def containers(self) -> dict[str, str]:
        """service → container name."""
        label = '{{index .Labels "com.docker.compose.service"}}'
        found = podman(
            "ps",
            "-a",
            "--filter",
            f"label=io.podman.compose.project={self.name}",
            "--format",
            f"{label} {{{{.Names}}}}",
        )
        return dict(line.split() for line in found.stdout.splitlines() if line.strip())

    def served(self, service: str) -> set[str]:
        """The ids of the responses a replica finished (its JSON `response finished` lines: ids, never content)."""
        logs = podman("logs", self.containers()[service], check=False)
        ids = set()
        for line in (logs.stdout + logs.stderr).splitlines():
            if '"response finished"' in line:
                ids.add(json.loads(line)["response_id"])
        return ids

    def ready(self, timeout: float = 120) -> float:
        """Seconds until both replicas answer /readyz (they reach PostgreSQL), each asked in its container."""
        started = time.monotonic()
        probe = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=3)"
        waiting = ["hotloop-1", "hotloop-2"]
        while time.monotonic() - started < timeout:
            names = self.containers()
            waiting = [
                s
                for s in waiting
                if s not in names or podman("exec", names[s], "python3", "-c", probe, check=False).returncode
            ]
            if not waiting and httpx.get(f"{self.url}/readyz", timeout=3).status_code == 200:
                return time.monotonic() - started
            time.sleep(0.2)
        logs = {
            service: podman("logs", name, check=False).stderr[-2000:] for service, name in self.containers().items()
        }
        raise AssertionError(f"nothing ready through nginx in {timeout} s: {logs}")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=KEY, websocket_base_url=f"ws://127.0.0.1:{self.port}/v1", max_retries=0
        )


@pytest.fixture
def project() -> Iterator[Project]:
    running = Project()
    try:
        running.compose("up", "-d", "--no-build")
        yield running
    finally:
        running.compose("down", "-v", "-t", "5", check=False)


def test_compose_up_gives_a_working_endpoint_on_two_replicas(project: Project) -> None:
    print(f"compose: ready through nginx {project.ready():.1f} s after up")
    client = project.client()
    ws_loop(client, "sim")
    # A stored chain through nginx: its turns spread over both replicas, each continuing from PostgreSQL.
    ids = [client.responses.create(model="sim", input="Remember 7.", store=True).id]
    for turn in range(20):
        ids.append(client.responses.create(model="sim", input=f"And {turn}?", previous_response_id=ids[-1]).id)
        one, two = project.served("hotloop-1"), project.served("hotloop-2")
        if turn >= 3 and set(ids) & one and set(ids) & two:
            break
    assert client.responses.retrieve(ids[-1]).previous_response_id == ids[-2]
    assert set(ids) <= one | two and set(ids) & one and set(ids) & two, (ids, one, two)
    assert httpx.post(f"{project.url}/v1/responses", json={"input": "hi"}).status_code == 401

    # One replica stopped (SIGTERM: it drains and exits): nginx sends everything to the other.
    stopped = podman("stop", "-t", "40", project.containers()["hotloop-1"])
    assert stopped.returncode == 0
    before = project.served("hotloop-2")
    after = [client.responses.create(model="sim", input="Still there?", previous_response_id=ids[-1]).id]
    after.append(ws_loop(client, "sim", turns=2))
    assert all(client.responses.retrieve(i).status == "completed" for i in after[:1])
    assert set(after) <= project.served("hotloop-2") - before
