"""`hotloop serve`: options, configuration layers, and a real process that answers /healthz."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from hotloop.cli import OPEN_WARNING, serve, unguarded_host
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
    assert "allow_unauthenticated" not in output  # loopback without keys: nothing to warn about


# --- an open door (issue 36): beyond loopback, keys or an explicit opt-out -----------------------------------------

LOOPBACK = ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost")
BEYOND = ("0.0.0.0", "::", "192.168.1.20", "10.0.0.5", "fe80::1", "hotloop.internal", "LOCALHOST", "")
DOOR_NAMES = (
    "api_keys",
    "HOTLOOP_API_KEYS",
    "--api-keys",
    "allow_unauthenticated",
    "HOTLOOP_ALLOW_UNAUTHENTICATED",
    "--allow-unauthenticated",
)


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment without any HOTLOOP_* setting (a developer's keys must not decide these tests)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("HOTLOOP_")}
    return {**env, "HOTLOOP_DATA_DIR": str(tmp_path), "HOTLOOP_MODELS": "hotloop-sim", **extra}


def test_only_loopback_serves_without_keys() -> None:
    for host in LOOPBACK:
        assert unguarded_host(Settings(host=host)) is None, host
        assert unguarded_host(Settings(host=host, allow_unauthenticated=True)) is None, host
    for host in BEYOND:
        assert unguarded_host(Settings(host=host)) == (host or "every address"), host
        assert unguarded_host(Settings(host=host, api_keys=["sk-one"])) is None, host
    # admin_key opens only the console's numbers: it is not a key to the API.
    assert unguarded_host(Settings(host="0.0.0.0", admin_key="sk-ops")) == "0.0.0.0"


def test_keys_and_the_opt_out_come_from_every_layer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("HOTLOOP_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "hotloop.toml"
    config.write_text('host = "0.0.0.0"\n')
    assert unguarded_host(load_settings(str(config))) == "0.0.0.0"
    assert unguarded_host(load_settings(str(config), {"api_keys": "sk-one,sk-two"})) is None  # --api-keys
    config.write_text('host = "0.0.0.0"\napi_keys = ["sk-one"]\n')
    assert unguarded_host(load_settings(str(config))) is None
    config.write_text('host = "0.0.0.0"\nallow_unauthenticated = true\n')
    assert load_settings(str(config)).allow_unauthenticated
    assert not load_settings(str(config), {"allow_unauthenticated": False}).allow_unauthenticated  # --no-…
    monkeypatch.setenv("HOTLOOP_ALLOW_UNAUTHENTICATED", "false")
    assert not load_settings(str(config)).allow_unauthenticated
    monkeypatch.setenv("HOTLOOP_ALLOW_UNAUTHENTICATED", "true")
    monkeypatch.setenv("HOTLOOP_API_KEYS", "sk-one,sk-two")
    settings = load_settings(None)
    assert settings.allow_unauthenticated and settings.api_keys == ["sk-one", "sk-two"]


def test_serve_refuses_beyond_loopback_without_keys(capsys: pytest.CaptureFixture[str]) -> None:
    for host in ("0.0.0.0", "::", "192.168.1.20"):
        assert serve(Settings(host=host)) == 2
        err = capsys.readouterr().err
        assert f"refusing to listen on {host} without API keys" in err
        for name in DOOR_NAMES:
            assert name in err, name


def test_serve_process_refuses_0000_without_keys(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "hotloop", "serve", "--host", "0.0.0.0", "--port", "0"]
    result = subprocess.run(command, env=_clean_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for name in DOOR_NAMES:
        assert name in result.stderr, name
    assert not (tmp_path / "hotloop.db").exists()  # refused before anything opened


@contextmanager
def _serving(tmp_path: Path, *args: str, **env: str) -> Iterator[tuple[int, list[str]]]:
    """`hotloop serve --workers 1` on 0.0.0.0 and a free port, up (GET /healthz on 127.0.0.1 answers); stopped with
    SIGTERM on the way out, its output (log lines) then in the yielded list."""
    port = free_port()
    command = [sys.executable, "-m", "hotloop", "serve", "--host", "0.0.0.0", "--port", str(port), "--workers", "1"]
    command += ["--default-model", "hotloop-sim", *args]
    process = subprocess.Popen(
        command, env=_clean_env(tmp_path, **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.1)
        yield port, lines
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
        lines += output.splitlines()
    assert process.returncode in (0, -signal.SIGTERM), output


def _warnings(lines: list[str]) -> list[str]:
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    return [entry["message"] for entry in entries if entry["level"] == "warning"]


def test_serve_process_on_0000_with_keys_starts_without_warning(tmp_path: Path) -> None:
    with _serving(tmp_path, HOTLOOP_API_KEYS="sk-one,sk-two") as (port, lines):
        url = f"http://127.0.0.1:{port}/v1/responses"
        assert httpx.post(url, json={"input": "hi"}).status_code == 401
        keyed = httpx.post(url, json={"input": "hi"}, headers={"Authorization": "Bearer sk-two"})
        assert keyed.json()["status"] == "completed"
    assert not any("allow_unauthenticated" in message for message in _warnings(lines))


def test_serve_process_on_0000_opted_out_starts_and_warns(tmp_path: Path) -> None:
    with _serving(tmp_path, "--allow-unauthenticated") as (port, lines):
        created = httpx.post(f"http://127.0.0.1:{port}/v1/responses", json={"input": "hi"}).json()
        assert created["status"] == "completed"
    assert OPEN_WARNING % "0.0.0.0" in _warnings(lines)


def test_configuration_doc_is_generated_from_the_settings() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_config_doc", ROOT / "scripts" / "gen_config_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for doc in ("docs/configuration.md", "README.md"):
        assert module.table() in (ROOT / doc).read_text(), f"{doc}: run python scripts/gen_config_doc.py"


def test_serve_refuses_a_missing_or_short_secret_key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`secret_key_file` is made elsewhere (a Kubernetes Secret): never created here, and refused at the start when
    it is missing or too short to sign with, naming the file and never showing its bytes."""
    short = tmp_path / "short.key"
    short.write_bytes(b"0123456789")
    for path, says in ((tmp_path / "missing.key", "No such file"), (short, "at least 32")):
        assert serve(Settings(secret_key_file=str(path), data_dir=str(tmp_path))) == 2
        err = capsys.readouterr().err
        assert f"secret_key_file {path}" in err and says in err and "0123456789" not in err
    assert not (tmp_path / "secret.key").exists()
