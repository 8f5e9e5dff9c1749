"""Run folders are untrusted input: a link or a special file under ROOT is never
opened, so no byte of a file outside ROOT reaches OUT (docs/runtime.md, "What rlstream
reads"); a link to a folder inside ROOT is followed once."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from rlstream.errors import UnsafeFile
from rlstream.io.localfs import OUTSIDE
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import find_runs
from rlstream.pipeline.local import analyze_local
from tests.outputs import out_sql, out_tables
from tests.pipeline.runfiles import write_run

SECRET = b"root:*:20228:0:99999:7:::SECRET-e3b0c44298fc1c14\n"
MARK = "SECRET-e3b0c44298fc1c14"


def _strings(table: pa.Table) -> list[str]:
    """Every string value of a table, nested ones included (as text)."""
    return [str(v) for col in table.columns for v in col.to_pylist() if v is not None]


def _leaked(out: Path) -> list[str]:
    """Where the secret shows under OUT: in any table's values, or in any file's bytes."""
    hits = [
        name
        for name, t in out_tables(out).items()
        if t.num_columns and any(MARK in s for s in _strings(t))
    ]
    for f in out.rglob("*"):
        if f.is_file() and MARK.encode() in f.read_bytes():
            hits.append(str(f))
    return hits


def test_a_linked_transcript_is_quarantined_and_never_read(tmp_path):
    secret = tmp_path / "outside" / "shadow"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    run = write_run(tmp_path / "runs", steps=3)
    os.symlink(secret, run / "transcripts" / "shadow.json")
    os.mkfifo(run / "transcripts" / "pipe.json")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    rows = out_sql(out, "select file, reason, detail from quarantine order by file")
    assert ("transcripts/shadow.json", "unsafe_file", "not opened: a symbolic link") in rows
    assert [r[0] for r in rows].count("transcripts/shadow.json") == 1
    assert not any(r[0] == "transcripts/pipe.json" for r in rows)  # a FIFO is not listed
    assert out_sql(out, "select count(*) from steps") == [(3,)]  # the run is still read
    assert _leaked(out) == []


def test_a_linked_run_json_or_steps_file_is_not_opened(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_bytes(SECRET)
    a = write_run(tmp_path / "runs", "run-a", steps=3)
    b = write_run(tmp_path / "runs", "run-b", steps=3)
    (a / "run.json").unlink()
    os.symlink(secret, a / "run.json")
    (b / "steps.jsonl").unlink()
    os.symlink(secret, b / "steps.jsonl")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert _leaked(out) == []
    rows = out_sql(out, "select file, reason, detail from quarantine order by reason")
    assert rows == [
        (str(a), "bad_run_json", "is a symbolic link (not opened)"),
        ("steps.jsonl", "unsafe_file", "not opened: a symbolic link"),
    ]


def test_links_to_folders_outside_root_are_not_followed_inside_once(tmp_path):
    outside = tmp_path / "elsewhere"
    write_run(outside, "foreign", steps=2)
    root = tmp_path / "runs"
    write_run(root, "run-a", steps=2)
    os.symlink(outside / "foreign", root / "foreign")  # leads out of ROOT
    os.symlink(root / "run-a", root / "latest-run")  # inside ROOT: the same run again
    storage = Storage.for_url(str(root))
    assert find_runs(storage, str(root)) == [str(root / "run-a")]


def test_open_refuses_links_and_special_files(tmp_path):
    target = tmp_path / "t"
    target.write_bytes(b"x")
    os.symlink(target, tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    s = Storage.for_url(str(tmp_path))
    assert s.read(str(target)) == b"x"
    for name, reason in (("link", "a symbolic link"), ("fifo", "a special file")):
        with pytest.raises(UnsafeFile) as e:
            s.read(str(tmp_path / name))
        assert e.value.reason.startswith(reason)
        assert s.stat(str(tmp_path / name)) is None
    got = dict(s.read_many([str(target), str(tmp_path / "link")]))
    assert got[str(target)] == b"x" and isinstance(got[str(tmp_path / "link")], UnsafeFile)
    shutil.rmtree(tmp_path / "t", ignore_errors=True)


def test_a_file_above_the_limit_is_quarantined_with_its_size_unread(tmp_path):
    from rlstream.config import PipelineConfig

    run = write_run(tmp_path / "runs", steps=3)
    big = run / "transcripts" / "huge.json"
    with open(big, "wb") as f:  # sparse: 300 MB on paper, nothing on disk
        f.truncate(300 << 20)
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out), PipelineConfig(max_file_bytes=1 << 20))
    rows = out_sql(out, "select file, reason, detail from quarantine where reason <> 'late'")
    assert rows == [
        (
            "transcripts/huge.json",
            "file_too_large",
            f"not read: {300 << 20} bytes, above the limit of {1 << 20}",
        )
    ]
    assert out_sql(out, "select count(*) from steps") == [(3,)]


def test_a_linked_folder_leading_out_of_root_is_quarantined_never_read(tmp_path):
    """RUN/transcripts a link to a folder outside ROOT: each file under it is refused
    (its real location is checked on the descriptor), quarantined without excerpt."""
    run = write_run(tmp_path / "runs", steps=3)
    outside = tmp_path / "outside"
    shutil.move(run / "transcripts", outside)
    for f in outside.iterdir():
        f.write_bytes(SECRET)
    os.symlink(outside, run / "transcripts")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    rows = out_sql(out, "select reason, detail, count(*) from quarantine group by all")
    n = len(list(outside.iterdir()))
    assert rows == [
        ("unsafe_file", "not opened: outside ROOT (reached through a linked folder)", n)
    ]
    assert out_sql(out, "select count(*) from steps") == [(3,)]
    assert _leaked(out) == []


def test_a_linked_folder_inside_root_is_read(tmp_path):
    run = write_run(tmp_path / "runs", steps=3)
    shutil.move(run / "transcripts", tmp_path / "runs" / ".store")
    os.symlink(tmp_path / "runs" / ".store", run / "transcripts")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert out_sql(out, "select count(*) from quarantine where reason <> 'late'") == [(0,)]
    assert out_sql(out, "select sum(transcripts) from steps") == [(12,)]


def test_dotdot_in_a_path_or_key_is_refused(tmp_path):
    (tmp_path / "root" / "run").mkdir(parents=True)
    (tmp_path / "x.json").write_bytes(SECRET)
    s = Storage.for_url(str(tmp_path / "root"), roots=(str(tmp_path / "root"),))
    url = str(tmp_path / "root" / "run" / ".." / ".." / "x.json")
    for read in (s.read, lambda u: s.read_range(u, 0, 10)):
        with pytest.raises(UnsafeFile) as e:
            read(url)
        assert e.value.reason == "a '..' in its path"
    assert s.stat(url) is None and s.unsafe(url) == "a '..' in its path"
    with pytest.raises(UnsafeFile):  # outside the ROOTs, even named without '..'
        s.read(str(tmp_path / "x.json"))


def _link_out_every_folder(run: Path, outside: Path) -> list[str]:
    """Every folder directly in `run` moved outside, its files' bytes replaced by the
    secret, and a link left in its place; returns the linked names."""
    linked = []
    for d in sorted(p for p in run.iterdir() if p.is_dir()):
        dest = outside / d.name
        shutil.move(d, dest)
        for f in dest.rglob("*"):
            if f.is_file():
                f.write_bytes(SECRET)
        os.symlink(dest, d)
        linked.append(d.name)
    return linked


@pytest.mark.parametrize("fmt", ["tinker", "verl", "prime-rl", "trl"])
def test_every_format_reads_nothing_through_a_folder_link_out_of_root(tmp_path, fmt):
    from tests.formats.trainer_runs import sim_runs, trainer_run

    src = sim_runs(tmp_path / "sim", steps=3)
    run = trainer_run(src, tmp_path / "runs" / "r", fmt)
    outside = tmp_path / "outside"
    outside.mkdir()
    linked = _link_out_every_folder(run, outside)
    assert linked
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert out_sql(out, "select count(distinct run_id) from steps") == [(1,)]
    bad = out_sql(out, "select reason, detail from quarantine where reason <> 'unsafe_file'")
    assert [r for r in bad if r[0] != "late"] == []
    refused = out_sql(out, "select file, detail from quarantine where reason = 'unsafe_file'")
    assert refused, "the files behind the links get a row each"
    assert {d for _, d in refused} == {f"not opened: {OUTSIDE}"}
    assert all(f.split("/")[0] in linked for f, _ in refused)
    assert _leaked(out) == []


def test_a_nested_linked_folder_of_a_run_is_not_read(tmp_path):
    """A link deeper in a run (prime-rl's rollouts/step_N/train/all): the files
    reached through it lie outside ROOT and are refused, with a row each."""
    from tests.formats.trainer_runs import sim_runs, trainer_run

    src = sim_runs(tmp_path / "sim", steps=3)
    run = trainer_run(src, tmp_path / "runs" / "r", "prime-rl")
    inner = run / "rollouts" / "step_1" / "train" / "all"
    dest = tmp_path / "outside" / "all"
    shutil.move(inner, dest)
    (dest / "traces.jsonl").write_bytes(SECRET)
    os.symlink(dest, inner)
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert _leaked(out) == []
    rows = out_sql(out, "select file, reason, detail from quarantine where reason <> 'late'")
    assert rows and all(r[1] == "unsafe_file" and r[0].startswith("rollouts/step_1/") for r in rows)


def test_a_folder_mounted_inside_a_run_is_quarantined_never_read(tmp_path):
    """A bind mount shows paths inside ROOT; its mount id says where it comes from."""
    run = write_run(tmp_path / "runs", steps=3)
    outside = tmp_path / "outside"
    shutil.move(run / "transcripts", outside)
    for f in outside.iterdir():
        f.write_bytes(SECRET)
    target = run / "transcripts"
    target.mkdir()
    r = subprocess.run(["mount", "--bind", str(outside), str(target)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {r.stderr.decode().strip()}")
    try:
        out = tmp_path / "out"
        analyze_local([str(tmp_path / "runs")], str(out))
        rows = out_sql(out, "select reason, detail, count(*) from quarantine group by all")
    finally:
        subprocess.run(["umount", str(target)], check=True)
    n = len(list(outside.iterdir()))
    assert n > 0
    assert rows == [
        (
            "unsafe_file",
            "not opened: on another mount than its ROOT (a folder mounted inside ROOT)",
            n,
        )
    ]
    assert out_sql(out, "select count(*) from steps") == [(3,)]
    assert _leaked(out) == []
