"""hotloop's Kubernetes manifests (deploy/kubernetes, docs/deploy.md "Kubernetes"): rendered with `kubectl
kustomize` and checked offline against Kubernetes' schemas with unknown fields refused (every run); their
hotloop.toml files are settings hotloop loads; and, in the image tier (`-m image`), the example rendered and run
with `podman kube play` (tests/kube_support.py translates what podman lacks): two hotloop pods, PostgreSQL and the
stand-in engine, an openai-python WebSocket loop on one pod and a chain continued on the other."""

from __future__ import annotations

import copy
import os
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import openai
import pytest
import yaml

from hotloop.config import load_settings
from kube_support import KUBERNETES, NOT_RUN, for_podman, overlay, podman_secret, render, validate
from podman_support import image_name, podman, ws_loop

BASE = KUBERNETES / "base"
EXAMPLE = KUBERNETES / "examples" / "postgres"
KEY = "sk-kube-test"


def _kinds(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for doc in docs}


def _server(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = _kinds(docs)["Deployment/hotloop"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.mark.fast
@pytest.mark.parametrize("folder", [BASE, EXAMPLE], ids=["base", "example"])
def test_the_manifests_render_and_hold_to_kubernetes_schemas(folder: Path) -> None:
    docs = render(folder)
    validate(docs)
    validate(docs, "1.30")  # the oldest Kubernetes still supported upstream when this was written
    kinds = {doc["kind"] for doc in docs}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "Ingress"} <= kinds
    assert "Secret" not in kinds  # made by the operator (docs/deploy.md), never committed


@pytest.mark.fast
def test_strict_validation_refuses_a_misspelt_field() -> None:
    """The oracle bites: a field Kubernetes does not know fails the check."""
    docs = render(BASE)
    broken = copy.deepcopy(_kinds(docs)["Deployment/hotloop"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/readyz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate([broken])


@pytest.mark.fast
@pytest.mark.parametrize("folder", [BASE, EXAMPLE], ids=["base", "example"])
def test_the_deployment_drains_probes_and_runs_unprivileged(folder: Path, tmp_path: Path) -> None:
    docs = render(folder)
    kinds = _kinds(docs)
    deployment = kinds["Deployment/hotloop"]
    pod = deployment["spec"]["template"]["spec"]
    container = _server(docs)
    config = next(doc for doc in docs if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].startswith("hotloop"))
    text = config["data"]["hotloop.toml"]
    (tmp_path / "hotloop.toml").write_text(text, encoding="utf-8")
    settings = load_settings(str(tmp_path / "hotloop.toml"))  # refuses an unknown or mistyped setting
    assert settings.secret_key_file.startswith("/etc/hotloop/secret/")
    assert settings.default_model in settings.upstreams
    # The drain fits in the grace period, after the preStop pause.
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > settings.shutdown_grace_s + pause
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
    # Keys and the store's address from the Secret; the secret.key file from the Secret's volume.
    env = {item["name"]: item["valueFrom"]["secretKeyRef"] for item in container["env"]}
    assert env["HOTLOOP_API_KEYS"]["name"] == env["HOTLOOP_STORE_URL"]["name"] == "hotloop"
    secret = next(volume for volume in pod["volumes"] if "secret" in volume)
    mount = next(mount for mount in container["volumeMounts"] if mount["name"] == secret["name"])
    assert os.path.join(mount["mountPath"], "secret.key") == settings.secret_key_file
    assert kinds["PodDisruptionBudget/hotloop"]["spec"]["maxUnavailable"] == 1
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    ingress = kinds["Ingress/hotloop"]["metadata"]["annotations"]
    assert int(ingress["nginx.ingress.kubernetes.io/proxy-read-timeout"]) > settings.ws_max_age_s


# -- the image tier: podman kube play --------------------------------------------------------------------------


class Played:
    """The example, rendered with the tier's images, translated (kube_support.py) and played."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tag = uuid.uuid4().hex[:6]
        password = uuid.uuid4().hex
        self.secrets = {
            "hotloop-postgres": {"password": password.encode()},
            "hotloop": {
                "api-keys": KEY.encode(),
                # As docs/deploy.md has the operator write it: the Service's name, which resolves here too.
                "store-url": f"postgresql://hotloop:{password}@hotloop-postgres:5432/hotloop".encode(),
                "secret.key": os.urandom(32),
            },
        }
        images = {
            "registry.example.com/hotloop": image_name(),
            "docker.io/library/postgres": image_name("postgres"),
        }
        docs = render(overlay(folder / "overlay", EXAMPLE, images))
        validate(docs)
        self.docs, self.pods = for_podman(docs, self.secrets, folder)
        self.file = folder / "played.yaml"
        self.file.write_text(yaml.safe_dump_all(self.docs), encoding="utf-8")

    def up(self) -> None:
        for name, data in self.secrets.items():
            source = self.folder / f"{name}.json"
            source.write_text(podman_secret(data), encoding="utf-8")
            podman("secret", "rm", name, check=False)
            podman("secret", "create", name, str(source))
        played = podman("kube", "play", str(self.file), check=False)
        assert played.returncode == 0, played.stdout + played.stderr

    def address(self, pod: str) -> str:
        infra = podman("pod", "inspect", pod, "--format", "{{.InfraContainerID}}").stdout.strip()
        found = podman("inspect", infra, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")
        return found.stdout.strip()

    def logs(self, pod: str) -> str:
        containers = podman("ps", "-a", "--pod", "--filter", f"pod={pod}", "--format", "{{.Names}}").stdout.split()
        return "\n".join(podman("logs", name, check=False).stderr[-3000:] for name in containers)

    def down(self) -> None:
        podman("kube", "down", str(self.file), check=False)
        for name in self.secrets:
            podman("secret", "rm", name, check=False)
        for doc in self.docs:
            if doc["kind"] == "PersistentVolumeClaim":
                podman("volume", "rm", "-f", doc["metadata"]["name"], check=False)


@pytest.fixture
def played(tmp_path: Path) -> Iterator[Played]:
    example = Played(tmp_path)
    try:
        example.up()
        yield example
    finally:
        example.down()


def _ready(url: str, timeout: float = 90) -> float:
    """Seconds until GET /readyz answered 200: the pod serves and reaches its store."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"{url}/readyz", timeout=3).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} was not ready in {timeout} s")


@pytest.mark.image
def test_podman_kube_play_runs_the_example(played: Played) -> None:
    assert sorted(played.pods) == ["engine", "hotloop-0", "hotloop-1", "hotloop-postgres"]
    assert not {doc["kind"] for doc in played.docs} & NOT_RUN
    urls = {pod: f"http://{played.address(pod)}:8000" for pod in ("hotloop-0", "hotloop-1")}
    for pod, url in urls.items():
        try:
            print(f"kubernetes: {pod} ready in {_ready(url):.1f} s")
        except AssertionError:
            raise AssertionError(played.logs(pod)) from None
    one, two = (
        openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, websocket_base_url=f"{url.replace('http', 'ws')}/v1")
        for url in urls.values()
    )
    previous = ws_loop(one, "sim", store=True)
    # The other pod continues the chain from PostgreSQL, and opens an item the first sealed: one secret.key.
    continued = two.responses.create(model="sim", input="And on the other pod?", previous_response_id=previous)
    assert continued.status == "completed" and two.responses.retrieve(previous).status == "completed"
    compacted = httpx.post(
        f"{urls['hotloop-0']}/v1/responses/compact",
        json={"model": "sim", "input": "remember this"},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert compacted.status_code == 200, compacted.text
    follow = two.responses.create(model="sim", input=[*compacted.json()["output"], {"role": "user", "content": "go"}])
    assert follow.status == "completed"
    assert httpx.post(f"{urls['hotloop-1']}/v1/responses", json={"input": "hi"}).status_code == 401


@pytest.mark.fast
def test_the_example_settings_are_what_the_base_sets_but_the_model() -> None:
    """The example replaces the base's hotloop.toml whole (kustomize's `behavior: replace`): it keeps every
    setting of the base's but the model and its upstream."""
    base = tomllib.loads((BASE / "hotloop.toml").read_text(encoding="utf-8"))
    example = tomllib.loads((EXAMPLE / "hotloop.toml").read_text(encoding="utf-8"))
    model_keys = {"models", "default_model", "upstreams"}
    assert {k: v for k, v in base.items() if k not in model_keys} == {
        k: v for k, v in example.items() if k not in model_keys
    }
