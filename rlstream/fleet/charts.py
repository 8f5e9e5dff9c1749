"""The per-run charts of the HTML report: which step columns, which series, which axes.

`run_charts(cols, findings)` turns a run's step rows (`fleet.read.StepsTable.arrays`,
Arrow arrays, or `read_steps`'s lists, with `STEP_COLUMNS`) and its findings into
`svg.Chart`s. Columns become numpy arrays (map columns are split per key with
numpy), so a chart costs no Python per step: each finding is a marker on the
chart of the figure it judges (`CHART_OF`). Axes fit the quantity: shares (ESS,
truncation) stay within 0-1, counts, lengths, lags and entropy never go below 0.
Steps where a chart's main series has no value (for example a step with no trained
attempt has no reward, KL or ESS) are shaded, and the legend says why. With the run's
cohort bands (`fleet.read.read_bands`), a chart whose main figure has one
(`BAND_OF`) draws the p10-p90 of the cohort's runs under the run's curves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlstream.fleet.svg import Band, Chart, Marker, Series, as_floats

STEP_COLUMNS = [
    "reward_mean",
    "reward_mean_with_unusable",
    "reward_group_std_mean",
    "reported_reward_mean",
    "discards",
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
    "rollout_metadata",
]

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


def _map_series(maps: Any) -> dict[str, np.ndarray]:
    """Per-key series of a map column (an Arrow map array, or a list of (key, value)
    pairs per row): the `MAX_DISCARD_SERIES` keys with the largest totals; a key
    missing at a step counts 0 (a discard reason that did not occur)."""
    if not isinstance(maps, pa.Array):
        maps = pa.array(maps, pa.map_(pa.string(), pa.float64()))
    n = len(maps)
    if not n or not pa.types.is_map(maps.type):
        return {}
    offsets = maps.offsets.to_numpy()
    keys = maps.keys.slice(offsets[0], offsets[-1] - offsets[0])
    vals = as_floats(maps.items.slice(offsets[0], offsets[-1] - offsets[0]))
    vals = np.nan_to_num(vals, nan=0.0)
    row = np.repeat(np.arange(n), np.diff(offsets))
    enc = pc.dictionary_encode(keys)  # hashing in C: no Python string per entry
    names = np.asarray(enc.dictionary.to_pylist(), dtype=str)
    code = enc.indices.to_numpy(zero_copy_only=False)
    totals = np.bincount(code, weights=vals, minlength=len(names))
    order = sorted(range(len(names)), key=lambda i: (-totals[i], names[i]))[:MAX_DISCARD_SERIES]
    out = {}
    for i in order:
        mask = code == i
        out[str(names[i])] = np.bincount(row[mask], weights=vals[mask], minlength=n)
    return out


NO_TRAINED = "no trained attempt at these steps"
NO_TOKENS = "no trained tokens with both logprobs at these steps"
NO_SAMPLES = "no full-trace transcript at these steps"


def run_charts(
    cols: dict[str, list[Any]],
    findings: list[dict[str, Any]],
    bands: dict[str, dict[str, list[Any]]] | None = None,
) -> list[Chart]:
    """The run's charts; `bands`: figure -> {step, p10, p90, n} of its cohort."""
    steps = np.asarray(as_floats(cols["step"]), dtype=np.int64)

    def s(col: str, label: str, dashed: bool = False) -> Series:
        return Series(label, steps, as_floats(cols[col]), dashed)

    # key: (title, series, axis options); y_min/y_max bound the axis, gap_note
    # explains the shaded steps where the first series has no value.
    share = {"y_min": 0.0, "y_max": 1.0}
    charts: dict[str, tuple[str, list[Series], dict[str, Any]]] = {
        "reward": (
            "reward",
            [
                s("reward_mean", "mean"),
                s("reward_mean_with_unusable", "mean with unusable"),
                s("reward_group_std_mean", "within-group std"),
                s("reported_reward_mean", "reported mean", True),
            ],
            {"gap_note": NO_TRAINED},
        ),
        "discards": (
            "discards by reason (attempts) and no-variance groups",
            [
                *(Series(k, steps, v) for k, v in _map_series(cols["discards"]).items()),
                s("groups_no_variance", "groups: no_variance", True),
            ],
            {"y_min": 0.0},
        ),
        "kl": (
            "sampler/trainer mismatch KL (k3, log scale)",
            [s("mismatch_kl", "recomputed"), s("reported_mismatch_kl", "reported", True)],
            {"log_y": True, "gap_note": NO_TOKENS},
        ),
        "ess": (
            "importance-weight ESS (share, 0-1)",
            [
                s("mismatch_ess", "recomputed (token)"),
                s("reported_mismatch_ess", "reported", True),
                s("mismatch_ess_seq", "recomputed (sequence)"),
            ],
            {**share, "gap_note": NO_TOKENS},
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
    bands = bands or {}
    out = []
    for key, (title, series, opts) in charts.items():
        b = bands.get(BAND_OF.get(key, ""))
        if b is not None and b["step"]:
            n = max(b["n"])
            opts = {
                **opts,
                "band": Band(f"cohort p10-p90 ({n} runs)", b["step"], b["p10"], b["p90"]),
            }
        out.append(Chart(title, series, markers[key], **opts))
    return out
