"""Running a `SnapshotUnit`: a file a format rewrites whole (TRL's
`checkpoint-N/trainer_state.json`; `rlstream.formats.base.Snapshot`).

Every version holds the whole history, so only entries for steps above the highest
step already read are new. Of the unit's candidate files the one reaching the highest
step (then holding the most entries) is read; a version whose last step is below what
was read (a resumed run's shorter file) gets a quarantine row `file_rewritten_shorter`,
and the steps it repeats are not counted again. Planning is `pipeline.streams`'.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlstream.errors import UnsafeFile
from rlstream.formats import get_format
from rlstream.formats.quarantine import QuarantineRow, excerpt
from rlstream.formats.records import BadLine, BadRecord, StepRecord, quarantine
from rlstream.io.storage import Storage
from rlstream.io.tail import FileCursor
from rlstream.pipeline.streams import READ_KEY
from rlstream.pipeline.work import SnapshotUnit, UnitResult


def run_snapshot(unit: SnapshotUnit, storage: Storage) -> UnitResult:
    fmt = get_format(unit.fmt)
    res = UnitResult(unit.run_id, unit.key.removesuffix(READ_KEY), cursor_key=unit.key)
    best: tuple[int, int, str, list[Any]] | None = None
    seen = []
    for path, stat in unit.candidates:
        try:
            data = storage.read(Storage.join(unit.run_url, path))
        except FileNotFoundError:
            continue
        except UnsafeFile as e:  # swapped for a link after it was listed: not a byte read
            res.quarantine.append(QuarantineRow(unit.run_id, path, None, e.code, str(e)))
            continue
        seen.append(
            (path, FileCursor(size=stat.size, etag=stat.etag, mtime=stat.mtime, inode=stat.inode))
        )
        res.bytes += len(data)
        try:
            recs = fmt.parse_snapshot(data)
        except BadRecord as e:
            res.quarantine.append(quarantine(unit.run_id, path, None, str(e), data))
            continue
        steps = [r for r in recs if isinstance(r, StepRecord)]
        last = max((r.step for r in steps), default=-1)
        n = 1 + max(
            [r.offset for r in steps if r.offset is not None]
            + [r.index for r in recs if isinstance(r, BadLine) and r.index is not None],
            default=-1,
        )
        if best is None or (last, n) > best[:2]:
            best = (last, n, path, recs)
    res.seen_files = tuple(seen)
    cur = unit.cursor
    res.cursor = cur
    if best is None:
        return res
    last, n, path, recs = best
    if last < cur.max_step:
        res.quarantine.append(
            QuarantineRow(
                unit.run_id,
                path,
                0,
                "file_rewritten_shorter",
                excerpt(f"last step {last} below {cur.max_step} already read"),
            )
        )
    for rec in recs:
        if isinstance(rec, BadLine):
            if rec.index is None or rec.index >= cur.position:  # each bad entry once
                res.quarantine.append(quarantine(unit.run_id, path, None, rec.reason, rec.data))
            continue
        if rec.step <= cur.max_step:
            continue  # already read from an earlier version of the file
        res.records += 1
        if rec.step <= unit.final_through:
            res.late += 1
            res.quarantine.append(QuarantineRow(unit.run_id, path, None, "late", "", rec.step))
            continue
        res.steps.append(rec)
    # Entries are counted monotonically, so a bad entry a resumed run logs again at
    # the same place is not quarantined twice.
    res.cursor = replace(cur, position=max(cur.position, n), max_step=max(cur.max_step, last))
    return res
