"""The per-run charts of the HTML report: which step columns, which series, which axes.

`run_charts(run_points, findings)` turns a run's step series (`fleet.read.read_run_points`:
per bin of steps, the points a chart draws; the series themselves for a run of up to
`metrics.downsample.MAX_BINS` steps) and its findings into `svg.Chart`s, the same size
after 100 steps or 100,000: each finding is a marker on the chart of the figure it
judges (`CHART_OF`). Discards are drawn per reason, the `MAX_DISCARD_SERIES` reasons
with the largest totals over the run. Axes fit the quantity: shares (ESS,
truncation) stay within 0-1, counts, lengths, lags and entropy never go below 0.
Steps where a chart's main series has no value (for example a step with no trained
attempt has no reward, KL or ESS) are shaded, and the legend says why. With the run's
cohort bands (`fleet.read.read_bands`), a chart whose main figure has one
(`BAND_OF`) draws the cohort's median ± 2 robust deviations under the run's curves
when the cohort has at least 3 other runs, and the siblings' own curves otherwise
(`cohort_overlay`). Steps where transcript scanners flagged the high-reward
attempts (`flags`) are bars along the reward chart's top edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlstream.fleet.svg import Band, Chart, Marker, Series, as_floats
from rlstream.metrics.downsample import RunPoints

# Which chart a finding is marked on; codes not listed go on the reward chart.
CHART_OF = {
    "unusable_groups_streak": "discards",
    "rollout_failure_burst": "discards",
    "grading_failure_burst": "discards",
    "mismatch_kl_rising": "kl",
    "metric_disagreement": "kl",
    "low_ess": "ess",
    "entropy_collapse": "entropy",
    "entropy_too_high": "entropy",
    "degenerate_outputs": "entropy",
    "length_explosion": "length",
    "length_collapse": "length",
    "out_of_room": "truncation",
    "stale_rollouts": "lag",
}
MAX_DISCARD_SERIES = 6
BAND_OF = {
    "reward": "reward_mean",
    "kl": "mismatch_kl",
    "entropy": "entropy_estimate",
    "length": "completion_len_mean",
    "truncation": "truncated_frac",
}
"""Chart -> the figure whose cohort band it draws."""
KL_MIN_DECADES = 2.0
"""The KL axis spans at least two decades: a KL wandering between 2e-4 and 3e-4 is
flat noise, a rise to 1e-2 is not."""
ESS_MIN_SPAN = 0.3
"""The ESS axis spans at least 0.3 (e.g. 0.7 to 1): 0.93 to 1 is noise."""
MIN_PEERS = 3
"""Other runs a cohort needs at a step for its band to be drawn."""
BAND_K = 2.0
"""Half-width of the cohort band in robust standard deviations."""
MAX_SIBLING_CURVES = 4


UNUSABLE_LABEL = "all attempts (incl. rejected groups)"
"""`reward_mean_with_unusable`: the mean over the trained attempts and those of the
groups the trainer rejected (docs/schema.md); above `mean` when rejected groups
scored alike and high."""
UNUSABLE_NOTE = (
    "reward, all attempts (incl. rejected groups): the mean over the trained attempts and "
    "the attempts of groups the trainer rejected (no reward variance, too small); above "
    "the mean when rejected groups all scored high"
)
NO_TRAINED = "no trained attempt at these steps"
NO_TOKENS = "no trained tokens with both logprobs at these steps"
NO_SAMPLES = "no full-trace transcript at these steps"


def flag_note(share: float) -> str:
    """The legend of the reward chart's flag bars."""
    return f"transcript scanners flag >= {share:.0%} of the high-reward attempts"


REPORTED_ONLY = "reported only"
"""Said after a chart's title when only the trainer's reported figure has values (the
run's files give nothing to recompute it from)."""


def _has(series: Series) -> bool:
    return bool(np.isfinite(as_floats(series.values)).any())


def _reported_only(title: str, series: list[Series]) -> tuple[str, list[Series]]:
    """A chart whose recomputed line is empty but whose reported (dashed) line is not
    says so in its title and leads with the reported line (its gaps are then the
    steps without a reported value)."""
    rep = [x for x in series if x.dashed and "reported" in x.label and _has(x)]
    if not series or _has(series[0]) or not rep:
        return title, series
    return f"{title}: {REPORTED_ONLY}", [*rep, *(x for x in series if all(x is not r for r in rep))]


def run_charts(
    run_points: RunPoints,
    findings: list[dict[str, Any]],
    bands: dict[str, dict[str, list[Any]]] | None = None,
    siblings: dict[str, RunPoints] | None = None,
    heldout: dict[str, tuple[list[int], list[float | None]]] | None = None,
    flags: list[int] | None = None,
    flag_share: float = 0.02,
) -> list[Chart]:
    """The run's charts; `bands`: figure -> {step, n, median, mad, ...} of its cohort;
    `siblings`: name -> points of the other runs of its cohort, drawn as their own
    curves where the cohort has too few runs for a band (`cohort_overlay`);
    `heldout`: eval name -> (steps, scores) of the run's held-out evaluations
    (`fleet.read.read_heldout`), drawn on the reward chart; `flags`: the steps where
    transcript scanners flag at least `flag_share` of the high-reward attempts, marked
    along the reward chart's top edge."""
    width = run_points.width

    def s(col: str, label: str, dashed: bool = False, key: str = "") -> Series:
        return Series(label, *run_points.points(col, key), dashed, width)

    # key: (title, series, axis options); y_min/y_max bound the axis, gap_note
    # explains the shaded steps where the first series has no value.
    share = {"y_min": 0.0, "y_max": 1.0}
    charts: dict[str, tuple[str, list[Series], dict[str, Any]]] = {
        "reward": (
            "reward",
            [
                s("reward_mean", "mean"),
                s("reward_mean_with_unusable", UNUSABLE_LABEL),
                s("reward_group_std_mean", "within-group std"),
                s("reported_reward_mean", "reported mean", True),
            ],
            {
                "gap_note": NO_TRAINED,
                "flags": sorted(flags or []),
                "flag_note": flag_note(flag_share),
            },
        ),
        "discards": (
            "discards by reason (attempts) and no-variance groups",
            [
                *(
                    s("discards", k, key=k)
                    for k in run_points.keys("discards")[:MAX_DISCARD_SERIES]
                ),
                s("groups_no_variance", "groups: no_variance", True),
            ],
            {"y_min": 0.0},
        ),
        "kl": (
            "sampler/trainer mismatch KL (k3, log scale)",
            [s("mismatch_kl", "recomputed"), s("reported_mismatch_kl", "reported", True)],
            {"log_y": True, "gap_note": NO_TOKENS, "min_span": KL_MIN_DECADES},
        ),
        "ess": (
            "importance-weight ESS (share, 0-1)",
            [
                s("mismatch_ess", "recomputed (token)"),
                s("reported_mismatch_ess", "reported", True),
                s("mismatch_ess_seq", "recomputed (sequence)"),
            ],
            {**share, "gap_note": NO_TOKENS, "min_span": ESS_MIN_SPAN},
        ),
        "entropy": (
            "entropy (nats/token), repetition, distinct completions",
            [
                s("entropy_estimate", "entropy recomputed"),
                s("reported_entropy_estimate", "entropy reported", True),
                s("repetition", "repetition"),
                s("distinct_completions", "distinct completions"),
            ],
            {"y_min": 0.0, "gap_note": NO_SAMPLES},
        ),
        "length": (
            "completion length (tokens)",
            [s("completion_len_mean", "mean"), s("completion_len_p95", "p95")],
            {"y_min": 0.0, "gap_note": NO_SAMPLES},
        ),
        "truncation": (
            "truncated share (0-1)",
            [s("truncated_frac", "stop_reason = length")],
            {**share, "gap_note": NO_SAMPLES},
        ),
        "lag": (
            "policy lag (steps)",
            [
                s("lag_mean", "mean"),
                s("lag_p90", "p90"),
                s("reported_lag_mean", "reported mean", True),
            ],
            {"y_min": 0.0, "gap_note": NO_TRAINED},
        ),
    }
    markers: dict[str, list[Marker]] = {k: [] for k in charts}
    for n, f in enumerate(findings, 1):
        if f.get("since_step") is None:
            continue
        key = CHART_OF.get(f.get("code"), "reward")
        markers[key].append(
            Marker(
                f["since_step"],
                str(f.get("code")),
                str(f.get("severity")),
                str(f.get("message") or ""),
                n,
            )
        )
    for name, (st, vals) in sorted((heldout or {}).items())[:MAX_SIBLING_CURVES]:
        charts["reward"][1].append(Series(f"held-out {name}", st, vals))
    out = []
    for key, (title, series, opts) in charts.items():
        title, series = _reported_only(title, series)
        band, extra = cohort_overlay(key, bands or {}, siblings or {})
        if band is not None:
            opts = {**opts, "band": band}
        out.append(
            Chart(title, [*series, *extra], markers[key], steps=run_points.steps_range(), **opts)
        )
    return out


def cohort_overlay(
    key: str,
    bands: dict[str, dict[str, list[Any]]],
    siblings: dict[str, RunPoints],
) -> tuple[Band | None, list[Series]]:
    """What a chart shows of the run's cohort: with at least `MIN_PEERS` other runs,
    the band median ± `BAND_K` robust deviations (1.4826 × MAD) of the cohort's runs
    per step, which one sick sibling neither widens nor drags (a p10-p90 of a few runs
    follows its most extreme member); with fewer, the siblings' own curves, dashed
    (with two runs a band would sit between them, so each looks outside its cohort)."""
    figure = BAND_OF.get(key)
    if figure is None:
        return None, []
    b = bands.get(figure)
    if b is not None and b.get("step") and max(n or 0 for n in b["n"]) - 1 >= MIN_PEERS:
        rows = zip(b["n"], b["median"], b["mad"], strict=True)
        low, high = [], []
        for n, med, mad in rows:
            ok = n is not None and n - 1 >= MIN_PEERS and med is not None and mad is not None
            low.append(med - BAND_K * 1.4826 * mad if ok else None)
            high.append(med + BAND_K * 1.4826 * mad if ok else None)
        n = max(b["n"])
        label = f"cohort median ± {BAND_K:g} robust sd ({n} runs)"
        return Band(label, b["step"], low, high), []
    extra = [
        Series(f"sibling {name}", *d.points(figure), True, d.width)
        for name, d in sorted(siblings.items())[:MAX_SIBLING_CURVES]
    ]
    return None, extra
