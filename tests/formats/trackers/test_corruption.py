"""Any single flipped byte: the readers do not crash, never invent a row, lose at most
the damaged record (TFRecord) or the rest of its 32 KiB block (LevelDB log), and
report an error at or before the damage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.formats.records import BadRecord
from rlstream.formats.trackers.framing import BLOCK
from rlstream.formats.trackers.swanlab import read_swanlab
from rlstream.formats.trackers.tensorboard import read_events
from tests.formats.trackers.helpers import FIXTURES, expected, points

TB = next(p for p in expected("tensorboard") if p.endswith(".first"))
TB_DATA = (FIXTURES / TB).read_bytes()
SWAN_DATA = (FIXTURES / expected("swanlab")["file"]).read_bytes()


@settings(max_examples=80, deadline=None)
@given(pos=st.integers(0, len(TB_DATA) - 1), bit=st.integers(0, 7))
def test_tfrecord_single_flip(pos, bit):
    data = bytearray(TB_DATA)
    data[pos] ^= 1 << bit
    got = read_events(bytes(data), final=True)
    whole = points(read_events(TB_DATA).rows)
    rows = points(got.rows)
    assert all(r in whole for r in rows)
    assert len(whole) - len(rows) <= 1
    assert got.errors and got.errors[0].offset <= pos
    assert got.cursor == len(TB_DATA)


@settings(max_examples=80, deadline=None)
@given(pos=st.integers(0, len(SWAN_DATA) - 1), bit=st.integers(0, 7))
def test_leveldb_single_flip(pos, bit):
    data = bytearray(SWAN_DATA)
    data[pos] ^= 1 << bit
    if pos < 7:
        with pytest.raises(BadRecord, match="not_swanlab"):
            read_swanlab(bytes(data))
        return
    got = read_swanlab(bytes(data), final=True)
    whole = points(read_swanlab(SWAN_DATA).rows)
    rows = points(got.rows)
    assert all(r in whole for r in rows)
    kept_after = [r for r in whole if r in rows]
    assert len(whole) - len(kept_after) <= BLOCK // 60  # rows per block, generously
    assert got.errors and got.errors[0].offset <= pos


def test_a_flip_in_block_padding_loses_nothing():
    from rlstream.formats.trackers.wandb import read_wandb

    data = (FIXTURES / expected("wandb")["file"]).read_bytes()
    pad = 3 * BLOCK - 5  # the fixture's chunks end 5 bytes before the third block ends
    assert data[pad : 3 * BLOCK] == bytes(5)
    flipped = bytearray(data)
    flipped[pad + 2] ^= 0x20
    assert read_wandb(bytes(flipped)).rows == read_wandb(data).rows
