"""A run's step series reduced to what a chart of it draws: a few points per bin of steps.

The report draws each step column of a run as a line thinned to the plot's pixel
columns (the lowest and highest value of each). A `RunPoints` keeps, instead of the
run's step rows, for each series and each bin of `width` consecutive steps (bin b
holds steps b * width to (b + 1) * width - 1; `width` a power of two): the first
point with the lowest value, the first with the highest, and the first and last
steps with no value (NaN). That is at most four points a bin, at most `MAX_BINS`
bins a run: the width doubles when the run's steps span more, so a run's points are
bounded whatever the run's length, and with width 1 its points are the series itself.

`reduce_points(steps, values, width)` computes those points from rows or from points
already reduced at a narrower width (reducing width-w points to 2w gives the points
the rows reduce to at 2w), so `fold(run_points, rows)` adds new step rows and coarsens
with no pass over the history: the maintenance pass folds the rows committed since
the last pass (rlstream.sinks.step_digest), the report the rows committed since then.

The series are the report's step columns (`SERIES`; values that are not finite are
missing, and on a log axis (`LOG_SERIES`) so are values <= 0), each key of a map
column (`MAP_SERIES`, a key absent at a step counts 0, with its total over the run),
and `step` itself, whose points are the first and last step of each bin. The run's
number of step rows and the last non-empty `rollout_metadata` map are kept too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_BINS = 256
"""Bins a run keeps: one to two of the report's 245 pixel columns each (docs/schema.md)."""

SERIES = (
    "reward_mean",
    "reward_mean_with_unusable",
    "reward_group_std_mean",
    "reported_reward_mean",
    "groups_no_variance",
    "groups_group_too_small",
    "mismatch_kl",
    "reported_mismatch_kl",
    "mismatch_ess",
    "mismatch_ess_seq",
    "reported_mismatch_ess",
    "entropy_estimate",
    "reported_entropy_estimate",
    "repetition",
    "distinct_completions",
    "completion_len_mean",
    "completion_len_p95",
    "truncated_frac",
    "lag_mean",
    "lag_p90",
    "reported_lag_mean",
)
LOG_SERIES = frozenset({"mismatch_kl", "reported_mismatch_kl"})
MAP_SERIES = ("discards",)
LAST_MAP = "rollout_metadata"
COLUMNS = ("step", *SERIES, *MAP_SERIES, LAST_MAP)
"""The steps columns a `RunPoints` is folded from."""

Points = tuple[np.ndarray, np.ndarray]


@dataclass
class RunPoints:
    """One run's series as points (see the module docstring). `series` maps (column,
    key) to points; `key` is "" but for a map column's keys. `last_step` is the
    highest step folded in (-1: none)."""

    width: int = 1
    last_step: int = -1
    rows: int = 0
    series: dict[tuple[str, str], Points] = field(default_factory=dict)
    totals: dict[tuple[str, str], float] = field(default_factory=dict)
    metadata: dict[str, float] | None = None
    metadata_step: int = -1

    def steps_range(self) -> tuple[int, int] | None:
        """(first, last) step folded in; None before the first row."""
        st = self.series.get(("step", ""))
        return None if st is None or not st[0].size else (int(st[0][0]), int(st[0][-1]))

    def points(self, name: str, key: str = "") -> Points:
        """The series' points; a series never seen is missing at every bin."""
        got = self.series.get((name, key))
        return got if got is not None else self._filled(np.nan)

    def keys(self, name: str) -> list[str]:
        """A map column's keys, largest total first (then by name)."""
        ks = [k for (n, k) in self.series if n == name]
        return sorted(ks, key=lambda k: (-self.totals.get((name, k), 0.0), k))

    def _filled(self, value: float) -> Points:
        """Points of a series with `value` at every step folded so far: the first and
        last step of each bin."""
        st = self.series.get(("step", ""))
        if st is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        return st[0], np.full(st[0].size, value)


def bin_width(first: int, last: int, max_bins: int = MAX_BINS) -> int:
    """The smallest power of two whose bins cover steps `first`-`last` in `max_bins`."""
    w = 1
    while last // w - first // w + 1 > max_bins:
        w *= 2
    return w


def reduce_points(steps: np.ndarray, values: np.ndarray, width: int) -> Points:
    """Per bin of `width` steps: the first lowest, the first highest, and the first
    and last missing point, in step order. `steps` increasing, `values` NaN where
    missing."""
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    n = steps.size
    if n == 0:
        return steps, values
    seg = steps // width
    new = np.ones(n, dtype=bool)
    new[1:] = seg[1:] != seg[:-1]
    sid = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    miss = np.isnan(values)
    low = np.where(miss, np.inf, values)
    high = np.where(miss, -np.inf, values)
    lows = np.minimum.reduceat(low, starts)[sid]
    highs = np.maximum.reduceat(high, starts)[sid]
    keep = np.zeros(n, dtype=bool)
    keep[_firsts(~miss & (low == lows), sid)] = True
    keep[_firsts(~miss & (high == highs), sid)] = True
    keep[_firsts(miss, sid)] = True
    keep[_firsts(miss[::-1], sid[::-1], n)] = True
    return steps[keep], values[keep]


def _firsts(mask: np.ndarray, sid: np.ndarray, reverse: int = 0) -> np.ndarray:
    """Index of the first True of `mask` in each segment; with `reverse` (the length),
    `mask` and `sid` are reversed and the indices returned are of the last True."""
    at = np.flatnonzero(mask)
    if not at.size:
        return at
    first = np.ones(at.size, dtype=bool)
    first[1:] = sid[at[1:]] != sid[at[:-1]]
    at = at[first]
    return reverse - 1 - at if reverse else at


def floats(col: pa.Array | pa.ChunkedArray, log: bool = False) -> np.ndarray:
    """A numeric column as float64, NaN where missing or not finite (or <= 0 if `log`)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return np.full(len(col), np.nan)
    v = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    bad = ~np.isfinite(v) | (v <= 0 if log else False)
    return np.where(bad, np.nan, v) if bad.any() else v


def map_columns(col: pa.Array | pa.ChunkedArray) -> dict[str, np.ndarray]:
    """A map column as one float series per key over its rows (0 where a row lacks
    the key, or its value is missing)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if not n or not pa.types.is_map(col.type):
        return {}
    offsets = col.offsets.to_numpy()
    keys = col.keys.slice(offsets[0], offsets[-1] - offsets[0])
    vals = np.nan_to_num(floats(col.items.slice(offsets[0], offsets[-1] - offsets[0])))
    row = np.repeat(np.arange(n), np.diff(offsets))
    enc = pc.dictionary_encode(keys)  # hashing in C: no Python string per entry
    code = enc.indices.to_numpy(zero_copy_only=False)
    out = {}
    for i, name in enumerate(enc.dictionary.to_pylist()):
        mask = code == i
        out[str(name)] = np.bincount(row[mask], weights=vals[mask], minlength=n)
    return out


def _last_map(col: pa.Array | pa.ChunkedArray) -> tuple[int, dict[str, float]] | None:
    """(row, map) of the last non-empty entry of a map column."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not len(col) or not pa.types.is_map(col.type):
        return None
    filled = (np.diff(col.offsets.to_numpy()) > 0) & col.is_valid().to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(filled)
    return (int(idx[-1]), dict(col[int(idx[-1])].as_py())) if idx.size else None


def fold(run_points: RunPoints | None, rows: pa.Table) -> RunPoints:
    """`run_points` with one run's step `rows` (in step order) added; rows at or below
    its `last_step` are already in it and are skipped."""
    d = run_points or RunPoints()
    steps = rows.column("step").combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64)
    new = steps > d.last_step
    if not new.any():
        return d
    if not new.all():
        rows, steps = rows.filter(pa.array(new)), steps[new]
    names = set(rows.column_names)
    fresh: dict[tuple[str, str], np.ndarray] = {("step", ""): steps.astype(np.float64)}
    for c in SERIES:
        if c in names:
            fresh[(c, "")] = floats(rows.column(c), c in LOG_SERIES)
    for c in MAP_SERIES:
        if c in names:
            fresh.update(((c, k), v) for k, v in map_columns(rows.column(c)).items())
    old = d.series
    first = int(steps[0]) if not old else int(old[("step", "")][0][0])
    width = bin_width(first, int(steps[-1]))
    series: dict[tuple[str, str], Points] = {}
    for name in {*old, *fresh}:
        zero = name[0] in MAP_SERIES
        a_s, a_v = old.get(name) or d._filled(0.0 if zero else np.nan)
        b_v = fresh.get(name)
        if b_v is None:
            b_v = np.full(steps.size, 0.0 if zero else np.nan)
        if zero:
            d.totals[name] = d.totals.get(name, 0.0) + float(b_v.sum())
        series[name] = reduce_points(
            np.concatenate([a_s, steps]), np.concatenate([a_v, b_v]), width
        )
    meta = _last_map(rows.column(LAST_MAP)) if LAST_MAP in names else None
    if meta is not None:
        d.metadata_step, d.metadata = int(steps[meta[0]]), meta[1]
    d.series, d.width = series, width
    d.rows += int(steps.size)
    d.last_step = int(steps[-1])
    return d


def fold_runs(by_run: dict[str, RunPoints], rows: pa.Table) -> dict[str, RunPoints]:
    """Fold step rows of any runs (a `run_id` column, any order) into `by_run`."""
    if not rows.num_rows:
        return by_run
    rows = rows.sort_by([("run_id", "ascending"), ("step", "ascending")])
    ids = rows.column("run_id").combine_chunks()
    enc = pc.dictionary_encode(ids)
    codes = enc.indices.to_numpy(zero_copy_only=False)
    cut = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts = np.concatenate([[0], cut]).tolist()
    ends = np.concatenate([cut, [rows.num_rows]]).tolist()
    names = enc.dictionary.to_pylist()
    for a, b in zip(starts, ends, strict=True):
        rid = names[codes[a]]
        by_run[rid] = fold(by_run.get(rid), rows.slice(a, b - a))
    return by_run
