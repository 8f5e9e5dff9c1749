"""`RunGroup`'s reader dispatch for formats other than Loops: adding a run, planning.

Kept apart from `runner.py` so the shared runtime (cursors, commits, checkpoints)
stays one piece of code for every format. A run of another format is identified by
its reader (`Format.identity`); a folder that looks like a run but cannot be read gets
a quarantine row under the `_rejected` partition naming the format and the reason,
like a Loops run with a bad run.json.
"""

from __future__ import annotations

import logging
from typing import Any

from rlstream.errors import CheckpointError
from rlstream.formats import get_format
from rlstream.formats.base import Tail
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import BadRecord
from rlstream.pipeline.state import CHECKPOINT_VERSION, RunState
from rlstream.pipeline.streams import identify, plan_streams
from rlstream.pipeline.work import Unit

log = logging.getLogger("rlstream")

REJECTED = "_rejected"


def add_other_run(group: Any, run_url: str, fmt: str) -> RunState | None:
    """`RunGroup.add_run` for a run of format `fmt` (not Loops)."""
    try:
        info, streams = identify(group.storage, run_url, fmt)
    except BadRecord as e:
        log.warning("skipping %s: a %s run that cannot be read: %s", run_url, fmt, e)
        if run_url not in group.rejected:
            group.rejected[run_url] = QuarantineRow(
                REJECTED, run_url, None, f"unreadable_run:{fmt}", str(e)
            )
            group.dirty.add(REJECTED)
        return None
    if group.rejected.pop(run_url, None) is not None:
        group.dirty.add(REJECTED)
    state = group.sink.load_checkpoint(info.run_id)
    if state is not None and getattr(state, "version", None) != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint of run {info.run_id} under {group.sink.out} was written by another "
            f"rlstream version (checkpoint format {getattr(state, 'version', '?')}, this one "
            f"reads {CHECKPOINT_VERSION}); delete it to reprocess the run"
        )
    if state is not None:
        if state.run_url != run_url:
            log.warning("run_id %s also at %s; keeping %s", info.run_id, run_url, state.run_url)
            return None
        removed = group.sink.remove_orphans(info.run_id, state.seq)
        if removed:
            log.info("%s: removed %d files of an uncommitted commit", info.run_id, removed)
    else:
        group.sink.remove_orphans(info.run_id, 0)
        state = RunState(run_id=info.run_id, run_url=run_url)
    state.format = fmt
    state.parts = tuple(getattr(get_format(fmt), "parts", ()))
    state.config = info.config
    state.created_at = info.created_at
    state.finished = info.finished
    group.streams[run_url] = streams
    group.runs[run_url] = state
    return state


def plan_other(group: Any, state: RunState) -> list[Unit]:
    """`RunGroup.plan` for a run of another format."""
    streams = group.streams.get(state.run_url)
    if streams is None:  # pragma: no cover - add_other_run always sets them
        return []
    units = plan_streams(
        group.storage, state, streams, group.cfg.transcripts_per_unit, group._final
    )
    state.polls += 1
    return units


def tails(streams: tuple[Any, ...] | None) -> tuple[str, ...] | None:
    """The append-only files of a run of another format (None for Loops)."""
    if streams is None:
        return None
    return tuple(s.path for s in streams if isinstance(s, Tail))
