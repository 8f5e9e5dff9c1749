"""`rlstream demo`: a live fleet in a couple of minutes, on an embedded local Ray.

A writer thread simulates about a dozen runs of mixed scenarios in real time (lines
appended, sometimes half a line first; transcripts appearing whole) under a temporary
folder; `watch` tails them on a private local Ray and the live status table is redrawn
from OUT while they run (what `rlstream status OUT --follow` shows). When every run has
finished or stalled, the demo writes the HTML report and says where it is, how to query
the Delta tables, which commands show the same views, and that its folder
may be deleted. It stops the Ray it started and removes Ray's temp folder.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rlstream.errors import ConfigError, RlstreamError

DEMO_SCENARIOS = (
    "healthy",
    "entropy_collapse",
    "mismatch_kl_rising",
    "degenerate_outputs",
    "rollout_failure_burst",
    "tasks_too_hard",
    "healthy",
    "length_explosion",
    "stale_rollouts",
    "stalled",
    "low_ess",
    "healthy",
)
REFRESH_SECONDS = 2.0
GRACE_SECONDS = 60.0
"""After the writers are done, how long to wait for stalled runs to be flagged."""


class _Writer(threading.Thread):
    def __init__(self, root: Path, config: Any, interval: float) -> None:
        super().__init__(daemon=True, name="demo-writer")
        self.root, self.config, self.interval = root, config, interval
        self.error: BaseException | None = None
        self.done_at: float | None = None

    def run(self) -> None:
        from rlstream.simulate import simulate_live

        try:
            simulate_live(self.root, self.config, self.interval)
        except BaseException as e:
            self.error = e
        finally:
            self.done_at = time.monotonic()


class _LiveTable:
    """Redraws the status table from OUT every REFRESH_SECONDS; decides when to stop."""

    def __init__(self, out: Path, writer: _Writer, steps: int, stream: Any) -> None:
        self.out, self.writer, self.steps, self.stream = out, writer, steps, stream
        self.tty = stream.isatty()
        self.last = 0.0
        self.start = time.monotonic()
        self.rows: list[dict[str, Any]] = []

    def __call__(self) -> bool:
        from rlstream.fleet.read import read_latest
        from rlstream.fleet.status import render_table, status_rows

        if self.writer.error is not None:
            return True
        now = time.monotonic()
        if now - self.last < REFRESH_SECONDS:
            return False
        self.last = now
        if (self.out / "run_health" / "_delta_log").exists():
            self.rows = status_rows(read_latest(str(self.out)))
        head = (
            f"rlstream demo: watching {len(self.rows)} live runs "
            f"({now - self.start:.0f}s; writers {'done' if self.writer.done_at else 'writing'})\n"
        )
        if self.tty:
            self.stream.write("\x1b[H\x1b[2J" + head + render_table(self.rows, color=True))
        else:
            self.stream.write(head)
        self.stream.flush()
        return self._settled(now)

    def _settled(self, now: float) -> bool:
        """Writers done and every run either finished with all rows final or flagged
        stalled (or the grace period for stalled runs ran out)."""
        if self.writer.done_at is None:
            return False
        if now - self.writer.done_at > GRACE_SECONDS:
            return True
        for r in self.rows:
            stalled = r["status"] == "stalled" or any(f["code"] == "stalled" for f in r["firing"])
            if not stalled and r["last_step"] != self.steps - 1:
                return False
        return bool(self.rows)


def run_demo(args: argparse.Namespace) -> int:
    """The demo in `args.dir` (made if missing; the parser refused one holding files)
    or in a new temp folder, which a failure or Ctrl-C removes."""
    if args.dir:
        base = Path(args.dir).resolve()
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot make --dir {args.dir}: {e.strerror}") from e
        return _demo(args, base)
    base = Path(tempfile.mkdtemp(prefix="rlstream-demo-")).resolve()
    try:
        return _demo(args, base)
    except BaseException:  # a failure or Ctrl-C: the temp folder holds nothing to keep
        shutil.rmtree(base, ignore_errors=True)
        raise


def _demo(args: argparse.Namespace, base: Path) -> int:
    from rlstream.config import PipelineConfig
    from rlstream.fleet.read import out_sink, read_latest
    from rlstream.fleet.report import write_report
    from rlstream.fleet.status import render_table, status_rows
    from rlstream.pipeline.outcome import plural
    from rlstream.runtime.cluster import RayConfig, connect, disconnect
    from rlstream.runtime.driver import RuntimeConfig, run
    from rlstream.simulate import SimConfig
    from rlstream.sinks.maintain import MaintenanceConfig, maintain

    runs, out = base / "runs", base / "out"
    scen = tuple(DEMO_SCENARIOS[i % len(DEMO_SCENARIOS)] for i in range(args.runs))
    config = SimConfig(runs=args.runs, steps=args.steps, scenarios=scen, seed=1)
    print(
        f"rlstream demo: writing {args.runs} live runs x {args.steps} steps (a step every "
        f"~{args.interval:g}s) under {runs}\n"
        f"  scenarios: {', '.join(sorted(set(scen)))}\n"
        "  on a local Ray; the table below is refreshed from the tables under OUT\n",
        flush=True,
    )
    logger = logging.getLogger("rlstream")
    level = logger.level
    logger.setLevel(logging.WARNING)  # the live table is the demo's output
    writer = _Writer(runs, config, args.interval)
    t0 = time.monotonic()
    # Ray first (the slow part of start-up), then the writers, then the watch: the
    # runs' run.json files exist when the watch first looks, and no step is missed live.
    started = connect(RayConfig())
    writer.start()
    live = _LiveTable(out, writer, args.steps, sys.stdout)
    try:
        run(
            [str(runs)],
            str(out),
            PipelineConfig(poll_seconds=0.5, commit_seconds=1.0),
            RuntimeConfig(discover_every_seconds=2.0),
            watch=True,
            stop=live,
        )
    finally:
        logger.setLevel(level)
        if started:
            disconnect()  # stops the private Ray and removes its temp folder
    if writer.error is not None:
        raise RlstreamError(f"the demo's run writer failed: {writer.error}")
    # One maintenance pass, as `rlstream compact` runs: the OUT the demo leaves is
    # compacted and has its run_latest and digest tables (docs/schema.md).
    maintain(out_sink(str(out)), MaintenanceConfig())
    rows = status_rows(read_latest(str(out)))
    report = base / "report.html"
    write_report(str(out), str(report))
    print(
        f"\nwatched {plural(len(rows), 'run')} on a local Ray for {time.monotonic() - live.start:.0f}s "
        f"({time.monotonic() - t0:.0f}s with start-up); "
        f"tables under {out}\n\n" + render_table(rows, color=sys.stdout.isatty())
    )
    print(
        f"HTML report: {report}\n"
        f"  open it in a browser: file://{report}\n\n"
        "The same views from the command line:\n"
        f"  rlstream status {out}            (add --follow while a watch runs, --json for scripts)\n"
        f"  rlstream report {out}            (writes {out}-report.html)\n\n"
        "Query the Delta tables (docs/schema.md has DuckDB, Spark, polars and more):\n"
        + "\n".join(f"  {c}" for c in query_commands(out))
    )
    print(
        f"\nEverything the demo wrote ({_size_mb(base):.1f} MB: runs, tables, report) is "
        f"under {base}; nothing else is left behind. Delete it when done: rm -rf {base}"
    )
    return 0


def query_commands(out: Path, python: str = sys.executable) -> list[str]:
    """Shell commands that query OUT's `steps` table with what rlstream installs:
    deltalake (always) and DuckDB's Python package (when installed) over the table's
    pyarrow dataset, which needs no DuckDB extension download. Both read through
    pyarrow's local filesystem, as `DeltaSink.dataset` does (with delta-rs's default
    file handler the process can abort as it exits)."""
    import importlib.util
    import json
    import shlex

    cols = json.dumps(["run_id", "step", "reward_mean", "mismatch_kl"])
    py = shlex.quote(python)
    table = (
        f"from deltalake import DeltaTable; from pyarrow import fs; p = {json.dumps(str(out / 'steps'))}; "
        "local = fs.SubTreeFileSystem(p, fs.LocalFileSystem()); "
    )
    read = (
        f"{table}t = DeltaTable(p).to_pyarrow_table(columns={cols}, filesystem=local); "
        'print(t.num_rows, "rows"); print(t.slice(0, 3).to_pylist())'
    )
    commands = [f"{py} -c {shlex.quote(read)}"]
    if importlib.util.find_spec("duckdb") is not None:
        sql = (
            "select run_id, count(*) as steps, round(avg(reward_mean), 3) as reward, "
            "max(mismatch_kl) as max_kl from steps group by run_id order by run_id"
        )
        query = (
            f"import duckdb; {table}steps = DeltaTable(p).to_pyarrow_dataset(filesystem=local); "
            f"print(duckdb.sql({json.dumps(sql)}))"
        )
        commands.append(f"{py} -c {shlex.quote(query)}")
    return commands


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
