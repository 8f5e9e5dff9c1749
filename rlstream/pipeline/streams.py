"""Every format's run identity, planning and per-step/snapshot units.

A format declares what to follow (`rlstream.formats.base`: `Tail`, `StepFiles`,
`Snapshot`); this module turns that into work units with stats and listings only, and
runs per-step files (snapshots are run by `pipeline.snapshot_unit`):

- `FilesUnit`: whole per-step files. A JSONL file without its final newline is still
  being written: it is left for a later poll (at the end of a batch pass it is read as
  it is). A step folder with a `marker` (a name in it, or a path below it) is complete
  once the marker exists; one without is complete once a matching file was read, or
  given up once its step is final (a file appearing later would be late).
- `SnapshotUnit`: a file rewritten whole, planned here from its candidates' stats.

Records for a step at or below `final_through` are late: quarantined, never folded.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from dataclasses import replace
from typing import Any

from rlstream.errors import UnsafeFile
from rlstream.formats import get_format
from rlstream.formats.base import PEEK_BYTES, RunInfo, Snapshot, StepFiles, Stream, Tail, step_names
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import BadLine, BadRecord, Transcript, quarantine
from rlstream.io.storage import FileStat, Storage
from rlstream.io.tail import FileCursor
from rlstream.metrics import RolloutAgg, StepAgg
from rlstream.pipeline.partial import StepPartial
from rlstream.pipeline.records import Records, plan_records, split_member
from rlstream.pipeline.transcripts import TranscriptSettings
from rlstream.pipeline.work import FilesUnit, LinesUnit, SnapshotUnit, Unit, UnitResult

JSONL = (".jsonl", ".json")
READ_KEY = "#read"
"""Suffix of a snapshot's consumption cursor (entries and last step read) in
`RunState.cursors`, beside each candidate file's identity cursor."""


def listing(storage: Storage, url: str) -> frozenset[str]:
    """Names of a folder's files and sub-folders (with "/"); a store member's: its own."""
    if (m := split_member(url)) is not None:
        return frozenset([m[1]])
    return frozenset([*storage.list_names(url), *(d + "/" for d in storage.list_dirs(url, True))])


def peeker(storage: Storage, url: str):
    def peek(name: str) -> bytes | None:
        try:
            return storage.read_range(Storage.join(url, name), 0, PEEK_BYTES)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnsafeFile):
            return None

    return peek


def reader(storage: Storage, url: str):
    def read(name: str) -> bytes | None:
        try:
            return storage.read(Storage.join(url, name))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, UnsafeFile):
            return None

    return read


def identify(
    storage: Storage,
    url: str,
    fmt_name: str,
    names: frozenset[str] | None = None,
    read_file: tuple[bytes, FileStat] | None = None,
) -> tuple[RunInfo, tuple[Stream, ...], FileStat | None]:
    """The run's identity, streams and the stat of its identity file (`run_file`; None
    for a format without one), from `names`, the folder's listing, when given (a format
    with an identity file needs none), and the identity file's bytes and stat when
    already read; raises BadRecord with the reason it is unreadable."""
    from rlstream.pipeline.runjson import read_run_file

    fmt = get_format(fmt_name)
    run_file = getattr(fmt, "run_file", None)
    folder = m[0] if (m := split_member(url)) else url
    read, stat = reader(storage, folder), None
    if run_file is not None:
        data, stat, why = (
            read_run_file(storage, folder, run_file) if read_file is None else (*read_file, "")
        )
        if data is None:
            raise BadRecord(why)
        names = names if names is not None else frozenset({run_file})
        read = (lambda f: lambda n: data if n == run_file else f(n))(read)
    names = listing(storage, url) if names is None else names
    info = fmt.identity(url.rstrip("/").rsplit("/", 1)[-1], names, read)
    return info, fmt.streams(names), stat


def _changed(stat: FileStat, cur: FileCursor) -> bool:
    was = (cur.size, cur.etag, cur.mtime, cur.inode)
    return (stat.size, stat.etag, stat.mtime, stat.inode) != was


def plan_streams(
    storage: Storage,
    state: Any,
    streams: tuple[Stream, ...],
    per_unit: int,
    final: bool,
    window: int,
    settings: TranscriptSettings | None = None,
    stats: dict[str, FileStat | None] | None = None,
) -> list[Unit]:
    """Units for what is new in one run (`NamedFiles` streams aside: `pipeline.names`).
    `settings`: the run's `TranscriptSettings` (`work.transcript_settings`), carried by
    every unit that may read transcripts. `stats`: the stats of `Tail` paths already
    taken this poll. Per-step files are remembered by name until their step is
    `window` steps below `final_through`, then only through the stream's low step
    (`RunState.step_low`)."""
    units: list[Unit] = []
    stats = stats or {}
    settings = settings or TranscriptSettings()
    for s in streams:
        if isinstance(s, Tail):
            if s.path in stats:
                stat = stats[s.path]
            else:
                stat = storage.stat(Storage.join(state.run_url, s.path))
            cur = state.cursors.get(s.path, FileCursor())
            if stat is not None and _changed(stat, cur):
                units.append(
                    LinesUnit(
                        state.run_id,
                        state.run_url,
                        s.path,
                        cur,
                        stat,
                        state.final_through,
                        state.format,
                        s.kind,
                        settings,
                    )
                )
        elif isinstance(s, StepFiles):
            files, done = _new_step_files(storage, state, s, window)
            for i in range(0, max(len(files), 1 if done else 0), per_unit):
                chunk = tuple(files[i : i + per_unit])
                last = i + per_unit >= len(files)
                units.append(
                    FilesUnit(
                        state.run_id,
                        state.run_url,
                        state.format,
                        s.kind,
                        chunk,
                        tuple(p for _, p in chunk) + (done if last else ()),
                        state.final_through,
                        final,
                        settings,
                    )
                )
        elif isinstance(s, Records):
            units.extend(plan_records(storage, state, s, final))  # type: ignore[arg-type]
        elif isinstance(s, Snapshot):
            cands = _snapshot_candidates(storage, state, s)
            if cands:
                units.append(
                    SnapshotUnit(
                        state.run_id,
                        state.run_url,
                        state.format,
                        s.paths[0] + READ_KEY,
                        tuple(cands),
                        state.cursors.get(s.paths[0] + READ_KEY, FileCursor()),
                        state.final_through,
                    )
                )
    return units


def _new_step_files(
    storage: Storage, state: Any, s: StepFiles, window: int
) -> tuple[list[tuple[int, str]], tuple[str, ...]]:
    base = Storage.join(state.run_url, s.folder) if s.folder else state.run_url
    prefix = f"{s.folder}/" if s.folder else ""
    entries = storage.list_dirs(base, True) if s.dirs else storage.list_names(base)
    listed = step_names(entries, s.step_re)
    listed = _above_low(state, s, prefix, listed)
    files: list[tuple[int, str]] = []
    done: list[str] = []
    for step, d in listed:
        if not s.dirs:
            if prefix + d not in state.step_files:
                files.append((step, prefix + d))
            continue
        key = f"{prefix}{d}/"
        if key in state.step_files:
            continue
        names = storage.list_names(Storage.join(base, d))
        if s.marker is not None and not _has_marker(storage, base, d, names, s.marker):
            continue
        found = [f"{key}{n}" for n in names if s.file_re is None or s.file_re.fullmatch(n)]
        for sub in s.subdirs:
            found += [
                f"{key}{sub}/{n}"
                for n in storage.list_names(Storage.join(base, d, sub))
                if s.file_re is None or s.file_re.fullmatch(n)
            ]
        new = [(step, f) for f in found if f not in state.step_files]
        files.extend(new)
        if s.marker is not None or found:
            done.append(key)
        elif step <= state.final_through:
            state.step_files.add(key)  # given up: nothing to read, and the step is final
    _advance_low(state, s, prefix, listed, window)
    return files, tuple(done)


def _has_marker(storage: Storage, base: str, d: str, names: list[str], marker: str) -> bool:
    """Whether a step folder's completion marker exists (a path below it: one stat)."""
    if "/" not in marker:
        return marker in names
    return storage.stat(Storage.join(base, d, marker)) is not None


def _above_low(
    state: Any, s: StepFiles, prefix: str, listed: list[tuple[int, str]]
) -> list[tuple[int, str]]:
    """The listed step files (or folders) above the stream's low step. Entries at or
    below it were consumed; more of them than last time arrived after it was passed:
    counted in one quarantine row, not read."""
    low = state.step_low.get(prefix, -1)
    below = sum(1 for step, _ in listed if step <= low)
    extra = below - state.step_below.get(prefix, 0)
    if low >= 0 and extra > 0:
        state.out_quarantine.append(
            QuarantineRow(
                state.run_id,
                s.folder or ".",
                None,
                "step_file_below_window",
                f"{extra} step {'folders' if s.dirs else 'files'} for steps at or below "
                f"{low} appeared after those steps were passed; not read",
            )
        )
        state.counters["quarantined"] += 1
    if low >= 0:
        state.step_below[prefix] = below
    return [(step, n) for step, n in listed if step > low]


def _advance_low(
    state: Any, s: StepFiles, prefix: str, listed: list[tuple[int, str]], window: int
) -> None:
    """Move the stream's low step up to `window` steps below `final_through`, over
    consumed entries only, and forget the consumed names at or below it."""
    key = (lambda n: f"{prefix}{n}/") if s.dirs else (lambda n: prefix + n)
    pending = [step for step, n in listed if key(n) not in state.step_files]
    low = state.step_low.get(prefix, -1)
    new_low = min(state.final_through - window, min(pending, default=1 << 62) - 1)
    if new_low <= low:
        return
    gone = tuple(key(n) for step, n in listed if step <= new_low)
    state.step_files = (
        {f for f in state.step_files if not f.startswith(gone)} if gone else (state.step_files)
    )
    state.step_low[prefix] = new_low
    state.step_below[prefix] = state.step_below.get(prefix, 0) + len(gone)


_STAR_NUM = re.compile(r"(\d+)")


def _snapshot_candidates(storage: Storage, state: Any, s: Snapshot) -> list[tuple[str, FileStat]]:
    paths: list[str] = []
    for p in s.paths:
        if "*" not in p:
            paths.append(p)
            continue
        folder, _, rest = p.partition("*")
        head, _, _ = folder.rpartition("/")
        pattern = folder.rsplit("/", 1)[-1] + "*" + rest.split("/", 1)[0]
        subs = [
            d
            for d in storage.list_dirs(Storage.join(state.run_url, head) if head else state.run_url)
            if fnmatch.fnmatch(d, pattern)
        ]
        if subs:
            newest = max(subs, key=lambda d: [int(x) for x in _STAR_NUM.findall(d)] or [-1])
            paths.append((f"{head}/" if head else "") + newest + "/" + rest.split("/", 1)[1])
    out = []
    for p in paths:
        stat = storage.stat(Storage.join(state.run_url, p))
        if stat is not None and _changed(stat, state.cursors.get(p, FileCursor())):
            out.append((p, stat))
    return out


# -- execution -----------------------------------------------------------------------


def run_files(unit: FilesUnit, storage: Storage) -> UnitResult:
    fmt = get_format(unit.fmt)
    res = UnitResult(unit.run_id, unit.kind)
    parser = unit.settings.parser()
    rollouts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    skipped: set[str] = set()
    for step, path in unit.files:
        try:
            data = storage.read(Storage.join(unit.run_url, path))
        except FileNotFoundError:
            res.quarantine.append(
                QuarantineRow(unit.run_id, path, None, "vanished", "listed but gone when read")
            )
            continue
        except UnsafeFile as e:  # no byte of it was read: no excerpt either
            res.quarantine.append(QuarantineRow(unit.run_id, path, None, e.code, str(e)))
            continue
        if path.endswith(JSONL[0]) and data and not data.endswith(b"\n") and not unit.final:
            skipped.add(path)  # still being written: read it whole on a later poll
            continue
        res.bytes += len(data)
        res.records += 1
        if step <= unit.final_through:
            res.late += 1
            res.quarantine.append(
                replace(quarantine(unit.run_id, path, None, "late", data), step=step)
            )
            continue
        try:
            recs = fmt.parse_file(unit.kind, data, path, step)
        except BadRecord as e:
            res.quarantine.append(quarantine(unit.run_id, path, None, str(e), data))
            continue
        except Exception as e:  # a reader bug must cost one file, not the unit
            reason = f"internal_error:{type(e).__name__}"
            res.quarantine.append(quarantine(unit.run_id, path, None, reason, data))
            continue
        for rec in recs:
            if isinstance(rec, BadLine):
                res.quarantine.append(
                    quarantine(unit.run_id, path, rec.offset, rec.reason, rec.data)
                )
            elif isinstance(rec, Transcript):
                row = parser.over_cap_row(unit.run_id, path, None, rec)
                if row is None:
                    parser.add_transcript(rec)
                else:
                    res.quarantine.append(row)
            elif isinstance(rec, dict):
                rollouts[rec["step"]].append(rec)
    res.partials = parser.aggregates()
    res.tokens = parser.tokens
    for step, recs in rollouts.items():
        part = StepPartial(StepAgg(rollouts=RolloutAgg.from_records(recs)))
        prev = res.partials.get(step)
        res.partials[step] = part if prev is None else prev.merge(part)
    dirs_left = {p.rsplit("/", 1)[0] + "/" for p in skipped if "/" in p}
    res.done = tuple(
        d for d in unit.done if d not in skipped and not any(d.startswith(x) for x in dirs_left)
    )
    return res
