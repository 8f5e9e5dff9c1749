"""Scoring of `bench.detectors`: each analysed run's firings against its label
(`evaluate`), and the per-code table of recall, precision, lead and false alarms with
whether the targets are met (`report`). The definitions are bench/detectors.py's
docstring."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlstream.health import (
    CODES,
    RulesConfig,
    RunContext,
    check_time,
    fold_step,
    new_state,
    typical_interval,
)
from rlstream.health.state import FIRING

if TYPE_CHECKING:
    from bench.detectors import RunData


RECALL_TARGET = 0.95
"""Recall each code must reach on its own scenario's runs."""
FALSE_ALARM_TARGET = 1.0
"""Warning-or-critical firing episodes allowed per ten healthy runs."""


@dataclass
class RunResult:
    scenario: str
    onset: int | None
    first_fire: dict[str, int]  # code -> first firing step (at or after onset if labelled)
    early: set[str]  # own code fired before onset
    loud_episodes: int  # warning/critical firing episodes (for healthy runs)
    loud_codes: list[str]
    at_onset: set[str]  # codes already firing once the onset step was folded
    not_evaluable: frozenset[str] = frozenset()
    also: dict[str, int] | None = None  # further expected codes and their onsets

    def expects(self, code: str) -> bool:
        return self.scenario == code or code in (self.also or {})

    def onset_of(self, code: str) -> int:
        return (self.also or {}).get(code, self.onset or 0)


def evaluate(run: RunData, cfg: RulesConfig) -> RunResult:
    ctx = RunContext(run.run_id, run.config, run.finished)
    state = new_state(cfg, run.run_id)
    fires: list[tuple[str, str, int, float | None]] = []

    def note(trs: list[Any]) -> None:
        fires.extend(
            (t.code, t.severity, t.step, t.time)
            for t in trs
            if t.to_state == "firing" and t.from_state != "firing"
        )

    also = dict(run.also)
    folded: set[str] = set()
    also_at_onset: set[str] = set()
    at_onset: set[str] | None = None
    for row in run.rows:
        if row.get("time") is not None:
            state, tr = check_time(state, row["time"], None, ctx, cfg)
            note(tr)
        state, tr = fold_step(state, row, ctx, cfg)
        note(tr)
        if at_onset is None and run.onset is not None and row["step"] >= run.onset:
            at_onset = {c for c, a in state.alerts.items() if a.state == FIRING}
        for c in [c for c, o in also.items() if row["step"] >= o and c not in folded]:
            folded.add(c)  # an expected code's own onset: was it firing already?
            if c in state.alerts and state.alerts[c].state == FIRING:
                also_at_onset.add(c)
    interval = typical_interval(state)
    if not run.finished and interval and state.last_step_time is not None:
        # The run stopped writing: look at it as a watcher would, as time passes.
        max_steps = run.config.get("training", {}).get("max_steps", state.last_step + 1)
        for i in range(1, 4 * max(max_steps - state.last_step, 1) + 1):
            state, tr = check_time(state, state.last_step_time + i * interval / 4, None, ctx, cfg)
            note(tr)
            if tr:
                interval_steps = i / 4
                fires[-1] = (
                    fires[-1][0],
                    fires[-1][1],
                    state.last_step + round(interval_steps),
                    fires[-1][3],
                )
                break
    first: dict[str, int] = {}
    early: set[str] = set()
    for code, _sev, step, _t in fires:
        own = run.scenario == code or code in also
        if own and step < also.get(code, run.onset or 0):
            early.add(code)
            continue
        first.setdefault(code, step)
    loud = [c for c, sev, _s, _t in fires if sev != "info"]
    return RunResult(
        run.scenario, run.onset, first, early, len(loud), loud,
        (at_onset or set()) | also_at_onset, run.not_evaluable, also,
    )  # fmt: skip


def report(
    results: list[RunResult], steps: int, codes: tuple[str, ...] = CODES
) -> tuple[str, dict[str, Any]]:
    by_scen: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_scen[r.scenario].append(r)
    healthy = by_scen.get("healthy", [])
    lines = [
        "| code | runs | recall | firing at or after onset | precision | median lead (steps) "
        "| fired elsewhere |",
        "|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, Any] = {}
    for code in codes:
        own = [r for r in results if r.expects(code)]
        hits = [r for r in own if code in r.first_fire]
        fired_anywhere = [r for r in results if code in r.first_fire or code in r.early]
        true_pos = len(hits)
        precision = true_pos / len(fired_anywhere) if fired_anywhere else float("nan")
        leads = [r.first_fire[code] - r.onset_of(code) for r in hits]
        elsewhere = Counter(r.scenario for r in fired_anywhere if not r.expects(code))
        lead = statistics.median(leads) if leads else float("nan")
        recall = true_pos / len(own) if own else float("nan")
        caught = sum(code in r.first_fire or code in r.at_onset for r in own)
        at_or_after = caught / len(own) if own else float("nan")
        if own and all(code in r.not_evaluable for r in own):
            lines.append(f"| {code} | {len(own)} | not evaluable | - | - | - | - |")
            summary[code] = {"not_evaluable": True}
            continue
        lines.append(
            f"| {code} | {len(own)} | {recall:.0%} | {at_or_after:.0%} | {precision:.0%} "
            f"| {lead:.0f} | "
            + (", ".join(f"{s} ({n})" for s, n in elsewhere.most_common(3)) or "-")
            + " |"
        )
        summary[code] = {
            "recall": recall,
            "firing_at_or_after_onset": at_or_after,
            "precision": precision,
            "lead": lead,
            "elsewhere": dict(elsewhere),
        }
    fa = sum(r.loud_episodes for r in healthy)
    per_run = fa / len(healthy) if healthy else float("nan")
    loud = Counter(c for r in healthy for c in r.loud_codes)
    lines.append("")
    lines.append(
        f"False alarms (warning or critical firing episodes) on {len(healthy)} healthy "
        f"{steps}-step runs: {fa} ({per_run:.2f} per run, {10 * per_run:.1f} per ten runs)"
        + (f"; codes: {dict(loud)}" if loud else "")
    )
    unobserved = Counter(r.scenario for r in results if r.scenario.startswith("unobserved:"))
    if unobserved:
        lines.append(
            "Runs whose preset's pathology was not observed (not scored): "
            + ", ".join(f"{k.split(':', 1)[1]} {n}" for k, n in sorted(unobserved.items()))
        )
    low = [
        f"{c} {v['recall']:.0%}"
        for c, v in summary.items()
        if "recall" in v and v["recall"] == v["recall"] and v["recall"] < RECALL_TARGET
    ]
    fa_ok = per_run <= FALSE_ALARM_TARGET / 10
    fa_word = "met" if fa_ok else "missed" if healthy else "not measured (no healthy runs)"
    lines.append(
        f"Targets (recall >= {RECALL_TARGET:.0%} per code, <= {FALSE_ALARM_TARGET:g} false "
        f"alarm per ten healthy runs): recall {'missed: ' + ', '.join(low) if low else 'met'}; "
        f"false alarms {fa_word}"
    )
    summary["_targets_met"] = not low and fa_ok
    summary["_false_alarms_per_healthy_run"] = per_run
    summary["_healthy_runs"] = len(healthy)
    summary["_unobserved"] = dict(unobserved)
    return "\n".join(lines), summary
