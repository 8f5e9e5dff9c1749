"""Work units and their execution: what a worker actor does with one unit.

A unit names a byte range of a JSONL file (with the cursor it continues from and the
`FileStat` the tailer saw) or a batch of transcript files. `execute` reads the bytes
itself, parses, validates, aggregates per step and returns a small `UnitResult`.
Transcripts are read with `Storage.read_many` (many reads in flight on object
stores, bytes in flight bounded) and folded in the unit's order, so the result is
the one of a serial read. It is a pure function of the unit and the files' bytes: running it twice gives the
same result, so a retried unit after a worker crash is harmless as long as the
tailer folds each unit's result once.

Records for a step at or below `final_through` are late: quarantined with reason
`late`, never aggregated.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rlstream.errors import UnsafeFile
from rlstream.formats import get_format
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import (
    BadRecord,
    Heartbeat,
    StepRecord,
    Transcript,
    parse_json,
    quarantine,
)
from rlstream.io.storage import FileStat, Storage
from rlstream.io.tail import FileCursor, ReadPlan, advance, plan_read, verify_prefix
from rlstream.metrics import RolloutAgg, StepAgg
from rlstream.metrics.scanners import SamplesConfig
from rlstream.pipeline.partial import StepPartial
from rlstream.pipeline.transcripts import EXCEEDS_MAX_TOKENS, TranscriptParser, TranscriptSettings

STEPS_FILE = "steps.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
TRANSCRIPTS_DIR = "transcripts"


@dataclass(frozen=True, slots=True)
class LinesUnit:
    """Read an append-only JSONL file of the run (steps.jsonl, rollouts.jsonl, or
    another format's `Tail`) from `cursor` up to `stat.size`."""

    run_id: str
    run_url: str
    file: str
    cursor: FileCursor
    stat: FileStat
    final_through: int
    fmt: str
    kind: str
    """The `Tail`'s kind: "steps", "rollouts" or "generations"."""
    settings: TranscriptSettings = field(default_factory=TranscriptSettings)
    """How the transcripts its lines carry are scanned, kept and capped."""


@dataclass(frozen=True, slots=True)
class TranscriptsUnit:
    """Read and aggregate these transcript files (names with `.json`)."""

    run_id: str
    run_url: str
    names: tuple[str, ...]
    final_through: int
    settings: TranscriptSettings = field(default_factory=TranscriptSettings)
    """How its transcripts are scanned, kept and capped (`transcript_settings`)."""
    folder: str = TRANSCRIPTS_DIR
    """The run's folder holding them (the format's `NamedFiles` stream)."""


@dataclass(frozen=True, slots=True)
class FilesUnit:
    """Read whole per-step files of a format (`StepFiles`): `files` are (step, path
    relative to the run folder); `done` names what is consumed once this unit is
    folded (the files, and step folders now complete)."""

    run_id: str
    run_url: str
    fmt: str
    kind: str
    files: tuple[tuple[int, str], ...]
    done: tuple[str, ...]
    final_through: int
    final: bool = False
    """Batch end: take files without their last newline too (quarantining the rest)."""
    settings: TranscriptSettings = field(default_factory=TranscriptSettings)
    """How the transcripts its files carry are scanned, kept and capped."""


@dataclass(frozen=True, slots=True)
class SnapshotUnit:
    """Read a file the trainer rewrites whole (`Snapshot`): `candidates` are (path,
    stat) of the versions that changed; the one with the most entries is read."""

    run_id: str
    run_url: str
    fmt: str
    key: str
    candidates: tuple[tuple[str, FileStat], ...]
    cursor: FileCursor
    final_through: int


Unit = LinesUnit | TranscriptsUnit | FilesUnit | SnapshotUnit


@dataclass(frozen=True, slots=True)
class UnitFailure:
    """An executor's report that a unit could not be run (its worker kept dying)."""

    unit: Unit
    error: str


@dataclass(slots=True)
class UnitResult:
    """What a unit produced. Small: aggregates, not records (steps lines aside)."""

    run_id: str
    file: str
    cursor: FileCursor | None = None
    steps: list[StepRecord] = field(default_factory=list)
    heartbeat: float | None = None
    partials: dict[int, StepPartial] = field(default_factory=dict)
    quarantine: list[QuarantineRow] = field(default_factory=list)
    names: tuple[str, ...] = ()
    reset: str | None = None
    done: tuple[str, ...] = ()
    """Per-step files and step folders consumed (a `FilesUnit`'s)."""
    seen_files: tuple[tuple[str, FileCursor], ...] = ()
    """Identity cursors of snapshot candidates read (a `SnapshotUnit`'s)."""
    cursor_key: str | None = None
    """Where `cursor` is kept in `RunState.cursors` when not under `file`."""
    bytes: int = 0
    records: int = 0
    tokens: int = 0
    late: int = 0
    trainer: str | None = None
    """The trainer a tracker log's keys name (a `RecordsUnit`'s), when recognised."""


def token_cap(config: dict[str, Any], slack: int = 0) -> int | None:
    """The most tokens a generation of a run may have: its config's
    `sampling.max_tokens` (Loops' run.json; the readers that know their trainer's
    setting map it there) plus `slack`; None when the config gives none."""
    sampling = config.get("sampling") if isinstance(config, dict) else None
    cap = sampling.get("max_tokens") if isinstance(sampling, dict) else None
    if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
        return None
    return cap + max(0, slack)


def transcript_settings(
    samples: SamplesConfig,
    config: dict[str, Any],
    panel: Sequence[str],
    slack: int = 0,
    join_rewards: bool = False,
) -> TranscriptSettings:
    """The one place a run's `TranscriptSettings` are made, for every unit of every
    format that reads transcripts: `samples` (the pipeline config's `SamplesConfig`:
    the rules file's `[samples]` and `--samples-top`), the run's probe `panel`, its
    token cap (`token_cap` of its `config` plus `slack`), and whether its rollouts
    lines give the rewards its transcripts lack (`join_rewards`: Loops)."""
    return TranscriptSettings(samples, tuple(panel), token_cap(config, slack), join_rewards)


def execute(unit: Unit, storage: Storage) -> UnitResult:
    """Run one unit against storage."""
    if isinstance(unit, TranscriptsUnit):
        return _transcripts(unit, storage)
    if type(unit).__name__ == "RecordsUnit":  # defined beside its planner
        from rlstream.pipeline.records import run_records

        return run_records(unit, storage)  # type: ignore[arg-type]
    if isinstance(unit, (FilesUnit, SnapshotUnit)):
        from rlstream.pipeline.snapshot_unit import run_snapshot
        from rlstream.pipeline.streams import run_files

        return (
            run_files(unit, storage) if isinstance(unit, FilesUnit) else run_snapshot(unit, storage)
        )
    return _lines(unit, storage)


def _fetch(unit: LinesUnit, storage: Storage) -> tuple[ReadPlan, bytes] | None:
    url = Storage.join(unit.run_url, unit.file)
    plan = plan_read(unit.cursor, unit.stat)
    if plan is None:
        return None
    data = storage.read_range(url, plan.start, plan.end)
    if not verify_prefix(unit.cursor, plan, data):
        plan = ReadPlan(0, unit.stat.size, reset="rewritten")
        data = storage.read_range(url, 0, plan.end)
    if len(data) < plan.end - plan.start:
        # The file shrank between stat and read: consume what is there; the next
        # poll's stat sees the truncation.
        plan = replace(plan, end=plan.start + len(data))
    return plan, data


def _lines(unit: LinesUnit, storage: Storage) -> UnitResult:
    res = UnitResult(unit.run_id, unit.file)
    try:
        fetched = _fetch(unit, storage)
    except UnsafeFile as e:  # replaced by a link or a FIFO since its stat: not read
        res.quarantine.append(QuarantineRow(unit.run_id, unit.file, None, e.code, str(e)))
        fetched = None
    if fetched is None:
        res.cursor = unit.cursor
        return res
    plan, data = fetched
    lines, cursor = advance(unit.cursor, plan, unit.stat, data)
    replay_upto = unit.cursor.max_step if plan.reset else -1
    if plan.reset:
        res.reset = plan.reset
        cursor = replace(cursor, max_step=unit.cursor.max_step)
    res.bytes = len(data)
    res.records = len(lines)
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    transcripts: TranscriptParser | None = None  # lines that carry logprobs (tinker)
    max_step = cursor.max_step
    parse_line = get_format(unit.fmt).parse_line
    kind = unit.kind
    for offset, line in lines:
        try:
            obj = parse_json(line)
            rec = parse_line(kind, obj)
        except BadRecord as e:
            res.quarantine.append(quarantine(unit.run_id, unit.file, offset, str(e), line))
            continue
        except Exception as e:  # a reader bug must cost one record, not the file
            reason = f"internal_error:{type(e).__name__}"
            res.quarantine.append(quarantine(unit.run_id, unit.file, offset, reason, line))
            continue
        if isinstance(rec, Heartbeat):
            if rec.time is not None:
                res.heartbeat = max(res.heartbeat or rec.time, rec.time)
            continue
        step = rec.step if isinstance(rec, (StepRecord, Transcript)) else rec["step"]
        reason = None
        if step <= replay_upto:
            reason = "rewritten_replay"
        elif step <= unit.final_through:
            reason = "late"
            res.late += 1
        if reason is not None:
            res.quarantine.append(quarantine(unit.run_id, unit.file, offset, reason, line))
            continue
        max_step = max(max_step, step)
        if isinstance(rec, StepRecord):
            res.steps.append(replace(rec, offset=offset))
        elif isinstance(rec, Transcript):
            transcripts = transcripts or unit.settings.parser()
            row = transcripts.over_cap_row(unit.run_id, unit.file, offset, rec)
            if row is not None:
                res.quarantine.append(row)
                continue
            transcripts.add_transcript(rec)
        else:
            by_step[step].append(rec)
    if transcripts is not None:
        res.partials = transcripts.aggregates()
        res.tokens = transcripts.tokens
    join = unit.settings.join_rewards
    for step, recs in by_step.items():
        rewards = {r["attempt_id"]: [r["reward"], r["trained"]] for r in recs} if join else {}
        part = StepPartial(StepAgg(rollouts=RolloutAgg.from_records(recs)), rewards=rewards)
        prev = res.partials.get(step)
        res.partials[step] = part if prev is None else prev.merge(part)
    res.cursor = replace(cursor, max_step=max_step)
    return res


def _transcripts(unit: TranscriptsUnit, storage: Storage) -> UnitResult:
    res = UnitResult(unit.run_id, unit.folder, names=unit.names)
    parser = unit.settings.parser()
    folder = Storage.join(unit.run_url, unit.folder)
    urls = [Storage.join(folder, name) for name in unit.names]
    # Many reads in flight on object stores, folded in the unit's order.
    for name, (_, data) in zip(unit.names, storage.read_many(urls), strict=True):
        file = f"{unit.folder}/{name}"
        if data is None:
            res.quarantine.append(
                QuarantineRow(unit.run_id, file, None, "vanished", "listed but gone when read")
            )
            continue
        if isinstance(data, UnsafeFile):  # no byte of it was read: no excerpt either
            res.quarantine.append(QuarantineRow(unit.run_id, file, None, data.code, str(data)))
            continue
        res.bytes += len(data)
        res.records += 1
        try:
            step, reason = parser.add(data, name.removesuffix(".json"), unit.final_through)
        except Exception as e:  # a reader bug must cost one file, not the unit
            step, reason = None, f"internal_error:{type(e).__name__}"
        if reason is not None:
            if reason == "late":
                res.late += 1
            if reason == EXCEEDS_MAX_TOKENS:  # what is wrong, rather than the file's start
                res.quarantine.append(QuarantineRow(unit.run_id, file, None, reason, parser.why))
            else:
                res.quarantine.append(quarantine(unit.run_id, file, None, reason, data))
            if step is not None:
                res.quarantine[-1] = replace(res.quarantine[-1], step=step)
    res.partials = parser.aggregates()
    res.tokens = parser.tokens
    return res
