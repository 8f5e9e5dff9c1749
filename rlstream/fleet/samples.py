"""`rlstream samples OUT RUN`: a run's kept samples in the terminal (or as JSON).

`read_samples(out, run, ...)` reads OUT/samples for one run (docs/schema.md), only
what it shows (`SamplesReader`: the run and step, or task, filter pushed into the
scan): one step (`--step`, default the newest), a task across every step (`--task`),
flagged ones only (`--flagged`), at most K per reason (`--top`). Flagged
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


class SamplesReader:
    """OUT/samples of one run, read as little as what is printed needs.

    The run's rows are found through the table's file statistics (the Delta log's
    per-file min and max of `run_id` and `step`): `newest()` reads the `step` column
    of the files that may hold the run's newest step, newest first, and stops once no
    other file can hold a later one; `rows(...)` reads the columns of one step's (or
    one task's) rows, the filter pushed into the scan, so files and Parquet row
    groups whose statistics rule them out are never read (the `samples` table's row
    groups are small: `sinks.delta.ROW_GROUP_ROWS`). `reads` lists each row group
    read: (file, row group, columns, rows materialised)."""

    def __init__(self, out: str, run: str, storage_options: dict[str, Any] | None = None):
        import pyarrow.compute as pc
        from deltalake import DeltaTable

        from rlstream.fleet.read import out_sink

        sink = out_sink(out, storage_options)
        self.run = run
        self.mine = pc.field("run_id") == run
        self.reads: list[tuple[str, int, int, int]] = []
        self.ds = None
        self._max: dict[str, int] = {}
        if sink.exists("samples"):
            dt = DeltaTable(sink.uri("samples"), storage_options=sink.options)
            self.ds = sink.dataset(dt)
            self._max = _max_steps(dt, run)

    def _fragments(self, flt: Any) -> list[Any]:
        assert self.ds is not None
        return list(self.ds.get_fragments(filter=flt))

    def _scan(self, frag: Any, columns: list[str], flt: Any) -> Any:
        """`frag`'s rows matching `flt` (an Arrow table), read a row group at a time:
        only the row groups its Parquet statistics do not rule out."""
        import pyarrow as pa

        parts = []
        for rg in frag.split_by_row_group(flt):
            t = rg.to_table(columns=columns, filter=flt)
            self.reads.append((_name(frag.path), rg.row_groups[0].id, len(columns), t.num_rows))
            parts.append(t)
        return pa.concat_tables(parts) if parts else pa.table({c: [] for c in columns})

    def _read(self, columns: list[str], flt: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for frag in self._fragments(flt):
            rows += self._scan(frag, columns, flt).to_pylist()
        return rows

    def newest(self) -> int | None:
        """The run's newest step with samples, or None when it has none."""
        if self.ds is None:
            return None
        frags = self._fragments(self.mine)
        big = 1 << 62
        frags.sort(key=lambda f: -self._max.get(_name(f.path), big))
        best: int | None = None
        for frag in frags:
            if best is not None and self._max.get(_name(frag.path), big) <= best:
                break  # no row of this file or a later one can be newer
            t = self._scan(frag, ["step"], self.mine)
            if t.num_rows:
                top = max(t.column("step").to_pylist())
                best = top if best is None else max(best, top)
        return best

    def rows(self, step: int | None = None, task: str | None = None) -> list[dict[str, Any]]:
        """The run's rows of `task` (every step) or else of `step`."""
        import pyarrow.compute as pc

        if self.ds is None:
            return []
        names = self.ds.schema.names
        cols = [c for c in names if c != "commit_seq"]
        if task is not None:
            return self._read(cols, self.mine & (pc.field("task_id") == task))
        return self._read(cols, self.mine & (pc.field("step") == step))


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _max_steps(dt: Any, run: str) -> dict[str, int]:
    """{file name: its greatest `step`} of the files whose `run_id` range holds `run`,
    from the Delta log's statistics (a file without them is read whenever asked)."""
    import pyarrow as pa

    acts = pa.table(dt.get_add_actions(flatten=True))
    need = {"path", "min.run_id", "max.run_id", "max.step"}
    if not need <= set(acts.column_names):
        return {}
    out: dict[str, int] = {}
    cols = [acts.column(c).to_pylist() for c in ("path", "min.run_id", "max.run_id", "max.step")]
    for path, lo, hi, top in zip(*cols, strict=True):
        if top is not None and (lo is None or lo <= run) and (hi is None or run <= hi):
            out[_name(path)] = top
    return out


def read_samples(
    out: str,
    run: str,
    step: int | None = None,
    task: str | None = None,
    flagged: bool = False,
    top: int | None = None,
    storage_options: dict[str, Any] | None = None,
    reader: SamplesReader | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """(rows to show, the run's newest step with samples: None when it has none). Only
    the rows of the step shown (`step`, default the newest) or of `task` are read."""
    r = reader or SamplesReader(out, run, storage_options)
    newest = r.newest()
    if newest is None:
        return [], None
    rows = r.rows(newest if step is None else step, task)
    if flagged:
        rows = [x for x in rows if x["flags"]]
    rows.sort(key=lambda r: (r["step"], not r["flags"], -(r["reward"] or 0.0), r["attempt_id"]))
    if top is not None:
        seen: dict[tuple[int, str], int] = {}
        keep = []
        for x in rows:
            why = "flagged" if x["flags"] else x["kept"][0]
            n = seen.get((x["step"], why), 0)
            if n < top:
                keep.append(x)
            seen[(x["step"], why)] = n + 1
        rows = keep
    return rows, newest


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
    rows, newest = read_samples(
        args.out, args.run, args.step, args.task, args.flagged, args.top, opts
    )
    if newest is None:  # nothing kept at all: say why, never an empty list read as "no hacks"
        print(f"rlstream: {why_none(args.out, args.run, opts)}", file=sys.stderr)
        return EXIT_FAILURE
    if args.json:
        return _emit(json.dumps(rows))
    if not rows:
        print(
            f"rlstream: no samples match (the newest step with samples is {newest})",
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
