"""A generation longer than its run's own `sampling.max_tokens` contradicts the run's
sampler: it is quarantined as `exceeds_max_tokens` (with its length and the limit),
not aggregated; `max_tokens_slack` lets that many tokens more through. Checked on a
hand-written Loops run and on a tinker run (config.json's max_tokens)."""

from __future__ import annotations

import json

import pytest

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.pipeline.work import token_cap
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run

DETAIL = (
    "a generation of 5 tokens, above the run's limit of 4 (sampling.max_tokens + max_tokens_slack)"
)


def _cap(run, max_tokens: int) -> None:
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["sampling"] = {"max_tokens": max_tokens}
    (run / "run.json").write_text(json.dumps(meta))


def test_a_loops_transcript_longer_than_max_tokens_is_quarantined(tmp_path):
    run = write_run(tmp_path / "runs", steps=3, tokens=5)
    _cap(run, 4)
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    rows = out_sql(out, "select reason, detail, count(*) from quarantine group by all")
    assert rows == [("exceeds_max_tokens", DETAIL, 12)]
    assert out_sql(out, "select sum(transcripts) from steps") == [(0,)]


@pytest.mark.parametrize(("cap", "slack", "quarantined"), [(5, 0, 0), (4, 1, 0), (3, 1, 12)])
def test_a_generation_at_the_limit_or_within_the_slack_is_read(tmp_path, cap, slack, quarantined):
    run = write_run(tmp_path / "runs", steps=3, tokens=5)
    _cap(run, cap)
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out), PipelineConfig(max_tokens_slack=slack))
    assert out_sql(out, "select count(*) from quarantine") == [(quarantined,)]
    assert out_sql(out, "select sum(transcripts) from steps") == [(12 - quarantined,)]


def test_a_tinker_generation_longer_than_its_config_max_tokens_is_quarantined(tmp_path):
    from tests.formats.trainer_runs import sim_runs, trainer_run

    src = sim_runs(tmp_path / "sim", steps=3)
    ok = trainer_run(src, tmp_path / "ok" / "r", "tinker")
    out_ok = tmp_path / "out-ok"
    analyze_local([str(tmp_path / "ok")], str(out_ok))
    assert out_sql(out_ok, "select count(*) from quarantine where reason like 'exceeds%'") == [(0,)]
    lens = out_sql(out_ok, "select max(completion_len_max) from steps")[0][0]
    assert lens is not None and lens > 2
    conf = json.loads((ok / "config.json").read_text())
    conf["max_tokens"] = 2
    (ok / "config.json").write_text(json.dumps(conf))
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "ok")], str(out))
    rows = out_sql(out, "select distinct reason from quarantine where reason <> 'late'")
    assert rows == [("exceeds_max_tokens",)]


def test_token_cap_reads_sampling_max_tokens_only_when_it_is_a_positive_int():
    assert token_cap({"sampling": {"max_tokens": 64}}, 3) == 67
    for config in (
        {},
        {"sampling": {"max_tokens": True}},
        {"sampling": {"max_tokens": 0}},
        {"sampling": {"max_tokens": "64"}},
        {"sampling": 5},
    ):
        assert token_cap(config) is None
