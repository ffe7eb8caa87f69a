"""hotloop and agentic-api 0.9.0 side by side, in front of one `hotloop sim-engine` (docs/benchmarks.md).

A manual comparison: never run in CI, and agentic-api is never a dependency of hotloop. agentic-api (vLLM's Rust
Responses API gateway, PyPI `agentic-api`) is pip-installed into a throwaway virtualenv (a temporary directory,
removed at the end, unless --venv names one to keep and reuse). One sim-engine runs; agentic-api's gateway, hotloop
with the `openai-chat` backend and hotloop with the `tokens` backend each run as their own process in front of it.
The same scripted agent rollout (hotloop's bench: `run_rollout`, its mode clients and `Rollout`) goes through each
gateway in each mode, the runs interleaved (run 1 of every gateway and mode, then run 2, …).

Per gateway and mode it reports the median per-turn overhead (the client's turn time less the engine's own time for
that turn's request, which the engine logs at GET /stats/requests whichever endpoint a gateway uses), the end-to-end
rollout time, the CPU per turn of the gateway (psutil: the process, its threads and children) and of the engine,
and hotloop / agentic-api ratios, each taken between runs of the same round and then the median over rounds.

    .venv/bin/python scripts/compare_agentic_api.py --runs 3 --json compare.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psutil

from hotloop.bench.agent_config import AgentLoopConfig, request_fields
from hotloop.bench.clients import MODES, BenchError, open_client
from hotloop.bench.progress import Progress
from hotloop.bench.rollout import run_rollout
from hotloop.bench.scenario import Rollout, tool_text
from hotloop.bench.server_process import free_port, process_cpu_seconds
from hotloop.bench.stats import median, ratio

AGENTIC_VERSION = "0.9.0"
ENGINE_MODEL = "sim-engine"  # the engine's name for its model; agentic-api forwards `model` as it is
HOTLOOP_MODEL = "sim"  # the name hotloop serves the upstream model under
REFERENCE = "agentic-api"
GATEWAYS = ("agentic-api", "hotloop-chat", "hotloop-tokens")
LABELS = {"agentic-api": f"agentic-api {AGENTIC_VERSION}", "hotloop-chat": "hotloop openai-chat"}


class Child:
    """A process in its own session (stopping it reaches everything it started), its output in a log file."""

    def __init__(self, name: str, command: Sequence[str], log: Path, env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.popen = subprocess.Popen(
                list(command), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_ready(self, url: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise BenchError(f"{self.name} exited ({self.popen.returncode}): {self.tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise BenchError(f"{self.name} did not answer {url} within {timeout:.0f} s: {self.tail()}")

    def tail(self, chars: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 15 s, then SIGKILL to whatever of the group is left."""
        if self.popen.poll() is None:
            _signal_group(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _signal_group(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        _signal_group(self.popen.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass(frozen=True)
class Gateway:
    key: str  # agentic-api, hotloop-chat, hotloop-tokens
    label: str
    model: str
    base_url: str  # …/v1
    child: Child


@dataclass
class Sample:
    """One measured rollout of one gateway in one mode."""

    gateway: str
    mode: str
    run: int
    e2e_ms: float
    gateway_cpu_ms_per_turn: float
    engine_cpu_ms_per_turn: float
    turns: list[dict[str, Any]] = field(default_factory=list)  # the client's and the engine's view of each turn

    @property
    def overhead_ms(self) -> float:
        return median(turn["overhead_ms"] for turn in self.turns)


def cpu_seconds(pid: int) -> float:
    """The CPU time of a process (all its threads) and its live children (`process_cpu_seconds`)."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += process_cpu_seconds(process)
    return total


def pair_turns(turns: Sequence[Any], records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each client turn with the engine's record of its one request (a rollout's turns are sequential, so the
    engine's requests come in the same order)."""
    if len(records) != len(turns):
        raise BenchError(f"{len(turns)} turns but the engine logged {len(records)} requests: cannot pair them")
    return [
        {
            "turn": turn.turn,
            "turn_ms": turn.turn_ms,
            "engine_ms": record["ms"],
            "overhead_ms": turn.turn_ms - record["ms"],
            "prompt_tokens": record["prompt_tokens"],
            "cached_tokens": record["cached_tokens"],
            "output_tokens": record["output_tokens"],
            "engine_path": record["path"],
            "gateway_input_tokens": turn.context_tokens,
            "gateway_stages_ms": own_stages_ms(turn.timings),
            "timings": turn.timings,  # hotloop's own stage timings (hotloop:timing_metrics); None for agentic-api
        }
        for turn, record in zip(turns, records, strict=True)
    ]


def own_stages_ms(timings: dict[str, Any] | None) -> float | None:
    """hotloop's own work in a turn: request → backend, last token → terminal event (agentic-api reports none)."""
    if not timings or "pre_inference" not in timings:
        return None
    return float(timings["pre_inference"]) + float(timings.get("post_inference", 0.0))


def summarize(samples: Sequence[Sample]) -> dict[str, float | None]:
    """Medians over every turn of every run (per-turn figures) and over runs (per-rollout figures)."""
    turns = [turn for sample in samples for turn in sample.turns]
    prompt = sum(turn["prompt_tokens"] for turn in turns)
    stages = [turn["gateway_stages_ms"] for turn in turns if turn["gateway_stages_ms"] is not None]
    return {
        "runs": len(samples),
        "turns": len(turns),
        "turn_ms": median(turn["turn_ms"] for turn in turns),
        "engine_ms": median(turn["engine_ms"] for turn in turns),
        "overhead_ms": median(turn["overhead_ms"] for turn in turns),
        "gateway_stages_ms": median(stages) if stages else None,
        "e2e_s": median(sample.e2e_ms for sample in samples) / 1000.0,
        "gateway_cpu_ms_per_turn": median(sample.gateway_cpu_ms_per_turn for sample in samples),
        "engine_cpu_ms_per_turn": median(sample.engine_cpu_ms_per_turn for sample in samples),
        "cached_ratio": sum(turn["cached_tokens"] for turn in turns) / prompt if prompt else 0.0,
    }


def run_ratios(samples: Sequence[Sample], gateway: str, mode: str) -> dict[str, float] | None:
    """gateway / agentic-api for each round in which both ran this mode, then the median over rounds."""
    mine = {s.run: s for s in samples if s.gateway == gateway and s.mode == mode}
    theirs = {s.run: s for s in samples if s.gateway == REFERENCE and s.mode == mode}
    rounds = sorted(mine.keys() & theirs.keys())
    if not rounds:
        return None
    metrics = {
        "overhead": lambda s: s.overhead_ms,
        "e2e": lambda s: s.e2e_ms,
        "gateway_cpu": lambda s: s.gateway_cpu_ms_per_turn,
    }
    return {name: median(ratio(of(mine[r]), of(theirs[r])) for r in rounds) for name, of in metrics.items()}


class EngineLog:
    """The engine's own record of each generation request (GET /stats/requests), read since the last call."""

    def __init__(self, root_url: str) -> None:
        self.http = httpx.AsyncClient(base_url=root_url, timeout=30)
        self.seen = 0

    async def take(self) -> list[dict[str, Any]]:
        for _ in range(100):
            reply = await self.http.get("/stats/requests", params={"after": self.seen})
            reply.raise_for_status()
            records: list[dict[str, Any]] = reply.json()["requests"]
            # The engine stamps a request when its last byte is out, which can trail the gateway's terminal event.
            if all(record["ms"] > 0 for record in records):
                break
            await asyncio.sleep(0.02)
        if records:
            self.seen = records[-1]["seq"]
        return records

    async def close(self) -> None:
        await self.http.aclose()


@dataclass(frozen=True)
class Profile:
    """`--profile DIR`: py-spy records every measured hotloop rollout (its workers included) into DIR."""

    directory: Path
    kind: str  # gil: samples holding the GIL; wall: every sample, idle ones too
    rate: int


PY_SPY_START_S = 1.0  # py-spy attaches to every worker before the rollout starts


@contextlib.contextmanager
def profiled(profile: Profile | None, gateway: Gateway, name: str) -> Iterator[None]:
    """py-spy over the block (`record --nonblocking`: it never pauses the gateway), its raw stacks (one line per
    stack with its sample count, `scripts/profile_breakdown.py` reads them) in `name.txt`."""
    if profile is None or gateway.key == REFERENCE:
        yield
        return
    output = profile.directory / f"{name}.txt"
    flag = "--gil" if profile.kind == "gil" else "--idle"
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(gateway.child.pid)]
    command += ["--subprocesses", "--nonblocking", flag, "--rate", str(profile.rate), "--format", "raw"]
    spy = subprocess.Popen([*command, "--output", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(PY_SPY_START_S)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
        _, err = spy.communicate(timeout=60)
        if spy.returncode not in (0, -signal.SIGINT) or not output.exists():
            raise BenchError(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace')[-500:]}")


async def rollout_once(
    gateway: Gateway,
    mode: str,
    run: int,
    rollout: Rollout,
    config: AgentLoopConfig,
    engine: Child,
    log: EngineLog,
    profile: Profile | None = None,
) -> Sample:
    """One rollout through `gateway` in `mode`, with the CPU both processes spent on it."""
    config = replace(config, model=gateway.model)
    client = await open_client(mode, gateway.base_url, request_fields(config))
    try:
        with profiled(profile, gateway, f"{gateway.key}-{mode}-{run}"):
            cpu_before = cpu_seconds(gateway.child.pid), cpu_seconds(engine.pid)
            record = await run_rollout(client, rollout, config, run, Progress(enabled=False))
            cpu_after = cpu_seconds(gateway.child.pid), cpu_seconds(engine.pid)
    finally:
        await client.close()
    turns = len(record.turns)
    return Sample(
        gateway=gateway.key,
        mode=mode,
        run=run,
        e2e_ms=record.e2e_ms,
        gateway_cpu_ms_per_turn=(cpu_after[0] - cpu_before[0]) * 1000.0 / turns,
        engine_cpu_ms_per_turn=(cpu_after[1] - cpu_before[1]) * 1000.0 / turns,
        turns=pair_turns(record.turns, await log.take()),
    )


async def warm_up(
    gateways: Sequence[Gateway], modes: Sequence[str], config: AgentLoopConfig, engine: Child, log: EngineLog
) -> dict[str, str]:
    """A 2-turn rollout per gateway and mode; what fails here is reported as not supported, not measured."""
    unsupported: dict[str, str] = {}
    warm = replace(config, turns=2, context_tokens=500, tool_ms=0.0, runs=1)
    for gateway in gateways:
        for mode in modes:
            try:
                await rollout_once(gateway, mode, 0, Rollout(turns=2, context_tokens=500), warm, engine, log)
            except Exception as exc:  # whatever a gateway does not support ends up in the report, named
                unsupported[f"{gateway.key} {mode}"] = f"{type(exc).__name__}: {exc}"[:300]
                await log.take()  # its requests, if any, belong to no measured turn
    return unsupported


async def compare(
    gateways: Sequence[Gateway], engine: Child, engine_url: str, args: argparse.Namespace, progress: Progress
) -> dict[str, Any]:
    config = AgentLoopConfig(
        turns=args.turns,
        context_tokens=args.context_tokens,
        tps=args.tps,
        tool_ms=args.tool_ms,
        modes=tuple(args.modes),
        runs=args.runs,
        upstream=engine_url,  # a fresh session message per rollout, so only the system prompt is a cached prefix
        prefill_us_per_token=args.prefill_us_per_token,
    )
    rollout = Rollout(turns=args.turns, context_tokens=args.context_tokens, chars_per_token=engine_chars_per_token())
    log = EngineLog(engine_url)
    profile = None
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        profile = Profile(Path(args.profile), args.profile_kind, args.profile_rate)
    try:
        progress.update("warm-up: 2 turns per gateway and mode", final=True)
        unsupported = await warm_up(gateways, args.modes, config, engine, log)
        samples: list[Sample] = []
        for run in range(args.runs):
            for mode in args.modes:
                shift = run % len(gateways)  # each round starts with another gateway: no one always goes first
                for gateway in [*gateways[shift:], *gateways[:shift]]:
                    if f"{gateway.key} {mode}" in unsupported:
                        continue
                    sample = await rollout_once(gateway, mode, run, rollout, config, engine, log, profile)
                    samples.append(sample)
                    progress.update(
                        f"run {run + 1}/{args.runs} {mode:<10} {gateway.label:<22} e2e {sample.e2e_ms / 1000:.2f} s "
                        f"overhead {sample.overhead_ms:.2f} ms",
                        final=True,
                    )
    finally:
        await log.close()
    return result_of(gateways, args, config, rollout, samples, unsupported)


def engine_chars_per_token() -> float:
    """Characters per token of the scenario's tool output in the engine's tokenizer (SmolLM2's), for sizing."""
    from hotloop.backends.local.gguf import smollm2_chat_format

    text = tool_text(424242, 40_000)
    return len(text) / max(1, len(smollm2_chat_format().tokenizer.encode(text)))


def result_of(
    gateways: Sequence[Gateway],
    args: argparse.Namespace,
    config: AgentLoopConfig,
    rollout: Rollout,
    samples: list[Sample],
    unsupported: dict[str, str],
) -> dict[str, Any]:
    summary: dict[str, dict[str, Any]] = {}
    ratios: dict[str, dict[str, Any]] = {}
    for gateway in gateways:
        for mode in args.modes:
            mine = [s for s in samples if s.gateway == gateway.key and s.mode == mode]
            if mine:
                summary[f"{gateway.key} {mode}"] = {"gateway": gateway.label, "mode": mode, **summarize(mine)}
            found = run_ratios(samples, gateway.key, mode) if gateway.key != REFERENCE else None
            if found is not None:
                ratios[f"{gateway.key} {mode}"] = {"gateway": gateway.label, "mode": mode, **found}
    return {
        "scenario": "compare-agentic-api",
        "config": {**asdict(config), "modes": list(config.modes), "chars_per_token": rollout.chars_per_token},
        "gateways": {g.key: g.label for g in gateways},
        "unsupported": unsupported,
        "summary": summary,
        "ratios": ratios,
        "samples": [asdict(sample) for sample in samples],
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| gateway | mode | turn ms | engine ms | **overhead ms** | own stages ms | e2e s | gateway CPU ms/turn "
        "| engine CPU ms/turn | cached |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["summary"].values():
        stages = "—" if row["gateway_stages_ms"] is None else f"{row['gateway_stages_ms']:.2f}"
        lines.append(
            f"| {row['gateway']} | {row['mode']} | {row['turn_ms']:.1f} | {row['engine_ms']:.1f} "
            f"| **{row['overhead_ms']:.2f}** | {stages} | {row['e2e_s']:.3f} | {row['gateway_cpu_ms_per_turn']:.2f} "
            f"| {row['engine_cpu_ms_per_turn']:.2f} | {row['cached_ratio']:.1%} |"
        )
    if result["ratios"]:
        lines += ["", f"| vs {LABELS[REFERENCE]} (median of per-round ratios) | mode | overhead | e2e | gateway CPU |"]
        lines.append("|---|---|---|---|---|")
        for row in result["ratios"].values():
            lines.append(
                f"| {row['gateway']} | {row['mode']} | {row['overhead']:.3f} | {row['e2e']:.3f} "
                f"| {row['gateway_cpu']:.3f} |"
            )
    for name, reason in result["unsupported"].items():
        lines.append(f"\n- not supported: {name}: {reason}")
    return "\n".join(lines)


def agentic_server(venv: Path) -> Path:
    """agentic-api's gateway binary in `venv`, pip-installed there first unless that version already is."""
    binary = venv / "bin" / "agentic-server"
    if _binary_version(binary) != f"agentic-server {AGENTIC_VERSION}":
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, f"agentic-api=={AGENTIC_VERSION}"], check=True)
    found = _binary_version(binary)
    if found != f"agentic-server {AGENTIC_VERSION}":
        raise BenchError(f"{binary} reports {found!r}, not agentic-server {AGENTIC_VERSION}")
    return binary


def _binary_version(binary: Path) -> str:
    if not binary.exists():
        return ""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


def start_engine(args: argparse.Namespace, work: Path) -> tuple[Child, str]:
    port = free_port()
    command = [str(Path(sys.executable).parent / "hotloop"), "sim-engine", "--port", str(port)]
    command += ["--model", ENGINE_MODEL, "--tps", str(args.tps)]
    command += ["--prefill-us-per-token", str(args.prefill_us_per_token)]
    command += ["--tool-calls", str(args.turns + 10)]  # a call every turn but the last (the client stops first)
    child = Child("sim-engine", command, work / "sim-engine.log", dict(os.environ), work)
    url = f"http://127.0.0.1:{port}"
    child.wait_ready(f"{url}/health")
    return child, url


def start_agentic(binary: Path, engine_url: str, work: Path) -> Gateway:
    """The Rust gateway itself, as `agentic-api serve --vllm-base-url URL` runs it, without the Python launcher in
    between; its home (config.toml) and SQLite store in the work directory."""
    port = free_port()
    home = work / "agentic-home"
    home.mkdir()
    env = {**os.environ, "AGENTIC_API_HOME": str(home)}
    env.pop("OPENAI_API_KEY", None)  # the engine needs no key; a key of the caller's must not leave this machine
    command = [str(binary), "--llm-api-base", engine_url, "--gateway-host", "127.0.0.1", "--gateway-port", str(port)]
    command += ["--db-url", f"sqlite://{home}/agentic_api.db", "--llm-ready-interval-s", "0.2"]
    child = Child("agentic-api", command, work / "agentic-api.log", env, home)
    child.wait_ready(f"http://127.0.0.1:{port}/health")
    return Gateway(REFERENCE, LABELS[REFERENCE], ENGINE_MODEL, f"http://127.0.0.1:{port}/v1", child)


def start_hotloop(key: str, engine_url: str, dialect: str, work: Path) -> Gateway:
    """`hotloop serve` with the engine as its one model: openai-chat, or tokens in `dialect`."""
    port = free_port()
    data = work / key
    data.mkdir()
    if key == "hotloop-chat":
        upstream: dict[str, Any] = {"backend": "openai-chat", "url": f"{engine_url}/v1"}
        label = LABELS[key]
    else:
        url = f"{engine_url}/v1" if dialect == "vllm" else engine_url  # sglang and llamacpp: the server's root
        upstream = {"backend": "tokens", "dialect": dialect, "url": url}
        label = f"hotloop tokens ({dialect})"
    upstream |= {"upstream_model": ENGINE_MODEL, "retries": 0}
    env = {
        **os.environ,
        "HOTLOOP_DATA_DIR": str(data),
        "HOTLOOP_MODELS": HOTLOOP_MODEL,
        "HOTLOOP_DEFAULT_MODEL": HOTLOOP_MODEL,
        "HOTLOOP_UPSTREAMS": json.dumps({HOTLOOP_MODEL: upstream}),
        "HOTLOOP_LOG_LEVEL": "warning",
        "HOTLOOP_WS_PING_INTERVAL_S": "0",  # no pings in the middle of a measurement
    }
    command = [str(Path(sys.executable).parent / "hotloop"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    child = Child(key, command, work / f"{key}.log", env, data)
    child.wait_ready(f"http://127.0.0.1:{port}/healthz")
    return Gateway(key, label, HOTLOOP_MODEL, f"http://127.0.0.1:{port}/v1", child)


def environment(binary: Path) -> dict[str, Any]:
    """The bench's own record (commit, dirty tree and the hash of its diff, machine, date), agentic-api's version
    and the load average before the measurement."""
    from hotloop.bench.report import environment as bench_environment

    return {**bench_environment(), "agentic_server": _binary_version(binary), "load_average_before": os.getloadavg()}


@contextlib.contextmanager
def stopped_at_exit() -> Iterator[contextlib.ExitStack]:
    """An ExitStack that also unwinds on SIGTERM and SIGHUP (Ctrl-C already raises KeyboardInterrupt)."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, leave) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with contextlib.ExitStack() as stack:
            yield stack
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> dict[str, Any]:
    progress = Progress(enabled=not args.quiet)
    with stopped_at_exit() as stack:
        work = Path(tempfile.mkdtemp(prefix="hotloop-vs-agentic-api-"))
        stack.callback(shutil.rmtree, work, True)
        venv = Path(args.venv).expanduser() if args.venv else work / "venv"
        progress.update(f"agentic-api {AGENTIC_VERSION} into {venv}", final=True)
        binary = agentic_server(venv)
        env = environment(binary)
        engine, engine_url = start_engine(args, work)
        stack.callback(engine.stop)
        gateways: list[Gateway] = []
        for key in args.gateways:
            if key == REFERENCE:
                gateways.append(start_agentic(binary, engine_url, work))
            else:
                gateways.append(start_hotloop(key, engine_url, args.dialect, work))
            stack.callback(gateways[-1].child.stop)
        try:
            result = asyncio.run(compare(gateways, engine, engine_url, args, progress))
        except BenchError:
            for child in [engine, *(g.child for g in gateways)]:
                print(f"--- {child.name} log ---\n{child.tail()}", file=sys.stderr)
            raise
        env["load_average_after"] = os.getloadavg()
        return {**result, "environment": env}


def _names(known: Sequence[str]) -> Any:
    def parse(raw: str) -> list[str]:
        names = [part.strip() for part in raw.split(",") if part.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(known)}")
        return names

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40, help="turns per rollout (all but the last call a tool)")
    parser.add_argument(
        "--context-tokens", type=int, default=80_000, help="context at the last turn (80k over 40 turns: ~2k a turn)"
    )
    parser.add_argument("--runs", type=int, default=3, help="measured rounds (each: every gateway in every mode)")
    parser.add_argument("--modes", type=_names(MODES), default=["ws", "http-chain", "http-full"], help="modes")
    parser.add_argument("--gateways", type=_names(GATEWAYS), default=list(GATEWAYS), help="gateways")
    parser.add_argument("--tps", type=float, default=1000.0, help="the engine's decode rate, tokens/s")
    parser.add_argument("--prefill-us-per-token", type=float, default=50.0, help="the engine's uncached prefill cost")
    parser.add_argument("--tool-ms", type=float, default=20.0, help="time each tool call takes (ms)")
    parser.add_argument("--dialect", choices=("vllm", "sglang", "llamacpp"), default="vllm", help="hotloop tokens")
    parser.add_argument("--venv", help="a virtualenv to keep agentic-api in (reused); default: a temporary one")
    parser.add_argument("--json", metavar="PATH", help="write the whole result (every turn) as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--profile", metavar="DIR", help="py-spy every measured hotloop rollout into DIR")
    parser.add_argument("--profile-kind", choices=("gil", "wall"), default="gil", help="py-spy's --gil or --idle")
    parser.add_argument("--profile-rate", type=int, default=1000, help="py-spy samples a second")
    args = parser.parse_args(argv)
    if REFERENCE not in args.gateways:
        parser.error(f"--gateways must include {REFERENCE}: the ratios are against it")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except (BenchError, OSError, subprocess.CalledProcessError) as exc:
        print(f"compare_agentic_api: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # every process it started is stopped by then (run's ExitStack)
        print("compare_agentic_api: interrupted", file=sys.stderr)
        return 130
    env = result["environment"]
    load = "/".join(f"{value:.2f}" for value in env["load_average_before"])
    dirty = f" + uncommitted diff {env['diff_sha256']}" if env.get("dirty") else ""
    print(f"{env['platform']}, {env['cpus']} CPUs, load average {load} before; commit {env['commit']}{dirty}\n")
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
