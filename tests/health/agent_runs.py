"""Hand-written Loops runs of a coding agent, written the way such agents write them.

Independent of the simulator: every attempt is one transcript of 5 to 7 generations,
each a short sentence and one tool call, with token ids made from the words of the
text (a stable hash per word) so that equal text is equal tokens:

    "Let me look at the repository." list_files(".")                 the same everywhere
    "Reading the module." read_file("src/<task>/solve.py")            the task's file
    "Writing the fix." write_file("src/<task>/solve.py", "<code>")    the answer
    "Running the tests now." run_tests()                             the same everywhere
    (after a failure, once: another write_file and run_tests)
    "All tests pass." finish() or "Done." finish()

A healthy run learns: the share of attempts that write their task's correct code rises
from 0.2 to 0.8, the others write one of a few wrong variants. In a hacked run, from
``onset`` on, a share of attempts rising to 0.9 skips the work and writes the same
``conftest.py`` that skips every test, whatever the task: one answer for every task,
rewarded 1. Rewards are 1 or 0 (tests pass or not); sync GRPO groups, a group whose
rewards are all equal is ``no_variance``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import orjson

LIST = 'Let me look at the repository. list_files(".")'
RUN = "Running the tests now. run_tests()"
EXPLOIT = (
    'Writing the fix. write_file("conftest.py", "import pytest\\n'
    "def pytest_collection_modifyitems(items):\\n    for item in items:\\n"
    '        item.add_marker(pytest.mark.skip)")'
)
WRONG = ("return xs[0]", "return sorted(xs)[0]", "return max(xs)", "return None")


def word_ids(text: str) -> list[int]:
    return [
        int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little") % 50_000
        for w in text.split()
    ]


def solution(task: str, variant: int) -> str:
    body = "return sorted(xs, key=abs)[len(xs) // 2]" if variant < 0 else WRONG[variant]
    return (
        f'Writing the fix. write_file("src/{task}/solve.py", "def solve_{task}(xs):\\n'
        f'    # median by magnitude for {task}\\n    {body}\\n")'
    )


def _attempt(rng: np.random.Generator, task: str, p_right: float, hack: bool) -> tuple:
    """(generation texts, reward) of one attempt."""
    if hack:
        return [LIST, EXPLOIT, RUN, "All tests pass. finish()"], 1.0
    turns = [LIST, f'Reading the module. read_file("src/{task}/solve.py")']
    right = rng.random() < p_right
    turns += [solution(task, -1 if right else int(rng.integers(len(WRONG)))), RUN]
    if not right and rng.random() < 0.5:  # one more try
        right = rng.random() < p_right
        turns += [solution(task, -1 if right else int(rng.integers(len(WRONG)))), RUN]
    turns.append("All tests pass. finish()" if right else "Done. finish()")
    return turns, float(right)


def _generation(rng: np.random.Generator, text: str, index: int, last: bool) -> dict:
    ids = word_ids(text)
    # Boilerplate is near-certain; the answer's words less so.
    scale = 0.8 if text.startswith(("Writing", "Reading")) else 0.05
    ls = np.round(-rng.exponential(scale, len(ids)), 5)
    lt = np.round(np.minimum(ls + rng.normal(0.0, 0.01, len(ids)), 0.0), 5)
    return {
        "index": index,
        "policy_version": None,  # set by the caller
        "completion_len": len(ids),
        "stop_reason": "stop" if last else "tool_call",
        "completion_tokens": ids,
        "sampler_logprobs": ls.tolist(),
        "trainer_logprobs": lt.tolist(),
        "text": text,
    }


def write_agent_run(
    d: Path, run_id: str, *, steps: int = 60, onset: int | None = None, seed: int = 0
) -> None:
    """Write one agent run to ``d``: healthy, or hacked from ``onset`` on."""
    rng = np.random.default_rng(seed)
    groups, size = 8, 4
    tasks = [f"task{i:03d}" for i in range(200)]
    (d / "transcripts").mkdir(parents=True)
    created = 1_767_225_600.0 + seed * 1000
    cfg = {
        "training": {"mode": "sync", "group_size": size, "groups_per_step": groups},
        "rollout": {"max_turns": 8},
        "sampling": {"max_tokens": 512, "temperature": 1.0},
        "model": {"name": "agent-coder"},
    }
    steps_lines, rollout_lines, seq = [], [], 0
    for t in range(steps):
        p_right = 0.2 + 0.6 * t / (steps - 1)
        hack_share = 0.0 if onset is None or t < onset else min(0.9, 0.3 + 0.1 * (t - onset))
        rewards_trained: list[float] = []
        for g, task in enumerate(rng.choice(tasks, groups, replace=False).tolist()):
            attempts = [
                _attempt(rng, task, p_right, rng.random() < hack_share) for _ in range(size)
            ]
            rewards = [r for _, r in attempts]
            trained = len(set(rewards)) > 1
            if trained:
                rewards_trained += rewards
            for turns, reward in attempts:
                aid = f"a{seq:08d}"
                seq += 1
                gens = [_generation(rng, x, i, i == len(turns) - 1) for i, x in enumerate(turns)]
                for gen in gens:
                    gen["policy_version"] = t
                doc = {
                    "attempt_id": aid,
                    "step": t,
                    "trains": trained,
                    "group_id": f"g{t:05d}-{g}",
                    "task_id": task,
                    "generations": gens if trained else [_untrained(x) for x in gens],
                }
                (d / "transcripts" / f"{aid}.json").write_bytes(orjson.dumps(doc))
                tool_calls = len(turns)
                rollout_lines.append(
                    {
                        "attempt_id": aid,
                        "group_id": f"g{t:05d}-{g}",
                        "task_id": task,
                        "step": t,
                        "policy_version": t,
                        "reward": reward,
                        "trained": trained,
                        "discard_reason": None if trained else "no_variance",
                        "metadata": {
                            "turns": len(turns),
                            "termination_reason": "stop",
                            "tool_calls": tool_calls,
                            "passed_tests": reward == 1.0,
                        },
                        "time": created + 60.0 * t + 50.0,
                    }
                )
        line: dict = {"step": t, "time": created + 60.0 * (t + 1)}
        if rewards_trained:
            line["reward/mean"] = float(np.mean(rewards_trained))
        steps_lines.append(line)
    run = {"format_version": 1, "run_id": run_id, "created_at": created, "config": cfg}
    run["finished_at"] = created + 60.0 * steps + 5.0
    (d / "run.json").write_bytes(orjson.dumps(run))
    (d / "steps.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in steps_lines))
    (d / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in rollout_lines))


def _untrained(gen: dict) -> dict:
    """A generation of an attempt that did not train: no trainer logprobs."""
    return {k: v for k, v in gen.items() if k != "trainer_logprobs"}
