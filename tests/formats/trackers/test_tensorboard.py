"""TensorBoard reader against files written by tensorboardX and tensorboard, checked by
tensorboard's own reader (expected_tensorboard.json, gen_tensorboard.py)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.formats.trackers.common import merge_steps
from rlstream.formats.trackers.tensorboard import read_events
from rlstream.formats.trackers.wire import crc32c
from tests.formats.trackers.helpers import FIXTURES, expected, points, read_in_pieces

EXPECTED = expected("tensorboard")
FIRST = next(p for p in EXPECTED if p.endswith(".first"))
TENSOR = next(p for p in EXPECTED if "/tensor/" in p)


def test_crc32c_known_vectors():
    # RFC 3720 B.4 test vectors.
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43


@pytest.mark.parametrize("path", sorted(EXPECTED))
def test_every_fixture_matches_tensorboards_reader(path):
    data = (FIXTURES / path).read_bytes()
    got = read_events(data)
    assert points(got.rows) == EXPECTED[path]
    assert got.errors == []
    assert got.cursor == len(data)


def test_simple_value_and_tensor_scalars_are_both_read():
    first = read_events((FIXTURES / FIRST).read_bytes())
    assert first.rows[7 * 3] == {
        "step": 7,
        "time": 1764000007.0,
        "train/loss": pytest.approx(float("nan"), nan_ok=True),
    }
    tensor = merge_steps(read_events((FIXTURES / TENSOR).read_bytes()).rows)
    assert [r["step"] for r in tensor] == list(range(25))
    assert tensor[3]["actor/entropy"] == pytest.approx(0.91, rel=1e-6)


def test_restart_files_relog_steps_and_the_newest_wins_in_merge():
    tbx = sorted(p for p in EXPECTED if "/tbx/events" in p)  # .first, then .restart
    rows = []
    for p in tbx:
        rows += read_events((FIXTURES / p).read_bytes()).rows
    merged = {r["step"]: r for r in merge_steps(rows)}
    assert merged[35]["train/reward"] == pytest.approx(0.85, rel=1e-6)  # restart's value
    assert merged[29]["train/reward"] == pytest.approx(0.68, rel=1e-6)  # before the restart
    assert max(merged) == 44


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 6074), max_size=12))
def test_chunked_at_any_byte_boundary_equals_whole(cuts):
    data = (FIXTURES / FIRST).read_bytes()
    rows, errors, cursor = read_in_pieces(read_events, data, cuts)
    assert points(rows) == EXPECTED[FIRST]
    assert errors == [] and cursor == len(data)


def test_every_single_cut_gives_a_prefix_and_a_record_boundary():
    data = (FIXTURES / TENSOR).read_bytes()
    whole = points(read_events(data).rows)
    for cut in range(len(data)):
        got = read_events(data[:cut])
        assert points(got.rows) == whole[: len(points(got.rows))]
        assert got.errors == []
        assert got.cursor <= cut


def test_truncated_tail_yields_nothing_until_completed_and_final_reports_it():
    data = (FIXTURES / FIRST).read_bytes()
    head = read_events(data[:-3])
    assert points(head.rows) == EXPECTED[FIRST][:-1]
    tail = read_events(data[head.cursor : len(data) - 3], head.cursor)
    assert tail.rows == [] and tail.cursor == head.cursor
    done = read_events(data[head.cursor :], head.cursor)
    assert points(done.rows) == EXPECTED[FIRST][-1:]
    gone = read_events(data[head.cursor : len(data) - 3], head.cursor, final=True)
    assert [e.reason for e in gone.errors] == ["truncated"]
    assert gone.errors[0].offset == head.cursor


def _record_offsets(data):
    out, i = [], 0
    while i < len(data):
        out.append(i)
        i += 12 + struct.unpack_from("<Q", data, i)[0] + 4
    return out


def test_flipped_data_byte_is_reported_at_its_record_and_the_rest_is_read():
    data = bytearray((FIXTURES / FIRST).read_bytes())
    offs = _record_offsets(data)
    bad = offs[40]
    data[bad + 14] ^= 0x01
    got = read_events(bytes(data))
    assert [(e.offset, e.reason) for e in got.errors] == [(bad, "crc_mismatch")]
    # record 0 is the file_version event (no scalar): record k holds scalar k - 1.
    assert points(got.rows) == EXPECTED[FIRST][:39] + EXPECTED[FIRST][40:]


def test_flipped_length_byte_resyncs_at_the_next_good_header():
    data = bytearray((FIXTURES / FIRST).read_bytes())
    offs = _record_offsets(data)
    bad = offs[10]
    data[bad] ^= 0x40
    got = read_events(bytes(data))
    assert [(e.offset, e.reason) for e in got.errors] == [(bad, "crc_mismatch")]
    assert points(got.rows) == EXPECTED[FIRST][:9] + EXPECTED[FIRST][10:]
