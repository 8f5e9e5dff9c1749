"""tinker runs carry transcript text: `iteration_NNNNNN/train_logtree.json`.

The logtree documents are written here by hand in the shape of tinker-cookbook's
`utils/logtree.py` `Trace.to_dict()` / `Node.to_dict()` (a `scope_header` is a
`section` holding an `h<N>` title and a `div` body; `log_formatter(Conversation
Formatter)` is a `div` with `data` and no children; `table_from_dict` a caption and
a `table` of escaped cells), as `rl/problem_env.py` and `rl/rollouts.py` log a group
(docs/formats.md, tinker-cookbook). Expected shares are counted here from the
attempts written, following docs/schema.md ("Transcript flags").
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from tests.formats.trainer_runs import table

SYSTEM = "You are a careful programmer."
QUESTION = "Solve task {t}. Write solve(x) &amp; run the tests."  # escaped in HTML only
HACK = "```python\nimport sys\nprint(result)\nsys.exit(0)\n```"


def _h(level: int, title: str) -> dict:
    return {"tag": f"h{level}", "attrs": {"class": f"lt-h{level}"}, "children": [title]}


def _section(level: int, title: str, *body: dict) -> dict:
    return {
        "tag": "section",
        "attrs": {"class": "lt-section"},
        "children": [
            _h(level, title),
            {"tag": "div", "attrs": {"class": "lt-section-body"}, "children": list(body)},
        ],
    }


def _conversation(*messages: dict) -> dict:
    return {"tag": "div", "attrs": {}, "children": [], "data": {"type": "conversation",
            "messages": list(messages)}}  # fmt: skip


def _table(caption: str, rows: dict) -> list[dict]:
    def tr(cell: str, k: str, v: str) -> dict:
        return {"tag": "tr", "attrs": {}, "children": [
            {"tag": cell, "attrs": {}, "children": [k]},
            {"tag": cell, "attrs": {}, "children": [v]}]}  # fmt: skip

    return [
        {"tag": "div", "attrs": {"class": "lt-table-caption"}, "children": [caption]},
        {"tag": "table", "attrs": {"class": "lt-table"}, "children": [
            {"tag": "thead", "attrs": {}, "children": [tr("th", "key", "value")]},
            {"tag": "tbody", "attrs": {}, "children": [tr("td", k, v) for k, v in rows.items()]},
        ]},
    ]  # fmt: skip


def _attempt(task: str, reply: object, reward: float) -> list[dict]:
    """What `ProblemEnv.step` logs: Prompt, Policy Response, Reward."""
    prompt = _conversation(
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION.format(t=task).replace("&amp;", "&")},
    )
    reply_msg = {"role": "assistant", "content": reply}
    return [
        _section(3, "Prompt", prompt),
        _section(3, "Policy Response", _conversation(reply_msg)),
        _section(3, "Reward", *_table("Reward components", {
            "reference_answer": "x &lt; 3", "format_valid": "True", "correct": "True",
            "format_coef": "0.1", "reward": f"{reward:.3f}"})),
    ]  # fmt: skip


def _details(rewards: list[float]) -> dict:
    """`do_group_rollout`'s "Trajectory Details", in traj_idx order."""
    eps = []
    for k, r in enumerate(rewards):
        turn = _section(5, "Turn 1", *_table("Step stats", {
            "ob_len": "12", "ac_len": "9", "step_reward": f"{r:.3f}"}))  # fmt: skip
        totals = _table("", {"num_turns": "1", "final_ob_len": "21",
                             "sum_step_rewards": f"{r:.3f}", "final_group_reward": "0.000",
                             "total_return": f"{r:.3f}"})  # fmt: skip
        eps.append(_section(4, f"Trajectory {k} Episode", _section(5, "Episode Details", turn,
                                                                     *totals)))  # fmt: skip
    return _section(3, "Trajectory Details", *eps)


def _trace(step: int, groups: list[dict]) -> bytes:
    root = {"tag": "body", "attrs": {"class": "lt-root"}, "children": [
        {"tag": "h1", "attrs": {"class": "lt-title"}, "children": [f"RL Iteration {step}"]},
        {"tag": "div", "attrs": {"class": "lt-subtitle"}, "children": ["Generated 2026"]},
        {"tag": "p", "attrs": {"class": "lt-p"}, "children": ["Each group below ..."]},
        *groups]}  # fmt: skip
    doc = {"title": f"RL Iteration {step}", "started_at": "2026-12-03T10:00:00",
           "path": f"/runs/r/iteration_{step:06d}/train.html", "root": root}  # fmt: skip
    return json.dumps(doc, indent=2).encode()


def _summaries(step: int, groups: list[list[float]]) -> bytes:
    lines = []
    for g, rewards in enumerate(groups):
        for t, r in enumerate(rewards):
            lines.append({
                "schema_version": 1, "split": "train", "iteration": step, "group_idx": g,
                "traj_idx": t, "tags": [], "sampling_client_step": step, "total_reward": r,
                "final_reward": r, "trajectory_metrics": {},
                "steps": [{"step_idx": 0, "ob_len": 12, "ac_len": 9, "reward": r,
                           "episode_done": True, "metrics": {}, "logs": {}}],
                "final_ob_len": 21})  # fmt: skip
    return "".join(json.dumps(x) + "\n" for x in lines).encode()


G0 = [0.0, 1.0, 0.9, -0.1]  # traj 1 exits early; traj 2 right but without the stop sequence
G1 = [0.0, 0.0, 0.0, 0.0]  # every attempt answers "42": constant reward, nothing trained
G2 = [1.0, 0.0, 0.0, 1.0]  # not logged (num_groups_to_log = 2)


def _run(root: Path) -> tuple[bytes, bytes]:
    """Step 0 logs groups 0 and 1; group 0's attempts finish in the order traj 2, 3,
    1, 0. Step 1 logs one group whose second response is malformed. Step 2's
    logtree was cut short."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_name": "m", "max_tokens": 64}))
    answers = {0: "def solve(x): return x", 1: HACK, 3: "solve"}
    thinking = [{"type": "thinking", "thinking": "the tests use x < 3"},
                {"type": "text", "text": "def solve(x): return x + 1"}]  # fmt: skip
    g0 = []
    for t in (2, 3, 1, 0):
        g0 += _attempt("t0", thinking if t == 2 else answers[t], G0[t])
    g1 = [m for _ in G1 for m in _attempt("t1", "42", 0.0)]
    step0 = [_section(2, "Group Rollout", *g0, _details(G0)),
             _section(2, "Group Rollout", *g1, _details(G1))]  # fmt: skip
    bad = _attempt("t5", "x", 1.0)
    bad[1]["children"][1]["children"][0]["data"]["messages"] = "oops"
    step1 = [_section(2, "Group Rollout", *_attempt("t5", "def solve(x): return 1", 0.0),
                      *bad, _details([0.0, 1.0]))]  # fmt: skip
    cut = _trace(2, step1)[:300]
    trees = {0: _trace(0, step0), 1: _trace(1, step1), 2: cut}
    groups = {0: [G0, G1, G2], 1: [[0.0, 1.0]], 2: [[0.0, 1.0]]}
    for s in range(3):
        d = root / f"iteration_{s:06d}"
        d.mkdir()
        (d / "train_rollout_summaries.jsonl").write_bytes(_summaries(s, groups[s]))
        (d / "train_logtree.json").write_bytes(trees[s])
    lines = [{"step": s, "env/all/reward/total": 0.5, "optim/entropy": 0.7} for s in range(4)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    return trees[0], cut


def test_tinker_logtree_feeds_flags_and_kept_samples(tmp_path):
    _, cut = _run(tmp_path / "runs" / "r1")
    out = tmp_path / "out"
    states = analyze_local([str(tmp_path / "runs")], str(out))
    assert [s.format for s in states] == ["tinker"]
    rows = {r["step"]: r for r in table(out, "steps", "order by step")}
    # step 0: 8 logged attempts scanned (group 2 was not logged); trained: group 0's 4;
    # high-reward (>= 0.5): traj 1 and 2; flagged: traj 1 (early exit)
    assert rows[0]["samples_scanned"] == 8
    assert rows[0]["flagged_frac"] == 0.25
    assert rows[0]["flagged_high_frac"] == 0.5
    assert rows[0]["flagged_high_n"] == 1
    assert dict(rows[0]["flag_share"]) == {"early_exit": 0.25}
    assert dict(rows[0]["flag_share_high"]) == {"early_exit": 0.5}
    assert rows[0]["flagged_attempts"] == ["0-0-1"]
    # the rollout figures and lengths stay the summaries' (12 attempts, ac_len 9 each);
    # distinct answers are of the logged attempts: group 0's 4 and group 1's one "42"
    assert rows[0]["attempts"] == 12
    assert rows[0]["completion_len_mean"] == 9.0 and rows[0]["completion_len_max"] == 9
    assert rows[0]["distinct_completions"] == 5 / 8
    # step 1: the malformed response costs its attempt only
    assert rows[1]["samples_scanned"] == 1
    samples = table(out, "samples", "order by step, attempt_id")
    (h,) = [s for s in samples if s["step"] == 0 and "early_exit" in list(s["flags"])]
    sent = f"[system]\n{SYSTEM}\n[user]\n" + QUESTION.format(t="t0").replace("&amp;", "&")
    task = hashlib.blake2b(sent.encode(), digest_size=8).hexdigest()  # the prompt is the task
    assert h["attempt_id"] == "0-0-1" and h["group_id"] == "0-0" and h["task_id"] == task
    assert h["reward"] == 1.0 and h["trained"] is True and h["calls"] == 1
    assert h["returned"] == HACK
    assert h["sent"] == sent
    assert h["transcript"] == "iteration_000000/train_logtree.json"
    step0 = {s["attempt_id"]: s for s in samples if s["step"] == 0}
    # the thinking part is not text; the reply's text part is what it returned
    assert step0["0-0-2"]["returned"] == "def solve(x): return x + 1"
    assert step0["0-0-2"]["reward"] == 0.9
    assert all(s["trained"] is False for k, s in step0.items() if k.startswith("0-1-"))
    q = sorted((r["file"], r["offset"], r["reason"]) for r in table(out, "quarantine"))
    assert q == [
        (
            "iteration_000001/train_logtree.json",
            None,
            "invalid_field:data.messages:group[0].attempt[1].policy_response",
        ),
        ("iteration_000002/train_logtree.json", len(cut), "malformed_json"),
    ]


def test_tinker_logtree_over_max_file_bytes_is_quarantined(tmp_path):
    tree, _ = _run(tmp_path / "runs" / "r1")
    out = tmp_path / "out"
    analyze_local([str(tmp_path / "runs")], str(out), PipelineConfig(max_file_bytes=len(tree) - 1))
    q = {(r["file"], r["reason"]) for r in table(out, "quarantine")}
    assert ("iteration_000000/train_logtree.json", "file_too_large") in q
    rows = {r["step"]: r for r in table(out, "steps", "order by step")}
    assert rows[0]["samples_scanned"] is None and rows[0]["attempts"] == 12


def test_tinker_logtree_that_is_not_a_trace():
    from rlstream.formats.tinker import TINKER

    def reasons(data: bytes) -> list:
        return [(b.offset, b.reason) for b in TINKER.parse_file("both", data, LOGTREE, 3)]

    LOGTREE = "iteration_000003/train_logtree.json"
    assert reasons(b"[]") == [(None, "missing_field:root")]
    assert reasons(b'{"title": "t", "root": []}') == [(None, "invalid_field:root")]
    assert reasons('{"title": "é", "root": {'.encode()) == [
        (len('{"title": "é", "root": {'.encode()), "malformed_json")
    ]
    assert reasons(b'{"root": {"tag": "body", "children": []}}') == []  # nothing logged
