"""`rlstream samples OUT RUN`: what it prints for a hacking run, a probe task across
steps, JSON rows, escaped run text, and a run without text (said, not an empty list)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlstream.cli import main
from rlstream.fleet.samples import escape, render
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_sql


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    base = tmp_path_factory.mktemp("samplescli")
    simulate(
        base / "runs",
        SimConfig(runs=1, steps=20, scenarios=("transcript_hack_flags",), seed=4, groups=6),
    )
    simulate(base / "runs", SimConfig(runs=1, steps=6, seed=9, trace="samples"))
    analyze_local([str(base / "runs")], str(base / "out"))
    runs = dict(out_sql(base / "out", "select run_id, format from latest"))
    assert len(runs) == 2
    return base / "out"


def _run_ids(out):
    rows = out_sql(out, "select run_id, count(*) from samples group by run_id")
    with_text = {r[0] for r in rows}
    every = {r[0] for r in out_sql(out, "select run_id from latest")}
    return with_text, every - with_text


def test_flagged_samples_show_their_shortcut_and_flag(out, capsys):
    (run,), _ = _run_ids(out)
    assert main(["samples", str(out), run, "--flagged", "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "FLAGS " in text
    assert any(
        s in text for s in ("sys.exit(0)", "rm -f tests/", "All tests passed", "EXPECTED_OUTPUT")
    )
    newest = max(r[0] for r in out_sql(out, f"select step from samples where run_id = '{run}'"))
    assert all(
        line.startswith(f"step {newest} ") for line in text.splitlines() if line.startswith("step ")
    )


def test_json_rows_and_a_task_across_steps(out, capsys):
    (run,), _ = _run_ids(out)
    assert main(["samples", str(out), run, "--json", "--step", "3"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {r["step"] for r in rows} == {3}
    want = out_sql(out, f"select count(*) from samples where run_id = '{run}' and step = 3")[0][0]
    assert len(rows) == want
    probes = out_sql(
        out,
        f"select task_id, count(distinct step) n from samples where run_id = '{run}' "
        "and list_contains(kept, 'probe') group by task_id order by n desc",
    )
    if probes:
        task, n = probes[0]
        assert main(["samples", str(out), run, "--task", task, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert len({r["step"] for r in got}) >= n and all(r["task_id"] == task for r in got)


def test_a_run_without_text_says_so(out, capsys):
    _, (bare,) = _run_ids(out)
    ne = out_sql(out, f"select not_evaluable from latest where run_id = '{bare}'")[0][0]
    assert "transcript_hack_flags" in ne
    for json_flag in ([], ["--json"]):  # never an empty list read as "no hacks"
        assert main(["samples", str(out), bare, *json_flag]) == 1
        got = capsys.readouterr()
        assert got.out == ""
        assert "record no text" in got.err and "transcript_hack_flags is not evaluable" in got.err


def test_an_unknown_run_is_named_as_such(out, capsys):
    assert main(["samples", str(out), "no-such-run", "--json"]) == 1
    got = capsys.readouterr()
    assert got.out == "" and f"no run no-such-run in {out}" in got.err
    assert "no text" not in got.err


def test_run_text_cannot_drive_the_terminal():
    row = {
        "step": 1, "attempt_id": "a\x1b[2J", "reward": 1.0, "kept": ["top"], "flags": [],
        "task_id": None, "group_id": None, "trained": True, "length": 3, "calls": 1,
        "stop_reason": None, "policy_version": None, "transcript": None,
        "sent": None, "sent_bytes": None, "returned": "ok\x1b]0;title\x07 done", "returned_bytes": 20,
    }  # fmt: skip
    text = render([row])
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;title\\x07" in text and escape("a\tb\nc") == "a\tb\nc"


def test_a_reader_that_stops_early_is_not_a_crash(out):
    """`rlstream samples OUT RUN | head`: the reader is gone before the text is written
    (its end of the pipe closed at once); the command ends quietly with 0, no
    traceback, with and without --json."""
    (run,), _ = _run_ids(out)
    for extra in ([], ["--json"]):
        cmd = [sys.executable, "-m", "rlstream.cli", "samples", str(out), run, *extra]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(timeout=120) == 0, err
        assert "Traceback" not in err and "BrokenPipe" not in err


def _sample(run: str, step: int, i: int) -> dict:
    text = f"step {step} attempt {i} " + "x" * 4000
    return {
        "run_id": run, "step": step, "attempt_id": f"a{step:03d}{i}", "task_id": f"t{step:03d}",
        "group_id": None, "reward": i / 2, "trained": True, "length": 10, "stop_reason": "stop",
        "policy_version": step, "calls": 1, "kept": ["top" if i else "bottom"], "flags": [],
        "sent": None, "sent_bytes": 0, "returned": text, "returned_bytes": len(text),
        "transcript": None, "commit_seq": step,
    }  # fmt: skip


@pytest.fixture(scope="module")
def many_commits(tmp_path_factory):
    """OUT/samples as a watch leaves it: one file per run commit (2 runs, 10 commits
    each of 2 steps of 3 rows)."""
    from rlstream.fleet.read import out_sink
    from rlstream.sinks.samples import samples_table

    out = tmp_path_factory.mktemp("bounded") / "out"
    sink = out_sink(str(out))
    for c in range(10):
        for run in ("r1", "r2"):
            rows = [_sample(run, s, i) for s in (2 * c, 2 * c + 1) for i in range(3)]
            sink.append("samples", samples_table(rows), {})
    return out


def test_samples_reads_only_the_files_and_rows_it_prints(many_commits):
    from rlstream.fleet.samples import SamplesReader, read_samples

    out = str(many_commits)
    r = SamplesReader(out, "r1")
    cols = len(r.ds.schema.names) - 1  # all but commit_seq
    assert len(list(r.ds.get_fragments())) == 20
    rows, newest = read_samples(out, "r1", reader=r)
    assert newest == 19 and [x["attempt_id"] for x in rows] == ["a0192", "a0191", "a0190"]
    # the newest step: one file of the 20, its step column, then its text columns
    (f1, g1, c1, n1), (f2, g2, c2, n2) = r.reads
    assert (f1, g1) == (f2, g2) and (c1, n1) == (1, 6) and (c2, n2) == (cols, 3)
    r = SamplesReader(out, "r1")
    rows, _ = read_samples(out, "r1", step=4, reader=r)
    assert {x["step"] for x in rows} == {4} and len(rows) == 3
    assert [(c, n) for _, _, c, n in r.reads] == [(1, 6), (cols, 3)]
    assert len({f for f, *_ in r.reads}) == 2  # the newest file, then step 4's
    r = SamplesReader(out, "r2")
    rows, _ = read_samples(out, "r2", task="t007", reader=r)
    assert {(x["run_id"], x["step"]) for x in rows} == {("r2", 7)}
    assert [(c, n) for _, _, c, n in r.reads] == [(1, 6), (cols, 3)]


def test_samples_reads_one_row_group_of_a_compacted_table(many_commits, tmp_path):
    """Compacted into one file of 120 rows, written in row groups of 64
    (`sinks.delta.ROW_GROUP_ROWS`): the newest step's text is read from the one row
    group that holds it."""
    import shutil

    import pyarrow.parquet as pq

    from rlstream.fleet.read import out_sink
    from rlstream.fleet.samples import SamplesReader, read_samples
    from rlstream.sinks.maintain import maintain

    out = tmp_path / "out"
    shutil.copytree(many_commits, out)
    maintain(out_sink(str(out)))
    r = SamplesReader(str(out), "r2")
    (frag,) = r.ds.get_fragments()
    assert pq.ParquetFile(out / "samples" / frag.path).metadata.num_row_groups == 2
    rows, newest = read_samples(str(out), "r2", reader=r)
    assert newest == 19 and {(x["run_id"], x["step"]) for x in rows} == {("r2", 19)}
    steps = [(g, n) for _, g, c, n in r.reads if c == 1]
    text = [(g, n) for _, g, c, n in r.reads if c > 1]
    assert sorted(g for g, _ in steps) == [0, 1] and sum(n for _, n in steps) == 60
    assert len(text) == 1 and text[0][1] == 3


def test_samples_after_analyze_reads_one_row_group_of_many(tmp_path):
    """An analyze commits every run's samples in one file: `rlstream samples` reads the
    newest step's text from one of its row groups."""
    import pyarrow.parquet as pq

    from rlstream.fleet.samples import SamplesReader, read_samples

    simulate(tmp_path / "runs", SimConfig(runs=2, steps=30, seed=4, groups=6))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    run, n = out_sql(tmp_path / "out", "select run_id, max(step) from samples group by 1")[0]
    want = out_sql(tmp_path / "out", f"select count(*) from samples where run_id = '{run}' "
                   f"and step = {n}")[0][0]  # fmt: skip
    r = SamplesReader(str(tmp_path / "out"), run)
    (frag,) = r.ds.get_fragments()
    groups = pq.ParquetFile(tmp_path / "out" / "samples" / frag.path).metadata.num_row_groups
    total = out_sql(tmp_path / "out", "select count(*) from samples")[0][0]
    assert groups == -(-total // 64) > 4  # row groups of 64 rows
    rows, newest = read_samples(str(tmp_path / "out"), run, reader=r)
    assert newest == n and len(rows) == want
    text = [(g, k) for _, g, c, k in r.reads if c > 1]
    assert len(text) <= 2 and sum(k for _, k in text) == want
