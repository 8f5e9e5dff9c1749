"""The Loops run format, version 1 (docs/run-format.md): its reader.

Pure functions from bytes to validated records. Nothing here touches storage.

- `step_record` / `rollout_record` validate one decoded steps.jsonl / rollouts.jsonl
  line; they return a record or raise `BadRecord` with the quarantine reason.
- `transcript` validates a decoded transcript file; `decode_transcript` decodes and
  validates one, with simdjson copying token arrays straight into numpy buffers (no
  per-token Python) and orjson as the exact fallback.
- `LOOPS` is the `Format` object: a run is a folder holding run.json (its
  `run_file`, validated by `run_json`, the only check of it); it follows
  steps.jsonl, rollouts.jsonl and the transcripts/ folder (`NamedFiles`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from rlstream.formats.base import NamedFiles, RunInfo, Stream, Tail
from rlstream.formats.quarantine import excerpt
from rlstream.formats.records import (
    BadRecord,
    Heartbeat,
    StepRecord,
    Transcript,
    _finite_number,
    _float_array,
    _is_int,
    _is_num,
    flatten,
    parse_json,
    quarantine,
    split_values,
)
from rlstream.formats.text import text_of

__all__ = ["BadRecord", "Heartbeat", "StepRecord", "Transcript", "parse_json", "quarantine"]

FORMAT_VERSION = 1
ATTEMPT_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
TRACES = ("full", "samples")
_INT_TYPES = frozenset({int})


# -- steps.jsonl ---------------------------------------------------------------------


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
    flat = flatten({k: v for k, v in obj.items() if k not in ("step", "time")})
    metrics, text = split_values(flat)
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
        name,
        task,
        step,
        obj["trains"],
        trace,
        lens,
        truncated,
        ls,
        lt,
        tokens,
        topk,
        vocab,
        text_of(obj, gens, name),
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
    have = set(doc.keys())  # a missing key's get costs an exception in simdjson
    trace = doc["trace"] if "trace" in have else "full"
    if trace not in TRACES or not isinstance(gens, simdjson.Array):
        return None
    task = doc["task_id"] if "task_id" in have else None
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
        keys = set(g.keys())  # a missing key's get costs an exception in simdjson
        n = g["completion_len"] if "completion_len" in keys else None
        if not _is_int(n) or n < 0:
            return None
        lens.append(n)
        truncated.append("stop_reason" in keys and g["stop_reason"] == "length")
        if not full:
            continue
        if "top_logprobs" in keys and g["top_logprobs"] is not None:
            return None
        toks, s, t = (
            g["completion_tokens"] if "completion_tokens" in keys else None,
            g["sampler_logprobs"] if "sampler_logprobs" in keys else None,
            g["trainer_logprobs"] if "trainer_logprobs" in keys else None,
        )
        if not isinstance(toks, simdjson.Array) or len(toks) != n:
            return None
        if not isinstance(s, simdjson.Array) or len(s) != n:
            return None
        if t is not None and (not isinstance(t, simdjson.Array) or len(t) != n):
            return None
        if n:
            tokens.append(np.frombuffer(toks.as_buffer(of_type="i"), np.int64))
            ls.append(_simd_floats(s, n, len(lens) - 1, "sampler_logprobs"))
            lt.append(
                _simd_floats(t, n, len(lens) - 1, "trainer_logprobs")
                if t is not None
                else np.full(n, np.nan)
            )
        else:
            tokens.append(np.empty(0, np.int64))
            ls.append(np.empty(0, np.float64))
            lt.append(np.empty(0, np.float64) if t is not None else np.full(0, np.nan))
    text = text_of(doc, gens, name)
    return Transcript(
        name, task, step, trains, trace, lens, truncated, ls, lt, tokens, None, None, text
    )


def _simd_floats(arr: Any, n: int, i: int, key: str) -> np.ndarray:
    """A float array straight from simdjson's buffer; one holding nulls (tokens the
    model did not sample) goes through a list and `_float_array`, like orjson's (its
    name, generation `i`'s `key`, is made only then)."""
    try:
        return np.frombuffer(arr.as_buffer(of_type="d"), np.float64)
    except TypeError:
        return _float_array(arr.as_list(), n, f"generations[{i}].{key}")


def _simd_parser() -> Any:
    try:
        import simdjson
    except ImportError:  # optional: without it every file takes the orjson path
        return None
    return simdjson.Parser()


def decode_transcript(simd: Any, data: bytes, name: str) -> Transcript:
    """Decode and validate one transcript file (simdjson when it takes the file, else
    orjson); raises BadRecord with the quarantine reason."""
    t = None if simd is None else _simd_transcript(simd, data, name)
    if t is None:
        t = transcript(parse_json(data), name)
    return t


simd_parser = _simd_parser


# -- the Format object ---------------------------------------------------------------

RUN_JSON = "run.json"


class LoopsFormat:
    """The Loops cookbook's run folders (docs/run-format.md)."""

    name = "loops"
    unavailable: frozenset[str] = frozenset()
    run_file = RUN_JSON
    reported_stands_in = False

    def detect(self, listing: frozenset[str], peek: Callable[[str], bytes | None]) -> bool:
        return RUN_JSON in listing

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        data = read(RUN_JSON)
        if data is None:
            raise BadRecord("is missing")
        obj = run_json(data)
        ca = obj.get("created_at")
        return RunInfo(
            obj["run_id"],
            obj.get("config") or {},
            float(ca) if _is_num(ca) else None,
            obj.get("finished_at") is not None,
        )

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        return (
            Tail("steps.jsonl", "steps"),
            Tail("rollouts.jsonl", "rollouts"),
            NamedFiles("transcripts", "generations", ".json"),
        )

    def parse_line(self, kind: str, obj: Any) -> StepRecord | Heartbeat | dict[str, Any]:
        return step_record(obj) if kind == "steps" else rollout_record(obj)

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Any]:
        return [decode_transcript(None, data, name.removesuffix(".json"))]

    def parse_snapshot(self, data: bytes) -> list[StepRecord]:
        return []


def run_json(data: bytes) -> dict[str, Any]:
    """Validate run.json; raises BadRecord with a readable reason."""
    try:
        obj = parse_json(data)
    except BadRecord as e:
        raise BadRecord(f"is not valid JSON ({e}): {excerpt(data)!r}") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("run_id"), str) or not obj["run_id"]:
        raise BadRecord("has no string run_id")
    if not isinstance(obj.get("config", {}), dict):
        raise BadRecord("has a config that is not an object")
    version = obj.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BadRecord(
            f"has format_version {version!r}; this rlstream reads version {FORMAT_VERSION}: "
            "upgrade rlstream"
        )
    return obj


LOOPS = LoopsFormat()
