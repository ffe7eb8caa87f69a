"""A serving process settles its heap once started (transports/server.py `settle_heap`): what start-up left alive is
frozen out of the cycle collector's full collections, and the youngest generation is collected less often. Run in
a child process: freezing is process-wide, and the test process is not a server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# `hotloop serve`'s own path (cli.serve, one worker) on a thread; the heap's state once it has started, or before.
SERVE = """
import gc, json, sys, threading, time
from hotloop.cli import serve
from hotloop.config import Settings
own = sys.argv[2] == "serve"
before = (gc.get_freeze_count(), gc.get_threshold()[0])
settings = Settings(data_dir=sys.argv[1], models=["hotloop-sim"], default_model="hotloop-sim", port=0,
                    workers=1, log_level="warning")
if own:
    threading.Thread(target=serve, args=(settings,), daemon=True).start()
else:
    from hotloop.transports.server import ThreadedServer
    ThreadedServer(settings).start()
deadline = time.monotonic() + 60
while own and gc.get_freeze_count() == 0 and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)
print(json.dumps({"before": before, "after": (gc.get_freeze_count(), gc.get_threshold()[0])}))
sys.stdout.flush()
import os; os._exit(0)
"""


def heap(tmp_path: Path, how: str) -> dict[str, list[int]]:
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(tmp_path), how], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_hotloop_serve_freezes_its_start_up_heap(tmp_path: Path) -> None:
    state = heap(tmp_path, "serve")
    assert state["before"] == [0, 700]  # CPython's defaults
    frozen, young = state["after"]
    assert frozen > 10_000  # the modules, the models, the tokenizers' objects
    assert young == 10_000


def test_a_server_on_a_thread_of_another_process_leaves_its_heap_alone(tmp_path: Path) -> None:
    assert heap(tmp_path, "threaded")["after"] == [0, 700]  # the tests' and the benchmark's own servers
