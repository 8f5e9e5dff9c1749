"""A bounded record of the names a run consumed of its `NamedFiles` stream (Loops'
transcripts): a watermark and a window; `new_names` lists what is new.

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

import bisect
import time

from rlstream.config import PipelineConfig
from rlstream.formats.base import NamedFiles
from rlstream.formats.quarantine import QuarantineRow
from rlstream.io.storage import Storage
from rlstream.pipeline.state import RunState

MTIME_SLACK = 2.0
"""Seconds after which a folder's unchanged mtime proves no file was added."""


def new_names(
    storage: Storage, state: RunState, s: NamedFiles, cfg: PipelineConfig
) -> tuple[list[str], bool]:
    """(names of the stream's files not consumed yet, in listing order; whether names
    arrived below the watermark and were quarantined). Locally an unchanged folder
    mtime skips the listing; on an object store the listing starts after the
    watermark, with a full relist every `full_relist_every` polls."""
    folder = Storage.join(state.run_url, s.folder)
    full = state.polls % cfg.full_relist_every == 0
    if storage.is_local:
        st = storage.stat(folder + "/.")
        mark = st.mtime if st is not None else None
        # A folder's mtime has the kernel's tick as resolution: a file created in the
        # same tick as the last listing leaves it unchanged. Trust an unchanged mark
        # only once it is older than MTIME_SLACK seconds.
        settled = mark is not None and time.time() - mark > MTIME_SLACK
        if settled and mark == state.transcripts_mark and not full:
            return [], False
        names = storage.list_names(folder)
    else:
        names = storage.list_names(folder, None if full else state.names_low)
    low = state.names_low
    start = 0 if low is None else bisect.bisect_right(names, low)
    below = (
        low is not None
        and (full or storage.is_local)
        and check_below(state, names, start, cfg.transcript_window, s.folder)
    )
    window = set(state.names_window)
    state.listed = [n for n in names[start:] if n.endswith(s.suffix)]
    new = [n for n in state.listed if n not in window]
    if storage.is_local and not new:
        # Only an unchanged folder with nothing unseen may be skipped next time: names
        # listed now are not yet folded (their unit may fail and need a retry).
        state.transcripts_mark = mark
    return new, below


def check_below(
    state: RunState, names: list[str], start: int, window: int, folder: str = "transcripts"
) -> bool:
    """`names` is a full sorted listing and `names[:start]` the names at or below the
    watermark. Returns True when it quarantined names that arrived below it."""
    # Names hold no NUL: each one ending in ".json" ends in ".json\0" once joined.
    below = ("\0".join(names[:start]) + "\0").count(".json\0") if start else 0
    found = below > state.names_below
    if found:
        extra = below - state.names_below
        state.out_quarantine.append(
            QuarantineRow(
                state.run_id,
                folder,
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
