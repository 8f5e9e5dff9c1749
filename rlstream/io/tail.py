"""Tailing append-only files through cursors: only complete lines, rewrites detected.

A `FileCursor` is the position after the last consumed newline plus what identifies
the file version it was read from. `plan_read` compares it with a fresh `FileStat`
and says which byte range to fetch; `advance` consumes whole lines from the fetched
bytes and returns the new cursor. Both are pure, so the policy is tested without I/O.

The cursor keeps the last few consumed bytes (`check`). Every read starts that many
bytes early and compares them: an object store rewrites a growing JSONL whole (new
ETag each time), and this is how a true append is told from a rewrite.

Rewrite policy (documented in docs/run-format.md): when a file is truncated, replaced
(new inode) or rewritten with different bytes before the cursor, it is read again
from offset 0 as a new generation, and records belonging to steps at or below the
highest step already consumed from that file are quarantined as `rewritten_replay`
instead of being counted again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rlstream.io.storage import FileStat

CHECK_BYTES = 32


@dataclass(frozen=True, slots=True)
class FileCursor:
    """Where reading of one file stands. The default is "nothing read yet"."""

    position: int = 0
    """How far reading went, in the file kind's unit: for a tailed file (JSONL, a
    framed tracker log) the byte offset after the last consumed record; for a
    snapshot rewritten whole (TRL's trainer_state.json) the entries read; for a
    SQLite store the last row id read."""
    size: int = 0
    etag: str | None = None
    mtime: float | None = None
    inode: int | None = None
    check: bytes = b""
    generation: int = 0
    max_step: int = -1


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """Fetch bytes [start, end); `reset` names why reading restarts at 0, if it does."""

    start: int
    end: int
    reset: str | None = None


def plan_read(cursor: FileCursor, stat: FileStat | None) -> ReadPlan | None:
    """The range to fetch, or None when nothing can be new."""
    if stat is None:
        return None
    if cursor.inode is not None and stat.inode is not None and stat.inode != cursor.inode:
        return ReadPlan(0, stat.size, reset="replaced")
    if stat.size < cursor.position:
        return ReadPlan(0, stat.size, reset="truncated")
    same_version = (
        stat.size == cursor.size
        and stat.etag == cursor.etag
        and (stat.mtime is None or stat.mtime == cursor.mtime)
    )
    if same_version or (stat.size == cursor.position and stat.etag is None):
        return None
    return ReadPlan(cursor.position - len(cursor.check), stat.size)


def verify_prefix(cursor: FileCursor, plan: ReadPlan, data: bytes) -> bool:
    """True when the re-read bytes before the cursor equal what was consumed."""
    if plan.reset is not None or not cursor.check:
        return True
    return data[: len(cursor.check)] == cursor.check


def split_lines(data: bytes, base: int) -> tuple[list[tuple[int, bytes]], int]:
    """Complete lines of `data` (which starts at file offset `base`).

    Returns [(offset, line)] without the newline (blank lines skipped) and the number
    of bytes consumed: everything up to and including the last newline. A trailing
    partial line is left for the next read.
    """
    last = data.rfind(b"\n")
    if last < 0:
        return [], 0
    out: list[tuple[int, bytes]] = []
    pos = 0
    for raw in data[: last + 1].split(b"\n")[:-1]:
        line = raw.rstrip(b"\r")
        if line.strip():
            out.append((base + pos, line))
        pos += len(raw) + 1
    return out, last + 1


def advance(
    cursor: FileCursor, plan: ReadPlan, stat: FileStat, data: bytes
) -> tuple[list[tuple[int, bytes]], FileCursor]:
    """Consume the complete lines of a fetched range; returns (lines, new cursor).

    `data` is what `plan` fetched. The caller has checked `verify_prefix`.
    """
    skip = 0 if plan.reset is not None else len(cursor.check)
    body = data[skip:]
    start = plan.start + skip
    lines, used = split_lines(body, start)
    new_offset = start + used
    consumed_upto = skip + used
    check = data[max(0, consumed_upto - CHECK_BYTES) : consumed_upto] if new_offset else b""
    if plan.reset is None and used == 0:
        check = cursor.check
    generation = cursor.generation + (1 if plan.reset is not None else 0)
    new = replace(
        cursor,
        position=new_offset,
        size=stat.size,
        etag=stat.etag,
        mtime=stat.mtime,
        inode=stat.inode,
        check=check,
        generation=generation,
    )
    return lines, new
