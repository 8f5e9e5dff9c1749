"""`RunGroup`'s reader dispatch for formats other than Loops: adding a run, planning.

Kept apart from `runner.py` so the shared runtime (cursors, commits, resume states)
stays one piece of code for every format. A run of another format is identified by
its reader (`Format.identity`); a folder that looks like a run but cannot be read gets
a quarantine row under the `_rejected` partition naming the format and the reason,
like a Loops run with a bad run.json.
"""

from __future__ import annotations

import logging
from typing import Any

from rlstream.formats import get_format
from rlstream.formats.base import Tail
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import BadRecord
from rlstream.pipeline.commit import load_state
from rlstream.pipeline.resume import ResumeStateError
from rlstream.pipeline.state import RunState
from rlstream.pipeline.streams import identify, plan_streams
from rlstream.pipeline.work import Unit, token_cap

log = logging.getLogger("rlstream")

REJECTED = "_rejected"
"""Pseudo run_id of the quarantine partition listing runs that could not be read."""


def resume_run(group: Any, run_id: str, run_url: str) -> RunState | None:
    """The run's state from its resume state, or a new one; None when the run cannot
    be taken (an unreadable resume state: a `_rejected` quarantine row, the other runs
    keep going; or its run_id is already tracked at another URL)."""
    try:
        state = load_state(group.sink, run_id, reset=run_id in group.cfg.reset_runs)
    except ResumeStateError as e:
        log.error("skipping run %s: %s", run_id, e)
        if run_url not in group.rejected:
            group.rejected[run_url] = QuarantineRow(
                REJECTED, group.sink.state_url(run_id), None, "bad_resume_state", str(e)
            )
            group.dirty.add(REJECTED)
        return None
    if state is None:
        return RunState(run_id=run_id, run_url=run_url)
    state.run_url = state.run_url or run_url  # a --reset-run state has none yet
    if state.run_url != run_url:
        log.warning("run_id %s also at %s; keeping %s", run_id, run_url, state.run_url)
        return None
    return state


def add_other_run(
    group: Any, run_url: str, fmt: str, names: frozenset[str] | None = None
) -> RunState | None:
    """`RunGroup.add_run` for a run of format `fmt` (not Loops); `names` is the folder's
    listing from detection (not listed again)."""
    try:
        info, streams = identify(group.storage, run_url, fmt, names)
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
    state = resume_run(group, info.run_id, run_url)
    if state is None:
        return None
    state.format = fmt
    state.parts = tuple(getattr(get_format(fmt), "parts", ()))
    state.repeated_parts = tuple(getattr(get_format(fmt), "repeated_parts", ()))
    state.spread = bool(getattr(get_format(fmt), "spread", False))
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
    cfg = group.cfg
    units = plan_streams(
        group.storage,
        state,
        streams,
        cfg.transcripts_per_unit,
        group._final,
        cfg.transcript_window,
        token_cap(state.config, cfg.max_tokens_slack),
    )
    state.polls += 1
    return units


def tails(streams: tuple[Any, ...] | None) -> tuple[tuple[str, ...] | None, frozenset[str]]:
    """The append-only files of a run of another format (None for Loops), and those of
    them a run may not have."""
    if streams is None:
        return None, frozenset()
    ts = [s for s in streams if isinstance(s, Tail)]
    return tuple(s.path for s in ts), frozenset(s.path for s in ts if s.optional)
