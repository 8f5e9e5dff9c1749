"""Which points of a long series a chart draws, and their coordinates as text.

`column_extremes(steps, values, columns, x_range)` downsamples a series to what a plot
`columns` pixel columns wide can show (min-max per column): the plot's step range
(`x_range`, by default the series' first and last step) is cut into `columns` equal
columns, its pixel columns, by step, so a hole in the steps stays a hole, and
each column keeps its lowest and its highest finite value (in step order); a column
with no value at all keeps its first point, missing, which breaks the line there. A
missing value narrower than a column does not break the line (it could not be seen:
the chart shades the first series' missing steps instead). A spike is the highest
(or lowest) value of its column, so it is always drawn. A series of at most
`2 * columns` points is kept whole; a longer one keeps at most `2 * columns` points
(two per column with a value, one per empty column), whatever its length. All of it
is numpy.

`thin_together(series, columns, x_range)` applies it to a chart's series, those over
the same steps in one pass.

`bin_drawn(steps, values, resolution)` drops the missing points of a run's downsampled series
(rlstream.metrics.downsample) whose bin has a value: only a bin with none breaks a line.

`axis_range(lo, hi, log_y, y_min, y_max, min_span)` is a chart's y axis: the values'
range padded by 6 %, never past what the quantity can be (`y_min`/`y_max`, linear
axes), and at least `min_span` high (in decades on a log axis), so that flat noise
(a KL between 2.0e-4 and 2.5e-4, an ESS between 0.93 and 1) is drawn flat, not as a
crash.

`ticks(lo, hi, n)` and `fmt_tick(v)` are an axis' tick values and labels;
`step_runs(steps, within)` cuts sorted steps into (first, last) runs, steps at most
`within` apart in one run (one pixel column of a long chart).

`coords_text(xs, ys)` writes points as "x,y x,y ...", each number exactly as Python's
`"%.1f"` writes it (the same bytes), with numpy: the text of a series costs no Python
per point. It returns the text and where each point's text ends, so that the runs
of a series split by gaps are slices of one text.
"""

from __future__ import annotations

import math

import numpy as np

_TIE = 1e-6
"""How close to a half-tenth a value's tenths may be before numpy's rounding of the
product is not trusted to equal "%.1f" (which rounds the exact binary value)."""


def column_extremes(
    steps: np.ndarray, values: np.ndarray, columns: int, x_range: tuple[int, int] | None = None
) -> np.ndarray:
    """Indices of the points to draw, increasing (see the module docstring).
    `steps` are in step order; `values` are floats, NaN where a value is missing."""
    rows = np.asarray(values, dtype=np.float64)[None, :]
    return columns_extremes(steps, rows, columns, x_range)[0]


def columns_extremes(
    steps: np.ndarray, values: np.ndarray, columns: int, x_range: tuple[int, int] | None = None
) -> list[np.ndarray]:
    """`column_extremes` of each row of `values` (series over the same `steps`), for
    all rows at once. `x_range`: the steps at the plot's left and right edges (the
    first and last step if None), so that columns are the plot's pixel columns."""
    rows, n = values.shape
    if n <= 2 * columns:
        return [np.arange(n)] * rows
    steps = np.asarray(steps, dtype=np.int64)
    x0, x1 = (int(steps[0]), int(steps[-1])) if x_range is None else x_range
    if x1 > x0 and bool((np.diff(steps) >= 0).all()):
        # Column c holds the steps from x0 + c * (x1 - x0) / columns on: its first
        # point by binary search, not a pass over every step.
        bounds = x0 + np.arange(1, columns) * ((x1 - x0) / columns)
        inner = np.searchsorted(steps, bounds, side="left")
    else:  # steps out of order: columns of equal counts of points
        inner = np.arange(1, columns) * n // columns
    edges = np.concatenate([[0], inner, [n]])
    counts = np.diff(edges)
    starts, counts = edges[:-1][counts > 0], counts[counts > 0]
    width = int(counts.max())
    # One row of `width` cells per column (padded with +inf): the extremes and their
    # first position are then argmin/argmax along the last axis.
    cell = np.arange(n) + np.repeat(np.arange(starts.size) * width - starts, counts)
    low = np.full((rows, starts.size * width), np.inf)
    low[:, cell] = np.where(np.isnan(values), np.inf, values)
    low = low.reshape(rows, starts.size, width)
    lo = low.argmin(axis=2)
    hi = np.where(np.isinf(low), -np.inf, low).argmax(axis=2)
    empty = np.isinf(np.take_along_axis(low, lo[..., None], axis=2)[..., 0])
    # A column with no value keeps its first point (a gap); others their extremes.
    a = starts + np.where(empty, 0, np.minimum(lo, hi))
    b = starts + np.where(empty, 0, np.maximum(lo, hi))
    pairs = np.stack([a, b], axis=2).reshape(rows, -1)  # increasing along each row
    new = np.ones(pairs.shape, dtype=bool)
    new[:, 1:] = pairs[:, 1:] != pairs[:, :-1]
    return [pairs[r][new[r]] for r in range(rows)]


def thin_together(
    full: list[tuple[np.ndarray, np.ndarray]], columns: int, x_range: tuple[int, int]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each series thinned to the plot's pixel columns (`x_range`: the steps at its
    edges); series over the same steps (a chart's usually are) together, in one pass
    of numpy."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(full)
    for i, (st, _) in enumerate(full):
        if out[i] is not None:
            continue
        same = [j for j in range(i, len(full)) if out[j] is None and _same(full[j][0], st)]
        rows = np.vstack([full[j][1] for j in same]) if st.size else None
        keeps = (
            columns_extremes(st, rows, columns, x_range) if rows is not None else [st] * len(same)
        )
        for j, keep in zip(same, keeps, strict=True):
            out[j] = (st[keep], full[j][1][keep]) if st.size else full[j]
    return [p for p in out if p is not None]


def bin_drawn(
    steps: np.ndarray, vals: np.ndarray, resolution: int
) -> tuple[np.ndarray, np.ndarray]:
    """The points to draw of a series whose points stand for bins of `resolution`
    steps: a missing point breaks the line only where its bin has no value (as a
    missing step narrower than a pixel column does not break a thinned line)."""
    miss = np.isnan(vals)
    if resolution <= 1 or not miss.any():
        return steps, vals
    bins = steps // resolution  # increasing: membership by binary search
    have = bins[~miss]
    at = np.minimum(np.searchsorted(have, bins), max(have.size - 1, 0))
    has_value = have[at] == bins if have.size else np.zeros(bins.size, dtype=bool)
    keep = ~(miss & has_value)
    return steps[keep], vals[keep]


def thin_points(
    all_steps: np.ndarray, vals: np.ndarray, columns: int
) -> tuple[np.ndarray, np.ndarray]:
    """`column_extremes` of one series, as its (steps, values)."""
    if len(all_steps) <= 2 * columns:
        return all_steps, vals
    keep = column_extremes(all_steps, vals, columns)
    return all_steps[keep], vals[keep]


def values_list(vals: np.ndarray) -> list[float | None]:
    """Floats as a list, None where NaN."""
    return [None if v != v else v for v in vals.tolist()]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (a.shape == b.shape and bool((a == b).all()))


def _tenths(v: np.ndarray) -> np.ndarray:
    """`v` rounded to tenths as "%.1f" does, as floats of tenths (sign kept on -0)."""
    t = v * 10.0
    r = np.rint(t)
    near = np.flatnonzero(np.abs(t - np.floor(t) - 0.5) < _TIE)
    for i in near.tolist():  # a value within rounding error of a tie: ask Python
        r[i] = float(f"{v[i]:.1f}".replace(".", ""))
    return r


def coords_text(xs: np.ndarray, ys: np.ndarray) -> tuple[str, np.ndarray]:
    """("x0,y0 x1,y1 ... xn,yn ", end of each point's text including its space).
    Equal to `"".join("%.1f,%.1f " % p for p in zip(xs, ys))`; xs and ys finite."""
    n = len(xs)
    if not n:
        return "", np.zeros(0, dtype=np.int64)
    v = np.empty(2 * n, dtype=np.float64)
    v[0::2], v[1::2] = xs, ys
    if not np.isfinite(v).all():
        pairs = zip(v[0::2].tolist(), v[1::2].tolist(), strict=True)
        parts = [f"{x:.1f},{y:.1f} " for x, y in pairs]
        return "".join(parts), np.cumsum([len(p) for p in parts])
    r = _tenths(v)
    neg = np.signbit(r)
    a = np.abs(r).astype(np.int64)
    whole, tenth = a // 10, a % 10
    width = len(str(int(whole.max())))
    # One row per number: sign, `width` digits, ".", the tenth, the separator.
    chars = np.empty((2 * n, width + 4), dtype=np.uint8)
    keep = np.ones(chars.shape, dtype=bool)
    chars[:, 0] = ord("-")
    keep[:, 0] = neg
    for j in range(width):
        place = 10 ** (width - 1 - j)
        chars[:, 1 + j] = ord("0") + (whole // place) % 10
        if j < width - 1:  # leading zeros are dropped, the units digit never
            keep[:, 1 + j] = whole >= place
    chars[:, width + 1] = ord(".")
    chars[:, width + 2] = ord("0") + tenth
    chars[0::2, width + 3] = ord(",")
    chars[1::2, width + 3] = ord(" ")
    text = chars[keep].tobytes().decode("ascii")
    ends = np.cumsum(keep.sum(axis=1).reshape(n, 2).sum(axis=1))
    return text, ends


def axis_range(
    lo: float,
    hi: float,
    log_y: bool = False,
    y_min: float | None = None,
    y_max: float | None = None,
    min_span: float | None = None,
) -> tuple[float, float]:
    """(bottom, top) of the y axis for values from `lo` to `hi` (log10 of them on a
    log axis); see the module docstring."""
    y0, y1 = lo, hi
    if min_span is not None and y1 - y0 < min_span:
        mid = (y0 + y1) / 2
        y0, y1 = mid - min_span / 2, mid + min_span / 2
        if not log_y and y_max is not None and y1 > y_max >= hi:  # keep it in bounds
            y0, y1 = y0 - (y1 - y_max), y_max
        if not log_y and y_min is not None and y0 < y_min <= lo:
            y0, y1 = y_min, y1 + (y_min - y0)
    elif y1 - y0 < 1e-12:
        pad = abs(y0) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    pad = (y1 - y0) * 0.06
    y0, y1 = y0 - pad, y1 + pad
    if not log_y:  # padding never takes the axis past what the quantity can be
        if y_min is not None:
            y0 = max(y0, min(y_min, lo))
        if y_max is not None:
            y1 = min(y1, max(y_max, hi))
        if y1 - y0 < 1e-12:
            y1 = y0 + 1.0
    return y0, y1


def ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """About `n` round tick values from `lo` to `hi`."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def fmt_tick(v: float) -> str:
    """A tick label: 3 significant digits, or scientific for very large or small values."""
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        return f"{v:.1e}"
    return f"{v:.3g}"


def step_runs(steps: np.ndarray, within: int = 1) -> list[tuple[int, int]]:
    """(first, last) of each run of `steps` (sorted, distinct) whose neighbours are at
    most `within` apart."""
    if not steps.size:
        return []
    steps = np.unique(steps)
    cut = np.flatnonzero(np.diff(steps) > max(within, 1))
    first = np.concatenate([[0], cut + 1])
    last = np.concatenate([cut, [steps.size - 1]])
    return list(zip(steps[first].tolist(), steps[last].tolist(), strict=True))
