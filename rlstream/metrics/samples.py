"""Kept samples and transcript flags of one step: a mergeable aggregate.

Contract
--------
``SampleAgg.from_attempts(attempts, k, panel, probes, high)`` takes one batch of
attempts (`Attempt`: ids, reward, trained, lengths, stop reason, policy version, the
scanners' flags, and the bounded excerpts of what its calls were sent and returned) and
keeps, per step:

- ``top`` / ``bottom``: the `k` trained attempts of highest / lowest reward (ties by
  attempt id), among attempts whose reward is known;
- ``flagged``: the `k` flagged attempts of highest reward (unknown reward last, ties by
  attempt id);
- ``probes``: one attempt per probe task (the one with text first, then the smallest
  attempt id) for the tasks of `panel`, and for the `probes` tasks of smallest
  `task_hash` not in it (what a run's probe panel is chosen from, see
  `rlstream.pipeline.samples`);
- counts: attempts scanned (with text), trained ones, trained ones of reward at least
  `high` ("high-reward"), and per scanner how many of each it flagged.

``merge`` takes the union and cuts it again with the same orders: a candidate list is
the exact top-k of a total order, and an attempt seen twice (two readers of the same
attempt) is merged field by field (a known value wins over a missing one), so ``merge``
is exactly associative and commutative and the kept sets are those of one pass over
the whole step, whatever the shards. Sizes are bounded by `k` and `probes` per step,
whatever the step's size. ``finalize`` gives the step's flag shares (``columns()``).

`excerpt(text, limit)` is the bounded head-and-tail excerpt every sample carries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Self

EXCERPT_BYTES = 8 << 10
"""Bytes kept of what a sample's calls were sent, and as many of what they returned:
at most 16 KiB of text a sample."""


def excerpt(text: str, limit: int = EXCERPT_BYTES) -> str:
    """`text` if its UTF-8 is at most `limit` bytes, else its head and tail (each
    about half of `limit`) around a line saying how many bytes were left out."""
    data = text.encode()
    if len(data) <= limit:
        return text
    half = max(0, (limit - 64) // 2)
    head = data[:half].decode(errors="ignore")
    tail = data[len(data) - half :].decode(errors="ignore")
    cut = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n[... {cut} bytes left out ...]\n{tail}"


def task_hash(task: str) -> int:
    """A stable 64-bit hash of a task id (the probe panel's order)."""
    return int.from_bytes(hashlib.blake2b(task.encode(), digest_size=8).digest(), "little")


_FIELDS = (
    "attempt",
    "task",
    "group",
    "reward",
    "trained",
    "length",
    "stop_reason",
    "policy_version",
    "calls",
    "flags",
    "sent",
    "returned",
    "sent_bytes",
    "returned_bytes",
    "file",
)


def attempt(**kw: Any) -> dict[str, Any]:
    """One attempt as the aggregate keeps it (a plain dict: its fields `_FIELDS`)."""
    extra = set(kw) - set(_FIELDS)
    if extra:
        raise TypeError(f"unknown attempt fields {sorted(extra)}")
    return {f: kw.get(f) for f in _FIELDS}


def _join(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """One attempt told by two readers: a known value wins (the lists of flags join)."""
    out = {f: a[f] if a[f] is not None else b[f] for f in _FIELDS}
    if a["flags"] is not None and b["flags"] is not None:
        out["flags"] = sorted({*a["flags"], *b["flags"]})
    return out


def _top_key(c: dict[str, Any]) -> tuple[Any, ...]:
    return (-c["reward"], c["attempt"])


def _bottom_key(c: dict[str, Any]) -> tuple[Any, ...]:
    return (c["reward"], c["attempt"])


def _flag_key(c: dict[str, Any]) -> tuple[Any, ...]:
    r = c["reward"]
    return (r is None, -(r or 0.0), c["attempt"])


def _probe_key(c: dict[str, Any]) -> tuple[Any, ...]:
    return (c["returned"] is None, c["attempt"])


def _cut(cands: list[dict[str, Any]], key: Any, k: int) -> list[dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for c in cands:
        prev = by_id.get(c["attempt"])
        by_id[c["attempt"]] = c if prev is None else _join(prev, c)
    return sorted(by_id.values(), key=key)[:k]


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for name, n in b.items():
        out[name] = out.get(name, 0) + n
    return out


@dataclass(slots=True)
class SampleAgg:
    """Bounded kept attempts and flag counts of one step."""

    k: int = 4
    probes_n: int = 4
    high: float = 0.5
    panel: list[str] = field(default_factory=list)
    top: list[dict[str, Any]] = field(default_factory=list)
    bottom: list[dict[str, Any]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    n_text: int = 0
    n_trained: int = 0
    n_high: int = 0
    flag_trained: dict[str, int] = field(default_factory=dict)
    flag_high: dict[str, int] = field(default_factory=dict)
    any_trained: int = 0
    any_high: int = 0

    @classmethod
    def empty(cls) -> Self:
        return cls()

    @classmethod
    def from_attempts(
        cls,
        attempts: list[dict[str, Any]],
        k: int = 4,
        panel: tuple[str, ...] | list[str] = (),
        probes: int = 4,
        high: float = 0.5,
    ) -> Self:
        agg = cls(k=k, probes_n=probes, high=high, panel=sorted(set(panel)))
        ranked = [a for a in attempts if a["trained"] and a["reward"] is not None]
        agg.top = _cut(ranked, _top_key, k)
        agg.bottom = _cut(ranked, _bottom_key, k)
        agg.flagged = _cut([a for a in attempts if a["flags"]], _flag_key, k)
        agg.probes = _probe_cut({}, attempts, agg.panel, probes)
        for a in attempts:
            if a["returned"] is None or a["flags"] is None:
                continue  # no text: not scanned
            agg.n_text += 1
            if not a["trained"]:
                continue
            high_r = a["reward"] is not None and a["reward"] >= high
            agg.n_trained += 1
            agg.n_high += high_r
            agg.any_trained += bool(a["flags"])
            agg.any_high += bool(a["flags"]) and high_r
            for name in a["flags"]:
                agg.flag_trained[name] = agg.flag_trained.get(name, 0) + 1
                if high_r:
                    agg.flag_high[name] = agg.flag_high.get(name, 0) + 1
        return agg

    def merge(self, other: Self) -> Self:
        k, probes = max(self.k, other.k), max(self.probes_n, other.probes_n)
        panel = sorted({*self.panel, *other.panel})
        return type(self)(
            k=k,
            probes_n=probes,
            high=self.high,
            panel=panel,
            top=_cut(self.top + other.top, _top_key, k),
            bottom=_cut(self.bottom + other.bottom, _bottom_key, k),
            flagged=_cut(self.flagged + other.flagged, _flag_key, k),
            probes=_probe_cut(self.probes, list(other.probes.values()), panel, probes),
            n_text=self.n_text + other.n_text,
            n_trained=self.n_trained + other.n_trained,
            n_high=self.n_high + other.n_high,
            flag_trained=_add(self.flag_trained, other.flag_trained),
            flag_high=_add(self.flag_high, other.flag_high),
            any_trained=self.any_trained + other.any_trained,
            any_high=self.any_high + other.any_high,
        )

    def kept(self, panel: list[str] | None = None) -> list[tuple[dict[str, Any], list[str]]]:
        """Each kept attempt once, with why it was kept (top, bottom, flagged, probe),
        in that order of reasons; probes only for tasks of `panel` (default: the
        aggregate's own)."""
        out: dict[str, tuple[dict[str, Any], list[str]]] = {}
        panel = set(self.panel if panel is None else panel)
        lists = (
            ("top", self.top),
            ("bottom", self.bottom),
            ("flagged", self.flagged),
            ("probe", [c for t, c in sorted(self.probes.items()) if t in panel]),
        )
        for why, cands in lists:
            for c in cands:
                prev = out.get(c["attempt"])
                if prev is None:
                    out[c["attempt"]] = (c, [why])
                else:
                    out[c["attempt"]] = (_join(prev[0], c), [*prev[1], why])
        return list(out.values())

    def early_tasks(self) -> list[str]:
        """The `probes_n` tasks of smallest `task_hash` this step kept (panel aside)."""
        inside = set(self.panel)
        tasks = sorted((t for t in self.probes if t not in inside), key=lambda t: (task_hash(t), t))
        return tasks[: self.probes_n]

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """finalize() keys in order, with the Python type of a non-None value."""
        return (
            ("samples_scanned", int),
            ("flagged_frac", float),
            ("flagged_high_frac", float),
            ("flagged_high_n", int),
            ("flagged_attempts", list),
            ("flag_share", dict),
            ("flag_share_high", dict),
        )

    def finalize(self) -> dict[str, Any]:
        nt, nh = self.n_trained, self.n_high
        return {
            "samples_scanned": self.n_text,
            "flagged_frac": self.any_trained / nt if nt else None,
            "flagged_high_frac": self.any_high / nh if nh else None,
            "flagged_high_n": self.any_high,
            "flagged_attempts": [c["attempt"] for c in self.flagged],
            "flag_share": {s: n / nt for s, n in sorted(self.flag_trained.items())} if nt else None,
            "flag_share_high": (
                {s: self.flag_high.get(s, 0) / nh for s in sorted(self.flag_trained)}
                if nh
                else None
            ),
        }


def _probe_cut(
    kept: dict[str, dict[str, Any]],
    new: list[dict[str, Any]],
    panel: list[str],
    probes: int,
) -> dict[str, dict[str, Any]]:
    """One attempt per task (`_probe_key` first) for the panel's tasks and the
    `probes` other tasks of smallest hash."""
    by_task = dict(kept)
    for c in new:
        task = c["task"]
        if not task:
            continue
        prev = by_task.get(task)
        if prev is None or _probe_key(c) < _probe_key(prev):
            by_task[task] = c if prev is None or prev["attempt"] != c["attempt"] else _join(c, prev)
        elif prev["attempt"] == c["attempt"]:
            by_task[task] = _join(prev, c)
    inside = set(panel)
    rest = sorted((t for t in by_task if t not in inside), key=lambda t: (task_hash(t), t))
    keep = inside | set(rest[:probes])
    return {t: c for t, c in by_task.items() if t in keep}
