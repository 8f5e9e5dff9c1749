"""The reader interface: what every trainer format tells the shared pipeline.

A `Format` is a small object, one per trainer (docs/formats.md):

- `detect(listing, peek)`: is this folder a run of mine? `listing` holds the names
  of the folder's files and, with a trailing "/", of its sub-folders; `peek(name)`
  returns the first bytes of a file (or None). No other I/O.
- `identity(name, listing, read)`: the run's `RunInfo` (run id, config, created and
  finished) from its files; raises `BadRecord` with the reason a folder that looks
  like a run cannot be read.
- `streams(listing)`: what to follow in the run folder: `Tail` (an append-only
  JSONL file read through a byte cursor), `StepFiles` (whole files, one set per step,
  each read once when complete), `Snapshot` (a file rewritten whole) and `Records`
  (a tracker's binary log or SQLite store, read through a record cursor).
- `parse_line(kind, obj)`, `parse_file(kind, data, name, step)`,
  `parse_snapshot(data)`: bytes or decoded JSON to records (`formats.records`).
- `parse_records(path, data, start, final, trainer)` and `query_records(conn, select,
  after, trainer)`: a `Records` stream's next records as a `Chunk` (formats with
  `Records` streams only). `members(listing, open_db)`: for a folder holding stores
  of several runs (Trackio, MLflow SQLite), the member names `<db>#<run>` that are one
  run each; a member run's `identity` and `streams` get `{<db>#<run>}` as listing.
- `spread` (optional, False): one step's values come in several records or logs (a
  tracker writing one record per scalar, a file per key), so a step is final only
  once every log read a later one.
- `run_files` (optional): names of the file that makes a folder a run of the format,
  so a lone file given as ROOT under another name can be told which name it needs.
- `run_file` (optional, None): the one file whose presence alone makes a folder a run
  of the format and which holds its identity (Loops: run.json). Discovery stats it
  (one round trip per folder level) instead of listing folders; the pipeline reads it
  for `identity` (its listing is `{run_file}`: no listing is made), says why when it
  cannot (missing, a link, vanished), rejects a run whose file is unreadable as
  `bad_<run_file with "_" for ".">`, and reads `identity` again whenever the file's
  stat changes (a writer rewriting it when the run finishes).
- `reported_stands_in` (optional, True): a reported figure stands in for a null
  recomputed one in the headline and the peer figures at every step (a trainer that
  reports what its files do not let rlstream recompute). False (Loops, whose files
  give every figure): only while the run has no recomputed value of it.
- `unavailable`: recomputed `steps` columns the format cannot give although its
  records feed the kernels (for example truncation when no stop reason is written);
  the pipeline sets them to null.
- optional `parts` (the writers of one step's rows, whose `StepRecord.part` names
  them; the step is final once each has passed it) and `repeated_parts` (writers
  that log several lines per step: merged, never `duplicate_step`).

Planning (stats, listings), cursors, exactly-once folding, quarantine and health
are the pipeline's and the same for every format. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlstream.formats.records import Heartbeat, StepRecord, Transcript

Peek = Callable[[str], bytes | None]
"""First bytes of a file of the folder (at most `PEEK_BYTES`), or None if absent."""

PEEK_BYTES = 8192

NO_FAILURES = frozenset(
    {"discard_rollout_failed", "discard_grading_failed", "discard_unversioned", "discard_stale"}
)
"""Discard counts of the rollout kernel that a format whose files do not record failed
or stale rollouts cannot give (its count would be a false 0)."""


@dataclass(frozen=True, slots=True)
class Tail:
    """An append-only JSONL file of the run, read through a byte cursor."""

    path: str
    kind: str
    """"steps" (lines become `StepRecord`s), "rollouts" (lines become rollout dicts) or
    "generations" (lines become `Transcript`s)."""
    optional: bool = False
    """A file only some runs write (its absence is not worth a quarantine row)."""


@dataclass(frozen=True, slots=True)
class StepFiles:
    """Whole files, one set per step, under `folder` (relative; "" is the run folder).

    With `dirs`, each step has its own sub-folder whose name matches `step_re` (group
    1 is the step) and the files are the paths inside it matching `file_re`; a step
    folder is complete once `marker` exists in it (when given). Without `dirs`, the
    files themselves sit in `folder` and `step_re` matches their names. A file is
    read once; files appear whole (written in one go or renamed into place)."""

    folder: str
    step_re: re.Pattern[str]
    file_re: re.Pattern[str] | None
    kind: str
    """"rollouts" (files hold rollout dicts), "generations" (`Transcript`s) or
    "both" (each file gives both)."""
    dirs: bool = True
    marker: str | None = None
    subdirs: tuple[str, ...] = ()
    """Paths below a step folder to list (files matching `file_re` there)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A file the trainer rewrites whole; `paths` are candidates, relative to the run
    folder, where `*` matches one folder name: the candidate holding the most
    entries is read."""

    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Records:
    """A tracker's log, read through a cursor at record boundaries. Without `select`,
    `path` is a file (or, with `name_re`, a folder: every file below it to `depth`
    levels whose name matches is a log, each with its own byte cursor) handed to
    `parse_records` from its cursor on. With `select`, `path` is a SQLite database
    opened read-only and `query_records` reads the run `select` after a row id."""

    path: str
    name_re: re.Pattern[str] | None = None
    depth: int = 0
    select: str | None = None


@dataclass(frozen=True, slots=True)
class NamedFiles:
    """Files written once each under `folder`, whose names sort in write order (up to
    the pipeline's `transcript_window` names of reordering): listed after the run's
    `Tail` stats, each read once, consumed names kept as a watermark and a window
    (`rlstream.pipeline.names`). Files ending in `suffix` are read; `kind` as
    `StepFiles` ("generations": Loops transcripts, one attempt each)."""

    folder: str
    kind: str = "generations"
    suffix: str = ".json"


Stream = Tail | StepFiles | Snapshot | Records | NamedFiles


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one `parse_records` / `query_records` call read: step records (canonical
    keys), the cursor to resume from (a byte offset at a record boundary, or the last
    row id), (offset or -1, reason, detail, step or None) of what was skipped as
    corrupt, and the trainer recognised from the keys (None when unknown)."""

    steps: list[StepRecord]
    cursor: int
    errors: list[tuple[int, str, str, int | None]] = field(default_factory=list)
    trainer: str | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run's identity and configuration, as its files give them."""

    run_id: str
    config: dict[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    finished: bool = False


Record = StepRecord | Heartbeat | dict[str, Any] | Transcript


class Format(Protocol):
    """One trainer's output folder layout (see the module docstring)."""

    name: str
    unavailable: frozenset[str]

    def detect(self, listing: frozenset[str], peek: Peek) -> bool: ...

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo: ...

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]: ...

    def parse_line(self, kind: str, obj: Any) -> StepRecord | Heartbeat | dict[str, Any]: ...

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Record]: ...

    def parse_snapshot(self, data: bytes) -> list[StepRecord]: ...


def first_line(data: bytes | None) -> bytes | None:
    """The first complete line of peeked bytes (None without one)."""
    if not data:
        return None
    end = data.find(b"\n")
    return data[:end] if end >= 0 else None


def step_names(names: Iterable[str], step_re: re.Pattern[str]) -> list[tuple[int, str]]:
    """(step, name) of the names matching `step_re` (group 1 the step), by step."""
    out = []
    for n in names:
        m = step_re.fullmatch(n.rstrip("/"))
        if m:
            out.append((int(m.group(1)), n.rstrip("/")))
    return sorted(out)
