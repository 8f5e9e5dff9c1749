"""Is this an rlstream OUT? And which runs did it reject?

`check_out(storage, out)` is the one place that decides whether a path given to
`status`, `report`, `compact` (and any command that reads OUT) is the output folder
of `rlstream analyze` or `watch`: it raises `InputError` with a one-line message
naming the path and what to do when OUT does not exist, cannot be read, holds the
earlier Parquet layout (the sink's message), or is not an rlstream OUT by the sink's
definition (`DeltaSink.is_out`: a Delta log under OUT/run_health). It is called
before anything else runs.

`read_rejected(out)` lists the runs that could not be read at all (their run.json is
missing a run_id, is not JSON, ...): the `quarantine` table's rows under the
`_rejected` run id, one per run folder, as {run_uri, reason, detail}, leaving out runs
that have a run_health row since (the rows stay in the table; a run that can be read
is no longer rejected). They have no run_health row, so the fleet views show them
from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlstream.config import PipelineConfig
from rlstream.errors import InputError, RlstreamError
from rlstream.io.storage import Storage
from rlstream.pipeline.commit import open_sink
from rlstream.pipeline.discover import normalize_root, probe_folder
from rlstream.pipeline.runner import REJECTED


def rejected_folder(out: str) -> str:
    """Where the quarantine rows of rejected runs are (a filter on the Delta table)."""
    return f"{Storage.join(normalize_root(out), 'quarantine')} (run_id = '{REJECTED}')"


def check_out(storage: Storage, out: str) -> None:
    """Raise `InputError` unless `out` is an rlstream output folder."""
    url = normalize_root(out)
    why = probe_folder(storage, url)
    if why is not None:
        raise InputError(
            f"OUT {out} {why}: give the --out folder of `rlstream analyze` or "
            "`rlstream watch` (a watch creates it at its first commit)"
        )
    try:
        found = open_sink(url, PipelineConfig(), storage).is_out()  # checks the layout first
    except InputError:
        raise
    except RlstreamError as e:  # the earlier Parquet layout: the sink says what to do
        raise InputError(str(e)) from e
    except Exception as e:  # a bucket can fail after it was found
        raise InputError(f"OUT {out} cannot be read ({type(e).__name__}: {e})") from e
    if not found:
        raise InputError(
            f"{out} is not an rlstream output (no Delta table run_health/ or quarantine/ under it): "
            "give the --out folder of `rlstream analyze` or `rlstream watch`"
        )


def read_rejected(
    out: str,
    storage_options: dict[str, Any] | None = None,
    known: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """Runs that could not be read, sorted by URI: [{run_uri, reason, detail}], one per
    run URI. A run read since (its URI in `known`, by default the run_uris of the
    latest run_health rows) is not listed: its rejection row stays in the table."""
    from rlstream.fleet.read import read_latest, read_table

    if known is None:
        known = [r["run_uri"] for r in read_latest(out, storage_options)]
    seen = set(known)

    cols = ["file", "reason", "detail"]
    t = read_table(out, "quarantine", storage_options, cols, ("run_id", REJECTED))
    rows = {r["file"]: r for r in t.to_pylist()}
    return [
        {"run_uri": u, "reason": r["reason"], "detail": r["detail"]}
        for u, r in sorted(rows.items())
        if u not in seen
    ]
