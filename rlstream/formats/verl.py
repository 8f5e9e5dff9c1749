"""verl runs: the file logger's JSONL and the `rollout_data_dir` per-step dumps.

Writers (volcengine/verl, cited in docs/formats.md): `verl/utils/tracking.py`
`FileLogger` opens `VERL_FILE_LOGGER_PATH` (default
`$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`) with mode `wb`, so a resumed
run starts the file anew, and writes one `orjson` line per step:
`{"step": N, "data": {...}}` (newer versions add `elapsed_seconds`).
`verl/trainer/ppo/ray_trainer.py` `_dump_generations` writes
`<rollout_data_dir>/{step}.jsonl` in one write, one line per sample with `input`,
`output`, `gts`, `score`, `step` and the reward function's extra fields.

A verl run folder holds one such log (`metrics.jsonl` when it is there, else the one
`*.jsonl` in verl's shape; the run id is its stem unless that is "metrics") and, in
a sub-folder named `rollout_data`, `rollouts` or `rollout`, the dumps.

Mapping (canonical key <- verl key): `reward/mean_with_unusable` (the whole batch)
<- `critic/score/mean`;
`completion/len_mean` <- `response_length/mean`; `completion/truncated_frac` <-
`response_length/clip_ratio`; `sampling/entropy_estimate` <- `actor/entropy`;
`train/mismatch_kl` <- `rollout_corr/k3_kl`; `train/mismatch_ess` <-
`rollout_corr/rollout_is_eff_sample_size`; `eval/<data_source>` (a held-out score)
<- `val-core/<data_source>/<var>/mean@N` (`ray_trainer.py` `_val_metrics_update`; the
validation before training is a line of step 0). Dump lines become rollout records
(reward `score`, grouped by identical `input` within the step, groups whose scores
are all equal discarded as `no_variance`) and text completions (`output` as word ids:
repetition, distinct answers and their share per task; lengths count words, so the
length and truncation columns stay null and the reported ones stand). No token arrays
are written.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from rlstream.formats.base import NO_FAILURES, RunInfo, StepFiles, Stream, Tail, first_line
from rlstream.formats.records import (
    TEXT_ONLY,
    BadRecord,
    Heartbeat,
    KeyPattern,
    StepRecord,
    finite_number,
    flatten,
    group_discards,
    json_object,
    jsonl_records,
    map_keys,
    split_values,
    step_of,
    text_completion,
)

DEFAULT_LOG = "metrics.jsonl"
DUMP_DIRS = ("rollout_data", "rollouts", "rollout")
DUMP = re.compile(r"(\d+)\.jsonl")
MAX_PEEKS = 4

KEYS = {
    "critic/score/mean": "reward/mean_with_unusable",
    "response_length/mean": "completion/len_mean",
    "response_length/clip_ratio": "completion/truncated_frac",
    "actor/entropy": "sampling/entropy_estimate",
    "rollout_corr/k3_kl": "train/mismatch_kl",
    "rollout_corr/rollout_is_eff_sample_size": "train/mismatch_ess",
}
EVAL_KEYS: tuple[KeyPattern, ...] = ((re.compile(r"val-core/(.+)/[^/]+/mean@\d+"), r"eval/\1"),)
"""`_val_metrics_update`: `val-core/<data_source>/<core var>/mean@<n max>`, the mean
validation score of each data source (its core variable, `acc` or `reward`)."""


def _is_verl_line(line: bytes | None) -> bool:
    obj = json_object(line)
    return obj is not None and "step" in obj and isinstance(obj.get("data"), dict)


def _logs(listing: frozenset[str], peek: Callable[[str], bytes | None]) -> list[str]:
    names = sorted(n for n in listing if n.endswith(".jsonl"))
    if DEFAULT_LOG in names:
        names = [DEFAULT_LOG] + [n for n in names if n != DEFAULT_LOG]
    return [n for n in names[:MAX_PEEKS] if _is_verl_line(first_line(peek(n)))]


class VerlFormat:
    """verl's file-logger runs."""

    name = "verl"
    run_files = (DEFAULT_LOG,)
    unavailable: frozenset[str] = NO_FAILURES | TEXT_ONLY

    def detect(self, listing: frozenset[str], peek: Callable[[str], bytes | None]) -> bool:
        return bool(_logs(listing, peek))

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        logs = _logs(listing, lambda n: read(n))
        if not logs:
            raise BadRecord("no file-logger JSONL whose first line is {step, data}")
        if len(logs) > 1:
            raise BadRecord(
                f"several experiment logs in one folder ({', '.join(logs)}): give each "
                "run its own folder (VERL_FILE_LOGGER_PATH=<run>/metrics.jsonl)"
            )
        stem = logs[0].removesuffix(".jsonl")
        return RunInfo(name if stem == "metrics" else stem, {})

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        logs = sorted(n for n in listing if n.endswith(".jsonl"))
        log = DEFAULT_LOG if DEFAULT_LOG in logs else logs[0]
        out: list[Stream] = [Tail(log, "steps")]
        for d in DUMP_DIRS:
            if d + "/" in listing:
                out.append(StepFiles(d, DUMP, None, "rollouts", dirs=False))
                break
        return tuple(out)

    def parse_line(self, kind: str, obj: Any) -> StepRecord | Heartbeat | dict[str, Any]:
        if not isinstance(obj, dict):
            raise BadRecord("not_an_object")
        step = step_of(obj)
        data = obj.get("data")
        if not isinstance(data, dict):
            raise BadRecord("missing_field:data" if data is None else "invalid_field:data")
        metrics, text = split_values(flatten(data))
        return StepRecord(step, None, map_keys(metrics, KEYS, EVAL_KEYS), text)

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Any]:
        out: list[Any] = []
        n = 0
        roll: dict[str, Any] = {}
        for r in group_discards(jsonl_records(data, lambda obj: _sample(obj, step))):
            if isinstance(r, dict):  # a sample's rollout record, then its output text
                roll = {**r, "attempt_id": f"{step}-{n}"}
                out.append(roll)
                n += 1
            elif isinstance(r, tuple):  # (input, output)
                aid, task = roll["attempt_id"], roll["task_id"]
                out.append(text_completion(aid, task, step, r[1], r[0], roll, name))
            else:
                out.append(r)
        return out

    def parse_snapshot(self, data: bytes) -> list[StepRecord]:
        return []


def _sample(obj: Any, step: int) -> tuple[dict[str, Any], str]:
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    if step_of(obj) != step:
        raise BadRecord("step_mismatch")
    for k in ("input", "output"):
        if not isinstance(obj.get(k), str):
            raise BadRecord(f"missing_field:{k}" if k not in obj else f"invalid_field:{k}")
    if "score" not in obj:
        raise BadRecord("missing_field:score")
    score = finite_number(obj["score"], "score")
    task = hashlib.blake2b(obj["input"].encode(), digest_size=8).hexdigest()
    return {
        "attempt_id": "",
        "group_id": f"{step}-{task}",  # a step's samples of one prompt
        "task_id": task,  # the prompt, at every step it comes back
        "step": step,
        "policy_version": None,
        "reward": score,
        "trained": True,
        "discard_reason": None,
        "metadata": {},
    }, (obj["input"], obj["output"])


VERL = VerlFormat()
