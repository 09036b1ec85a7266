"""Run one command and leave none of its processes behind:

    python -m ddpify.verify.reaper --report FILE -- COMMAND [ARGS...]

A process group is not enough: torchrun puts each rank in a session of its own, and a
script may start a server with ``start_new_session=True``. So the reaper makes itself a
child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux): every orphaned descendant is
re-parented to it instead of to init, and the whole tree stays findable through the parent
links in /proc. When COMMAND exits, descendants that are still alive after a short grace
are written to FILE (pid, rank, command line) and killed. On SIGTERM, SIGINT or SIGHUP the
whole tree is stopped (SIGTERM, then SIGKILL) before the reaper exits. Where prctl or /proc
is missing, the runner's process group kill is all there is.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
# Seconds a finished command's descendants get to exit on their own before they count as left behind.
LEFTOVER_GRACE_S = 2.0
TERM_GRACE_S = 3.0


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_links(include_zombies: bool = False) -> dict[int, int]:
    """pid -> parent pid for every process in /proc (empty where there is no /proc).

    A zombie is dead already, but it stays in the tree that descendants() walks: while a
    multi-threaded process dies, its main thread is a zombie before its other threads are
    gone, and its children are handed on only then."""
    links: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return links
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if include_zombies or fields[0] != b"Z":
            links[int(entry)] = int(fields[1])
    return links


def descendants(root: int) -> list[int]:
    """Every process below root, zombies that still have children included."""
    living = parent_links()
    children: dict[int, list[int]] = {}
    for pid, parent in parent_links(include_zombies=True).items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child in living or children.get(child):
                found.append(child)
            frontier.append(child)
    return found


def describe(pid: int) -> dict:
    info = {"pid": pid, "cmdline": "", "rank": None}
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            info["cmdline"] = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
        with open(f"/proc/{pid}/environ", "rb") as environ:
            for item in environ.read().split(b"\0"):
                if item.startswith(b"RANK="):
                    info["rank"] = int(item[5:] or 0)
    except (OSError, ValueError):
        pass
    return info


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def wait_for_tree(seconds: float) -> list[int]:
    """Reaps what exits within `seconds`; returns the descendants still alive."""
    deadline = time.time() + seconds
    while True:
        reap_zombies()
        alive = descendants(os.getpid())
        if not alive or time.time() >= deadline:
            return alive
        time.sleep(0.05)


def kill_tree(alive: list[int], rounds: int = 40) -> None:
    """SIGKILL until nothing is left (bounded: a process stuck in the kernel cannot be killed)."""
    for _ in range(rounds):
        if not alive:
            return
        signal_all(alive, signal.SIGKILL)
        alive = wait_for_tree(0.5)


def stop_tree() -> None:
    alive = descendants(os.getpid())
    signal_all(alive, signal.SIGTERM)
    kill_tree(wait_for_tree(TERM_GRACE_S))


class Stopped(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--report" or argv[2] != "--":
        sys.stderr.write("usage: python -m ddpify.verify.reaper --report FILE -- COMMAND [ARGS...]\n")
        return 2
    report_path, command = argv[1], argv[3:]

    def on_signal(signum, frame):
        raise Stopped(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    become_subreaper()
    leftovers: list[dict] = []
    try:
        child = subprocess.Popen(command)
        returncode = child.wait()
        alive = wait_for_tree(LEFTOVER_GRACE_S)
        living = parent_links()
        leftovers = [describe(pid) for pid in alive if pid in living]
        kill_tree(alive)
    except Stopped as stopped:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stop_tree()
        returncode = 128 + stopped.signum
    with open(report_path, "w", encoding="utf-8") as report:
        json.dump({"leftovers": leftovers}, report)
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
