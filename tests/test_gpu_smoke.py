"""scripts/gpu-smoke.sh, rehearsed on the CPU: the same steps against `hotloop sim-engine` instead of vLLM on a GPU
(the GPU path itself cannot run in CI: there is no GPU)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from pathlib import Path

from process_support import free_port

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-smoke.sh"
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+%\s", re.MULTILINE)


def test_smoke_script_rehearsal_on_sim_engine(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HOTLOOP_SMOKE_ENGINE": "sim",
        "SMOKE_WORK": str(tmp_path),
        "SMOKE_TURNS": "6",
        "ENGINE_PORT": str(free_port()),
        "HOTLOOP_PORT": str(free_port()),
    }
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    loop = [tuple(map(int, row)) for row in ROW.findall(done.stdout.split("hotloop bench")[0])]
    assert [turn for turn, _, _ in loop] == list(range(6))
    for (_, previous_input, _), (_, _, cached) in itertools.pairwise(loop):
        assert cached >= previous_input  # each continuation's prompt extends the last: the engine's cache hits
    assert "cached-token ratio per turn" in done.stdout and "e2e ws/physical" in done.stdout
