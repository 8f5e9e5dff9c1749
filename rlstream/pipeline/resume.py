"""The resume-state encoding: explicit, versioned, never a pickle.

A resume state file is three parts, each on its own line but the last:

    RLSTREAM-RESUME            magic (the file is ours)
    {"format": 1, "rlstream": "0.1.0", "run_id": ..., "seq": N, "body": "zstd", "size": n}
    <body>                     JSON (tagged values, see below), zstd-compressed (n bytes
                               once decompressed)

The header's `snapshot` is the body's version: the run's fields that
`rlstream.pipeline.snapshot` lists (none: version 1, the whole `RunState`).

`python -m rlstream.pipeline.resume FILE` prints a file's header and body as JSON.
The body is JSON. Values JSON cannot carry exactly are written as one-key
objects whose key starts with `$`:

- integers outside +-2**53 (the exact sums of `rlstream.metrics.exact`, 64-bit
  hashes): `{"$int": "<decimal>"}`; non-finite floats: `{"$f": "nan" | "inf" | "-inf"}`
  (finite floats are written shortest-round-trip, so they read back bit for bit);
- bytes: `{"$b": base64}`; numpy arrays (int64, uint64, float64, bool only):
  `{"$nd": dtype, "data": base64 little-endian}`;
- tuple, set, deque, Counter: `{"$t": [...]}`, `{"$set": [...]}`,
  `{"$dq": [...], "maxlen": n}`, `{"$ctr": [[k, v], ...]}`; a dict whose keys are not
  all plain strings: `{"$d": [[k, v], ...]}`;
- a dataclass: `{"$dc": "<name>", "f": {field: value}}`, for the names in `KINDS` only.

Decoding builds only the listed classes, by field name, with their constructors: it
never imports or runs anything named in the file. A field absent from the file takes
its default (an older writer); a field renamed since is read under its new name
(`RENAMED`); a field the class does not have is an error (a newer writer: its format
number would have been bumped). Any problem raises
`ResumeStateError` naming the file and the way out.
"""

from __future__ import annotations

import base64
import contextvars
import dataclasses
import functools
import math
from collections import Counter, deque
from typing import Any

import numpy as np
import orjson

from rlstream.errors import CheckpointError

MAGIC = b"RLSTREAM-RESUME\n"
FORMAT = 1
"""Bump on any change a reader of the previous format would misread."""

_SAFE = 2**53
MAX_BODY = 1 << 30
"""A header claiming a larger body is corrupt (a run's state is kilobytes)."""
_DTYPES = {"<i8": np.int64, "<u8": np.uint64, "<f8": np.float64, "|b1": np.bool_}


class ResumeStateError(CheckpointError):
    """A resume state file cannot be read (corrupt, hostile, or another format)."""


_KIND_SOURCES = {
    "rlstream.formats.quarantine": ("QuarantineRow",),
    "rlstream.formats.records": ("StepRecord",),
    "rlstream.health.state": ("AlertState", "HealthState"),
    "rlstream.io.tail": ("FileCursor",),
    "rlstream.metrics": (
        "CompletionAgg",
        "CountHistogram",
        "GroupStats",
        "RolloutAgg",
        "SampleAgg",
        "StepAgg",
        "TokenAgg",
        "TopKEntropyAgg",
    ),
    "rlstream.pipeline.partial": ("StepPartial",),
}
"""The only classes a resume state may name (module -> class names)."""


def _kinds() -> dict[str, type]:
    import importlib

    return {
        name: getattr(importlib.import_module(mod), name)
        for mod, names in _KIND_SOURCES.items()
        for name in names
    }


KINDS: dict[str, type] = {}
"""Dataclasses a resume state may hold, by name (filled on first use)."""

RENAMED = {"FileCursor": {"offset": "position"}}
"""Fields read under their earlier name (kind -> {old: new}), so that a state written
before a rename still resumes; a state is always written with the new names."""


def _enc(v: Any) -> Any:
    t = type(v)
    if t is float:
        return v if math.isfinite(v) else {"$f": repr(v)}
    if t is str or t is bool or v is None:
        return v
    if t is int:
        return v if -_SAFE < v < _SAFE else {"$int": str(v)}
    if t is dict:
        if _plain_keys(v):
            return {k: x if type(x) is float and _finite(x) else _leaf(x) for k, x in v.items()}
        return {"$d": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if t is list:
        return [x if type(x) is float and _finite(x) else _leaf(x) for x in v]
    if t is tuple:
        return {"$t": [_leaf(x) for x in v]}
    return _enc_other(v)


_finite = math.isfinite
_PLAIN_KEYS: set[str] = set()
"""Dict keys already found plain (str, no `$`): most dicts of a state (health rows,
figures) have the same few dozen keys, checked as one set operation."""
_PLAIN_KEYS_MAX = 1 << 16


def _plain_keys(d: dict[Any, Any]) -> bool:
    if _PLAIN_KEYS.issuperset(d):
        return True
    if not all(isinstance(k, str) and not k.startswith("$") for k in d):
        return False
    if len(_PLAIN_KEYS) + len(d) <= _PLAIN_KEYS_MAX:
        _PLAIN_KEYS.update(d)
    return True


def _leaf(v: Any) -> Any:
    """`_enc` with the commonest values (finite floats, strings, None) answered
    without a call: a health row is dozens of floats."""
    t = type(v)
    if (t is float and math.isfinite(v)) or t is str or v is None:
        return v
    return _enc(v)


def _enc_other(v: Any) -> Any:
    if not KINDS:
        _kinds_map()
    names = _KIND_FIELDS.get(type(v))
    if names is not None:  # a dataclass of `KINDS` (alert states, cursors); no other
        return {"$dc": type(v).__name__, "f": {f: _leaf(getattr(v, f)) for f in names}}
    if isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        v = int(v)
        return v if -_SAFE < v < _SAFE else {"$int": str(v)}
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return v if math.isfinite(v) else {"$f": repr(v)}
    if isinstance(v, bytes):
        return {"$b": base64.b64encode(v).decode()}
    if isinstance(v, np.ndarray):
        arr = np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<"), copy=False)
        if arr.dtype.str not in _DTYPES:
            raise TypeError(f"resume state cannot hold a numpy array of {arr.dtype}")
        return {"$nd": arr.dtype.str, "data": base64.b64encode(arr.tobytes()).decode()}
    if isinstance(v, Counter):
        return {"$ctr": [[_enc(k), _enc(n)] for k, n in v.items()]}
    if isinstance(v, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in v):
            return {k: _enc(x) for k, x in v.items()}
        return {"$d": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, tuple):
        return {"$t": [_enc(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"$set": [_enc(x) for x in sorted(v, key=repr)]}
    if isinstance(v, deque):
        memo = _MEMO.get(None)
        if memo is not None:
            return {"$dq": [_kept(x, memo) for x in v], "maxlen": v.maxlen}
        return {"$dq": [_leaf(x) for x in v], "maxlen": v.maxlen}
    raise TypeError(f"resume state cannot hold a {type(v).__qualname__}")


_Kept = dict[int, tuple[Any, bytes]]
_MEMO: contextvars.ContextVar[tuple[_Kept, _Kept] | None] = contextvars.ContextVar("memo")
"""(the memo's entries, this encoding's) while a state is encoded in this thread."""


class Memo:
    """A run's deques' tuples (the health history's rows) as encoded at its last
    commit, found by identity: a tuple in a state's deque, and what it holds, never
    changes once appended, so a commit encodes only the rows added since."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: _Kept = {}

    def __reduce__(self) -> Any:
        return Memo, ()  # what it keeps is found by identity: never worth sending


def _kept(v: Any, memo: tuple[_Kept, _Kept]) -> Any:
    if type(v) is not tuple:
        return _leaf(v)
    old, new = memo
    hit = old.get(id(v))
    if hit is None or hit[0] is not v:
        hit = (v, orjson.dumps(_enc(v)))
    new[id(v)] = hit
    return orjson.Fragment(hit[1])


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


_KIND_FIELDS: dict[type, tuple[str, ...]] = {}
"""Each class of `KINDS` -> its field names (filled with `KINDS`)."""


def _kinds_map() -> dict[str, type]:
    if not KINDS:
        KINDS.update(_kinds())
        _KIND_FIELDS.update({cls: _field_names(cls) for cls in KINDS.values()})
    return KINDS


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) and next(iter(v)).startswith("$"):
        return _dec_tagged(v)
    return {k: _dec(x) for k, x in v.items()}


def _dec_tagged(v: dict[str, Any]) -> Any:
    tag = next(iter(v))
    x = v[tag]
    if tag == "$int":
        return int(x)
    if tag == "$f":
        if x not in ("nan", "inf", "-inf"):
            raise ValueError(f"bad float {x!r}")
        return float(x)
    if tag == "$b":
        return base64.b64decode(x, validate=True)
    if tag == "$nd":
        if x not in _DTYPES:
            raise ValueError(f"bad array dtype {x!r}")
        return np.frombuffer(base64.b64decode(v["data"], validate=True), dtype=x).copy()
    if tag == "$ctr":
        return Counter({_dec(k): _dec(n) for k, n in x})
    if tag == "$d":
        return {_dec(k): _dec(e) for k, e in x}
    if tag == "$t":
        return tuple(_dec(e) for e in x)
    if tag == "$set":
        return {_dec(e) for e in x}
    if tag == "$dq":
        maxlen = v.get("maxlen")
        if maxlen is not None and not isinstance(maxlen, int):
            raise ValueError("bad deque maxlen")
        return deque((_dec(e) for e in x), maxlen=maxlen)
    if tag == "$dc":
        cls = _kinds_map().get(x)
        if cls is None:
            raise ValueError(f"unknown kind {x!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        fields = v.get("f")
        if isinstance(fields, dict) and x in RENAMED:
            fields = {RENAMED[x].get(k, k): e for k, e in fields.items()}
        if not isinstance(fields, dict) or not set(fields) <= names:
            extra = sorted(set(fields or {}) - names)
            raise ValueError(f"{x} has fields this version does not know: {extra}")
        return cls(**{k: _dec(e) for k, e in fields.items()})
    raise ValueError(f"unknown tag {tag!r}")


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlstream")
    except PackageNotFoundError:
        return "unknown"


def encode(header: dict[str, Any], body: dict[str, Any]) -> bytes:
    """The bytes of a resume state file (header: small JSON-safe values)."""
    import pyarrow as pa

    raw = orjson.dumps(_enc(body))
    head = {"format": FORMAT, "rlstream": _version(), **header, "body": "zstd", "size": len(raw)}
    return MAGIC + orjson.dumps(head) + b"\n" + pa.Codec("zstd").compress(raw, asbytes=True)


def _body(head: dict[str, Any], body: bytes) -> bytes:
    import pyarrow as pa

    if head.get("body") != "zstd" or not isinstance(head.get("size"), int):
        raise ValueError(f"unknown body encoding {head.get('body')!r}")
    if not 0 <= head["size"] <= MAX_BODY:
        raise ValueError(f"body of {head['size']} bytes")
    return pa.Codec("zstd").decompress(body, decompressed_size=head["size"], asbytes=True)


def decode(data: bytes, where: str, way_out: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, body) of a resume state file; `ResumeStateError` naming `where` and
    `way_out` for anything but a well-formed file of this format."""

    def fail(why: str) -> ResumeStateError:
        return ResumeStateError(f"resume state {where} {why}; {way_out}")

    if not data.startswith(MAGIC):
        raise fail("is not an rlstream resume state (no RLSTREAM-RESUME header)")
    head_line, _, body = data[len(MAGIC) :].partition(b"\n")
    try:
        head = orjson.loads(head_line)
    except orjson.JSONDecodeError as e:
        raise fail(f"has a corrupt header ({e})") from e
    if not isinstance(head, dict) or not isinstance(head.get("format"), int):
        raise fail("has a header without a format number")
    if head["format"] != FORMAT:
        raise fail(
            f"has format {head['format']} (written by rlstream {head.get('rlstream', '?')}); "
            f"this rlstream reads format {FORMAT}"
        )
    try:
        state = _dec(orjson.loads(_body(head, body)))
    except Exception as e:  # any malformed body: one clear error, never a crash
        raise fail(f"is corrupt ({type(e).__name__}: {e})") from e
    if not isinstance(state, dict):
        raise fail("is corrupt (its body is not an object)")
    return head, state


def peek_field(data: bytes, where: str, name: str) -> Any:
    """One top-level field of a resume state's body as stored (tags not decoded), for
    readers that need a plain value (the report reads `names_low`) without building
    the whole state. Errors as `decode`."""
    if not data.startswith(MAGIC):
        raise ResumeStateError(f"resume state {where} is not an rlstream resume state")
    head_line, _, body = data[len(MAGIC) :].partition(b"\n")
    try:
        head = orjson.loads(head_line)
        if head.get("format") != FORMAT:
            raise ValueError(f"format {head.get('format')!r}")
        return orjson.loads(_body(head, body)).get(name)
    except Exception as e:
        raise ResumeStateError(f"resume state {where} cannot be read ({e})") from e


def encode_state(state: Any, memo: Memo | None = None) -> bytes:
    """A `RunState`'s resume state file: its snapshot (`rlstream.pipeline.snapshot`).
    With `memo` (the run's, from its previous encoding), the tuples of its deques
    encoded then are not encoded again; the memo then holds this encoding's."""
    from rlstream.pipeline.snapshot import VERSION, snapshot

    head = {"run_id": state.run_id, "seq": state.seq, "snapshot": VERSION}
    if memo is None:
        return encode(head, snapshot(state))
    new: _Kept = {}
    token = _MEMO.set((memo.kept, new))
    try:
        data = encode(head, snapshot(state))
    finally:
        _MEMO.reset(token)
    memo.kept = new
    return data


def decode_state(data: bytes, where: str, way_out: str) -> Any:
    """The `RunState` of a resume state file, of any snapshot version (a header
    without `snapshot` is version 1); see `decode` for errors."""
    from rlstream.pipeline.snapshot import SnapshotError, restore

    head, body = decode(data, where, way_out)
    try:
        return restore(body, head.get("snapshot", 1))
    except SnapshotError as e:
        raise ResumeStateError(f"resume state {where} {e}; {way_out}") from e


if __name__ == "__main__":
    import sys
    from pathlib import Path

    data = Path(sys.argv[1]).read_bytes()
    head, body = decode(data, sys.argv[1], "it is not a resume state")
    print(orjson.dumps(head).decode())
    print(orjson.dumps(_enc(body), option=orjson.OPT_INDENT_2).decode())
