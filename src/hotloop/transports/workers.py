"""`hotloop serve --workers N`: a supervisor binds the port once and runs N worker processes that accept on it.

Each worker is a whole hotloop server (its own event loop, caches, store connection and ledger) started as
`python -m hotloop.transports.workers`; the resolved settings travel as JSON on its stdin (API keys stay out of
its environment) and the listening socket as an inherited file descriptor. Workers share state only through the
store, so a chain begun on one continues on another, and through the data_dir secret, which the supervisor creates
before any worker starts so that every worker signs and opens `encrypted_content` with the same key.

Metrics and admission limits are the server's, not a worker's (docs/metrics.md, docs/operations.md): the supervisor
makes a directory the workers share for as long as it runs, with prometheus_client's multiprocess files (every
scrape merges all workers') and the limit table (pipeline/state/shared_limits.py) every worker counts in. A worker
that dies leaves its counters in the totals; the supervisor drops its live gauges and gives back its connections.

The supervisor restarts a worker that dies, stops everything when a worker cannot start (a bad store URL fails
the same way every time), and on SIGTERM or SIGINT sends SIGTERM to every worker (each drains like a
single-process server) and waits for them. Workers run in their own session, so a terminal's Ctrl-C reaches only
the supervisor, and the kernel sends them SIGTERM if the supervisor itself is killed.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

from hotloop.config import Settings, available_cores
from hotloop.observability.metrics import SHARED_DIR_ENV
from hotloop.pipeline.state.shared_limits import LimitTable
from hotloop.transports.worker_share import INDEX_ENV, LIMITS_FILE, SHARE_ENV

log = logging.getLogger("hotloop.workers")

SOCKET_ENV = "HOTLOOP_WORKER_SOCKET_FD"
PARENT_ENV = "HOTLOOP_WORKER_PARENT_PID"
STARTUP_FAILURE = 3  # a worker's exit code when its server never started (uvicorn uses the same)
# Beyond shutdown_grace_s, before a worker that has not exited is killed: its drain's own waits, the ledger's
# drain (up to 30 s when the store is slow) and some slack.
STOP_MARGIN_S = 60.0
# The supervisor sleeps until a signal wakes it (SIGCHLD when a worker exits, SIGTERM or SIGINT), and looks at its
# workers at least this often anyway: an idle supervisor costs next to nothing.
WATCH_S = 5.0


def bind_socket(settings: Settings, backlog: int = 2048) -> socket.socket:
    """The one listening socket every worker accepts on; binding here makes a busy port fail at once."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError:
        sock.close()
        raise
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def ingestion_shares(total: int, workers: int) -> list[int]:
    """file_search's ingestion processes are the replica's, not each worker's: `total` shared out over the workers
    (each worker reads and writes its own processes' files, so the work on the store spreads too)."""
    return [total // workers + (index < total % workers) for index in range(workers)]


class Supervisor:
    def __init__(self, settings: Settings, sock: socket.socket) -> None:
        self.settings = settings
        self.sock = sock
        self.stopping = threading.Event()
        self.wake = threading.Event()  # set by the signal handlers: look at the workers now
        self.workers: list[subprocess.Popen[bytes]] = []
        self.share = Path(tempfile.mkdtemp(prefix="hotloop-workers-"))
        self.metrics_dir = self.share / "metrics"
        self.metrics_dir.mkdir()
        LimitTable.create(self.share / LIMITS_FILE, settings.workers)
        self.limits = LimitTable(self.share / LIMITS_FILE, 0)
        # llama.cpp's default of every core per process would have N workers fight over the cores: each gets its share.
        threads = settings.llama_threads or max(1, available_cores() // settings.workers)
        one = msgspec.structs.replace(settings, workers=1, llama_threads=threads)
        self._settings_json = [
            msgspec.json.encode(msgspec.structs.replace(one, file_search_workers=share))
            for share in ingestion_shares(settings.file_search_workers, settings.workers)
        ]
        self._env = {
            **os.environ,
            SOCKET_ENV: str(sock.fileno()),
            PARENT_ENV: str(os.getpid()),
            SHARE_ENV: str(self.share),
            SHARED_DIR_ENV: str(self.metrics_dir),
            # libuv accepts every pending connection in one go; one at a time spreads a burst over the workers.
            "UV_TCP_SINGLE_ACCEPT": "1",
        }

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "hotloop.transports.workers"]
        env = {**self._env, INDEX_ENV: str(index)}
        # Own session: a terminal's SIGINT goes to the supervisor only, which then stops the workers in order.
        worker = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, pass_fds=(self.sock.fileno(),), start_new_session=True
        )
        assert worker.stdin is not None
        with worker.stdin:
            try:
                worker.stdin.write(self._settings_json[index])
            except BrokenPipeError:  # it died at once; the watch loop sees its exit status
                pass
        return worker

    def run(self) -> int:
        """Start the workers and keep them running until a signal; the exit code of `hotloop serve`."""
        self.workers = [self._spawn(index) for index in range(self.settings.workers)]
        host, port = self.sock.getsockname()[:2]
        pids = ", ".join(str(worker.pid) for worker in self.workers)
        log.info("%d workers (%s) on http://%s:%s", len(self.workers), pids, host, port)
        code = 0
        while not self.stopping.is_set():
            self.wake.wait(WATCH_S)
            self.wake.clear()
            if self.stopping.is_set():
                break
            code = self._watch()
            if code:
                break
        self._stop_all()
        return code

    def _watch(self) -> int:
        """Restart each worker that died; a worker that could not start stops everything (exit code 1)."""
        for index, worker in enumerate(self.workers):
            status = worker.poll()
            if status is None or self.stopping.is_set():
                continue
            if status == STARTUP_FAILURE:
                log.error("worker %d failed to start; stopping", worker.pid)
                return 1
            log.warning("worker %d exited (%d); restarting it", worker.pid, status)
            self._forget(index, worker.pid)
            self.workers[index] = self._spawn(index)
        return 0

    def _forget(self, index: int, pid: int) -> None:
        """A dead worker's open connections and live gauges leave the totals; its counters stay in them."""
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, str(self.metrics_dir))
        self.limits.release_worker(index)

    def _stop_all(self) -> None:
        # Our copy of the socket would keep it listening while the workers drain: new connections would wait in
        # the backlog for nobody. Closed everywhere, the port refuses them and clients go elsewhere.
        self.sock.close()
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.shutdown_grace_s + STOP_MARGIN_S
        for worker in self.workers:
            try:
                worker.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d did not stop; killing it", worker.pid)
                worker.kill()
                worker.wait()
        self.limits.close()
        shutil.rmtree(self.share, ignore_errors=True)


def run_workers(settings: Settings) -> int:
    """`hotloop serve` with `workers` > 1."""
    import logging.config

    from hotloop.observability.logs import logging_config
    from hotloop.sealing import load_secret

    logging.config.dictConfig(logging_config(settings))  # the workers' format: plain text or JSON lines
    load_secret(
        settings.resolved_data_dir(), settings.secret_key_file
    )  # before any worker exists: they all read this one key
    sock = bind_socket(settings)
    supervisor = Supervisor(settings, sock)

    def stop(signum: int, frame: object) -> None:
        supervisor.stopping.set()
        supervisor.wake.set()

    def child_exited(signum: int, frame: object) -> None:
        supervisor.wake.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGCHLD, child_exited)
    return supervisor.run()


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGTERM this worker when the supervisor dies, even by SIGKILL (Linux only)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def worker_main() -> int:
    """One worker: the single-process server on the inherited socket."""
    from hotloop.transports.server import Server, server_config

    _die_with_parent(int(os.environ[PARENT_ENV]))
    sock = socket.socket(fileno=int(os.environ[SOCKET_ENV]))
    try:
        settings = msgspec.json.decode(sys.stdin.buffer.read(), type=Settings)
        server = Server(server_config(settings), own_process=True)  # as a single-process server
    except Exception:
        log.exception("worker could not be configured")
        return STARTUP_FAILURE
    server.run(sockets=[sock])
    return 0 if server.started else STARTUP_FAILURE


if __name__ == "__main__":
    sys.exit(worker_main())
