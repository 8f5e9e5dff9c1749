"""TRL GRPOTrainer runs: trainer_state.json (rewritten whole) and completion tables.

Writers (huggingface/trl and huggingface/transformers, cited in docs/formats.md):
transformers' `Trainer.log` appends `{**logs, "epoch": ..., "step": global_step}` to
`state.log_history`; `TrainerState.save_to_json` writes the whole state
(`json.dumps(asdict(state), indent=2, sort_keys=True) + "\\n"`) to
`checkpoint-N/trainer_state.json` at every save and to `trainer_state.json` at the
end. TRL's `trl/trainer/grpo_trainer.py` `log` adds its averaged metrics (`reward`,
`reward_std`, `frac_reward_zero_std`, `completions/mean_length`,
`completions/clipped_ratio`, `entropy`, `kl`, `clip_ratio/*`,
`sampling/sampling_logp_difference/*`, `sampling/importance_sampling_ratio/*`,
`rewards/<func>/mean|std`; `eval_`-prefixed in evaluation) and, with
`log_completions`, writes `completions/completions_{step:05d}.parquet` (columns
`step`, `prompt`, `completion`, one per reward function, extra logs, `advantage`).

The newest of `trainer_state.json` and the highest `checkpoint-N/trainer_state.json`
is read whole each time one changes (`Snapshot`): entries of steps already read are
skipped, so no step is counted twice; train and eval entries of one step are merged
(`part` "train" / "eval"); the end-of-training summary entry (`train_runtime`) is not
a step. `max_steps` gives the run's end.

Mapping (canonical key <- TRL key): `reward/mean_with_unusable` (every completion)
<- `reward`; `reward/no_variance_frac` <- `frac_reward_zero_std`;
`completion/len_mean` <- `completions/mean_length`; `completion/truncated_frac` <-
`completions/clipped_ratio`; `sampling/entropy_estimate` <- `entropy`; `eval/<name>`
<- `eval_<name>`. Completion tables become rollout records: the reward is the sum of
the reward-function columns (TRL's default weights are 1; every numeric column but
`step` and `advantage` counts as one), grouped by identical prompt, and text
completions (`completion` as word ids, as for verl).
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rlstream.formats.base import NO_FAILURES, RunInfo, Snapshot, StepFiles, Stream
from rlstream.formats.records import (
    TEXT_ONLY,
    BadLine,
    BadRecord,
    Heartbeat,
    StepRecord,
    flatten,
    is_int,
    is_num,
    merge_parts,
    parse_json,
    rename,
    split_values,
    text_completion,
)

STATE = "trainer_state.json"
CHECKPOINT = re.compile(r"checkpoint-(\d+)")
COMPLETIONS = "completions"
TABLE = re.compile(r"completions_(\d+)\.parquet")

KEYS = {
    "reward": "reward/mean_with_unusable",
    "frac_reward_zero_std": "reward/no_variance_frac",
    "completions/mean_length": "completion/len_mean",
    "completions/clipped_ratio": "completion/truncated_frac",
    "entropy": "sampling/entropy_estimate",
}
NOT_METRICS = ("step", "epoch")


def _state(data: bytes | None) -> dict[str, Any]:
    obj = parse_json(data) if data else None
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    if not isinstance(obj.get("log_history"), list):
        raise BadRecord("invalid_field:log_history")
    return obj


class TrlFormat:
    """TRL (transformers Trainer) output folders."""

    name = "trl"
    run_files = (STATE,)
    unavailable: frozenset[str] = NO_FAILURES | TEXT_ONLY

    def detect(self, listing: frozenset[str], peek: Callable[[str], bytes | None]) -> bool:
        return STATE in listing or any(CHECKPOINT.fullmatch(n.rstrip("/")) for n in listing)

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        ckpts = sorted(
            (int(m.group(1)), n.rstrip("/"))
            for n in listing
            if (m := CHECKPOINT.fullmatch(n.rstrip("/")))
        )
        path = STATE if STATE in listing else (f"{ckpts[-1][1]}/{STATE}" if ckpts else None)
        data = read(path) if path else None
        if data is None:
            raise BadRecord(f"no {STATE} at the top or in the newest checkpoint folder")
        try:
            obj = _state(data)
        except BadRecord as e:
            raise BadRecord(f"{path}: {e}") from e
        ms = obj.get("max_steps")
        config = {"training": {"max_steps": ms + 1}} if is_int(ms) and ms > 0 else {}
        return RunInfo(name, config)

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        return (
            Snapshot((STATE, f"checkpoint-*/{STATE}")),
            StepFiles(COMPLETIONS, TABLE, None, "rollouts", dirs=False),
        )

    def parse_line(self, kind: str, obj: Any) -> StepRecord | Heartbeat | dict[str, Any]:
        raise BadRecord("not_a_line_format")

    def parse_snapshot(self, data: bytes) -> list[Any]:
        """Step records of a whole trainer_state.json, by step; a bad entry is a
        `BadLine` whose offset is None and whose reason names its index."""
        history = _state(data)["log_history"]
        by_step: dict[int, StepRecord] = {}
        out: list[Any] = []
        for i, e in enumerate(history):
            try:
                rec = _entry(e)
            except BadRecord as err:
                out.append(BadLine(None, f"log_history[{i}]:{err}", repr(e)[:480].encode(), i))
                continue
            if rec is None:
                continue
            rec = replace(rec, offset=i)
            prev = by_step.get(rec.step)
            by_step[rec.step] = rec if prev is None else (merge_parts(prev, rec) or prev)
        return out + [by_step[s] for s in sorted(by_step)]

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError) as e:
            raise BadRecord(f"unreadable_parquet:{type(e).__name__}") from e
        cols = table.column_names
        if "prompt" not in cols:
            raise BadRecord("missing_field:prompt")
        numeric = [
            c
            for c in cols
            if c not in ("step", "advantage")
            and (
                pa.types.is_floating(table.schema.field(c).type)
                or pa.types.is_integer(table.schema.field(c).type)
            )
        ]
        if not numeric:
            raise BadRecord("missing_field:reward")
        has_text = "completion" in cols
        rows = table.select(["prompt", *(["completion"] * has_text), *numeric]).to_pylist()
        recs: list[Any] = []
        for i, r in enumerate(rows):
            vals = [r[c] for c in numeric if r[c] is not None]
            if not all(is_num(v) for v in vals) or any(
                v != v or v in (float("inf"), float("-inf")) for v in vals
            ):
                recs.append(BadLine(None, f"row[{i}]:invalid_field:reward", repr(r)[:480].encode()))
                continue
            task = hashlib.blake2b(repr(r["prompt"]).encode(), digest_size=8).hexdigest()
            recs.append(
                {
                    "attempt_id": f"{step}-{i}",
                    "group_id": f"{step}-{task}",  # a step's completions of one prompt
                    "task_id": task,  # the prompt, at every step it comes back
                    "step": step,
                    "policy_version": None,
                    "reward": float(sum(vals)) if vals else None,
                    "trained": True,
                    "discard_reason": None,
                    "metadata": {},
                }
            )
        groups: dict[str, list[float | None]] = {}
        for r in recs:
            if isinstance(r, dict):
                groups.setdefault(r["group_id"], []).append(r["reward"])
        for r in recs:
            if isinstance(r, dict):
                g = groups[r["group_id"]]
                reason = (
                    "group_too_small"
                    if len(g) == 1
                    else ("no_variance" if len(set(g)) == 1 else None)
                )
                r.update(trained=reason is None, discard_reason=reason)
        if has_text:
            done = [r for r in recs if isinstance(r, dict)]
            by_id = {f"{step}-{i}": row for i, row in enumerate(rows)}
            recs += [
                text_completion(
                    r["attempt_id"],
                    r["task_id"],
                    step,
                    _text(by_id[r["attempt_id"]]),
                    _prompt(by_id[r["attempt_id"]]),
                    r,
                    name,
                )
                for r in done
            ]
        return recs


def _prompt(row: dict[str, Any]) -> str:
    """What a completion was sent: the prompt string, or its messages rendered."""
    p = row.get("prompt")
    if isinstance(p, list):
        return "\n".join(
            f"[{m.get('role', '?')}]\n{m.get('content', '')}" if isinstance(m, dict) else str(m)
            for m in p
        )
    return "" if p is None else str(p)


def _text(row: dict[str, Any]) -> str:
    """A completion's text: a string, or the contents of conversational messages."""
    c = row.get("completion")
    if isinstance(c, list):
        return " ".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in c)
    return "" if c is None else str(c)


def _entry(e: Any) -> StepRecord | None:
    if not isinstance(e, dict):
        raise BadRecord("not_an_object")
    if "train_runtime" in e:
        return None  # the end-of-training summary, not a step
    if "step" not in e:
        raise BadRecord("missing_field:step")
    step = e["step"]
    if not is_int(step) or step < 0:
        raise BadRecord("invalid_field:step")
    rest = {k: v for k, v in e.items() if k not in NOT_METRICS}
    metrics, text = split_values(flatten(rest))
    evals = [k for k in metrics if k.startswith("eval_")]
    if evals and len(evals) == len(metrics):
        return StepRecord(
            step, None, {f"eval/{k[5:]}": v for k, v in metrics.items()}, text, part="eval"
        )
    return StepRecord(step, None, rename(metrics, KEYS), text, part="train")


TRL = TrlFormat()
