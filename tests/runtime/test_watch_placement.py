"""Where `watch` runs on one machine (runtime/load.py, docs/runtime.md "Where watch
runs"): in the driver while its polls and commits take at most a share of a core
over a window, with no Ray at all, finding runs that appear; on a private Ray once
the measured share is above it, the runs handed over exactly once. The tables equal
`analyze` on the finished runs either way."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local
from rlstream.pipeline.outcome import Outcome
from rlstream.runtime import held
from rlstream.runtime.driver import RuntimeConfig
from rlstream.runtime.driver import run as run_pipeline
from rlstream.runtime.load import DriverLoad, WatchPlacement
from rlstream.simulate import SimConfig, simulate_live
from tests.runtime.helpers import assert_same_rows, read_steps


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0
        self.cpu = 0.0

    def work(self, seconds: float, cpu: float) -> None:
        self.t += seconds
        self.cpu += cpu


def test_the_share_is_cpu_inside_the_blocks_over_the_last_whole_window():
    c = FakeClock()
    load = DriverLoad(10.0, clock=lambda: c.t, cpu=lambda: c.cpu)
    assert load.share() is None  # nothing measured yet
    for _ in range(9):  # 9 s: a poll taking 0.5 s of CPU each second
        with load.measure():
            c.work(0.6, 0.5)
        c.work(0.4, 0.0)  # the pause: not measured, whatever the process does
        c.cpu += 0.3  # another thread's CPU between the blocks does not count
    assert load.share() is None  # not a whole window yet
    with load.measure():
        c.work(0.6, 0.5)
    c.work(0.4, 0.0)
    assert load.share() == pytest.approx(10 * 0.5 / 10.0)
    for _ in range(10):  # the next 10 s are idle polls: 0.01 s of CPU each
        with load.measure():
            c.work(0.1, 0.01)
        c.work(0.9, 0.0)
    assert load.share() == pytest.approx(10 * 0.01 / 10.0)  # the busy window has gone


def test_a_placement_outside_its_range_is_refused():
    with pytest.raises(ValueError, match="ray_above >= 0 and window_seconds > 0"):
        WatchPlacement(ray_above=-0.1)
    with pytest.raises(ValueError, match="ray_above >= 0 and window_seconds > 0"):
        WatchPlacement(window_seconds=0)


MADE: list = []


class Watched(held.HeldRuns):
    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        MADE.append(self)


def _live(root, runs: int, steps: int, seed: int) -> threading.Thread:
    cfg = SimConfig(runs=runs, steps=steps, scenarios=("healthy", "low_ess"), seed=seed)
    writer = threading.Thread(target=simulate_live, args=(root, cfg, 0.15))
    writer.start()
    return writer


def test_a_light_watch_stays_in_the_driver_without_ray_and_finds_new_runs(
    no_ray, tmp_path, monkeypatch
):
    """`no_ray`: starting or joining Ray fails the test. The share is measured over
    short windows and never reaches a threshold no process can reach."""
    MADE.clear()
    monkeypatch.setattr(held, "HeldRuns", Watched)
    root, out = tmp_path / "runs", tmp_path / "out"
    writers = [_live(root / "a", 2, 10, 41)]
    deadline = time.monotonic() + 300
    while len(list(root.glob("a/*/run.json"))) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)

    def stop() -> bool:
        assert time.monotonic() < deadline, "the watch did not reach the batch tables in time"
        if len(writers) == 1 and (out / "steps").exists():
            writers.append(_live(root / "b", 2, 6, 42))  # runs that appear later
        if len(writers) < 2 or any(w.is_alive() for w in writers):
            return False
        return (out / "steps").exists() and len(read_steps(out)) == 2 * 10 + 2 * 6

    cfg = PipelineConfig(poll_seconds=0.1, commit_seconds=0.3, transcripts_per_unit=4)
    never = WatchPlacement(ray_above=1e6, window_seconds=0.5)
    rt = RuntimeConfig(early_start=True, discover_every_seconds=0.3, watch=never)
    outcome = Outcome()
    summaries = run_pipeline([str(root)], str(out), cfg, rt, watch=True, stop=stop, outcome=outcome)
    w = MADE[0]
    assert w.pool.counts["here"] > 0
    assert sum(n for k, n in w.pool.counts.items() if k != "here") == 0  # all of them here
    assert w.start.phases.get("skipped") is not None  # the start never began
    assert "Ray asked for" not in w.phases.marks and "handed over" not in w.phases.marks
    assert len(summaries) == 4
    assert all(s["finished"] and s["quarantined"] == 0 and s["late"] == 0 for s in summaries)
    assert w.peak_share is not None and 0 < w.peak_share < 1e6
    assert outcome.where == (
        f"watched in this process (its polls and commits took at most "
        f"{100 * w.peak_share:.0f} % of a core over 0.5 s; a private Ray starts above "
        "100000000 %)"
    )
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch = read_steps(tmp_path / "batch")
    assert len(batch) == 32
    assert_same_rows(batch, read_steps(out))


@pytest.mark.ray
def test_a_watch_above_the_share_moves_to_ray_exactly_once(
    ray_session, tmp_path, monkeypatch, caplog
):
    """A share of 0 is passed by the first whole window: Ray (the session's, joined
    as a start would start its own) and the tailers come up, and the runs are handed
    over through their resume states."""
    MADE.clear()
    monkeypatch.setattr(held, "HeldRuns", Watched)
    caplog.set_level(logging.INFO, logger="rlstream")
    root, out = tmp_path / "runs", tmp_path / "out"
    writer = _live(root, 3, 16, 43)
    deadline = time.monotonic() + 300
    while len(list(root.glob("*/run.json"))) < 3:
        assert time.monotonic() < deadline and writer.is_alive()
        time.sleep(0.02)

    def stop() -> bool:
        assert time.monotonic() < deadline, "the watch did not reach the batch tables in time"
        if writer.is_alive() or "handed over" not in MADE[0].phases.marks:
            return False
        return (out / "steps").exists() and len(read_steps(out)) == 3 * 16

    cfg = PipelineConfig(poll_seconds=0.1, commit_seconds=0.3, transcripts_per_unit=4)
    at_once = WatchPlacement(ray_above=0.0, window_seconds=0.5)
    rt = RuntimeConfig(workers=1, tailers=2, early_start=True, watch=at_once)
    outcome = Outcome()
    summaries = run_pipeline([str(root)], str(out), cfg, rt, watch=True, stop=stop, outcome=outcome)
    writer.join()
    w = MADE[0]
    marks = w.phases.marks
    assert marks["first commit"] < marks["handed over"]
    assert marks["Ray asked for"] < marks["handed over"]
    assert w.pool.counts["here"] > 0  # units ran in the driver before Ray was asked for
    assert w.group.runs == {}  # the driver kept none of the runs
    assert w.why_ray is not None and w.why_ray.endswith("over the last 0.5 s, above 0 %")
    said = [r.getMessage() for r in caplog.records]
    assert f"starting a private Ray for the watch: {w.why_ray}" in said
    assert outcome.where == f"watched on a private Ray ({w.why_ray})"
    assert len(summaries) == 3
    assert all(s["finished"] and s["quarantined"] == 0 and s["late"] == 0 for s in summaries)
    analyze_local([str(root)], str(tmp_path / "batch"))
    batch = read_steps(tmp_path / "batch")
    assert len(batch) == 3 * 16
    assert_same_rows(batch, read_steps(out))


def test_watch_in_process_and_ray_contradict(tmp_path, capsys):
    from rlstream.cli import main
    from rlstream.simulate import simulate

    root = tmp_path / "runs"
    simulate(root, SimConfig(runs=1, steps=2, seed=1))
    code = main(["watch", str(root), "--out", str(tmp_path / "o"), "--in-process", "--ray"])
    assert code == 2
    assert "--in-process and --ray contradict" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_threaded_here_runs_units_at_once_and_yields_each_once(monkeypatch):
    """On an object store the driver runs units on threads (runtime/threaded.py): at
    most `threads` at once, each result once, a failure its own."""
    import rlstream.runtime.threaded as threaded
    from rlstream.pipeline.work import UnitFailure

    lock, now, most = threading.Lock(), [0], [0]
    release = threading.Event()

    def run_unit(unit, storage, where):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        if now[0] == 3:
            release.set()  # the third one in: all three threads were busy at once
        assert release.wait(60)  # the others wait, as on round trips
        with lock:
            now[0] -= 1
        return UnitFailure(unit, "boom") if unit == 7 else ("done", unit)

    monkeypatch.setattr(threaded, "run_unit", run_unit)

    class Store:
        fs = object()

    shown = []
    ex = threaded.ThreadedHere(
        Store(), threads=3, max_inflight=5, on_result=lambda: shown.append(1)
    )
    rest = list(ex(list(range(10))))
    ex.close()
    assert sorted(r for r in rest if isinstance(r, tuple)) == [
        ("done", u) for u in range(10) if u != 7
    ]
    assert [r.unit for r in rest if isinstance(r, UnitFailure)] == [7]
    assert ex.done == 10 and len(shown) == 10 and most[0] == 3
    assert threaded.here_threads(cores=2) == 2 * threaded.OBJECT_STORE_UNITS_PER_WORKER


@pytest.mark.s3
def test_a_watch_in_the_driver_on_s3_runs_units_on_threads(
    no_ray, s3_server, tmp_path, monkeypatch
):
    import os

    import boto3

    from rlstream.simulate import simulate

    MADE.clear()
    monkeypatch.setattr(held, "HeldRuns", Watched)
    bucket = f"rlw-{os.getpid()}-{abs(hash(os.urandom(4))) % 10**6}"
    client = boto3.client("s3", endpoint_url=s3_server)
    client.create_bucket(Bucket=bucket)
    simulate(tmp_path / "runs", SimConfig(runs=3, steps=6, scenarios=("healthy",), seed=44))
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            client.upload_file(str(path), bucket, f"fleet/{path.relative_to(tmp_path / 'runs')}")
    out = tmp_path / "out"
    cfg = PipelineConfig(poll_seconds=0.1, commit_seconds=0.2, transcripts_per_unit=4)
    never = WatchPlacement(ray_above=1e6)
    summaries = run_pipeline(
        [f"s3://{bucket}/fleet"],
        str(out),
        cfg,
        RuntimeConfig(early_start=True, watch=never),
        watch=True,
        exit_when_finished=True,
    )
    w = MADE[0]
    assert w.here is not None and w.here.threads == threaded_default()
    assert w.here.done > 3 * 6  # every unit ran on the driver's threads
    assert w.pool.counts["here"] == 0
    assert len(summaries) == 3 and all(s["finished"] for s in summaries)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "batch"))
    assert_same_rows(read_steps(tmp_path / "batch"), read_steps(out))


def threaded_default() -> int:
    from rlstream.runtime.threaded import here_threads

    return here_threads()
