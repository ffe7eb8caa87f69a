"""How many examples a property test draws: its count scaled by `HOTLOOP_EXAMPLES_SCALE` (1 by default, as
`make test` and CI run them; `make unit-fast` runs a quarter, so the inner loop stays under 30 s)."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("HOTLOOP_EXAMPLES_SCALE", "1"))


def examples(count: int) -> int:
    """`count` examples at full scale, never fewer than 10."""
    return max(10, round(count * SCALE))
