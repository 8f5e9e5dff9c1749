"""The run format, version 1 (docs/run-format.md): records of the three file kinds.

Pure functions from bytes to validated records. Nothing here touches storage.

- `parse_json` decodes with orjson and falls back to the standard library only to
  recognise NaN/Infinity literals, which are then rejected as non-finite values.
- `step_record` / `rollout_record` validate one decoded line; they return a record
  or a reason string for the quarantine.
- `TranscriptParser` turns transcript files into per-step metric aggregates, building
  concatenated numpy arrays per step (no per-token Python: simdjson copies token
  arrays straight into numpy buffers, with orjson as the exact fallback) and handing
  them to the kernels in `rlstream.metrics`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from rlstream.formats.quarantine import QuarantineRow, excerpt
from rlstream.metrics import CompletionAgg, StepAgg, TokenAgg, TopKEntropyAgg
from rlstream.pipeline.partial import StepPartial

FORMAT_VERSION = 1
ATTEMPT_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
TRACES = ("full", "samples")


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


def step_record(obj: Any) -> StepRecord | Heartbeat:
    """Validate a decoded steps.jsonl line. Raises BadRecord with the reason."""
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    t = obj.get("time")
    time = None if t is None else _finite_number(t, "time")
    if "step" not in obj:
        if "progress" in obj:
            return Heartbeat(time)
        raise BadRecord("missing_field:step")
    step = obj["step"]
    if not _is_int(step) or step < 0:
        raise BadRecord("invalid_field:step")
    flat: dict[str, Any] = {}
    try:
        _flatten("", {k: v for k, v in obj.items() if k not in ("step", "time")}, flat)
    except RecursionError as e:
        raise BadRecord("too_deeply_nested") from e
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
    return StepRecord(step, time, metrics, text)


# -- rollouts.jsonl ------------------------------------------------------------------

_ROLLOUT_STR = ("attempt_id", "group_id", "task_id")


def rollout_record(obj: Any) -> dict[str, Any]:
    """Validate a decoded rollouts.jsonl line into the dict `RolloutAgg` takes."""
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    for k in (*_ROLLOUT_STR, "step", "trained"):
        if k not in obj:
            raise BadRecord(f"missing_field:{k}")
    for k in _ROLLOUT_STR:
        if not isinstance(obj[k], str) or not obj[k]:
            raise BadRecord(f"invalid_field:{k}")
    step = obj["step"]
    if not _is_int(step) or step < 0:
        raise BadRecord("invalid_field:step")
    pv = obj.get("policy_version")
    if pv is not None and (not _is_int(pv) or pv < 0):
        raise BadRecord("invalid_field:policy_version")
    reward = obj.get("reward")
    reward = None if reward is None else _finite_number(reward, "reward")
    if not isinstance(obj["trained"], bool):
        raise BadRecord("invalid_field:trained")
    reason = obj.get("discard_reason")
    if reason is not None and not isinstance(reason, str):
        raise BadRecord("invalid_field:discard_reason")
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise BadRecord("invalid_field:metadata")
    return {
        "attempt_id": obj["attempt_id"],
        "group_id": obj["group_id"],
        "task_id": obj["task_id"],
        "step": step,
        "policy_version": pv,
        "reward": reward,
        "trained": obj["trained"],
        "discard_reason": reason,
        "metadata": meta,
    }


# -- transcripts/<attempt_id>.json ---------------------------------------------------


_FLOAT_TYPES = frozenset({float, int, type(None)})
_INT_TYPES = frozenset({int})


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


def _topk_rows(v: Any, n: int) -> np.ndarray:
    if not isinstance(v, dict) or not _is_int(v.get("k")) or v["k"] < 1:
        raise BadRecord("invalid_field:top_logprobs")
    k = v["k"]
    rows = v.get("logprobs")
    if not isinstance(rows, list) or len(rows) != n:
        raise BadRecord("length_mismatch:top_logprobs")
    nan_row = [math.nan] * k
    try:
        arr = np.asarray([nan_row if r is None else r for r in rows], dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise BadRecord("invalid_field:top_logprobs") from e
    if n and (arr.ndim != 2 or arr.shape[1] != k or np.isinf(arr).any()):
        raise BadRecord("invalid_field:top_logprobs")
    return arr.reshape(n, k)


@dataclass
class _StepArrays:
    """Lists of per-generation arrays of one step, concatenated once at the end."""

    ls: list[np.ndarray] = field(default_factory=list)
    lt: list[np.ndarray] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    topk: list[np.ndarray] = field(default_factory=list)
    lens: list[int] = field(default_factory=list)
    tok_lens: list[int] = field(default_factory=list)
    trains: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    samples_lens: list[int] = field(default_factory=list)
    samples_truncated: list[bool] = field(default_factory=list)
    vocab: int | None = None
    transcripts: int = 0
    full: int = 0


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


def transcript(obj: Any, name: str) -> Transcript:
    """Validate a decoded transcript file named `name` (without `.json`)."""
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    for k in ("attempt_id", "step", "trains", "generations"):
        if k not in obj:
            raise BadRecord(f"missing_field:{k}")
    if obj["attempt_id"] != name:
        raise BadRecord("attempt_id_mismatch")
    step = obj["step"]
    if not _is_int(step) or step < 0:
        raise BadRecord("invalid_field:step")
    if not isinstance(obj["trains"], bool):
        raise BadRecord("invalid_field:trains")
    trace = obj.get("trace", "full")
    if trace not in TRACES:
        raise BadRecord("invalid_field:trace")
    gens = obj["generations"]
    if not isinstance(gens, list):
        raise BadRecord("invalid_field:generations")
    task = obj.get("task_id")
    task = task if isinstance(task, str) else ""
    lens: list[int] = []
    truncated: list[bool] = []
    ls: list[np.ndarray] = []
    lt: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    topk: list[np.ndarray] | None = None
    vocab: int | None = None
    for i, g in enumerate(gens):
        if not isinstance(g, dict):
            raise BadRecord(f"invalid_generation:{i}")
        n = g.get("completion_len")
        if not _is_int(n) or n < 0:
            raise BadRecord(f"invalid_field:generations[{i}].completion_len")
        lens.append(n)
        truncated.append(g.get("stop_reason") == "length")
        if trace != "full":
            continue
        toks = g.get("completion_tokens")
        if not isinstance(toks, list) or len(toks) != n:
            raise BadRecord(f"length_mismatch:generations[{i}].completion_tokens")
        if not _INT_TYPES.issuperset(map(type, toks)):  # numpy would truncate 2.7 to 2
            raise BadRecord(f"invalid_field:generations[{i}].completion_tokens")
        try:
            tokens.append(np.asarray(toks, dtype=np.int64) if n else np.empty(0, np.int64))
        except (TypeError, ValueError, OverflowError) as e:
            raise BadRecord(f"invalid_field:generations[{i}].completion_tokens") from e
        s = _float_array(g.get("sampler_logprobs"), n, f"generations[{i}].sampler_logprobs")
        ls.append(s)
        if g.get("trainer_logprobs") is not None:
            lt.append(_float_array(g["trainer_logprobs"], n, f"generations[{i}].trainer_logprobs"))
        else:
            lt.append(np.full(n, np.nan))
        top = g.get("top_logprobs")
        if top is not None:
            rows = _topk_rows(top, n)
            if topk is None:
                topk = []
            topk.append(rows)
            v = top.get("vocab_size")
            vocab = v if _is_int(v) else vocab
    return Transcript(
        name, task, step, obj["trains"], trace, lens, truncated, ls, lt, tokens, topk, vocab
    )


def _simd_transcript(parser: Any, data: bytes, name: str) -> Transcript | None:
    """`transcript(parse_json(data), name)` for well-formed files, without Python floats.

    simdjson parses the file and copies each token array straight into a numpy
    buffer (`as_buffer`), so no Python object is made per token: 2-3x faster than
    decoding with orjson and converting the lists. The values are bit-identical (both
    parsers round decimal to double correctly). It returns None for anything it does
    not take as is (a parse error, a failed check, null or non-numeric values in an
    array, top-k logprobs); the caller then runs the orjson path, which accepts the
    file or gives the exact quarantine reason. Every check of `transcript` is made
    here too, so a file this accepts is one `transcript` accepts with the same arrays.
    """
    try:
        doc = parser.parse(data)
    except (ValueError, RuntimeError, TypeError):
        return None
    try:
        return _simd_fields(doc, name)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError, BadRecord):
        return None
    finally:
        del doc  # the parser refuses to parse again while proxies of its document live


def _simd_fields(doc: Any, name: str) -> Transcript | None:
    import simdjson

    if not isinstance(doc, simdjson.Object):
        return None
    if doc["attempt_id"] != name:
        return None
    step, trains, gens = doc["step"], doc["trains"], doc["generations"]
    if not _is_int(step) or step < 0 or not isinstance(trains, bool):
        return None
    trace = doc.get("trace", "full")
    if trace not in TRACES or not isinstance(gens, simdjson.Array):
        return None
    task = doc.get("task_id")
    task = task if isinstance(task, str) else ""
    full = trace == "full"
    lens: list[int] = []
    truncated: list[bool] = []
    ls: list[np.ndarray] = []
    lt: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    for g in gens:
        if not isinstance(g, simdjson.Object):
            return None
        n = g.get("completion_len")
        if not _is_int(n) or n < 0:
            return None
        lens.append(n)
        truncated.append(g.get("stop_reason") == "length")
        if not full:
            continue
        if g.get("top_logprobs") is not None:
            return None
        toks, s, t = (
            g.get("completion_tokens"),
            g.get("sampler_logprobs"),
            g.get("trainer_logprobs"),
        )
        if not isinstance(toks, simdjson.Array) or len(toks) != n:
            return None
        if not isinstance(s, simdjson.Array) or len(s) != n:
            return None
        if t is not None and (not isinstance(t, simdjson.Array) or len(t) != n):
            return None
        if n:
            tokens.append(np.frombuffer(toks.as_buffer(of_type="i"), np.int64))
            ls.append(_simd_floats(s, n, f"generations[{len(lens) - 1}].sampler_logprobs"))
            lt.append(
                _simd_floats(t, n, f"generations[{len(lens) - 1}].trainer_logprobs")
                if t is not None
                else np.full(n, np.nan)
            )
        else:
            tokens.append(np.empty(0, np.int64))
            ls.append(np.empty(0, np.float64))
            lt.append(np.empty(0, np.float64) if t is not None else np.full(0, np.nan))
    return Transcript(name, task, step, trains, trace, lens, truncated, ls, lt, tokens, None, None)


def _simd_floats(arr: Any, n: int, name: str) -> np.ndarray:
    """A float array straight from simdjson's buffer; one holding nulls (tokens the
    model did not sample) goes through a list and `_float_array`, like orjson's."""
    try:
        return np.frombuffer(arr.as_buffer(of_type="d"), np.float64)
    except TypeError:
        return _float_array(arr.as_list(), n, name)


def _simd_parser() -> Any:
    try:
        import simdjson
    except ImportError:  # optional: without it every file takes the orjson path
        return None
    return simdjson.Parser()


class TranscriptParser:
    """Accumulate transcripts and emit one `StepAgg` per step.

    `add(data, name)` returns a quarantine reason or None. `aggregates()` builds the
    kernels' inputs with one concatenation per array per step. Files are decoded with
    simdjson when it takes them (`_simd_transcript`), else with orjson.
    """

    def __init__(self, vocab_size: int | None = None) -> None:
        self._steps: dict[int, _StepArrays] = {}
        self.vocab_size = vocab_size
        self.tokens = 0
        self._simd = _simd_parser()

    def add(self, data: bytes, name: str, final_through: int = -1) -> tuple[int | None, str | None]:
        """Parse one file; returns (step, None), or (step or None, quarantine reason).

        A transcript of a step at or below `final_through` is late: not aggregated.
        """
        t = None if self._simd is None else _simd_transcript(self._simd, data, name)
        if t is None:
            try:
                t = transcript(parse_json(data), name)
            except BadRecord as e:
                return None, str(e)
        if t.step <= final_through:
            return t.step, "late"
        acc = self._steps.setdefault(t.step, _StepArrays())
        acc.transcripts += 1
        if t.trace == "full":
            acc.full += 1
            acc.lens.extend(t.lens)
            acc.truncated.extend(t.truncated)
            acc.ls.extend(t.ls)
            acc.lt.extend(t.lt)
            acc.tokens.extend(t.tokens)
            acc.tok_lens.extend(len(x) for x in t.tokens)
            acc.trains.extend([t.trains] * len(t.ls))
            acc.tasks.extend([t.task_id] * len(t.ls))
            if t.topk is not None:
                acc.topk.extend(t.topk)
            acc.vocab = t.vocab or acc.vocab
            self.tokens += sum(t.lens)
        else:
            acc.samples_lens.extend(t.lens)
            acc.samples_truncated.extend(t.truncated)
        return t.step, None

    def aggregates(self) -> dict[int, StepPartial]:
        out: dict[int, StepPartial] = {}
        for step, a in self._steps.items():
            agg = StepAgg()
            if a.full:
                offsets = np.zeros(len(a.tok_lens) + 1, np.int64)
                np.cumsum(a.tok_lens, out=offsets[1:])
                ls = np.concatenate(a.ls)
                lt = np.concatenate(a.lt)
                toks = np.concatenate(a.tokens)
                trains = np.asarray(a.trains, dtype=bool)
                agg.tokens = TokenAgg.from_arrays(ls, lt, offsets, trains)
                agg.completions = CompletionAgg.from_arrays(
                    np.asarray(a.lens, np.int64),
                    np.asarray(a.truncated, bool),
                    toks,
                    offsets,
                    a.tasks,
                )
                if a.topk:
                    agg.topk = TopKEntropyAgg.from_arrays(
                        _stack_topk(a.topk), a.vocab or self.vocab_size
                    )
            if a.samples_lens:
                samples = CompletionAgg.from_arrays(
                    np.asarray(a.samples_lens, np.int64),
                    np.asarray(a.samples_truncated, bool),
                    None,
                    None,
                    None,
                )
                agg.completions = (
                    samples if agg.completions is None else agg.completions.merge(samples)
                )
            out[step] = StepPartial(agg, transcripts=a.transcripts, transcripts_full=a.full)
        return out


def _stack_topk(rows: list[np.ndarray]) -> np.ndarray:
    k = max(r.shape[1] for r in rows if r.size) if any(r.size for r in rows) else 1
    padded = [
        r if r.shape[1] == k else np.pad(r, ((0, 0), (0, k - r.shape[1])), constant_values=np.nan)
        for r in rows
        if r.shape[0]
    ]
    return np.concatenate(padded) if padded else np.empty((0, k))


def quarantine(
    run_id: str, file: str, offset: int | None, reason: str, data: bytes
) -> QuarantineRow:
    """Shorthand used by the readers."""
    return QuarantineRow(run_id, file, offset, reason, excerpt(data))
