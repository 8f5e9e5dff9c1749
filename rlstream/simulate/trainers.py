"""Simulated runs written the way other trainers write them (docs/formats.md).

`load_run(folder)` reads a simulated Loops run (run.json, steps.jsonl,
rollouts.jsonl, transcripts/) into per-step data; `writes(run, fmt)` lists, step by
step, the file writes the trainer would make (`Write`: append to a file, or replace
it whole), field for field from each trainer's writer (the source paths are in each
writer function and in docs/formats.md); `apply` performs them. `convert_tree`
turns a whole simulated ROOT into another format, labels included.

The reported figures are computed from the simulated attempts and tokens as the
trainer computes them (for example tinker's `optim/kl_sample_train_v2` is
0.5·mean((ls - lt)²) over sampled tokens), so the per-format readers and health rules
see what they would see on the real trainer's files.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlstream.simulate.trainer_files import WRITERS as FILE_WRITERS
from rlstream.simulate.trainer_trackers import (
    mlflow,
    run_uuid,
    swanlab,
    tensorboard,
    trackio,
    wandb,
)

TRACKERS = {
    "tensorboard": tensorboard,
    "wandb": wandb,
    "swanlab": swanlab,
    "trackio": trackio,
    "mlflow": mlflow,
}
"""verl to TensorBoard and W&B, AReaL to SwanLab, TRL to Trackio and MLflow."""
WRITERS = {**FILE_WRITERS, **TRACKERS}
"""Trainers' own files, and trainers logging through a tracker (`trainer_trackers`)."""
FORMATS = ("loops", *WRITERS)
STEPS_FROM_ONE = frozenset({"verl", "trl", "tensorboard", "wandb", "trackio", "mlflow"})
"""Formats whose trainer counts steps from 1 (verl's global_steps, transformers')."""


def reader_run_id(fmt: str, name: str) -> str:
    """The run id the reader gives the simulated run written from folder `name`."""
    if fmt == "trackio":
        return f"huggingface/{name}"
    if fmt == "mlflow":
        return run_uuid(name)
    return name


@dataclass(frozen=True, slots=True)
class Write:
    """One write of a trainer: `data` appended to `path`, or replacing it whole; with
    `sql`, statements `(sql, params)` run in one transaction on the SQLite database
    `path` (a tracker's store)."""

    path: str
    data: bytes
    append: bool = False
    sql: tuple[tuple[str, tuple[Any, ...]], ...] = ()


@dataclass
class Attempt:
    attempt_id: str
    group_id: str
    task_id: str
    reward: float | None
    trained: bool
    policy_version: int | None
    turns: int
    gens: list[dict[str, Any]] = field(default_factory=list)
    """Each: tokens (int array), ls, lt (float arrays, NaN for null), length,
    truncated, prompt_len, text and prompt (the Loops transcript's, None if absent)."""
    termination: str | None = None
    """The attempt's ``metadata.termination_reason`` (``stop``, ``length``, ``max_turns``)."""

    def text(self) -> str:
        """The attempt's completion text as the Loops transcript holds it (its
        shortcut included, `rlstream.simulate.text`)."""
        return "".join(g["text"] or "" for g in self.gens)


@dataclass
class StepData:
    step: int
    time: float | None
    reported: dict[str, Any]
    attempts: list[Attempt]

    def tokens(self, trained_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(ls, lt) over every sampled token of the step's attempts (trained ones)."""
        keep = [a for a in self.attempts if a.trained or not trained_only]
        ls = [g["ls"] for a in keep for g in a.gens]
        lt = [g["lt"] for a in keep for g in a.gens]
        if not ls:
            return np.empty(0), np.empty(0)
        return np.concatenate(ls), np.concatenate(lt)


@dataclass
class LoopsRun:
    name: str
    run_id: str
    config: dict[str, Any]
    created_at: float
    finished: bool
    steps: list[StepData]


def _floats(v: list[Any] | None, n: int) -> np.ndarray:
    if v is None:
        return np.full(n, np.nan)
    return np.asarray([np.nan if x is None else x for x in v], dtype=np.float64)


def load_run(folder: Path) -> LoopsRun:
    """A simulated Loops run folder, read back into per-step data."""
    meta = json.loads((folder / "run.json").read_text())
    steps: dict[int, StepData] = {}
    for line in (folder / "steps.jsonl").read_bytes().splitlines():
        obj = json.loads(line)
        if "step" in obj:
            rep = {k: v for k, v in obj.items() if k not in ("step", "time")}
            steps[obj["step"]] = StepData(obj["step"], obj.get("time"), rep, [])
    attempts: dict[str, Attempt] = {}
    for line in (folder / "rollouts.jsonl").read_bytes().splitlines():
        r = json.loads(line)
        if r["step"] not in steps:
            continue
        a = Attempt(
            r["attempt_id"], r["group_id"], r["task_id"], r["reward"], r["trained"],
            r.get("policy_version"), int((r.get("metadata") or {}).get("turns") or 1),
            termination=(r.get("metadata") or {}).get("termination_reason"),
        )  # fmt: skip
        attempts[a.attempt_id] = a
        steps[r["step"]].attempts.append(a)
    tdir = folder / "transcripts"
    for p in sorted(tdir.glob("*.json")) if tdir.exists() else []:
        t = json.loads(p.read_bytes())
        a = attempts.get(t["attempt_id"])
        if a is None or t.get("trace", "full") != "full":
            continue
        for g in t["generations"]:
            n = g["completion_len"]
            a.gens.append(
                {
                    "tokens": np.asarray(g["completion_tokens"], dtype=np.int64),
                    "ls": _floats(g["sampler_logprobs"], n),
                    "lt": _floats(g.get("trainer_logprobs"), n),
                    "length": n,
                    "truncated": g.get("stop_reason") == "length",
                    "prompt_len": int(g.get("prompt_len") or 0),
                    "text": g.get("text"),
                    "prompt": g.get("prompt"),
                }
            )
    return LoopsRun(
        folder.name,
        meta["run_id"],
        meta.get("config") or {},
        float(meta.get("created_at") or 0.0),
        meta.get("finished_at") is not None,
        [steps[s] for s in sorted(steps)],
    )


def writes(run: LoopsRun, fmt: str) -> list[list[Write]]:
    """The trainer's writes, one list per step (plus a last list for the run's end)."""
    return WRITERS[fmt](run, Write)


def apply(folder: Path, batch: list[Write]) -> None:
    """Perform writes under `folder` (whole files through a rename, as trainers that
    write per-step files in one go are read: never half-written)."""
    for w in batch:
        path = folder / w.path
        path.parent.mkdir(parents=True, exist_ok=True)
        if w.sql:
            conn = sqlite3.connect(path)
            try:
                for stmt, params in w.sql:
                    conn.execute(stmt, params)
                conn.commit()
            finally:
                conn.close()
        elif w.append:
            with open(path, "ab") as f:
                f.write(w.data)
        else:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(w.data)
            tmp.replace(path)


def convert_tree(src: Path, dst: Path, fmt: str) -> None:
    """Every simulated run under `src` rewritten under `dst` in format `fmt`, and
    labels.json (run ids are the run folder names, as the readers name them)."""
    labels = json.loads((src / "labels.json").read_text())
    ids = {}
    for folder in sorted(p for p in src.iterdir() if (p / "run.json").exists()):
        run = load_run(folder)
        out = dst / folder.name
        if out.exists():
            shutil.rmtree(out)
        for batch in writes(run, fmt):
            apply(out, batch)
        ids[run.run_id] = reader_run_id(fmt, folder.name)
    labels["format"] = fmt
    for r in labels.get("runs", []):
        r["run_id"] = ids.get(r["run_id"], r["run_id"])
        if fmt in STEPS_FROM_ONE and r.get("onset_step") is not None:
            r["onset_step"] += 1  # these trainers count steps from 1
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "labels.json").write_text(json.dumps(labels, indent=2) + "\n")
