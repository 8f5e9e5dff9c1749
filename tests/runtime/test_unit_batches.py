"""`WorkerPool` sends many waiting units in few calls, each result yielded once, and
one unit's error fails that unit only (`run_unit`)."""

from __future__ import annotations

from dataclasses import dataclass

import ray

from rlstream.pipeline.work import UnitFailure
from rlstream.runtime.executors import MAX_BATCH, WorkerPool, run_unit


@dataclass(frozen=True)
class FakeUnit:
    run_id: str
    n: int


@ray.remote
class Echo:
    """A worker that answers each unit with its number and records its calls' sizes."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def execute_many(self, units):
        self.calls.append(len(units))
        return [u.n for u in units]

    def sizes(self):
        return self.calls


def test_many_waiting_units_go_in_few_calls_each_result_once(ray_session):
    pool = [Echo.remote(), Echo.remote()]
    wp = WorkerPool(None, lambda: pool, max_inflight=16)
    got = list(wp([FakeUnit("r", i) for i in range(50)]))
    assert sorted(got) == list(range(50))
    assert wp.counts == {"here": 0, "workers": 50}
    sizes = [s for w in pool for s in ray.get(w.sizes.remote())]
    assert sum(sizes) == 50
    # 16 in flight over 2 workers, two calls each: 4 units a call while many wait,
    # single units once few are left.
    assert max(sizes) == 4 <= MAX_BATCH
    assert len(sizes) < 25
    # A short queue is sent a unit at a time, as before.
    few = WorkerPool(None, lambda: pool, max_inflight=16)
    assert sorted(few([FakeUnit("r", i) for i in range(3)])) == [0, 1, 2]
    assert sum(ray.get(w.sizes.remote())[-1] == 1 for w in pool) == 2


class Broken:
    """Storage whose every read fails."""

    is_local = True

    def __getattr__(self, name):
        def fail(*a, **k):
            raise OSError("disk gone")

        return fail


def test_a_unit_that_raises_is_its_own_failure(tmp_path):
    from rlstream.pipeline.work import TranscriptsUnit

    unit = TranscriptsUnit(run_id="r", run_url=str(tmp_path), names=("a.json",), final_through=0)
    res = run_unit(unit, Broken(), "a test")
    assert isinstance(res, UnitFailure) and res.unit is unit
    assert "disk gone" in res.error
