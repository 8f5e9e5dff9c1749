"""Delta Lake output under OUT (a local path or s3://), written with delta-rs.

Layout (docs/schema.md):

    OUT/steps/_delta_log/...        final step rows (one row per run and step)
    OUT/run_health/_delta_log/...   a run's health row, appended when it changed
    OUT/run_latest/_delta_log/...   the same rows; maintenance keeps only the newest per run
    OUT/alerts/_delta_log/...       finding transitions
    OUT/quarantine/_delta_log/...   rejected records
    OUT/cohorts/_delta_log/...      peer bands per cohort, step and figure (sinks/cohorts.py)
    OUT/samples/_delta_log/...      kept samples per run and step (sinks/samples.py)
    OUT/step_digest/_delta_log/...  the runs' step series as chart points (sinks/step_digest.py)
    OUT/band_digest/_delta_log/...  the cohort bands, one step per bin (sinks/band_digest.py)
    OUT/_resume/run_id=<id>.state   each run's resume state (rlstream.pipeline.resume)

`DeltaSink` appends one Arrow table to one Delta table per call, recording one
application transaction (`txn`: app id, version) per run the rows belong to, in the
same commit as the rows; `txn_versions` reads them back. It opens each table once
and keeps the handle for its lifetime: before each use the handle catches up with
the log entries written since (`update_incremental`, one listing), instead of a
full log replay per append. The commit protocol that
orders resume states and appends lives in `rlstream.pipeline.commit`. Maintenance
(compaction, log checkpoints, vacuum) is `rlstream.sinks.maintain`.

A sink pickles (it goes to every tailer) as its configuration: the handles stay behind.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from rlstream.errors import RlstreamError
from rlstream.formats.quarantine import QuarantineRow
from rlstream.io.storage import Storage

TABLES = ("steps", "run_health", "run_latest", "alerts", "quarantine", "cohorts", "samples")
STEP_DIGEST_TABLE = "step_digest"
STATE_DIR = "_resume"

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("offset", pa.int64()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),
        pa.field("step", pa.int64()),
        pa.field("commit_seq", pa.int64(), nullable=False),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": "quarantine"},
)


ROW_GROUP_ROWS = {"samples": 64}
"""Rows per Parquet row group of a table whose readers pick a few rows by their
statistics: `rlstream samples` reads one step's rows (each up to 16 KiB of text), so
a file holding many runs and steps (an analyze's commit, a compacted file) is read a
row group of about 1 MiB at a time, not whole. Other tables: the writer's default."""


def writer_properties(table: str) -> Any:
    """The `WriterProperties` of `table`'s files (`ROW_GROUP_ROWS`), or None."""
    from deltalake import WriterProperties

    n = ROW_GROUP_ROWS.get(table)
    return None if n is None else WriterProperties(max_row_group_size=n)


def table_config(retention_seconds: int) -> dict[str, str]:
    """Properties of a table: a log checkpoint every 10 commits (a reader replays at
    most 10 JSON commits), and how long log entries and removed files are kept (log
    cleanup and vacuum honour it)."""
    keep = f"interval {int(retention_seconds)} seconds"
    return {
        "delta.checkpointInterval": "10",
        "delta.logRetentionDuration": keep,
        "delta.deletedFileRetentionDuration": keep,
    }


def quarantine_table(rows: list[QuarantineRow], seq: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "run_id": r.run_id,
                "file": r.file,
                "offset": r.offset,
                "reason": r.reason,
                "detail": r.detail,
                "step": r.step,
                "commit_seq": seq,
            }
            for r in rows
        ],
        schema=QUARANTINE_SCHEMA,
    )


def delta_options(url: str, storage_options: dict[str, Any] | None) -> dict[str, str] | None:
    """delta-rs storage options for `url` from fsspec-style ones (`endpoint_url`, `key`,
    `secret`, `token`, `client_kwargs`), the AWS_* environment filling the gaps.
    The one place where the two spellings meet."""
    if "://" not in url or url.startswith("file://"):
        return None
    opts = dict(storage_options or {})
    if not url.startswith(("s3://", "s3a://")):  # other stores: delta-rs's own keys
        return {k: str(v) for k, v in opts.items()}
    ck = opts.get("client_kwargs") or {}
    out: dict[str, str] = {}
    pairs = {
        "AWS_ENDPOINT_URL": opts.get("endpoint_url") or ck.get("endpoint_url"),
        "AWS_ACCESS_KEY_ID": opts.get("key") or ck.get("aws_access_key_id"),
        "AWS_SECRET_ACCESS_KEY": opts.get("secret") or ck.get("aws_secret_access_key"),
        "AWS_SESSION_TOKEN": opts.get("token") or ck.get("aws_session_token"),
        "AWS_REGION": ck.get("region_name") or opts.get("region"),
    }
    for k, v in pairs.items():
        v = v or os.environ.get(k)
        if v:
            out[k] = str(v)
    if "AWS_REGION" not in out:
        out["AWS_REGION"] = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    if out.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        out["AWS_ALLOW_HTTP"] = "true"
    # Concurrent writers (several tailers, `rlstream compact`) commit safely on S3
    # through conditional writes (PUT If-None-Match: * on the next log entry), which
    # S3, MinIO, R2 and moto's server honour: no DynamoDB lock needed.
    out.setdefault("AWS_CONDITIONAL_PUT", "etag")
    return out


def _partition(run_id: str) -> str:
    return "run_id=" + quote(run_id, safe="-_.")


class DeltaSink:
    """Appends to OUT's Delta tables and keeps runs' resume state files."""

    def __init__(
        self,
        out_url: str,
        storage: Storage,
        storage_options: dict[str, Any] | None = None,
        fsync: bool = True,
        retention_seconds: int = 300,
    ) -> None:
        self.out = out_url.rstrip("/")
        self.storage = storage
        self.storage_options = dict(storage_options or {})
        self.fsync = fsync
        self.retention_seconds = retention_seconds
        self._handles: dict[str, tuple[Any, float]] = {}
        """table -> (DeltaTable, monotonic time of its last use)."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_handles"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._handles = {}

    def handle(self, table: str) -> Any:
        """The table's `DeltaTable`, opened once and brought up to date with the log
        (None: no such table yet). A handle idle for half the retention is opened
        again rather than caught up (log cleanup may have removed the entries it
        missed), and so is one that cannot catch up."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        now = time.monotonic()
        dt, used = self._handles.pop(table, (None, 0.0))
        if dt is not None and now - used < self.retention_seconds / 2:
            try:
                dt.update_incremental()
                self._handles[table] = (dt, now)
                return dt
            except Exception:
                pass
        try:
            dt = DeltaTable(self.uri(table), storage_options=self.options)
        except TableNotFoundError:
            return None
        self._handles[table] = (dt, now)
        return dt

    @property
    def options(self) -> dict[str, str] | None:
        return delta_options(self.out, self.storage_options)

    def uri(self, table: str) -> str:
        """The table's location as delta-rs wants it (a local path is made absolute)."""
        url = Storage.join(self.out, table)
        if "://" not in url:
            return os.path.abspath(url)
        return url.removeprefix("file://")

    def dataset(self, table: Any) -> Any:
        """A pyarrow dataset of a `DeltaTable` of OUT. On local disk it reads through
        pyarrow's own filesystem: with delta-rs's default (a Python file handler), an
        Arrow I/O thread could release a Python file object while the interpreter
        exits, and the process aborted after its work was done."""
        uri = table.table_uri.removeprefix("file://")
        if "://" in uri:
            return table.to_pyarrow_dataset()
        from pyarrow import fs

        return table.to_pyarrow_dataset(filesystem=fs.SubTreeFileSystem(uri, fs.LocalFileSystem()))

    def exists(self, table: str) -> bool:
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.uri(table), storage_options=self.options)

    def append(self, table: str, data: pa.Table, txns: dict[str, int]) -> None:
        """Append `data` in one Delta commit recording `txns` (app id -> version).

        Concurrent appends by other tailers are retried by delta-rs's optimistic
        concurrency (blind appends never conflict with each other or with compaction).
        New columns (a newer rlstream) are added to the table's schema."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        props = CommitProperties(
            app_transactions=[Transaction(app_id=a, version=v) for a, v in sorted(txns.items())],
            max_commit_retries=50,
        )
        dt = self.handle(table)
        try:
            write_deltalake(
                self.uri(table) if dt is None else dt,
                data,
                mode="append",
                schema_mode="merge",
                storage_options=self.options,
                configuration=table_config(self.retention_seconds),
                commit_properties=props,
                writer_properties=writer_properties(table),
            )
        except Exception:
            self._handles.pop(table, None)  # opened afresh next time
            raise

    def txn_versions(self, table: str, app_ids: list[str]) -> dict[str, int | None]:
        """The last version recorded for each app id in `table` (None: never)."""
        dt = self.handle(table)
        if dt is None:
            return dict.fromkeys(app_ids)
        return {a: dt.transaction_version(a) for a in app_ids}

    def delete_where(self, table: str, predicate: str) -> int:
        """Delete the rows matching a SQL `predicate`; returns how many."""
        dt = self.handle(table)
        if dt is None:
            return 0
        try:
            got = dt.delete(predicate)
        except Exception:
            self._handles.pop(table, None)
            raise
        return int(got.get("num_deleted_rows", 0) or 0)

    # -- resume state files --------------------------------------------------------
    def state_url(self, run_id: str) -> str:
        return Storage.join(self.out, STATE_DIR, f"{_partition(run_id)}.state")

    def save_state(self, run_id: str, data: bytes) -> None:
        self.storage.write_atomic(self.state_url(run_id), data, fsync=self.fsync)

    def load_state(self, run_id: str) -> bytes | None:
        url = self.state_url(run_id)
        try:
            return self.storage.read(url)
        except FileNotFoundError:
            return None

    def move_state_aside(self, run_id: str) -> str:
        """Rename a run's resume state to `<name>.aside-<unix time>`; returns the new URL."""
        url = self.state_url(run_id)
        aside = f"{url}.aside-{int(time.time())}"
        self.storage.write_atomic(aside, self.storage.read(url), fsync=self.fsync)
        self.storage.remove(url)
        return aside

    def is_out(self) -> bool:
        """Whether OUT holds rlstream's tables: the definition is a Delta log under
        OUT/run_health (every commit that read a run wrote its health) or, when every
        run was rejected, under OUT/quarantine (the rejected runs' rows)."""
        return any(
            self.storage.exists(Storage.join(self.out, t, "_delta_log"))
            for t in ("run_health", "quarantine")
        )

    def check_layout(self) -> None:
        """Refuse an OUT written by the earlier Parquet layout, with what to do."""
        old = [
            Storage.join(self.out, p)
            for p in ("_checkpoints", "run_health/latest", "run_health/snapshots")
        ]
        if any(self.storage.exists(u) for u in old):
            raise RlstreamError(
                f"{self.out} holds outputs of an earlier rlstream (hive-partitioned Parquet "
                "and pickled _checkpoints), which this version does not append to. Use a "
                "new --out (runs are read again from the start), or move the old folder "
                "aside; its Parquet files stay readable with read_parquet"
            )

    def delete_run(self, run_id: str) -> int:
        """Delete a run's rows from every table but `cohorts` (`--reset-run`); returns
        rows deleted. A band row names the run that wrote it, but it is its cohort's:
        its peers no longer hold the older steps to write it again, and readers keep the
        newest, largest band of a step. Appends running at the same time may fail once
        and are retried. Then the run is dropped from the step digest
        (rlstream.sinks.step_digest.drop_run); the other runs' digests stay."""
        from rlstream.sinks.step_digest import drop_run  # it builds on this module

        quoted = run_id.replace("'", "''")
        n = sum(self.delete_where(t, f"run_id = '{quoted}'") for t in TABLES if t != "cohorts")
        drop_run(self, run_id)
        return n
