"""Bad input in every format: a quarantine row with file, offset and reason; the rest
of the file is read; a file rewritten shorter (verl resuming, a TRL state from an
earlier checkpoint) neither loses nor double-counts a step."""

from __future__ import annotations

import json
from pathlib import Path

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local, build_group, local_executor
from tests.formats.trainer_runs import sim_runs, table, trainer_run


def _quarantine(out: Path) -> list[tuple]:
    return sorted((r["file"], r["offset"], r["reason"]) for r in table(out, "quarantine"))


def _steps(out: Path, col: str = "step") -> list:
    return [r[col] for r in table(out, "steps", "order by step")]


def test_tinker_bad_lines(tmp_path):
    run = trainer_run(sim_runs(tmp_path / "sim", steps=3), tmp_path / "runs" / "t", "tinker")
    good = (run / "metrics.jsonl").read_bytes()
    bad = [
        b'{"step": 7, "env/all/reward/to\n',  # truncated JSON
        b'{"step": "8", "env/all/reward/total": 1.0}\n',  # wrong type
        b'{"env/all/reward/total": 1.0}\n',  # no step
        b'{"step": 9, "optim/entropy": NaN}\n',  # non-finite
    ]
    (run / "metrics.jsonl").write_bytes(good + b"".join(bad))
    summaries = run / "iteration_000001" / "train_rollout_summaries.jsonl"
    lines = summaries.read_bytes().splitlines(keepends=True)
    broken = lines[0].replace(b'"total_reward": ', b'"total_reward": "x", "was": ')
    summaries.write_bytes(broken + b"".join(lines[1:]))
    capture = run / "capture" / "sample.jsonl"
    calls = capture.read_bytes()
    unscoped = json.loads(calls.splitlines()[0])
    del unscoped["scope"]["iteration"]
    bad_lp = json.loads(calls.splitlines()[0])
    bad_lp["samples"][0]["logprobs"][0] = "-0.5"
    first = json.dumps(unscoped).encode() + b"\n"
    capture.write_bytes(calls + first + json.dumps(bad_lp).encode() + b"\n")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    offs = [len(good)]
    for b in bad[:-1]:
        offs.append(offs[-1] + len(b))
    assert _quarantine(out) == sorted(
        [
            ("capture/sample.jsonl", len(calls), "missing_field:scope.iteration"),
            ("capture/sample.jsonl", len(calls) + len(first), "invalid_field:samples[0].logprobs"),
            ("iteration_000001/train_rollout_summaries.jsonl", 0, "invalid_field:total_reward"),
            ("metrics.jsonl", offs[0], "malformed_json"),
            ("metrics.jsonl", offs[1], "invalid_field:step"),
            ("metrics.jsonl", offs[2], "missing_field:step"),
            ("metrics.jsonl", offs[3], "non_finite_value"),
        ]
    )
    assert _steps(out) == [0, 1, 2]
    assert _steps(out, "attempts")[1] == len(lines) - 1


def test_verl_log_truncated_on_resume_counts_each_step_once(tmp_path):
    run = trainer_run(sim_runs(tmp_path / "sim", steps=6), tmp_path / "runs" / "v", "verl")
    log = run / "metrics.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)  # steps 1..6
    log.write_bytes(b"".join(lines[:4]) + b'{"step": 5, "data": [1]}\n')  # 1..4, a bad 5
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    run_units = local_executor(group.storage)
    group.poll(run_units, now=0.0)
    # The run resumes from its step-2 checkpoint: verl opens the log anew ("wb").
    resumed = [json.loads(x) for x in lines[2:]]
    for r in resumed[:2]:
        r["data"]["critic/score/mean"] = -1.0  # the replayed steps differ
    new = [json.dumps(r).encode() + b"\n" for r in resumed]
    log.write_bytes(new[0])
    group.poll(run_units, now=1.0)
    with open(log, "ab") as f:
        f.write(b"".join(new[1:]))
    group.poll(run_units, now=2.0, final=True)
    group.commit(now=2.0)
    out = tmp_path / "out"
    assert _steps(out) == [1, 2, 3, 4, 5, 6]
    assert -1.0 not in _steps(out, "reported_reward_mean_with_unusable")
    first = sum(len(x) for x in lines[:4])
    second = [0, len(new[0])]
    assert _quarantine(out) == sorted(
        [
            ("metrics.jsonl", first, "invalid_field:data"),
            ("metrics.jsonl", 0, "file_truncated"),
            ("metrics.jsonl", second[0], "rewritten_replay"),
            # read by a later poll, when its step was already final
            ("metrics.jsonl", second[1], "late"),
        ]
    )


def test_prime_rl_bad_export_line_and_row_without_step(tmp_path):
    run = trainer_run(sim_runs(tmp_path / "sim", steps=3), tmp_path / "runs" / "p", "prime-rl")
    exports = run / "token_exports" / "step_1" / "rank_0.jsonl"
    lines = exports.read_bytes().splitlines(keepends=True)
    rec = json.loads(lines[1])
    rec["position_ids"] = rec["position_ids"][:-1]
    exports.write_bytes(lines[0] + json.dumps(rec).encode() + b"\n" + b"".join(lines[2:]))
    metrics = run / "metrics.jsonl"
    size = metrics.stat().st_size
    with open(metrics, "ab") as f:
        f.write(b'{"time": 1.0, "loss/mean": 0.1}\n')
    traces = run / "rollouts" / "step_2" / "train" / "all" / "traces.jsonl"
    eps = traces.read_bytes().splitlines(keepends=True)
    no_group = json.loads(eps[0])
    del no_group["group"]
    bad_reward = json.loads(eps[1])
    bad_reward["traces"][0]["rewards"]["correct"]["score"] = "1"
    first = json.dumps(no_group).encode() + b"\n"
    traces.write_bytes(first + json.dumps(bad_reward).encode() + b"\n" + b"".join(eps[2:]))
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out))
    assert _quarantine(out) == [
        ("metrics.jsonl", size, "missing_field:step"),
        ("rollouts/step_2/train/all/traces.jsonl", 0, "missing_field:group.id"),
        (
            "rollouts/step_2/train/all/traces.jsonl",
            len(first),
            "invalid_field:rewards.correct.score",
        ),
        ("token_exports/step_1/rank_0.jsonl", len(lines[0]), "length_mismatch:position_ids"),
    ]
    assert _steps(out) == [0, 1, 2]
    assert _steps(out, "attempts")[2] == len(eps) - 2


def test_trl_state_rewritten_shorter_and_a_bad_entry_once(tmp_path):
    run = trainer_run(sim_runs(tmp_path / "sim", steps=6), tmp_path / "runs" / "t", "trl")
    final = json.loads((run / "trainer_state.json").read_text())
    history = [e for e in final["log_history"] if "train_runtime" not in e]
    for p in run.glob("checkpoint-*"):
        for f in p.iterdir():
            f.unlink()
        p.rmdir()

    def state(entries):
        s = dict(final, log_history=entries, global_step=max(e.get("step", 0) for e in entries))
        (run / "trainer_state.json").write_text(json.dumps(s, indent=2, sort_keys=True) + "\n")

    upto4 = [e for e in history if e["step"] <= 4]
    state([*upto4, {"epoch": 0.5, "loss": 1.0}])  # an entry without its step
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    run_units = local_executor(group.storage)
    group.poll(run_units, now=0.0)
    state([e for e in history if e["step"] <= 2])  # resumed from checkpoint-2
    group.poll(run_units, now=1.0)
    replay = [dict(e, reward=-1.0) if e["step"] in (3, 4) else e for e in history]
    state([*replay[: len(upto4)], {"epoch": 0.5, "loss": 1.0}, *replay[len(upto4) :]])
    group.poll(run_units, now=2.0, final=True)
    group.commit(now=2.0)
    out = tmp_path / "out"
    assert _steps(out) == [1, 2, 3, 4, 5, 6]
    assert -1.0 not in _steps(out, "reported_reward_mean_with_unusable")
    q = sorted(
        (r["file"], -1 if r["offset"] is None else r["offset"], r["reason"])
        for r in table(out, "quarantine")
    )
    assert q == [
        ("trainer_state.json", -1, f"log_history[{len(upto4)}]:missing_field:step"),
        ("trainer_state.json", 0, "file_rewritten_shorter"),
    ]
