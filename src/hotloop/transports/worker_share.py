"""What a worker of `hotloop serve --workers N` shares with the other workers (transports/workers.py): the
directory its supervisor made, named in the worker's environment with the worker's place.

Its own module, importing neither the server nor the app, so that the app (transports/app.py) reads it at start-up
without importing the supervisor, which starts each worker's server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

SHARE_ENV = "HOTLOOP_WORKER_SHARE"  # the directory the workers share
INDEX_ENV = "HOTLOOP_WORKER_INDEX"  # this worker's place, 0 to workers - 1 (a restarted worker takes its own)
LIMITS_FILE = "limits"  # the limit table's file in that directory (pipeline/state/shared_limits.py)


class WorkerShare(NamedTuple):
    limits: Path  # the limit table's file
    worker: int


def worker_share() -> WorkerShare | None:
    """What this process shares with the other workers; None outside a supervisor."""
    share, index = os.environ.get(SHARE_ENV), os.environ.get(INDEX_ENV)
    if not share or index is None:
        return None
    return WorkerShare(Path(share) / LIMITS_FILE, int(index))
