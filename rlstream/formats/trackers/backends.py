"""The five trackers behind `base.Format`: W&B, TensorBoard, SwanLab, MLflow, Trackio.

Each reads its tracker's local files through `Records` streams (docs/formats.md):

- `wandb`: a run folder `run-<ts>-<id>/` or `offline-run-<ts>-<id>/` holding
  `run-<id>.wandb` (header `:W&B`); config `files/config.yaml`.
- `swanlab`: a run folder `run-<ts>-<id>/` holding `run-<id>.swanlab` (header `:SWL`);
  config `files/config.yaml`.
- `tensorboard`: a log dir holding `events.out.tfevents.*` files; files in its
  sub-folders (two levels: `add_scalars`, per-split writers) give keys `<sub>/<tag>`.
- `mlflow`: a file-store run folder `mlruns/<exp>/<run>/` (`meta.yaml`, `metrics/<key>`
  one file per key), or a SQLite store (`mlflow.db`) whose every run is one run.
- `trackio`: a folder of project databases (`<project>.db`); every `run_name` of a
  project is one run.

Rows become `StepRecord`s under canonical keys (`keymap`), the trainer recognised from
the keys (`Chunk.trainer`; a run keeps the first trainer recognised). Consecutive rows
of one step with disjoint keys (TensorBoard and SwanLab write one record per scalar)
are one record; a repeated key starts a new record, which the pipeline lets win
(a restart re-logging a step). Non-finite values are left out of the record, each
quarantined as `non_finite_value:<key>` with its step.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any

from rlstream.formats.base import NO_FAILURES, Chunk, Peek, Records, RunInfo, Stream
from rlstream.formats.records import BadRecord, StepRecord
from rlstream.formats.trackers import keymap, mlflow_files, sqlite_stores
from rlstream.formats.trackers.common import Read
from rlstream.formats.trackers.swanlab import config_from_yaml, read_swanlab
from rlstream.formats.trackers.tensorboard import read_events
from rlstream.formats.trackers.wandb import read_wandb

SQLITE_MAGIC = b"SQLite format 3\x00"
DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")
UNAVAILABLE = NO_FAILURES
"""Tracker logs hold reported figures only: no rollouts, no transcripts."""

OpenDb = Callable[[str], sqlite3.Connection | None]
"""A read-only connection to a database of the folder (None when it cannot be opened)."""


def to_chunk(read: Read, trainer: str | None) -> Chunk:
    """A reader's rows as step records under canonical keys (see the module)."""
    rows = read.rows
    if trainer is None:
        keys: set[str] = set()
        for r in rows:
            keys.update(r)
        trainer = keymap.recognise(keys - {"step", "time"})
    errors: list[tuple[int, str, str, int | None]] = [
        (e.offset, e.reason, e.detail, None) for e in read.errors
    ]
    out: list[StepRecord] = []
    for raw in rows:
        row = keymap.canonical(raw, trainer)
        metrics: dict[str, float] = {}
        for k, v in row.items():
            if k in ("step", "time"):
                continue
            if v != v or v in (float("inf"), float("-inf")):
                errors.append((-1, f"non_finite_value:{k}", f"{k} = {v}", int(row["step"])))
            else:
                metrics[k] = v
        step, time = int(row["step"]), row.get("time")
        last = out[-1] if out else None
        if last is not None and last.step == step and not set(last.metrics) & set(metrics):
            t = max((x for x in (last.time, time) if x is not None), default=None)
            out[-1] = StepRecord(step, t, {**last.metrics, **metrics}, {})
        elif metrics:
            out.append(StepRecord(step, time, metrics, {}))
    return Chunk(out, read.cursor, errors, trainer)


def _yaml_config(read: Callable[[str], bytes | None], path: str) -> dict[str, Any]:
    data = read(path)
    if not data:
        return {}
    try:
        cfg = config_from_yaml(data)
    except Exception as e:  # yaml's errors: the config is unreadable, the run is not
        raise BadRecord(f"bad_config: {path}: {type(e).__name__}") from e
    return {k: v for k, v in cfg.items() if not k.startswith("_")}


class _Tracker:
    """What every tracker backend shares: no per-step files, no snapshots."""

    name = ""
    unavailable: frozenset[str] = UNAVAILABLE

    def parse_line(self, kind: str, obj: Any) -> Any:  # pragma: no cover - no Tail streams
        raise BadRecord("not_a_line_format")

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Any]:
        return []

    def parse_snapshot(self, data: bytes) -> list[StepRecord]:
        return []


class _LevelDbRun(_Tracker):
    """A W&B or SwanLab run folder: one `run-<id>.<suffix>` log with its header."""

    suffix = ""
    magic = b""
    reader: Callable[..., Read]

    def _log(self, listing: frozenset[str]) -> str | None:
        logs = sorted(n for n in listing if n.startswith("run-") and n.endswith(self.suffix))
        return logs[0] if logs else None

    def detect(self, listing: frozenset[str], peek: Peek) -> bool:
        log = self._log(listing)
        head = peek(log) if log else None
        return head is not None and (head.startswith(self.magic) or head == b"")

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        log = self._log(listing)
        if log is None:
            raise BadRecord(f"no run-<id>{self.suffix} log")
        run_id = log.removeprefix("run-").removesuffix(self.suffix)
        return RunInfo(run_id, _yaml_config(read, "files/config.yaml"))

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        log = self._log(listing)
        return (Records(log),) if log else ()

    def parse_records(
        self, path: str, data: bytes, start: int, final: bool, trainer: str | None
    ) -> Chunk:
        return to_chunk(type(self).reader(data, start, final), trainer)


class WandbFormat(_LevelDbRun):
    name = "wandb"
    suffix = ".wandb"
    magic = b":W&B"
    reader = staticmethod(read_wandb)


class SwanlabFormat(_LevelDbRun):
    name = "swanlab"
    spread = True  # one record per scalar
    suffix = ".swanlab"
    magic = b":SWL"
    reader = staticmethod(read_swanlab)


EVENTS = re.compile(r"events\.out\.tfevents\..+")


class TensorboardFormat(_Tracker):
    name = "tensorboard"
    spread = True  # one event per scalar, several files

    def detect(self, listing: frozenset[str], peek: Peek) -> bool:
        return any(EVENTS.fullmatch(n) for n in listing)

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        return RunInfo(name)

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        return (Records("", EVENTS, depth=2),)

    def parse_records(
        self, path: str, data: bytes, start: int, final: bool, trainer: str | None
    ) -> Chunk:
        read = read_events(data, start, final)
        sub = path.rsplit("/", 1)[0] if "/" in path else ""
        if sub:
            rows = [
                {k if k in ("step", "time") else f"{sub}/{k}": v for k, v in r.items()}
                for r in read.rows
            ]
            read = Read(rows, read.cursor, read.errors, read.info)
        return to_chunk(read, trainer)


def _dbs(listing: frozenset[str]) -> list[str]:
    return sorted(n for n in listing if n.endswith(DB_SUFFIXES))


def _sqlite(listing: frozenset[str], peek: Peek) -> bool:
    return any((peek(n) or b"").startswith(SQLITE_MAGIC) for n in _dbs(listing)[:4])


def _member(listing: frozenset[str]) -> tuple[str, str] | None:
    """(db, selector) when `listing` is a store member's (`{<db>#<run>}`)."""
    if len(listing) == 1:
        (only,) = listing
        db, sep, sel = only.partition("#")
        if sep:
            return db, sel
    return None


def _store_members(
    listing: frozenset[str], open_db: OpenDb, runs: Callable[[sqlite3.Connection], list[str]]
) -> list[str]:
    """`<db>#<run>` for every run `runs` finds in each SQLite store of the folder; a
    store that cannot be opened or read holds none."""
    out = []
    for db in _dbs(listing):
        conn = open_db(db)
        if conn is None:
            continue
        try:
            out += [f"{db}#{r}" for r in runs(conn)]
        except sqlite3.Error:
            continue
        finally:
            conn.close()
    return out


def _tables(conn: sqlite3.Connection) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        out[t] = {r[1] for r in conn.execute(f"PRAGMA table_info('{t}')")}
    return out


class TrackioFormat(_Tracker):
    name = "trackio"

    def detect(self, listing: frozenset[str], peek: Peek) -> bool:
        return _member(listing) is not None or _sqlite(listing, peek)

    def members(self, listing: frozenset[str], open_db: OpenDb) -> list[str]:
        def runs(conn: sqlite3.Connection) -> list[str]:
            if {"run_name", "metrics", "step"} <= _tables(conn).get("metrics", set()):
                return sqlite_stores.trackio_runs(conn)
            return []

        return _store_members(listing, open_db, runs)

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        m = _member(listing)
        if m is None:
            raise BadRecord("not_a_store_member: a Trackio run is <project>.db#<run_name>")
        db, sel = m
        return RunInfo(f"{db.rsplit('.', 1)[0]}/{sel}")

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        m = _member(listing)
        return (Records(m[0], select=m[1]),) if m else ()

    def query_records(
        self, conn: sqlite3.Connection, select: str, after: int, trainer: str | None
    ) -> Chunk:
        return to_chunk(sqlite_stores.read_trackio(conn, select, after), trainer)


class MlflowFormat(_Tracker):
    """MLflow's file store run folder, or a run of its SQLite store."""

    name = "mlflow"
    spread = True  # one file, or one row, per key

    def detect(self, listing: frozenset[str], peek: Peek) -> bool:
        files = "meta.yaml" in listing and "metrics/" in listing
        return files or _member(listing) is not None or _sqlite(listing, peek)

    def members(self, listing: frozenset[str], open_db: OpenDb) -> list[str] | None:
        if "meta.yaml" in listing and "metrics/" in listing:
            return None  # a file-store run folder is a run itself

        def runs(conn: sqlite3.Connection) -> list[str]:
            cols = _tables(conn)
            if {"run_uuid", "is_nan", "step"} <= cols.get("metrics", set()) and "runs" in cols:
                return [r[0] for r in sqlite_stores.mlflow_runs(conn)]
            return []

        return _store_members(listing, open_db, runs)

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        m = _member(listing)
        if m is not None:
            return RunInfo(m[1])
        data = read("meta.yaml")
        try:
            meta = mlflow_files.run_meta(data or b"")
        except Exception as e:  # yaml's errors
            raise BadRecord(f"bad_meta_yaml: {type(e).__name__}") from e
        return RunInfo(str(meta.get("run_id") or name))

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        m = _member(listing)
        if m is not None:
            return (Records(m[0], select=m[1]),)
        return (Records("metrics", re.compile(r"[^.].*"), depth=4),)

    def trainer_from_logs(self, paths: list[str]) -> str | None:
        """The trainer named by a file-store run's metric keys (one file per key)."""
        return keymap.recognise({p.removeprefix("metrics/") for p in paths})

    def parse_records(
        self, path: str, data: bytes, start: int, final: bool, trainer: str | None
    ) -> Chunk:
        key = path.removeprefix("metrics/")
        return to_chunk(mlflow_files.read_metric_file(key, data, start, final), trainer)

    def query_records(
        self, conn: sqlite3.Connection, select: str, after: int, trainer: str | None
    ) -> Chunk:
        return to_chunk(sqlite_stores.read_mlflow(conn, select, after), trainer)


WANDB = WandbFormat()
SWANLAB = SwanlabFormat()
TENSORBOARD = TensorboardFormat()
TRACKIO = TrackioFormat()
MLFLOW = MlflowFormat()
