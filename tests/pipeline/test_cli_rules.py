"""`--rules FILE` reaches the health rules from the command line; a bad file is a clear
error, not a traceback."""

from __future__ import annotations

from rlstream.cli import main
from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_sql


def _codes(out) -> list[str]:
    rows = out_sql(out, "select findings from latest")
    return sorted({f["code"] for (findings,) in rows for f in findings if f["state"] == "firing"})


def test_rules_file_disables_a_rule(tmp_path, capsys):
    simulate(
        tmp_path / "runs", SimConfig(runs=1, steps=60, scenarios=("entropy_collapse",), seed=4)
    )
    assert (
        main(["analyze", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--in-process"]) == 0
    )
    assert "entropy_collapse" in _codes(tmp_path / "a")
    rules = tmp_path / "rules.toml"
    rules.write_text("[entropy_collapse]\nenabled = false\n")
    argv = ["analyze", str(tmp_path / "runs"), "--out", str(tmp_path / "b"), "--in-process"]
    assert main([*argv, "--rules", str(rules)]) == 0
    assert "entropy_collapse" not in _codes(tmp_path / "b")


def test_bad_rules_file_is_a_clear_error(tmp_path, capsys):
    rules = tmp_path / "rules.toml"
    rules.write_text("[entropy_collapse]\nno_such_key = 1\n")
    argv = [
        "analyze",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--in-process",
        "--rules",
        str(rules),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlstream: error:") and "no_such_key" in err
