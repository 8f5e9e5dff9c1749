"""`rlstream compare OUT RUN_A RUN_B [...]`: where runs' curves part, figure by figure.

Each run after the first is compared with the first (the reference) on every figure
of `FIGURES` both have, over the steps both have, in step order. A figure's
recomputed column is used where the run has one, else its reported column
(`reported_<figure>`, from steps.jsonl), and the row says which (`source`). At each
step the means of the last `window` common steps of both runs are compared: they
diverge when the difference exceeds `k` times the pooled noise of the two windows
(sqrt((n_a^2 + n_b^2) / 2), a window's noise being the deviation of its successive
differences, sqrt(mean(diff^2) / 2): the standard deviation of a noisy flat curve,
but not inflated by a trend, so a curve climbing away is not hidden by its own
climb), at least `floor` times the reference window's |mean| (two flat curves never
diverge by a hair). The first divergent step is the first of `sustain` consecutive
divergent steps (the last step of its window): one noisy stretch does not count. A
pair that never diverges reports None and says why (`why`). Pure: `scan` and
`divergence` take plain lists; `compare_runs` reads the `steps` table of OUT
(`fleet.read.StepsTable`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rlstream.errors import EXIT_FAILURE, InputError

FIGURES = (
    "reward_mean",
    "reward_mean_with_unusable",
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
    source: str = "recomputed"
    """Which columns were compared: `recomputed`, `reported` (steps.jsonl's figure,
    where the run has no recomputed one) or `reported/recomputed` (each run's own)."""
    why: str | None = None
    """Why no divergent step was found (None when one was)."""


@dataclass(frozen=True)
class Scan:
    """What `scan` saw: the first divergent step (None: none) and, either way, the
    longest stretch of divergent steps and the largest gap in noise units."""

    step: int | None
    value: float | None
    reference_value: float | None
    longest: int
    largest_gap: float | None
    why: str | None


def needed_steps(cfg: CompareConfig) -> int:
    """Common steps needed before a divergence can be sustained."""
    return cfg.window + cfg.sustain - 1


def _noise(win: np.ndarray) -> np.ndarray:
    """Per window: sqrt(mean of squared successive differences / 2)."""
    d = np.diff(win, axis=1)
    return np.sqrt((d * d).mean(axis=1) / 2.0)


def scan(
    steps: list[int], a: list[float], b: list[float], cfg: CompareConfig = CompareConfig()
) -> Scan:
    """Where b parts from a (see the module docstring), and why not when it does not."""
    n, w = len(steps), cfg.window
    if n < needed_steps(cfg):
        why = f"too few common steps: {n} < --window + --sustain - 1 = {needed_steps(cfg)}"
        return Scan(None, None, None, 0, None, why)
    xa, xb = np.asarray(a, np.float64), np.asarray(b, np.float64)
    win_a = np.lib.stride_tricks.sliding_window_view(xa, w)
    win_b = np.lib.stride_tricks.sliding_window_view(xb, w)
    ma, mb = win_a.mean(axis=1), win_b.mean(axis=1)
    pooled = np.sqrt((_noise(win_a) ** 2 + _noise(win_b) ** 2) / 2.0)
    dev = np.maximum(pooled, cfg.floor * np.abs(ma))
    gap = np.abs(mb - ma) / np.where(dev > 0, dev, np.inf)
    apart = gap > cfg.k
    run = longest = 0
    for i, hit in enumerate(apart):
        run = run + 1 if hit else 0
        longest = max(longest, run)
        if run == cfg.sustain:
            first = i - cfg.sustain + 1
            return Scan(
                int(steps[first + w - 1]),
                float(mb[first]),
                float(ma[first]),
                run,
                float(gap.max()),
                None,
            )
    big = float(gap.max())
    if longest:
        why = (
            f"apart by more than --k {cfg.k:g} x noise for at most {longest} consecutive "
            f"steps (--sustain {cfg.sustain} needed)"
        )
    else:
        why = f"never apart by more than --k {cfg.k:g} x noise (at most {big:.2g}x)"
    return Scan(None, None, None, longest, big, why)


def divergence(
    steps: list[int],
    a: list[float],
    b: list[float],
    cfg: CompareConfig = CompareConfig(),
) -> tuple[int | None, float | None, float | None]:
    """(first divergent step, b's and a's window means there), or (None, None, None)."""
    s = scan(steps, a, b, cfg)
    return s.step, s.value, s.reference_value


def _series(cols: dict[str, list[Any]], figure: str) -> tuple[dict[int, float], str]:
    """{step: value} of a figure, recomputed if the run has any, else reported."""
    for column, source in ((figure, "recomputed"), (f"reported_{figure}", "reported")):
        got = {s: v for s, v in zip(cols["step"], cols[column], strict=True) if v is not None}
        if got:
            return got, source
    return {}, "recomputed"


def _pairs(ref: dict[str, list[Any]], other: dict[str, list[Any]], figure: str):
    (a, sa), (b, sb) = _series(ref, figure), _series(other, figure)
    common = sorted(a.keys() & b.keys())
    source = sa if sa == sb else "reported/recomputed"
    return common, [a[s] for s in common], [b[s] for s in common], source


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
    wanted = [c for f in FIGURES for c in (f, f"reported_{f}")]
    cols = {r: table.run(r, wanted) for r in dict.fromkeys(run_ids)}
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
            steps, a, b, source = _pairs(ref, cols[rid], figure)
            if not steps:
                continue
            s = scan(steps, a, b, cfg)
            found.append(
                Divergence(
                    figure,
                    rid,
                    ref_id,
                    s.step,
                    s.value,
                    s.reference_value,
                    len(steps),
                    source,
                    s.why,
                )
            )
    return found


def comparable(rows: list[Divergence]) -> bool:
    """Whether any figure had the common steps a divergence needs."""
    return any(not (d.why or "").startswith("too few common steps") for d in rows)


def verdict_line(
    rows: list[Divergence],
    cfg: CompareConfig = CompareConfig(),
    names: dict[str, str] | None = None,
) -> str:
    """One line under the table saying what was found, or why nothing was (runs called
    by `names[run_id]` when given: the pages name runs by folder)."""
    hits = [d for d in rows if d.step is not None]
    if hits:
        named = names or {}
        found = ", ".join(
            f"{named.get(d.run_id, d.run_id)} on {d.figure} at step {d.step}" for d in hits
        )
        return f"diverged: {found}"
    if not rows:
        return "nothing compared: the runs share no step with a value of any figure"
    if not comparable(rows):
        most = max(d.common_steps for d in rows)
        return (
            f"nothing compared: at most {most} common steps, and a divergence needs "
            f"--window + --sustain - 1 = {needed_steps(cfg)} (lower --window or --sustain)"
        )
    return (
        f"no divergence: no figure apart by more than --k {cfg.k:g} x noise for "
        f"--sustain {cfg.sustain} consecutive steps (each row's `why` says how close)"
    )


def render(rows: list[Divergence]) -> str:
    """A terminal table: figure, run, first divergent step, both window means."""
    heads = ("figure", "run", "vs", "diverges at step", "run mean", "reference mean", "steps")
    heads += ("source", "why")
    cells = [
        (
            d.figure,
            d.run_id,
            d.reference,
            "-" if d.step is None else str(d.step),
            "-" if d.value is None else f"{d.value:.4g}",
            "-" if d.reference_value is None else f"{d.reference_value:.4g}",
            str(d.common_steps),
            d.source,
            d.why or "-",
        )
        for d in rows
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip() for c in cells]
    return "\n".join(lines) + "\n"


def as_json(rows: list[Divergence]) -> list[dict[str, Any]]:
    return [asdict(d) for d in rows]


def print_result(
    rows: list[Divergence], reference: str, cfg: CompareConfig, json_out: bool = False
) -> int:
    """Print the table (or JSON) and the verdict line; the exit status: 1 when nothing
    could be compared (also said on stderr), else 0."""
    import json
    import sys

    line = verdict_line(rows, cfg)
    if json_out:
        doc = {"reference": reference, "divergences": as_json(rows), "verdict": line}
        print(json.dumps(doc, indent=1))
    else:
        print(render(rows) + line)
    if comparable(rows):
        return 0
    print(f"rlstream compare: {line}", file=sys.stderr)
    return EXIT_FAILURE
