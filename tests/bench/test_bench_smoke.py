"""Smoke test of the speed benchmark (`python -m bench`): it runs and prints results.

CI-sized and never a speed assertion: only that every part ran, the batch
contenders agree on the numbers, and the figures were printed. The full `--quick`
run (about a minute on an idle machine, more under load) is the command in
bench/README.md; here its parts run on the smallest data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_contenders_agree_on_tiny_transcripts(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.batch import BatchSize, simulate_root
    from bench.contenders import compare, run_duckdb, run_plain

    stats = simulate_root(tmp_path / "runs", BatchSize(1, 3, 2, 4, 32))
    assert stats["tokens"] > 0 and stats["transcript_files"] == 3 * 2 * 4
    duck = run_duckdb(str(tmp_path / "runs"), 1)
    plain = run_plain(str(tmp_path / "runs"))
    assert len(duck) == 3
    assert compare(duck, plain) == []
    key = next(iter(duck))
    assert duck[key]["sampled_tokens"] > 0


@pytest.mark.ray
def test_bench_batch_quick_runs_and_prints(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "batch", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "rlstream vs duckdb" in text and "rlstream vs joined" in text
    assert "agree" in text and "DISAGREE" not in text
    assert "rlstream / DuckDB tokens/s" in text and "joined / DuckDB" in text
    assert "speed-up" in text and "peak memory growth" in text
    res = json.loads(out.read_text())["batch"]
    table = res["compare"]["table"]
    assert set(table) == {"rlstream", "joined", "duckdb", "plain"}
    assert table["rlstream"]["tokens_per_s"] > 0 and table["joined"]["tokens_per_s"] > 0
    # The joined analyze ran its actors in the standing Ray: their CPU (each imports
    # Ray and rlstream) was counted, outside the command's own process tree.
    assert table["joined"]["cpu_also_s"] > 1.0
    assert table["rlstream"]["cpu_also_s"] == 0.0
    assert "kernel tokens per CPU s" in text
    assert res["kernel"]["rlstream"]["tokens_per_cpu_s"] > 0


@pytest.mark.ray
@pytest.mark.s3
def test_bench_live_quick_runs_and_prints(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "live", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "live runs: freshness" in proc.stdout and "idle runs watched" in proc.stdout
    res = json.loads(out.read_text())["live"]
    assert res["fleets"][0]["steps_measured"] > 0
    assert res["s3"]["first"]["requests"]  # requests were counted
    # The CPU split by part: a fleet this small is watched in the driver, no Ray. A live
    # fleet costs the driver some CPU; 20 idle runs over 5 s may cost less than one clock
    # tick, so the idle driver may read 0.
    for case in (res["fleets"][0], res["idle"]):
        parts = case["parts_core_pct"]
        assert set(parts) == {"driver", "tailers", "workers", "ray"}
        assert parts["driver"] >= 0 and parts["tailers"] == parts["workers"] == parts["ray"] == 0
        assert sum(parts.values()) == pytest.approx(case["cpu_core_pct"])
    assert res["fleets"][0]["parts_core_pct"]["driver"] > 0
    assert "(driver " in proc.stdout and ", ray 0.0%)" in proc.stdout


def test_bench_long_reads_the_watch_commit_log_lines(tmp_path: Path) -> None:
    """bench long's commit-time windows parse the driver's own log line, with its time."""
    import time

    sys.path.insert(0, str(ROOT))
    from bench.long import _commit_lines, commit_window, last_before
    from rlstream.runtime.driver import COMMIT_LOG

    log = tmp_path / "watch.log"
    lines = [
        COMMIT_LOG % (0.5, 0.9, 10, 40, 200, 0.4, 0.6, 20),
        COMMIT_LOG % (0.25, 0.3, 10, 40, 50, 0.3, 0.5, 20),
        COMMIT_LOG % (0.1, 0.2, 10, 40, 10, 0.3, 0.5, 20),
    ]
    stamps = ["2026-12-01 10:00:00,250", "2026-12-01 10:00:20,500", "2026-12-01 10:00:40,000"]
    log.write_text(
        "noise\n"
        + "\n".join(f"{t} INFO rlstream: {x}" for t, x in zip(stamps, lines, strict=True))
        + "\n"
    )
    got = _commit_lines(log)
    t0 = time.mktime(time.strptime("2026-12-01 10:00:00", "%Y-%m-%d %H:%M:%S"))
    assert got == [
        (0.5, 10, 40, 200, t0 + 0.25),
        (0.25, 10, 40, 50, t0 + 20.5),
        (0.1, 10, 40, 10, t0 + 40.0),
    ]
    w = commit_window(got[:2])
    assert w == {
        "commits": 20,
        "commit_s_mean": 0.375,
        "step_rows_per_commit": 12.5,
        "commit_ms_per_step_row": 30.0,
    }
    # The late window: lines from index 1 on logged no later than the first writer's end.
    assert last_before(got, 1, t0 + 30) == [got[1]]
    assert last_before(got, 0, t0 + 40) == got
    assert last_before(got, 0, t0) == []
