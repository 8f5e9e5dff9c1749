"""Everything sent to or kept by an actor pickles: storage, units, results, run state,
exceptions (STYLE: "everything sent to an actor pickles; exceptions too")."""

from __future__ import annotations

import pickle

import pytest

from rlstream.config import PipelineConfig
from rlstream.errors import CheckpointError, ConfigError, RlstreamError, StorageError
from rlstream.io.storage import Storage
from rlstream.pipeline.local import build_group, local_executor
from rlstream.pipeline.work import LinesUnit, TranscriptsUnit, execute
from tests.pipeline.runfiles import write_run


@pytest.mark.parametrize("exc", [RlstreamError, ConfigError, StorageError, CheckpointError])
def test_exceptions_round_trip(exc):
    e = pickle.loads(pickle.dumps(exc("what happened; what to do")))
    assert type(e) is exc and str(e) == "what happened; what to do"
    assert isinstance(e, RlstreamError)


def test_storage_pickles_without_its_filesystem():
    st = Storage.for_url("s3://bucket/x", {"endpoint_url": "http://127.0.0.1:1"})
    _ = st.fs  # opened in this process
    back = pickle.loads(pickle.dumps(st))
    assert back == st and back._fs is None


def test_units_results_and_state_round_trip(tmp_path):
    write_run(tmp_path / "runs", steps=2)
    group = build_group([str(tmp_path / "runs")], str(tmp_path / "out"), PipelineConfig())
    state = next(iter(group.states()))
    units = group.plan(state)
    assert {type(u) for u in units} == {LinesUnit, TranscriptsUnit}
    results = [execute(pickle.loads(pickle.dumps(u)), group.storage) for u in units]
    again = [pickle.loads(pickle.dumps(r)) for r in results]
    assert [r.partials.keys() for r in again] == [r.partials.keys() for r in results]
    group.poll(local_executor(group.storage), final=True)
    assert len(state.names_window) == 8  # listed again: the first plan's units were never folded
    back = pickle.loads(pickle.dumps(state))
    assert back.cursors == state.cursors and back.names_window == state.names_window
    assert back.out == state.out and len(back.out["steps"]) == 2
