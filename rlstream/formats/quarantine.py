"""Quarantine rows: every rejected record with its file, offset and reason.

Bad input is data. A parser never raises on a bad record: it returns a
`QuarantineRow` and carries on, and the row lands in the `quarantine/` table.
"""

from __future__ import annotations

from dataclasses import dataclass

DETAIL_CHARS = 240


@dataclass(frozen=True, slots=True)
class QuarantineRow:
    """One rejected record. `offset` is the byte offset of the line, or None for a
    whole file (a transcript); `detail` is a short excerpt or explanation."""

    run_id: str
    file: str
    offset: int | None
    reason: str
    detail: str = ""
    step: int | None = None


def excerpt(data: bytes | str) -> str:
    """A bounded, printable excerpt of a bad record for the quarantine table."""
    if isinstance(data, bytes):
        data = data[: DETAIL_CHARS * 2].decode("utf-8", errors="replace")
    return data[:DETAIL_CHARS]
