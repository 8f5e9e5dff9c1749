"""Tailing: only complete lines, chunking never changes the records, rewrites detected."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.io.storage import FileStat, Storage
from rlstream.io.tail import FileCursor, ReadPlan, advance, plan_read, split_lines, verify_prefix

lines_st = st.lists(
    st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"x")),
    min_size=0,
    max_size=30,
)


def _read_all(cursor: FileCursor, content: bytes) -> tuple[list[tuple[int, bytes]], FileCursor]:
    stat = FileStat(size=len(content), etag=str(hash(content)))
    plan = plan_read(cursor, stat)
    if plan is None:
        return [], cursor
    data = content[plan.start : plan.end]
    if not verify_prefix(cursor, plan, data):
        plan = ReadPlan(0, stat.size, reset="rewritten")
        data = content
    return advance(cursor, plan, stat, data)


@settings(max_examples=300, deadline=None)
@given(lines=lines_st, cuts=st.lists(st.integers(0, 2000), max_size=12), tail=st.booleans())
def test_chunked_growth_equals_reading_whole(lines, cuts, tail):
    whole = b"".join(line + b"\n" for line in lines) + (b'{"half' if tail else b"")
    expected, _ = split_lines(whole, 0)
    got: list[tuple[int, bytes]] = []
    cursor = FileCursor()
    for cut in [*sorted({min(c, len(whole)) for c in cuts}), len(whole)]:
        recs, cursor = _read_all(cursor, whole[:cut])
        got.extend(recs)
    assert got == expected
    assert cursor.position == (whole.rfind(b"\n") + 1)


def test_half_line_waits_for_its_newline():
    c = FileCursor()
    recs, c = _read_all(c, b'{"a": 1}\n{"b"')
    assert recs == [(0, b'{"a": 1}')] and c.position == 9
    recs, c = _read_all(c, b'{"a": 1}\n{"b": 2}\n')
    assert recs == [(9, b'{"b": 2}')]


def test_crlf_and_blank_lines():
    assert split_lines(b"a\r\n\n  \nb\n", 100) == ([(100, b"a"), (107, b"b")], 9)


def test_rewrite_with_other_bytes_is_detected_and_reread():
    c = FileCursor()
    _, c = _read_all(c, b"one\ntwo\n")
    recs, c2 = _read_all(c, b"ONE\ntwo\nthree\n")
    assert recs == [(0, b"ONE"), (4, b"two"), (8, b"three")]
    assert c2.generation == 1


def test_local_truncation_and_replacement(tmp_path):
    st_ = Storage()
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"a\nb\nc\n")
    stat = st_.stat(str(p))
    c = advance(FileCursor(), plan_read(FileCursor(), stat), stat, p.read_bytes())[1]
    p.write_bytes(b"a\n")  # truncated below the cursor
    assert plan_read(c, st_.stat(str(p))).reset == "truncated"
    q = tmp_path / "g.jsonl"
    q.write_bytes(b"x\ny\nz\nw\n")
    os.replace(q, p)  # replaced: new inode
    assert plan_read(c, st_.stat(str(p))).reset == "replaced"


def test_unchanged_file_plans_nothing(tmp_path):
    st_ = Storage()
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"a\n")
    stat = st_.stat(str(p))
    c = advance(FileCursor(), plan_read(FileCursor(), stat), stat, p.read_bytes())[1]
    assert plan_read(c, st_.stat(str(p))) is None
    assert plan_read(c, None) is None
