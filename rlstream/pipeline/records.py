"""Tracker logs (`formats.base.Records` streams): planning, execution, store members.

A framed log (W&B, SwanLab, TensorBoard, MLflow metric files) is read like a JSONL
tail, through a `FileCursor`, but the format's `parse_records` says where the last
complete record ends: the cursor always stops at a record boundary, an incomplete
tail is read again once the file changed (or, at the end of a batch pass, reported
`truncated`), and a corrupt record is quarantined with its file and offset. A file
truncated, replaced or rewritten before its cursor is read again from 0 and its steps
at or below the highest already read are quarantined as `rewritten_replay`.

A SQLite store (Trackio, MLflow) is opened read-only (`mode=ro`; never written, safe
beside a writer in WAL mode) on local storage only, and read through the last row id
(`RunState.cursors[<db>#<run>].position`); its database and `-wal` file's sizes and
mtimes say whether anything can be new.

Store members: a folder whose databases hold several runs gives one run per member,
at URL `<folder>/<db>#<run>` (`member_url`, `split_member`); the format's `members`
names them, the pipeline never opens a database but through `open_db`.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from typing import Any

from rlstream.errors import UnsafeFile
from rlstream.formats import get_format
from rlstream.formats.base import Records
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import BadRecord
from rlstream.formats.trackers.sqlite_stores import connect
from rlstream.io.storage import FileStat, Storage
from rlstream.io.tail import CHECK_BYTES, FileCursor, ReadPlan, plan_read, verify_prefix
from rlstream.pipeline.work import UnitResult

SEP = "#"


def split_member(url: str) -> tuple[str, str] | None:
    """(folder URL, `<db>#<run>`) of a store member's run URL; None for a folder."""
    head, sep, sel = url.partition(SEP)
    if not sep or "/" not in head:
        return None
    folder, db = head.rsplit("/", 1)
    return folder, f"{db}{SEP}{sel}"


def member_url(folder: str, member: str) -> str:
    return Storage.join(folder, member.split(SEP, 1)[0]) + SEP + member.split(SEP, 1)[1]


def open_db(storage: Storage, folder: str):
    """A function giving a read-only connection to a database of `folder` (None on
    object storage, for a link or special file, or when SQLite cannot open it)."""

    def opener(name: str) -> sqlite3.Connection | None:
        url = Storage.join(folder, name)
        if not storage.is_local or storage.unsafe(url) is not None:
            return None
        try:
            return connect(storage.strip(url))
        except sqlite3.Error:
            return None

    return opener


def members(storage: Storage, url: str, fmt: Any, names: frozenset[str]) -> list[str] | None:
    """Member names of the stores in the folder at `url` for `fmt`, or None when the
    format has no stores or the folder itself is the run."""
    find = getattr(fmt, "members", None)
    return None if find is None else find(names, open_db(storage, url))


@dataclass(frozen=True, slots=True)
class RecordsUnit:
    """Read a tracker log from `cursor`: a file up to `stat.size`, or with `select`,
    the store's rows of one run after the cursor's row id."""

    run_id: str
    run_url: str
    fmt: str
    path: str
    cursor: FileCursor
    stat: FileStat
    final_through: int
    select: str | None = None
    final: bool = False
    trainer: str | None = None


def _folder(state: Any) -> str:
    m = split_member(state.run_url)
    return m[0] if m else state.run_url


def _changed(stat: FileStat, cur: FileCursor) -> bool:
    return (stat.size, stat.etag, stat.mtime, stat.inode) != (
        cur.size,
        cur.etag,
        cur.mtime,
        cur.inode,
    )


def _store_stat(storage: Storage, url: str) -> FileStat | None:
    db, wal = storage.stat(url), storage.stat(url + "-wal")
    if db is None:
        return None
    if wal is None:
        return db
    return FileStat(db.size + wal.size, None, max(db.mtime or 0, wal.mtime or 0), db.inode)


def _logs(storage: Storage, base: str, s: Records) -> list[str]:
    if s.name_re is None:
        return [s.path]
    out: list[str] = []
    level = [s.path]
    for depth in range(s.depth + 1):
        deeper = []
        for rel in level:
            url = Storage.join(base, rel) if rel else base
            out += [
                f"{rel}/{n}" if rel else n
                for n in storage.list_names(url)
                if s.name_re.fullmatch(n)
            ]
            if depth < s.depth:
                deeper += [f"{rel}/{d}" if rel else d for d in storage.list_dirs(url)]
        level = [d for d in deeper if not d.rsplit("/", 1)[-1].startswith(".")]
    return sorted(out)


def plan_records(storage: Storage, state: Any, s: Records, final: bool) -> list[RecordsUnit]:
    """Units for what may be new in a `Records` stream of one run."""
    base = _folder(state)
    trainer = state.trainer or None
    if s.select is not None:
        key = f"{s.path}{SEP}{s.select}"
        stat = _store_stat(storage, Storage.join(base, s.path))
        cur = state.cursors.get(key, FileCursor())
        if stat is None or not _changed(stat, cur):
            return []
        return [
            RecordsUnit(
                state.run_id, base, state.format, key, cur, stat, state.final_through,
                s.select, final, trainer,
            )
        ]  # fmt: skip
    units = []
    paths = _logs(storage, base, s)
    hint = getattr(get_format(state.format), "trainer_from_logs", None)
    trainer = trainer or (hint(paths) if hint else None)
    for path in paths:
        stat = storage.stat(Storage.join(base, path))
        cur = state.cursors.get(path, FileCursor())
        if stat is not None and _changed(stat, cur):
            units.append(
                RecordsUnit(
                    state.run_id, base, state.format, path, cur, stat, state.final_through,
                    None, final, trainer,
                )
            )  # fmt: skip
    return units


def run_records(unit: RecordsUnit, storage: Storage) -> UnitResult:
    res = UnitResult(unit.run_id, unit.path)
    res.cursor = unit.cursor
    fmt = get_format(unit.fmt)
    try:
        chunk, cursor, data_len, reset = (
            _query(unit, storage, fmt) if unit.select is not None else _read(unit, storage, fmt)
        )
    except UnsafeFile as e:
        res.quarantine.append(QuarantineRow(unit.run_id, unit.path, None, e.code, str(e)))
        return res
    except BadRecord as e:  # not this tracker's file after all (its header)
        res.quarantine.append(QuarantineRow(unit.run_id, unit.path, 0, str(e), ""))
        st = unit.stat  # not read again until the file changes
        res.cursor = replace(
            unit.cursor, size=st.size, etag=st.etag, mtime=st.mtime, inode=st.inode
        )
        return res
    except sqlite3.Error as e:  # locked or unreadable now: tried again on the next poll
        why = f"{type(e).__name__}: {e}"
        res.quarantine.append(QuarantineRow(unit.run_id, unit.path, None, "store_unreadable", why))
        return res
    if chunk is None:
        return res
    res.trainer = chunk.trainer
    res.bytes = data_len
    replay_upto = unit.cursor.max_step if reset else -1
    max_step = unit.cursor.max_step
    for off, reason, detail, step in chunk.errors:
        at = off if off >= 0 else None
        res.quarantine.append(QuarantineRow(unit.run_id, unit.path, at, reason, detail, step))
    for rec in chunk.steps:
        res.records += 1
        why = None
        if rec.step <= replay_upto:
            why = "rewritten_replay"
        elif rec.step <= unit.final_through:
            why = "late"
            res.late += 1
        if why is not None:
            res.quarantine.append(
                QuarantineRow(unit.run_id, unit.path, None, why, f"step {rec.step}", rec.step)
            )
            continue
        max_step = max(max_step, rec.step)
        res.steps.append(rec)
    res.reset = reset
    res.cursor = replace(cursor, max_step=max_step)
    return res


def _read(unit: RecordsUnit, storage: Storage, fmt: Any):
    url = Storage.join(unit.run_url, unit.path)
    plan = plan_read(unit.cursor, unit.stat)
    if plan is None:
        return None, unit.cursor, 0, None
    data = storage.read_range(url, plan.start, plan.end)
    if not verify_prefix(unit.cursor, plan, data):
        plan = ReadPlan(0, unit.stat.size, reset="rewritten")
        data = storage.read_range(url, 0, plan.end)
    skip = 0 if plan.reset is not None else len(unit.cursor.check)
    start = plan.start + skip
    chunk = fmt.parse_records(unit.path, data[skip:], start, unit.final, unit.trainer)
    used = chunk.cursor - plan.start  # bytes of `data` consumed
    check = data[max(0, used - CHECK_BYTES) : used] if chunk.cursor else b""
    st = unit.stat
    cursor = FileCursor(
        position=chunk.cursor,
        size=st.size,
        etag=st.etag,
        mtime=st.mtime,
        inode=st.inode,
        check=check,
        generation=unit.cursor.generation + (1 if plan.reset else 0),
        max_step=unit.cursor.max_step,
    )
    return chunk, cursor, max(0, chunk.cursor - start), plan.reset


def _query(unit: RecordsUnit, storage: Storage, fmt: Any):
    db = unit.path.split(SEP, 1)[0]
    conn = open_db(storage, unit.run_url)(db)
    if conn is None:
        raise sqlite3.OperationalError(f"{db} cannot be opened read-only on this storage")
    steps, errors, after, trainer = [], [], unit.cursor.position, unit.trainer
    try:
        while True:  # the readers take at most 10k rows a call
            chunk = fmt.query_records(conn, unit.select, after, trainer)
            steps += chunk.steps
            errors += chunk.errors
            trainer = trainer or chunk.trainer
            if chunk.cursor <= after:
                break
            after = chunk.cursor
    finally:
        conn.close()
    st = unit.stat
    cursor = replace(unit.cursor, position=after, size=st.size, mtime=st.mtime, inode=st.inode)
    return type(chunk)(steps, after, errors, trainer), cursor, 0, None
