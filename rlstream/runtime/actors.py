"""Ray actors: `Worker` runs work units; `Tailer` owns a shard of runs.

Both are thin: a Worker calls `rlstream.pipeline.work.execute`; a Tailer holds a
`RunGroup` and hands its units to the workers through the one dispatch
(`runtime.executors.WorkerPool`), folding each result once as it arrives. A Worker killed mid-unit is restarted by Ray
and the unit retried (`max_task_retries`); since the Tailer folds a unit's result
only when it receives it, a retry never counts data twice.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray

from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.commit import open_sink
from rlstream.pipeline.runner import RunGroup
from rlstream.pipeline.state import state_summary
from rlstream.pipeline.work import Unit, UnitFailure, UnitResult
from rlstream.runtime.executors import WorkerPool, run_unit
from rlstream.runtime.malloc import keep_heap

log = logging.getLogger("rlstream")


@ray.remote(max_restarts=-1, max_task_retries=3)
class Worker:
    """Reads the bytes of a unit itself, parses and aggregates them. Placed one per
    CPU across the nodes (`_RoundRobinNodes` below). Runs several units at once on
    object stores (`OBJECT_STORE_UNITS_PER_WORKER`, a threaded actor): `execute_many` keeps
    no state but a counter."""

    def __init__(self, storage: Storage) -> None:
        logging.basicConfig(level=logging.INFO)
        keep_heap()
        self.storage = storage
        self.done = 0

    def execute_many(self, units: list[Unit]) -> list[UnitResult | UnitFailure]:
        """`execute` of each unit in turn, in one call (a live poll's many small
        units would cost a round trip each). A unit that raises becomes its own
        `UnitFailure`; the others' results still count."""
        if self.done == 0:
            # One line per worker process, in its node's log folder and (forwarded by
            # Ray) in the driver's output: shows where the pool actually ran.
            i = self.info()
            log.info("worker pid %d on node %s (%s): first unit", i["pid"], i["node_id"], i["ip"])
        out = [run_unit(u, self.storage, f"worker pid {os.getpid()}") for u in units]
        self.done += len(units)
        return out

    def info(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {
            "pid": os.getpid(),
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "done": self.done,
        }


@ray.remote(num_cpus=0, max_restarts=-1, concurrency_groups={"progress": 1})
class Tailer:
    """Owns the runs whose key hashes to it: cursors, pending aggregates, commits."""

    def __init__(
        self,
        storage: Storage,
        out_url: str,
        out_storage: Storage,
        cfg: PipelineConfig,
        hooks_factory: Any = None,
    ) -> None:
        logging.basicConfig(level=logging.INFO)
        hooks = hooks_factory() if hooks_factory is not None else {}
        sink = open_sink(out_url, cfg, out_storage)
        self.group = RunGroup(storage, sink, cfg, **hooks)
        self.workers: list[Any] = []
        self.execute = WorkerPool(storage, lambda: self.workers, cfg.max_inflight_units)

    def set_workers(self, workers: list[Any]) -> None:
        """Worker handles come by a call, not the constructor: a restarted Tailer gets
        them again from the driver (constructor arguments would pin the object store)."""
        self.workers = workers

    def add_runs(self, urls: list[str]) -> list[str]:
        added = []
        for url in urls:
            if url not in self.group.runs and self.group.add_run(url) is not None:
                added.append(url)
        return added

    def analyze(self, urls: list[str]) -> list[dict[str, Any]]:
        """Batch mode over these runs, a chunk at a time (see RunGroup.analyze)."""
        return [state_summary(s) for s in self.group.analyze(urls, self.execute)]

    def run_urls(self) -> list[str]:
        return sorted(self.group.runs)

    def poll(self, final: bool = False) -> int:
        """One poll of every owned run; returns the number of new final rows."""
        return self.group.poll(self.execute, final=final)

    @ray.method(concurrency_group="progress")
    def progress(self) -> dict[str, int]:
        """Running totals, answered while `analyze` or `poll` runs: its own concurrency
        group, so it never overlaps anything but reads of two counters. Every other
        method runs one at a time, so no poll or commit ever overlaps another."""
        return {"runs": len(self.group.runs), **dict(self.group.totals)}

    def commit(self) -> int:
        return self.group.commit()

    def summaries(self) -> list[dict[str, Any]]:
        return [state_summary(s) for s in self.group.states()]

    def all_finished(self) -> bool:
        return self.group.all_finished()

    def tally(self) -> dict[str, Any]:
        """Rows written per table and runs rejected (`RunGroup.tally`)."""
        return self.group.tally()


class _Placed:
    """An actor class whose instances are placed by `where()` unless the caller says
    otherwise; used like the class: `X.options(...).remote(...)` or `X.remote(...)`."""

    def __init__(self, actor_class: Any, where: Any) -> None:
        self.actor_class = actor_class
        self.where = where

    def options(self, **kwargs: Any) -> Any:
        if "scheduling_strategy" not in kwargs:
            kwargs["scheduling_strategy"] = self.where()
        return self.actor_class.options(**kwargs)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.options().remote(*args, **kwargs)


class _RoundRobinNodes:
    """Actors go to the nodes in turn. Workers (`per_cpu`): the nodes with CPUs, each
    as often as it has CPUs (interleaved), so a pool of N workers lands on N CPUs
    spread over every node. Tailers: every alive node once per turn, the head
    included, so the fleet's tailing, folding and commits are spread too. Ray's own
    SPREAD is best effort: with actors that hold no CPU once placed it can put a
    whole pool on one node. Workers' affinity is soft: one restarted after its node
    died goes to a node that is alive. Tailers' is not (a soft one can land beside
    another while its node is alive): one whose node died cannot be restarted, and
    the driver puts a new one on a node that is alive, which resumes its runs from
    their resume states (`pools.ActorPools`)."""

    def __init__(self, per_cpu: bool, soft: bool = True) -> None:
        self.per_cpu = per_cpu
        self.soft = soft
        self.placed = 0

    def __call__(self) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus = {
            n["NodeID"]: int(n["Resources"].get("CPU", 0)) if self.per_cpu else 1
            for n in ray.nodes()
            if n["Alive"] and (n["Resources"].get("CPU", 0) >= 1 or not self.per_cpu)
        }
        slots = [
            nid
            for k in range(max(cpus.values(), default=0))
            for nid in sorted(cpus)
            if cpus[nid] > k
        ]
        if not slots:
            return "SPREAD"
        node = slots[self.placed % len(slots)]
        self.placed += 1
        if not self.per_cpu:
            log.info("a tailer goes to node %s (%d alive)", node, len(cpus))
        return NodeAffinitySchedulingStrategy(node_id=node, soft=self.soft)


Tailer = _Placed(Tailer, _RoundRobinNodes(per_cpu=False, soft=False))
Worker = _Placed(Worker, _RoundRobinNodes(per_cpu=True))
