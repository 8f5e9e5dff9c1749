"""Build small run directories by hand, byte for byte, for pipeline tests."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def write_run(
    root: Path,
    name: str = "run-a",
    steps: int = 3,
    group_size: int = 2,
    groups: int = 2,
    tokens: int = 5,
    finished: bool = True,
) -> Path:
    """A tiny valid run: deterministic rewards and logprobs; returns its folder."""
    run = root / name
    (run / "transcripts").mkdir(parents=True)
    meta: dict[str, Any] = {
        "format_version": 1,
        "run_id": name,
        "created_at": 1767225600.0,
        "config": {"training": {"max_steps": steps, "max_steps_off_policy": 2}},
    }
    if finished:
        meta["finished_at"] = 1767229200.0
    (run / "run.json").write_text(json.dumps(meta))
    seq = 0
    with open(run / "steps.jsonl", "w") as sf, open(run / "rollouts.jsonl", "w") as rf:
        for s in range(steps):
            for g in range(groups):
                for a in range(group_size):
                    aid = f"a{seq:08d}"
                    seq += 1
                    reward = float((a + g + s) % 2)
                    rf.write(
                        json.dumps(
                            {
                                "attempt_id": aid,
                                "group_id": f"g{s}-{g}",
                                "task_id": f"t{g}",
                                "step": s,
                                "policy_version": max(0, s - (a % 2)),
                                "reward": reward,
                                "trained": True,
                                "discard_reason": None,
                                "metadata": {"turns": 1 + a},
                                "time": 1767225600.0 + s,
                            }
                        )
                        + "\n"
                    )
                    ls = [-0.1 * (i + 1) - 0.01 * a for i in range(tokens)]
                    lt = [x + 0.05 * math.sin(i + s) for i, x in enumerate(ls)]
                    ls[0] = None  # a tool token: not sampled
                    lt[0] = None
                    (run / "transcripts" / f"{aid}.json").write_text(
                        json.dumps(
                            {
                                "attempt_id": aid,
                                "group_id": f"g{s}-{g}",
                                "task_id": f"t{g}",
                                "step": s,
                                "trains": True,
                                "trace": "full",
                                "generations": [
                                    {
                                        "index": 0,
                                        "policy_version": s,
                                        "prompt_len": 3,
                                        "completion_len": tokens,
                                        "stop_reason": "stop" if a else "length",
                                        "completion_tokens": [
                                            (i * (a + 1)) % 7 for i in range(tokens)
                                        ],
                                        "sampler_logprobs": ls,
                                        "trainer_logprobs": lt,
                                    }
                                ],
                            }
                        )
                    )
            sf.write(json.dumps({"step": s, "time": 1767225600.0 + s, "reward/mean": 0.5}) + "\n")
    return run
