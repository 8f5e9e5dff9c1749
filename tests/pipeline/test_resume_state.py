"""Resume state: an explicit versioned encoding, never a pickle, O(1) in the run.

- any value the state may hold round-trips exactly (Hypothesis);
- a real mid-run state (pending partial aggregates with exact big-int sums, health
  deques, cursors) round-trips and gives the same rows when the run continues;
- a corrupt, hostile or other-version file is refused with an error naming the file
  and `--reset-run`, its run only is skipped (others go on), and `--reset-run` reads
  that run again without duplicating its rows;
- the transcript names kept are a bounded window; a name arriving below it is
  quarantined, not silently missed.
"""

from __future__ import annotations

import math
import pickle
from collections import Counter, deque
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import analyze_local, build_group, local_executor
from rlstream.pipeline.resume import (
    MAGIC,
    ResumeStateError,
    _dec,
    _enc,
    decode_state,
    encode,
    encode_state,
)
from rlstream.pipeline.state import finalize
from rlstream.pipeline.verdicts import health_hooks
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**2200), max_value=2**2200)
    | st.floats(allow_nan=False)
    | st.sampled_from([math.inf, -math.inf, -0.0])
    | st.text(max_size=8)
    | st.binary(max_size=16)
)
hashable = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.dictionaries(hashable, inner, max_size=4)
        | st.sets(hashable, max_size=4)
        | st.builds(lambda x: deque(x, maxlen=5), st.lists(inner, max_size=5))
        | st.builds(Counter, st.dictionaries(st.text(max_size=4), st.integers(), max_size=4))
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_every_value_round_trips_exactly(v):
    import orjson

    back = _dec(orjson.loads(orjson.dumps(_enc(v))))
    assert back == v and type(back) is type(v)
    if isinstance(v, deque):
        assert back.maxlen == v.maxlen


def test_numpy_arrays_and_nan_round_trip():
    for arr in (np.array([1, -(2**62)], np.int64), np.array([0.1, math.nan]), np.zeros(0)):
        back = _dec(_enc(arr))
        assert back.dtype == arr.dtype and np.array_equal(back, arr, equal_nan=True)
    assert math.isnan(_dec(_enc(math.nan)))


def _mid_run(tmp_path: Path):
    """A run read half-way: pending steps, cursors, health state."""
    run = write_run(tmp_path / "runs", steps=6, finished=False)
    lines = (run / "steps.jsonl").read_bytes().splitlines(keepends=True)
    (run / "steps.jsonl").write_bytes(b"".join(lines[:4]))
    cfg = PipelineConfig()
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg, **health_hooks())
    group.poll(local_executor(group.storage), now=100.0)
    group.commit(now=100.0)
    state = next(iter(group.states()))
    assert state.pending and state.health is not None and state.final_through >= 0
    return group, state


def test_mid_run_state_round_trips_and_continues_the_same(tmp_path):
    _, state = _mid_run(tmp_path)
    data = encode_state(state)
    assert data.startswith(MAGIC) and b"pickle" not in data
    back = decode_state(data, "x", "y")
    assert encode_state(back) == data  # field for field, exact sums included
    big = max(abs(p.agg.tokens.sum_k1) for p in state.pending.values() if p.agg.tokens)
    assert big > 2**53  # the exact sums really are big integers
    assert finalize(back, 10**6) == finalize(state, 10**6)


def test_state_is_bounded_and_keeps_no_name_set(tmp_path):
    write_run(tmp_path / "runs", steps=12)
    cfg = PipelineConfig(transcript_window=8)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    group.poll(local_executor(group.storage), final=True)
    state = next(iter(group.states()))
    assert len(state.names_window) == 8 and state.names_below == 12 * 4 - 8
    assert state.names_low == "a00000039.json"


def test_a_name_below_the_window_is_quarantined_not_missed(tmp_path):
    run = write_run(tmp_path / "runs", steps=12)
    cfg = PipelineConfig(transcript_window=8)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), cfg)
    execute = local_executor(group.storage)
    group.poll(execute, final=True)
    late = run / "transcripts" / "a00000001-late.json"  # sorts below names_low
    late.write_bytes((run / "transcripts" / "a00000001.json").read_bytes())
    group.poll(execute, final=True)
    group.poll(execute, final=True)  # reported once
    group.commit()
    rows = out_sql(tmp_path / "out", "select reason, detail from quarantine")
    assert [r[0] for r in rows] == ["transcript_below_window"]
    assert rows[0][1].startswith("1 transcripts appeared")
    assert next(iter(group.states())).counters["transcripts_below_window"] == 1


def _file(body: bytes, fmt: int = 1) -> bytes:
    """A state file with this JSON body, compressed as the writer does."""
    import pyarrow as pa

    head = f'{{"format": {fmt}, "rlstream": "x", "body": "zstd", "size": {len(body)}}}'
    return MAGIC + head.encode() + b"\n" + pa.Codec("zstd").compress(body, asbytes=True)


@pytest.mark.parametrize(
    "body",
    [
        b"garbage",
        _file(b"{}", fmt=99),
        _file(b'{"run_id": "run-a", "seq": 1, "run_json": {"$dc": "Popen"}}'),
        _file(b'{"run_id": "run-a", "seq": 1, "extra_field": 1}'),
        _file(b'{"run_id": "run-a", "seq": 1, "pending": {"$d": [[1, {"$x": 0}]]}}'),
        _file(b'{"run_id": "run-a", "seq": 1}')[:-3],  # truncated
        MAGIC + b'{"format": 1, "body": "zstd", "size": 99999999999}\nxx',
        None,  # a pickle that would run code if it were loaded
    ],
)
def test_bad_state_is_refused_and_only_its_run_stops(tmp_path, body):
    write_run(tmp_path / "runs", name="run-a", steps=2)
    write_run(tmp_path / "runs", name="run-b", steps=2)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    path = tmp_path / "out" / "_resume" / "run_id=run-a.state"
    marker = tmp_path / "pwned"
    if body is None:

        class Evil:
            def __reduce__(self):
                return (Path.touch, (marker,))

        body = pickle.dumps(Evil())
    path.write_bytes(body)
    with pytest.raises(ResumeStateError) as e:
        decode_state(body, str(path), "rerun with --reset-run run-a")
    assert str(path) in str(e.value) and "--reset-run run-a" in str(e.value)
    (tmp_path / "runs" / "run-b" / "steps.jsonl").open("a").write("")
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    assert [s.run_id for s in group.states()] == ["run-b"]  # run-b goes on
    group.commit()
    q = out_sql(tmp_path / "out", "select run_id, reason, detail from quarantine")
    assert [(r[0], r[1]) for r in q] == [("_rejected", "bad_resume_state")]
    assert "--reset-run run-a" in q[0][2]
    assert not marker.exists()


def test_reset_run_reads_it_again_without_duplicates(tmp_path):
    write_run(tmp_path / "runs", name="run-a", steps=3)
    analyze_local([str(tmp_path / "runs")], str(tmp_path / "out"))
    path = tmp_path / "out" / "_resume" / "run_id=run-a.state"
    path.write_bytes(b"corrupt")
    analyze_local(
        [str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig(reset_runs=("run-a",))
    )
    steps = out_sql(tmp_path / "out", "select run_id, step from steps order by step")
    assert steps == [("run-a", 0), ("run-a", 1), ("run-a", 2)]
    assert list((tmp_path / "out" / "_resume").glob("run_id=run-a.state.aside-*"))
    assert decode_state(path.read_bytes(), "x", "y").seq > 1  # above the old txn versions


def test_header_names_format_and_version():
    data = encode({"run_id": "r", "seq": 3}, {})
    head = data[len(MAGIC) :].split(b"\n", 1)[0]
    assert b'"format":1' in head and b'"rlstream":' in head and b'"seq":3' in head


def test_a_state_of_the_outbox_protocol_loads_only_without_rows():
    """An earlier rlstream kept its last commit's rows in the state (an outbox): an
    empty one loads (the fields are dropped); one holding rows is refused, saying what
    to do, since they may not be in the tables."""
    empty = _file(b'{"run_id": "run-a", "run_url": "u", "seq": 3, "outbox": {}, "outbox_seq": 3}')
    state = decode_state(empty, "x", "y")
    assert (state.run_id, state.seq, state.durable_seq) == ("run-a", 3, 3)
    full = _file(b'{"run_id": "run-a", "seq": 3, "outbox": {"steps": {"$b": "AA=="}}}')
    with pytest.raises(ResumeStateError, match=r"outbox.*analyze.*--reset-run run-a"):
        decode_state(full, "x", "rerun with --reset-run run-a")


def test_a_cursor_written_before_the_rename_resumes_at_its_position():
    """A state written when `FileCursor.position` was called `offset` reads back with
    the same position; a state is written with the new name only."""
    from rlstream.io.tail import FileCursor

    old = {"$dc": "FileCursor", "f": {"offset": 123, "size": 130, "check": {"$b": "AA=="}}}
    cur = _dec(old)
    assert cur == FileCursor(position=123, size=130, check=b"\x00")
    assert set(_enc(cur)["f"]) >= {"position"} and "offset" not in _enc(cur)["f"]


def test_a_run_encoded_with_its_memo_gives_the_bytes_encoded_afresh():
    """The health history's rows and evals are encoded once and kept in the run's memo: commit after commit, while rows are appended and
    the oldest leave the window, the file is byte for byte the one encoded without."""
    from rlstream.health import DEFAULT_RULES, RunContext, fold_step, new_state
    from rlstream.pipeline.resume import Memo
    from rlstream.pipeline.state import RunState

    state = RunState(run_id="r", run_url="/runs/r")
    hs, ctx, memo = new_state(DEFAULT_RULES, "r"), RunContext("r", {}, False), Memo()
    for step in range(150):
        row = {"step": step, "time": 10.0 * step, "reward_mean": 0.01 * (step % 7)}
        row["reported_eval"] = {"held_out": 0.5 + 0.001 * step}
        hs, _ = fold_step(hs, row, ctx, DEFAULT_RULES)
        state.health, state.seq = hs, step
        if step % 3:
            continue
        assert encode_state(state, memo) == encode_state(state)
        assert len(memo.kept) <= 2 * hs.window + 1  # the rows and evals held now
    assert decode_state(encode_state(state, memo), "x", "y").health == hs
