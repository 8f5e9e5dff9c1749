"""A deterministic watch of tracker runs that grow, for the growth and crash tests.

    python -m tests.formats.trackers.staged ROOT OUT STAGES

copies every fixture run into ROOT in STAGES steps: stage k holds the first k/STAGES
of each log's bytes (W&B, SwanLab, TensorBoard, MLflow metric files: cuts fall inside
records and blocks) and of each SQLite store's rows (Trackio, MLflow; inserted by a
writer in WAL mode that stays open while the pipeline reads), the other files whole.
After each stage it polls and commits a `RunGroup` on OUT at the fixed clock 1000 + k,
then a final poll and commit. With RLSTREAM_FAILPOINT set it dies where told; run
again with the same arguments it appends only what is missing and resumes from OUT.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from rlstream.config import PipelineConfig
from rlstream.pipeline.discover import find_runs
from rlstream.pipeline.local import build_group, local_executor

FIXTURES = Path(__file__).parent / "fixtures"
WRITERS: dict[Path, sqlite3.Connection] = {}
LOGS = (".wandb", ".swanlab")


def _files() -> list[Path]:
    out = []
    for p in sorted(FIXTURES.rglob("*")):
        if p.is_symlink() or not p.is_file() or p.suffix in (".py", ".json"):
            continue
        if p.name.endswith(("-wal", "-shm")):
            continue
        out.append(p)
    return out


def _is_log(p: Path) -> bool:
    return (
        p.name.startswith("events.out.tfevents.") or p.suffix in LOGS or p.parent.name == "metrics"
    )


def _grow_file(src: Path, dst: Path, frac: float) -> None:
    data = src.read_bytes()
    want = data[: int(len(data) * frac)] if frac < 1 else data
    have = dst.stat().st_size if dst.exists() else 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "ab") as f:
        f.write(want[have:])


def _grow_db(src: Path, dst: Path, frac: float) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        shutil.copyfile(src, dst)
        with sqlite3.connect(dst) as c:
            c.execute("DELETE FROM metrics")
        c.close()
    conn = WRITERS.get(dst)
    if conn is None:
        conn = WRITERS[dst] = sqlite3.connect(dst, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("ATTACH DATABASE ? AS src", (f"file:{src}?mode=ro",))
    (total,) = conn.execute("SELECT count(*) FROM src.metrics").fetchone()
    (have,) = conn.execute("SELECT count(*) FROM main.metrics").fetchone()
    upto = total if frac >= 1 else int(total * frac)
    if upto > have:  # the source's rows in rowid order, the missing ones appended
        conn.execute(
            "INSERT INTO main.metrics SELECT * FROM src.metrics ORDER BY rowid "
            f"LIMIT {upto - have} OFFSET {have}"
        )


def stage(root: Path, frac: float) -> None:
    for src in _files():
        rel = src.relative_to(FIXTURES).as_posix().replace("mlflow/files/mlruns", "mlruns")
        dst = root / rel  # MLflow's file store two levels up: within discovery's depth
        if src.suffix == ".db":
            _grow_db(src, dst, frac)
        elif _is_log(src):
            _grow_file(src, dst, frac)
        elif not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


def main(root: str, out: str, stages: str) -> None:
    cfg = PipelineConfig(commit_threads=1, idle_final_seconds=1e9)
    n = int(stages)
    group = None
    for k in range(1, n + 1):
        stage(Path(root), k / n)
        if group is None:
            group = build_group([root], out, cfg)
        for url in find_runs(group.storage, root):
            group.add_run(url)
        group.poll(local_executor(group.storage), now=1000.0 + k)
        group.commit(now=1000.0 + k)
    assert group is not None
    group.poll(local_executor(group.storage), now=2000.0, final=True)
    group.commit(now=2000.0)


REPO = Path(__file__).resolve().parents[3]


def run_staged(root: Path, out: Path, failpoint: str | None = None, stages: int = 5) -> int:
    """This module as a subprocess (dying at `failpoint`, if given); its exit code."""
    env = {k: v for k, v in os.environ.items() if k != "RLSTREAM_FAILPOINT"}
    if failpoint:
        env["RLSTREAM_FAILPOINT"] = failpoint
    cmd = [sys.executable, "-m", "tests.formats.trackers.staged", str(root), str(out), str(stages)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=300)
    if done.returncode not in (0, 137):
        sys.stderr.write(done.stderr.decode()[-3000:])
    return done.returncode


if __name__ == "__main__":
    main(*sys.argv[1:])
