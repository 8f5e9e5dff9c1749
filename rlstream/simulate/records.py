"""From a step's arrays to the records of the run format, and the order they appear in.

`step_events(plan, sd, metrics)` lists what a trainer writes during one step, each
with the fraction of the step window at which it happens:

- a transcript file when each attempt finishes (`Transcript`),
- the rollouts.jsonl lines of a group when its last attempt finishes (`Lines`),
- progress heartbeats in steps.jsonl every output.progress_every_seconds (`Lines`),
- the steps.jsonl record at the end of the step (`Lines`).

Records that carry a time hold `"time": None` here; the writer fills it in (synthetic
or real), which is the only difference between live and non-live output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from rlstream.simulate import text
from rlstream.simulate.config import RunPlan
from rlstream.simulate.engine import StepData

_WORDS = np.array(
    [
        a + b
        for a in (" ", " re", " con", " in", " de", " pro", " ex", " un", "", "_", ".", "(")
        for b in (
            "x", "val", "sum", "print", "return", "def", "for", "if", "list", "map",
            "0", "1", "2", "=", "+", ")", "tion", "ment", "ing", "ed", "ly", "er", "s",
        )
    ],
    dtype=object,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Transcript:
    name: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Lines:
    file: str  # "steps.jsonl" | "rollouts.jsonl"
    records: list[dict[str, Any]]  # each with "time": None


@dataclass(frozen=True, slots=True)
class Event:
    frac: float
    item: Transcript | Lines


def token_text(ids: np.ndarray) -> str:
    return "".join(_WORDS[ids % _WORDS.size].tolist())


def rollout_record(sd: StepData, a: int) -> dict[str, Any]:
    pv = int(sd.policy_version_A[a])
    reward = float(sd.reward_A[a])
    return {
        "attempt_id": sd.attempt_ids[a],
        "group_id": sd.group_ids[int(sd.group_A[a])],
        "task_id": sd.task_ids[int(sd.group_A[a])],
        "step": sd.step,
        "policy_version": pv if pv >= 0 else None,
        "reward": None if np.isnan(reward) else reward,
        "trained": bool(sd.trained_A[a]),
        "discard_reason": sd.discard_A[a],
        "metadata": sd.metadata_A[a],
        "time": None,
    }


def transcript(plan: RunPlan, sd: StepData, a: int) -> Transcript:
    trains = bool(sd.trained_A[a])
    pv = int(sd.policy_version_A[a])
    tk = sd.tokens
    gens = []
    for n in range(int(sd.att_gen_A1[a]), int(sd.att_gen_A1[a + 1])):
        g: dict[str, Any] = {
            "index": int(sd.gen_index_N[n]),
            "policy_version": pv if pv >= 0 else None,
            "prompt_len": int(sd.prompt_len_N[n]),
            "completion_len": int(sd.completion_len_N[n]),
            "stop_reason": sd.stop_reason_N[n],
        }
        if plan.trace == "full":
            lo, hi = int(sd.gen_tok_N1[n]), int(sd.gen_tok_N1[n + 1])
            ids = tk.ids_T[lo:hi]
            g["completion_tokens"] = ids.tolist()
            g["sampler_logprobs"] = tk.ls_T[lo:hi].tolist()  # NaN -> null via orjson
            if trains:
                g["trainer_logprobs"] = tk.lt_T[lo:hi].tolist()
            if tk.top_ids_TK is not None and tk.top_lp_TK is not None:
                sampled = sd.sampled_T[lo:hi]
                rows_i = tk.top_ids_TK[lo:hi].tolist()
                rows_l = tk.top_lp_TK[lo:hi].tolist()
                for j in np.flatnonzero(~sampled).tolist():
                    rows_i[j] = rows_l[j] = None
                g["top_logprobs"] = {
                    "k": int(tk.top_ids_TK.shape[1]),
                    "token_ids": rows_i,
                    "logprobs": rows_l,
                }
            g["text"] = token_text(ids)
            if n == int(sd.att_gen_A1[a]):
                g["prompt"] = text.prompt(sd.task_ids[int(sd.group_A[a])])
        gens.append(g)
    reward = float(sd.reward_A[a])
    if (
        gens
        and plan.trace == "full"
        and reward == 1.0
        and sd.hack_p > 0.0
        and text.hacks(sd.attempt_ids[a], plan.seed, sd.hack_p)
    ):
        gens[-1]["text"] += "\n" + text.shortcut(sd.attempt_ids[a])
    if gens and plan.trace == "full" and sd.note_A is not None and sd.note_A[a]:
        gens[-1]["text"] += "\n" + sd.note_A[a]
    doc = {
        "attempt_id": sd.attempt_ids[a],
        "group_id": sd.group_ids[int(sd.group_A[a])],
        "task_id": sd.task_ids[int(sd.group_A[a])],
        "step": sd.step,
        "trains": trains,
        "trace": plan.trace,
        "reward": None if np.isnan(reward) else reward,
        "generations": gens,
    }
    return Transcript(sd.attempt_ids[a] + ".json", orjson.dumps(doc))


def step_record(sd: StepData, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"step": sd.step, "time": None, **metrics}


def step_events(
    plan: RunPlan, sd: StepData, metrics: dict[str, Any], *, attempts: int | None = None
) -> list[Event]:
    """The writes of one step in order. With `attempts`, only that many attempts
    finish and nothing else is written (a run that stalls mid-step)."""
    n_att = len(sd.attempt_ids) if attempts is None else attempts
    events = [Event(float(sd.finish_A[a]), transcript(plan, sd, a)) for a in range(n_att)]
    if attempts is not None:
        return events
    for g in range(len(sd.group_ids)):
        members = np.flatnonzero(sd.group_A == g)
        recs = [rollout_record(sd, int(a)) for a in members]
        events.append(Event(float(sd.group_done_G[g]), Lines("rollouts.jsonl", recs)))
    for frac, done in sd.heartbeats:
        rec = {"progress": {"phase": "sampling", "completed_groups": done}, "time": None}
        events.append(Event(min(frac, 0.999), Lines("steps.jsonl", [rec])))
    events.append(Event(1.0, Lines("steps.jsonl", [step_record(sd, metrics)])))
    # Stable: at equal fractions, transcripts precede the lines that reference them.
    events.sort(key=lambda e: e.frac)
    return events
