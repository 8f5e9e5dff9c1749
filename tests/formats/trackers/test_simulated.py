"""`simulate --format tensorboard` (verl logging to TensorBoard) reads as verl's own
file logger does: the same steps and reported figures, to float32 precision (what
`SummaryWriter.add_scalar` keeps), the trainer recognised as verl."""

from __future__ import annotations

import pytest

from rlstream.pipeline.local import analyze_local
from tests.formats.trainer_runs import sim_runs, table, trainer_run

COLUMNS = (
    "reported_reward_mean_with_unusable",
    "reported_completion_len_mean",
    "reported_truncated_frac",
    "reported_entropy_estimate",
    "reported_mismatch_kl",
    "reported_mismatch_ess",
)


def test_simulated_tensorboard_run_equals_verl_file_logger(tmp_path):
    sim = sim_runs(tmp_path / "sim", steps=6)
    trainer_run(sim, tmp_path / "verl" / "r1", "verl")
    trainer_run(sim, tmp_path / "tb" / "r1", "tensorboard")
    (state,) = analyze_local([str(tmp_path / "tb")], str(tmp_path / "out_tb"))
    analyze_local([str(tmp_path / "verl")], str(tmp_path / "out_verl"))
    assert (state.format, state.trainer) == ("tensorboard", "verl")
    tb = table(tmp_path / "out_tb", "steps", "order by step")
    verl = table(tmp_path / "out_verl", "steps", "order by step")
    assert [r["step"] for r in tb] == [r["step"] for r in verl] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(tb, verl, strict=True):
        for c in COLUMNS:
            assert (a[c] is None) == (b[c] is None), c
            if b[c] is not None:
                assert a[c] == pytest.approx(b[c], rel=1e-6, abs=1e-30), c
        assert dict(a["reported_eval"]) == pytest.approx(dict(b["reported_eval"]), rel=1e-6)
    assert table(tmp_path / "out_tb", "quarantine") == []
