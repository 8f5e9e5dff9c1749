"""Two run folders that claim one run id (under two ROOTs, or two folders of one ROOT,
or a second analyze of another folder into the same OUT) are never merged into one
run: the first folder is the run, the other is rejected with a `_rejected`
quarantine row (`duplicate_run_id`) naming both, shown where rejected runs are shown,
and analyze exits with its rejected-runs code."""

from __future__ import annotations

import json
import shutil

import pytest

from rlstream.cli import main
from rlstream.errors import EXIT_FAILURE, EXIT_REJECTED
from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_sql


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("dup")
    (lab,) = simulate(base / "a", SimConfig(runs=1, steps=5, seed=4, groups=2))
    return base / "a", lab.run, lab.run_id


def _check(out, run_id, kept, refused, capsys):
    assert out_sql(out, "select run_id, count(*), count(distinct step) from steps group by 1") == [
        (run_id, 5, 5)
    ]
    ((uri, replaced),) = out_sql(out, "select run_uri, replaced_steps from latest")
    assert (uri, replaced) == (str(kept), 0)
    ((file, reason, detail),) = out_sql(
        out, "select file, reason, detail from quarantine where run_id = '_rejected'"
    )
    assert (file, reason) == (str(refused), "duplicate_run_id")
    assert detail.startswith(f"run_id '{run_id}' is already the run at {kept}: ")
    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out.rstrip().splitlines()
    assert table[-2:] == ["rejected (1 run; not analysed):", f"  {refused}: {detail}"]


def test_one_run_id_under_two_roots_is_refused_not_merged(one_run, tmp_path, capsys):
    a, name, run_id = one_run
    b = tmp_path / "b"
    shutil.copytree(a, b)
    out = tmp_path / "out"
    assert main(["analyze", str(a), str(b), "--out", str(out), "--in-process"]) == EXIT_REJECTED
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("analyzed 1 run; ")
    assert said[1:3] == [
        "1 run rejected (not analysed):",
        f"  {b / name}: run_id '{run_id}' is already the run at {a / name}: two folders with "
        "one run id are not merged; give one run another run_id, or analyze them into "
        f"separate OUTs (if the run moved here, `--reset-run {run_id}` reads it again from here)",
    ]
    _check(out, run_id, a / name, b / name, capsys)


def test_two_folders_of_one_root_claiming_one_run_id(one_run, tmp_path, capsys):
    a, name, run_id = one_run
    root = tmp_path / "root"
    shutil.copytree(a / name, root / "x-first")
    shutil.copytree(a / name, root / "y-copy")
    meta = json.loads((root / "y-copy" / "run.json").read_text())
    assert meta["run_id"] == run_id
    out = tmp_path / "out"
    assert main(["analyze", str(root), "--out", str(out), "--in-process"]) == EXIT_REJECTED
    capsys.readouterr()
    _check(out, run_id, root / "x-first", root / "y-copy", capsys)


def test_another_folder_analyzed_later_into_the_same_out(one_run, tmp_path, capsys):
    a, name, run_id = one_run
    b = tmp_path / "b"
    shutil.copytree(a, b)
    out = tmp_path / "out"
    assert main(["analyze", str(a), "--out", str(out), "--in-process"]) == 0
    # the only run asked for is refused: nothing analysed, exit 1
    assert main(["analyze", str(b), "--out", str(out), "--in-process"]) == EXIT_FAILURE
    capsys.readouterr()
    _check(out, run_id, a / name, b / name, capsys)
    # the run itself goes on as before
    assert main(["analyze", str(a), "--out", str(out), "--in-process"]) == 0


def test_a_watch_refuses_the_second_folder_once(one_run, tmp_path, capsys, caplog):
    """A watch over both ROOTs (runs found again at every discovery): the copy is
    rejected once, with one error logged, and the run's rows are its own."""
    a, name, run_id = one_run
    b = tmp_path / "b"
    shutil.copytree(a, b)
    out = tmp_path / "out"
    args = ["watch", str(a), str(b), "--out", str(out), "--in-process", "--exit-when-finished"]
    assert main([*args, "--poll", "0.2"]) == EXIT_REJECTED
    capsys.readouterr()
    said = [r for r in caplog.records if "is already the run at" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "ERROR"
    _check(out, run_id, a / name, b / name, capsys)
