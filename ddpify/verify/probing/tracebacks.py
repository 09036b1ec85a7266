"""The script's own lines in a failed rank's traceback: a report names the user's line that
failed, not the depths of torch it failed in."""
from __future__ import annotations

import os
import traceback

from ddpify.verify.probing.paths import own_file

# Frames of a failed rank's traceback kept for the report (the innermost ones).
TRACEBACK_FRAMES = 6


def error_line(error: BaseException, script_dir: str) -> str | None:
    """The innermost line of the script's own files in an exception's traceback."""
    found = None
    trace = error.__traceback__
    while trace is not None:
        name = trace.tb_frame.f_code.co_filename
        if own_file(name, script_dir):
            found = f"{os.path.relpath(os.path.abspath(name), script_dir)}:{trace.tb_lineno}"
        trace = trace.tb_next
    return found


def script_traceback(error: BaseException, script_dir: str) -> list[str]:
    """The traceback's frames in the script's own files, oldest first, and the frame that
    raised when it lies in a library: what a report shows as the cause of a failed rank
    (the whole traceback, torch's frames and the probe's included, is in the run's output)."""
    frames = traceback.extract_tb(error.__traceback__)
    shown = [frame for frame in frames if own_file(frame.filename, script_dir)]
    if frames and frames[-1] not in shown:
        shown.append(frames[-1])
    return [f"{describe_frame(frame, script_dir)}: {frame.line}" if frame.line else describe_frame(frame, script_dir)
            for frame in shown[-TRACEBACK_FRAMES:]]


def describe_frame(frame: traceback.FrameSummary, script_dir: str) -> str:
    path = frame.filename
    shown = os.path.relpath(os.path.abspath(path), script_dir) if own_file(path, script_dir) else \
        os.path.basename(path)
    return f"{shown}:{frame.lineno} in {frame.name}"
