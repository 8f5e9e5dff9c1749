"""The cohort fold (rlstream.pipeline.cohorts): bands over a cohort's runs per step,
and `unlike_peers` on the run whose figure leaves its siblings' band, on synthetic
final rows (no storage: the fold is what the group calls after each poll)."""

from __future__ import annotations

import warnings

import numpy as np

from rlstream.health import DEFAULT_RULES
from rlstream.health.peers import band
from rlstream.pipeline.cohorts import PeerFold
from rlstream.pipeline.state import RunState

STEPS = 80


def _runs(n: int, cohort: str = "c") -> list[RunState]:
    out = []
    for i in range(n):
        out.append(RunState(run_id=f"r{i}", run_url=f"/runs/r{i}", config={"cohort": cohort}))
    return out


def _kl(i: int, s: int, odd: int | None, factor: float = 3.0) -> float:
    rng = np.random.default_rng([i, s])
    base = 0.01 * (1 + 0.1 * rng.standard_normal())
    return base * factor if i == odd and s >= 30 else base


def _drive(states, fold, odd=None, steps=STEPS, factor=3.0, lag=None):
    """One poll per step: every run finalizes one step (run `lag[0]` is `lag[1]` steps
    behind). Returns every alert event and band row written."""
    alerts, bands = [], []
    for s in range(steps):
        rows = {}
        for i, st in enumerate(states):
            t = s - (lag[1] if lag and i == lag[0] else 0)
            if t < 0:
                continue
            rows[st.run_url] = [{"step": t, "mismatch_kl": _kl(i, t, odd, factor)}]
            st.final_through = t
            st.counters["steps_final"] += 1  # as the group counts a final row
        fold.fold(states, rows, now=1000.0 + s)
        for st in states:
            alerts += st.out.pop("alerts", [])
            bands += st.out.pop("cohorts", [])
    return alerts, bands


def _firing(st: RunState) -> bool:
    return "unlike_peers" in st.firing


def test_unlike_peers_fires_on_the_odd_run_only_and_names_the_band():
    states = _runs(5)
    alerts, _ = _drive(states, PeerFold(), odd=2)
    assert _firing(states[2])
    assert not any(_firing(st) for i, st in enumerate(states) if i != 2)
    fired = [a for a in alerts if a["to_state"] == "firing"]
    assert [a["run_id"] for a in fired] == ["r2"]
    # Onset at 30, 10 smoothing steps reach past the median after about 5, then
    # for_steps = 10 judged steps pending before it fires.
    assert 30 + 10 <= fired[0]["step"] <= 30 + 20
    assert "mismatch_kl" in fired[0]["message"] and "4 peers' median" in fired[0]["message"]
    assert states[2].findings[0]["code"] == "unlike_peers"
    assert states[2].status == "warning"


def test_healthy_siblings_never_fire():
    states = _runs(6)
    alerts, _ = _drive(states, PeerFold())
    assert alerts == []
    assert all(st.status in (None, "healthy") for st in states)


def test_fewer_than_three_peers_judges_nothing():
    states = _runs(3)  # two peers each
    alerts, bands = _drive(states, PeerFold(), odd=2, factor=10.0)
    assert alerts == [] and states[2].health is None
    assert bands  # bands are still written, with n = 3


def test_bands_are_quantiles_of_the_runs_at_each_step_and_grow_with_late_runs():
    states = _runs(4)
    _, bands = _drive(states, PeerFold(), lag=(3, 5))
    # Step 10: the first band (three runs), then the late run's with all four.
    at10 = [b for b in bands if b["step"] == 10 and b["figure"] == "mismatch_kl"]
    assert [b["n"] for b in at10] == [3, 4]
    want = band([_kl(i, 10, None) for i in range(4)])
    assert at10[-1] == {"cohort": "c", "step": 10, "figure": "mismatch_kl", "as_of": 1015.0, **want}
    assert want["p10"] < want["median"] < want["p90"]


def test_a_run_ahead_of_its_peers_waits_for_them():
    states = _runs(5)
    fold = PeerFold()
    _drive(states, fold, odd=4, steps=20, lag=(0, 8))
    # r0 is 8 steps behind: nobody else is judged past its last final step.
    assert states[0].final_through == 11
    assert all(st.peer_judged <= 11 for st in states)
    assert states[0].peer_judged == 11


def test_windows_stay_bounded():
    states = _runs(4)
    rules = DEFAULT_RULES
    _drive(states, PeerFold(rules), steps=rules.unlike_peers.window_steps + 30)
    assert all(len(st.peer_window) == rules.unlike_peers.window_steps for st in states)


def test_cohort_is_assigned_from_rules_when_the_config_names_none():
    st = RunState(run_id="seed-3", run_url="/sweeps/a/seed-3")
    PeerFold(cohort_rules=(("sweep-a", "sweeps/a/*"),)).fold([st], {}, 0.0)
    assert st.cohort == "sweep-a"
    st2 = RunState(run_id="x", run_url="/y", config={"experiment": "grader-v2"})
    PeerFold(cohort_rules=(("sweep-a", "*"),)).fold([st2], {}, 0.0)
    assert st2.cohort == "grader-v2"


def test_a_run_that_started_far_behind_does_not_hold_the_others_back():
    states = _runs(5)
    fold = PeerFold()
    wait = DEFAULT_RULES.unlike_peers.wait_steps
    _drive(states, fold, steps=wait + 20, lag=(4, wait + 10))
    # r4 is past the wait: the others are judged up to their own last final step.
    assert states[4].final_through == 9
    assert all(st.peer_judged == wait + 19 for st in states[:4])


def test_the_runs_of_a_cohort_go_to_one_tailer(tmp_path):
    import json

    from rlstream.io.storage import Storage
    from rlstream.pipeline.shards import Sharder
    from rlstream.pipeline.verdicts import HealthHooks

    urls = []
    for i in range(24):
        run = tmp_path / f"run-{i:02d}"
        run.mkdir()
        config = {"experiment": f"exp-{i % 3}", "seed": i}
        (run / "run.json").write_text(json.dumps({"run_id": f"r{i}", "config": config}))
        urls.append(run.as_posix())
    (tmp_path / "broken").mkdir()  # no run.json yet: sharded by its URL
    urls.append((tmp_path / "broken").as_posix())
    storage = Storage.for_url(tmp_path.as_posix())
    shards = Sharder(storage, HealthHooks(), 4).split(urls)
    assert sorted(u for s in shards for u in s) == sorted(urls)
    for k in range(3):
        owners = [
            i
            for i, s in enumerate(shards)
            if any(u[-2:].isdigit() and int(u[-2:]) % 3 == k for u in s)
        ]
        assert len(owners) == 1, (k, owners)
    # Without a cohort function (a bare hooks factory) runs are spread by URL.
    assert sum(map(len, Sharder(storage, dict, 4).split(urls))) == len(urls)


def test_analyze_reads_a_cohort_in_one_chunk(tmp_path):
    import json

    from rlstream.io.storage import Storage
    from rlstream.pipeline.shards import cohort_chunks

    urls = []
    for i in range(7):
        run = tmp_path / f"run-{i}"
        run.mkdir()
        meta = {"run_id": f"r{i}", "config": {"experiment": f"e{i % 3}"}}
        (run / "run.json").write_text(json.dumps(meta))
        urls.append(run.as_posix())
    urls.append((tmp_path / "gone").as_posix())  # no run.json: last, alone
    fold = PeerFold()
    chunks = cohort_chunks(Storage.for_url(tmp_path.as_posix()), urls, fold.cohort, 2)
    names = [[u.rsplit("/", 1)[1] for u in c] for c in chunks]
    assert names == [["run-0", "run-3", "run-6"], ["run-1", "run-4"], ["run-2", "run-5"], ["gone"]]


def test_a_restored_run_is_regrouped_by_this_processs_rules():
    # Its resume state says "old"; this process's --cohort rules say otherwise, as
    # sharding and chunking (computed afresh) do.
    st = RunState(run_id="seed-3", run_url="/sweeps/a/seed-3", cohort="old")
    fold = PeerFold(cohort_rules=(("sweep-a", "sweeps/a/*"),))
    fold.fold([st], {}, 0.0)
    assert st.cohort == "sweep-a"
    st.cohort = "changed"  # computed once per process, not at every poll
    fold.fold([st], {}, 1.0)
    assert st.cohort == "changed"


def test_another_trainers_runs_are_chunked_by_cohort(tmp_path):
    from rlstream.io.storage import Storage
    from rlstream.pipeline.discover import find_runs
    from rlstream.pipeline.shards import cohort_chunks, cohort_key
    from rlstream.simulate import SimConfig, simulate
    from rlstream.simulate.trainers import convert_tree

    simulate(tmp_path / "loops", SimConfig(runs=4, steps=3, seed=5, cohort_size=4))
    convert_tree(tmp_path / "loops", tmp_path / "tinker", "tinker")
    storage = Storage.for_url(str(tmp_path / "tinker"), {})
    urls = find_runs(storage, str(tmp_path / "tinker"))
    fold = PeerFold()
    keys = {cohort_key(storage, u, fold.cohort) for u in urls}
    assert len(urls) == 4 and len(keys) == 1 and None not in keys  # one recipe, one cohort
    assert cohort_chunks(storage, urls, fold.cohort, 2) == [sorted(urls)]


class _Afresh(PeerFold):
    """Every member's arrays rebuilt at every poll (nothing kept between polls)."""

    def fold(self, states, new_rows, now):
        for members in self.members.values():
            for m in members.values():
                m._cache = []
        return super().fold(states, new_rows, now)


def test_kept_window_arrays_give_what_rebuilding_them_gives():
    """Runs finalize at different paces (some polls leave a run's window unchanged),
    windows are cut from the front (window_steps 24), one run drifts: the bands and
    alerts are those of a fold that rebuilds every window's arrays at every poll."""
    from dataclasses import replace

    rules = replace(
        DEFAULT_RULES, unlike_peers=replace(DEFAULT_RULES.unlike_peers, window_steps=24)
    )
    got = []
    for fold in (PeerFold(rules), _Afresh(rules)):
        states = _runs(6)
        alerts, bands = [], []
        done = [0] * len(states)
        for poll in range(320):
            rows = {}
            for i, st in enumerate(states):
                if poll % (1 + i % 3) or done[i] >= 100:
                    continue  # this run finalized nothing in this poll
                t = done[i]
                done[i] += 1
                rows[st.run_url] = [{"step": t, "mismatch_kl": _kl(i, t, odd=4)}]
                st.final_through = t
                st.counters["steps_final"] += 1
            fold.fold(states, rows, now=1000.0 + poll)
            for st in states:
                alerts += st.out.pop("alerts", [])
                bands += st.out.pop("cohorts", [])
        assert all(len(st.peer_window) <= 24 for st in states)
        got.append((alerts, bands))
    assert any(a["to_state"] == "firing" for a in got[0][0])  # the drift was judged
    assert len(got[0][1]) > 100
    assert got[0] == got[1]


def test_smoothed_windows_kept_across_polls_equal_smoothing_them_afresh():
    """A run's window grows by 0-5 rows a poll (some values missing) and is cut to its
    last 30: its smoothed figures, kept and extended poll after poll, equal those of
    its whole window smoothed afresh, bit for bit."""
    from rlstream.pipeline.cohorts import _Member
    from rlstream.pipeline.rolling import rolling

    rng = np.random.default_rng(7)
    st = RunState(run_id="r", run_url="/runs/r")
    m, step, extended = _Member(st), 0, 0
    for _ in range(120):
        for _ in range(int(rng.integers(0, 6))):
            vals = [None if rng.random() < 0.2 else float(rng.normal()) for _ in range(3)]
            st.peer_window.append([step, *vals])
            step += 1
        del st.peer_window[:-30]
        if not st.peer_window:
            continue
        extended += bool(m._cache and m._cache[0] is st.peer_window)
        (steps, vals), where = m.arrays(3)
        med, se = m.smooth(3, 10)
        want = np.array([[np.nan if v is None else v for v in r] for r in st.peer_window])
        assert steps.tolist() == [r[0] for r in st.peer_window]
        assert where == {s: i for i, s in enumerate(steps.tolist())}
        np.testing.assert_array_equal(vals, want[:, 1:])
        wmed, wse = rolling(want[:, 1:], 10)
        np.testing.assert_array_equal(med, wmed)
        np.testing.assert_array_equal(se, wse)
    assert extended > 50


def test_rolling_medians_are_numpys_nanmedian():
    """The rolling medians and MADs (sorted values, NaN last) are the floats
    `np.nanmedian` gives, windows with no value, one, an odd and an even count."""
    from rlstream.pipeline.rolling import nanmedian

    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 10):
        win = rng.normal(size=(200, 4, n))
        win[rng.random(win.shape) < 0.35] = np.nan
        win[0, 0] = np.nan
        count = np.sum(~np.isnan(win), axis=-1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the all-NaN windows
            want = np.nanmedian(win, axis=-1)
        np.testing.assert_array_equal(nanmedian(win, count), want)
