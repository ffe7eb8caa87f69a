"""Fixtures: real servers (uvicorn with uvloop, httptools and websockets-sansio) on loopback, in a thread."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from hotloop.config import Settings
from hotloop.pipeline.service import Service
from hotloop.transports.app import build_service
from hotloop.transports.server import ThreadedServer

if TYPE_CHECKING:
    from mcp_support import McpServers

FAST_SIM = {"sim_ttft_ms": 0.0, "sim_tps": 50_000.0}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fast: the fast tier (`make unit-fast`): no server, subprocess or external service; under 30 s"
    )
    config.addinivalue_line(
        "markers", "exhaustive: checks every case (every BMP character, every token); `make test` only"
    )
    config.addinivalue_line(
        "markers", "vllm: the vLLM tier (`make test-vllm`: a real vLLM on the CPU); runs only when selected with -m"
    )
    config.addinivalue_line(
        "markers", "image: the image tier (`make test-image`: the Containerfile built and run by podman); only with -m"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The vLLM tier needs vLLM installed (scripts/vllm_cpu.py, minutes the first time), the image tier podman and a
    built image (scripts/image.py): their tests run only when a `-m` expression names them (`make test-vllm`,
    `make test-image`), and are skipped in a plain run."""
    selected = config.getoption("markexpr")
    for tier, target in (("vllm", "test-vllm"), ("image", "test-image")):
        if tier in selected:
            continue
        skip = pytest.mark.skip(reason=f"the {tier} tier: make {target} (pytest -m {tier})")
        for item in items:
            if item.get_closest_marker(tier) is not None:
                item.add_marker(skip)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With `-m fast`, a test module that marks nothing fast is not imported at all: importing every module (the
    SDKs, the browser driver, the servers' helpers) took longer than the fast tests themselves."""
    if not config.getoption("markexpr").startswith("fast") or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return "mark.fast" not in collection_path.read_text(encoding="utf-8")


class RunningServer(ThreadedServer):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.start()
        self.ws_url = f"ws://127.0.0.1:{self.port}/v1/responses"

    @property
    def service(self) -> Any:
        return self.server.config.app.state.service

    def client(self, api_key: str = "test-key", **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **kwargs)

    def http(self, api_key: str | None = "test-key") -> httpx.Client:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60)


def start_server(tmp: Path, **overrides: Any) -> RunningServer:
    values: dict[str, Any] = {
        "data_dir": str(tmp),
        "models": ["hotloop-sim", "smollm2-135m"],
        "default_model": "hotloop-sim",
        "llama_threads": 2,
        "llama_n_ctx": 2048,
        "log_level": "warning",
        "port": 0,  # a free port
        **FAST_SIM,
    }
    values.update(overrides)
    return RunningServer(Settings(**values))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("data"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("keyed"), api_keys=["key-a", "key-b"], models=["hotloop-sim"])
    yield running
    running.stop()


@pytest.fixture
async def sim_service(tmp_path: Path) -> AsyncIterator[Service]:
    """A built service with no socket (hotloop-sim, SQLite in a temporary directory): the pipeline as every
    transport drives it, for the fast tier."""
    settings = Settings(data_dir=str(tmp_path), models=["hotloop-sim"], default_model="hotloop-sim", **FAST_SIM)
    built = build_service(settings)
    built.start()
    yield built
    await built.close()


@pytest.fixture(scope="session")
def mcp_servers() -> Iterator[McpServers]:
    """Real MCP servers from the `mcp` SDK on loopback (mcp_support.py), started once for the MCP tests."""
    from mcp_support import serving  # imported here: the rest of the suite never loads the MCP SDK

    with serving() as servers:
        yield servers


@pytest.fixture
def mcp_server(mcp_servers: McpServers) -> McpServers:
    """The MCP servers with their counts and arrangements reset for one test."""
    return mcp_servers.reset()


@pytest.fixture
def client(server: RunningServer) -> openai.OpenAI:
    return server.client()


def stored_counts(server: RunningServer) -> tuple[int, int]:
    """(responses, items) rows in the server's SQLite store: a rejected request must leave both unchanged."""
    import sqlite3

    with sqlite3.connect(Path(server.settings.data_dir) / "hotloop.db") as conn:
        responses = conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        items = conn.execute("SELECT COUNT(*) FROM items").fetchone()[0]
    return int(responses), int(items)
