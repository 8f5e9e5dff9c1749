"""A bounded record of the transcript names a run consumed: a watermark and a window.

A run's transcripts are files named by attempt; a set of every name read would grow
with the run. Instead (fields of `RunState`): every name at or below `names_low` was
consumed (`names_below` of them), and `names_window` holds the consumed names above
it. After each poll, `advance_names` moves `names_low` over the consumed prefix of
the listing, keeping the last `window` consumed names above it.

Assumption (docs/run-format.md): a trainer writes transcripts whose names sort in
write order, up to `window` names of reordering. A name that breaks it (it appears
below `names_low` after the watermark passed it) cannot be told from an old name
without the full set; `check_below` sees it on a full listing (the count of names
at or below the watermark grew) and quarantines it, counted once: never a silent miss.
"""

from __future__ import annotations

from rlstream.formats.quarantine import QuarantineRow
from rlstream.pipeline.state import RunState
from rlstream.pipeline.work import TRANSCRIPTS_DIR


def check_below(state: RunState, names: list[str], start: int, window: int) -> bool:
    """`names` is a full sorted listing and `names[:start]` the names at or below the
    watermark. Returns True when it quarantined names that arrived below it."""
    below = sum(1 for n in names[:start] if n.endswith(".json"))
    found = below > state.names_below
    if found:
        extra = below - state.names_below
        state.out_quarantine.append(
            QuarantineRow(
                state.run_id,
                TRANSCRIPTS_DIR,
                None,
                "transcript_below_window",
                f"{extra} transcripts appeared with names sorting at or below "
                f"{state.names_low} after it was passed; not read (names must sort in "
                f"write order within {window} names)",
            )
        )
        state.counters["quarantined"] += 1
        state.counters["transcripts_below_window"] += extra
    state.names_below = below
    return found


def advance_names(state: RunState, window: int) -> None:
    """Move `names_low` up over the consumed prefix of this poll's listing
    (`state.listed`), keeping the last `window` consumed names above it."""
    listed, seen = state.listed, set(state.names_window)
    i = 0
    while i < len(listed) and listed[i] in seen:
        i += 1
    cut = i - window
    if cut > 0:
        state.names_low = listed[cut - 1]
        state.names_below += cut
        state.names_window = [n for n in state.names_window if n > state.names_low]
    state.listed = []
