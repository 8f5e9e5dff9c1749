"""Every format's transcripts get the run's `[samples]` settings (issue 28).

prime-rl episodes and verl `rollout_data_dir` dumps are read as per-step files, not
as Loops transcripts; their kept samples and scanners must follow the same settings:
a user scanner of the rules file (docs/health.md, "Transcript scanners") flags them,
`default_scanners = false` turns the defaults off, K (`top`) bounds their kept rows
(docs/schema.md, `samples`); and every unit that reads transcripts is planned with
the run's one `TranscriptSettings` (its panel and token cap with them).
Expected values are counted here from the records written, following those docs.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import orjson
import pytest

from rlstream.config import PipelineConfig
from rlstream.metrics.scanners import SampleText, samples_config
from rlstream.pipeline.local import analyze_local, build_group
from rlstream.pipeline.work import FilesUnit, LinesUnit, TranscriptsUnit, transcript_settings
from tests.formats.test_prime_rl_text import episode_record
from tests.formats.trainer_runs import FORMATS, sim_runs, table, trainer_run

KEY = "cat answer_key.json"
EXIT = "import sys\nsys.exit(0)"
"""A default scanner (`early_exit`) flags this; with `default_scanners = false` none."""
RULES = {
    "top": 1,
    "probes": 0,
    "default_scanners": False,
    "scanner": [
        {"name": "reads_key", "pattern": r"answer_key\.json", "on": "completion"},
        {"name": "judge", "entry": "tests.pipeline.test_scan_settings:returns_zero"},
    ],
}


def returns_zero(text) -> bool:
    """A user entry-point scanner (docs/health.md): takes a `SampleText`."""
    return "return 0" in text.completion


def _cfg(**over) -> PipelineConfig:
    return PipelineConfig(samples=samples_config({**RULES, **over}))


def _episode(step: int, eid: str, gid: str, reward: float, answer: str) -> dict:
    def node(role: str, content: str, sampled: bool) -> dict:
        toks = [len(content), 7] if sampled else [1, 2]
        return {
            "message": {"role": role, "content": content}, "sampled": sampled,
            "token_ids": toks, "mask": [sampled] * 2, "logprobs": [-0.5, -0.5],
        }  # fmt: skip

    nodes = [node("user", f"Solve task {gid}.", False), node("assistant", answer, True)]
    calls = [{"node": 1, "finish_reason": "stop", "usage": {"completion_tokens": 2}}]
    return episode_record(step, eid, gid, reward, nodes, calls)


def _prime_step(run: Path, step: int, eps: list[dict]) -> None:
    d = run / "rollouts" / f"step_{step}" / "train"
    (d / "all").mkdir(parents=True)
    (d / "effective").mkdir()
    for sub in ("all", "effective"):  # every episode trained
        (d / sub / "traces.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in eps))
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "time": 10.0 + step, "progress/rollouts": len(eps)}))
        f.write("\n" + json.dumps({"step": step, "time": 10.5 + step, "loss/mean": 0.0}) + "\n")


# step 0: one group of 6, rewards 1, 1, 1, 0, 0, 0; e1 (reward 1) and e4 (reward 0)
# read the answer key; e5 (reward 0) returns 0; e2 (reward 1) exits early.
ANSWERS = [
    (1.0, "def solve(x): return x * 2"),
    (1.0, KEY),
    (1.0, EXIT),
    (0.0, "def solve(x): return x"),
    (0.0, KEY),
    (0.0, "def solve(x): return 0"),
]


def _assert_settings_reached(out: Path, step: int, ids: list[str]) -> None:
    """The shares and kept rows of a step of the 6 `ANSWERS`, attempt i being ids[i],
    under `RULES`: 3 of 6 trained attempts flagged (2 by `reads_key`, 1 by `judge`),
    1 of the 3 high-reward ones (reward >= high_reward 0.5); K = 1: one top, one
    bottom, one flagged row."""
    (row,) = [r for r in table(out, "steps") if r["step"] == step]
    assert row["flagged_frac"] == 3 / 6
    assert row["flagged_high_frac"] == 1 / 3
    assert dict(row["flag_share"]) == {"reads_key": 2 / 6, "judge": 1 / 6}
    assert dict(row["flag_share_high"]) == {"reads_key": 1 / 3, "judge": 0.0}
    rows = [r for r in table(out, "samples", "order by attempt_id") if r["step"] == step]
    kept = {r["attempt_id"]: sorted(r["kept"]) for r in rows}
    reasons = sorted(k for ks in kept.values() for k in ks)
    assert reasons == ["bottom", "flagged", "top"]  # K = 1 each, no probes
    # flagged: the flagged attempt of highest reward (e1, reward 1)
    assert kept[ids[1]] == ["flagged"]
    want = {
        ids[i]: [n for n, hit in (("reads_key", KEY in a), ("judge", "return 0" in a)) if hit]
        for i, (_, a) in enumerate(ANSWERS)
    }  # the user scanners' only: no default runs (early_exit would flag e2)
    assert {r["attempt_id"]: list(r["flags"]) for r in rows} == {a: want[a] for a in kept}
    (top,) = [r for r in rows if "top" in r["kept"]]
    (bottom,) = [r for r in rows if "bottom" in r["kept"]]
    assert top["reward"] == 1.0 and bottom["reward"] == 0.0


def test_prime_rl_traces_get_user_scanners_and_k(tmp_path):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    _prime_step(run, 0, [_episode(0, f"e{i}", "g0", r, a) for i, (r, a) in enumerate(ANSWERS)])
    out = tmp_path / "out"
    states = analyze_local([str(tmp_path / "runs")], str(out), _cfg())
    assert [s.format for s in states] == ["prime-rl"]
    _assert_settings_reached(out, 0, [f"0-e{i}-0" for i in range(6)])


def test_verl_rollout_dumps_get_user_scanners_and_k(tmp_path):
    run = tmp_path / "runs" / "v1"
    (run / "rollout_data").mkdir(parents=True)
    lines = [{"step": s, "data": {"critic/score/mean": 0.5}} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    # two prompts of 3 samples each, scores varying within each (all trained)
    order = [0, 1, 3, 2, 4, 5]  # prompt A: answers 0, 1, 3; prompt B: 2, 4, 5
    dump = [
        {"input": "prompt A" if j < 3 else "prompt B", "output": ANSWERS[i][1],
         "gts": "", "score": ANSWERS[i][0], "step": 1}
        for j, i in enumerate(order)
    ]  # fmt: skip
    (run / "rollout_data" / "1.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dump))
    out = tmp_path / "out"
    states = analyze_local([str(tmp_path / "runs")], str(out), _cfg())
    assert [s.format for s in states] == ["verl"]
    # verl's attempt ids are `<step>-<line>`: ANSWERS[i] is on line order.index(i)
    _assert_settings_reached(out, 1, [f"1-{order.index(i)}" for i in range(6)])


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return sim_runs(tmp_path_factory.mktemp("sim"), steps=3)


@pytest.mark.parametrize("fmt", ("loops", *FORMATS))
def test_every_unit_that_reads_transcripts_carries_the_runs_settings(tmp_path, sim, fmt):
    """Whatever the format, each unit that may read transcripts (Loops transcript
    batches, per-step files, tailed generations) is planned with the one
    `TranscriptSettings` of its run: the config's `[samples]`, the run's probe panel
    and its token cap."""
    root = tmp_path / "runs"
    if fmt == "loops":
        shutil.copytree(sorted(p for p in sim.iterdir() if p.is_dir())[0], root / "r")
    else:
        trainer_run(sim, root / "r", fmt)
    cfg = _cfg(probes=2)
    group = build_group([str(root)], str(tmp_path / "out"), cfg)
    (state,) = list(group.states())
    state.probe_panel = ["task-a", "task-b"]
    units = group.plan(state)
    readers = [u for u in units if isinstance(u, (FilesUnit, LinesUnit, TranscriptsUnit))]
    want = transcript_settings(
        cfg.samples, state.config, ["task-a", "task-b"], join_rewards=fmt == "loops"
    )  # Loops: rewards its transcripts lack come from rollouts.jsonl
    assert readers and {u.settings for u in readers} == {want}
    # as sent to a worker: the user scanners travel as their config and still flag
    back = pickle.loads(pickle.dumps(readers[0])).settings
    assert back == want and back.samples.all_scanners()[1](SampleText((), ("return 0",)))
    assert want.samples.top == 1 and want.panel == ("task-a", "task-b")
    kinds = {type(u).__name__ for u in readers}
    assert kinds >= ({"TranscriptsUnit"} if fmt == "loops" else {"FilesUnit"})
