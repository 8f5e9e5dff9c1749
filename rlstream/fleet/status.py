"""`rlstream status`: every run of OUT in one table, worst first.

`status_rows(latest, now)` turns the latest run_health rows (see `read.read_latest`)
into plain dicts with JSON-ready values; `render_table(rows, rejected=...)` lays them
out for a terminal: a count line whose parts add up to the runs, the rows, a legend for
the starred columns (KL, ESS, entropy, truncation: the window medians the health rules
judge, so a row never contradicts its firing findings) and for `n/e` (how many rules the
run's format cannot evaluate; `--json` names them) and for `quar` (the run's quarantined
lines), the runs the rules could not judge or not fully judge and what is missing
(`missing_lines`), and a footer naming the rejected runs (`outdir.read_rejected`);
`follow(...)` redraws the table in place until interrupted. Order: status severity
(critical, stalled, warning, insufficient, healthy, finished), then more firing findings
first, then run_id. The status cell (`verdict`) reads `finished: critical CODE, steps
A-B` for a finished run with a warning or critical finding (the worst, its latest
firing), `not judged` if the rules cannot judge it; only OUT is read, never the runs.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any, TextIO

from rlstream.health.figures import RECENT_FIGURES
from rlstream.pipeline.outcome import plural

STATUS_ORDER = {
    "critical": 0,
    "stalled": 1,
    "warning": 2,
    "insufficient": 3,
    "healthy": 4,
    "finished": 5,
}
STATUS_LABEL = {
    "healthy": "healthy running",
    "finished": "finished healthy",
    "insufficient": "not judged",
}
"""How counts name a status: `finished` means finished, judged, and no warning or
critical finding ever fired (a finished run that had one keeps that severity);
`insufficient` means the rules could not judge the run (`missing` says why). Healthy
runs without step times are counted apart (`UNTIMED_LABEL`): nothing says whether they
are still running."""
UNTIMED_LABEL = "healthy, not known to be running (no step times)"
RECENT_KEYS = tuple(RECENT_FIGURES)
"""run_health columns holding the window median each health rule judges."""
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def _epoch(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return v.timestamp()
    return float(v)


def firing(findings: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The firing findings, most severe first, then by code."""
    out = [f for f in findings or [] if f.get("state") == "firing"]
    return sorted(out, key=lambda f: (SEVERITY_ORDER.get(f.get("severity"), 9), f.get("code")))


def sort_key(row: dict[str, Any]) -> tuple[int, int, str]:
    return (STATUS_ORDER.get(row.get("status") or "", 9), -len(row["firing"]), row["run_id"])


def status_rows(latest: list[dict[str, Any]], now: float | None = None) -> list[dict[str, Any]]:
    """One JSON-ready dict per run, worst first."""
    now = time.time() if now is None else now
    rows = []
    for r in latest:
        activity = _epoch(r.get("last_activity"))
        as_of = _epoch(r.get("as_of"))
        rows.append(
            {
                "run_id": r["run_id"],
                "run_uri": r.get("run_uri"),
                "format": r.get("format") or "loops",
                "cohort": r.get("cohort"),
                "status": r.get("status"),
                "last_step": r.get("last_step"),
                "last_activity": activity,
                "seconds_since_update": None if activity is None else round(now - activity, 1),
                "as_of": as_of,
                "seconds_since_commit": None if as_of is None else round(now - as_of, 1),
                "reward_mean": r.get("reward_mean"),
                "reward_mean_with_unusable": r.get("reward_mean_with_unusable"),
                "reward_trend": r.get("reward_trend"),
                "mismatch_kl": r.get("mismatch_kl"),
                "mismatch_ess": r.get("mismatch_ess"),
                "entropy_estimate": r.get("entropy_estimate"),
                "truncated_frac": r.get("truncated_frac"),
                **{k: r.get(k) for k in RECENT_KEYS},
                "recent_steps": _int(r.get("recent_steps")),
                "firing": [
                    {k: f.get(k) for k in ("code", "severity", "since_step", "message")}
                    for f in firing(r.get("findings"))
                ],
                "quarantined": r.get("quarantined"),
                "replaced_steps": _int(r.get("replaced_steps")) or 0,
                "not_evaluable": list(r.get("not_evaluable") or []),
                "finished": _finished(r),
                "judged": r.get("judged"),
                "missing": r.get("missing"),
                "worst_finding": r.get("worst_finding"),
                "reported_figures": list(r.get("reported_figures") or []),
            }
        )
        rows[-1]["verdict"] = verdict(rows[-1])
    rows.sort(key=sort_key)
    return rows


def _finished(r: dict[str, Any]) -> bool:
    """The run finished (rows written before the `finished` column: status says)."""
    f = r.get("finished")
    return bool(f) if f is not None else r.get("status") == "finished"


def verdict(r: dict[str, Any]) -> str:
    """The status cell: what the run is, in words (see the module docstring)."""
    status = r.get("status") or "-"
    word = "not judged" if status == "insufficient" else status
    if not r.get("finished"):
        return word
    w = r.get("worst_finding")
    if status in ("critical", "warning"):
        if w and w.get("severity") == status:
            return f"finished: {status} {w['code']}, steps {w['since_step']}-{w['until_step']}"
        return f"finished: {status}"
    return "finished, not judged" if status == "insufficient" else "finished"


def unjudged(r: dict[str, Any]) -> bool:
    """The rules could not judge the run, whatever its status (a finding may fire)."""
    return r.get("judged") == "insufficient" or r.get("status") == "insufficient"


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Runs per status, in STATUS_ORDER."""
    out = dict.fromkeys(STATUS_ORDER, 0)
    for r in rows:
        out[r.get("status") or "unknown"] = out.get(r.get("status") or "unknown", 0) + 1
    return out


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(seconds, 0.0)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    if s < 172800:
        return f"{s / 3600:.0f}h"
    return f"{s / 86400:.0f}d"


def fmt_num(v: float | None, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def trend_arrow(slope: float | None) -> str:
    """Reward change per 100 steps, as an arrow and a signed number."""
    if slope is None:
        return ""
    per100 = slope * 100
    arrow = "↑" if per100 > 0.02 else ("↓" if per100 < -0.02 else "→")
    return f"{arrow}{per100:+.2f}"


HEADS = ("run", "format", "cohort", "status", "step", "updated", "reward", "trend/100")
HEADS += ("kl*", "ess*", "entropy*", "trunc*", "quar", "n/e", "findings")
NE_LEGEND = (
    "n/e: how many health rules the run's files cannot evaluate (its format lacks their "
    "figures; names under not_evaluable in --json and in the report)"
)
QUAR_LEGEND = "quar: lines quarantined (file, offset, reason in OUT/quarantine)"


def table_cells(r: dict[str, Any]) -> list[str]:
    return [
        r["run_id"],
        r.get("format") or "loops",
        r.get("cohort") or "-",
        r.get("verdict") or verdict(r),
        fmt_num(r.get("last_step"), "d"),
        fmt_age(r.get("seconds_since_update")),
        reward_cell(r, "r"),
        trend_arrow(r.get("reward_trend")) or "-",
        fmt_num(r.get("mismatch_kl_recent"), ".2e"),
        fmt_num(r.get("mismatch_ess_recent"), ".3f"),
        fmt_num(r.get("entropy_recent"), ".3f"),
        fmt_num(r.get("truncated_recent"), ".2f"),
        fmt_num(r.get("quarantined"), "d"),
        str(len(r.get("not_evaluable") or [])) if r.get("not_evaluable") else "-",
        ",".join(f["code"] for f in r["firing"]) or "-",
    ]


def _reported(r: dict[str, Any], key: str) -> bool:
    return key in (r.get("reported_figures") or ())


def headline_reward(r: dict[str, Any]) -> tuple[float | None, str]:
    """(value, column) of the headline reward: over every attempt with a reward
    (`reward_mean_with_unusable`: what the rules judge and trainers log), else the
    trained attempts' (`reward_mean`, biased to the middle: all-alike groups train not)."""
    v = r.get("reward_mean_with_unusable")
    if v is not None:
        return v, "reward_mean_with_unusable"
    return r.get("reward_mean"), "reward_mean"


def reward_cell(r: dict[str, Any], mark: str) -> str:
    """The headline reward as text, `mark` appended when it is the reported figure."""
    v, key = headline_reward(r)
    return fmt_num(v, ".3f") + (mark if _reported(r, key) else "")


REPORTED_LEGEND = (
    "r: the figure the trainer's log reports (steps.jsonl or its metrics: the run's files "
    "give nothing to recompute it from; reported_figures in --json)"
)
MISSING_SHOWN = 10


def missing_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The runs the rules could not judge, and those still short of some rule's steps,
    grouped by what is missing."""
    groups: dict[tuple[bool, str], list[str]] = {}
    for r in rows:
        if r.get("missing"):
            key = (unjudged(r), r["missing"])
            groups.setdefault(key, []).append(r["run_id"])
    out = []
    for (none, text), ids in sorted(groups.items(), key=lambda kv: not kv[0][0]):
        shown = ", ".join(ids[:MISSING_SHOWN])
        more = f" and {len(ids) - MISSING_SHOWN} more" if len(ids) > MISSING_SHOWN else ""
        out.append(f"{'not judged' if none else 'partly judged'}: {text}: {shown}{more}")
    return out


def recent_legend(rows: list[dict[str, Any]]) -> str:
    """What the starred columns show: the window median the health rules judge, so a
    firing finding and the figure beside it never disagree."""
    ns = sorted({r["recent_steps"] for r in rows if r.get("recent_steps")})
    window = f"the last {ns[0]} final steps" if len(ns) == 1 else "each run's last few final steps"
    return (
        f"* median of {window}, the value the health rules judge (reward: last step, over "
        "every attempt with a reward, rejected groups included)"
    )


def count_parts(rows: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    """(status, runs, words) per status with runs, in STATUS_ORDER: how many of them
    finished is said beside a severity, and healthy runs without step times are apart
    (status `healthy-untimed`); the runs add up."""
    c = counts(rows)
    untimed = sum(1 for r in rows if r.get("status") == "healthy" and r["last_activity"] is None)
    c["healthy"] -= untimed
    out = []
    for s, n in c.items():
        if not n:
            continue
        ended = sum(1 for r in rows if r.get("status") == s and r.get("finished"))
        both = s != "finished" and ended > 0
        out.append(
            (s, n, f"{n} {STATUS_LABEL.get(s, s)}" + (f" ({ended} finished)" if both else ""))
        )
        if s == "healthy" and untimed:
            out.append(("healthy-untimed", untimed, f"{untimed} {UNTIMED_LABEL}"))
    if untimed and not c["healthy"]:
        at = next((i for i, p in enumerate(out) if STATUS_ORDER.get(p[0], 9) > 4), len(out))
        out.insert(at, ("healthy-untimed", untimed, f"{untimed} {UNTIMED_LABEL}"))
    return out


def summary_line(rows: list[dict[str, Any]], rejected: int = 0) -> str:
    """`5 runs: 1 critical (1 finished), 4 finished healthy; 1 rejected run`: the
    parts add up."""
    parts = ", ".join(words for _, _, words in count_parts(rows))
    line = f"{plural(len(rows), 'run')}" + (f": {parts}" if parts else "")
    if rejected:
        line += f"; {plural(rejected, 'rejected run')} (not analysed, listed below)"
    return line


REJECTED_SHOWN = MISSING_SHOWN


def rejected_lines(rejected: list[dict[str, Any]]) -> list[str]:
    """A footer naming the run folders not analysed (`outdir.read_rejected`), and why."""
    if not rejected:
        return []
    out = [f"rejected ({plural(len(rejected), 'run')}; not analysed):"]
    for r in rejected[:REJECTED_SHOWN]:
        why = "run.json " * (r["reason"] == "bad_run_json") + (r.get("detail") or r["reason"])
        out.append(_printable(f"  {r['run_uri']}: {why}"))
    if len(rejected) > REJECTED_SHOWN:
        out.append(f"  ... and {plural(len(rejected) - REJECTED_SHOWN, 'more run')}")
    return out


def _printable(s: str) -> str:
    """Run ids come from run data: control characters (a terminal escape sequence in a
    run_id) are shown escaped, never sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def render_table(
    rows: list[dict[str, Any]],
    color: bool = False,
    rejected: list[dict[str, Any]] | None = None,
) -> str:
    """The table as text: a count line, one line per run, the legend of the starred
    columns, and the rejected runs, if any."""
    cells = [[_printable(c) for c in table_cells(r)] for r in rows]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(HEADS)]
    lines = [
        summary_line(rows, len(rejected or [])),
        "  ".join(h.ljust(w) for h, w in zip(HEADS, widths, strict=True)).rstrip(),
    ]
    for r, row in zip(rows, cells, strict=True):
        line = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        if color:
            code = {"critical": "31", "stalled": "35", "warning": "33"}.get(r.get("status"))
            if code:
                line = f"\x1b[{code}m{line}\x1b[0m"
        lines.append(line)
    if rows:
        lines.append(recent_legend(rows))
        lines.append(QUAR_LEGEND)
        if any(r.get("not_evaluable") for r in rows):
            lines.append(NE_LEGEND)
        replaced = [r for r in rows if r.get("replaced_steps")]
        if replaced:
            lines.append(
                "steps logged again (a restart), the newest record kept: "
                + ", ".join(f"{r['run_id']} {r['replaced_steps']}" for r in replaced)
            )
        if any(_reported(r, headline_reward(r)[1]) for r in rows):
            lines.append(REPORTED_LEGEND)
        lines.extend(_printable(x) for x in missing_lines(rows))
    elif rejected:
        lines.append("(no run analysed: every run found was rejected, listed below)")
    else:
        lines.append("(no runs yet: nothing in run_health)")
    lines.extend(rejected_lines(rejected or []))
    return "\n".join(lines) + "\n"


def follow(
    load: Callable[[], list[dict[str, Any]]],
    out: TextIO,
    interval: float = 2.0,
    count: int | None = None,
    as_json: bool = False,
    pretty: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    load_rejected: Callable[[], list[dict[str, Any]]] | None = None,
) -> int:
    """Redraw every `interval` seconds (in place on a terminal) `count` times, or until
    Ctrl-C. With `as_json`, one JSON document per refresh: on one line each (for
    scripts reading a stream), or indented with `pretty`. Returns how many runs
    (analysed or rejected) the last refresh showed."""
    tty = out.isatty()
    n = shown = 0
    while count is None or n < count:
        if n:
            sleep(interval)
        now = time.time()
        rows = status_rows(load(), now)
        rejected = load_rejected() if load_rejected is not None else []
        shown = len(rows) + len(rejected)
        if as_json:
            doc = {"as_of": now, "counts": counts(rows), "runs": rows, "rejected": rejected}
            out.write(json.dumps(doc, indent=1 if pretty else None) + "\n")
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(now))
            head = f"rlstream status  {stamp}  (Ctrl-C to stop)\n" if count != 1 else ""
            text = head + render_table(rows, tty, rejected)
            if tty and count != 1:
                out.write("\x1b[H\x1b[2J" + text)
            else:
                out.write(text + "\n")
        out.flush()
        n += 1
    return shown
