"""Kubernetes manifests for the tests (tests/test_kubernetes.py): rendered with `kubectl kustomize`, validated
offline against Kubernetes' schemas (kubernetes-validate), and translated for `podman kube play` (podman 4.3, as
Debian 12 ships it) where podman lacks what a cluster gives:

- **Services**: podman ignores them, and its DNS knows a pod by its name only. A Deployment of one replica that a
  Service selects becomes a Pod named after the Service, so `hotloop-postgres:5432` resolves as in a cluster; one of
  several replicas becomes Pods `<name>-0`, `<name>-1`, … (the test reaches each by its address).
- **Secrets**: `podman kube play` 4.3 reads a `secretKeyRef` from a podman secret holding the data as a JSON map of
  base64 values (`podman secret create`), and crashes on a `secret` volume (a nil dereference in
  VolumeFromSecret): the volume becomes a host directory holding the Secret's items.
- **Ports**: podman 4.3 publishes every `containerPort` on the host's same port (PostgreSQL's 5432 is the
  machine's own, and two replicas cannot both have 8000): the ports go, the probes naming them get their numbers,
  and the test reaches each pod at its address on podman's network.
- PodDisruptionBudgets and Ingresses have no meaning on one machine: left out (validated, not run).

Everything else (ConfigMaps and their volumes, PVCs, probes, security contexts, resources) goes to podman as
rendered.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES = ROOT / "deploy" / "kubernetes"
NOT_RUN = frozenset({"Service", "PodDisruptionBudget", "Ingress"})  # validated; podman has nothing to run for them

Doc = dict[str, Any]


def render(folder: Path) -> list[Doc]:
    """`kubectl kustomize` of a folder, as documents."""
    out = subprocess.run(["kubectl", "kustomize", str(folder)], check=True, capture_output=True, text=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def validate(docs: list[Doc], version: str | None = None) -> None:
    """Each document against Kubernetes' own schema, unknown fields refused; raises `ValidationError`."""
    for doc in docs:
        kubernetes_validate.validate(doc, version or kubernetes_validate.latest_version(), strict=True)


def overlay(folder: Path, resource: Path, images: dict[str, str]) -> Path:
    """A kustomization in `folder` over `resource` (kustomize wants it relative) that swaps `images`
    (name → name:tag)."""
    swaps = []
    for name, image in images.items():
        new_name, _, tag = image.rpartition(":")
        swaps.append({"name": name, "newName": new_name, "newTag": tag})
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(resource, folder)],
        "images": swaps,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
    return folder


def podman_secret(data: dict[str, bytes]) -> str:
    """What `podman secret create` must hold for `podman kube play` 4.3 to read a Secret's keys."""
    return json.dumps({key: base64.b64encode(value).decode() for key, value in data.items()})


def selects(service: Doc, labels: dict[str, str]) -> bool:
    selector = service["spec"].get("selector") or {}
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def for_podman(docs: list[Doc], secrets: dict[str, dict[str, bytes]], folder: Path) -> tuple[list[Doc], list[str]]:
    """The documents `podman kube play` runs, and the names of the pods it will make (see the module's doc).
    `secrets` are the Secrets the manifests name, which a cluster's operator would have created: their `secret`
    volumes become directories under `folder`."""
    services = [doc for doc in docs if doc["kind"] == "Service"]
    played: list[Doc] = []
    pods: list[str] = []
    for doc in docs:
        if doc["kind"] in NOT_RUN:
            continue
        if doc["kind"] != "Deployment":
            played.append(doc)
            continue
        template = copy.deepcopy(doc["spec"]["template"])
        _secret_volumes(template["spec"], secrets, folder)
        for container in template["spec"]["containers"]:
            _unpublished(container)
        replicas = doc["spec"].get("replicas", 1)
        labels = template["metadata"]["labels"]
        named = [service["metadata"]["name"] for service in services if selects(service, labels)]
        base = doc["metadata"]["name"]
        names = [named[0]] if replicas == 1 and named else [f"{base}-{n}" for n in range(replicas)]
        for name in names:
            metadata = {**template["metadata"], "name": name}
            played.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
            pods.append(name)
    return played, pods


def _unpublished(container: Doc) -> None:
    numbers = {port.get("name"): port["containerPort"] for port in container.pop("ports", [])}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        action = container.get(probe, {}).get("httpGet")
        if action is not None and isinstance(action["port"], str):
            action["port"] = numbers[action["port"]]


def _secret_volumes(spec: Doc, secrets: dict[str, dict[str, bytes]], folder: Path) -> None:
    for volume in spec.get("volumes", []):
        source = volume.pop("secret", None)
        if source is None:
            continue
        data = secrets[source["secretName"]]
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        directory = folder / "secrets" / source["secretName"]
        directory.mkdir(parents=True, exist_ok=True)
        for item in items:
            path = directory / item["path"]
            path.write_bytes(data[item["key"]])
            path.chmod(0o444)  # a cluster's fsGroup makes it the server's group's; here anyone in the pod reads it
        volume["hostPath"] = {"path": str(directory), "type": "Directory"}
