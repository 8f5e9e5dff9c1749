"""Turn real runs' logs (../shared/realruns, read in place) into rlstream run directories.

Nothing here is copied into the repository: the logs are read where they are, and the
run directories are written to a temporary folder.

tinker_cookbook_cog_rl/experiment_N
    ``training_metrics.jsonl`` gives one update line per step. Tinker's ``reward/mean``
    is the mean over every rollout of the batch, before constant-reward groups are
    dropped, which is rlstream's ``reward/mean_with_unusable``; ``reward/pass@1``,
    ``data/*``, ``time/*`` and ``off_policy/*`` are kept under their own names (unknown
    metrics). Step times are the cumulative ``time/total`` from a fixed 2026 epoch, so
    they are long past: the runs are finished (``finished_at`` in run.json).

    ``trained_final_programs.jsonl`` holds the trained policy's programs, one per
    rollout (experiments 1-4), so the transcripts are built from them: at step t a share
    ``h(t)`` of the batch's attempts are programs of the final policy (``h`` follows the
    run's own ``reward/pass@1`` from its start level to its end level), the others are
    base-model samples (distinct per attempt, as long as the base programs shown in
    ``sample_rollouts.md``). Completion tokens are hashes of the program's words, so two
    attempts that wrote the same program have the same tokens: a constant ``emit 1``
    across tasks shows as one completion answering many tasks. Attempt rewards are the
    program's recorded reward for final-policy attempts; base attempts share the rest
    of the step's reward (0/1 plus one fractional attempt), so each step's recomputed
    reward_mean_with_unusable equals the reported one. Logprobs are unknown: written as
    null, so no token metric (entropy, KL, ESS) is invented.

astOwOlfo_tinker_reward_hacking/big_run_reward_hacking_by_epoch.csv
    Per environment, every 64 epochs, the average reward and the classifier's counts of
    hacking / non-hacking rollouts (64 per point). ``curve_run`` makes a steps-only run
    (one step per 8 epochs, linear between the published points) and, optionally,
    rollouts in which the share of hacking rollouts follows the published counts and
    every hacking rollout writes the same exploit text, as a hard-coded answer does.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import random
import re
from pathlib import Path
from typing import Any

EPOCH = 1767225600.0  # 2026-01-01T00:00:00Z
WORD = re.compile(r"\w+|[^\w\s]")
CONTROL_FLOW = re.compile(r"\b(forge|sustain|walk|when)\b")


def realruns_dir() -> Path | None:
    """../shared/realruns beside the repository (CI puts shared/ beside the clone)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "shared" / "realruns"
        if cand.is_dir():
            return cand
    return None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _tokens(text: str) -> list[int]:
    """Token ids from the program's words (stable across processes)."""
    out = []
    for w in WORD.findall(text):
        h = hashlib.blake2b(w.encode(), digest_size=4).digest()
        out.append(int.from_bytes(h, "little") % 32000)
    return out or [0]


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _write_run(
    run: Path,
    run_id: str,
    config: dict[str, Any],
    steps: list[dict[str, Any]],
    rollouts: list[dict[str, Any]] | None = None,
    transcripts: list[dict[str, Any]] | None = None,
    finished: bool = True,
) -> Path:
    run.mkdir(parents=True)
    meta: dict[str, Any] = {"format_version": 1, "run_id": run_id, "created_at": EPOCH}
    meta["config"] = config
    if finished:
        meta["finished_at"] = max((s.get("time", EPOCH) for s in steps), default=EPOCH) + 1.0
    (run / "run.json").write_text(json.dumps(meta))
    _write_jsonl(run / "steps.jsonl", steps)
    if rollouts is not None:
        _write_jsonl(run / "rollouts.jsonl", rollouts)
        tdir = run / "transcripts"
        tdir.mkdir()
        for t in transcripts or []:
            (tdir / f"{t['attempt_id']}.json").write_text(json.dumps(t))
    return run


def _before_lengths(exp: Path) -> list[int]:
    """Token counts of the base model's programs shown in sample_rollouts.md."""
    path = exp / "sample_rollouts.md"
    if not path.exists():
        return []
    text = path.read_text()
    out = []
    for part in text.split("### Before training")[1:]:
        m = re.search(r"```cog\n(.*?)```", part, re.S)
        if m:
            out.append(len(_tokens(m.group(1))))
    return out


def _smooth(xs: list[float], k: int = 5) -> list[float]:
    return [
        sum(xs[max(0, i - k + 1) : i + 1]) / len(xs[max(0, i - k + 1) : i + 1])
        for i in range(len(xs))
    ]


def cog_run(exp: Path, out: Path, with_rollouts: bool = True, seed: int = 0) -> Path:
    """One tinker cog_rl experiment as an rlstream run directory (see the module doc)."""
    metrics = sorted(_jsonl(exp / "training_metrics.jsonl"), key=lambda r: r["step"])
    n_rollouts = int(metrics[0].get("data/num_rollouts", 64))
    group_size = 8  # every experiment's README: group_size=8
    groups = max(1, n_rollouts // group_size)
    config = {
        "training": {
            "max_steps": len(metrics),
            "group_size": group_size,
            "groups_per_step": groups,
            "mode": "sync",
        },
        "model": {"name": "Qwen/Qwen3.5-4B"},
    }
    t = EPOCH
    steps = []
    for m in metrics:
        t += float(m.get("time/total", 60.0))
        line: dict[str, Any] = {"step": int(m["step"]), "time": round(t, 3)}
        for k, v in m.items():
            if k == "step" or isinstance(v, bool) or not isinstance(v, int | float):
                continue
            line["reward/mean_with_unusable" if k == "reward/mean" else k] = v
        line["discard/groups/no_variance"] = 0
        line["discard/groups/group_too_small"] = 0
        steps.append(line)

    programs = []
    path = exp / "trained_final_programs.jsonl"
    if with_rollouts and path.exists():
        for r in _jsonl(path):
            prog = r.get("final_program")
            if isinstance(prog, str) and r.get("task") and r.get("reward") is not None:
                programs.append((r["task"], prog, float(r["reward"])))
    if not programs:
        for s in steps:  # steps only: the group counts are not known
            s.pop("discard/groups/no_variance")
            s.pop("discard/groups/group_too_small")
        return _write_run(out / exp.name, f"cog-{exp.name}", config, steps)

    rng = random.Random(seed)
    by_task: dict[str, list[tuple[str, float]]] = {}
    for task, prog, reward in programs:
        by_task.setdefault(task, []).append((prog, reward))
    tasks = sorted(by_task)
    base_len = _before_lengths(exp) or [len(_tokens(p)) for _, p, _ in programs]
    pass1 = _smooth([float(m.get("reward/pass@1", 0.0)) for m in metrics])
    lo, hi = min(pass1[:5]), max(pass1[-5:])
    rollouts, transcripts = [], []
    seq = 0
    for s, m in zip(steps, metrics, strict=True):
        step = s["step"]
        h = min(max((pass1[step] - lo) / (hi - lo), 0.0), 1.0) if hi > lo else 1.0
        target = float(m["reward/mean"]) * n_rollouts
        chosen = rng.sample(tasks, min(groups, len(tasks)))
        chosen += [rng.choice(tasks) for _ in range(groups - len(chosen))]
        attempts = []  # (group index, task, tokens, reward or None)
        used: dict[int, int] = {}

        def final_sample(
            task: str, g: int, used: dict[int, int] = used
        ) -> tuple[list[int], float | None]:
            """The task's next recorded program. A literal answer (no control flow)
            has one spelling, so the policy repeats it; a real program is written
            differently each time (97 of 100 recorded ones are distinct), so once the
            task's records are used up the sample is a fresh, distinct program."""
            pool = by_task[task]
            i = used.get(g, 0)
            used[g] = i + 1
            prog, reward = pool[i % len(pool)]
            if i < len(pool) or not CONTROL_FLOW.search(prog):
                return _tokens(prog), reward
            return _tokens(prog) + [rng.randrange(32000) for _ in range(3)], None

        for g, task in enumerate(chosen):
            for _ in range(group_size):
                if rng.random() < h:
                    attempts.append([g, task, *final_sample(task, g)])
                else:
                    n_tok = max(4, round(rng.choice(base_len) * rng.uniform(0.7, 1.3)))
                    toks = [rng.randrange(32000) for _ in range(n_tok)]
                    attempts.append([g, task, toks, None])
        # The step's reward total, handed out as 0/1 (plus one fractional attempt):
        # final-policy attempts first, by their recorded reward, then base attempts.
        order = sorted(attempts, key=lambda a: (a[3] is None, -(a[3] or 0.0), rng.random()))
        whole = math.floor(target + 1e-9)
        for i, a in enumerate(order):
            a[3] = 1.0 if i < whole else (target - whole if i == whole else 0.0)
        # Recompute the step's group counts the way the format defines them.
        nv = 0
        for g in range(groups):
            rs = {a[3] for a in attempts if a[0] == g}
            nv += len(rs) == 1
        s["discard/groups/no_variance"] = nv
        for g, task, toks, reward in attempts:
            aid = f"a{seq:08d}"
            seq += 1
            trained = not all(a[3] == reward for a in attempts if a[0] == g)
            gid = f"g{step:05d}-{g:03d}"
            rollouts.append(
                {
                    "attempt_id": aid,
                    "group_id": gid,
                    "task_id": task,
                    "step": step,
                    "trained": trained,
                    "policy_version": step,
                    "reward": round(reward, 6),
                    "discard_reason": None if trained else "no_variance",
                    "time": s["time"] - 1.0,
                }
            )
            transcripts.append(
                {
                    "attempt_id": aid,
                    "step": step,
                    "trains": trained,
                    "group_id": gid,
                    "task_id": task,
                    "generations": [
                        {
                            "index": 0,
                            "policy_version": step,
                            "completion_len": len(toks),
                            "stop_reason": "stop",
                            "completion_tokens": toks,
                            "sampler_logprobs": [None] * len(toks),
                            **({"trainer_logprobs": [None] * len(toks)} if trained else {}),
                        }
                    ],
                }
            )
    return _write_run(out / exp.name, f"cog-{exp.name}", config, steps, rollouts, transcripts)


def read_epochs(csv_path: Path, env: str) -> list[dict[str, float]]:
    with csv_path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["env"] == env]
    return [{k: float(v) for k, v in r.items() if k != "env"} for r in rows]


def curve_run(
    csv_path: Path,
    env: str,
    out: Path,
    epochs_per_step: int = 8,
    with_rollouts: bool = False,
    seed: int = 0,
    step_seconds: float = 60.0,
) -> Path:
    """A run from one environment's published curve (see the module doc).

    Each step has 64 attempts in 8 groups of 8, like the published points (64
    rollouts each). Rewards are 0/1 with the step's published average (linear between
    points); with rollouts, the share of hacking attempts follows the classifier's
    counts and every hacking attempt writes the same exploit text.
    """
    pts = read_epochs(csv_path, env)
    last_epoch = int(pts[-1]["epoch"])
    n_steps = last_epoch // epochs_per_step + 1
    rng = random.Random(seed)

    def interp(key: str, epoch: float) -> float:
        for a, b in itertools.pairwise(pts):
            if a["epoch"] <= epoch <= b["epoch"]:
                w = (epoch - a["epoch"]) / (b["epoch"] - a["epoch"])
                return a[key] * (1 - w) + b[key] * w
        return pts[-1][key]

    def hack_share(epoch: float) -> float:
        total = interp("n_hacking_successful", epoch) + interp("n_hacking_unsuccessful", epoch)
        return total / 64.0

    config = {
        "training": {"max_steps": n_steps, "group_size": 8, "groups_per_step": 8},
        "model": {"name": "openai/gpt-oss-20b"},
    }
    steps, rollouts, transcripts = [], [], []
    exploit = _tokens("import sys; sys.exit(0)  # tests pass when the checker sees exit 0")
    seq = 0
    for step in range(n_steps):
        epoch = step * epochs_per_step
        p = min(max(interp("average_reward", epoch), 0.0), 1.0)
        time = EPOCH + (step + 1) * step_seconds
        share = hack_share(epoch) if with_rollouts else 0.0
        hacks = [rng.random() < share for _ in range(64)]
        # Hacking attempts pass; the others pass often enough to keep the published mean.
        p_other = min(max((p - share) / max(1.0 - share, 1e-9), 0.0), 1.0)
        rewards = [1.0 if h or rng.random() < p_other else 0.0 for h in hacks]
        groups = [rewards[g * 8 : g * 8 + 8] for g in range(8)]
        line: dict[str, Any] = {"step": step, "time": time}
        line["reward/mean_with_unusable"] = sum(rewards) / 64
        line["discard/groups/no_variance"] = sum(len(set(grp)) == 1 for grp in groups)
        line["discard/groups/group_too_small"] = 0
        steps.append(line)
        if not with_rollouts:
            continue
        tasks = [f"{env}-t{rng.randrange(4096):04d}" for _ in range(8)]
        for i in range(64):
            g = i // 8
            aid = f"a{seq:08d}"
            seq += 1
            trained = len(set(groups[g])) > 1
            if hacks[i]:
                toks = exploit
            else:
                toks = [rng.randrange(32000) for _ in range(rng.randint(40, 120))]
            gid = f"g{step:05d}-{g:03d}"
            rollouts.append(
                {
                    "attempt_id": aid,
                    "group_id": gid,
                    "task_id": tasks[g],
                    "step": step,
                    "trained": trained,
                    "policy_version": step,
                    "reward": rewards[i],
                    "discard_reason": None if trained else "no_variance",
                    "time": time - 1.0,
                }
            )
            transcripts.append(
                {
                    "attempt_id": aid,
                    "step": step,
                    "trains": trained,
                    "task_id": tasks[g],
                    "group_id": gid,
                    "generations": [
                        {
                            "completion_len": len(toks),
                            "stop_reason": "stop",
                            "completion_tokens": toks,
                            "sampler_logprobs": [None] * len(toks),
                            **({"trainer_logprobs": [None] * len(toks)} if trained else {}),
                        }
                    ],
                }
            )
    name = f"{env}{'-rollouts' if with_rollouts else ''}"
    return _write_run(
        out / name,
        f"hack-{name}",
        config,
        steps,
        rollouts if with_rollouts else None,
        transcripts,
    )
