"""Shared helpers of the tracker reader tests: fixtures, expected files, piecewise reads."""

from __future__ import annotations

import json
import math
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def expected(name: str):
    return json.loads((FIXTURES / f"expected_{name}.json").read_text())


def enc(x: float):
    """NaN and infinities as the expected files write them."""
    return x if math.isfinite(x) else str(x)


def points(rows) -> list[list]:
    """[step, time, key, value] per scalar of reader rows, in order."""
    return [
        [r["step"], r["time"], k, enc(v)]
        for r in rows
        for k, v in r.items()
        if k not in ("step", "time")
    ]


def read_in_pieces(reader, data: bytes, cuts) -> tuple[list, list, int]:
    """Feed `data` to `reader` as a growing file seen at each cut (sorted), then whole;
    each call gets the bytes from the last cursor on. Returns rows, errors, cursor."""
    rows, errors, cursor = [], [], 0
    for cut in [*sorted(cuts), len(data)]:
        if cut < cursor:
            continue
        got = reader(data[cursor:cut], cursor)
        assert got.cursor >= cursor
        rows += got.rows
        errors += got.errors
        cursor = got.cursor
    return rows, errors, cursor
