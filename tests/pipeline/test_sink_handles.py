"""The sink opens each Delta table once and keeps the handle: later appends and txn
reads catch up with the log (other writers' commits included) instead of replaying
it; a pickled sink carries no handle; a failed append, or an idle spell of half the
retention, makes it open the table again."""

from __future__ import annotations

import pickle
import time

import deltalake
import pyarrow as pa
import pytest

from rlstream.io.storage import Storage
from rlstream.sinks.delta import DeltaSink


def _sink(tmp_path) -> DeltaSink:
    out = str(tmp_path / "out")
    return DeltaSink(out, Storage.for_url(out), fsync=False)


def test_one_handle_per_table_sees_other_writers(tmp_path, monkeypatch):
    opened: list[str] = []
    real = deltalake.DeltaTable

    class Counting(real):  # type: ignore[misc,valid-type]
        def __init__(self, uri, *a, **k):
            opened.append(str(uri))
            super().__init__(uri, *a, **k)

    monkeypatch.setattr(deltalake, "DeltaTable", Counting)
    a, b = _sink(tmp_path), _sink(tmp_path)
    rows = pa.table({"run_id": ["r"], "step": [0]})
    a.append("steps", rows, {"rlstream:r": 1})  # creates the table
    for v in range(2, 7):
        a.append("steps", rows, {"rlstream:r": v})
    b.append("steps", rows, {"rlstream:other": 9})  # another writer
    assert a.txn_versions("steps", ["rlstream:r", "rlstream:other", "x"]) == {
        "rlstream:r": 6,
        "rlstream:other": 9,
        "x": None,
    }
    # a: one look before the table existed, then its handle, once; b: its handle
    assert len(opened) == 3
    assert a.handle("steps").version() == 6
    assert pickle.loads(pickle.dumps(a))._handles == {}


def test_a_failed_append_drops_the_handle(tmp_path):
    sink = _sink(tmp_path)
    sink.append("steps", pa.table({"run_id": ["r"], "step": [0]}), {"rlstream:r": 1})
    first = sink.handle("steps")
    with pytest.raises(Exception, match=r"(?i)schema|cast|type"):
        sink.append("steps", pa.table({"run_id": ["r"], "step": ["not a number"]}), {})
    assert "steps" not in sink._handles
    again = sink.handle("steps")
    assert again is not first and again.transaction_version("rlstream:r") == 1
    assert sink.handle("steps") is again
    # idle for the retention: opened afresh (log cleanup may have run meanwhile)
    sink._handles["steps"] = (again, time.monotonic() - sink.retention_seconds)
    assert sink.handle("steps") is not again
