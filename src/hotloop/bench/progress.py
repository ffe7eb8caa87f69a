"""A progress line on stderr: rewritten in place on a terminal, one line per step otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.started = time.monotonic()
        self._width = 0

    def update(self, text: str, final: bool = False) -> None:
        """Show `text`; off a terminal only `final` steps are printed (so logs stay short)."""
        if not self.enabled:
            return
        line = f"[{time.monotonic() - self.started:6.1f}s] {text}"
        if self.live:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            if final:
                self.stream.write("\n")
                self._width = 0
            self.stream.flush()
        elif final:
            self.stream.write(line + "\n")
            self.stream.flush()

    def done(self) -> None:
        if self.live and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
