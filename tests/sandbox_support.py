"""What the tests that open containers need first (docs/sandbox.md): root, and bubblewrap, installed where it is
missing as the project installs its other parts (scripts/ensure-bubblewrap.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hotloop.sandbox import probe

ROOT = Path(__file__).resolve().parents[1]


def ensure_bubblewrap() -> None:
    """Skip where the sandbox cannot run as built (not root); install bubblewrap where it is missing."""
    if os.geteuid() != 0:
        pytest.skip("the sandbox needs root (docs/sandbox.md, 'Where it cannot start')")
    subprocess.run(["bash", str(ROOT / "scripts" / "ensure-bubblewrap.sh")], check=True, timeout=600)
    probe.cache_clear()


def ensure_sandbox() -> None:
    """As `ensure_bubblewrap`, and skip with the reason where this host still cannot run it."""
    ensure_bubblewrap()
    support = probe()
    if not support.available:
        pytest.skip(f"the sandbox cannot run here: {support.reason}")
