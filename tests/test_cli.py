"""`hotloop serve`: options, configuration layers, and a real process that answers /healthz."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hotloop.config import Settings, load_settings
from process_support import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_help_documents_every_option() -> None:
    result = subprocess.run([sys.executable, "-m", "hotloop", "serve", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    for name in [*Settings.__struct_fields__, "config"]:
        assert f"--{name.replace('_', '-')}" in result.stdout, name


def test_configuration_doc_lists_every_setting() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for name in Settings.__struct_fields__:
        assert f"`{name}`" in text, name


def test_layers_file_then_environment_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hotloop.toml"
    config.write_text('port = 9001\nsim_tps = 10.5\napi_keys = ["a", "b"]\nws_lanes = false\n')
    settings = load_settings(str(config))
    assert (settings.port, settings.sim_tps, settings.api_keys, settings.ws_lanes) == (9001, 10.5, ["a", "b"], False)
    monkeypatch.setenv("HOTLOOP_PORT", "9002")
    monkeypatch.setenv("HOTLOOP_API_KEYS", "x, y")
    monkeypatch.setenv("HOTLOOP_WS_LANES", "true")
    settings = load_settings(str(config))
    assert (settings.port, settings.api_keys, settings.ws_lanes) == (9002, ["x", "y"], True)
    assert load_settings(str(config), {"port": "9003"}).port == 9003


def test_bad_settings_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("no_such_setting = 1\n")
    with pytest.raises(ValueError, match="no_such_setting"):
        load_settings(str(config))
    monkeypatch.setenv("HOTLOOP_PORT", "eighty")
    with pytest.raises(ValueError, match="HOTLOOP_PORT"):
        load_settings(None)
    result = subprocess.run(
        [sys.executable, "-m", "hotloop", "serve", "--config", str(config)], capture_output=True, text=True
    )
    assert result.returncode == 2 and "HOTLOOP_PORT" in result.stderr


def test_serve_process_answers_healthz_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "HOTLOOP_DATA_DIR": str(tmp_path), "HOTLOOP_MODELS": "hotloop-sim"}
    command = [sys.executable, "-m", "hotloop", "serve", "--port", str(port), "--default-model", "hotloop-sim"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.1)
        assert response.status_code == 200
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
        assert [model["id"] for model in models["data"]] == ["hotloop-sim"]
        created = httpx.post(f"http://127.0.0.1:{port}/v1/responses", json={"input": "hi"}).json()
        assert created["status"] == "completed"
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells how it ended.
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert (tmp_path / "hotloop.db").exists()


def test_configuration_doc_is_generated_from_the_settings() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_config_doc", ROOT / "scripts" / "gen_config_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for doc in ("docs/configuration.md", "README.md"):
        assert module.table() in (ROOT / doc).read_text(), f"{doc}: run python scripts/gen_config_doc.py"
