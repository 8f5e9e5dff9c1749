"""OUT's step digest: maintenance keeps it, readers add the commits since, and it
always equals the digest of every steps row folded at once.

The reference is `fold` over the whole steps table read back with a plain reader:
after maintenance passes, after commits that no pass has seen, after a compaction
the digest did not follow (a pass that stopped half way), and after `--reset-run`.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from rlstream.fleet.read import out_sink, read_run_points, read_table
from rlstream.metrics.downsample import MAX_BINS, RunPoints, fold_runs
from rlstream.pipeline.rows import steps_table
from rlstream.sinks.delta import STEP_DIGEST_TABLE
from rlstream.sinks.health import run_health_table
from rlstream.sinks.maintain import MaintenanceConfig, maintain
from rlstream.sinks.step_digest import current_step_digest, read_step_digest, rewrite, to_table

RUNS = ("r0", "r1", "r'2")


def commit(sink, steps: range, rng: random.Random) -> None:
    rows = [
        {
            "run_id": r,
            "step": s,
            "reward_mean": None if rng.random() < 0.1 else rng.random(),
            "mismatch_kl": rng.choice([0.0, rng.random()]),
            "discards": [("no_variance", float(rng.randint(0, 2)))],
            "rollout_metadata": [("turns", float(s))],
        }
        for r in RUNS
        for s in steps
    ]
    sink.append("steps", steps_table(rows), {f"t:{steps.start}": 1})


def reference(out: str) -> dict[str, RunPoints]:
    return fold_runs({}, read_table(out, "steps"))


def assert_same(got: dict[str, RunPoints], want: dict[str, RunPoints]) -> None:
    assert got.keys() == want.keys()
    for rid, w in want.items():
        g = got[rid]
        assert (g.width, g.rows, g.last_step, g.metadata) == (
            w.width,
            w.rows,
            w.last_step,
            w.metadata,
        ), rid
        assert g.series.keys() == w.series.keys()
        for name, (st, vals) in w.series.items():
            assert g.series[name][0].tolist() == st.tolist(), (rid, name)
            assert g.series[name][1].tobytes() == vals.tobytes(), (rid, name)


def test_digest_follows_commits_passes_compactions_and_resets(tmp_path):
    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    rng = random.Random(3)
    for a in range(0, 600, 50):
        commit(sink, range(a, a + 50), rng)
    assert read_step_digest(sink) == ({}, set())
    assert_same(read_run_points(out), reference(out))  # no pass yet: all rows are read
    maintain(sink, MaintenanceConfig())
    by_run, covered = read_step_digest(sink)
    steps = DeltaTable(sink.uri("steps"))
    assert covered == {f.rsplit("/", 1)[-1] for f in steps.file_uris()}
    assert {d.rows for d in by_run.values()} == {600}
    assert_same(by_run, reference(out))
    # Commits no pass has seen: read from their own files, the digest not rewritten.
    version = DeltaTable(sink.uri(STEP_DIGEST_TABLE)).version()
    for a in range(600, 3000, 200):
        commit(sink, range(a, a + 200), rng)
    got = read_run_points(out)
    assert DeltaTable(sink.uri(STEP_DIGEST_TABLE)).version() == version
    assert {d.rows for d in got.values()} == {3000}
    assert_same(got, reference(out))
    for d in got.values():  # bounded: at most four points a bin
        assert d.width == 16 and all(st.size <= 4 * MAX_BINS for st, _ in d.series.values())
    # A compaction the digest did not follow: covered rows under new file names.
    DeltaTable(sink.uri("steps")).optimize.compact()
    assert_same(read_run_points(out), reference(out))
    maintain(sink, MaintenanceConfig())
    assert_same(read_step_digest(sink)[0], reference(out))
    # --reset-run: the run leaves the digest, the others' stay as they were.
    before = read_step_digest(sink)[0]
    sink.delete_run("r1")
    want = reference(out)
    assert set(want) == {"r0", "r'2"}
    assert_same(read_step_digest(sink)[0], {r: before[r] for r in want})
    assert_same(read_run_points(out), want)
    commit(sink, range(3000, 3010), rng)
    maintain(sink, MaintenanceConfig())
    assert_same(read_step_digest(sink)[0], reference(out))
    assert read_step_digest(sink)[0]["r1"].rows == 10


def test_a_report_reads_the_digest_not_every_step_row(tmp_path, monkeypatch):
    """After a pass, the report folds only the rows of files committed since."""
    import rlstream.sinks.step_digest as step_digest_mod
    from rlstream.fleet.report import render_report

    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    rng = random.Random(5)
    for a in range(0, 2000, 500):
        commit(sink, range(a, a + 500), rng)
    health = [
        {"run_id": r, "run_uri": f"/x/{r}", "as_of": 1.8e9, "commit_seq": 1, "status": "healthy"}
        for r in RUNS
    ]
    sink.append("run_health", run_health_table(health), {"h": 1})
    maintain(sink, MaintenanceConfig())
    commit(sink, range(2000, 2005), rng)
    folded: list[int] = []
    real = step_digest_mod.fold_runs

    def counting(by_run, rows: pa.Table):
        folded.append(rows.num_rows)
        return real(by_run, rows)

    monkeypatch.setattr(step_digest_mod, "fold_runs", counting)
    html = render_report(out)
    assert folded == [5 * len(RUNS)]
    assert html.count("2005 final steps") == len(RUNS)
    assert read_run_points(out)["r0"].last_step == 2004


@pytest.mark.parametrize("before", ["nothing", "a pass", "a pass and a reset"])
def test_a_pass_never_writes_over_a_reset(tmp_path, before):
    """A `--reset-run` that lands while a pass builds the digest (from steps rows read
    before the delete) makes the pass's write fail; it builds again from the new
    version, so the digest never shows the deleted rows: on the first pass, on a later
    one, and when an earlier reset already dropped another run."""
    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    rng = random.Random(9)
    commit(sink, range(0, 400), rng)
    if before != "nothing":
        maintain(sink, MaintenanceConfig())
    if before == "a pass and a reset":
        sink.delete_run("r'2")
    builds: list[set[str]] = []

    def build(dt):
        by_run, files = current_step_digest(sink, dt)
        builds.append(set(by_run))
        if len(builds) == 1:
            sink.delete_run("r1")  # the reset lands between the read and the write
        return to_table(by_run, files)

    rewrite(sink, STEP_DIGEST_TABLE, build)
    left = set(RUNS) - ({"r'2"} if before == "a pass and a reset" else set())
    assert builds == [left, left - {"r1"}]
    assert_same(read_step_digest(sink)[0], reference(out))
    assert set(read_run_points(out)) == left - {"r1"}


def test_a_pass_reads_only_new_rows_and_covers_what_its_compaction_wrote(tmp_path, monkeypatch):
    """A pass folds the files committed since the last one, then compacts the snapshot
    it read and covers the files the compaction wrote (from the commit's log entry):
    the compacted rows are never read again, by a pass or by a reader. A commit that
    lands during the pass (after the snapshot) stays uncovered and is read next time."""
    import rlstream.sinks.maintain as maintain_mod
    import rlstream.sinks.step_digest as step_digest_mod

    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    rng = random.Random(4)
    for a in range(0, 600, 50):
        commit(sink, range(a, a + 50), rng)
    maintain(sink, MaintenanceConfig())
    folded: list[int] = []
    real_fold, real_compact = step_digest_mod.fold_runs, maintain_mod._compact

    def counting(by_run, rows: pa.Table):
        folded.append(rows.num_rows)
        return real_fold(by_run, rows)

    def compact_during_a_commit(dt, cfg):
        commit(sink, range(700, 705), rng)  # a tailer's append lands meanwhile
        return real_compact(dt, cfg)

    monkeypatch.setattr(step_digest_mod, "fold_runs", counting)
    for a in range(600, 700, 10):
        commit(sink, range(a, a + 10), rng)
    monkeypatch.setattr(maintain_mod, "_compact", compact_during_a_commit)
    got = maintain(sink, MaintenanceConfig())
    assert got["steps"]["compacted"] == 11  # the compacted file and ten new ones
    assert folded == [100 * len(RUNS)]  # the new rows only, not the compacted ones
    covered = read_step_digest(sink)[1]
    files = {f.rsplit("/", 1)[-1] for f in DeltaTable(sink.uri("steps")).file_uris()}
    assert len(files) == 2 and len(files - covered) == 1  # the commit during the pass
    assert_same(read_run_points(out), reference(out))
    monkeypatch.setattr(maintain_mod, "_compact", real_compact)
    folded.clear()
    maintain(sink, MaintenanceConfig())
    assert folded == [5 * len(RUNS)]
    assert_same(read_step_digest(sink)[0], reference(out))
    assert read_step_digest(sink)[0]["r0"].rows == 705


def test_a_pass_with_nothing_new_writes_no_digest(tmp_path):
    """An idle fleet's pass: no steps or cohorts file committed or compacted since the
    last pass, so neither digest gets a new version."""
    from rlstream.sinks.band_digest import BAND_DIGEST_TABLE
    from rlstream.sinks.cohorts import cohorts_table

    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    commit(sink, range(0, 40), random.Random(6))
    band = {"cohort": "c", "figure": "reward_mean", "step": 0, "n": 2, "run_id": "r0"}
    band |= {"p10": 0.1, "p50": 0.2, "p90": 0.3, "median": 0.2, "mad": 0.1}
    sink.append("cohorts", cohorts_table([{**band, "as_of": 1.8e9, "commit_seq": 1}]), {"c": 1})
    first = maintain(sink, MaintenanceConfig())
    assert first[STEP_DIGEST_TABLE]["rows"] > 0 and first[BAND_DIGEST_TABLE]["rows"] > 0
    versions = [DeltaTable(sink.uri(t)).version() for t in (STEP_DIGEST_TABLE, BAND_DIGEST_TABLE)]
    again = maintain(sink, MaintenanceConfig())
    assert again[STEP_DIGEST_TABLE] == again[BAND_DIGEST_TABLE] == {"unchanged": True}
    assert [
        DeltaTable(sink.uri(t)).version() for t in (STEP_DIGEST_TABLE, BAND_DIGEST_TABLE)
    ] == versions
    commit(sink, range(40, 41), random.Random(7))  # one new commit: the step digest moves
    third = maintain(sink, MaintenanceConfig())
    assert third[BAND_DIGEST_TABLE] == {"unchanged": True} and third[STEP_DIGEST_TABLE]["rows"] > 0
    assert read_step_digest(sink)[0]["r0"].rows == 41
