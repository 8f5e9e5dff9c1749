"""`rlstream samples OUT RUN`: a run's kept samples in the terminal (or as JSON).

`read_samples(out, run, ...)` reads OUT/samples for one run (docs/schema.md) and picks
what to show: one step (`--step`, default the newest), a task across every step
(`--task`), flagged ones only (`--flagged`), at most K per reason (`--top`). Flagged
samples come first, then by reward. `render(rows, width, color)` prints each with
its reward, why it was kept and its flags highlighted, then what its calls were sent
and returned, wrapped. Run text is escaped: control characters show as `\\xNN`, so a
transcript cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import textwrap
from typing import Any

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape(text: str) -> str:
    """Run text safe for a terminal: control characters (newline, tab aside) as \\xNN."""
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def read_samples(
    out: str,
    run: str,
    step: int | None = None,
    task: str | None = None,
    flagged: bool = False,
    top: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[int]]:
    """(rows to show, every step of the run with samples)."""
    from rlstream.fleet.read import read_table

    t = read_table(out, "samples", storage_options, where=("run_id", run))
    rows = t.to_pylist() if t.num_rows else []
    steps = sorted({r["step"] for r in rows})
    if task is not None:
        rows = [r for r in rows if r["task_id"] == task]
    elif rows:
        want = steps[-1] if step is None else step
        rows = [r for r in rows if r["step"] == want]
    if flagged:
        rows = [r for r in rows if r["flags"]]
    rows.sort(key=lambda r: (r["step"], not r["flags"], -(r["reward"] or 0.0), r["attempt_id"]))
    if top is not None:
        seen: dict[tuple[int, str], int] = {}
        keep = []
        for r in rows:
            why = "flagged" if r["flags"] else r["kept"][0]
            n = seen.get((r["step"], why), 0)
            if n < top:
                keep.append(r)
            seen[(r["step"], why)] = n + 1
        rows = keep
    return rows, steps


def _paint(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def _block(label: str, text: str | None, size: int | None, width: int) -> list[str]:
    if text is None:
        return [f"  {label}: (not recorded)"]
    out = [f"  {label} ({size if size is not None else len(text.encode())} bytes):"]
    for line in escape(text).splitlines() or [""]:
        out.extend(textwrap.wrap(line, width - 4, replace_whitespace=False) or [""])
    return [out[0], *("    " + x for x in out[1:])]


def render(rows: list[dict[str, Any]], width: int = 100, color: bool = False) -> str:
    """The samples as text blocks, flags highlighted."""
    lines: list[str] = []
    for r in rows:
        reward = "-" if r["reward"] is None else f"{r['reward']:.3f}"
        flags = (
            "  " + _paint("FLAGS " + ", ".join(map(escape, r["flags"])), "1;31", color)
            if r["flags"]
            else ""
        )
        head = (
            f"step {r['step']}  attempt {escape(r['attempt_id'])}  reward {reward}  "
            f"kept {','.join(r['kept'])}{flags}"
        )
        lines.append(_paint(head, "1", color) if not r["flags"] else head)
        meta = [
            f"task {escape(r['task_id'] or '-')}",
            f"group {escape(r['group_id'] or '-')}",
            "trained" if r["trained"] else "not trained",
            f"{r['length']} tokens" if r["length"] is not None else "",
            f"{r['calls']} calls" if r["calls"] else "",
            f"stop {escape(r['stop_reason'])}" if r["stop_reason"] else "",
            f"policy v{r['policy_version']}" if r["policy_version"] is not None else "",
        ]
        lines.append("  " + "  ".join(m for m in meta if m))
        if r["transcript"]:
            lines.append(f"  transcript: {escape(r['transcript'])}")
        lines += _block("sent", r["sent"], r["sent_bytes"], width)
        lines += _block("returned", r["returned"], r["returned_bytes"], width)
        lines.append("")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """The `samples` subcommand."""
    p = sub.add_parser("samples", help="a run's kept samples: top, bottom, flagged, probes")
    p.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    p.add_argument("run", metavar="RUN", help="the run id (as in `rlstream status`)")
    p.add_argument("--step", type=int, help="this step (default: the newest with samples)")
    p.add_argument("--top", type=int, metavar="K", help="at most K samples per reason kept")
    p.add_argument("--flagged", action="store_true", help="only samples a scanner flags")
    p.add_argument("--task", metavar="ID", help="this task's samples at every step")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    p.add_argument("--width", type=int, default=100, help="wrap text at this width")
    p.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    p.set_defaults(func=cmd_samples)


def why_none(out: str, run: str, storage_options: dict[str, Any] | None = None) -> str:
    """Why a run has no kept samples, from its newest run_health row: not in OUT, its
    files record no text the scanners can judge (transcript_hack_flags not evaluable),
    or no final step with text yet."""
    from rlstream.fleet.read import read_latest

    rows = [r for r in read_latest(out, storage_options) if r["run_id"] == run]
    if not rows:
        return f"no run {run} in {out} (`rlstream status {out}` lists its runs)"
    if "transcript_hack_flags" in (rows[0].get("not_evaluable") or []):
        return (
            f"run {run} keeps no samples: its files record no text, or no reward that tells "
            "high-reward attempts, so transcript_hack_flags is not evaluable on them "
            "(docs/formats.md says which files carry text)"
        )
    return f"run {run} has no final step with text yet"


def cmd_samples(args: argparse.Namespace) -> int:
    from rlstream.cli_support import checked_out, storage_options
    from rlstream.errors import EXIT_FAILURE

    opts = storage_options(args.storage_options)
    checked_out(args.out, opts)
    rows, steps = read_samples(
        args.out, args.run, args.step, args.task, args.flagged, args.top, opts
    )
    if not steps:  # nothing kept at all: say why, never an empty list read as "no hacks"
        print(f"rlstream: {why_none(args.out, args.run, opts)}", file=sys.stderr)
        return EXIT_FAILURE
    if args.json:
        return _emit(json.dumps(rows))
    if not rows:
        print(
            f"rlstream: no samples match (steps with samples: {steps[0]}..{steps[-1]})",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return _emit(render(rows, args.width, sys.stdout.isatty()))


def _emit(text: str) -> int:
    """Print `text`; a reader that stopped early (`| head`) is not an error: the rest
    goes nowhere, exit 0."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
