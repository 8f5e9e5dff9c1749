"""The report's chart fixes: the cohort band needs 3 peers and is robust to one sick
sibling (else the siblings' own curves), KL and ESS axes never zoom onto noise, and
the held-out curve is on the reward chart."""

from __future__ import annotations

import re

import numpy as np

from rlstream.fleet.charts import cohort_overlay, run_charts
from rlstream.fleet.points import axis_range
from rlstream.fleet.svg import Chart, Series, line_chart
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
