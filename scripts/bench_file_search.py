"""file_search side by side in one run: hotloop on SQLite and on PostgreSQL, OGX 1.5.0 and agentic-api 0.9.0, on the
same files with the same embeddings (issue 39's targets; docs/benchmarks.md, "file_search").

A manual benchmark, never run in CI; neither peer is a dependency of hotloop. Each peer is pip-installed into a
throwaway virtualenv (a temporary directory, removed at the end, unless --ogx-venv / --agentic-venv name one to keep
and reuse). Everything runs as its own process on 127.0.0.1:

- **hotloop**, twice: `hotloop serve` on SQLite (its data directory) and on PostgreSQL (--pg-url, a schema of its
  own, dropped at the start and at the end). hotloop's defaults otherwise: hotloop-sim, its server workers (one per
  core), each with `file_search_workers` (1; --file-search-workers) ingestion processes, and the embedded WordLlama
  model (`wordllama-l2-supercat-256`, 256 dimensions).
- **OGX 1.5.0** (formerly llama-stack; `ogx run CONFIG --insecure`, on Python 3.12, which OGX requires: --ogx-python):
  files `inline::localfs`, file processor `inline::pypdf` (OGX's processor for text and PDF), vector_io
  `inline::faiss` (the starter distribution's default; `inline::sqlite-vec` needs SQLite's loadable extensions, which
  no Python >= 3.12 here is built with), inference `remote::openai` pointed at a third hotloop (`hotloop serve
  --file-search-workers 0`) whose POST /v1/embeddings serves the same embedded model; that model is registered as an
  OGX embedding model (256 dimensions) and is the vector stores' default. OGX's own settings otherwise (3 files at a
  time per batch, vector search). OGX cuts chunks in tiktoken's cl100k_base tokens, which tiktoken downloads on first
  use; nothing can be downloaded here, so the encoding file is taken from litellm's wheel (PyPI), which ships it, and
  handed to tiktoken through TIKTOKEN_CACHE_DIR (its sha256 checked).
- **agentic-api 0.9.0** has no Files, Vector Stores or Embeddings API, and a `file_search` tool in a request is
  dropped (its binary: "file_search tool skipped in normalize - handler not yet registered"). The script starts it in
  front of `hotloop sim-engine`, records what each of those endpoints answers and what a response offered
  `file_search` returns, and measures nothing else.

The corpus: Python's reference topics (`pydoc_data.topics`, one file each), then the stdlib's .py, .txt and .rst files
in path order (pydoc_data/topics.py left out: it is the topics), each a file of its own named `<path>.txt`, valid
UTF-8 of at least 200 bytes. Measured:

1. **Ingest**: the corpus's first --corpus-mb MB, uploaded by openai-python's `vector_stores.file_batches.
   upload_and_poll` into a fresh vector store with static chunking 800/400 (OpenAI's `auto`), timed from the batch's
   create request to the poll (every 100 ms) that sees it completed; MB/s of text = the files' bytes (10^6) / that.
2. **Search**: POST /v1/vector_stores/{id}/search (`max_num_results` 10) with the 45 questions of
   tests/filesearch_questions.py in turn, --searches of them after 5 unmeasured, on one keep-alive connection; p50
   and p99 in ms as the client sees them. OGX's include its call to hotloop's /v1/embeddings for the query, whose own
   p50 the report gives beside it.
3. **hotloop at ~100k chunks**: the whole corpus (~32 MB with CPython 3.11) with static chunking 100/0 (OpenAI's
   smallest chunks: 800/400 would give ~27k), one store on each of hotloop's stores, ingested once before the rounds
   (in batches of at most 2,000 files), then searched each round (--big-searches).

A round runs every system in turn, the first one changing from round to round; each round ingests into fresh stores
(deleted after their searches). hotloop / OGX ratios are taken within a round, then their median over rounds.
The report gives the 1-minute load average at each phase (the bench's own processes count in it) and the cores that
processes outside the bench used meanwhile (the machine's busy time less the bench's tree's).
--profile DIR records py-spy (--py-spy) over hotloop on SQLite, every process of the server (--subprocesses, its
ingestion processes included), as raw stacks: its ~100k-chunk ingest, its first round's ingest and its first round's
searches at ~100k chunks. Sampling slows what it samples: profile in a run of its own (e.g. --rounds 1 --no-ogx
--no-agentic --no-postgres), not the one whose figures are kept.

    .venv/bin/python scripts/bench_file_search.py --rounds 3 --json fs.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

import httpx
import openai
import psutil

from hotloop.bench.progress import Progress
from hotloop.bench.report import environment
from hotloop.bench.server_process import free_port, process_cpu_seconds
from hotloop.bench.stats import median, percentile, ratio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from compare_agentic_api import AGENTIC_VERSION, BenchError, Child, agentic_server, stopped_at_exit

from filesearch_questions import QUESTIONS

OGX_VERSION = "1.5.0"
OGX_PACKAGES = [f"ogx=={OGX_VERSION}", "faiss-cpu", "chardet", "pypdf>=6.16.2", "numpy"]  # OGX's faiss + pypdf deps
LITELLM_VERSION = "1.110.2"  # its wheel ships tiktoken's cl100k_base file
CL100K_MEMBER = "litellm/litellm_core_utils/tokenizers/9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
CL100K_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # sha1 of the encoding's URL: tiktoken's cache key
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"  # tiktoken's expected hash
EMBEDDING_MODEL = "wordllama-l2-supercat-256"
EMBEDDING_DIMS = 256
API_KEY = "bench-file-search"  # hotloop accepts any key without api_keys; a store belongs to the key that made it
AUTO: Any = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}
SMALL: Any = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}}
BATCH_MAX = 2000  # files in one batch (OpenAI's bound, and hotloop's)
MIN_BYTES = 200
WARMUP = 5
RESULTS = 10
POLL_MS = 100
QUERIES = [question for question, _ in QUESTIONS]
HOTLOOP_SYSTEMS = ("hotloop-sqlite", "hotloop-postgres")
SYSTEMS = (*HOTLOOP_SYSTEMS, "ogx")
LABELS = {
    "hotloop-sqlite": "hotloop (SQLite)",
    "hotloop-postgres": "hotloop (PostgreSQL)",
    "ogx": f"OGX {OGX_VERSION} (faiss)",
}


# -- the corpus ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    name: str
    data: bytes


def corpus() -> list[Doc]:
    """The topics, then the stdlib's text files in path order (see the docstring)."""
    docs = [Doc(f"pydoc_topics__{key}.txt", text.encode()) for key, text in sorted(topics.items())]
    lib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(lib.rglob("*")):
        rel = path.relative_to(lib)
        if path.suffix not in (".py", ".txt", ".rst") or "site-packages" in rel.parts or not path.is_file():
            continue
        if rel.as_posix() == "pydoc_data/topics.py":
            continue
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(data.strip()) < MIN_BYTES or b"\x00" in data:
            continue
        docs.append(Doc("__".join(rel.parts) + ".txt", data))
    return docs


def prefix(docs: Sequence[Doc], megabytes: float) -> list[Doc]:
    """The corpus's first files up to `megabytes` (10^6 bytes) of text."""
    chosen: list[Doc] = []
    total = 0
    for doc in docs:
        if total >= megabytes * 1e6:
            break
        chosen.append(doc)
        total += len(doc.data)
    return chosen


def megabytes(docs: Sequence[Doc]) -> float:
    return sum(len(doc.data) for doc in docs) / 1e6


# -- the systems -----------------------------------------------------------------------------------------------------


@dataclass
class System:
    key: str
    label: str
    child: Child
    base_url: str  # …/v1
    data_dir: Path | None = None  # hotloop on SQLite: where hotloop.db is
    pg_schema: str | None = None  # hotloop on PostgreSQL: its schema, and the database's URL
    pg_url: str | None = None
    http: httpx.Client = field(init=False)
    client: openai.OpenAI = field(init=False)
    batch_sent: list[float] = field(default_factory=list)  # when each file batch's create request went out

    def __post_init__(self) -> None:
        headers = {"authorization": f"Bearer {API_KEY}"}
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=120)

        def stamp(request: Any) -> None:
            if request.method == "POST" and request.url.path.endswith("/file_batches"):
                self.batch_sent.append(time.perf_counter())

        hooked = openai.DefaultHttpxClient(timeout=1800, event_hooks={"request": [stamp]})
        self.client = openai.OpenAI(base_url=self.base_url, api_key=API_KEY, http_client=hooked, max_retries=0)

    def close(self) -> None:
        self.http.close()
        self.client.close()


@dataclass
class Ingest:
    system: str
    round: int
    files: int
    megabytes: float
    seconds: float
    completed: int
    failed: int
    chunks: int | None  # hotloop's count, from its store
    chunking: Any  # what the system reports for one of its files

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds if self.seconds else math.nan


@dataclass
class Searches:
    system: str
    round: int
    store: str  # "corpus" or "100k"
    ms: list[float]
    empty: int  # searches that found nothing

    @property
    def p50(self) -> float:
        return percentile(self.ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.ms, 99)


def ingest(system: System, docs: Sequence[Doc], chunking: Any, name: str, rnd: int) -> tuple[str, Ingest]:
    """A fresh vector store of `docs`, by `file_batches.upload_and_poll` in batches of at most BATCH_MAX files; the
    time from each batch's create request to the poll that saw it done, summed."""
    store = system.client.vector_stores.create(name=name)
    seconds, completed, failed = 0.0, 0, 0
    for start in range(0, len(docs), BATCH_MAX):
        part = [(doc.name, doc.data) for doc in docs[start : start + BATCH_MAX]]
        system.batch_sent.clear()
        batch = system.client.vector_stores.file_batches.upload_and_poll(
            vector_store_id=store.id, files=part, poll_interval_ms=POLL_MS, chunking_strategy=chunking
        )
        done = time.perf_counter()
        if len(system.batch_sent) != 1:
            raise BenchError(f"{system.key}: expected one batch create, saw {len(system.batch_sent)}")
        seconds += done - system.batch_sent[0]
        completed += batch.file_counts.completed
        failed += batch.file_counts.failed + batch.file_counts.cancelled
    listed = system.client.vector_stores.files.list(vector_store_id=store.id, limit=1)
    strategy = listed.data[0].chunking_strategy if listed.data else None
    reported = strategy.model_dump() if strategy is not None else None
    record = Ingest(
        system.key, rnd, len(docs), megabytes(docs), seconds, completed, failed, chunk_count(system, store.id), reported
    )
    return store.id, record


def chunk_count(system: System, store_id: str) -> int | None:
    """The chunks hotloop stored for `store_id`, read from its store (None for a peer)."""
    if system.data_dir is not None:
        with contextlib.closing(sqlite3.connect(f"file:{system.data_dir / 'hotloop.db'}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT COUNT(*) FROM vector_store_chunks WHERE vector_store_id = ?", (store_id,))
            return int(row.fetchone()[0])
    if system.pg_schema is not None:
        query = f"SELECT COUNT(*) FROM {system.pg_schema}.vector_store_chunks WHERE vector_store_id = $1"
        return int(asyncio.run(_pg_value(system.pg_url or "", query, store_id)))
    return None


async def _pg_value(url: str, query: str, *args: Any) -> Any:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def _pg_execute(url: str, statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def search(system: System, store_id: str, count: int, offset: int, rnd: int, kind: str) -> Searches:
    """`count` searches of `store_id` after WARMUP unmeasured ones, the questions in turn from `offset`."""
    times: list[float] = []
    empty = 0
    for n in range(WARMUP + count):
        body = {"query": QUERIES[(offset + n) % len(QUERIES)], "max_num_results": RESULTS}
        started = time.perf_counter()
        reply = system.http.post(f"/vector_stores/{store_id}/search", json=body)
        elapsed = time.perf_counter() - started
        if reply.status_code != 200:
            raise BenchError(f"{system.key} search: {reply.status_code} {reply.text[:300]}")
        if n >= WARMUP:
            times.append(elapsed * 1e3)
            empty += not reply.json()["data"]
    return Searches(system.key, rnd, kind, times, empty)


def embedding_ms(http: httpx.Client, count: int, offset: int) -> list[float]:
    """What OGX's query embedding costs it: one question to hotloop's /v1/embeddings, as OGX asks for it."""
    times: list[float] = []
    for n in range(WARMUP + count):
        body = {"model": EMBEDDING_MODEL, "input": [QUERIES[(offset + n) % len(QUERIES)]], "dimensions": EMBEDDING_DIMS}
        started = time.perf_counter()
        reply = http.post("/embeddings", json=body)
        elapsed = time.perf_counter() - started
        reply.raise_for_status()
        if n >= WARMUP:
            times.append(elapsed * 1e3)
    return times


def delete_store(system: System, store_id: str) -> None:
    with contextlib.suppress(openai.APIError):
        system.client.vector_stores.delete(store_id)


# -- starting them ---------------------------------------------------------------------------------------------------


def hotloop_command() -> list[str]:
    return [str(Path(sys.executable).parent / "hotloop"), "serve", "--host", "127.0.0.1"]


def start_hotloop(key: str, work: Path, workers: int, store_url: str | None) -> tuple[Child, str, Path]:
    port = free_port()
    data = work / key
    data.mkdir()
    command = [*hotloop_command(), "--port", str(port), "--data-dir", str(data)]
    command += ["--models", "hotloop-sim", "--default-model", "hotloop-sim", "--file-search-workers", str(workers)]
    if store_url:
        command += ["--store-url", store_url]
    env = {**os.environ, "HOTLOOP_LOG_LEVEL": "warning"}
    child = Child(key, command, work / f"{key}.log", env, data)
    child.wait_ready(f"http://127.0.0.1:{port}/healthz")
    return child, f"http://127.0.0.1:{port}/v1", data


def find_python312(given: str | None) -> str:
    if given:
        return given
    # pyenv's shim is on PATH even where no 3.12 is selected (it then fails): the first one that runs.
    for candidate in [shutil.which("python3.12"), *sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))]:
        if candidate and subprocess.run([str(candidate), "-c", ""], capture_output=True).returncode == 0:
            return str(candidate)
    raise BenchError("OGX 1.5 needs Python >= 3.12: name one with --ogx-python")


def ogx_venv(venv: Path, python: str) -> Path:
    """OGX and the packages of its faiss and pypdf providers in `venv` (installed unless that version already is),
    and tiktoken's cl100k_base file from litellm's wheel in `venv`/tiktoken-cache. Returns the cache directory."""
    bin_python = venv / "bin" / "python"
    if _package_version(bin_python, "ogx") != OGX_VERSION:
        if not bin_python.exists():
            subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(bin_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *OGX_PACKAGES], check=True)
    if _package_version(bin_python, "ogx") != OGX_VERSION:
        raise BenchError(f"{venv} has no ogx {OGX_VERSION}")
    cache = venv / "tiktoken-cache"
    target = cache / CL100K_CACHE_NAME
    if not target.exists() or hashlib.sha256(target.read_bytes()).hexdigest() != CL100K_SHA256:
        cache.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            pip = [str(bin_python), "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
            subprocess.run([*pip, "-d", tmp, f"litellm=={LITELLM_VERSION}"], check=True)
            wheel = next(Path(tmp).glob("litellm-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                target.write_bytes(archive.read(CL100K_MEMBER))
        if hashlib.sha256(target.read_bytes()).hexdigest() != CL100K_SHA256:
            raise BenchError(f"litellm {LITELLM_VERSION}'s cl100k_base is not tiktoken's (sha256 differs)")
    return cache


def _package_version(python: Path, name: str) -> str:
    if not python.exists():
        return ""
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def ogx_config(work: Path, port: int, embeddings_url: str) -> str:
    """OGX's run config: the APIs file_search needs, faiss, and hotloop's embeddings as an OpenAI provider."""
    home = work / "ogx"
    return f"""version: 2
distro_name: hotloop-bench-file-search
apis: [files, file_processors, inference, vector_io]
providers:
  inference:
  - provider_id: hotloop
    provider_type: remote::openai
    config: {{base_url: "{embeddings_url}", api_key: unused}}
  vector_io:
  - provider_id: faiss
    provider_type: inline::faiss
    config: {{persistence: {{namespace: "vector_io::faiss", backend: kv_default}}}}
  files:
  - provider_id: localfs
    provider_type: inline::localfs
    config:
      storage_dir: {home}/files
      metadata_store: {{table_name: files_metadata, backend: sql_default}}
  file_processors:
  - provider_id: pypdf
    provider_type: inline::pypdf
storage:
  backends:
    kv_default: {{type: kv_sqlite, db_path: {home}/kvstore.db}}
    sql_default: {{type: sql_sqlite, db_path: {home}/sql_store.db}}
  stores:
    metadata: {{namespace: registry, backend: kv_default}}
    inference: {{table_name: inference_store, backend: sql_default}}
    conversations: {{table_name: openai_conversations, backend: sql_default}}
    prompts: {{table_name: prompts, backend: sql_default}}
registered_resources:
  models:
  - model_id: {EMBEDDING_MODEL}
    provider_id: hotloop
    provider_model_id: {EMBEDDING_MODEL}
    model_type: embedding
    metadata: {{embedding_dimension: {EMBEDDING_DIMS}}}
server:
  port: {port}
vector_stores:
  default_provider_id: faiss
  default_embedding_model: {{provider_id: hotloop, model_id: {EMBEDDING_MODEL}}}
"""


def start_ogx(venv: Path, cache: Path, work: Path, embeddings_url: str) -> tuple[Child, str, str]:
    port = free_port()
    (work / "ogx").mkdir()
    config_text = ogx_config(work, port, embeddings_url)
    config = work / "ogx" / "config.yaml"
    config.write_text(config_text)
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache), "HOME": str(work / "ogx")}
    env.pop("OPENAI_API_KEY", None)
    command = [str(venv / "bin" / "ogx"), "run", str(config), "--port", str(port), "--insecure"]
    child = Child("ogx", command, work / "ogx.log", env, work / "ogx")
    child.wait_ready(f"http://127.0.0.1:{port}/v1/health", timeout=300)
    return child, f"http://127.0.0.1:{port}/v1", config_text


def probe_agentic(venv: Path, work: Path) -> dict[str, Any]:
    """agentic-api in front of `hotloop sim-engine`: what its Files, Vector Stores and Embeddings endpoints answer,
    and what a response offered file_search returns."""
    binary = agentic_server(venv)
    engine_port, port = free_port(), free_port()
    engine_cmd = [str(Path(sys.executable).parent / "hotloop"), "sim-engine", "--port", str(engine_port)]
    engine = Child(
        "sim-engine", [*engine_cmd, "--model", "sim-engine"], work / "sim-engine.log", dict(os.environ), work
    )
    home = work / "agentic-home"
    home.mkdir()
    env = {**os.environ, "AGENTIC_API_HOME": str(home), "RUST_LOG": "debug"}
    env.pop("OPENAI_API_KEY", None)
    command = [str(binary), "--llm-api-base", f"http://127.0.0.1:{engine_port}", "--gateway-host", "127.0.0.1"]
    command += [
        "--gateway-port",
        str(port),
        "--db-url",
        f"sqlite://{home}/agentic_api.db",
        "--llm-ready-interval-s",
        "0.2",
    ]
    try:
        engine.wait_ready(f"http://127.0.0.1:{engine_port}/health")
        child = Child("agentic-api", command, work / "agentic-api.log", env, home)
        try:
            child.wait_ready(f"http://127.0.0.1:{port}/health")
            found: dict[str, Any] = {"version": _binary_version(binary)}
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
                calls: list[tuple[str, str, dict[str, Any]]] = [
                    ("GET", "/v1/files", {}),
                    ("POST", "/v1/files", {"files": {"file": ("a.txt", b"hello")}, "data": {"purpose": "assistants"}}),
                    ("GET", "/v1/vector_stores", {}),
                    ("POST", "/v1/vector_stores", {"json": {"name": "x"}}),
                    ("POST", "/v1/vector_stores/vs_x/search", {"json": {"query": "loop"}}),
                    ("POST", "/v1/embeddings", {"json": {"model": EMBEDDING_MODEL, "input": "loop"}}),
                ]
                found["endpoints"] = {f"{m} {p}": http.request(m, p, **kw).status_code for m, p, kw in calls}
                body = {
                    "model": "sim-engine",
                    "input": "How do I leave a loop before it has finished?",
                    "tools": [{"type": "file_search", "vector_store_ids": ["vs_does_not_exist"]}],
                }
                reply = http.post("/v1/responses", json=body)
                found["response_status"] = reply.status_code
                if reply.status_code == 200:
                    data = reply.json()
                    found["response"] = {
                        "status": data.get("status"),
                        "output_types": [item.get("type") for item in data.get("output", [])],
                        "tools_echoed": data.get("tools"),
                    }
            time.sleep(0.3)
            log = re.sub(r"\x1b\[[0-9;]*m", "", child.log.read_text(errors="replace"))  # its colours out
            found["log_lines"] = [line.strip()[-200:] for line in log.splitlines() if "file_search" in line][:5]
            return found
        finally:
            child.stop()
    finally:
        engine.stop()


def _binary_version(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip()


# -- py-spy ----------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def profiled(py_spy: str | None, directory: Path | None, child: Child, name: str) -> Iterator[None]:
    """py-spy over the block, every process of the server (its ingestion worker included), raw stacks in name.txt."""
    if py_spy is None or directory is None:
        yield
        return
    output = directory / f"{name}.txt"
    command = [py_spy, "record", "--pid", str(child.pid), "--subprocesses", "--nonblocking", "--rate", "200"]
    spy = subprocess.Popen([*command, "--format", "raw", "--output", str(output)], stderr=subprocess.PIPE)
    time.sleep(1.0)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        _, err = spy.communicate(timeout=120)
        if not output.exists():
            raise BenchError(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace')[-500:]}")


# -- the run ---------------------------------------------------------------------------------------------------------


class OtherCpu:
    """What processes outside this bench's tree used of the machine meanwhile: its busy CPU time (every core) less
    this process's and its live descendants' (the servers, their workers), in cores on average since `mark`. The
    1-minute load average counts the bench's own processes too; this does not."""

    def __init__(self) -> None:
        self.mark()

    def mark(self) -> None:
        self.start = self._now()

    def cores(self) -> float:
        (t0, busy0, ours0), (t1, busy1, ours1) = self.start, self._now()
        return max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (t1 - t0) if t1 > t0 else math.nan

    @staticmethod
    def _now() -> tuple[float, float, float]:
        times = psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
        me = psutil.Process()
        ours = sum(me.cpu_times()[2:4])  # the children it waited for
        for process in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                ours += process_cpu_seconds(process)
        return time.monotonic(), busy, ours


def rotated(items: Sequence[str], by: int) -> list[str]:
    shift = by % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def run(args: argparse.Namespace) -> dict[str, Any]:
    progress = Progress(enabled=not args.quiet)
    docs = corpus()
    small = prefix(docs, args.corpus_mb)
    progress.update(
        f"corpus: {len(docs)} files, {megabytes(docs):.1f} MB; the ingest corpus: {len(small)} files, "
        f"{megabytes(small):.2f} MB",
        final=True,
    )
    result: dict[str, Any] = {
        "scenario": "file-search",
        "config": {
            "rounds": args.rounds,
            "searches": args.searches,
            "big_searches": args.big_searches,
            "corpus_files": len(small),
            "corpus_mb": megabytes(small),
            "big_files": len(docs),
            "big_mb": megabytes(docs),
            "chunking": AUTO,
            "big_chunking": SMALL,
            "file_search_workers": args.file_search_workers,
            "pg_url": args.pg_url,
        },
        "environment": environment(),  # at the start: the servers run the code they started with
        "load_average": {"start": os.getloadavg()},
        "other_cpu_cores": {},
        "unsupported": {},
    }
    ingests: list[Ingest] = []
    searches: list[Searches] = []
    embeddings: list[list[float]] = []
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir:
        profile_dir.mkdir(parents=True, exist_ok=True)
    with stopped_at_exit() as stack:
        work = Path(tempfile.mkdtemp(prefix="hotloop-bench-file-search-"))
        stack.callback(shutil.rmtree, work, True)

        # agentic-api first: a probe, then it is gone before anything is timed
        if not args.no_agentic:
            venv = Path(args.agentic_venv).expanduser() if args.agentic_venv else work / "agentic-venv"
            progress.update(f"agentic-api {AGENTIC_VERSION} into {venv}: probing its file_search", final=True)
            try:
                probe = probe_agentic(venv, work)
            except (BenchError, OSError, subprocess.CalledProcessError, httpx.HTTPError) as exc:
                probe = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            result["agentic_api"] = probe
            result["unsupported"]["agentic-api"] = agentic_reason(probe)

        systems: dict[str, System] = {}
        pg_url, schema = with_schema(args.pg_url, args.pg_schema)
        if not args.no_postgres:
            asyncio.run(_pg_execute(args.pg_url.split("?")[0], f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            stack.callback(drop_schema, args.pg_url.split("?")[0], schema)
        for key in HOTLOOP_SYSTEMS:
            if key == "hotloop-postgres" and args.no_postgres:
                continue
            url = pg_url if key == "hotloop-postgres" else None
            child, base, data = start_hotloop(key, work, args.file_search_workers, url)
            stack.callback(child.stop)
            system = System(key, LABELS[key], child, base, data_dir=data if url is None else None)
            if url is not None:
                system.pg_schema, system.pg_url = schema, args.pg_url.split("?")[0]
            stack.callback(system.close)
            systems[key] = system

        embed_http: httpx.Client | None = None
        if not args.no_ogx:
            venv = Path(args.ogx_venv).expanduser() if args.ogx_venv else work / "ogx-venv"
            progress.update(f"OGX {OGX_VERSION} into {venv}", final=True)
            try:
                cache = ogx_venv(venv, find_python312(args.ogx_python))
                emb_child, emb_base, _ = start_hotloop("hotloop-embeddings", work, 0, None)
                stack.callback(emb_child.stop)
                embed_http = httpx.Client(base_url=emb_base, timeout=60)
                stack.callback(embed_http.close)
                ogx_child, ogx_base, config_text = start_ogx(venv, cache, work, emb_base)
                stack.callback(ogx_child.stop)
                systems["ogx"] = System("ogx", LABELS["ogx"], ogx_child, ogx_base)
                stack.callback(systems["ogx"].close)
                result["ogx_config"] = config_text.replace(str(work), "$WORK")
            except (BenchError, OSError, subprocess.CalledProcessError) as exc:
                result["unsupported"]["ogx"] = f"{type(exc).__name__}: {exc}"[:800]
                progress.update(f"OGX not measured: {result['unsupported']['ogx']}", final=True)

        try:
            # hotloop at ~100k chunks: one store each, ingested once
            big: dict[str, str] = {}
            others = OtherCpu()
            if not args.no_big:
                for key in [k for k in HOTLOOP_SYSTEMS if k in systems]:
                    system = systems[key]
                    result["load_average"][f"before big ingest {key}"] = os.getloadavg()
                    name = f"profile-ingest-100k-{key}"
                    with profiled(args.py_spy, profile_dir if key == "hotloop-sqlite" else None, system.child, name):
                        store_id, record = ingest(system, docs, SMALL, "corpus-100k", -1)
                    big[key] = store_id
                    ingests.append(record)
                    result["other_cpu_cores"][f"big ingest {key}"] = others.cores()
                    others.mark()
                    progress.update(
                        f"{system.label}: ~100k store, {record.chunks} chunks, ingest {record.seconds:.1f} s "
                        f"({record.mb_per_s:.2f} MB/s), {record.failed} failed",
                        final=True,
                    )
            for rnd in range(args.rounds):
                result["load_average"][f"round {rnd + 1}"] = os.getloadavg()
                others.mark()
                for key in rotated([k for k in SYSTEMS if k in systems], rnd):
                    system = systems[key]
                    first = rnd == 0 and key == "hotloop-sqlite"
                    with profiled(args.py_spy, profile_dir if first else None, system.child, "profile-ingest"):
                        store_id, record = ingest(system, small, AUTO, f"corpus-round-{rnd}", rnd)
                    ingests.append(record)
                    found = search(system, store_id, args.searches, rnd * 7, rnd, "corpus")
                    searches.append(found)
                    delete_store(system, store_id)
                    progress.update(
                        f"round {rnd + 1}/{args.rounds} {system.label:<22} ingest {record.seconds:6.2f} s "
                        f"({record.mb_per_s:.2f} MB/s, {record.completed} done, {record.failed} failed)  search p50 "
                        f"{found.p50:.2f} ms p99 {found.p99:.2f} ms",
                        final=True,
                    )
                    if key == "ogx" and embed_http is not None:
                        embeddings.append(embedding_ms(embed_http, args.searches, rnd * 7))
                for key in rotated(list(big), rnd):
                    system = systems[key]
                    first = rnd == 0 and key == "hotloop-sqlite"
                    with profiled(args.py_spy, profile_dir if first else None, system.child, "profile-search-100k"):
                        found = search(system, big[key], args.big_searches, rnd * 11, rnd, "100k")
                    searches.append(found)
                    progress.update(
                        f"round {rnd + 1}/{args.rounds} {system.label:<22} ~100k chunks: search p50 {found.p50:.2f} "
                        f"ms p99 {found.p99:.2f} ms",
                        final=True,
                    )
                result["other_cpu_cores"][f"round {rnd + 1}"] = others.cores()
        except (BenchError, openai.APIError, httpx.HTTPError):
            for system in systems.values():
                print(f"--- {system.key} log ---\n{system.child.tail()}", file=sys.stderr)
            raise
        result["load_average"]["end"] = os.getloadavg()
    result["ingests"] = [{**asdict(i), "mb_per_s": i.mb_per_s} for i in ingests]
    result["searches"] = [{**asdict(s), "p50": s.p50, "p99": s.p99} for s in searches]
    result["embeddings_ms"] = embeddings
    result["summary"] = summarize(ingests, searches, embeddings)
    commit_after = environment()["commit"]
    if commit_after != result["environment"]["commit"]:
        result["environment"]["commit_at_end"] = commit_after
    return result


def with_schema(url: str, schema: str) -> tuple[str, str]:
    base = url.split("?")[0]
    return f"{base}?schema={schema}", schema


def drop_schema(url: str, schema: str) -> None:
    with contextlib.suppress(Exception):
        asyncio.run(_pg_execute(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE"))


def agentic_reason(probe: dict[str, Any]) -> str:
    if "error" in probe:
        return probe["error"]
    codes = ", ".join(f"{name} {code}" for name, code in probe["endpoints"].items())
    response = probe.get("response") or {}
    return (
        f"{probe.get('version')}: {codes}; a response with a file_search tool: HTTP {probe.get('response_status')}, "
        f"status {response.get('status')}, output {response.get('output_types')} (no file_search_call)"
    )


# -- the report ------------------------------------------------------------------------------------------------------


def summarize(ingests: Sequence[Ingest], searches: Sequence[Searches], embeddings: Sequence[list[float]]) -> dict:
    rows: dict[str, dict[str, Any]] = {}
    for key in SYSTEMS:
        mine = [i for i in ingests if i.system == key and i.round >= 0]
        found = [s for s in searches if s.system == key and s.store == "corpus"]
        if not mine:
            continue
        rows[key] = {
            "label": LABELS[key],
            "rounds": len(mine),
            "files": mine[0].files,
            "megabytes": mine[0].megabytes,
            "ingest_s": median(i.seconds for i in mine),
            "mb_per_s": median(i.mb_per_s for i in mine),
            "failed": max(i.failed for i in mine),
            "chunks": mine[0].chunks,
            "chunking": mine[0].chunking,
            "search_p50_ms": median(s.p50 for s in found),
            "search_p99_ms": median(s.p99 for s in found),
            "search_p99_pooled_ms": percentile([ms for s in found for ms in s.ms], 99),
            "empty": sum(s.empty for s in found),
        }
    big: dict[str, dict[str, Any]] = {}
    for key in HOTLOOP_SYSTEMS:
        mine = [i for i in ingests if i.system == key and i.round < 0]
        found = [s for s in searches if s.system == key and s.store == "100k"]
        if not mine:
            continue
        big[key] = {
            "label": LABELS[key],
            "files": mine[0].files,
            "megabytes": mine[0].megabytes,
            "chunks": mine[0].chunks,
            "ingest_s": mine[0].seconds,
            "mb_per_s": mine[0].mb_per_s,
            "failed": mine[0].failed,
            "search_p50_ms": median(s.p50 for s in found),
            "search_p99_ms": median(s.p99 for s in found),
            "search_p99_pooled_ms": percentile([ms for s in found for ms in s.ms], 99),
            "rounds": len(found),
        }
    ratios: dict[str, dict[str, float]] = {}
    for key in HOTLOOP_SYSTEMS:
        per_round: dict[str, list[float]] = {"ingest": [], "search_p50": []}
        for rnd in {i.round for i in ingests if i.round >= 0}:
            mine = [i for i in ingests if i.system == key and i.round == rnd]
            theirs = [i for i in ingests if i.system == "ogx" and i.round == rnd]
            my_s = [s for s in searches if s.system == key and s.round == rnd and s.store == "corpus"]
            their_s = [s for s in searches if s.system == "ogx" and s.round == rnd and s.store == "corpus"]
            if mine and theirs and my_s and their_s:
                per_round["ingest"].append(ratio(mine[0].seconds, theirs[0].seconds))
                per_round["search_p50"].append(ratio(my_s[0].p50, their_s[0].p50))
        if per_round["ingest"]:
            ratios[key] = {name: median(values) for name, values in per_round.items()}
    pooled = [ms for run in embeddings for ms in run]
    return {
        "corpus": rows,
        "big": big,
        "ratios_vs_ogx": ratios,
        "ogx_query_embedding_p50_ms": median(percentile(run, 50) for run in embeddings) if embeddings else None,
        "ogx_query_embedding_p99_ms": percentile(pooled, 99) if pooled else None,
    }


def verdict(value: float | None, limit: float, at_most: bool = True) -> str:
    if value is None or math.isnan(value):
        return "not measured"
    return "met" if (value <= limit if at_most else value >= limit) else "**missed**"


def markdown(result: dict[str, Any]) -> str:
    summary = result["summary"]
    config = result["config"]
    lines = [
        f"Ingest corpus: {config['corpus_files']} files, {config['corpus_mb']:.2f} MB, static 800/400; "
        f"medians of {config['rounds']} rounds, {config['searches']} searches each.",
        "",
        "| system | ingest s | MB/s | files failed | chunks | search p50 ms | search p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary["corpus"].values():
        chunks = "—" if row["chunks"] is None else str(row["chunks"])
        lines.append(
            f"| {row['label']} | {row['ingest_s']:.2f} | {row['mb_per_s']:.2f} | {row['failed']} | {chunks} "
            f"| {row['search_p50_ms']:.2f} | {row['search_p99_ms']:.2f} |"
        )
    emb = summary["ogx_query_embedding_p50_ms"]
    if emb is not None:
        lines.append(f"\nOGX's query embedding (hotloop's /v1/embeddings, one question): p50 {emb:.2f} ms.")
    if summary["ratios_vs_ogx"]:
        lines += ["", "| hotloop / OGX (median of per-round ratios) | ingest time | search p50 |", "|---|---|---|"]
        for key, row in summary["ratios_vs_ogx"].items():
            lines.append(f"| {LABELS[key]} | {row['ingest']:.3f} | {row['search_p50']:.3f} |")
    if summary["big"]:
        lines += [
            "",
            f"hotloop at ~100k chunks: {config['big_files']} files, {config['big_mb']:.1f} MB, static 100/0; "
            f"{config['big_searches']} searches a round.",
            "",
            "| system | chunks | ingest s | MB/s | files failed | search p50 ms | search p99 ms | p99 of all |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in summary["big"].values():
            lines.append(
                f"| {row['label']} | {row['chunks']} | {row['ingest_s']:.1f} | {row['mb_per_s']:.2f} | {row['failed']} "
                f"| {row['search_p50_ms']:.2f} | {row['search_p99_ms']:.2f} | {row['search_p99_pooled_ms']:.2f} |"
            )
    lines += ["", "Targets:"]
    for key, row in summary["corpus"].items():
        if key in HOTLOOP_SYSTEMS:
            lines.append(
                f"- {row['label']} ingest >= 2 MB/s: {row['mb_per_s']:.2f}, {verdict(row['mb_per_s'], 2, False)}"
            )
    for row in summary["big"].values():
        lines.append(
            f"- {row['label']} search p99 <= 20 ms at {row['chunks']} chunks: {row['search_p99_ms']:.2f}, "
            f"{verdict(row['search_p99_ms'], 20)}"
        )
    for key, row in summary["ratios_vs_ogx"].items():
        lines.append(f"- {LABELS[key]} ingest <= 0.5x OGX's: {row['ingest']:.3f}, {verdict(row['ingest'], 0.5)}")
        lines.append(
            f"- {LABELS[key]} search p50 <= 0.5x OGX's: {row['search_p50']:.3f}, {verdict(row['search_p50'], 0.5)}"
        )
    for name, reason in result["unsupported"].items():
        lines.append(f"\n- not measured: {name}: {reason}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (each: every system in turn)")
    parser.add_argument("--corpus-mb", type=float, default=4.0, help="MB of text ingested each round")
    parser.add_argument("--searches", type=int, default=100, help="searches of the ingested store a round")
    parser.add_argument("--big-searches", type=int, default=200, help="searches of the ~100k-chunk stores a round")
    parser.add_argument("--file-search-workers", type=int, default=1, help="hotloop's ingestion processes")
    parser.add_argument("--pg-url", default="postgresql://root@127.0.0.1:5432/test", help="PostgreSQL for hotloop")
    parser.add_argument("--pg-schema", default="benchfs", help="hotloop's schema there (dropped at start and end)")
    parser.add_argument("--ogx-venv", help="a virtualenv to keep OGX in (reused); default: a temporary one")
    parser.add_argument("--ogx-python", help="the Python (>= 3.12) for OGX's virtualenv; default: python3.12 found")
    parser.add_argument("--agentic-venv", help="a virtualenv to keep agentic-api in (reused); default: a temporary one")
    parser.add_argument("--no-ogx", action="store_true", help="leave OGX out")
    parser.add_argument("--no-agentic", action="store_true", help="leave agentic-api's probe out")
    parser.add_argument("--no-postgres", action="store_true", help="hotloop on SQLite only")
    parser.add_argument("--no-big", action="store_true", help="leave the ~100k-chunk stores out")
    parser.add_argument("--profile", metavar="DIR", help="py-spy over hotloop on SQLite (see above) into DIR")
    parser.add_argument("--py-spy", default=shutil.which("py-spy"), help="the py-spy binary for --profile")
    parser.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.profile and not args.py_spy:
        parser.error("--profile needs py-spy: --py-spy PATH")
    if not args.pg_schema.isidentifier() or not args.pg_schema.islower():
        parser.error("--pg-schema: lower-case letters, digits and underscores")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = run(args)
    except (BenchError, OSError, subprocess.CalledProcessError, openai.APIError, httpx.HTTPError) as exc:
        print(f"bench_file_search: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench_file_search: interrupted", file=sys.stderr)
        return 130
    env = result["environment"]
    loads = result["load_average"]
    dirty = f" + uncommitted diff {env['diff_sha256']}" if env.get("dirty") else ""
    load = ", ".join(f"{name} {values[0]:.2f}" for name, values in loads.items())
    moved = f" (HEAD moved to {env['commit_at_end']} meanwhile)" if env.get("commit_at_end") else ""
    other = ", ".join(f"{name} {cores:.2f}" for name, cores in result["other_cpu_cores"].items())
    print(f"\n{env['platform']}, {env['cpus']} CPUs; commit {env['commit']}{dirty}{moved}; 1-min load average: {load}")
    print(f"cores used by processes outside the bench: {other}\n")
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
