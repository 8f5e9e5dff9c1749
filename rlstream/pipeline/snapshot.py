"""The resume state's snapshot: which fields of a `RunState` a restart needs.

A run's resume state (`rlstream.pipeline.resume` encodes it) is a versioned snapshot,
not a dump of the in-memory run: `snapshot(state)` writes the fields of `FIELDS` (each
listed, with its type and meaning, in docs/runtime.md "Resume state"), and
`restore(body, version)` builds the `RunState` back from them, recomputing the
`DERIVED` fields. Every other `RunState` field is `TRANSIENT`: never written.

- **Persisted** (`FIELDS`): cursors, the transcript-name window, the pending partial
  aggregates, the health engine's state, counters and the commit `seq`: what cannot be
  recomputed without reading the run again.
- **Derived** (`DERIVED`, and the headline keys of `HEADLINE_DERIVED`): recomputed on
  restore from the snapshot (the format's writers, the findings and firing codes of the
  health state, the reward trend, the rules the figures cannot evaluate), or by the
  run's next poll (its status by the health hook, its cohort by the peer hook).
- **Transient** (`TRANSIENT`): rows waiting for the next commit (it writes them to the
  tables before the state) and what one poll or process learnt.

Adding a field to `RunState`: one line in `FIELDS` (or `DERIVED`, `TRANSIENT`) and a
row in the docs' table; a field added to `FIELDS` reads as its default from an older
snapshot of the same version. Versions: 1 is the whole `RunState` by field name
(before this module; its header has no `snapshot`), migrated by dropping the derived
fields; 2 is `FIELDS`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rlstream.errors import CheckpointError
from rlstream.health.figures import RECENT_FIGURES
from rlstream.pipeline.state import RunState, _slope

VERSION = 2
"""Bump when a field's meaning changes (adding one to `FIELDS` does not need it)."""

FIELDS: tuple[str, ...] = (
    "run_id",
    "run_url",
    "seq",
    "format",
    "trainer",
    "config",
    "created_at",
    "finished",
    "run_json",
    "cursors",
    "names_low",
    "names_below",
    "names_window",
    "transcripts_mark",
    "step_files",
    "step_low",
    "step_below",
    "polls",
    "pending",
    "reported",
    "read_at",
    "part_steps",
    "final_through",
    "max_reported_step",
    "last_activity",
    "last_change",
    "counters",
    "noted",
    "health",
    "headline",
    "health_sig",
    "peer_window",
    "peer_judged",
    "probe_panel",
)
"""The fields a resume state holds, in the order written (docs/runtime.md)."""

DERIVED = frozenset({"status", "firing", "findings", "cohort", "parts", "repeated_parts", "spread"})
"""Fields recomputed on restore or by the next poll, never written."""

TRANSIENT = frozenset({"out", "out_quarantine", "listed", "check", "durable_seq", "memo"})
"""Fields a resume state does not hold: rows waiting for the next commit, and what one
poll or process learnt (`durable_seq` is the `seq` loaded)."""

HEADLINE_DERIVED = frozenset(
    {
        "reward_trend",
        "_not_evaluable",
        "_judged",
        "_missing",
        "recent_steps",
        *RECENT_FIGURES,
    }
)
"""Headline keys recomputed: the trend from `_recent_rewards_all`, `_not_evaluable` from
`_figures` (on restore); the judgement and the recent figures by the health hook."""


class SnapshotError(CheckpointError):
    """A snapshot's fields are not those of a version this rlstream reads."""


def snapshot(state: RunState) -> dict[str, Any]:
    """The fields of `state` a resume state holds (values as in memory)."""
    body = {name: getattr(state, name) for name in FIELDS}
    body["headline"] = {k: v for k, v in state.headline.items() if k not in HEADLINE_DERIVED}
    return body


def restore(body: dict[str, Any], version: int) -> RunState:
    """The `RunState` of a snapshot of `version` (its derived fields recomputed).
    `SnapshotError` for a version or fields this rlstream does not read."""
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise SnapshotError(f"has snapshot version {version!r}; this rlstream reads 1-{VERSION}")
    body = dict(body)
    if version == 1:
        body = _from_v1(body)
    extra = sorted(set(body) - set(FIELDS))
    if extra:
        raise SnapshotError(f"is corrupt (fields this version does not know: {extra})")
    if not isinstance(body.get("run_id"), str) or not isinstance(body.get("seq"), int):
        raise SnapshotError("is corrupt (no run_id or seq)")
    try:
        state = RunState(**body)
        derive(state)
    except (TypeError, KeyError, AttributeError, ValueError) as e:
        raise SnapshotError(f"is corrupt ({type(e).__name__}: {e})") from e
    return state


def _from_v1(body: dict[str, Any]) -> dict[str, Any]:
    """Version 1 (the whole `RunState`): its derived fields dropped. An earlier one
    still holding rows of its last commit (an outbox) cannot be migrated."""
    if body.pop("outbox", None):
        raise SnapshotError(
            "was written by an earlier rlstream and holds rows of its last commit that may "
            "not be in the tables yet (an outbox): finish that commit with `rlstream "
            "analyze` of that version (its state is then written without them)"
        )
    body.pop("outbox_seq", None)
    for name in DERIVED:
        body.pop(name, None)
    if isinstance(body.get("headline"), dict):
        body["headline"] = {k: v for k, v in body["headline"].items() if k not in HEADLINE_DERIVED}
    return body


def derive(state: RunState) -> None:
    """Recompute what a snapshot does not hold (in place); the status and the cohort
    stay unset until the run's next poll sets them (`pipeline.verdicts`,
    `pipeline.cohorts`), as a poll does every time."""
    set_format(state, state.format)
    if state.health is not None:
        from rlstream.health import findings

        current = findings(state.health)
        state.findings = [asdict(f) for f in current]
        state.firing = [f.code for f in current if f.state == "firing"]
    h = state.headline
    # `_recent_rewards` (a state of an earlier version: the trained attempts' reward,
    # another figure than the headline's) is dropped, not mixed in.
    h.pop("_recent_rewards", None)
    if "_recent_rewards_all" in h:
        h["reward_trend"] = _slope(h["_recent_rewards_all"])
    if "_figures" in h:
        from rlstream.health.evaluable import not_evaluable

        h["_not_evaluable"] = not_evaluable(h["_figures"])
    state.durable_seq = state.seq


def set_format(state: RunState, fmt: str) -> None:
    """The run's format and what follows from it: the writers of one step's rows, those
    logging several lines per step, and whether a step spreads over records."""
    from rlstream.formats import get_format

    f = get_format(fmt)
    state.format = fmt
    state.parts = tuple(getattr(f, "parts", ()))
    state.repeated_parts = tuple(getattr(f, "repeated_parts", ()))
    state.spread = bool(getattr(f, "spread", False))
