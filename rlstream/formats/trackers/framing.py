"""Record framing of binary tracker logs: TFRecord (TensorBoard) and LevelDB log (W&B,
SwanLab), incrementally.

Both take `data`, the file's bytes from offset `start` (a cursor these functions
returned, or 0), and return `(payloads, cursor, errors)`: each complete, checked
record's payload with its file offset, the offset to resume from (a record boundary;
an incomplete tail is left for later) and `TrackerError`s for corrupt records. With
`final` (the writer is gone), an incomplete tail is reported as `truncated` and
consumed.

Resynchronisation after a corrupt record: TFRecord skips the record when its length
CRC held (only the data was bad), else scans forward byte by byte for the next
position whose length CRC checks. LevelDB skips the chunk when the chunk after it
checks, else drops to the next 32 KiB block (as LevelDB's own reader does), then
skips MIDDLE/LAST chunks whose record began in the damaged region.

`leveldb_file(data, start, final, header, name)` is `leveldb_records` for a whole log
file with its own header (W&B, SwanLab): the header is checked at offset 0 (a file
too short to tell yields nothing yet; another header raises `BadRecord`).
"""

from __future__ import annotations

import struct
import zlib

from rlstream.formats.records import BadRecord
from rlstream.formats.trackers.common import TrackerError
from rlstream.formats.trackers.wire import masked_crc32c

Payloads = list[tuple[int, bytes]]

BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_SEED = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}


def _tf_header_ok(data: bytes, i: int) -> bool:
    return masked_crc32c(data[i : i + 8]) == struct.unpack_from("<I", data, i + 8)[0]


def tfrecords(data: bytes, start: int, final: bool = False):
    out: Payloads = []
    errors: list[TrackerError] = []
    i, n = 0, len(data)
    while n - i >= 12:
        if not _tf_header_ok(data, i):
            j = i + 1
            while j + 12 <= n and not _tf_header_ok(data, j):
                j += 1
            if j + 12 > n and not final:
                break  # the next good header may still be written
            errors.append(
                TrackerError(start + i, "crc_mismatch", f"bad length CRC; {j - i} bytes skipped")
            )
            i = j if j + 12 <= n else n
            continue
        (length,) = struct.unpack_from("<Q", data, i)
        end = i + 12 + length + 4
        if end > n:
            break
        body = data[i + 12 : i + 12 + length]
        if masked_crc32c(body) != struct.unpack_from("<I", data, end - 4)[0]:
            errors.append(
                TrackerError(start + i, "crc_mismatch", f"bad data CRC on a {length}-byte record")
            )
        else:
            out.append((start + i, body))
        i = end
    if final and i < n:
        errors.append(
            TrackerError(start + i, "truncated", f"{n - i} bytes of an incomplete record")
        )
        i = n
    return out, start + i, errors


def _chunk(data: bytes, i: int, pos: int):
    """(type, payload, next index) of a checked chunk at data[i] (file offset pos);
    None when incomplete; raises ValueError when corrupt."""
    if len(data) - i < CHUNK_HEADER or data[i : i + CHUNK_HEADER] == bytes(CHUNK_HEADER):
        return None  # zeros: space preallocated or padded ahead of the writer
    crc, length, kind = struct.unpack_from("<IHB", data, i)
    room = BLOCK - pos % BLOCK - CHUNK_HEADER
    if kind not in _SEED or length > room:
        raise ValueError(f"bad chunk header (type {kind}, length {length})")
    if len(data) - i - CHUNK_HEADER < length:
        return None
    body = data[i + CHUNK_HEADER : i + CHUNK_HEADER + length]
    if zlib.crc32(body, _SEED[kind]) != crc:
        raise ValueError("chunk CRC mismatch")
    return kind, body, i + CHUNK_HEADER + length


def leveldb_records(data: bytes, start: int, final: bool = False):
    """LevelDB-log records; `start` must be past the file's own header."""
    out: Payloads = []
    errors: list[TrackerError] = []
    i, n = 0, len(data)
    cursor = 0  # index after the last complete record: where a later call resumes
    parts: list[bytes] = []
    first = None  # offset of the FIRST chunk of the record being assembled
    skipping = False  # after a resync: drop MIDDLE/LAST of a record begun before it
    while True:
        pos = start + i
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # block trailer (zero padding)
            if n - i < left:
                break
            i += left
            if first is None:
                cursor = i
            continue
        try:
            got = _chunk(data, i, pos)
        except ValueError as e:
            reason = str(e)
            nxt = _skip_target(data, i, pos)
            if nxt is None and not final:
                break
            where = first if first is not None else pos
            errors.append(
                TrackerError(
                    where,
                    "crc_mismatch" if "CRC" in reason else "bad_chunk",
                    f"{reason} at offset {pos}",
                )
            )
            parts, first = [], None
            i = nxt if nxt is not None else n
            cursor = i
            skipping = True
            continue
        if got is None:
            break
        kind, body, i = got
        if kind in (MIDDLE, LAST) and first is None:
            if not skipping:
                errors.append(
                    TrackerError(pos, "orphan_chunk", f"chunk type {kind} without its FIRST")
                )
            if kind == LAST:
                skipping = False
            cursor = i
            continue
        skipping = False
        if kind == FULL:
            if first is not None:
                errors.append(TrackerError(first, "bad_chunk", "record without its LAST chunk"))
                parts, first = [], None
            out.append((pos, body))
            cursor = i
        elif kind == FIRST:
            if first is not None:
                errors.append(TrackerError(first, "bad_chunk", "record without its LAST chunk"))
            first, parts = pos, [body]
        else:
            parts.append(body)
            if kind == LAST:
                out.append((first, b"".join(parts)))
                parts, first = [], None
                cursor = i
    if final and cursor < n:
        errors.append(
            TrackerError(start + cursor, "truncated", f"{n - cursor} bytes of an incomplete record")
        )
        cursor = n
    return out, start + cursor, errors


def _skip_target(data: bytes, i: int, pos: int) -> int | None:
    """Where to resume after a corrupt chunk at data[i]: just past it when the next
    chunk checks (or it ends its block), else the next block; None when that is not
    yet decidable from `data`."""
    (length,) = struct.unpack_from("<H", data, i + 4)
    if length <= BLOCK - pos % BLOCK - CHUNK_HEADER:
        j = i + CHUNK_HEADER + length
        jpos = pos + CHUNK_HEADER + length
        if BLOCK - jpos % BLOCK < CHUNK_HEADER:
            return j
        try:
            if _chunk(data, j, jpos) is not None:
                return j
        except ValueError:
            pass
        else:
            return None
    nxt = i + BLOCK - pos % BLOCK
    return nxt if nxt <= len(data) else None


def check_header(data: bytes, header: bytes, name: str) -> bool:
    """True when `data` starts with `header`; False when too short to tell."""
    if len(data) < len(header):
        if header.startswith(data):
            return False
        raise BadRecord(f"not_{name}: header {data!r}")
    if data[: len(header)] != header:
        raise BadRecord(f"not_{name}: header {data[: len(header)]!r}, expected {header!r}")
    return True


def leveldb_file(data: bytes, start: int, final: bool, header: bytes, name: str):
    """`leveldb_records` of a log file that starts with `header` (see the module)."""
    base = start
    if start == 0:
        if not check_header(data, header, name):
            return [], 0, []
        data, base = data[len(header) :], len(header)
    return leveldb_records(data, base, final)
