"""W&B and SwanLab readers against files written by wandb (offline) and swanlab,
checked by swanlab's independent readers with each library's own protobuf classes
(expected_wandb.json, expected_swanlab.json, gen_wandb.py, gen_swanlab.py)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.formats.records import BadRecord
from rlstream.formats.trackers.framing import BLOCK
from rlstream.formats.trackers.swanlab import config_from_yaml, read_swanlab
from rlstream.formats.trackers.wandb import read_wandb
from tests.formats.trackers.helpers import FIXTURES, enc, expected, points, read_in_pieces

WANDB = expected("wandb")
SWAN = expected("swanlab")
WANDB_DATA = (FIXTURES / WANDB["file"]).read_bytes()
SWAN_DATA = (FIXTURES / SWAN["file"]).read_bytes()


def wandb_rows(rows):
    """Reader rows in the expected file's shape (`_step`, `_timestamp`, values)."""
    out = []
    for r in rows:
        row = {k: enc(v) for k, v in r.items() if k not in ("step", "time")}
        row["_step"] = r["step"]
        if r["time"] is not None:
            row["_timestamp"] = r["time"]
        out.append(row)
    return out


def expected_wandb_rows():
    return [{k: v for k, v in h.items()} for h in WANDB["history"]]


def test_wandb_fixture_matches_the_independent_reader():
    got = read_wandb(WANDB_DATA)
    assert wandb_rows(got.rows) == expected_wandb_rows()
    assert got.errors == [] and got.cursor == len(WANDB_DATA)
    assert {k: got.info[k] for k in ("run_id", "name", "project")} == {
        "run_id": WANDB["run"]["run_id"],
        "name": WANDB["run"]["name"],
        "project": WANDB["run"]["project"],
    }
    assert got.info["config"] == WANDB["run"]["config"]
    assert len(WANDB_DATA) > 4 * BLOCK  # records cross block boundaries


def test_swanlab_fixture_matches_swanlabs_own_reader():
    got = read_swanlab(SWAN_DATA)
    assert points(got.rows) == SWAN["scalars"]
    assert got.errors == [] and got.cursor == len(SWAN_DATA)
    assert got.info == {
        "run_id": SWAN["start"]["id"],
        "name": SWAN["start"]["name"],
        "project": SWAN["start"]["project"],
    }
    (cfg,) = (FIXTURES / SWAN["file"]).parent.glob("files/config.yaml")
    assert config_from_yaml(cfg.read_bytes()) == {"algorithm": "grpo", "lr": 1e-6}


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, len(WANDB_DATA)), max_size=10))
def test_wandb_chunked_at_any_byte_boundary_equals_whole(cuts):
    rows, errors, cursor = read_in_pieces(read_wandb, WANDB_DATA, cuts)
    assert wandb_rows(rows) == expected_wandb_rows()
    assert errors == [] and cursor == len(WANDB_DATA)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, len(SWAN_DATA)), max_size=10))
def test_swanlab_chunked_at_any_byte_boundary_equals_whole(cuts):
    rows, errors, cursor = read_in_pieces(read_swanlab, SWAN_DATA, cuts)
    assert points(rows) == SWAN["scalars"]
    assert errors == [] and cursor == len(SWAN_DATA)


def test_cuts_around_every_block_boundary():
    whole = expected_wandb_rows()
    for b in range(BLOCK, len(WANDB_DATA), BLOCK):
        for cut in (b - 8, b - 7, b - 1, b, b + 1, b + 7, b + 8):
            got = read_wandb(WANDB_DATA[:cut])
            assert wandb_rows(got.rows) == whole[: len(got.rows)]
            assert got.errors == [] and got.cursor <= cut
            rest = read_wandb(WANDB_DATA[got.cursor :], got.cursor)
            assert wandb_rows(got.rows + rest.rows) == whole


def test_truncated_tail_waits_then_final_reports_it():
    head = read_swanlab(SWAN_DATA[:-5])
    assert points(head.rows) == SWAN["scalars"][: len(points(head.rows))]
    again = read_swanlab(SWAN_DATA[head.cursor : -5], head.cursor)
    assert again.rows == [] and again.cursor == head.cursor
    done = read_swanlab(SWAN_DATA[head.cursor :], head.cursor)
    assert points(head.rows + done.rows) == SWAN["scalars"]
    gone = read_swanlab(SWAN_DATA[head.cursor : -5], head.cursor, final=True)
    assert [(e.offset, e.reason) for e in gone.errors] == [(head.cursor, "truncated")]


def _chunks(data, start):
    """(offset, type, length) of every chunk after the 7-byte file header."""
    out, i = [], start
    while i + 7 <= len(data):
        if BLOCK - i % BLOCK < 7:
            i += BLOCK - i % BLOCK
            continue
        _, length, kind = struct.unpack_from("<IHB", data, i)
        out.append((i, kind, length))
        i += 7 + length
    return out


def test_flipped_byte_in_a_full_chunk_skips_only_that_record():
    chunks = [c for c in _chunks(SWAN_DATA, 7) if c[1] == 1]
    off, _, length = chunks[len(chunks) // 2]
    data = bytearray(SWAN_DATA)
    data[off + 7 + length // 2] ^= 0x10
    got = read_swanlab(bytes(data))
    assert [(e.offset, e.reason) for e in got.errors] == [(off, "crc_mismatch")]
    whole = read_swanlab(SWAN_DATA)
    assert len(got.rows) >= len(whole.rows) - 1
    assert points(got.rows) == [p for p in points(whole.rows) if p in points(got.rows)]
    assert points(got.rows)[-1] == SWAN["scalars"][-1]


def test_corrupt_length_drops_to_the_next_block_and_reads_on():
    chunks = _chunks(WANDB_DATA, 7)
    off = next(o for o, kind, _ in chunks if kind == 1 and o > BLOCK)
    data = bytearray(WANDB_DATA)
    data[off + 5] ^= 0xFF  # length high byte: past the block end
    got = read_wandb(bytes(data))
    assert got.errors[0].offset == off and got.errors[0].reason == "bad_chunk"
    assert all(e.offset < (off // BLOCK + 1) * BLOCK + BLOCK for e in got.errors)
    rows = wandb_rows(got.rows)
    whole = expected_wandb_rows()
    # At most the rest of the damaged 32 KiB block is lost (~60 history rows here).
    assert rows[-1] == whole[-1] and 0 < len(whole) - len(rows) < 70
    assert all(r in whole for r in rows)


def test_a_file_of_another_format_is_refused_with_its_header():
    with pytest.raises(BadRecord, match="not_wandb"):
        read_wandb(SWAN_DATA)
    with pytest.raises(BadRecord, match="not_swanlab"):
        read_swanlab(WANDB_DATA)
    assert read_wandb(WANDB_DATA[:4]).cursor == 0  # too short to tell: wait


def test_chunk_crc_is_zlib_crc32_seeded_with_the_type():
    off, kind, length = _chunks(WANDB_DATA, 7)[0]
    (crc,) = struct.unpack_from("<I", WANDB_DATA, off)
    assert crc == zlib.crc32(WANDB_DATA[off + 7 : off + 7 + length], zlib.crc32(bytes([kind])))


def test_zeros_after_the_last_record_wait_and_final_reports_them():
    data = SWAN_DATA + bytes(100)
    live = read_swanlab(data)
    assert points(live.rows) == SWAN["scalars"] and live.errors == []
    assert live.cursor == len(SWAN_DATA)
    done = read_swanlab(data[live.cursor :], live.cursor, final=True)
    assert [(e.offset, e.reason) for e in done.errors] == [(len(SWAN_DATA), "truncated")]
