"""Loops transcripts without `reward`: the reward of each attempt comes from its
rollouts.jsonl line (joined by attempt id in the pipeline's fold), so the kept samples,
the flag shares and `transcript_hack_flags` are those of the same run whose transcripts
carry their reward; "not evaluable" stays only where no reward exists anywhere."""

from __future__ import annotations

import json
import shutil

import orjson
import pytest

from rlstream.metrics import StepAgg
from rlstream.metrics.samples import SampleAgg, attempt
from rlstream.pipeline.local import analyze_local
from rlstream.pipeline.partial import StepPartial
from rlstream.pipeline.resume import _dec, _enc
from rlstream.simulate import SimConfig, simulate
from tests.outputs import out_sql

SAMPLE_COLS = "run_id, step, attempt_id, reward, trained, kept, flags"
STEP_COLS = "run_id, step, samples_scanned, flagged_frac, flagged_high_frac, flagged_high_n"


def _strip(runs, key: str = "reward") -> int:
    """Remove `key` from every transcript of `runs`; returns how many had it."""
    n = 0
    for path in runs.glob("*/transcripts/*.json"):
        doc = json.loads(path.read_text())
        if key in doc:
            n += 1
            del doc[key]
            path.write_text(json.dumps(doc))
    return n


def _out(out):
    samples = out_sql(out, f"select {SAMPLE_COLS} from samples order by run_id, step, attempt_id")
    steps = out_sql(out, f"select {STEP_COLS} from steps order by run_id, step")
    latest = out_sql(out, "select run_id, not_evaluable from latest order by run_id")
    return samples, steps, dict(latest)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    base = tmp_path_factory.mktemp("join")
    cfg = SimConfig(
        runs=2, steps=24, scenarios=("transcript_hack_flags", "healthy"), seed=3, groups=6,
        group_size=4,
    )  # fmt: skip
    simulate(base / "with", cfg)
    shutil.copytree(base / "with", base / "without")
    assert _strip(base / "without") > 0
    analyze_local([str(base / "with")], str(base / "out_with"))
    analyze_local([str(base / "without")], str(base / "out_without"))
    return _out(base / "out_with"), _out(base / "out_without")


def test_rewards_joined_from_rollouts_give_the_same_samples(twins):
    (samples, _, _), (joined, _, _) = twins
    assert joined == samples
    kinds = {k for row in joined for k in row[5]}
    assert {"top", "bottom"} <= kinds
    assert all(r[3] is not None for r in joined if "top" in r[5] or "bottom" in r[5])


def test_rewards_joined_from_rollouts_give_the_same_flag_shares(twins):
    (_, steps, _), (_, joined, _) = twins
    assert joined == steps
    highs = [r[4] for r in joined if r[4] is not None]
    assert highs and max(highs) > 0  # the hacking twin's shares among high-reward attempts


def test_transcript_hack_flags_is_evaluable_when_only_rollouts_carry_rewards(twins):
    (_, _, ne), (_, _, joined) = twins
    assert joined == ne
    assert all("transcript_hack_flags" not in v for v in joined.values())


def test_not_evaluable_stays_when_no_reward_exists_anywhere(tmp_path):
    simulate(tmp_path / "runs", SimConfig(runs=1, steps=6, seed=8, groups=2, group_size=4))
    _strip(tmp_path / "runs")
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    lines = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    for r in lines:
        r["reward"] = None
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    samples, steps, ne = _out(tmp_path / "out")
    assert samples and not any({"top", "bottom"} & set(r[5]) for r in samples)
    assert all(r[3] is None for r in samples)
    assert all(r[4] is None for r in steps)  # no high-reward share without rewards
    assert "transcript_hack_flags" in next(iter(ne.values()))


def _att(aid: str, reward=None, flags=("early_exit",)) -> dict:
    return attempt(
        attempt=aid, task="t1", reward=reward, trained=True, flags=list(flags),
        returned="import sys; sys.exit(0)", returned_bytes=23, sent_bytes=0,
    )  # fmt: skip


def _waiting(*aids: str) -> StepPartial:
    agg = StepAgg(samples=SampleAgg.from_attempts([], k=2, probes=0, high=0.5))
    return StepPartial(agg, 2, 2, {a: _att(a) for a in aids})


def _lines(**rewards) -> StepPartial:
    return StepPartial(rewards={a: [r, True] for a, r in rewards.items()})


def test_a_reward_joins_its_attempt_in_either_order_and_counts_once():
    ways = (
        _waiting("a1", "a2").merge(_lines(a1=1.0, a2=0.0)),
        _lines(a1=1.0, a2=0.0).merge(_waiting("a1", "a2")),
        _lines(a2=0.0).merge(_waiting("a1")).merge(_waiting("a2")).merge(_lines(a1=1.0)),
    )
    for part in ways:
        assert part.unrated == {} and part.rewards == {}
        s = part.settled().agg.samples
        assert [c["attempt"] for c in s.top] == ["a1", "a2"]
        assert [c["reward"] for c in s.top] == [1.0, 0.0]
        assert (s.n_text, s.n_trained, s.n_high) == (2, 2, 1)
        assert s.finalize()["flagged_high_frac"] == 1.0


def test_an_attempt_whose_line_never_came_is_kept_without_a_reward_at_the_end():
    part = _waiting("a1").merge(_lines(a9=1.0)).settled()
    s = part.agg.samples
    assert part.unrated == {} and part.rewards == {}
    assert s.top == [] and [c["attempt"] for c in s.flagged] == ["a1"]
    assert (s.n_text, s.n_trained, s.n_high) == (1, 1, 0)
    assert s.finalize()["flagged_high_frac"] is None


def test_waiting_attempts_survive_the_resume_state():
    part = _waiting("a1").merge(_lines(a9=0.5))
    back = _dec(orjson.loads(orjson.dumps(_enc(part))))
    assert back.unrated == part.unrated and back.rewards == {"a9": [0.5, True]}
    joined = back.merge(_lines(a1=1.0)).settled().agg.samples
    assert [c["reward"] for c in joined.top] == [1.0]
