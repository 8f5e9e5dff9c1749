"""Live mode writes what non-live writes (apart from times), the way a trainer does."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import orjson

from rlstream.simulate import SimConfig, simulate, simulate_live
from tests.simulate import simreader as rd

CFG = SimConfig(
    runs=3,
    steps=6,
    scenarios=("healthy", "stalled", "rollout_failure_burst"),
    seed=21,
    topk=2,
    onset_frac=0.5,
)
TIME_KEYS = {"time", "created_at", "finished_at"}


def without_times(path: Path) -> list:
    if path.suffix == ".jsonl":
        return [{k: v for k, v in r.items() if k not in TIME_KEYS} for r in rd.read_jsonl(path)]
    doc = orjson.loads(path.read_bytes())
    return [{k: v for k, v in doc.items() if k not in TIME_KEYS}]


def test_live_same_content_as_non_live(tmp_path: Path) -> None:
    start = time.time()
    simulate_live(tmp_path / "live", CFG, interval=0.01, split_prob=0.5)
    simulate(tmp_path / "batch", CFG)
    live, batch = tmp_path / "live", tmp_path / "batch"
    files = sorted(p.relative_to(batch) for p in batch.rglob("*") if p.is_file())
    assert sorted(p.relative_to(live) for p in live.rglob("*") if p.is_file()) == files
    for rel in files:
        if rel.name == "labels.json" or rel.parts[-2] == "transcripts":
            assert (live / rel).read_bytes() == (batch / rel).read_bytes(), rel
        else:
            assert without_times(live / rel) == without_times(batch / rel), rel
    d = live / "run-000-healthy"
    times = [r["time"] for r in rd.read_jsonl(d / "steps.jsonl")]
    assert times == sorted(times) and start <= times[0] <= times[-1] <= time.time()
    run = orjson.loads((d / "run.json").read_bytes())
    assert run["created_at"] <= times[0] <= times[-1] <= run["finished_at"]
    assert "finished_at" not in orjson.loads((live / "run-001-stalled" / "run.json").read_bytes())


class FakeClock:
    """Virtual time; every sleep first records what a reader would see on disk."""

    def __init__(self, root: Path) -> None:
        self.now = 2_000_000_000.0
        self.root = root
        self.seen: list[tuple[Path, bytes, set[str]]] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        for d in self.root.glob("run-*"):
            names = {p.name for p in (d / "transcripts").iterdir()}
            for name in ("steps.jsonl", "rollouts.jsonl"):
                if (d / name).exists():
                    self.seen.append((d / name, (d / name).read_bytes(), names))
        self.now += seconds


def test_live_appends_prefixes_with_half_lines(tmp_path: Path) -> None:
    clock = FakeClock(tmp_path)
    simulate_live(tmp_path, CFG, interval=30.0, split_prob=0.3, clock=clock.time, sleep=clock.sleep)
    assert len(clock.seen) > 100
    half = 0
    for path, data, transcripts in clock.seen:
        final = path.read_bytes()
        assert final.startswith(data), path
        if data and not data.endswith(b"\n"):
            half += 1
        if path.name == "rollouts.jsonl":
            # A rollouts line only ever refers to a transcript already complete.
            for line in data.splitlines()[: data.count(b"\n")]:
                assert orjson.loads(line)["attempt_id"] + ".json" in transcripts
    assert half >= 3
    steps = rd.steps(tmp_path / "run-000-healthy")
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(steps)]
    assert all(10.0 < g < 65.0 for g in gaps)  # about one interval per step
