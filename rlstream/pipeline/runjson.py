"""A format's identity file (`Format.run_file`; Loops: run.json): reading it, saying
why when it cannot be read, and the run's identity from it.

`read_run_file` reads the file and returns its bytes and stat or why not (missing, a
link, vanished); the format's `identity` checks the bytes (Loops: `formats.loops.
run_json`, the one check of run.json) and raises `BadRecord` with the reason.
`rejected_reason` names a run whose identity cannot be read; `apply_identity` copies
what the pipeline keeps into the run's state.
"""

from __future__ import annotations

from typing import Any

from rlstream.errors import UnsafeFile
from rlstream.formats.base import RunInfo
from rlstream.io.storage import FileStat, Storage
from rlstream.io.tail import FileCursor
from rlstream.pipeline.state import RunState


def read_run_file(storage: Storage, run_url: str, name: str) -> tuple[bytes | None, Any, str]:
    """(bytes, stat, '') or (None, None, why the file cannot be read)."""
    url = Storage.join(run_url, name)
    stat = storage.stat(url)
    if stat is None:
        why = storage.unsafe(url)
        if why is not None:
            return None, None, f"is {why} (not opened)"
        return None, None, "is missing"
    try:
        return storage.read(url), stat, ""
    except FileNotFoundError:
        return None, None, "vanished while being read"
    except UnsafeFile as e:
        return None, None, f"was {e}"


def rejected_reason(fmt: Any) -> str:
    """The quarantine reason of a run of `fmt` whose identity cannot be read:
    `bad_<run_file>` (dots as "_"; Loops: `bad_run_json`) for a format with an
    identity file, else `unreadable_run:<format>`."""
    run_file = getattr(fmt, "run_file", None)
    return f"bad_{run_file.replace('.', '_')}" if run_file else f"unreadable_run:{fmt.name}"


def apply_identity(state: RunState, info: RunInfo, stat: FileStat | None) -> None:
    """Take config, created_at, finished and the identity file's cursor."""
    state.config = info.config
    state.created_at = info.created_at
    state.finished = info.finished
    if stat is not None:
        state.run_json = FileCursor(size=stat.size, etag=stat.etag, mtime=stat.mtime)
