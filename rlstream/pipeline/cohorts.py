"""The cohort fold: a run's cohort, its cohort's peer bands, and `unlike_peers`.

`PeerFold` is a hook of `RunGroup` (`peers=`), called once per poll after every due
run's new final rows were folded: `fold(states, new_rows, now)` with every run the
group holds and the rows each one finalized in this poll (by run URL). It returns the
URLs of the runs whose next commit changed.

- **Cohort.** A run without one gets `rlstream.health.cohort.cohort_of` of its config,
  id and URL (explicit key, then `--cohort NAME=GLOB`, then the config fingerprint).
- **Window.** Each run keeps `[step, figure values...]` of its last
  `[unlike_peers] window_steps` final steps in `RunState.peer_window` (its resume
  state holds it, so bands and judging continue after a restart); a run alone in its
  cohort keeps only its last `smooth_steps`.
- **Bands.** For each step a run finalized in this poll, the band of each figure over
  every run of the cohort holding that step (`health.peers.band`) goes into the
  `cohorts` rows of the first such run (by run id), once `MIN_BAND_RUNS` runs hold it: those rows ride in that run's next
  commit, under its transaction, exactly once (`pipeline.commit`). A later poll in
  which more runs reach the step writes the band again with a larger n.
- **Judging.** A run's steps are judged in order, each once (`peer_judged`), when
  every other run of the cohort has finalized that step, or finished, or is more than
  `wait_steps` behind the run's latest final step (started later), or when the step
  is `window_steps` behind the run's own latest (a stuck peer never blocks it long).
  Its figure at a step is the median of its last `smooth_steps` final rows; so are its
  peers'. The noise of a difference is the run's and its peers' standard errors of
  those medians combined (from each run's own step-to-step MAD). `health.peers.judge` decides; the verdict moves the run's `unlike_peers`
  alert (pending, firing, resolved, with hysteresis) in its health state, and the
  transitions become `alerts` rows.

Peers are the runs of one group: every run in-process, a tailer's shard on Ray
(`docs/health.md` "Cohorts"). In `analyze`, runs of earlier chunks stay peers through
their windows (`release` keeps them as arrays once their state is dropped).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import numpy as np

from rlstream.formats import stands_in
from rlstream.health import DEFAULT_RULES, RulesConfig, RunContext, new_state
from rlstream.health.cohort import CohortRules, cohort_of
from rlstream.health.config_peers import split_keys
from rlstream.health.peers import active, advance_peers, band, judge
from rlstream.pipeline.rolling import rolling_since, short_median
from rlstream.pipeline.state import RunState, emit, is_finished
from rlstream.pipeline.verdicts import apply_health

MIN_BAND_RUNS = 2
"""A band is written once this many runs of the cohort hold the step (a run alone in
its cohort adds no rows)."""


class _Member:
    """What the fold knows of one run of a cohort. Its window's arrays are kept until
    the window changes, and then only extended: a poll converts and smooths only the
    rows a run finalized since, not its whole window (`rolling_since`)."""

    __slots__ = ("_cache", "final_through", "finished", "state", "window")

    def __init__(self, state: RunState) -> None:
        self.state: RunState | None = state
        self.window: Any = state.peer_window
        self.final_through = state.final_through
        self.finished = is_finished(state)
        self._cache: list[Any] = []

    def arrays(self, n_figs: int) -> tuple[tuple[np.ndarray, np.ndarray], dict[int, int]]:
        """`_arrays` of the window, and each step's row in them."""
        w = self.window
        # A window is appended to and cut from the front, never changed in place:
        # the same object with the same length and ends holds the same rows.
        ends = (len(w), w[0][0], w[-1][0]) if isinstance(w, list) and w else None
        old = self._cache
        if old and old[0] is w and old[1] == ends:
            return old[2], old[3]
        cut = _kept(old, w) if old and old[0] is w and ends is not None else None
        if cut is None:
            series = _arrays(w, n_figs)
            self._cache = [w, ends, series, _where(series[0]), None, None]
        else:
            dropped, kept = cut
            add = _arrays(w[kept:], n_figs)
            steps = np.concatenate([old[2][0][dropped:], add[0]])
            vals = np.concatenate([old[2][1][dropped:], add[1]])
            prev = (old[4], dropped, kept) if old[4] is not None else None
            self._cache = [w, ends, (steps, vals), _where(steps), None, prev]
        return self._cache[2], self._cache[3]

    def smooth(self, n_figs: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """`rolling` of the window's values (after `arrays`), kept with them."""
        if self._cache[4] is None:
            vals = self.arrays(n_figs)[0][1]
            self._cache[4] = rolling_since(vals, steps, self._cache[5])
            self._cache[5] = None
        return self._cache[4]


def _where(steps: np.ndarray) -> dict[int, int]:
    return dict(zip(steps.tolist(), range(len(steps)), strict=True))


def _kept(old: list[Any], w: list[Any]) -> tuple[int, int] | None:
    """(rows cut from the front of the cached arrays, rows of them still in `w`, its
    first ones), when `w` is the cached window appended to and cut from the front
    since; else None (the arrays are built afresh)."""
    steps = old[2][0]
    if not len(steps):
        return None
    dropped = old[3].get(w[0][0])
    if dropped is None:
        return None
    kept = len(steps) - dropped
    if kept > len(w) or w[kept - 1][0] != steps[-1]:
        return None
    return dropped, kept


def _arrays(window: Any, n_figs: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values (rows x figures), NaN for missing) of a window."""
    if isinstance(window, tuple):
        return window
    if not window:
        return np.zeros(0, np.int64), np.zeros((0, n_figs))
    arr = np.array(
        [[math.nan if v is None else v for v in row] for row in window], dtype=np.float64
    )
    return arr[:, 0].astype(np.int64), arr[:, 1:]


class PeerFold:
    """Picklable group hook: cohorts, bands and `unlike_peers` (see the module)."""

    def __init__(self, rules: RulesConfig = DEFAULT_RULES, cohort_rules: CohortRules = ()) -> None:
        self.rules = rules
        self.cohort_rules = cohort_rules
        self.figures = split_keys(rules.unlike_peers.figures)
        self.members: dict[str, dict[str, _Member]] = {}
        self.assigned: set[str] = set()

    def assign(self, state: RunState) -> str:
        """The run's cohort, computed once per process: a restart with other `--cohort`
        rules, or a run.json that gained a cohort key, regroups the run as sharding and
        chunking (which compute it afresh) do."""
        if state.run_id not in self.assigned:
            self.assigned.add(state.run_id)
            state.cohort = cohort_of(
                state.run_id, state.run_url, state.config, self.rules.cohorts, self.cohort_rules
            )
        return state.cohort

    def cohort(self, run_id: str, run_url: str, config: dict[str, Any]) -> str:
        """The cohort of a run not added yet (`pipeline.shards.cohort_chunks`)."""
        return cohort_of(run_id, run_url, config, self.rules.cohorts, self.cohort_rules)

    def release(self, state: RunState) -> None:
        """The run's state is dropped (`analyze`): keep its window as arrays."""
        m = self.members.get(state.cohort, {}).get(state.run_id)
        if m is not None:
            m.window = _arrays(m.window, len(self.figures))
            m.state = None

    def _value(self, row: dict[str, Any], fig: str, fmt: str) -> float | None:
        v = row.get(fig)
        if v is None and stands_in(fmt):
            v = row.get(f"reported_{fig}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        return float(v)

    def fold(
        self, states: Iterable[RunState], new_rows: dict[str, list[dict[str, Any]]], now: float
    ) -> set[str]:
        """One poll's pass; returns the URLs of runs whose next commit changed."""
        touched: set[str] = set()
        states = list(states)
        for st in states:
            cohort = self.assign(st)
            for r in new_rows.get(st.run_url, ()):
                st.peer_window.append(
                    [r["step"], *(self._value(r, f, st.format) for f in self.figures)]
                )
                touched.add(cohort)
            m = self.members.setdefault(cohort, {}).get(st.run_id)
            if m is None or m.state is not st:
                self.members[cohort][st.run_id] = _Member(st)
            else:
                m.window, m.final_through, m.finished = (
                    st.peer_window,
                    st.final_through,
                    is_finished(st),
                )
        changed: set[str] = set()
        for cohort in sorted(touched):
            changed |= self._cohort(cohort, new_rows, now)
        cfg = self.rules.unlike_peers
        for st in states:
            # A run alone in its cohort keeps only what a later sibling's judging reads.
            alone = len(self.members[st.cohort]) == 1
            del st.peer_window[: -(cfg.smooth_steps if alone else cfg.window_steps)]
        return changed

    def _cohort(
        self, cohort: str, new_rows: dict[str, list[dict[str, Any]]], now: float
    ) -> set[str]:
        cfg = self.rules.unlike_peers
        members = self.members[cohort]
        ids = sorted(members)
        got = {rid: members[rid].arrays(len(self.figures)) for rid in ids}
        series = {rid: got[rid][0] for rid in ids}
        where = {rid: got[rid][1] for rid in ids}
        changed: set[str] = set()
        owners: dict[int, RunState] = {}
        for rid in ids:
            st = members[rid].state
            if st is not None:
                for r in new_rows.get(st.run_url, ()):
                    owners.setdefault(r["step"], st)
        for step, owner in sorted(owners.items()):
            have = [series[rid][1][where[rid][step]] for rid in ids if step in where[rid]]
            arr = np.vstack(have)
            for j, fig in enumerate(self.figures):
                col = arr[:, j]
                col = col[~np.isnan(col)]
                if col.size >= MIN_BAND_RUNS:
                    row = {"cohort": cohort, "step": step, "figure": fig, "as_of": now}
                    emit(owner, "cohorts", [{**row, **band(col.tolist())}])
                    changed.add(owner.run_url)
        if not cfg.enabled:
            return changed
        smooth = {rid: members[rid].smooth(len(self.figures), cfg.smooth_steps) for rid in ids}
        at: dict[int, tuple[dict[str, int], np.ndarray, np.ndarray]] = {}
        for rid in ids:
            st = members[rid].state
            if st is not None and self._judge(st, rid, members, series, where, smooth, now, at):
                changed.add(st.run_url)
        return changed

    @staticmethod
    def _at_step(
        step: int,
        ids: list[str],
        where: dict[str, dict[int, int]],
        smooth: dict[str, tuple[np.ndarray, np.ndarray]],
    ) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        """Every run's smoothed figures and their standard errors at `step` (runs by
        id, rows of two arrays): built once per step and poll, read by each run
        judged at that step."""
        held = [rid for rid in ids if step in where[rid]]
        rows = {rid: n for n, rid in enumerate(held)}
        vals = np.array([smooth[rid][0][where[rid][step]] for rid in held])
        ses = np.array([smooth[rid][1][where[rid][step]] for rid in held])
        return rows, vals, ses

    def _ready(self, step: int, rid: str, members: dict[str, _Member], own_final: int) -> bool:
        cfg = self.rules.unlike_peers
        if own_final - step >= cfg.window_steps:
            return True
        return all(
            m.finished or m.final_through >= step or own_final - m.final_through > cfg.wait_steps
            for p, m in members.items()
            if p != rid
        )

    def _judge(
        self,
        st: RunState,
        rid: str,
        members: dict[str, _Member],
        series: dict[str, tuple[np.ndarray, np.ndarray]],
        where: dict[str, dict[int, int]],
        smooth: dict[str, tuple[np.ndarray, np.ndarray]],
        now: float,
        at: dict[int, tuple[dict[str, int], np.ndarray, np.ndarray]],
    ) -> bool:
        """Judge the run's steps not judged yet; True if its health changed. A run's
        peers at a step are the other rows of `_at_step` (built once into `at`):
        the verdict reads their median, MAD and the median standard error, which
        do not depend on the peers' order."""
        cfg = self.rules.unlike_peers
        steps = series[rid][0]
        todo = steps[steps > st.peer_judged].tolist()
        if not todo:
            return False
        base = st.health if st.health is not None else new_state(self.rules, st.run_id)
        hs = None  # a copy of `base`, made once a verdict changes it
        transitions: list[Any] = []
        ids = sorted(members)
        for step in todo:
            if not self._ready(step, rid, members, st.final_through):
                break
            i = where[rid][step]
            own, own_se = smooth[rid][0][i], smooth[rid][1][i]
            if step not in at:
                at[step] = self._at_step(step, ids, where, smooth)
            rows, vals, ses = at[step]
            others = np.ones(len(rows), dtype=bool)
            others[rows[rid]] = False
            values: dict[str, float] = {}
            peers: dict[str, list[float]] = {}
            noise: dict[str, float] = {}
            for j, f in enumerate(self.figures):
                if np.isnan(own[j]):
                    continue
                values[f] = float(own[j])
                col = vals[others, j]
                keep = ~np.isnan(col)
                peers[f] = col[keep].tolist()
                se = ses[others, j][keep]
                if se.size:
                    noise[f] = float(np.hypot(own_se[j], short_median(se)))
            verdict = judge(
                values,
                peers,
                cfg,
                active(base if hs is None else hs),
                self.rules.history.hysteresis,
                noise,
            )
            if verdict is not None:
                if hs is None:
                    hs = base.copy() if base is st.health else base
                transitions += advance_peers(hs, verdict, cfg, step, now)
            st.peer_judged = step
        if hs is None:
            return False
        ctx = RunContext(st.run_id, st.config, is_finished(st))
        apply_health(st, hs, ctx, self.rules, transitions)
        emit(st, "alerts", [{"run_id": st.run_id, **asdict(t)} for t in transitions])
        return True
