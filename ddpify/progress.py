"""A one-line progress bar on stderr for long runs; silent when stderr is not a terminal."""
import time
from typing import Optional, TextIO

# A run shorter than this never shows a bar: it would only flicker.
_DELAY_S = 0.5
_REDRAW_S = 0.1
_WIDTH = 30


class Progress:
    def __init__(self, total: int, stream: TextIO, clock=time.monotonic) -> None:
        self.total, self.stream, self.clock = total, stream, clock
        self.enabled = total > 1 and _is_terminal(stream)
        self.done = 0
        self.started = clock()
        self.drawn_at: Optional[float] = None

    def advance(self, path: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        now = self.clock()
        if now - self.started < _DELAY_S:
            return
        if self.drawn_at is not None and now - self.drawn_at < _REDRAW_S and self.done < self.total:
            return
        filled = _WIDTH * self.done // self.total
        bar = "#" * filled + "-" * (_WIDTH - filled)
        self.stream.write(f"\r\x1b[K[{bar}] {self.done}/{self.total} {path[-40:]}")
        self.stream.flush()
        self.drawn_at = now

    def clear(self) -> None:
        """Erase the bar so that a message prints on a clean line; the next advance redraws it."""
        if self.drawn_at is not None:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn_at = None


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
