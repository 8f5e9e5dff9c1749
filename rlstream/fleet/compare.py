"""`rlstream compare OUT RUN_A RUN_B [...]`: where runs' curves part, figure by figure.

Each run after the first is compared with the first (the reference) on every figure
of `FIGURES` both have, over the steps both have, in step order. At each step the
means of the last `window` common steps of both runs are compared: they diverge when
the difference exceeds `k` times the pooled standard deviation of the two windows
(sqrt((sd_a^2 + sd_b^2) / 2), at least `floor` times the reference window's |mean|:
two flat curves never diverge by a hair). The first divergent step is the first of
`sustain` consecutive divergent steps (the last step of its window): one noisy
stretch does not count. A pair that
never diverges reports None. Pure: `divergence` takes plain lists; `compare_runs`
reads the `steps` table of OUT (`fleet.read.StepsTable`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rlstream.errors import InputError

FIGURES = (
    "reward_mean",
    "reward_group_std_mean",
    "mismatch_kl",
    "mismatch_ess",
    "entropy_estimate",
    "completion_len_mean",
    "truncated_frac",
    "lag_mean",
)


@dataclass(frozen=True)
class CompareConfig:
    """How `compare` decides that two curves diverged."""

    window: int = 10
    """Common steps whose means and standard deviations are compared at each step."""
    k: float = 3.0
    """Difference of the window means, in pooled standard deviations, that diverges."""
    sustain: int = 10
    """Consecutive divergent steps needed; the first of them is reported."""
    floor: float = 0.05
    """Least pooled deviation, as a fraction of the reference window's absolute mean."""


@dataclass(frozen=True)
class Divergence:
    """Where one run parts from the reference on one figure (step None: never)."""

    figure: str
    run_id: str
    reference: str
    step: int | None
    value: float | None
    reference_value: float | None
    common_steps: int


def divergence(
    steps: list[int],
    a: list[float],
    b: list[float],
    cfg: CompareConfig = CompareConfig(),
) -> tuple[int | None, float | None, float | None]:
    """(first divergent step, b's and a's window means there), or (None, None, None)."""
    n, w = len(steps), cfg.window
    if n < w + cfg.sustain - 1:
        return None, None, None
    xa, xb = np.asarray(a, np.float64), np.asarray(b, np.float64)
    win_a = np.lib.stride_tricks.sliding_window_view(xa, w)
    win_b = np.lib.stride_tricks.sliding_window_view(xb, w)
    ma, mb = win_a.mean(axis=1), win_b.mean(axis=1)
    pooled = np.sqrt((win_a.var(axis=1, ddof=1) + win_b.var(axis=1, ddof=1)) / 2.0)
    dev = np.maximum(pooled, cfg.floor * np.abs(ma))
    apart = np.abs(mb - ma) > cfg.k * np.where(dev > 0, dev, np.inf)
    run = 0
    for i, hit in enumerate(apart):
        run = run + 1 if hit else 0
        if run == cfg.sustain:
            first = i - cfg.sustain + 1
            return int(steps[first + w - 1]), float(mb[first]), float(ma[first])
    return None, None, None


def _pairs(ref: dict[str, list[Any]], other: dict[str, list[Any]], figure: str):
    a = dict(zip(ref["step"], ref[figure], strict=True))
    b = dict(zip(other["step"], other[figure], strict=True))
    common = sorted(s for s in a.keys() & b.keys() if a[s] is not None and b[s] is not None)
    return common, [a[s] for s in common], [b[s] for s in common]


def compare_runs(
    out: str,
    run_ids: list[str],
    cfg: CompareConfig = CompareConfig(),
    storage_options: dict[str, Any] | None = None,
) -> list[Divergence]:
    """Every run after the first against the first, per figure. `InputError` (exit 2)
    for a run OUT has no step rows of."""
    from rlstream.fleet.read import StepsTable

    if len(run_ids) < 2:
        raise InputError("compare needs at least two runs: RUN_A RUN_B [...]")
    table = StepsTable(out, storage_options)
    cols = {r: table.run(r, list(FIGURES)) for r in dict.fromkeys(run_ids)}
    unknown = [r for r, c in cols.items() if not c["step"]]
    if unknown:
        raise InputError(
            f"no step rows for {', '.join(unknown)} in {out}: check the run ids with "
            f"`rlstream status {out}`"
        )
    ref_id = run_ids[0]
    ref = cols[ref_id]
    found = []
    for figure in FIGURES:
        for rid in list(cols)[1:]:
            steps, a, b = _pairs(ref, cols[rid], figure)
            if not steps:
                continue
            step, vb, va = divergence(steps, a, b, cfg)
            found.append(Divergence(figure, rid, ref_id, step, vb, va, len(steps)))
    return found


def render(rows: list[Divergence]) -> str:
    """A terminal table: figure, run, first divergent step, both window means."""
    heads = ("figure", "run", "vs", "diverges at step", "run mean", "reference mean", "steps")
    cells = [
        (
            d.figure,
            d.run_id,
            d.reference,
            "-" if d.step is None else str(d.step),
            "-" if d.value is None else f"{d.value:.4g}",
            "-" if d.reference_value is None else f"{d.reference_value:.4g}",
            str(d.common_steps),
        )
        for d in rows
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip() for c in cells]
    return "\n".join(lines) + "\n"


def as_json(rows: list[Divergence]) -> list[dict[str, Any]]:
    return [asdict(d) for d in rows]
