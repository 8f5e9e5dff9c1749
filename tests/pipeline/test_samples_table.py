"""OUT/samples end to end: simulated runs analyzed in process, read back with DuckDB,
checked against a recomputation from the run files (rollouts.jsonl rewards and the
transcripts' text) as docs/schema.md defines the table."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from rlstream.config import PipelineConfig
from rlstream.metrics.scanners import SamplesConfig
from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate
from rlstream.simulate.text import SHORTCUTS
from tests.outputs import out_sql

SCEN = ("transcript_hack_flags", "healthy")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("samples")
    cfg = SimConfig(runs=2, steps=24, scenarios=SCEN, seed=3, groups=6, group_size=4)
    labels = simulate(base / "runs", cfg)
    analyze_local([str(base / "runs")], str(base / "out"))
    return base, {lab.run_id: lab for lab in labels}


def _files(base: Path, run_id: str) -> tuple[dict, dict]:
    """(rollouts by attempt, transcripts by attempt) of one run, read directly."""
    for d in (base / "runs").iterdir():
        if d.is_dir() and json.loads((d / "run.json").read_text())["run_id"] == run_id:
            rolls = {
                r["attempt_id"]: r
                for r in map(json.loads, (d / "rollouts.jsonl").read_text().splitlines())
            }
            trs = {p.stem: json.loads(p.read_text()) for p in (d / "transcripts").glob("*.json")}
            return rolls, trs
    raise AssertionError(run_id)


def _rows(out: Path) -> list[dict]:
    cols = "run_id, step, attempt_id, reward, kept, flags, returned, returned_bytes, transcript"
    q = f"select {cols} from samples order by run_id, step, attempt_id"
    return [dict(zip(cols.split(", "), r, strict=True)) for r in out_sql(out, q)]


def test_top_and_bottom_are_the_k_extreme_trained_attempts_of_each_step(fleet):
    base, labels = fleet
    rows = _rows(base / "out")
    for run_id in labels:
        rolls, _ = _files(base, run_id)
        by_step = defaultdict(list)
        for r in rolls.values():
            if r["trained"] and r["reward"] is not None:
                by_step[r["step"]].append(r)
        mine = [r for r in rows if r["run_id"] == run_id]
        assert {r["step"] for r in mine} == set(by_step)
        for step, atts in by_step.items():
            kept = [r for r in mine if r["step"] == step]
            assert len(kept) <= 3 * 4 + 4  # bounded whatever the step's size
            top = sorted(atts, key=lambda r: (-r["reward"], r["attempt_id"]))[:4]
            bottom = sorted(atts, key=lambda r: (r["reward"], r["attempt_id"]))[:4]
            assert sorted(r["attempt_id"] for r in kept if "top" in r["kept"]) == sorted(
                r["attempt_id"] for r in top
            )
            assert sorted(r["attempt_id"] for r in kept if "bottom" in r["kept"]) == sorted(
                r["attempt_id"] for r in bottom
            )
            for r in kept:
                assert r["reward"] == rolls[r["attempt_id"]]["reward"]
                assert r["transcript"] == f"transcripts/{r['attempt_id']}.json"


def test_flags_and_shares_match_the_text_of_every_transcript(fleet):
    base, labels = fleet
    rows = _rows(base / "out")
    steps = out_sql(
        base / "out",
        "select run_id, step, flagged_frac, flagged_high_frac, samples_scanned from steps",
    )
    for run_id, lab in labels.items():
        _, trs = _files(base, run_id)
        hacked = {
            a for a, t in trs.items() if any(s in t["generations"][-1]["text"] for s in SHORTCUTS)
        }
        mine = [r for r in rows if r["run_id"] == run_id]
        for r in mine:
            assert bool(r["flags"]) == (r["attempt_id"] in hacked), r
            if r["attempt_id"] in hacked:
                assert any(s[:20] in r["returned"] for s in SHORTCUTS)
        for rid, step, frac, high_frac, scanned in steps:
            if rid != run_id:
                continue
            at = [t for t in trs.values() if t["step"] == step]
            trained = [t for t in at if t["trains"]]
            high = [t for t in trained if (t.get("reward") or 0) >= 0.5]
            assert scanned == len(at)
            assert frac == pytest.approx(
                sum(t["attempt_id"] in hacked for t in trained) / len(trained)
            )
            if high:
                assert high_frac == pytest.approx(
                    sum(t["attempt_id"] in hacked for t in high) / len(high)
                )
        if lab.scenario == "healthy":
            assert not hacked and not any(r["flags"] for r in mine)
        else:
            assert hacked and all(trs[a]["step"] >= lab.onset_step for a in hacked)


def test_rerun_adds_no_sample_row_and_k_is_configurable(fleet, tmp_path):
    base, _ = fleet
    before = _rows(base / "out")
    analyze_local([str(base / "runs")], str(base / "out"))
    assert _rows(base / "out") == before
    cfg = PipelineConfig(samples=SamplesConfig(top=1, probes=0))
    analyze_local([str(base / "runs")], str(tmp_path / "out"), cfg)
    small = _rows(tmp_path / "out")
    per = defaultdict(list)
    for r in small:
        per[(r["run_id"], r["step"])].append(r)
    assert per and all(len(v) <= 3 for v in per.values())
    assert all(sum("top" in r["kept"] for r in v) == 1 for v in per.values())


def test_a_long_transcript_is_kept_as_a_bounded_excerpt_and_scanned_whole(tmp_path):
    """A 200 KB completion with an early exit in its middle: the kept row holds its
    head and tail (at most 8 KiB of what it returned) with the full size beside, and
    the scanners flagged it from the whole text, past what the excerpt keeps."""
    simulate(tmp_path / "runs", SimConfig(runs=1, steps=4, seed=5, groups=2, group_size=4))
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    rolls = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    pick = next(r for r in rolls if r["trained"] and r["reward"] == max(
        x["reward"] for x in rolls if x["trained"] and x["step"] == r["step"]))  # fmt: skip
    path = run / "transcripts" / f"{pick['attempt_id']}.json"
    doc = json.loads(path.read_text())
    filler = "def step(x):\n    return x + 1\n" * 3300  # about 100 KB each side
    long = filler + "import sys\nsys.exit(0)\n" + filler
    doc["generations"][-1]["text"] = long
    path.write_text(json.dumps(doc))
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    ((returned, size, flags, kept),) = out_sql(
        tmp_path / "out",
        "select returned, returned_bytes, flags, kept from samples "
        f"where attempt_id = '{pick['attempt_id']}'",
    )
    texts = [g["text"] for g in doc["generations"]]
    full = (
        texts[0]
        if len(texts) == 1
        else "\n".join(f"[call {i} returned]\n{t}" for i, t in enumerate(texts))
    )  # what its calls returned, as docs/schema.md renders several calls
    assert size == len(full.encode())  # the full size, though only an excerpt is kept
    assert len(returned.encode()) <= 8 << 10 and "bytes left out" in returned
    assert returned.startswith(full[:1000]) and returned.endswith(full[-1000:])
    assert "sys.exit(0)" not in returned and "early_exit" in flags and "top" in kept
