"""Bad input never crashes the pipeline and is never lost silently: every bad record
is a quarantine row with file, offset and reason, and every good one is analysed."""

from __future__ import annotations

import json

from rlstream.pipeline.local import analyze_local
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run


def _q(out):
    return out_sql(
        out, 'select file, "offset", reason from quarantine order by file, "offset", reason'
    )


def _steps(out, col="step"):
    return [r[0] for r in out_sql(out, f"select {col} from steps order by step")]


def _append(path, text: str) -> int:
    offset = path.stat().st_size
    with open(path, "a") as f:
        f.write(text)
    return offset


def test_bad_lines_are_quarantined_with_offsets(tmp_path):
    run = write_run(tmp_path / "runs", steps=3)
    steps = run / "steps.jsonl"
    rolls = run / "rollouts.jsonl"
    o1 = _append(steps, "{not json\n")
    o2 = _append(steps, '{"step": "three", "time": 1.0}\n')
    o3 = _append(steps, '{"step": 3, "reward/mean": NaN}\n')
    o4 = _append(steps, "[1, 2]\n")
    o5 = _append(steps, json.dumps({"step": 4, "reward/mean": 0.25}) + "\n")
    o6 = _append(steps, '{"step": 5, "rew')  # half-written last line
    good = json.loads((rolls.read_text().splitlines())[0])
    r1 = _append(rolls, json.dumps({**good, "reward": "high"}) + "\n")
    r2 = _append(rolls, json.dumps({k: v for k, v in good.items() if k != "group_id"}) + "\n")
    r3 = _append(rolls, '{"attempt_id": "x", "reward": Infinity}\n')
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert _q(out) == [
        ("rollouts.jsonl", r1, "invalid_field:reward"),
        ("rollouts.jsonl", r2, "missing_field:group_id"),
        ("rollouts.jsonl", r3, "non_finite_value"),
        ("steps.jsonl", o1, "malformed_json"),
        ("steps.jsonl", o2, "invalid_field:step"),
        ("steps.jsonl", o3, "non_finite_value"),
        ("steps.jsonl", o4, "not_an_object"),
        ("steps.jsonl", o6, "incomplete_line"),
    ]
    assert o5 not in [q[1] for q in _q(out)]
    # every good record is in steps/: steps 0-2 plus step 4 from its good line
    assert _steps(out) == [0, 1, 2, 4]
    assert _steps(out, "attempts") == [4, 4, 4, None]


def test_bad_transcripts_are_quarantined_and_the_rest_analysed(tmp_path):
    run = write_run(tmp_path / "runs", steps=2)
    tdir = run / "transcripts"
    (tdir / "a00000000.json").write_text("this is not json")
    t1 = json.loads((tdir / "a00000001.json").read_text())
    t1["generations"][0]["trainer_logprobs"] = t1["generations"][0]["trainer_logprobs"][:-1]
    (tdir / "a00000001.json").write_text(json.dumps(t1))
    t2 = json.loads((tdir / "a00000002.json").read_text())
    t2["generations"][0]["completion_tokens"] = ["a"] * 5
    (tdir / "a00000002.json").write_text(json.dumps(t2))
    (tdir / "a00000003.json").write_text("")
    (tdir / "notes.txt").write_text("ignored: not a transcript name")
    out = tmp_path / "out"
    states = analyze_local([str(tmp_path / "runs")], str(out))
    assert _q(out) == [
        ("transcripts/a00000000.json", None, "malformed_json"),
        ("transcripts/a00000001.json", None, "length_mismatch:generations[0].trainer_logprobs"),
        ("transcripts/a00000002.json", None, "invalid_field:generations[0].completion_tokens"),
        ("transcripts/a00000003.json", None, "malformed_json"),
    ]
    assert states[0].counters["quarantined"] == 4
    # step 0 lost all 4 of its transcripts; step 1 keeps its 4 (16 trained tokens)
    assert _steps(out, "transcripts") == [0, 4]
    assert _steps(out, "trained_tokens") == [None, 16]
    assert _steps(out, "attempts") == [4, 4]


def test_missing_and_empty_files(tmp_path):
    run = write_run(tmp_path / "runs", steps=2)
    (run / "rollouts.jsonl").unlink()
    (run / "steps.jsonl").write_text("")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert _q(out) == [
        ("rollouts.jsonl", None, "missing_file"),
        ("steps.jsonl", None, "empty_file"),
    ]
    assert _steps(out) == [0, 1]  # from the transcripts alone


def test_unreadable_run_json_skips_the_run_not_the_pipeline(tmp_path):
    write_run(tmp_path / "runs", "good", steps=2)
    bad = write_run(tmp_path / "runs", "bad", steps=2)
    (bad / "run.json").write_text("{oops")
    states = analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    assert [s.run_id for s in states] == ["good"]
    assert _q(tmp_path / "out") == [(str(bad), None, "bad_run_json")]


def test_nesting_strings_for_numbers_and_a_step_logged_again(tmp_path):
    run = write_run(tmp_path / "runs", steps=2)
    steps = run / "steps.jsonl"
    o1 = _append(steps, '{"step": 5, "m": ' + '{"a": ' * 1500 + "1" + "}" * 1500 + "}\n")
    o2 = _append(steps, "[" * 5000 + "\n")
    _append(steps, json.dumps({"step": 1, "reward/mean": 0.9}) + "\n")  # step 1 again
    tdir = run / "transcripts"
    t = json.loads((tdir / "a00000000.json").read_text())
    t["generations"][0]["sampler_logprobs"] = ["-0.5"] * 5  # strings, not numbers
    (tdir / "a00000000.json").write_text(json.dumps(t))
    t = json.loads((tdir / "a00000001.json").read_text())
    t["generations"][0]["completion_tokens"] = [1, 2.7, 3, 4, 5]  # not integers
    (tdir / "a00000001.json").write_text(json.dumps(t))
    out = tmp_path / "out"
    (state,) = analyze_local([str(tmp_path / "runs")], str(out))
    assert _q(out) == [
        ("steps.jsonl", o1, "too_deeply_nested"),
        ("steps.jsonl", o2, "too_deeply_nested"),
        ("transcripts/a00000000.json", None, "invalid_field:generations[0].sampler_logprobs"),
        ("transcripts/a00000001.json", None, "invalid_field:generations[0].completion_tokens"),
    ]
    assert _steps(out, "reported_reward_mean") == [0.5, 0.9]  # the newest line of step 1 wins
    assert state.counters["replaced_steps"] == 1
