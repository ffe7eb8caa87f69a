"""podman for the image tier (tests/test_image.py, test_compose.py, test_kubernetes.py): run with the tier's own
containers.conf (scripts/image.py), and the names of the images it built."""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parents[1]


@cache
def _image_module() -> object:
    sys.path.insert(0, str(ROOT / "scripts"))
    import image  # scripts/image.py

    return image


def podman_env() -> dict[str, str]:
    """The environment podman runs with in the tier: its containers.conf."""
    env: dict[str, str] = _image_module().env()  # type: ignore[attr-defined]
    return env


def podman(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], env=podman_env(), check=check, text=True, capture_output=True, timeout=timeout
    )


def image_name(which: str = "") -> str:
    """hotloop's image, or a stand-in's (`postgres`, `nginx`: tests/images/), as scripts/image.py built it."""
    module = _image_module()
    name: str = module.stand_in(which) if which else module.IMAGE  # type: ignore[attr-defined]
    return name


def ws_loop(client: openai.OpenAI, model: str, turns: int = 3, store: bool = False) -> str:
    """An openai-python WebSocket loop: `turns` creates on one connection, each continuing the last; the last
    response's id. Every turn must complete."""
    previous = None
    with client.responses.connect() as connection:
        for turn in range(turns):
            body: dict[str, Any] = {"model": model, "input": f"Turn {turn}", "store": store}
            if previous is not None:
                body["previous_response_id"] = previous
            connection.response.create(**body)
            for event in connection:
                if event.type in ("response.completed", "response.failed", "error"):
                    break
            assert event.type == "response.completed", event
            previous = event.response.id
    assert previous is not None
    return previous
