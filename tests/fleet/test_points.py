"""A chart's points: bounded by its pixel columns however long the series, extremes
kept, and their text exactly what Python's "%.1f" writes."""

from __future__ import annotations

import re

import numpy as np

from rlstream.fleet.points import column_extremes, coords_text
from rlstream.fleet.svg import THIN_PIXELS, Band, Chart, Series, line_chart

WIDTH = 560
COLUMNS = (WIDTH - 58 - 12) // THIN_PIXELS  # line_chart's plot is 490 pixels wide


def _drawn_points(svg: str) -> int:
    lines = re.findall(r'<polyline points="([^"]*)"', svg)
    return sum(len(p.split(" ")) for p in lines) + svg.count("<circle cx=")


def test_coordinates_text_is_what_percent_format_writes():
    rng = np.random.default_rng(7)
    xs = rng.uniform(-20.0, 6000.0, 3000)
    ys = rng.uniform(-50.0, 300.0, 3000)
    # halves of tenths (exact and not exact in binary), -0 and values rounding to -0
    xs[:500] = np.round(rng.uniform(0, 600, 500) * 20) / 20
    ys[:500] = np.round(rng.uniform(-5, 300, 500) * 100) / 100
    ys[500:504] = [-0.04, -0.0, 0.05, 0.15]
    text, ends = coords_text(xs, ys)
    want = ["%.1f,%.1f " % p for p in zip(xs.tolist(), ys.tolist(), strict=True)]  # noqa: UP031
    assert text == "".join(want)
    assert ends.tolist() == np.cumsum([len(p) for p in want]).tolist()
    assert coords_text(np.array([]), np.array([]))[0] == ""


def test_column_extremes_keep_each_columns_lowest_highest_and_empty_columns():
    n = 5000
    steps = np.arange(10, 10 + n)
    values = np.sin(np.arange(n) / 37.0) + (np.arange(n) % 7) * 0.01
    values[2345] = 50.0  # a spike
    values[4000:4003] = np.nan  # narrower than a column (about 20 steps): not drawn
    values[1000:1100] = np.nan  # wider: the line breaks at each empty column
    keep = column_extremes(steps, values, COLUMNS)
    assert (np.diff(keep) > 0).all()
    finite = keep[~np.isnan(values[keep])]
    assert len(finite) <= 2 * COLUMNS and len(keep) <= 2 * COLUMNS
    assert 2345 in keep
    # independently: the columns are equal step ranges; each keeps its extremes, and
    # a column without any value keeps its first point (a gap)
    col = np.minimum(((steps - 10) / (n - 1) * COLUMNS).astype(int), COLUMNS - 1)
    empty = [c for c in range(COLUMNS) if np.isnan(values[col == c]).all()]
    gaps = keep[np.isnan(values[keep])]
    assert len(empty) >= 3 and sorted(col[gaps].tolist()) == empty
    assert all(1000 <= g < 1100 for g in gaps)
    for c in range(COLUMNS):
        inside = np.flatnonzero((col == c) & ~np.isnan(values))
        if not inside.size:
            continue
        kept = np.intersect1d(inside, keep)
        assert values[kept].min() == values[inside].min()
        assert values[kept].max() == values[inside].max()
    short = np.arange(2 * COLUMNS)
    assert column_extremes(short, short.astype(float), COLUMNS).tolist() == short.tolist()


def test_a_long_series_draws_at_most_one_point_per_pixel_and_keeps_its_spike():
    n = 5000
    values = [float(i % 13) for i in range(n)]
    values[3001] = 1e3
    svg = line_chart(Chart("long", [Series("x", list(range(n)), values)]), width=WIDTH)
    assert _drawn_points(svg) <= 2 * COLUMNS
    # the spike is the chart's top: some point sits on the plot's top edge's padding
    ys = [float(p.split(",")[1]) for p in re.findall(r"[\d.]+,[\d.]+", svg.split("<polyline")[1])]
    assert min(ys) < 40.0
    short = line_chart(Chart("short", [Series("x", list(range(200)), values[:200])]))
    assert _drawn_points(short) == 200


def test_a_long_cohort_band_is_bounded_and_keeps_its_envelope():
    n = 5000
    low = [0.0] * n
    high = [1.0] * n
    high[1234] = 9.0  # the band's top, in one step
    band = Band("cohort p10-p90 (4 runs)", list(range(n)), low, high)
    run = Series("a", list(range(n)), [0.5] * n)
    svg = line_chart(Chart("t", [run], band=band), width=WIDTH)
    polys = re.findall(r'<polygon points="([^"]*)"', svg)
    assert len(polys) == 1
    pts = polys[0].split(" ")
    assert len(pts) <= 2 * 4 * COLUMNS
    ys = [float(p.split(",")[1]) for p in pts]
    assert min(ys) < 40.0  # the top of the axis, which the band's 9.0 widened


def test_a_series_with_no_value_draws_nothing_beside_one_that_has_values():
    nan = float("nan")
    chart = Chart("t", [Series("a", [0, 1, 2], [1.0, 2.0, 3.0]), Series("b", [0, 1, 2], [nan] * 3)])
    svg = line_chart(chart, width=WIDTH)
    assert svg.count("<polyline") == 1 and 'class="lg">b</text>' in svg


def test_a_digest_series_breaks_only_where_a_whole_bin_has_no_value():
    """A run of 5,000 steps is drawn from bins of 32 steps: a one-step spike is drawn
    at its own step and value, and a stretch of missing steps breaks the line only at
    the bins it covers whole (1024-1087 of 1000-1100), not at the two it shares with
    values. Checked against the definition, written out here per bin."""
    import pyarrow as pa

    from rlstream.fleet.charts import run_charts
    from rlstream.fleet.points import bin_drawn
    from rlstream.metrics.downsample import fold

    n = 5000
    reward = np.full(n, 0.5)
    reward[3001] = 0.99
    reward[1000:1101] = np.nan
    rows = pa.table({"step": np.arange(n), "reward_mean": reward})
    run_points = fold(None, rows)
    assert run_points.width == 32
    series = next(c for c in run_charts(run_points, []) if c.title == "reward").series[0]
    assert series.resolution == 32
    steps, vals = np.asarray(series.steps), np.asarray(series.values, dtype=float)
    assert vals[steps == 3001].tolist() == [0.99]
    drawn_steps, drawn = bin_drawn(steps, vals, series.resolution)
    has_value = {b for b in range(n // 32 + 1) if not np.isnan(reward[b * 32 : b * 32 + 32]).all()}
    want = [
        s
        for s, v in zip(steps.tolist(), vals.tolist(), strict=True)
        if v == v or s // 32 not in has_value
    ]
    assert drawn_steps.tolist() == want
    assert sorted({s // 32 for s, v in zip(drawn_steps, drawn, strict=True) if v != v}) == [32, 33]
