"""Inline SVG line charts for the HTML report: no JavaScript, no network.

`line_chart(chart)` draws series of (step, value) points, with gaps where a value is
missing (the first series' gaps shaded and named in the legend), thinned to the
plot's pixel columns when longer than it is wide (`points.column_extremes`: the
lowest and highest value of each 2-pixel column; a run's downsampled series, `resolution` > 1,
is about two points a column already and is drawn as it is; the text of a chart's
points is written at once, with numpy), axes with a few ticks that stay within the
quantity's bounds (`Chart.y_min`/`y_max`), a legend, vertical markers at
findings' `since_step` carrying the finding's message as a tooltip, and bars along
the top edge at flagged steps (`Chart.flags`). Every text that
may come from run data (series labels, marker codes and messages) is escaped here."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

import numpy as np
import pyarrow as pa

from rlstream.fleet.points import (
    axis_range,
    bin_drawn,
    column_extremes,
    coords_text,
    fmt_tick,
    step_runs,
    thin_points,
    thin_together,
    ticks,
    values_list,
)

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
GAP_COLOR = "#e8e8e8"
THIN_PIXELS = 2
"""Width in pixels of the columns a long series is thinned to (lowest and highest
point of each): at most one point per pixel is drawn, whatever the series' length."""
SEVERITY_COLOR = {"critical": "#c0392b", "warning": "#d68910", "info": "#2e86c1"}
FLAG_COLOR = "#c0392b"


@dataclass(frozen=True)
class Series:
    """A line: `steps` and `values` are lists or numpy arrays (NaN or None: no value)."""

    label: str
    steps: Sequence[int] | np.ndarray
    values: Sequence[float | None] | np.ndarray
    dashed: bool = False
    resolution: int = 1
    """Steps a point stands for: the bin width of a run's points (metrics.downsample),
    so missing points that far apart are one gap."""


def as_floats(values: Any) -> np.ndarray:
    """`values` (an Arrow array, a numpy array or a list) as float64, NaN where a value
    is missing, not finite or not a number."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        t = values.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)):
            return np.full(len(values), np.nan)
        out = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    elif isinstance(values, np.ndarray) and values.dtype == np.float64:
        out = values
    elif isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
        out = values.astype(np.float64)
    else:
        try:
            out = pa.array(values, type=pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a value that is not a number
            out = np.array([v if _finite(v) else np.nan for v in values], dtype=np.float64)
    if not np.isinf(out).any():  # the usual case: no copy
        return out
    return np.where(np.isfinite(out), out, np.nan)


def _points(ser: Series) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(ser.steps, dtype=np.int64), as_floats(ser.values)


@dataclass(frozen=True)
class Marker:
    step: int
    code: str
    severity: str
    message: str
    number: int = 0


@dataclass(frozen=True)
class Chart:
    title: str
    series: list[Series]
    markers: list[Marker] = field(default_factory=list)
    log_y: bool = False
    y_min: float | None = None
    """Lowest value the quantity can take (0 for shares, counts, lags): the axis never
    extends below it unless a value does."""
    y_max: float | None = None
    """Highest value the quantity can take (1 for shares)."""
    min_span: float | None = None
    """Least height of the axis (decades on a log axis; `points.axis_range`)."""
    gap_note: str = "no value at these steps"
    """Legend text for the shaded steps where the first series has no value."""
    band: Band | None = None
    """The run's cohort band of the chart's main figure, drawn under the series."""
    steps: tuple[int, int] | None = None
    """The run's first and last step (the x axis; the series' own extent if None)."""
    flags: list[int] = field(default_factory=list)
    """Steps marked by a bar along the plot's top edge, `flag_note` their legend (the
    reward chart: steps where transcript scanners flag the high-reward attempts)."""
    flag_note: str = ""


@dataclass(frozen=True)
class Band:
    """A shaded band (a cohort's median ± 2 robust sd per step) and its legend label."""

    label: str
    steps: list[int]
    low: list[float | None]
    high: list[float | None]


def _finite(v: float | None) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def gap_bands(chart: Chart, within: int = 1) -> list[tuple[int, int]]:
    """Runs of consecutive steps (first, last) where the chart's first series has no
    value, when it has one elsewhere: a gap that must be seen, not a missing series.
    Runs at most `within` steps apart are one (one pixel column of a thinned chart)."""
    if not chart.series:
        return []
    steps, vals = _points(chart.series[0])
    within = max(within, chart.series[0].resolution)
    ok = ~np.isnan(vals)
    if chart.log_y:
        ok &= np.where(ok, vals, 0.0) > 0
    return step_runs(steps[~ok], within) if ok.any() else []


def thin(ser: Series, columns: int) -> Series:
    """The points of `ser` a plot `columns` pixel columns wide draws
    (`points.column_extremes`): at most 3 * `columns`, whatever its length."""
    n = len(ser.steps)
    if n <= 2 * columns and isinstance(ser.steps, list) and isinstance(ser.values, list):
        return ser
    steps, vals = thin_points(*_points(ser), columns)
    return Series(ser.label, steps.tolist(), values_list(vals), ser.dashed)


BAND_COLOR = "#d6e4f0"


def _band_points(
    band: Band, lo_s: int, hi_s: int, columns: int, chart: Chart, x_range: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The band's (steps, low, high) over the run's steps `lo_s`-`hi_s`, NaN where an
    edge has no value (or, on a log axis, the high edge is not > 0), thinned as a
    series is (each pixel column's lowest low and highest high). Edges are clipped to
    `chart.y_min`/`y_max` (a median - 2 robust sd below 0 does not widen the axis); on
    a log axis a low edge <= 0 is 0, drawn along the axis' bottom."""
    steps = np.asarray(band.steps, dtype=np.int64)
    low, high = as_floats(band.low), as_floats(band.high)
    inside = (steps >= lo_s) & (steps <= hi_s)
    steps, low, high = steps[inside], low[inside], high[inside]
    bad = np.isnan(low) | np.isnan(high)
    if chart.log_y:
        bad |= ~(np.where(bad, 1.0, high) > 0)
        low = np.maximum(low, 0.0)
    else:
        for bound, clip in ((chart.y_min, np.maximum), (chart.y_max, np.minimum)):
            if bound is not None:
                low, high = clip(low, bound), clip(high, bound)
    low, high = np.where(bad, np.nan, low), np.where(bad, np.nan, high)
    if len(steps) > 2 * columns:
        keep = np.union1d(
            column_extremes(steps, low, columns, x_range),
            column_extremes(steps, high, columns, x_range),
        )
        steps, low, high = steps[keep], low[keep], high[keep]
    return steps, low, high


def _band_svg(label: str, gx: np.ndarray, g_low: np.ndarray, g_high: np.ndarray) -> list[str]:
    """One filled polygon per stretch of at least two points where both edges have a
    value (`gx`, `g_low`, `g_high`: pixel positions, NaN where there is none)."""
    ok = ~np.isnan(g_low)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(np.int8), [0]])))
    out = []
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        if b - a < 2:
            continue
        xs = np.concatenate([gx[a:b], gx[a:b][::-1]])
        text, _ = coords_text(xs, np.concatenate([g_high[a:b], g_low[a:b][::-1]]))
        out.append(
            f'<polygon points="{text[:-1]}" fill="{BAND_COLOR}" '
            f'class="band"><title>{escape(label)}</title></polygon>'
        )
    return out


def line_chart(chart: Chart, width: int = 560, height: int = 220) -> str:
    """The chart as an `<svg>` element (a string of escaped markup)."""
    left, right, top, bottom = 58, 12, 26, 58
    pw, ph = width - left - right, height - top - bottom
    columns = pw // THIN_PIXELS
    full = [_points(s) for s in chart.series]
    xs = [x for x, _ in full if x.size]
    x0 = x1 = lo_s = hi_s = 0
    if xs:
        x0, x1 = min(int(x.min()) for x in xs), max(int(x.max()) for x in xs)
        if chart.steps is not None:
            x0, x1 = chart.steps
        lo_s, hi_s = x0, x1
        for m in chart.markers:
            x0, x1 = min(x0, m.step), max(x1, m.step)
        if x1 == x0:
            x1 = x0 + 1
    # On the full series (thinning keeps a gap, not its extent); when thinned, gaps
    # within one pixel column of each other are one band.
    thinned = bool(full) and len(full[0][0]) > 2 * columns
    bands = gap_bands(chart, -(-(x1 - x0) // columns) if thinned else 1)
    if chart.log_y:  # what a log axis cannot draw is missing, also for thinning
        full = [(st, np.where(np.nan_to_num(v) > 0, v, np.nan)) for st, v in full]
    full = [
        bin_drawn(st, v, ser.resolution) for (st, v), ser in zip(full, chart.series, strict=True)
    ]
    # A run's points (resolution > 1) are already about two per pixel column.
    raw = [i for i, ser in enumerate(chart.series) if ser.resolution <= 1]
    pts = list(full)
    for i, p in zip(raw, thin_together([full[i] for i in raw], columns, (x0, x1)), strict=True):
        pts[i] = p
    drawn = [
        ~np.isnan(v) & (np.where(np.isnan(v), 0.0, v) > 0 if chart.log_y else True) for _, v in pts
    ]
    ys = np.concatenate([v[ok] for (_, v), ok in zip(pts, drawn, strict=True)] or [np.empty(0)])
    band, band_label = None, chart.band.label if chart.band is not None else ""
    if chart.band is not None and xs:
        # The band is drawn over the run's own steps only, and widens the axis to fit.
        band = _band_points(chart.band, lo_s, hi_s, columns, chart, (x0, x1))
        edges = np.concatenate([band[1], band[2]])
        edges = edges[~np.isnan(edges)]
        ys = np.concatenate([ys, edges[edges > 0] if chart.log_y else edges])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" class="chart">',
        f"<title>{escape(chart.title)}</title>",
        f'<text x="{left}" y="15" class="ct">{escape(chart.title)}</text>',
    ]
    if not xs or not ys.size:
        parts.append(
            f'<text x="{left + 10}" y="{top + ph / 2}" class="empty">no data for this figure</text>'
        )
        parts.append("</svg>")
        return "".join(parts)
    tf = (lambda v: math.log10(v)) if chart.log_y else (lambda v: v)
    lim = (chart.y_min, chart.y_max, chart.min_span)
    y0, y1 = axis_range(tf(float(ys.min())), tf(float(ys.max())), chart.log_y, *lim)

    def px(s: float) -> float:
        return left + (s - x0) / (x1 - x0) * pw

    def py(v: float) -> float:
        return top + ph - (tf(v) - y0) / (y1 - y0) * ph

    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="plot"/>')
    for a, b in bands:
        xa, xb = max(px(a - 0.5), left), min(px(b + 0.5), left + pw)
        parts.append(
            f'<rect x="{xa:.1f}" y="{top}" width="{max(xb - xa, 1.0):.1f}" height="{ph}" '
            f'class="gap" fill="{GAP_COLOR}"><title>steps {a}-{b}: '
            f"{escape(chart.gap_note)}</title></rect>"
        )
    if band is not None:
        bx = left + (band[0] - x0) / (x1 - x0) * pw

        def band_y(v: np.ndarray) -> np.ndarray:
            if chart.log_y:  # an edge at 0 runs along the axis' bottom
                tv = np.log10(np.where(np.isnan(v) | (v <= 0), 1.0, v))
                tv = np.where(v <= 0, y0, tv)
            else:
                tv = v
            return np.where(np.isnan(v), np.nan, top + ph - (tv - y0) / (y1 - y0) * ph)

        parts.extend(_band_svg(band_label, bx, band_y(band[1]), band_y(band[2])))
    yt = [10**t for t in ticks(y0, y1)] if chart.log_y else ticks(y0, y1)
    for v in yt:
        y = py(v)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="yt">{escape(fmt_tick(v))}</text>'
        )
    for s in ticks(x0, x1, 5):
        if s != int(s):
            continue
        x = px(s)
        parts.append(f'<text x="{x:.1f}" y="{top + ph + 14}" class="xt">{int(s)}</text>')
    parts.append(f'<text x="{left - 4}" y="{top + ph + 14}" class="xl">step</text>')
    lx, ly = float(left), float(top + ph + 26)

    def legend(swatch: Callable[[float, float], str], text: str) -> None:
        """One legend entry: `swatch(x, y)` then `text`, wrapped to the chart's width."""
        nonlocal lx, ly
        if lx + 22 + 6.5 * len(text) > width and lx > left:
            lx, ly = left, ly + 13
        parts.append(
            swatch(lx, ly) + f'<text x="{lx + 18:.0f}" y="{ly}" class="lg">{escape(text)}</text>'
        )
        lx += 30 + 6.5 * len(text)

    # Pixel positions with numpy, in the same float operations as px and py, and the
    # text of every drawn point of the chart at once; a run between gaps is a slice.
    gxs, gys = [], []
    for (st, v), ok in zip(pts, drawn, strict=True):
        gxs.append(left + (st - x0) / (x1 - x0) * pw)
        tv = np.log10(np.where(ok, v, 1.0)) if chart.log_y else v
        gys.append(top + ph - (tv - y0) / (y1 - y0) * ph)
    text, ends = coords_text(
        np.concatenate([gx[ok] for gx, ok in zip(gxs, drawn, strict=True)]),
        np.concatenate([gy[ok] for gy, ok in zip(gys, drawn, strict=True)]),
    )
    ends = np.concatenate([[0], ends]).tolist()  # text of drawn point k: ends[k]:ends[k+1]
    base = 0
    for i, (ser, gx, gy, ok) in enumerate(zip(chart.series, gxs, gys, drawn, strict=True)):
        color = PALETTE[i % len(PALETTE)]
        dash = ' stroke-dasharray="5 3"' if ser.dashed else ""
        edges = np.flatnonzero(np.diff(np.concatenate([[0], ok.astype(np.int8), [0]])))
        runs = (base + np.cumsum(edges[1::2] - edges[::2])).tolist()
        firsts = [base, *runs[:-1]] if runs else []
        for a, q, p in zip(edges[::2].tolist(), runs, firsts, strict=True):
            if q - p == 1:
                parts.append(f'<circle cx="{gx[a]:.1f}" cy="{gy[a]:.1f}" r="2" fill="{color}"/>')
            else:
                parts.append(
                    f'<polyline points="{text[ends[p] : ends[q] - 1]}" fill="none" '
                    f'stroke="{color}" stroke-width="1.6"{dash}/>'
                )
        base = runs[-1] if runs else base
        legend(
            lambda x, y, c=color, d=dash: (
                f'<line x1="{x:.0f}" x2="{x + 14:.0f}" y1="{y - 4}" y2="{y - 4}" '
                f'stroke="{c}" stroke-width="2"{d}/>'
            ),
            ser.label,
        )
    if band is not None and band[0].size:
        legend(
            lambda x, y: (
                f'<rect x="{x:.0f}" y="{y - 9}" width="14" height="10" fill="{BAND_COLOR}"/>'
            ),
            band_label,
        )
    if bands:
        legend(
            lambda x, y: (
                f'<rect x="{x:.0f}" y="{y - 9}" width="14" height="10" fill="{GAP_COLOR}" '
                'stroke="#bbb"/>'
            ),
            chart.gap_note,
        )
    if chart.flags:  # runs of flagged steps within one pixel column of each other: one bar
        for a, b in step_runs(np.asarray(chart.flags), -(-(x1 - x0) // columns)):
            xa, xb = max(px(a - 0.5), left), min(px(b + 0.5), left + pw)
            parts.append(
                f'<rect x="{xa:.1f}" y="{top}" width="{max(xb - xa, 1.5):.1f}" height="5" '
                f'class="flag" fill="{FLAG_COLOR}"><title>steps {a}-{b}: '
                f"{escape(chart.flag_note)}</title></rect>"
            )
        legend(
            lambda x, y: (
                f'<rect x="{x:.0f}" y="{y - 7}" width="14" height="5" fill="{FLAG_COLOR}"/>'
            ),
            chart.flag_note,
        )
    for m in chart.markers:
        x = px(m.step)
        color = SEVERITY_COLOR.get(m.severity, "#555")
        tip = escape(f"{m.code} (since step {m.step}): {m.message}")
        parts.append(
            f'<g class="marker"><title>{tip}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="{color}" '
            f'stroke-width="1.5" stroke-dasharray="3 2"/>'
            f'<circle cx="{x:.1f}" cy="{top + 8}" r="7" fill="{color}"/>'
            f'<text x="{x:.1f}" y="{top + 11}" class="mk">{m.number}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
