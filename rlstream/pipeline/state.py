"""Per-run state and the fold over unit results.

`RunState` is everything the pipeline knows about one run between commits: file
cursors, a bounded window over the transcript names consumed, the partial aggregates
of steps that are not final yet, and counters. Its resume state is a snapshot of the
fields listed in `rlstream.pipeline.snapshot.FIELDS` (the others are derived or
transient; encoded by `rlstream.pipeline.resume`, never a pickle), so a restarted
process continues from it with nothing lost or counted twice. Its size
is O(1) in the run's length (the pending steps, the name windows of transcripts and
per-step files, and the health window).

Transcript names: every name at or below `names_low` was consumed (`names_below` of
them), and `names_window` holds the consumed names above it, at most
`cfg.transcript_window` past the first gap. This relies on names sorting in write order
up to that many names of reordering (docs/run-format.md); a name that appears below
`names_low` after it was passed is counted and quarantined, never silently missed.

- `fold(state, result)` merges one unit's result (in any order of units).
- `watermark(state, now, cfg)` says up to which step rows are final.
- `finalize(state, upto)` turns pending steps at or below it into `steps` rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlstream.config import PipelineConfig
from rlstream.formats import DEFAULT, stands_in
from rlstream.formats.quarantine import QuarantineRow
from rlstream.formats.records import StepRecord, merge_parts
from rlstream.io.tail import FileCursor
from rlstream.metrics.step import HEADLINE_KEYS
from rlstream.pipeline.partial import StepPartial
from rlstream.pipeline.rows import step_row
from rlstream.pipeline.samples import fix_panel, sample_rows
from rlstream.pipeline.work import ROLLOUTS_FILE, STEPS_FILE, UnitResult


@dataclass(slots=True)
class RunState:
    """What the pipeline holds for one run (its snapshot: `pipeline.snapshot`)."""

    run_id: str
    run_url: str
    config: dict[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    finished: bool = False
    run_json: FileCursor | None = None
    cursors: dict[str, FileCursor] = field(
        default_factory=lambda: {STEPS_FILE: FileCursor(), ROLLOUTS_FILE: FileCursor()}
    )
    names_low: str | None = None
    names_below: int = 0
    names_window: list[str] = field(default_factory=list)
    transcripts_mark: float | None = None
    polls: int = 0
    pending: dict[int, StepPartial] = field(default_factory=dict)
    reported: dict[int, StepRecord] = field(default_factory=dict)
    read_at: dict[int, float] = field(default_factory=dict)
    """Pending reported step -> when the poll that read its line ran."""
    final_through: int = -1
    max_reported_step: int = -1
    last_activity: float | None = None
    last_change: float | None = None
    seq: int = 0
    counters: Counter[str] = field(default_factory=Counter)
    out: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Table -> rows for the run's next commit (`rlstream.pipeline.commit`, `emit`)."""
    out_quarantine: list[QuarantineRow] = field(default_factory=list)
    """Quarantine rows for the next commit (the readers' `QuarantineRow`s)."""
    noted: set[str] = field(default_factory=set)
    health: Any = None
    status: str | None = None
    firing: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    headline: dict[str, Any] = field(default_factory=dict)
    health_sig: str | None = None
    """Hash of the last run_health row written (as_of and commit_seq aside)."""
    listed: list[str] = field(default_factory=list)
    """Transcript names above `names_low` in this poll's listing."""
    format: str = DEFAULT
    """The run's format (`rlstream.formats.FORMATS`)."""
    trainer: str = ""
    """The trainer a tracker run's keys name (`formats.trackers.keymap`), once known."""
    parts: tuple[str, ...] = ()
    """Writers of one step's rows the format expects (prime-rl: trainer, orchestrator)."""
    repeated_parts: tuple[str, ...] = ()
    """Writers that log several lines per step, all merged into the step's row (the
    format's `repeated_parts`; prime-rl's trainer writes one line per metric family)."""
    part_steps: dict[str, int] = field(default_factory=dict)
    """Highest step read per writer, for the watermark of multi-writer formats."""
    spread: bool = False
    """The format spreads one step over several records or logs (a tracker writing one
    record per scalar, or a file per key): a step is final once every log that has
    records read a later step, never by settling alone."""
    step_files: set[str] = field(default_factory=set)
    """Per-step files and complete step folders consumed (formats with `StepFiles`
    streams), for steps above their stream's `step_low`."""
    step_low: dict[str, int] = field(default_factory=dict)
    """Stream folder -> step at or below which every listed entry was consumed
    (`transcript_window` steps below `final_through`, at most)."""
    step_below: dict[str, int] = field(default_factory=dict)
    """Stream folder -> entries listed at or below its `step_low`: more of them on a
    later listing arrived late and are quarantined (`step_file_below_window`)."""
    check: bool = True
    """Look for rows of commits above `durable_seq` in the tables before the next
    commit (`rlstream.pipeline.rewind`): once per process, and after a failed commit."""
    durable_seq: int = 0
    """`seq` of the last resume state written (or loaded)."""
    cohort: str = ""
    """The run's cohort (`rlstream.health.cohort`), set once when it is first polled."""
    peer_window: list[list[Any]] = field(default_factory=list)
    """[step, figure values...] of the last `[unlike_peers] window_steps` final steps
    (`rlstream.pipeline.cohorts`): what its cohort's bands and judging read."""
    peer_judged: int = -1
    """Highest step judged against its peers (`unlike_peers`)."""
    probe_panel: list[str] = field(default_factory=list)
    """The run's probe tasks (`rlstream.pipeline.samples`), fixed at its first final
    step holding tasks with text."""
    memo: Any = field(default=None, repr=False, compare=False)
    """What its last resume state's encoding kept (`rlstream.pipeline.resume.Memo`)."""

    def __post_init__(self) -> None:
        self.durable_seq = self.seq

    @property
    def max_known_step(self) -> int:
        steps = [*self.pending, *self.reported]
        return max(steps) if steps else self.final_through

    @property
    def max_steps(self) -> int | None:
        v = (self.config.get("training") or {}).get("max_steps")
        return v if isinstance(v, int) and not isinstance(v, bool) else None


def fold(state: RunState, res: UnitResult, now: float) -> None:
    """Merge one unit's result into the state (in place)."""
    c = state.counters
    c["bytes"] += res.bytes
    c["records"] += res.records
    c["tokens"] += res.tokens
    c["late"] += res.late
    c["quarantined"] += len(res.quarantine)
    if res.bytes or res.names:
        state.last_change = now
    if res.reset:
        c[f"file_{res.reset}"] += 1
        state.out_quarantine.append(
            QuarantineRow(state.run_id, res.file, 0, f"file_{res.reset}", "re-read from offset 0")
        )
        c["quarantined"] += 1
    state.out_quarantine.extend(res.quarantine)
    if res.cursor is not None:
        state.cursors[res.cursor_key or res.file] = res.cursor
    if res.trainer and not state.trainer:
        state.trainer = res.trainer
    if res.names:
        state.names_window = sorted({*state.names_window, *res.names})
        c["transcripts"] += len(res.names)
    if res.heartbeat is not None:
        state.last_activity = max(state.last_activity or res.heartbeat, res.heartbeat)
    if res.done:
        state.step_files.update(res.done)
        state.last_change = now
    for path, ident in res.seen_files:
        state.cursors[path] = ident
    for rec in res.steps:
        if rec.part:
            ps = state.part_steps
            ps[rec.part] = max(ps.get(rec.part, -1), rec.step)
        prev = state.reported.get(rec.step)
        if prev is not None:
            merged = merge_parts(prev, rec, rec.part in state.repeated_parts)
            if merged is None:  # the step logged again (a restart): the newest wins
                if prev.metrics.keys() & rec.metrics.keys() or prev.text.keys() & rec.text.keys():
                    c["replaced_steps"] += 1
                merged = replace_step(prev, rec)
            rec = merged
        state.reported[rec.step] = rec
        state.read_at[rec.step] = now
        state.max_reported_step = max(state.max_reported_step, rec.step)
        if rec.time is not None:
            state.last_activity = max(state.last_activity or rec.time, rec.time)
    for step, part in res.partials.items():
        prev = state.pending.get(step)
        state.pending[step] = part if prev is None else prev.merge(part)


def replace_step(prev: StepRecord, rec: StepRecord) -> StepRecord:
    """A step's record read again: the newer record's values win key by key (a
    tracker's record may hold a few of a step's keys only). Newer is the later
    `time` when both records have one (records of two files may fold in any order),
    else the one folded last (docs/run-format.md)."""
    older = prev.time is not None and rec.time is not None and rec.time < prev.time
    old, new = (rec, prev) if older else (prev, rec)
    times = [t for t in (prev.time, rec.time) if t is not None]
    return StepRecord(
        rec.step,
        max(times) if times else None,
        {**old.metrics, **new.metrics},
        {**old.text, **new.text},
        new.offset,
        new.part or old.part,
    )


def emit(state: RunState, table: str, rows: list[dict[str, Any]]) -> None:
    """Hand rows of `table` to the run's next commit, which writes them once, each
    stamped with the run's `run_id` and commit number `commit_seq`."""
    if rows:
        state.out.setdefault(table, []).extend(rows)


def is_finished(state: RunState) -> bool:
    ms = state.max_steps
    return state.finished or (ms is not None and state.max_reported_step >= ms - 1)


def watermark(state: RunState, now: float, cfg: PipelineConfig, final: bool = False) -> int:
    """The highest step whose row is final now.

    Final when a later step's line has been seen (`watermark_lag_steps` later), when
    its own line was read at least `watermark_settle_seconds` ago (0: by this
    poll; not for formats whose writers log several lines per step), when the run is finished, when nothing arrived for
    `idle_final_seconds`, or when the caller ends the pipeline (`final`, as `analyze`
    does at the end of what exists).
    """
    if final or is_finished(state):
        return state.max_known_step
    idle = state.last_change is not None and now - state.last_change >= cfg.idle_final_seconds
    if idle:
        return state.max_known_step
    by_lag = state.max_reported_step - cfg.watermark_lag_steps
    if state.spread:
        return _spread_through(state, cfg)
    parts = state.parts
    if parts:
        # A step is final once every writer has moved past it (or its row is whole).
        seen = state.part_steps
        by_lag = min(seen.get(p, -1) for p in parts) - cfg.watermark_lag_steps
    # A writer that logs several lines per step never says which is its last: its step
    # is final only once it has moved past it (or at the end, or when idle).
    settled = [
        s
        for s, t in state.read_at.items()
        if not state.repeated_parts
        and now - t >= cfg.watermark_settle_seconds
        and _whole(state, s, parts)
    ]
    return max(by_lag, *settled) if settled else by_lag


def _spread_through(state: RunState, cfg: PipelineConfig) -> int:
    """The watermark of a run whose steps spread over records and logs: every log
    with records has read a later step. A log that stopped changing
    `idle_final_seconds` before the run's newest log changed (a file a restart left
    behind) no longer holds the others back."""
    logs = [(c.max_step, c.mtime) for c in state.cursors.values() if c.max_step >= 0]
    newest = max((m for _, m in logs if m is not None), default=None)
    live = [
        s for s, m in logs if m is None or newest is None or newest - m < cfg.idle_final_seconds
    ]
    return min(live, default=state.max_reported_step) - cfg.watermark_lag_steps


def _whole(state: RunState, step: int, parts: tuple[str, ...]) -> bool:
    if not parts:
        return True
    rec = state.reported.get(step)
    return rec is not None and set(parts) <= set(rec.part.split("+"))


def finalize(state: RunState, upto: int) -> list[dict[str, Any]]:
    """Rows of the pending steps in (final_through, upto], in step order."""
    if upto <= state.final_through:
        return []
    steps = sorted(s for s in {*state.pending, *state.reported} if s <= upto)
    fmt = state.format
    rows, samples = [], []
    for s in steps:
        part = state.pending.pop(s, None)
        part = part.settled() if part is not None else None
        rows.append(step_row(state.run_id, s, state.reported.pop(s, None), part, fmt))
        kept = part.agg.samples if part is not None else None
        if kept is not None:
            state.probe_panel = fix_panel(state.probe_panel, kept)
            samples.extend(sample_rows(state.run_id, s, kept, state.probe_panel))
    state.final_through = upto
    for s in [s for s in state.read_at if s <= upto]:
        del state.read_at[s]
    emit(state, "steps", rows)
    emit(state, "samples", samples)
    state.counters["steps_final"] += len(rows)
    _update_headline(state, rows, reported=stands_in(fmt))
    return rows


TREND_WINDOW = 20


def _update_headline(state: RunState, rows: list[dict[str, Any]], reported: bool = False) -> None:
    """Latest non-null headline figures, and the reward trend (slope per step) over
    the last TREND_WINDOW final steps; bounded memory whatever the run length. A
    figure's reported column stands in for a null recomputed one: at any step with
    `reported` (formats whose trainers often report what their files cannot give to
    recompute: `Format.reported_stands_in`), else (Loops) while the run has no recomputed value of it (a run with
    only steps.jsonl). `_reported` names the figures whose value is the reported one.
    The trend is of the reward status shows (`fleet.status.headline_reward`): over
    every attempt with a reward, else over the trained ones."""
    recent = state.headline.setdefault("_recent_rewards_all", [])
    computed = state.headline.setdefault("_recomputed", [])
    from_steps = set(state.headline.get("_reported", ()))
    for r in rows:
        for k in HEADLINE_KEYS:
            v = r.get(k)
            if v is not None:
                state.headline[k] = v
                from_steps.discard(k)
                if k not in computed:
                    computed.append(k)
            elif reported or k not in computed:
                v = r.get(f"reported_{k}")
                if v is not None:
                    state.headline[k] = v
                    from_steps.add(k)
        reward = None
        for k in ("reward_mean_with_unusable", "reward_mean"):
            reward = r.get(k)
            if reward is None and k in from_steps:
                reward = r.get(f"reported_{k}")
            if reward is not None:
                break
        if reward is not None:
            recent.append((r["step"], reward))
    del recent[:-TREND_WINDOW]
    state.headline["_reported"] = sorted(from_steps)
    state.headline["reward_trend"] = _slope(recent)


def _slope(points: list[tuple[int, float]]) -> float | None:
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def run_format(state: RunState) -> str:
    """The run's format as reported: a tracker's beside its trainer (`wandb/verl`)."""
    return f"{state.format}/{state.trainer}" if state.trainer else state.format


def summary(state: RunState) -> dict[str, Any]:
    """Headline counters of the run for logs and the run_health table."""
    c = state.counters
    return {
        "run_id": state.run_id,
        "run_uri": state.run_url,
        "format": run_format(state),
        "finished": is_finished(state),
        "last_step": state.max_reported_step if state.max_reported_step >= 0 else None,
        "final_through": state.final_through,
        "pending_steps": len({*state.pending, *state.reported}),
        "quarantined": c["quarantined"],
        "late": c["late"],
        "replaced_steps": c["replaced_steps"],
        "bytes": c["bytes"],
        "records": c["records"],
        "tokens": c["tokens"],
        "transcripts": c["transcripts"],
    }


def state_summary(s: RunState) -> dict[str, Any]:
    """Summary of a run for the terminal table: counters, status, headline figures."""
    return {
        **summary(s),
        "status": s.status or ("finished" if summary(s)["finished"] else "healthy"),
        "firing": list(s.firing),
        "steps_final": s.counters["steps_final"],
        **{k: v for k, v in s.headline.items() if not k.startswith("_")},
    }
