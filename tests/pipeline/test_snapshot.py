"""The resume state's snapshot (`rlstream.pipeline.snapshot`, docs/runtime.md).

- every `RunState` field is persisted, derived or transient, and docs/runtime.md lists
  exactly the persisted ones;
- a state read back is equal on every persisted field, its derived fields (findings,
  firing, status, cohort, the format's writers) equal the ones of the state written,
  for runs of three writers (Loops, prime-rl, tensorboard) with findings firing;
- a state written by main before snapshots (version 1, `fixtures/resume_v1_mid_run.state`,
  see `fixtures/make_resume_v1.py` for the command) loads into the same snapshot the
  current code builds from the same run and poll, and continues with the same rows;
- a snapshot of a newer version is refused, naming the file and the way out;
- a restored run is polled at once, even a quiet one, so its status is derived before
  any commit writes its run_health row.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor
from rlstream.pipeline.resume import (
    MAGIC,
    ResumeStateError,
    _enc,
    decode,
    decode_state,
    encode,
    encode_state,
)
from rlstream.pipeline.snapshot import DERIVED, FIELDS, TRANSIENT, VERSION, snapshot
from rlstream.pipeline.state import RunState, finalize
from rlstream.pipeline.verdicts import HealthFold, health_hooks
from tests.pipeline.fixtures.make_resume_v1 import mid_run

FIXTURES = Path(__file__).parent / "fixtures"
DOCS = Path(__file__).parents[2] / "docs" / "runtime.md"


def _fields(state: RunState) -> dict:
    """The persisted fields as written (tagged JSON values: arrays and deques compare)."""
    return _enc(snapshot(state))


def test_every_field_is_persisted_derived_or_transient():
    names = {f.name for f in dataclasses.fields(RunState)}
    assert set(FIELDS) | DERIVED | TRANSIENT == names
    assert len(FIELDS) == len(set(FIELDS))
    assert not set(FIELDS) & (DERIVED | TRANSIENT) and not DERIVED & TRANSIENT


def test_docs_list_the_snapshot_fields_in_order():
    text = DOCS.read_text()
    section = text[text.index("## Resume state") :]
    section = section[: section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|$", section, re.M)
    assert [r[0] for r in rows] == list(FIELDS)
    assert all(r[1].strip() and len(r[2].strip()) > 10 for r in rows)  # a type, a meaning
    assert f'"snapshot": {VERSION}' in section


def _read(root: Path, out: Path) -> list[RunState]:
    group = build_group([str(root)], str(out), PipelineConfig(), **health_hooks())
    group.poll(local_executor(group.storage), now=1e10)  # not final: steps stay pending
    group.commit(now=1e10)
    return sorted(group.states(), key=lambda s: s.run_id)


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    from rlstream.simulate import SimConfig, simulate
    from rlstream.simulate.trainers import convert_tree

    tmp = tmp_path_factory.mktemp("snap")
    sim = SimConfig(runs=2, steps=40, scenarios=("rollout_failure_burst", "healthy"), seed=3)
    simulate(tmp / "loops", sim)
    out = {"loops": _read(tmp / "loops", tmp / "out-loops")}
    for fmt in ("prime-rl", "tensorboard"):
        convert_tree(tmp / "loops", tmp / fmt, fmt)
        out[fmt] = _read(tmp / fmt, tmp / f"out-{fmt}")
    return out


@pytest.mark.parametrize("fmt", ["loops", "prime-rl", "tensorboard"])
def test_round_trip_is_equal_on_every_persisted_field(states, fmt):
    assert len(states[fmt]) == 2
    assert any(s.firing for s in states[fmt])  # the burst fires
    for state in states[fmt]:
        assert state.format == fmt and state.health is not None and state.cohort
        data = encode_state(state)
        back = decode_state(data, "x", "y")
        assert _fields(back) == _fields(state)
        assert encode_state(back) == data
        assert set(decode(data, "x", "y")[1]) == set(FIELDS)  # nothing else written
        # Derived: recomputed on restore ...
        assert (back.parts, back.repeated_parts, back.spread) == (
            state.parts,
            state.repeated_parts,
            state.spread,
        )
        assert back.findings == state.findings and back.firing == state.firing
        assert {k: state.headline.get(k) for k in back.headline} == back.headline
        assert {"reward_trend", "_not_evaluable"} <= back.headline.keys()
        assert back.durable_seq == back.seq == state.seq
        # ... or by the next poll's hooks.
        assert back.status is None and back.cohort == ""
        HealthFold()(back, [], 1e10)
        assert back.status == state.status and back.headline == state.headline
        assert back.findings == state.findings and back.firing == state.firing
        health_hooks()["peers"].assign(back)
        assert back.cohort == state.cohort
        assert finalize(back, 10**6) == finalize(state, 10**6)
    assert any(s.spread for s in states["tensorboard"]) and states["prime-rl"][0].parts


def _path_free(fields: dict) -> dict:
    """Fields of one run read at another path: the URL, the files' identity on disk
    and the run_health signature (whose row names the URL) aside."""
    out = dict(fields, run_url=None, health_sig=None)

    def cursor(c):
        return {**c, "f": {**c["f"], "inode": None, "mtime": None}}

    out["run_json"] = cursor(out["run_json"])
    out["cursors"] = {k: cursor(c) for k, c in out["cursors"].items()}
    return out


def test_a_state_written_by_main_loads_as_the_current_snapshot(tmp_path):
    data = (FIXTURES / "resume_v1_mid_run.state").read_bytes()
    head, body = decode(data, "fixture", "y")
    assert "snapshot" not in head and "status" in body and "cohort" in body  # version 1
    old = decode_state(data, "fixture", "y")
    _, now = mid_run(tmp_path)
    # A pending step now also holds its rollouts lines' [reward, trained] until a
    # transcript without a reward takes one (`StepPartial.rewards`); main kept none.
    assert all(p.rewards and not p.unrated for p in now.pending.values())
    for p in now.pending.values():
        p.rewards = {}
    # The trend's points of main's state are the trained attempts' reward, not the
    # headline's (every attempt): dropped on restore, not mixed in.
    assert "_recent_rewards" in body["headline"]
    assert not {"_recent_rewards", "_recent_rewards_all"} & old.headline.keys()
    want = _path_free(_fields(now))
    assert want["headline"].pop("_recent_rewards_all")
    assert _path_free(_fields(old)) == want
    assert len(encode_state(old)) <= len(data)
    # Its derived fields come back as main had them.
    assert old.firing == body["firing"] and old.findings == body["findings"]
    HealthFold()(old, [], 100.0)
    assert old.status == body["status"] == now.status
    health_hooks()["peers"].assign(old)
    assert old.cohort == body["cohort"] == now.cohort
    rows = finalize(old, 10**6)
    assert rows and rows == finalize(now, 10**6)


def test_a_newer_snapshot_is_refused():
    data = encode({"run_id": "r", "seq": 1, "snapshot": VERSION + 1}, {"run_id": "r", "seq": 1})
    assert data.startswith(MAGIC)
    with pytest.raises(ResumeStateError, match=rf"OUT/r.*snapshot version {VERSION + 1}.*reset"):
        decode_state(data, "OUT/r", "rerun with --reset-run r")


def test_a_restored_quiet_run_gets_its_status_at_the_first_poll(tmp_path):
    """A run idle past `idle_backoff_seconds` is polled only now and then, but one just
    restored is due at once: its status is derived by that poll's health hook."""
    from tests.pipeline.runfiles import write_run

    write_run(tmp_path / "runs", steps=3, finished=False)
    cfg = PipelineConfig(idle_backoff_seconds=1.0, idle_poll_every=10**9)
    args = ([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    group = build_group(*args, **health_hooks())
    group.poll(local_executor(group.storage), now=100.0)
    group.commit(now=100.0)
    status = next(iter(group.states())).status
    assert status == "insufficient"
    again = build_group(*args, **health_hooks())
    back = next(iter(again.states()))
    assert back.status is None
    again.poll(local_executor(again.storage), now=102.0)
    assert back.status == status
    back.status = "x"  # once it has one, a quiet run waits its turn
    assert not again._due(back, 102.0)
