"""`[limits]` of the rules TOML reaches the pipeline (max_file_bytes, max_tokens_slack),
the flags override it, and bad values are a clear error (docs/health.md, runtime.md)."""

from __future__ import annotations

import json

import pytest

from rlstream.cli import build_parser, main
from rlstream.cli_support import pipeline_config
from rlstream.errors import ConfigError
from rlstream.health import load_rules
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


def _args(*extra: str):
    return build_parser().parse_args(["analyze", "R", "--out", "O", *extra])


def test_limits_default_then_file_then_flag(tmp_path):
    assert (pipeline_config(_args()).max_file_bytes, pipeline_config(_args()).max_tokens_slack) == (
        64 << 20,
        0,
    )
    rules = tmp_path / "rules.toml"
    rules.write_text("[limits]\nmax_file_bytes = 1000\nmax_tokens_slack = 7\n")
    cfg = pipeline_config(_args("--rules", str(rules)))
    assert (cfg.max_file_bytes, cfg.max_tokens_slack) == (1000, 7)
    cfg = pipeline_config(_args("--rules", str(rules), "--max-file-bytes", "5000"))
    assert (cfg.max_file_bytes, cfg.max_tokens_slack) == (5000, 7)
    cfg = pipeline_config(_args("--rules", str(rules), "--max-tokens-slack", "0"))
    assert (cfg.max_file_bytes, cfg.max_tokens_slack) == (1000, 0)


@pytest.mark.parametrize(
    "text",
    [
        "[limits]\nmax_file_bytes = 0\n",
        "[limits]\nmax_tokens_slack = -1\n",
        "[limits]\nmax_file_bytes = '1M'\n",
        "[limits]\nmax_bytes = 1\n",
    ],
)
def test_bad_limits_are_a_config_error(tmp_path, text):
    rules = tmp_path / "rules.toml"
    rules.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_rules(rules)
    assert "[limits]" in str(e.value) or "'max_bytes'" in str(e.value)


def test_limits_from_the_rules_file_reach_analyze(tmp_path, capsys):
    run = write_run(tmp_path / "runs", steps=3, tokens=5)
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["sampling"] = {"max_tokens": 4}
    (run / "run.json").write_text(json.dumps(meta))
    (run / "transcripts" / "big.json").write_bytes(b" " * 5000)
    rules = tmp_path / "rules.toml"
    rules.write_text("[limits]\nmax_file_bytes = 4096\nmax_tokens_slack = 1\n")
    argv = ["analyze", str(tmp_path / "runs"), "--out", str(tmp_path / "o"), "--in-process"]
    assert main([*argv, "--rules", str(rules)]) == 0
    rows = out_sql(tmp_path / "o", "select file, reason from quarantine")
    assert rows == [("transcripts/big.json", "file_too_large")]  # 5 tokens within 4 + 1
    argv[3] = str(tmp_path / "o2")
    assert main([*argv, "--rules", str(rules), "--max-tokens-slack", "0"]) == 0
    reasons = out_sql(
        tmp_path / "o2", "select reason, count(*) from quarantine group by all order by 1"
    )
    assert reasons == [("exceeds_max_tokens", 12), ("file_too_large", 1)]
