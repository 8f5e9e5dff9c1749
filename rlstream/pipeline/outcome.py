"""What `analyze` or `watch` did, told from what the commits wrote.

`Outcome` gathers, over every tailer (or the one in-process `RunGroup`): the runs read,
the rows each commit reported it wrote per table (`RunGroup.tally`), the runs rejected
because their run.json could not be read (URL and reason), and the records quarantined
inside the runs that were read. `lines(outcome, out, verb)` turns it into the closing
words of the command: never a table that was not written, the first few rejection
reasons inline and the rest counted, and where the quarantine rows are. `exit_status`
maps it to the documented exit codes (README, "Exit status").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rlstream.errors import EXIT_FAILURE, EXIT_OK, EXIT_REJECTED

TABLE_ORDER = ("steps", "run_health", "alerts", "quarantine")
REASONS_INLINE = 3


@dataclass
class Outcome:
    """A tally filled at the end of a command (mutable on purpose: it accumulates)."""

    runs: int = 0
    """Runs read (tracked to the end of what existed)."""
    written: Counter[str] = field(default_factory=Counter)
    """Rows written per table, as the commit code reported them."""
    rejected: dict[str, str] = field(default_factory=dict)
    """Run folder URL -> why it could not be read."""
    quarantined: int = 0
    """Records rejected inside runs that were read (bad lines, missing files)."""
    where: str = ""
    """Where the work ran and why (`runtime.placement`): the report's last line."""

    def add_tally(self, tally: dict[str, Any]) -> None:
        """Merge one `RunGroup.tally()` (tailers own disjoint runs: a plain sum)."""
        self.written.update(tally.get("written") or {})
        self.rejected.update(tally.get("rejected") or {})

    def add_summaries(self, summaries: list[dict[str, Any]]) -> None:
        self.runs += len(summaries)
        self.quarantined += sum(int(s.get("quarantined") or 0) for s in summaries)


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 run`, `2 runs`; `many` for irregular plurals."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def lines(outcome: Outcome, out: str, verb: str) -> list[str]:
    """The command's closing report: what was read, written and rejected."""
    o = outcome
    rows = sum(o.written.values())
    head = f"{verb} {plural(o.runs, 'run')}"
    if rows:
        per = ", ".join(
            f"{t} {o.written[t]}"
            for t in (*TABLE_ORDER, *sorted(set(o.written) - set(TABLE_ORDER)))
            if o.written.get(t)
        )
        head += f"; wrote {plural(rows, 'row')} under {out} ({per})"
    else:
        head += f"; nothing new written to {out}"
    if o.quarantined:
        head += f"; {plural(o.quarantined, 'record')} of these runs quarantined"
    out_lines = [head]
    if o.rejected:
        out_lines.append(f"{plural(len(o.rejected), 'run')} rejected (not analysed):")
        items = sorted(o.rejected.items())
        for url, why in items[:REASONS_INLINE]:
            out_lines.append(f"  {url}: {why}")
        if len(items) > REASONS_INLINE:
            out_lines.append(f"  ... and {plural(len(items) - REASONS_INLINE, 'more run')}")
        out_lines.append(
            f"  every rejected run has a row in {out}/quarantine (run_id '_rejected') "
            f"(also shown by `rlstream status {out}`)"
        )
    if o.quarantined and not o.rejected:
        out_lines.append(f"  quarantined records: {out}/quarantine/ (file, offset, reason)")
    if o.where:
        out_lines.append(o.where)
    return out_lines


def exit_status(outcome: Outcome) -> int:
    """0 when every run was read, 3 when some were rejected, 1 when none was read."""
    if outcome.runs == 0:
        return EXIT_FAILURE
    return EXIT_REJECTED if outcome.rejected else EXIT_OK
