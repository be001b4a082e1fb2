"""The demo's live output: a bar redrawn in place on a terminal, one plain line a second when piped."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 28


class Progress:
    def __init__(self, out: TextIO = sys.stdout) -> None:
        self._out = out
        self._live = out.isatty()
        self._last_plain = 0.0
        self._drawn = False

    def update(self, done: int, total: int, line: str) -> None:
        if self._live:
            filled = _WIDTH * done // max(total, 1)
            bar = "█" * filled + "·" * (_WIDTH - filled)
            self._out.write(f"\r[{bar}] {done}/{total}  {line}\033[K")
            self._out.flush()
            self._drawn = True
        elif time.monotonic() - self._last_plain >= 1.0:
            self._last_plain = time.monotonic()
            self.say(f"  {done}/{total}  {line}")

    def say(self, text: str) -> None:
        if self._drawn:
            self._out.write("\n")
            self._drawn = False
        self._out.write(text + "\n")
        self._out.flush()
