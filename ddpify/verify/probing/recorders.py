"""Where the probe's events go: one JSON line per event, and each line the script prints.

Both write through the `open` the probe saw at import, before any hook was installed, so
the probe's own writes are never recorded as the script's.
"""
from __future__ import annotations

import io
import json
import threading
from typing import Any

ORIGINAL_OPEN = io.open


class Recorder:
    """Appends one JSON line per event and flushes it, so a killed process loses nothing."""

    def __init__(self, path: str):
        self._file = ORIGINAL_OPEN(path, "a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ev": event, **fields}, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


class LineRecorder:
    """Stands in for sys.stdout: passes everything through, records each complete line."""

    def __init__(self, stream, on_line):
        self._stream = stream
        self._on_line = on_line
        self._pending = ""

    def write(self, text):
        written = self._stream.write(text)
        if isinstance(text, str):
            *lines, self._pending = (self._pending + text).split("\n")
            for line in lines:
                self._on_line(line)
        return written

    def flush_pending(self):
        if self._pending:
            self._on_line(self._pending)
            self._pending = ""

    def __getattr__(self, name):
        return getattr(self._stream, name)
