"""Robust statistics over short series: median, MAD, Theil-Sen slope, step noise,
deviations from a local level.

Pure functions over plain sequences of floats (windows are tens of points, so plain
Python beats array set-up, except for the Theil-Sen slope's hundreds of pairs). Empty
input gives None, never 0.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np

MAD_SCALE = 1.4826
"""MAD times this estimates the standard deviation of normal data."""


def median(xs: Sequence[float]) -> float | None:
    """Median of ``xs``; None when empty."""
    n = len(xs)
    if n == 0:
        return None
    s = sorted(xs)
    mid = n // 2
    return float(s[mid]) if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def mad(xs: Sequence[float]) -> float | None:
    """Median absolute deviation, scaled to a standard deviation for normal data."""
    m = median(xs)
    if m is None:
        return None
    return MAD_SCALE * median([abs(x - m) for x in xs])  # type: ignore[operator]


THEIL_SEN_ARRAYS = 16
"""From this many points the slopes are computed as arrays (the same floats)."""


@functools.cache
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, 1)


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Median of pairwise slopes; None with fewer than two distinct x."""
    if len(xs) >= THEIL_SEN_ARRAYS:
        i, j = _pairs(len(xs))
        x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        dx = x[j] - x[i]
        keep = dx != 0
        s = np.sort((y[j] - y[i])[keep] / dx[keep])
        n = len(s)
        if n == 0:
            return None
        mid = n // 2
        return float(s[mid]) if n % 2 else (float(s[mid - 1]) + float(s[mid])) / 2.0
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    ]
    return median(slopes)


HL_SCALE = math.sqrt(math.pi / 3.0)
"""The Hodges-Lehmann shift's standard error is this times sd * sqrt(1/n + 1/m) for
normal data (95% efficient against the difference of means; the difference of medians
needs 1.25)."""


def hl_shift(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Hodges-Lehmann estimate of how far ``a`` sits above ``b``: the median of all
    pairwise differences; robust to a few outliers, nearly as precise as means."""
    return median([x - y for x in a for y in b])


def step_noise(ys: Sequence[float]) -> float | None:
    """Robust per-step noise: MAD of first differences / sqrt 2 (a trend cancels)."""
    if len(ys) < 3:
        return None
    d = mad([b - a for a, b in itertools.pairwise(ys)])
    return None if d is None else d / math.sqrt(2.0)


def local_deviations(ys: Sequence[float], half_width: int) -> list[float]:
    """Each value minus the median of its neighbours: up to ``half_width`` values on
    each side, within the series (the newest values have only older neighbours). A
    lone crash or spike stands out by its full size; a trend, or a step to a new
    level that holds, barely moves it. Fewer than two values give no deviation."""
    out = []
    for i, y in enumerate(ys):
        m = median([*ys[max(0, i - half_width) : i], *ys[i + 1 : i + 1 + half_width]])
        if m is not None:
            out.append(y - m)
    return out
