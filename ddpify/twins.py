"""Twins fixed by hand: `X_ddp.py` kept as a person left it, until `X.py` changes.

A twin is normally exactly what ddpify writes for its source, and --twin rewrites it when it
is not. Where ddpify leaves something to a person (a warning it cannot fix), the person fixes
the twin and marks it with one comment line that names the source's content:

    # ddpify: hand-edited from train.py sha256:0123456789abcdef

From then on the twin is never rewritten, and --twin and --check pass while `train.py` still
hashes to that value; once it changes, they fail (exit 1) until the person brings the twin up
to date and records the new hash, which the message gives. A marker without a hash fails
with the line to write. The hash is of the source's text with its line endings normalised,
so a checkout with CRLF endings hashes as one with LF; its first 16 hex digits are enough to
notice a change (this is no signature).
"""
import hashlib
import re
from dataclasses import dataclass
from typing import Optional

MARKER = "# ddpify: hand-edited"
_MARKER_LINE = re.compile(r"^[ \t]*#\s*ddpify:\s*hand-edited\b(.*)$", re.IGNORECASE | re.MULTILINE)
_HASH = re.compile(r"sha256:([0-9a-f]{16,64})\b", re.IGNORECASE)
HASH_DIGITS = 16


@dataclass(frozen=True)
class Verdict:
    fresh: bool
    # Why it is not fresh, with what to do; empty when fresh.
    note: str = ""


def source_hash(text: str) -> str:
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:HASH_DIGITS]


def marker_line(source: str, source_text: str) -> str:
    return f"{MARKER} from {source} sha256:{source_hash(source_text)}"


def judge(twin: str, twin_text: str, source: str, source_text: str) -> Optional[Verdict]:
    """None for a twin without the marker (ddpify owns it: compare it with what ddpify
    writes); otherwise whether the hand-edited twin still answers `source` as it is."""
    marker = _MARKER_LINE.search(twin_text)
    if marker is None:
        return None
    recorded = _HASH.search(marker.group(1))
    current = source_hash(source_text)
    wanted = marker_line(source, source_text)
    if recorded is None:
        return Verdict(False, f"{twin}: hand-edited, but its marker records no hash of {source}: "
                              f"once the twin is right for {source} as it is, make the marker read "
                              f"`{wanted}`")
    if current.startswith(recorded.group(1).lower()) or recorded.group(1).lower().startswith(current):
        return Verdict(True)
    return Verdict(False, f"{twin}: hand-edited for an older {source} (sha256:{recorded.group(1)}): "
                          f"bring your edits up to date with {source} (`ddpify --diff {source}` "
                          f"shows its migration now), then make the marker read `{wanted}`")
