"""`RunGroup`'s reader dispatch, the same for every format: adding a run, planning.

Kept apart from `runner.py` so the shared runtime (cursors, commits, resume states)
stays one piece of code for every format. A run is identified by its reader
(`Format.identity`); a folder that looks like a run but cannot be read gets a
quarantine row under the `_rejected` partition naming the reason (`bad_run_json` for
a Loops run, `unreadable_run:<format>` for a format without an identity file). What
a run follows comes from its format's `streams` and nothing else.
"""

from __future__ import annotations

import logging
from typing import Any

from rlstream.formats import DEFAULT, get_format
from rlstream.formats.base import NamedFiles, Tail
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import BadRecord
from rlstream.io.tail import FileCursor
from rlstream.pipeline.commit import load_state
from rlstream.pipeline.names import new_names
from rlstream.pipeline.resume import ResumeStateError
from rlstream.pipeline.runjson import apply_identity, read_run_file, rejected_reason
from rlstream.pipeline.snapshot import set_format
from rlstream.pipeline.state import RunState
from rlstream.pipeline.streams import identify, plan_streams
from rlstream.pipeline.work import TranscriptsUnit, Unit, transcript_settings

log = logging.getLogger("rlstream")

REJECTED = "_rejected"
"""Pseudo run_id of the quarantine partition listing runs that could not be read."""


def resume_run(group: Any, run_id: str, run_url: str) -> RunState | None:
    """The run's state from its resume state, or a new one; None when the run cannot
    be taken (an unreadable resume state: a `_rejected` quarantine row, the other runs
    keep going; or its run_id is recorded for another folder: `reject_duplicate`)."""
    try:
        state = load_state(group.sink, run_id, reset=run_id in group.cfg.reset_runs)
    except ResumeStateError as e:
        log.error("skipping run %s: %s", run_id, e)
        prev = group.rejected.get(run_url)
        if prev is None or prev.reason != "bad_resume_state":
            group.rejected[run_url] = QuarantineRow(
                REJECTED, group.sink.state_url(run_id), None, "bad_resume_state", str(e)
            )
            group.dirty.add(REJECTED)
        return None
    if state is None:
        return RunState(run_id=run_id, run_url=run_url)
    state.run_url = state.run_url or run_url  # a --reset-run state has none yet
    if state.run_url != run_url:
        reject_duplicate(group, run_id, run_url, state.run_url)
        return None
    return state


DUPLICATE_RUN_ID = "duplicate_run_id"
"""Quarantine reason (under `_rejected`) of a run folder whose run id another folder
already holds: two folders are never merged into one run."""


def reject_duplicate(group: Any, run_id: str, run_url: str, other: str) -> None:
    """Refuse the run at `run_url`: its run id is the run's at `other` (tracked, or
    recorded in OUT's resume state). A `_rejected` quarantine row says so; the run at
    `other` goes on alone."""
    detail = (
        f"run_id {run_id!r} is already the run at {other}: two folders with one run id "
        "are not merged; give one run another run_id, or analyze them into separate OUTs "
        f"(if the run moved here, `--reset-run {run_id}` reads it again from here)"
    )
    prev = group.rejected.get(run_url)
    if prev is None or prev.reason != DUPLICATE_RUN_ID:  # once, not at every discovery
        log.error("skipping %s: %s", run_url, detail)
        group.rejected[run_url] = QuarantineRow(REJECTED, run_url, None, DUPLICATE_RUN_ID, detail)
        group.dirty.add(REJECTED)


def add_run(
    group: Any, run_url: str, fmt: str, names: frozenset[str] | None = None
) -> RunState | None:
    """`RunGroup.add_run` for a run of format `fmt`, identified by its reader
    (`Format.identity`); `names` is the folder's listing from detection (not listed
    again). A run whose identity cannot be read gets a `_rejected` quarantine row
    (`runjson.rejected_reason`) and is skipped; the other runs keep going."""
    f = get_format(fmt)
    try:
        info, streams, stat = identify(group.storage, run_url, fmt, names)
    except BadRecord as e:
        run_file = getattr(f, "run_file", None)
        if run_file is not None:
            log.warning("skipping %s: %s %s", run_url, run_file, e)
        else:
            log.warning("skipping %s: a %s run that cannot be read: %s", run_url, fmt, e)
        if run_url not in group.rejected:
            group.rejected[run_url] = QuarantineRow(
                REJECTED, run_url, None, rejected_reason(f), str(e)
            )
            group.dirty.add(REJECTED)
        return None
    other = next((s.run_url for s in group.runs.values() if s.run_id == info.run_id), None)
    if other is not None and other != run_url:
        reject_duplicate(group, info.run_id, run_url, other)
        return None
    state = resume_run(group, info.run_id, run_url)
    if state is None:
        return None
    if group.rejected.pop(run_url, None) is not None:
        group.dirty.add(REJECTED)
    set_format(state, fmt)
    apply_identity(state, info, stat)
    group.streams[run_url] = streams
    group.runs[run_url] = state
    return state


def refresh_identity(group: Any, state: RunState, stat: Any) -> None:
    """Read the run's identity file again when `stat` (taken this poll) differs from
    the last one; an unreadable new version is quarantined once and the old identity
    kept."""
    rj = state.run_json
    if stat is None or (rj and (stat.size, stat.etag, stat.mtime) == (rj.size, rj.etag, rj.mtime)):
        return
    f = get_format(state.format)
    data, stat, _ = read_run_file(group.storage, state.run_url, f.run_file)
    if data is None:
        return  # gone between stat and read (being replaced): look again next poll
    try:
        info, _, stat = identify(group.storage, state.run_url, state.format, None, (data, stat))
    except BadRecord as e:
        state.out_quarantine.append(
            QuarantineRow(state.run_id, f.run_file, None, rejected_reason(f), str(e))
        )
        state.counters["quarantined"] += 1
        state.run_json = FileCursor(size=stat.size, etag=stat.etag, mtime=stat.mtime)
        return
    apply_identity(state, info, stat)


def plan_run(group: Any, state: RunState) -> list[Unit]:
    """`RunGroup.plan`: units for what is new in one run (stats and listings only). A
    format's identity file and the run folder's tails are stat'ed in one round trip
    (one listing on S3); the `NamedFiles` stream is listed after every stat."""
    streams = group.streams.get(state.run_url, ())
    cfg, storage = group.cfg, group.storage
    run_file = getattr(get_format(state.format), "run_file", None)
    stats: dict[str, Any] = {}
    if run_file is not None:
        top = [s.path for s in streams if isinstance(s, Tail) and "/" not in s.path]
        got = storage.stat_files(state.run_url, (run_file, *top))
        refresh_identity(group, state, got[0])
        stats = dict(zip(top, got[1:], strict=True))
    settings = transcript_settings(
        cfg.samples,
        state.config,
        state.probe_panel,
        cfg.max_tokens_slack,
        join_rewards=state.format == DEFAULT,
    )
    units = plan_streams(
        storage,
        state,
        tuple(s for s in streams if not isinstance(s, NamedFiles)),
        cfg.transcripts_per_unit,
        group._final,
        cfg.transcript_window,
        settings,
        stats,
    )
    for s in streams:
        if not isinstance(s, NamedFiles):
            continue
        names, below = new_names(storage, state, s, cfg)
        if below:
            group.dirty.add(state.run_url)
        n = cfg.transcripts_per_unit
        for i in range(0, len(names), n):
            part = tuple(names[i : i + n])
            units.append(
                TranscriptsUnit(
                    state.run_id, state.run_url, part, state.final_through, settings, s.folder
                )
            )
    state.polls += 1
    return units


def tails(streams: tuple[Any, ...] | None) -> tuple[tuple[str, ...], frozenset[str]]:
    """The append-only files of a run, and those of them a run may not have."""
    ts = [s for s in streams or () if isinstance(s, Tail)]
    return tuple(s.path for s in ts), frozenset(s.path for s in ts if s.optional)
