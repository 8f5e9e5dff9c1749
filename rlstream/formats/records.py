"""Records every reader produces, and the validation helpers they share.

A reader (one module per trainer format in this package) turns bytes into these
records; the pipeline aggregates them. Nothing here touches storage or imports the
metric kernels.

- `StepRecord`: one step's reported metrics under canonical keys (docs/formats.md),
  with `part` naming which writer of a step it came from when a trainer writes one
  step in several rows (prime-rl's trainer and orchestrator; TRL's train and eval
  entries). `Heartbeat`: proof of life without a step.
- rollout dicts: what `rlstream.metrics.RolloutAgg.from_records` takes (keys
  `attempt_id`, `group_id`, `task_id`, `step`, `policy_version`, `reward`, `trained`,
  `discard_reason`, `metadata`).
- `Transcript`: one attempt's generations with whatever token arrays exist.
- helpers every reader shares: `map_keys` (a trainer's keys and key patterns onto the
  canonical keys), `group_discards` (attempts of groups without reward variance
  discarded as `no_variance` / `group_too_small`), `json_object` (for detection),
  `jsonl_records` (a per-step JSONL file, bad lines with their offsets).
- `parse_json` decodes with orjson and falls back to the standard library only to
  recognise NaN/Infinity literals, which are then rejected as non-finite values;
  `BadRecord`'s message is the quarantine reason.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from rlstream.formats.quarantine import QuarantineRow, excerpt


class BadRecord(ValueError):
    """A record that fails validation; the message is the quarantine reason."""


def parse_json(data: bytes) -> Any:
    """Decode JSON; raise BadRecord('malformed_json' | 'non_finite_value')."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        json.loads(data, parse_constant=_reject_constant)
    except _NonFinite as e:
        raise BadRecord("non_finite_value") from e
    except RecursionError as e:
        raise BadRecord("too_deeply_nested") from e
    except ValueError as e:
        raise BadRecord("malformed_json") from e
    raise BadRecord("malformed_json")  # pragma: no cover - orjson stricter than json


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> float:
    raise _NonFinite(name)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite_number(v: Any, name: str) -> float:
    if not _is_num(v):
        raise BadRecord(f"invalid_field:{name}")
    f = float(v)
    if not math.isfinite(f):
        raise BadRecord(f"non_finite_value:{name}")
    return f


# -- steps.jsonl ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One update line: numeric metrics under their original keys, text labels apart."""

    step: int
    time: float | None
    metrics: dict[str, float]
    text: dict[str, str]
    offset: int | None = None
    part: str = ""
    """Which of several rows of one step this is ("" when a step has one row)."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A progress line without `step`: proof of life between updates."""

    time: float | None


def _flatten(prefix: str, obj: dict[str, Any], out: dict[str, Any]) -> None:
    for k, v in obj.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict):
            _flatten(key, v, out)
        else:
            out[key] = v


def split_values(flat: dict[str, Any]) -> tuple[dict[str, float], dict[str, str]]:
    """Numeric values (bools as 0/1; None dropped) and text values of a flat mapping.
    Raises BadRecord on a non-finite number."""
    metrics: dict[str, float] = {}
    text: dict[str, str] = {}
    for k, v in flat.items():
        if v is None:
            continue
        if isinstance(v, bool):
            metrics[k] = float(v)
        elif _is_num(v):
            metrics[k] = _finite_number(v, k)
        elif isinstance(v, str):
            text[k] = v
        else:
            text[k] = orjson.dumps(v).decode()
    return metrics, text


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects flattened with "/"; raises BadRecord when too deeply nested."""
    out: dict[str, Any] = {}
    try:
        _flatten(prefix, obj, out)
    except RecursionError as e:
        raise BadRecord("too_deeply_nested") from e
    return out


def rename(metrics: dict[str, float], mapping: dict[str, str]) -> dict[str, float]:
    """Trainer keys in `mapping` renamed to their canonical keys; the rest as they are.
    A canonical key the trainer also logs itself keeps the trainer's value."""
    out = dict(metrics)
    for src, dst in mapping.items():
        if src in out and dst not in metrics:
            out[dst] = out.pop(src)
    return out


def json_object(data: bytes | None) -> dict[str, Any] | None:
    """`data` decoded when it is a JSON object, else None (for format detection)."""
    try:
        obj = parse_json(data) if data else None
    except BadRecord:
        return None
    return obj if isinstance(obj, dict) else None


KeyPattern = tuple[re.Pattern[str], str]
"""A trainer key pattern and its canonical key (`\\1`... expand the pattern's groups)."""


def map_keys(
    metrics: dict[str, float], keys: dict[str, str], patterns: tuple[KeyPattern, ...] = ()
) -> dict[str, float]:
    """A trainer's metrics under canonical keys: `keys` renamed as `rename` does, then
    each pattern's matches, where exactly one trainer key gives a canonical key (with
    several, say one per agent of a multi-agent run, none is chosen and all keep their
    own names). A canonical key the trainer logs itself keeps the trainer's value."""
    out = rename(metrics, keys)
    for pattern, dst in patterns:
        hits: dict[str, list[str]] = {}
        for k in metrics:
            m = pattern.fullmatch(k)
            if m:
                hits.setdefault(m.expand(dst), []).append(k)
        for target, srcs in hits.items():
            if len(srcs) == 1 and target not in metrics and srcs[0] in out:
                out[target] = out.pop(srcs[0])
    return out


def step_of(obj: dict[str, Any], key: str = "step") -> int:
    """A non-negative integer step; raises BadRecord('missing_field:…'/'invalid_field:…')."""
    if key not in obj:
        raise BadRecord(f"missing_field:{key}")
    step = obj[key]
    if not is_int(step) or step < 0:
        raise BadRecord(f"invalid_field:{key}")
    return step


_FLOAT_TYPES = frozenset({float, int, type(None)})


def _float_array(v: Any, n: int, name: str) -> np.ndarray:
    if not isinstance(v, list) or len(v) != n:
        raise BadRecord(f"length_mismatch:{name}")
    if not _FLOAT_TYPES.issuperset(map(type, v)):  # numpy would turn "-2" into -2.0
        raise BadRecord(f"invalid_field:{name}")
    try:
        arr = np.asarray(v, dtype=np.float64) if n else np.empty(0, np.float64)
    except (TypeError, ValueError) as e:
        raise BadRecord(f"invalid_field:{name}") from e
    if arr.ndim != 1 or np.isinf(arr).any():
        raise BadRecord(f"invalid_field:{name}")
    return arr


@dataclass(frozen=True, slots=True)
class TranscriptText:
    """An attempt's text: per model call what it was sent (prompt or rendered messages,
    tool results included; "" where not recorded) and what it returned, with the
    attempt's fields the samples table shows (None where the format does not say)."""

    sent: tuple[str, ...]
    returned: tuple[str, ...]
    reward: float | None = None
    group_id: str = ""
    policy_version: int | None = None
    stop_reason: str | None = None
    file: str = ""


@dataclass(frozen=True, slots=True)
class Transcript:
    """A validated transcript: per-generation arrays ready to concatenate."""

    attempt_id: str
    task_id: str
    step: int
    trains: bool
    trace: str
    lens: list[int]
    truncated: list[bool]
    ls: list[np.ndarray]
    lt: list[np.ndarray]
    tokens: list[np.ndarray]
    topk: list[np.ndarray] | None
    vocab: int | None
    text: TranscriptText | None = None
    """What the attempt's calls were sent and returned, where the format records it."""
    ent: list[np.ndarray] | None = None
    """Per generation, the trainer's exact entropy of each token's distribution (NaN
    where unknown), for formats that export it (prime-rl); None: none known."""


def quarantine(
    run_id: str, file: str, offset: int | None, reason: str, data: bytes
) -> QuarantineRow:
    """Shorthand used by the readers."""
    return QuarantineRow(run_id, file, offset, reason, excerpt(data))


is_int = _is_int
is_num = _is_num
finite_number = _finite_number
float_array = _float_array


@dataclass(frozen=True, slots=True)
class BadLine:
    """A rejected line (or whole file, `offset` None) inside a per-step file."""

    offset: int | None
    reason: str
    data: bytes
    index: int | None = None
    """Position of the entry in a snapshot's list (offset is None then)."""


def jsonl_records(data: bytes, parse: Any) -> list[Any]:
    """`parse(obj)` of every complete line of a JSONL file (blank lines skipped), or a
    `BadLine` with its byte offset and reason; a trailing line without its newline is
    read too (per-step files appear whole)."""
    out: list[Any] = []
    pos = 0
    for raw in data.split(b"\n"):
        line = raw.rstrip(b"\r")
        if line.strip():
            try:
                out.append(parse(parse_json(line)))
            except BadRecord as e:
                out.append(BadLine(pos, str(e), line))
            except (TypeError, ValueError, KeyError) as e:  # a reader bug costs one line
                out.append(BadLine(pos, f"internal_error:{type(e).__name__}", line))
        pos += len(raw) + 1
    return out


def merge_parts(prev: StepRecord, rec: StepRecord, repeats: bool = False) -> StepRecord | None:
    """One step's record from two rows written by different parts of a trainer (the
    first row's values win on a shared key), or None when `rec` repeats a part. With
    `repeats` (a part that writes several lines per step, as prime-rl's trainer does),
    a repeated part merges too, and its later line's values win on a shared key (a step
    logged again after a restart is the values the run went on with)."""
    parts = prev.part.split("+") if prev.part else []
    if not rec.part or not prev.part or (rec.part in parts and not repeats):
        return None
    times = [t for t in (prev.time, rec.time) if t is not None]
    again = rec.part in parts
    first, later = (prev, rec) if again else (rec, prev)
    return StepRecord(
        prev.step,
        max(times) if times else None,
        {**first.metrics, **later.metrics},
        {**first.text, **later.text},
        prev.offset,
        "+".join(sorted({*parts, rec.part})),
    )


def group_discards(recs: list[Any]) -> list[Any]:
    """Parsed per-step records flattened (a rollout dict, a (rollout, transcript) pair
    or a list of rollouts per line; `BadLine`s as they are). Among the attempts not
    already discarded, a group whose rewards are all equal has no advantage to learn
    from: its attempts are discarded as `no_variance` (a group of one as
    `group_too_small`)."""
    flat: list[Any] = []
    for r in recs:
        if isinstance(r, (list, tuple)):
            flat.extend(r)
        else:
            flat.append(r)
    rewards: dict[str, list[float]] = {}
    for r in flat:
        if isinstance(r, dict) and r["discard_reason"] is None:
            rewards.setdefault(r["group_id"], []).append(r["reward"])
    out: list[Any] = []
    for r in flat:
        if isinstance(r, dict) and r["discard_reason"] is None:
            group = rewards[r["group_id"]]
            reason = "group_too_small" if len(group) == 1 else None
            if reason is None and len(set(group)) == 1:
                reason = "no_variance"
            if reason is not None:
                r = {**r, "trained": False, "discard_reason": reason}
        out.append(r)
    return out


def word_ids(text: str) -> np.ndarray:
    """A text completion as 64-bit ids of its whitespace-separated words (for
    repetition and distinct-answer figures of formats that write only text)."""
    words = text.split()
    if not words:
        return np.empty(0, np.int64)
    import hashlib

    digest = b"".join(hashlib.blake2b(w.encode(), digest_size=8).digest() for w in words)
    return np.frombuffer(digest, dtype="<i8").astype(np.int64)


TEXT_ONLY = frozenset(
    {"completion_len_mean", "completion_len_p50", "completion_len_p95", "completion_len_max",
     "truncated_frac"}
)  # fmt: skip
"""Completion columns text-only formats cannot give (lengths in tokens, stop reasons)."""


def text_completion(
    attempt_id: str,
    task_id: str,
    step: int,
    text: str,
    sent: str = "",
    roll: dict[str, Any] | None = None,
    file: str = "",
) -> Transcript:
    """A text-only completion: trace "text", words as ids, no logprobs; with its text
    (`sent`: the prompt) and, from its rollout record `roll`, reward and trained."""
    roll = roll or {}
    tx = TranscriptText(
        (sent,), (text,), roll.get("reward"), roll.get("group_id") or "", None, None, file
    )
    trains = bool(roll.get("trained", True))
    ids = [word_ids(text)]
    return Transcript(
        attempt_id, task_id, step, trains, "text", [], [], [], [], ids, None, None, tx
    )
