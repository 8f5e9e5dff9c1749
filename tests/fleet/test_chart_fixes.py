"""The report's chart fixes: the cohort band needs 3 peers and is robust to one sick
sibling (else the siblings' own curves), KL and ESS axes never zoom onto noise, and
the held-out curve is on the reward chart."""

from __future__ import annotations

import re

import numpy as np

from rlstream.fleet.charts import cohort_overlay, run_charts
from rlstream.fleet.points import axis_range
from rlstream.fleet.svg import Band, Chart, Series, line_chart
from rlstream.metrics.downsample import RunPoints


def _band(n: int, medians: list[float], mads: list[float]) -> dict:
    k = len(medians)
    return {"step": list(range(k)), "n": [n] * k, "median": medians, "mad": mads,
            "p10": [0.0] * k, "p90": [1.0] * k}  # fmt: skip


def _points(vals: list[float]) -> RunPoints:
    st = np.arange(len(vals))
    return RunPoints(
        width=1,
        rows=len(vals),
        series={("step", ""): (st, st.astype(float)), ("reward_mean", ""): (st, np.array(vals))},
    )


def test_band_only_with_three_peers_otherwise_sibling_curves():
    sib = {"run-b": _points([0.1, 0.2, 0.3])}
    # 3 runs (2 peers): no band, the sibling's own curve
    band, extra = cohort_overlay("reward", {"reward_mean": _band(3, [0.5] * 3, [0.1] * 3)}, sib)
    assert band is None and [s.label for s in extra] == ["sibling run-b"]
    assert list(extra[0].values) == [0.1, 0.2, 0.3]
    # 4 runs (3 peers): the band, median ± 2 × 1.4826 × MAD
    band, extra = cohort_overlay("reward", {"reward_mean": _band(4, [0.5] * 3, [0.1] * 3)}, sib)
    assert extra == [] and band is not None
    assert band.low == [0.5 - 2 * 1.4826 * 0.1] * 3 and band.high == [0.5 + 2 * 1.4826 * 0.1] * 3
    assert "(4 runs)" in band.label and "median" in band.label
    # a chart with no cohort figure (discards) gets neither
    assert cohort_overlay("discards", {}, sib) == (None, [])


def test_one_sick_sibling_does_not_spike_the_band():
    # Five runs at one step: four near 0.5, one sick at 5.0. Median and MAD computed
    # here from their definitions; a p10-p90 of five values would reach toward 5.0.
    vals = np.array([0.48, 0.5, 0.52, 0.51, 5.0])
    med = float(np.median(vals))
    mad = float(np.median(np.abs(vals - med)))
    band, _ = cohort_overlay("reward", {"reward_mean": _band(5, [med], [mad])}, {})
    assert band is not None and band.high[0] < 0.6 and band.low[0] > 0.4


def _yticks(svg: str) -> list[float]:
    return [float(t) for t in re.findall(r'class="yt">([^<]+)<', svg)]


def test_kl_and_ess_axes_have_floors():
    # ESS noise between 0.93 and 1 is drawn on an axis at least 0.3 high, within 0-1
    lo, hi = axis_range(0.93, 1.0, False, 0.0, 1.0, 0.3)
    assert hi == 1.0 and hi - lo >= 0.3 and lo >= 0.0
    # KL noise between 2.0e-4 and 2.5e-4 spans at least two decades on its log axis
    lo, hi = axis_range(np.log10(2.0e-4), np.log10(2.5e-4), True, None, None, 2.0)
    assert hi - lo >= 2.0 and lo < np.log10(2.0e-4) and hi > np.log10(2.5e-4)
    # a wide range is left alone (just padded)
    lo, hi = axis_range(0.2, 0.9, False, 0.0, 1.0, 0.3)
    assert (round(lo, 3), round(hi, 3)) == (0.158, 0.942)
    svg = line_chart(Chart("ess", [Series("e", [0, 1, 2], [0.93, 1.0, 0.96])], y_min=0.0,
                           y_max=1.0, min_span=0.3))  # fmt: skip
    ticks = _yticks(svg)
    assert max(ticks) - min(ticks) >= 0.2  # not 0.94-1.0


def test_heldout_curve_on_the_reward_chart():
    d = _points([0.1, 0.2, 0.3, 0.4])
    charts = run_charts(d, [], heldout={"gsm8k": ([0, 3], [0.05, 0.1])})
    reward = charts[0]
    assert reward.title == "reward"
    got = next(s for s in reward.series if s.label == "held-out gsm8k")
    assert list(got.steps) == [0, 3] and list(got.values) == [0.05, 0.1]
    assert "all attempts (incl. rejected groups)" in [s.label for s in reward.series]


def _band_polygons(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [tuple(map(float, p.split(","))) for p in pts.split()]
        for pts in re.findall(r'<polygon points="([^"]+)"[^>]*class="band"', svg)
    ]


def test_a_band_past_the_quantitys_bounds_is_clipped_not_the_axis():
    # A truncated share near 0 whose cohort spread puts median - 2 robust sd below 0
    # (median 0.02, MAD 0.03: low = 0.02 - 2 * 1.4826 * 0.03 = -0.069). A share is never
    # below 0: the axis starts at 0 and the band's low edge runs along it.
    steps = [0, 1, 2, 3]
    band = Band("cohort", steps, [0.02 - 2 * 1.4826 * 0.03] * 4, [0.02 + 2 * 1.4826 * 0.03] * 4)
    svg = line_chart(Chart("truncated", [Series("t", steps, [0.0, 0.04, 0.0, 0.02])],
                           y_min=0.0, y_max=1.0, band=band))  # fmt: skip
    assert min(_yticks(svg)) == 0.0
    bottom = 26 + 220 - 26 - 58  # the plot's lower edge (line_chart's top + plot height)
    (poly,) = _band_polygons(svg)
    assert max(y for _, y in poly) == bottom  # the low edge sits on the axis at 0


def test_a_log_band_reaching_zero_is_drawn_down_to_the_axis_not_dropped():
    # KL of a spread cohort: median 3e-4, MAD 2e-4, so the low edge is below 0 at every
    # step; the band is still drawn (high edge 8.9e-4), its low edge along the bottom.
    steps = [0, 1, 2, 3]
    band = Band("cohort", steps, [3e-4 - 2 * 1.4826 * 2e-4] * 4, [3e-4 + 2 * 1.4826 * 2e-4] * 4)
    svg = line_chart(Chart("kl", [Series("k", steps, [2e-4, 2.5e-4, 2.2e-4, 2.4e-4])],
                           log_y=True, min_span=2.0, band=band))  # fmt: skip
    (poly,) = _band_polygons(svg)
    bottom = 26 + 220 - 26 - 58
    assert max(y for _, y in poly) == bottom
    assert min(y for _, y in poly) > 26  # the high edge is inside the plot
