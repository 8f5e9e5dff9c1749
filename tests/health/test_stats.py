"""The robust statistics the rules rely on."""

from __future__ import annotations

import random
import statistics

from rlstream.health import stats


def test_hl_shift_is_the_median_of_pairwise_differences():
    assert stats.hl_shift([3.0, 5.0], [1.0]) == 3.0
    assert stats.hl_shift([1.0, 2.0, 3.0], [0.0, 10.0]) == -3.0
    assert stats.hl_shift([], [1.0]) is None


def test_hl_shift_standard_error_matches_hl_scale():
    # Normal noise, 10 against 20 points: the spread of the estimate over many draws is
    # HL_SCALE * sd * sqrt(1/10 + 1/20), within sampling error (5%).
    rng = random.Random(3)
    est = [
        stats.hl_shift([rng.gauss(0, 1) for _ in range(10)], [rng.gauss(0, 1) for _ in range(20)])
        for _ in range(3000)
    ]
    expected = stats.HL_SCALE * (1 / 10 + 1 / 20) ** 0.5
    assert abs(statistics.pstdev(est) / expected - 1) < 0.05


def test_local_deviations_are_each_value_minus_its_neighbours_median():
    # docs/health.md: a value's local level is the median of up to half_width values
    # on each side (fewer at the ends of the series).
    ys = [0.9, 0.9, 0.9, 0.1, 0.9, 0.9, 0.9]
    got = stats.local_deviations(ys, 2)
    assert [round(d, 9) for d in got] == [0.0, 0.0, 0.0, -0.8, 0.0, 0.0, 0.0]
    # At the end, only older neighbours: the last value against median(0.2, 0.3).
    assert stats.local_deviations([0.1, 0.2, 0.3, 0.9], 2)[-1] == 0.9 - 0.25
    # A new level that holds moves only the values beside the step, by less than it.
    step = [0.2] * 6 + [0.8] * 6
    assert max(abs(d) for d in stats.local_deviations(step, 4)) < 0.6
    assert stats.local_deviations([0.5], 3) == [] and stats.local_deviations([], 3) == []


def test_theil_sen_over_arrays_gives_the_pairwise_slopes_median_exactly():
    """From `THEIL_SEN_ARRAYS` points the slopes are arrays: the same float as the
    median of the slopes computed one by one, ties in x included."""
    rng = random.Random(5)
    for n in range(stats.THEIL_SEN_ARRAYS, 45):
        xs = [float(rng.randint(0, n // 2)) for _ in range(n)]
        ys = [rng.gauss(0, 1) for _ in range(n)]
        slopes = [
            (ys[j] - ys[i]) / (xs[j] - xs[i])
            for i in range(n)
            for j in range(i + 1, n)
            if xs[j] != xs[i]
        ]
        assert stats.theil_sen(xs, ys) == stats.median(slopes)
    assert stats.theil_sen([1.0] * 20, list(range(20))) is None
