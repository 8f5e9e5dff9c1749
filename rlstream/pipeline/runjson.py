"""A run's run.json: `read_run_json` reads and checks it (a dict with a string run_id,
a config object, a format_version this rlstream reads) and says why when it cannot be
used; `apply_run_json` copies what the pipeline keeps into the run's state."""

from __future__ import annotations

from typing import Any

from rlstream.errors import UnsafeFile
from rlstream.formats.loops import FORMAT_VERSION, BadRecord, parse_json
from rlstream.formats.quarantine import excerpt
from rlstream.io.storage import Storage
from rlstream.io.tail import FileCursor
from rlstream.pipeline.discover import RUN_JSON
from rlstream.pipeline.state import RunState


def read_run_json(storage: Storage, run_url: str) -> tuple[dict[str, Any] | None, Any, str]:
    """(run.json as a dict, its stat, '') or (None, stat or None, why it cannot be used)."""
    url = Storage.join(run_url, RUN_JSON)
    stat = storage.stat(url)
    if stat is None:
        why = storage.unsafe(url)
        if why is not None:
            return None, None, f"is {why} (not opened)"
        return None, None, "is missing"
    try:
        data = storage.read(url)
    except FileNotFoundError:
        return None, None, "vanished while being read"
    except UnsafeFile as e:
        return None, None, f"was {e}"
    try:
        obj = parse_json(data)
    except BadRecord as e:
        return None, stat, f"is not valid JSON ({e}): {excerpt(data)!r}"
    if not isinstance(obj, dict) or not isinstance(obj.get("run_id"), str) or not obj["run_id"]:
        return None, stat, "has no string run_id"
    if not isinstance(obj.get("config", {}), dict):
        return None, stat, "has a config that is not an object"
    version = obj.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        return (
            None,
            stat,
            (
                f"has format_version {version!r}; this rlstream reads version {FORMAT_VERSION}: "
                "upgrade rlstream"
            ),
        )
    return obj, stat, ""


def apply_run_json(state: RunState, meta: dict[str, Any], stat: Any) -> None:
    """Take config, created_at, finished and the file's cursor from a read run.json."""
    state.config = meta.get("config") or {}
    ca = meta.get("created_at")
    state.created_at = float(ca) if isinstance(ca, (int, float)) else None
    state.finished = meta.get("finished_at") is not None
    state.run_json = FileCursor(size=stat.size, etag=stat.etag, mtime=stat.mtime)
