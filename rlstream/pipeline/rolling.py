"""Rolling medians and their standard errors over a run's cohort window.

Pure numpy kernels of the cohort fold (`pipeline.cohorts`): per row and figure, the
median of that row and the n-1 before it and the noise of that level, and the same
for a window that grew or was cut since it was last computed (only the rows whose
n-1 predecessors changed are computed again).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from rlstream.health import stats


def short_median(xs: np.ndarray) -> float:
    """`np.median` of a short 1-D array, without its general machinery: NaN when any
    value is NaN, else the middle value or the mean of the two (the same float)."""
    if np.isnan(xs).any():
        return math.nan
    m = stats.median(xs.tolist())
    assert m is not None
    return m


def rolling(vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row and column, over that row and the n-1 before it: the median, and the
    standard error of that window's level, max(1.2533 x 1.4826 x MAD, sd) / sqrt(count)
    (the run's own step-to-step noise; the standard deviation covers a figure that is
    mostly one value with occasional others, such as a small truncated share). NaN
    unless at least half of the n rows have a value (the first rows are not judged)."""
    if vals.shape[0] == 0:
        return vals, vals
    n = max(n, 1)
    pad = np.full((n - 1, vals.shape[1]), np.nan)
    win = np.lib.stride_tricks.sliding_window_view(np.vstack([pad, vals]), n, axis=0)
    count = np.sum(~np.isnan(win), axis=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows: NaN
        med = nanmedian(win, count)
        mad = nanmedian(np.abs(win - med[..., None]), count)
        sd = np.nanstd(win, axis=-1, ddof=1) if n > 1 else np.zeros_like(med)
        se = np.fmax(1.2533 * 1.4826 * mad, sd) / np.sqrt(np.maximum(count, 1))
    short = count < (n + 1) // 2
    med[short] = np.nan
    se[short] = np.nan
    return med, se


def nanmedian(win: np.ndarray, count: np.ndarray) -> np.ndarray:
    """`np.nanmedian(win, axis=-1)` (`count`: the values that are not NaN along it),
    the same floats: the values sorted (NaN last), the mean of the middle two (of the
    middle one twice), NaN where there are none; without its masked arrays."""
    s = np.sort(win, axis=-1)
    h = count // 2
    low = np.maximum(np.where(count % 2 == 1, h, h - 1), 0)
    lo = np.take_along_axis(s, low[..., None], axis=-1)[..., 0]
    hi = np.take_along_axis(s, h[..., None], axis=-1)[..., 0]
    out = (lo + hi) / 2.0
    out[count == 0] = np.nan
    return out


def rolling_since(
    vals: np.ndarray, n: int, prev: tuple[tuple[np.ndarray, np.ndarray], int, int] | None
) -> tuple[np.ndarray, np.ndarray]:
    """`rolling(vals, n)`, reusing `prev` = (`rolling` of an earlier window, rows
    cut from its front since, rows of it that are `vals`' first). A row's figures
    depend only on it and the n-1 rows before it in the window: a row that had all of
    them before and has them now keeps its figures, so only the rows added since are
    computed, and the window's first n-1 rows once rows were cut from its front."""
    head = max(n, 1) - 1
    if prev is None or prev[2] < head:
        return rolling(vals, n)
    (med, se), dropped, kept = prev
    if dropped:  # the first rows lost rows before them
        first = rolling(vals[:head], n)
    else:
        first, head = (vals[:0], vals[:0]), 0
    new = vals[kept - max(n, 1) + 1 :] if kept < len(vals) else vals[:0]
    last = rolling(new, n)
    mid = slice(dropped + head, dropped + kept)
    skip = max(n, 1) - 1
    return (
        np.concatenate([first[0], med[mid], last[0][skip:]]),
        np.concatenate([first[1], se[mid], last[1][skip:]]),
    )
