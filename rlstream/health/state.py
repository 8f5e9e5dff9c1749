"""The health engine's state and its outputs: bounded history, alerts, findings.

Contract
--------
``HealthState`` is plain data (dataclasses, deques, dicts of floats) so it pickles and
can be checkpointed with the outputs it produced. Its size is O(window): a deque of the
last ``history.window`` rows' figures, the early-baseline values (at most
``history.baseline_steps`` per figure), the last ``window`` step times and eval points,
and one ``AlertState`` per code.

``View`` is a read-only lens over a state that the rules use: recent medians,
baseline medians, series for trends.

Alert lifecycle (per code, Prometheus-like): ``inactive`` -> ``pending`` when the
condition first holds (``since_step`` = that step) -> ``firing`` once it held on
``for_steps`` evaluations; a pending alert whose condition is clear ``clear_steps``
evaluations in a row goes back to ``inactive``; a firing alert clear ``clear_steps``
evaluations in a row becomes ``resolved`` and is listed for
``history.keep_resolved_steps`` more steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rlstream.health import stats

INACTIVE = "inactive"
PENDING = "pending"
FIRING = "firing"
RESOLVED = "resolved"
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
LEVEL_FIGURES = ("group_std", "no_variance_frac")
"""Figures whose lowest and highest rolling medians the state keeps."""


@dataclass(frozen=True)
class Finding:
    """One current or recently resolved finding of a run."""

    code: str
    severity: str
    state: str
    since_step: int
    message: str


@dataclass(frozen=True)
class Transition:
    """A change of a finding's state (or of a firing finding's severity)."""

    code: str
    severity: str
    from_state: str
    to_state: str
    step: int
    time: float | None
    message: str


@dataclass
class AlertState:
    """Where one code is in its lifecycle."""

    state: str = INACTIVE
    since_step: int = -1
    severity: str = "warning"
    message: str = ""
    held: int = 0
    """Evaluations the condition held since pending began."""
    misses: int = 0
    """Consecutive evaluations the condition was clear."""
    resolved_step: int = -1
    level: float | None = None
    """The figure's level before the finding began (`Verdict.level`), while active."""


@dataclass
class HealthState:
    """Everything the engine remembers about one run (picklable, O(window))."""

    window: int = 60
    run_id: str | None = None
    rows: deque = field(default_factory=deque)
    """(step, figures) of the last ``window`` rows."""
    baseline: dict = field(default_factory=dict)
    """figure -> values from the early-baseline rows."""
    n_rows: int = 0
    last_step: int = -1
    last_step_time: float | None = None
    step_times: deque = field(default_factory=deque)
    evals: dict = field(default_factory=dict)
    """eval name -> deque of (step, eval value, training reward then)."""
    unusable_streak: float = 0.0
    early_noise: dict = field(default_factory=dict)
    """figure -> step noise over the run's first ``noisy_reward.base_steps`` rows;
    ``reward_se``: the reward's step noise that sampling explained over those rows."""
    levels: dict = field(default_factory=dict)
    """figure -> (lowest, highest) median of ``baseline_steps`` consecutive rows seen
    since the baseline began, for the figures in ``LEVEL_FIGURES`` (what a run once
    had, after its early baseline has left the window)."""
    alerts: dict = field(default_factory=dict)
    """code -> AlertState."""

    def __post_init__(self) -> None:
        self.rows = deque(self.rows, maxlen=self.window)
        self.step_times = deque(self.step_times, maxlen=self.window)

    def copy(self) -> HealthState:
        """A copy that shares no mutable container with ``self``."""
        return HealthState(
            window=self.window,
            run_id=self.run_id,
            rows=deque(self.rows, maxlen=self.window),
            baseline={k: list(v) for k, v in self.baseline.items()},
            n_rows=self.n_rows,
            last_step=self.last_step,
            last_step_time=self.last_step_time,
            step_times=deque(self.step_times, maxlen=self.window),
            evals={k: deque(v, maxlen=self.window) for k, v in self.evals.items()},
            unusable_streak=self.unusable_streak,
            early_noise=dict(self.early_noise),
            levels=dict(self.levels),
            alerts={k: AlertState(**vars(a)) for k, a in self.alerts.items()},
        )


class View:
    """Read-only queries over a state's history, for the rules."""

    def __init__(self, state: HealthState, recent_steps: int, baseline_min: int) -> None:
        self.state = state
        self.recent_steps = recent_steps
        self.baseline_min = baseline_min
        self._at: tuple[int, int] | None = None
        self._rows: list[tuple[int, dict]] = []
        self._values: dict[tuple[str, int | None], list[float]] = {}

    def _kept_rows(self) -> list[tuple[int, dict]]:
        """The state's rows as a list, made once per row folded (the rules ask for
        the same figures over the same rows many times per step)."""
        at = (self.state.n_rows, len(self.state.rows))
        if at != self._at:
            self._at, self._rows, self._values = at, list(self.state.rows), {}
        return self._rows

    @property
    def step(self) -> int:
        return self.state.last_step

    @property
    def n_rows(self) -> int:
        return self.state.n_rows

    def firing(self, code: str) -> bool:
        """Whether the finding ``code`` was firing before the latest row."""
        a = self.state.alerts.get(code)
        return a is not None and a.state == FIRING

    def cur(self, name: str) -> float | None:
        """The figure in the latest row."""
        return self.state.rows[-1][1].get(name) if self.state.rows else None

    def values(self, name: str, n: int | None = None) -> list[float]:
        """Non-null values of the figure over the last ``n`` rows (all kept rows if None)."""
        rows = self._kept_rows()
        got = self._values.get((name, n))
        if got is None:
            if n is not None:
                rows = rows[-n:]
            got = self._values[name, n] = [f[name] for _, f in rows if name in f]
        return list(got)

    def series(self, name: str, n: int | None = None) -> tuple[list[float], list[float]]:
        rows = self._kept_rows()
        if n is not None:
            rows = rows[-n:]
        pts = [(float(s), f[name]) for s, f in rows if name in f]
        return [p[0] for p in pts], [p[1] for p in pts]

    def recent(self, name: str, n: int | None = None) -> float | None:
        """Median of the last ``n`` (default recent_steps) rows; None unless most have it."""
        n = n or self.recent_steps
        vals = self.values(name, n)
        if len(vals) < (min(n, len(self.state.rows)) + 1) // 2:
            return None
        return stats.median(vals)

    def base_values(self, name: str) -> list[float]:
        return self.state.baseline.get(name, [])

    def base(self, name: str) -> float | None:
        """Median of the early baseline; None until it holds ``baseline_min`` values."""
        vals = self.base_values(name)
        return stats.median(vals) if len(vals) >= self.baseline_min else None

    def base_peak(self, name: str) -> float | None:
        """Highest value of the early baseline; None until it holds ``baseline_min``."""
        vals = self.base_values(name)
        return max(vals) if len(vals) >= self.baseline_min else None

    def lowest(self, name: str) -> float | None:
        """Lowest median of ``baseline_steps`` consecutive rows so far (LEVEL_FIGURES)."""
        lv = self.state.levels.get(name)
        return None if lv is None else lv[0]

    def highest(self, name: str) -> float | None:
        """Highest median of ``baseline_steps`` consecutive rows so far (LEVEL_FIGURES)."""
        lv = self.state.levels.get(name)
        return None if lv is None else lv[1]

    def base_mean(self, name: str) -> float | None:
        vals = self.base_values(name)
        return sum(vals) / len(vals) if len(vals) >= self.baseline_min else None

    def trend(self, name: str, n: int) -> float | None:
        """Theil-Sen slope per step over the last ``n`` rows; None with under 5 points."""
        xs, ys = self.series(name, n)
        return stats.theil_sen(xs, ys) if len(xs) >= 5 else None
