"""The in-process pipeline end to end on a hand-written run, read back by DuckDB."""

from __future__ import annotations

import pytest

from rlstream.pipeline.local import analyze_local
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


def _steps(out):
    return out_sql(out, "select * from steps order by step")


def test_one_row_per_step_with_recomputed_kl(tmp_path):
    write_run(tmp_path / "runs", steps=3)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    rows = out_sql(
        tmp_path / "out",
        "select step, trained_tokens, sampled_tokens, mismatch_k1, reported_reward_mean, attempts "
        "from steps order by step",
    )
    assert [r[0] for r in rows] == [0, 1, 2]
    # 4 attempts x 5 tokens, first token of each null
    assert all(r[1] == 16 and r[2] == 16 and r[5] == 4 for r in rows)
    assert all(r[4] == 0.5 for r in rows)
    # k1 = mean(ls - lt) = -0.05 * mean(sin(i + s)) for i in 1..4
    import math

    for step, *_rest in rows:
        want = -0.05 * sum(math.sin(i + step) for i in range(1, 5)) / 4
        assert rows[step][3] == pytest.approx(want, rel=1e-9)


def test_rerun_on_same_out_adds_nothing(tmp_path):
    write_run(tmp_path / "runs", steps=3)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert len(_steps(tmp_path / "out")) == 3
